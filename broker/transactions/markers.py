"""Writing a completing transaction's COMMIT/ABORT markers to every partition it touched
(Kafka's TransactionMarkerChannelManager).

A transaction's markers go to all of its partitions' leaders at once. A partition this
broker leads gets its marker appended here; any other gets it by WriteTxnMarkers v1 to
its current leader, as this broker's metadata view names it, over one connection per
broker. Each broker has one request in flight at a time, holding the markers of every
transaction that queued up for that broker meanwhile (as Kafka's channel manager
drains its queue per broker into one request). A
marker is written when it is committed in Kafka's sense (the leader answers
WriteTxnMarkers once the high watermark passed it; a local one is awaited the same
way), so that a leader failover cannot lose a marker the coordinator has counted.
Each marker carries the coordinator epoch of the transaction's `__transaction_state`
partition: a leader refuses a marker older than the last one it has for the producer
(TRANSACTION_COORDINATOR_FENCED), which fences a deposed coordinator.

Per partition, the answers:
- NONE: done. A marker on a local `__consumer_offsets` partition also applies (COMMIT)
  or drops (ABORT) the producer's pending offsets there (`groups.offsets.end_transaction`).
- Retried after a backoff (doubling, 50 ms to 1 s), following the leader through the
  metadata view: no leader known, NOT_LEADER_OR_FOLLOWER, connection failures and
  timeouts, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR,
  and UNKNOWN_TOPIC_OR_PARTITION while the topic still exists (a new leader not told
  yet). Retries go on until every marker is written or `coordinating()` turns false
  (this broker no longer coordinates the transaction at that epoch: NOT_COORDINATOR).
- Done without a marker (logged): a topic gone from the metadata view (deleted).
- TRANSACTION_COORDINATOR_FENCED: a newer coordinator has taken over; this one stops
  (NOT_COORDINATOR), as Kafka's does.
- Anything else (INVALID_PRODUCER_EPOCH: a newer epoch of the producer has written
  there already) is logged and counted as done, as this coordinator always did.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable

from sluice_client.connection import BrokerConnection
from sluice_client.errors import ConnectionFailed, ProtocolViolation, RequestTimedOut
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.messages import WRITE_TXN_MARKERS

from broker.errors import BrokerError
from broker.failpoints import fail_point
from broker.groups import offsets_log

log = logging.getLogger("sluice.transactions")

WRITE_TXN_MARKERS_VERSION = 1
FIRST_RETRY_BACKOFF_S = 0.05
LAST_RETRY_BACKOFF_S = 1.0
# How long a marker may wait for its followers, and a leader for its answer.
MARKER_TIMEOUT_S = 10.0

_RETRIABLE = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
                        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT,
                        ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.LEADER_NOT_AVAILABLE,
                        ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS})


def append_local_markers(broker, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool, partitions, timeout_s: float = MARKER_TIMEOUT_S,
                         between: Callable[[], None] | None = None, transaction_version: int = 0,
                         ) -> Awaitable[dict[tuple[str, int], ErrorCode]]:
    """Append a marker to each of `partitions` (led here; `between()` runs between two
    appends) now, and return the wait until each is committed: the error code of each.
    What the WriteTxnMarkers handler and the local coordinator both do; appending in the
    call lets either append all its markers before it waits for any."""
    codes: dict[tuple[str, int], ErrorCode] = {}
    appended = []
    remaining = sorted(partitions)
    for index, (topic, number) in enumerate(remaining):
        try:
            partition = broker.topics.partition(topic, number)
            partition.check_leader()
            if len(partition.isr) < partition.config.min_insync_replicas:  # acks=all, as Kafka's
                raise BrokerError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                  f"{len(partition.isr)} in-sync replica(s) of {topic}-{number} are "
                                  f"fewer than min.insync.replicas")
            partition.append_marker_as_leader(producer_id, producer_epoch, coordinator_epoch, commit,
                                              transaction_version)
        except BrokerError as exc:
            codes[(topic, number)] = exc.code
            continue
        if topic == offsets_log.TOPIC:
            broker.groups.offsets.end_transaction(producer_id, number, commit)
        appended.append(((topic, number), partition, partition.log_end_offset))
        if between is not None and index < len(remaining) - 1:
            between()

    async def committed() -> dict[tuple[str, int], ErrorCode]:
        results = await asyncio.gather(*(partition.until_replicated(end, timeout_s)
                                         for _, partition, end in appended))
        codes.update((tp, code) for (tp, _, _), code in zip(appended, results))
        return codes

    return committed()


@dataclass
class _QueuedMarker:
    """One transaction's marker for the partitions one broker leads, and its answer: the
    error code of each partition."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: list[tuple[str, int]]
    answer: asyncio.Future


