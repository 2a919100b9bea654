"""A partition leader adding partitions to transactions for their producers (Kafka's
AddPartitionsToTxnManager), as transactions v2 has it (KIP-890 part 2).

A producer of transactions v2 sends no AddPartitionsToTxn: its Produce v12+ (and its
group's TxnOffsetCommit v5+) reaches the partition's leader (or the group's
coordinator), which adds the partition to the transaction through the transaction
coordinator before it appends: so a batch of a zombie, or of a transaction that ended,
can never open a transaction at a partition. The coordinator of the transactional id is
the leader of its `__transaction_state` partition in the metadata view: this broker
asks its own coordinator directly, another broker with AddPartitionsToTxn v5
(`verify_only` false, one transaction per request; its handler takes that as a
transactions v2 add) over one connection per broker, many requests in flight.

The answer per partition is the coordinator's error code (NONE: added), or
COORDINATOR_NOT_AVAILABLE when no coordinator is known or it could not be reached; the
callers convert them as Kafka's leaders do (a coordinator moving, loading or busy
completing the previous transaction becomes a retriable error).
"""

from __future__ import annotations

import logging

from sluice_client.connection import BrokerConnection
from sluice_client.errors import ConnectionFailed, ProtocolViolation, RequestTimedOut
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.messages import ADD_PARTITIONS_TO_TXN

from broker.errors import BrokerError

log = logging.getLogger("sluice.transactions")

ADD_PARTITIONS_TO_TXN_VERSION = 5  # the brokers' batched versions start at 4
TRANSACTION_KEY_TYPE = 1  # FindCoordinator's key type of a transactional id
REQUEST_TIMEOUT_S = 10.0


class AddPartitionsToTxnManager:
    def __init__(self, broker):
        self.broker = broker
        self._connections: dict[int, BrokerConnection] = {}

    async def add(self, transactional_id: str, producer_id: int, producer_epoch: int,
                  partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Add `partitions` to the producer's transaction: the error code of each."""
        endpoint = self.broker.metadata.coordinator(TRANSACTION_KEY_TYPE, transactional_id)
        if endpoint is None:
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if endpoint.node_id == self.broker.node_id:
            try:
                await self.broker.transactions.add_partitions(transactional_id, producer_id, producer_epoch,
                                                              partitions, transactions_v2=True)
            except BrokerError as exc:
                return dict.fromkeys(partitions, exc.code)
            return dict.fromkeys(partitions, ErrorCode.NONE)
        return await self._add_remote(endpoint, transactional_id, producer_id, producer_epoch, partitions)

    def _connection(self, endpoint) -> BrokerConnection:
        connection = self._connections.get(endpoint.node_id)
        if connection is None or (connection.host, connection.port) != (endpoint.host, endpoint.port):
            connection = self._connections[endpoint.node_id] = BrokerConnection(
                endpoint.host, endpoint.port, client_id=f"partition-leader-{self.broker.node_id}",
                connect_timeout=REQUEST_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S + 5,
                security=self.broker.inter_broker_security)
        return connection

    async def _add_remote(self, endpoint, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        Req = ADD_PARTITIONS_TO_TXN.request
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        body = Req(transactions=[Req.AddPartitionsToTxnTransaction(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch,
            verify_only=False, topics=[Req.AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                                       for topic, indexes in by_topic.items()])])
        try:
            response = await self._connection(endpoint).request(
                ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, body, negotiated=False)
        except (ConnectionFailed, RequestTimedOut, ProtocolViolation, KafkaError, OSError) as exc:
            log.info("AddPartitionsToTxn to broker %d failed: %s", endpoint.node_id, exc)
            return dict.fromkeys(partitions, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if response.error_code != ErrorCode.NONE:
            return dict.fromkeys(partitions, response.error_code)
        codes = {(topic.name, result.partition_index): result.partition_error_code
                 for txn in response.results_by_transaction for topic in txn.topic_results
                 for result in topic.results_by_partition}
        return {tp: codes.get(tp, ErrorCode.COORDINATOR_NOT_AVAILABLE) for tp in partitions}

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