class MarkerWriter:
    """Writes markers locally and through WriteTxnMarkers to the other brokers."""

    def __init__(self, broker):
        self.broker = broker
        self.clock = broker.clock
        self._connections: dict[int, BrokerConnection] = {}
        self._queued: dict[int, list[_QueuedMarker]] = {}  # by broker id, not sent yet
        self._senders: dict[int, asyncio.Task] = {}  # by broker id, while markers are queued

    def _leader_of(self, topic: str, partition: int) -> int | None:
        """The leader's broker id per the metadata view; None while none is known; -1 when
        the topic is gone. The single node's view names itself the leader of every partition."""
        metadata = self.broker.metadata
        if metadata.topic(topic) is None:
            return -1
        state = metadata.partition_state(topic, partition)
        if state is None or state.leader_id < 0:
            return None
        return state.leader_id

    def _connection(self, broker_id: int) -> BrokerConnection | None:
        endpoint = self.broker.metadata.broker(broker_id)
        if endpoint is None:
            return None
        connection = self._connections.get(broker_id)
        if connection is not None and (connection.host, connection.port) == (endpoint.host, endpoint.port):
            return connection
        connection = BrokerConnection(endpoint.host, endpoint.port,
                                      client_id=f"txn-coordinator-{self.broker.node_id}",
                                      connect_timeout=MARKER_TIMEOUT_S,
                                      request_timeout=MARKER_TIMEOUT_S + 5,
                                      security=self.broker.inter_broker_security)
        self._connections[broker_id] = connection
        return connection

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                    commit: bool, partitions, coordinating: Callable[[], bool]) -> None:
        """Until every partition has its marker; BrokerError NOT_COORDINATOR once
        `coordinating()` is false or a newer coordinator fenced this one."""
        remaining = set(partitions)
        backoff = FIRST_RETRY_BACKOFF_S
        result = "COMMIT" if commit else "ABORT"
        while remaining:
            if not coordinating():
                raise BrokerError(ErrorCode.NOT_COORDINATOR,
                                  f"no longer the coordinator of producer {producer_id}: "
                                  f"{len(remaining)} {result} marker(s) left to the next one")
            by_leader: dict[int, set] = {}
            for tp in sorted(remaining):
                leader = self._leader_of(*tp)
                if leader == -1:
                    log.warning("%s-%d is gone (topic deleted): no %s marker for producer %d",
                                *tp, result, producer_id)
                    remaining.discard(tp)
                elif leader is not None:
                    by_leader.setdefault(leader, set()).add(tp)
            # Every local marker is appended and every other queued in this step.
            sends = [self._write_local(producer_id, producer_epoch, coordinator_epoch, commit, tps)
                     if leader == self.broker.node_id else
                     self._write_remote(leader, producer_id, producer_epoch, coordinator_epoch, commit, tps)
                     for leader, tps in by_leader.items()]
            for codes in await asyncio.gather(*sends):
                for tp, code in codes.items():
                    if code == ErrorCode.NONE:
                        remaining.discard(tp)
                    elif code == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                        raise BrokerError(ErrorCode.NOT_COORDINATOR,
                                          f"{tp[0]}-{tp[1]} has a marker of a newer coordinator for "
                                          f"producer {producer_id} than epoch {coordinator_epoch}")
                    elif code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and self._leader_of(*tp) == -1:
                        log.warning("%s-%d is gone (topic deleted): no %s marker for producer %d",
                                    *tp, result, producer_id)
                        remaining.discard(tp)
                    elif code not in _RETRIABLE:
                        log.warning("%s marker for producer %d refused by %s-%d: %s", result,
                                    producer_id, *tp, ErrorCode(code).name)
                        remaining.discard(tp)
            if remaining:
                log.info("%d %s marker(s) for producer %d not written yet (%s); retrying in %.2f s",
                         len(remaining), result, producer_id,
                         ", ".join(f"{t}-{p}" for t, p in sorted(remaining)), backoff)
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, LAST_RETRY_BACKOFF_S)

    def _write_local(self, producer_id, producer_epoch, coordinator_epoch, commit, partitions):
        return append_local_markers(
            self.broker, producer_id, producer_epoch, coordinator_epoch, commit, partitions,
            between=(lambda: fail_point("txn-mid-commit-markers")) if commit else None)

    def _write_remote(self, broker_id, producer_id, producer_epoch, coordinator_epoch, commit,
                      partitions) -> asyncio.Future:
        """Queue the marker for `broker_id`; the answer to wait for. The broker's channel
        sends it in one WriteTxnMarkers request with every marker queued for that broker
        meanwhile (other transactions completing at the same time)."""
        loop = asyncio.get_running_loop()
        marker = _QueuedMarker(producer_id, producer_epoch, coordinator_epoch, commit, sorted(partitions),
                               loop.create_future())
        self._queued.setdefault(broker_id, []).append(marker)
        if broker_id not in self._senders:
            self._senders[broker_id] = loop.create_task(self._send_queued(broker_id))
        return marker.answer

    async def _send_queued(self, broker_id: int) -> None:
        """Send the markers queued for `broker_id` until none is left, one request at a
        time holding all that queued up while the previous one was answered (Kafka's
        marker channel: one request in flight per broker, drained whole)."""
        queued = self._queued[broker_id]
        markers: list[_QueuedMarker] = []
        try:
            while queued:
                markers = [marker for marker in queued if not marker.answer.done()]
                queued.clear()
                if markers:
                    answers = await self._send(broker_id, markers)
                    for marker, codes in zip(markers, answers):
                        if not marker.answer.done():
                            marker.answer.set_result(codes)
        except BaseException as exc:
            for marker in (*markers, *queued):
                if marker.answer.done():
                    continue
                if isinstance(exc, asyncio.CancelledError):
                    marker.answer.cancel()
                else:
                    marker.answer.set_exception(exc)
            raise
        finally:
            del self._senders[broker_id]
            del self._queued[broker_id]

    async def _send(self, broker_id: int, markers: list[_QueuedMarker]) -> list[dict[tuple[str, int], int]]:
        """One WriteTxnMarkers request with `markers`: the error code of each one's partitions
        (retriable ones when the request fails)."""
        retry = [{tp: ErrorCode.NOT_LEADER_OR_FOLLOWER for tp in marker.partitions} for marker in markers]
        connection = self._connection(broker_id)
        if connection is None:
            return retry
        Req = WRITE_TXN_MARKERS.request
        body = Req(markers=[])
        for marker in markers:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in marker.partitions:
                by_topic.setdefault(topic, []).append(partition)
            body.markers.append(Req.WritableTxnMarker(
                producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
                topics=[Req.WritableTxnMarkerTopic(name=topic, partition_indexes=indexes)
                        for topic, indexes in by_topic.items()]))
        try:
            response = await connection.request(WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body,
                                                negotiated=False)
        except (ConnectionFailed, RequestTimedOut, ProtocolViolation, KafkaError, OSError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", broker_id, exc)
            return retry
        if len(response.markers) != len(markers):
            log.warning("WriteTxnMarkers to broker %d answered %d of %d markers", broker_id,
                        len(response.markers), len(markers))
            return retry
        answers = []
        for marker, result, retried in zip(markers, response.markers, retry):
            codes = {(topic.name, partition.partition_index): partition.error_code
                     for topic in result.topics for partition in topic.partitions}
            answers.append({tp: codes.get(tp, code) for tp, code in retried.items()})
        return answers

    async def close(self) -> None:
        senders = list(self._senders.values())
        for sender in senders:
            sender.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
