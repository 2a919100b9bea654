"""An asyncio Kafka client: metadata, routing, retries and the operations built on them.

The client keeps state and moves bytes; every encoding is `wire`'s. It holds one
connection per broker address (so one per node id), a metadata cache filled on demand,
the group coordinators it has found and, when idempotent, its producer id and
per-partition sequence numbers.

Retries are bounded by count (`retries`) and by time (`retry_timeout`), with
exponential backoff between attempts; a coordinator that is moving or loading
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), or a
transaction coordinator writing the markers of the id's last transaction after
answering its EndTxn (CONCURRENT_TRANSACTIONS), is waited for until `retry_timeout`
whatever the count, as Kafka's clients wait for theirs (the markers from 20 ms on, with
the coordinator kept). Before retrying, what the error makes doubtful is forgotten: the
topic's metadata for leader-routed requests, the coordinator for group requests, the
controller for topic administration.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from typing import Awaitable, Callable, Iterable, Mapping, Sequence, TypeVar

from sluice_client.connection import DEFAULT_MAX_RESPONSE_BYTES, BrokerConnection
from sluice_client.errors import (BrokerUnreachable, ClientError, ConnectionFailed, ProtocolViolation,
                                  RequestTimedOut, UnsupportedVersion)
from sluice_client.model import (ANY_ACL, BROKER_RESOURCE, DEFAULT_CONFIG, MAX_TIMESTAMP, PREFERRED_ELECTION,
                                 READ_COMMITTED, READ_UNCOMMITTED, UNKNOWN_CONFIG, AbortedTransaction,
                                 AclBinding, AclBindingFilter, AclDeletion, BrokerInfo, DeletedAcls,
                                 ScramCredentialInfo, ScramDeletion, ScramMechanism, ScramUpsertion,
                                 UserScramCredentials,
                                 ClusterDescription, ClusterMetadata, CommittedOffset, ConfigEntry,
                                 ConfigSynonym, Coordinator, CreatedTopic, FetchedRecords, FetchResult,
                                 GroupDescription, GroupMember, ListedGroup, ListedTransaction, NewTopic,
                                 OffsetAndTimestamp, OngoingReassignment, PartitionInfo, ProduceResult,
                                 ProducerRecord, QuotaEntity, TopicInfo, TransactionDescription)
from wire.acl_types import Operation, PatternType, Permission, ResourceType
from sluice_client.security import ClientSecurity
from sluice_client.versions import CLIENT_VERSIONS
from wire.compression import CODEC_NAMES
from wire.error_codes import ErrorCode
from wire.errors import KafkaError, check
from wire.messages import (ADD_PARTITIONS_TO_TXN, ALTER_CLIENT_QUOTAS, ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS,
                           ALTER_USER_SCRAM_CREDENTIALS, APIS, LIST_PARTITION_REASSIGNMENTS,
                           CREATE_ACLS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_ACLS,
                           DELETE_GROUPS, DELETE_TOPICS, DESCRIBE_ACLS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS,
                           DESCRIBE_CLIENT_QUOTAS, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS,
                           DESCRIBE_USER_SCRAM_CREDENTIALS, DESCRIBE_TRANSACTIONS, ELECT_LEADERS, FETCH, FIND_COORDINATOR,
                           INCREMENTAL_ALTER_CONFIGS,
                           INIT_PRODUCER_ID, LIST_GROUPS, LIST_OFFSETS, LIST_TRANSACTIONS, METADATA,
                           END_TXN, OFFSET_COMMIT, OFFSET_FETCH, PRODUCE)
from wire.primitives import ZERO_UUID
from wire.records import CONTROL_ABORT, build_batch, decode_batch, decode_control_record, iter_batches
from wire.schema import Struct

__all__ = ["AsyncClient", "DEFAULT_MAX_DECOMPRESSED_BYTES"]

DEFAULT_MAX_DECOMPRESSED_BYTES = 100 * 1024 * 1024

_T = TypeVar("_T")
_CODECS = {name: codec for codec, name in CODEC_NAMES.items()}
_SEQUENCE_MASK = 0x7FFFFFFF  # sequence numbers wrap from 2**31 - 1 to 0
_GROUP_KEY = 0  # FindCoordinator key types: consumer groups, transactional ids
_TRANSACTION_KEY = 1
# A coordinator moving to another broker or loading its state, or a transaction
# coordinator still writing the markers of the id's last transaction: waited for, not counted.
_COORDINATOR_BUSY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})
# The first wait for a transaction's markers (Kafka's producer retries AddPartitionsToTxn
# after 20 ms for them, not its retry.backoff.ms): they take a replicated write or two.
_MARKERS_BACKOFF = 0.02
_RESOURCE_NAMES = {2: "topic", 4: "broker"}
_FIRST_BATCHED_FIND_COORDINATOR = 4
_FIRST_GROUPS_OFFSET_FETCH = 8
_FIRST_TOPIC_ID_FETCH = 13
_FIRST_TOPICS_DELETE = 6
_FIRST_STATES_LIST_GROUPS = 4
_FIRST_SOURCES_DESCRIBE_CONFIGS = 1
_FIRST_TYPED_ELECT_LEADERS = 1  # v0 elects preferred leaders only
# The oldest ListOffsets version that understands each special timestamp.
_LIST_OFFSETS_MIN_VERSION = {MAX_TIMESTAMP: 7}
_LIST_OFFSETS_MIN_VERSION_READ_COMMITTED = 2


def _resource(kind: int, name: str) -> str:
    return f"{_RESOURCE_NAMES.get(kind, f'resource type {kind}')} {name!r}"


def _answer_for(answers, kind: int, name: str, context: str):
    """The entry of one config resource in a response; a response without it breaks the protocol."""
    answer = next((r for r in answers if r.resource_type == kind and r.resource_name == name), None)
    if answer is None:
        raise ProtocolViolation(f"{context}: the response has no entry for it")
    return answer


class _ProducerSession:
    """An idempotent producer id with the next sequence number of each partition."""

    __slots__ = ("producer_id", "producer_epoch", "sequences")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}


class AsyncClient:
    """A Kafka client for asyncio; usable as `async with AsyncClient("host:9092") as c`.

    Time settings are seconds. Protocol fields keep Kafka's units and names
    (`max_wait_ms`, `timeout_ms`). `security` (TLS and SASL, see sluice_client.security)
    applies to every broker connection, bootstrap and discovered; None is PLAINTEXT.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], *,
                 client_id: str = "sluice-client",
                 connect_timeout: float = 10.0,
                 request_timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 retries: int = 5,
                 retry_backoff: float = 0.1,
                 retry_backoff_max: float = 1.0,
                 retry_timeout: float = 30.0,
                 enable_idempotence: bool = False,
                 security: ClientSecurity | None = None):
        self.bootstrap = _parse_addresses(bootstrap_servers)
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self.retries = retries
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self.retry_timeout = retry_timeout
        self.enable_idempotence = enable_idempotence
        self.security = security
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._cluster = ClusterMetadata(None, -1, {}, {})
        self._coordinators: dict[tuple[int, str], Coordinator] = {}
        self._session: _ProducerSession | None = None
        self._session_lock = asyncio.Lock()
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._closed = False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    @property
    def cached_metadata(self) -> ClusterMetadata:
        """What the client currently knows of brokers and topics."""
        return self._cluster

    async def close(self) -> None:
        """Close every connection; requests in flight fail with ConnectionFailed."""
        self._closed = True
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(connection.close() for connection in connections))

    async def negotiated_versions(self, node_id: int | None = None) -> dict[int, int]:
        """API key -> the version this client uses with the broker `node_id` (or any
        broker), for every API the client implements that the broker also speaks."""
        if node_id is None:
            connection = await self._any_connection()
        else:
            connection = await self._node_connection(node_id)
        versions = {}
        for key in CLIENT_VERSIONS:
            try:
                versions[key] = connection.version(APIS[key])
            except UnsupportedVersion:
                pass
        return versions

    # -- metadata --------------------------------------------------------------------
    async def metadata(self, topics: Iterable[str] | None = None, *,
                       allow_auto_topic_creation: bool = False,
                       require_topics: bool = False) -> ClusterMetadata:
        """Brokers and the given topics (all topics when None); refreshes the cache.

        Topics the broker reports with an error are returned with their `error_code`;
        with `require_topics`, the call fails with that error instead (`KafkaError`,
        naming the topics that have it), after asking again as the client retries when
        it is retriable: a topic unknown or without a leader may be one just created,
        whose metadata is still reaching every broker.
        """
        names = None if topics is None else list(topics)

        async def attempt() -> ClusterMetadata:
            fresh = await self._refresh_metadata(names, allow_auto_topic_creation)
            if require_topics:
                _check_topics(fresh, names or [])
            return fresh

        return await self._retrying(attempt)

    async def _refresh_metadata(self, topics: list[str] | None,
                                allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """One Metadata request to any broker; the answer is merged into the cache."""
        connection = await self._any_connection()
        version = connection.version(METADATA)
        request_topics = None if topics is None else [
            METADATA.request.MetadataRequestTopic(name=name) for name in topics]
        response = await connection.request(METADATA, version, METADATA.request(
            topics=request_topics, allow_auto_topic_creation=allow_auto_topic_creation))
        fresh = _cluster_metadata(response)
        known = {} if topics is None else dict(self._cluster.topics)
        for name, info in fresh.topics.items():
            if info.error_code:
                known.pop(name, None)
            else:
                known[name] = info
        self._cluster = ClusterMetadata(fresh.cluster_id, fresh.controller_id, fresh.brokers, known)
        return fresh

    async def _topic(self, topic: str) -> TopicInfo:
        info = self._cluster.topics.get(topic)
        if info is None:
            await self._refresh_metadata([topic])
            info = self._cluster.topics.get(topic)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r}")
        return info

    async def _partition(self, topic: str, partition: int) -> tuple[TopicInfo, PartitionInfo]:
        info = await self._topic(topic)
        found = info.partitions.get(partition)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        if found.leader_id < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
        return info, found

    def _forget_topic(self, topic: str) -> None:
        """Drop a topic from the cache, so that the next use asks the brokers again."""
        topics = dict(self._cluster.topics)
        if topics.pop(topic, None) is not None:
            self._cluster = ClusterMetadata(self._cluster.cluster_id, self._cluster.controller_id,
                                            self._cluster.brokers, topics)

    async def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and brokers, from DescribeCluster (any broker)."""
        async def attempt() -> ClusterDescription:
            connection = await self._any_connection()
            response = await connection.request(
                DESCRIBE_CLUSTER, connection.version(DESCRIBE_CLUSTER),
                DESCRIBE_CLUSTER.request(include_cluster_authorized_operations=False))
            check(response.error_code, "describe cluster", response.error_message)
            return ClusterDescription(response.cluster_id, response.controller_id, {
                b.broker_id: BrokerInfo(b.broker_id, b.host, b.port, b.rack)
                for b in response.brokers})

        return await self._retrying(attempt)

    async def describe_log_dirs(self, node_id: int,
                                partitions: Iterable[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """The size in bytes of each replica broker `node_id` holds, of `partitions` or
        (None) of every partition, summed over its log directories (DescribeLogDirs, as
        kafka-log-dirs.sh asks; a future replica of an intra-broker move and a directory
        answering an error are left out, as are partitions it holds no replica of). One
        attempt: a broker that cannot be reached raises ClientError."""
        topics = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(set(partitions)):
                by_topic.setdefault(topic, []).append(partition)
            topics = [DESCRIBE_LOG_DIRS.request.DescribableLogDirTopic(topic=topic, partitions=indexes)
                      for topic, indexes in by_topic.items()]
        connection = await self._node_connection(node_id)
        response = await connection.request(DESCRIBE_LOG_DIRS, connection.version(DESCRIBE_LOG_DIRS),
                                            DESCRIBE_LOG_DIRS.request(topics=topics))
        check(response.error_code, f"describe the log dirs of broker {node_id}")
        sizes: dict[tuple[str, int], int] = collections.Counter()
        for directory in response.results:
            if directory.error_code:
                continue
            for topic in directory.topics:
                for partition in topic.partitions:
                    if not partition.is_future_key:
                        sizes[(topic.name, partition.partition_index)] += partition.partition_size
        return dict(sizes)

    # -- connections -------------------------------------------------------------------
    async def _connection(self, host: str, port: int) -> BrokerConnection:
        """The open connection to `host:port`, opened (and versions negotiated) if needed."""
        if self._closed:
            raise ClientError("the client is closed")
        connection = self._connections.get((host, port))
        if connection is None:
            connection = self._connections[(host, port)] = BrokerConnection(
                host, port, client_id=self.client_id, connect_timeout=self.connect_timeout,
                request_timeout=self.request_timeout, max_response_bytes=self.max_response_bytes,
                security=self.security)
        await connection.open()
        return connection

    async def _node_connection(self, node_id: int) -> BrokerConnection:
        broker = self._cluster.brokers.get(node_id)
        if broker is None:
            await self._refresh_metadata([])
            broker = self._cluster.brokers.get(node_id)
            if broker is None:
                raise ConnectionFailed(f"broker {node_id} is not in the cluster metadata")
        return await self._named_connection(broker.host, broker.port)

    async def _named_connection(self, host: str, port: int) -> BrokerConnection:
        """A connection to a broker the cluster named for a role; BrokerUnreachable when
        it cannot be had."""
        try:
            return await self._connection(host, port)
        except BrokerUnreachable:
            raise
        except ConnectionFailed as exc:
            raise BrokerUnreachable(str(exc)) from exc

    async def _any_connection(self) -> BrokerConnection:
        """A connection to some broker: an open one if any, else the first known broker
        or bootstrap address that accepts a connection."""
        for connection in self._connections.values():
            if connection.connected:
                return connection
        addresses = [(b.host, b.port) for b in self._cluster.brokers.values()]
        addresses += [a for a in self.bootstrap if a not in addresses]
        failures = []
        for host, port in addresses:
            try:
                return await self._connection(host, port)
            except (ConnectionFailed, RequestTimedOut) as exc:
                failures.append(str(exc))
        raise ConnectionFailed("no broker reachable: " + "; ".join(failures))

    async def _leader_connection(self, topic: str, partition: int,
                                 ) -> tuple[BrokerConnection, TopicInfo, PartitionInfo]:
        topic_info, info = await self._partition(topic, partition)
        return await self._node_connection(info.leader_id), topic_info, info

    # -- retries -----------------------------------------------------------------------
    async def _retrying(self, attempt: Callable[[], Awaitable[_T]],
                        forget: Callable[[], None] | None = None) -> _T:
        """Run `attempt` until it succeeds, fails for good, or retries run out (a moving
        coordinator's errors and an unreachable leader or coordinator count against the
        time only). After a retriable error, `forget()` drops what it makes doubtful, also
        when no retry is left: the next call must not start from a dead coordinator or
        leader again."""
        if self._closed:
            raise ClientError("the client is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_timeout
        retry = counted = 0
        while True:
            try:
                return await attempt()
            except (KafkaError, ClientError) as exc:
                markers_pending = isinstance(exc, KafkaError) and exc.code == ErrorCode.CONCURRENT_TRANSACTIONS
                if exc.retriable and forget is not None and not markers_pending:
                    forget()  # the coordinator writing the markers is the right one: kept
                backoff = _MARKERS_BACKOFF if markers_pending else self.retry_backoff
                delay = min(backoff * 2 ** retry, self.retry_backoff_max)
                if (not exc.retriable or counted >= self.retries or self._closed
                        or loop.time() + delay > deadline):
                    raise
                if not (isinstance(exc, KafkaError) and exc.code in _COORDINATOR_BUSY
                        or isinstance(exc, BrokerUnreachable)):
                    counted += 1
            await asyncio.sleep(delay)
            retry += 1

    # -- produce -----------------------------------------------------------------------
    async def produce(self, topic: str, partition: int,
                      records: Iterable[ProducerRecord | tuple], *, acks: int = -1,
                      compression: int | str = "none", timeout_ms: int | None = None) -> ProduceResult:
        """Produce `records` as one RecordBatch v2 and return where it was written.

        Records are `ProducerRecord`s or tuples in its field order; `compression` is a
        codec name ("none", "gzip", "snappy", "lz4", "zstd") or id. With
        `enable_idempotence`, the batch carries the producer id and the partition's next
        sequence number; a retry resends the very same batch.
        """
        rows = [_record_row(ProducerRecord(*record)) for record in records]
        codec = _codec(compression)
        if not self.enable_idempotence:
            batch = build_batch(rows, compression=codec)
            return await self.produce_batch(topic, partition, batch, acks=acks, timeout_ms=timeout_ms)
        if acks != -1:
            raise ValueError(f"idempotent produce needs acks=-1 (all), not {acks}")
        # One batch in flight per partition: sequence numbers are handed out in the
        # order batches are appended, and an uncertain outcome ends the session.
        lock = self._partition_locks.setdefault((topic, partition), asyncio.Lock())
        async with lock:
            session = await self._producer_session()
            sequence = session.sequences.get((topic, partition), 0)
            batch = build_batch(rows, compression=codec, producer_id=session.producer_id,
                                producer_epoch=session.producer_epoch, base_sequence=sequence)
            try:
                result = await self.produce_batch(topic, partition, batch, acks=acks,
                                                  timeout_ms=timeout_ms)
            except BaseException:
                # Written or not is unknown: the next batch starts over under a new
                # producer id rather than risk a gap or a false duplicate.
                if self._session is session:
                    self._session = None
                raise
            session.sequences[(topic, partition)] = (sequence + len(rows)) & _SEQUENCE_MASK
            return result

    async def produce_batch(self, topic: str, partition: int, batch, *, acks: int = -1,
                            timeout_ms: int | None = None,
                            transactional_id: str | None = None) -> ProduceResult:
        """Produce an already-built record batch as is (inside the transaction of
        `transactional_id` when the batch is transactional)."""
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks}")
        if timeout_ms is None:
            timeout_ms = int(self.request_timeout * 1000)
        context = f"produce to {topic}-{partition}"

        async def attempt() -> ProduceResult:
            connection, _, _ = await self._leader_connection(topic, partition)
            body = PRODUCE.request(acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id,
                                   topic_data=[
                PRODUCE.request.TopicProduceData(name=topic, partition_data=[
                    PRODUCE.request.PartitionProduceData(index=partition, records=batch)])])
            version = connection.version(PRODUCE)
            if acks == 0:
                await connection.send(PRODUCE, version, body)
                return ProduceResult(topic, partition, -1, -1, -1)
            response = await connection.request(
                PRODUCE, version, body, timeout=self.request_timeout + timeout_ms / 1000)
            answer = _only(_only(response.responses, "name", topic, context).partition_responses,
                           "index", partition, context)
            duplicate = answer.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
            if not duplicate:
                check(answer.error_code, context, answer.error_message)
            return ProduceResult(topic, partition, answer.base_offset, answer.log_append_time_ms,
                                 answer.log_start_offset, duplicate)

        return await self._retrying(attempt, lambda: self._forget_topic(topic))

    async def _producer_session(self) -> _ProducerSession:
        """The current idempotent producer id, from InitProducerId on first need."""
        async with self._session_lock:
            if self._session is None:
                self._session = await self._retrying(self._init_producer_id)
            return self._session

    async def _init_producer_id(self) -> _ProducerSession:
        connection = await self._any_connection()
        # No transactional id: any broker hands out the id; the timeout is unused.
        response = await connection.request(
            INIT_PRODUCER_ID, connection.version(INIT_PRODUCER_ID),
            INIT_PRODUCER_ID.request(transactional_id=None, transaction_timeout_ms=0x7FFFFFFF))
        check(response.error_code, "InitProducerId")
        return _ProducerSession(response.producer_id, response.producer_epoch)

    # -- transactions ------------------------------------------------------------------
    async def init_transactions(self, transactional_id: str,
                                transaction_timeout_ms: int = 60_000) -> tuple[int, int]:
        """InitProducerId for `transactional_id`: returns (producer id, epoch). The
        coordinator fences every earlier producer of the id and aborts its open
        transaction."""
        context = f"InitProducerId for transactional id {transactional_id!r}"

        async def send(connection: BrokerConnection) -> tuple[int, int]:
            response = await connection.request(
                INIT_PRODUCER_ID, connection.version(INIT_PRODUCER_ID),
                INIT_PRODUCER_ID.request(transactional_id=transactional_id,
                                         transaction_timeout_ms=transaction_timeout_ms,
                                         producer_id=-1, producer_epoch=-1))
            check(response.error_code, context)
            return response.producer_id, response.producer_epoch

        return await self._with_coordinator(transactional_id, send, _TRANSACTION_KEY)

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int, partitions: Mapping[str, Iterable[int]]) -> None:
        """Add topic-partitions to the open transaction (before producing to them)."""
        context = f"AddPartitionsToTxn for {transactional_id!r}"
        topics = [ADD_PARTITIONS_TO_TXN.request.AddPartitionsToTxnTopic(name=t, partitions=sorted(p))
                  for t, p in partitions.items()]

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(
                ADD_PARTITIONS_TO_TXN, connection.version(ADD_PARTITIONS_TO_TXN),
                ADD_PARTITIONS_TO_TXN.request(v3_and_below_transactional_id=transactional_id,
                                              v3_and_below_producer_id=producer_id,
                                              v3_and_below_producer_epoch=producer_epoch,
                                              v3_and_below_topics=topics))
            for topic in response.results_by_topic_v3_and_below:
                for result in topic.results_by_partition:
                    check(result.partition_error_code,
                          f"{context}: {topic.name}-{result.partition_index}")

        await self._with_coordinator(transactional_id, send, _TRANSACTION_KEY)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> None:
        """Commit or abort the open transaction of (`transactional_id`, producer id,
        epoch). Any client may end a transaction it can name; ending one that already
        ended the same way succeeds again."""
        context = f"EndTxn({'commit' if commit else 'abort'}) for {transactional_id!r}"

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(
                END_TXN, connection.version(END_TXN),
                END_TXN.request(transactional_id=transactional_id, producer_id=producer_id,
                                producer_epoch=producer_epoch, committed=commit))
            check(response.error_code, context)

        await self._with_coordinator(transactional_id, send, _TRANSACTION_KEY)

    async def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """The state of `transactional_id` at its coordinator; TRANSACTIONAL_ID_NOT_FOUND
        raises for an id the coordinator does not know (never used, or expired)."""
        context = f"DescribeTransactions for {transactional_id!r}"

        async def send(connection: BrokerConnection) -> TransactionDescription:
            response = await connection.request(
                DESCRIBE_TRANSACTIONS, connection.version(DESCRIBE_TRANSACTIONS),
                DESCRIBE_TRANSACTIONS.request(transactional_ids=[transactional_id]))
            answer = _only(response.transaction_states, "transactional_id", transactional_id, context)
            check(answer.error_code, context)
            return TransactionDescription(
                transactional_id, answer.transaction_state, answer.producer_id, answer.producer_epoch,
                answer.transaction_timeout_ms, answer.transaction_start_time_ms,
                tuple((t.topic, p) for t in answer.topics for p in t.partitions))

        return await self._with_coordinator(transactional_id, send, _TRANSACTION_KEY)

    async def list_transactions(self, states: Iterable[str] | None = None) -> list[ListedTransaction]:
        """The transactional ids of every broker (each lists those it coordinates), by
        id; only those in `states` ("Ongoing", "CompleteCommit", ...) when given."""
        wanted = [] if states is None else list(states)
        listed = await self._from_every_broker(lambda node_id: self._list_transactions_at(node_id, wanted))
        return sorted(listed, key=lambda t: (t.transactional_id, t.coordinator_id))

    async def _list_transactions_at(self, node_id: int, states: list[str]) -> list[ListedTransaction]:
        connection = await self._node_connection(node_id)
        response = await connection.request(
            LIST_TRANSACTIONS, connection.version(LIST_TRANSACTIONS),
            LIST_TRANSACTIONS.request(state_filters=states, producer_id_filters=[]))
        check(response.error_code, f"list transactions of broker {node_id}")
        return [ListedTransaction(t.transactional_id, t.producer_id, t.transaction_state, node_id)
                for t in response.transaction_states]

    # -- fetch -------------------------------------------------------------------------
    async def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 500,
                    min_bytes: int = 1, max_bytes: int = 1024 * 1024,
                    isolation_level: int = READ_UNCOMMITTED) -> FetchResult:
        """Fetch from one partition's leader, without a fetch session.

        The broker waits up to `max_wait_ms` for `min_bytes` to accumulate, and returns
        at most `max_bytes` (though always a first whole batch, however large). Record
        bytes come back undecoded; see `fetch_records`. A long poll holds up the requests
        queued behind it on the same connection, so consumers and producers that must
        not wait for each other should use separate clients.
        """
        context = f"fetch from {topic}-{partition} at offset {offset}"

        async def attempt() -> FetchResult:
            connection, topic_info, info = await self._leader_connection(topic, partition)
            topic_id = topic_info.topic_id
            # Topic ids replace names from Fetch v13; without an id, stay below it.
            version = connection.version(
                FETCH, None if topic_id != ZERO_UUID else _FIRST_TOPIC_ID_FETCH - 1)
            body = FETCH.request(
                max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=isolation_level, session_id=0, session_epoch=-1,
                topics=[FETCH.request.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
                    FETCH.request.FetchPartition(
                        partition=partition, current_leader_epoch=info.leader_epoch,
                        fetch_offset=offset, partition_max_bytes=max_bytes)])])
            response = await connection.request(
                FETCH, version, body, timeout=self.request_timeout + max_wait_ms / 1000)
            check(response.error_code, context)
            if version >= _FIRST_TOPIC_ID_FETCH:
                answer = _only(response.responses, "topic_id", topic_id, context)
            else:
                answer = _only(response.responses, "topic", topic, context)
            data = _only(answer.partitions, "partition_index", partition, context)
            check(data.error_code, context)
            aborted = tuple(AbortedTransaction(a.producer_id, a.first_offset)
                            for a in data.aborted_transactions or ())
            records = memoryview(data.records if data.records is not None else b"")
            return FetchResult(topic, partition, offset, data.high_watermark,
                               data.last_stable_offset, data.log_start_offset, aborted,
                               data.preferred_read_replica, records)

        return await self._retrying(attempt, lambda: self._forget_topic(topic))

    async def fetch_records(self, topic: str, partition: int, offset: int, *,
                            max_wait_ms: int = 500, min_bytes: int = 1,
                            max_bytes: int = 1024 * 1024,
                            isolation_level: int = READ_UNCOMMITTED,
                            max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                            ) -> FetchedRecords:
        """`fetch`, then decode: records at or after `offset`, without control records
        and, under READ_COMMITTED, without those of aborted transactions."""
        result = await self.fetch(topic, partition, offset, max_wait_ms=max_wait_ms,
                                  min_bytes=min_bytes, max_bytes=max_bytes,
                                  isolation_level=isolation_level)
        batches, next_offset = visible_batches(result, isolation_level, max_decompressed_bytes)
        records = [r for _, batch in batches for r in decode_batch(batch, max_decompressed_bytes)
                   if r.offset >= offset]
        return FetchedRecords(result, records, next_offset)

    # -- list offsets --------------------------------------------------------------------
    async def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int, *,
                           isolation_level: int = READ_UNCOMMITTED) -> dict[int, OffsetAndTimestamp]:
        """The offset for `timestamp` in each partition: EARLIEST (-2), LATEST (-1),
        MAX_TIMESTAMP (-3) or a time in ms (the first offset at or after it)."""
        wanted = list(partitions)
        context = f"list offsets of {topic} at {timestamp}"

        async def attempt() -> dict[int, OffsetAndTimestamp]:
            by_leader: dict[int, list[PartitionInfo]] = collections.defaultdict(list)
            for partition in wanted:
                _, info = await self._partition(topic, partition)
                by_leader[info.leader_id].append(info)
            answers = await asyncio.gather(*(self._list_offsets_at(node_id, topic, infos, timestamp,
                                                                   isolation_level, context)
                                             for node_id, infos in by_leader.items()))
            return {p: offset for answer in answers for p, offset in answer.items()}

        return await self._retrying(attempt, lambda: self._forget_topic(topic))

    async def _list_offsets_at(self, node_id: int, topic: str, infos: list[PartitionInfo],
                               timestamp: int, isolation_level: int,
                               context: str) -> dict[int, OffsetAndTimestamp]:
        connection = await self._node_connection(node_id)
        version = connection.version(LIST_OFFSETS)
        needed = _LIST_OFFSETS_MIN_VERSION.get(timestamp, 0)
        if isolation_level == READ_COMMITTED:
            needed = max(needed, _LIST_OFFSETS_MIN_VERSION_READ_COMMITTED)
        if version < needed:
            raise UnsupportedVersion(f"{context}: needs ListOffsets v{needed}, "
                                     f"{connection.address} speaks v{version}")
        body = LIST_OFFSETS.request(
            replica_id=-1, isolation_level=isolation_level,
            timeout_ms=int(self.request_timeout * 1000),
            topics=[LIST_OFFSETS.request.ListOffsetsTopic(name=topic, partitions=[
                LIST_OFFSETS.request.ListOffsetsPartition(
                    partition_index=info.partition, current_leader_epoch=info.leader_epoch,
                    timestamp=timestamp) for info in infos])])
        response = await connection.request(LIST_OFFSETS, version, body)
        answer = _only(response.topics, "name", topic, context)
        offsets = {}
        for info in infos:
            data = _only(answer.partitions, "partition_index", info.partition, context)
            check(data.error_code, f"{context}, partition {info.partition}")
            offsets[info.partition] = OffsetAndTimestamp(data.offset, data.timestamp,
                                                         data.leader_epoch)
        return offsets

    # -- groups ----------------------------------------------------------------------------
    async def find_coordinator(self, group: str) -> Coordinator:
        """The broker coordinating consumer group `group`."""
        return await self._retrying(lambda: self._find_coordinator(group, _GROUP_KEY))

    async def _find_coordinator(self, key: str, key_type: int) -> Coordinator:
        connection = await self._any_connection()
        version = connection.version(FIND_COORDINATOR)
        kind = "group" if key_type == _GROUP_KEY else "transactional id"
        context = f"find coordinator of {kind} {key!r}"
        if version >= _FIRST_BATCHED_FIND_COORDINATOR:
            body = FIND_COORDINATOR.request(key_type=key_type, coordinator_keys=[key])
            answer = _only((await connection.request(FIND_COORDINATOR, version, body)).coordinators,
                           "key", key, context)
        else:
            body = FIND_COORDINATOR.request(key=key, key_type=key_type)
            answer = await connection.request(FIND_COORDINATOR, version, body)
        check(answer.error_code, context, answer.error_message)
        coordinator = Coordinator(answer.node_id, answer.host, answer.port)
        self._coordinators[(key_type, key)] = coordinator
        return coordinator

    async def _with_coordinator(self, key: str, send: Callable[[BrokerConnection], Awaitable[_T]],
                                key_type: int = 0) -> _T:
        """`send` to the coordinator of a group (key type 0) or transactional id (1),
        finding it again after retriable errors."""
        async def attempt() -> _T:
            coordinator = self._coordinators.get((key_type, key))
            if coordinator is None:
                coordinator = await self._find_coordinator(key, key_type)
            return await send(await self._named_connection(coordinator.host, coordinator.port))

        return await self._retrying(attempt, lambda: self._coordinators.pop((key_type, key), None))

    async def commit_offsets(self, group: str,
                             offsets: Mapping[tuple[str, int], int | tuple[int, str | None]], *,
                             generation_id: int = -1, member_id: str = "") -> None:
        """Commit `{(topic, partition): offset or (offset, metadata)}` for `group`.

        The defaults commit outside any group membership, as a standalone consumer does.
        """
        by_topic: dict[str, list] = collections.defaultdict(list)
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            by_topic[topic].append(OFFSET_COMMIT.request.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata))
        body = OFFSET_COMMIT.request(
            group_id=group, generation_id_or_member_epoch=generation_id, member_id=member_id,
            topics=[OFFSET_COMMIT.request.OffsetCommitRequestTopic(name=name, partitions=parts)
                    for name, parts in by_topic.items()])

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(OFFSET_COMMIT, connection.version(OFFSET_COMMIT), body)
            for answer in response.topics:
                for data in answer.partitions:
                    check(data.error_code, f"commit offsets of group {group!r} for "
                                           f"{answer.name}-{data.partition_index}")

        await self._with_coordinator(group, send)

    async def fetch_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None,
                            ) -> dict[tuple[str, int], CommittedOffset]:
        """The offsets `group` committed for `partitions` (all it has when None);
        offset -1 where it committed nothing."""
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = collections.defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(partition)
        context = f"fetch offsets of group {group!r}"

        async def send(connection: BrokerConnection) -> dict[tuple[str, int], CommittedOffset]:
            version = connection.version(OFFSET_FETCH)
            if version >= _FIRST_GROUPS_OFFSET_FETCH:
                topics = None if by_topic is None else [
                    OFFSET_FETCH.request.OffsetFetchRequestTopics(name=name, partition_indexes=parts)
                    for name, parts in by_topic.items()]
                body = OFFSET_FETCH.request(groups=[OFFSET_FETCH.request.OffsetFetchRequestGroup(
                    group_id=group, topics=topics)])
            else:
                topics = None if by_topic is None else [
                    OFFSET_FETCH.request.OffsetFetchRequestTopic(name=name, partition_indexes=parts)
                    for name, parts in by_topic.items()]
                body = OFFSET_FETCH.request(group_id=group, topics=topics)
            response = await connection.request(OFFSET_FETCH, version, body)
            if version >= _FIRST_GROUPS_OFFSET_FETCH:
                response = _only(response.groups, "group_id", group, context)
            check(response.error_code, context)
            committed = {}
            for answer in response.topics:
                for data in answer.partitions:
                    check(data.error_code, f"{context} for {answer.name}-{data.partition_index}")
                    committed[(answer.name, data.partition_index)] = CommittedOffset(
                        data.committed_offset, data.metadata, data.committed_leader_epoch)
            return committed

        return await self._with_coordinator(group, send)

    async def describe_groups(self, groups: Iterable[str]) -> dict[str, GroupDescription]:
        """Each group as its coordinator describes it: state, protocol and members with
        their subscription and assignment bytes (see `GroupMember.consumer_assignment`).

        A group the coordinator does not know comes back in state "Dead" (Kafka's answer
        before DescribeGroups v6); other group errors raise KafkaError.
        """
        names = list(dict.fromkeys(groups))
        answers = await asyncio.gather(*(self._describe_group(name) for name in names))
        return dict(zip(names, answers))

    async def _describe_group(self, group: str) -> GroupDescription:
        context = f"describe group {group!r}"

        async def send(connection: BrokerConnection) -> GroupDescription:
            response = await connection.request(
                DESCRIBE_GROUPS, connection.version(DESCRIBE_GROUPS),
                DESCRIBE_GROUPS.request(groups=[group], include_authorized_operations=False))
            answer = _only(response.groups, "group_id", group, context)
            check(answer.error_code, context)
            coordinator = self._coordinators.get((_GROUP_KEY, group)) or Coordinator(-1, connection.host,
                                                                       connection.port)
            members = tuple(GroupMember(m.member_id, m.group_instance_id, m.client_id,
                                        m.client_host, bytes(m.member_metadata or b""),
                                        bytes(m.member_assignment or b""))
                            for m in answer.members)
            return GroupDescription(answer.group_id, answer.group_state, answer.protocol_type,
                                    answer.protocol_data, members, coordinator,
                                    answer.authorized_operations)

        return await self._with_coordinator(group, send)

    async def list_groups(self, states: Iterable[str] | None = None) -> list[ListedGroup]:
        """The groups of every broker (each lists the groups it coordinates), by group id;
        only those in `states` ("Stable", "Empty", ...) when given (ListGroups v4+)."""
        wanted = None if states is None else list(states)
        listed = await self._from_every_broker(lambda node_id: self._list_groups_at(node_id, wanted))
        return sorted(listed, key=lambda group: (group.group_id, group.coordinator_id))

    async def _from_every_broker(self, ask: Callable[[int], Awaitable[list[_T]]]) -> list[_T]:
        """What `ask(node id)` lists at each broker of the cluster, together; retried
        whole (the broker list is fetched again)."""
        async def attempt() -> list[_T]:
            brokers = (await self._refresh_metadata([])).brokers
            answers = await asyncio.gather(*(ask(node_id) for node_id in sorted(brokers)))
            return [item for answer in answers for item in answer]

        return await self._retrying(attempt)

    async def _list_groups_at(self, node_id: int, states: list[str] | None) -> list[ListedGroup]:
        connection = await self._node_connection(node_id)
        version = connection.version(LIST_GROUPS)
        if states and version < _FIRST_STATES_LIST_GROUPS:
            raise UnsupportedVersion(f"list groups by state needs ListGroups "
                                     f"v{_FIRST_STATES_LIST_GROUPS}, {connection.address} "
                                     f"speaks v{version}")
        response = await connection.request(LIST_GROUPS, version, LIST_GROUPS.request(
            states_filter=states or [], types_filter=[]))
        check(response.error_code, f"list groups of broker {node_id}")
        return [ListedGroup(g.group_id, g.protocol_type, g.group_state, g.group_type, node_id)
                for g in response.groups]

    async def delete_groups(self, groups: Iterable[str]) -> dict[str, KafkaError | None]:
        """Delete groups (their committed offsets included) through their coordinators;
        each group's error (None on success) is returned, such as NON_EMPTY_GROUP while
        it has members or GROUP_ID_NOT_FOUND. Retriable errors are retried, then raised."""
        names = list(dict.fromkeys(groups))
        answers = await asyncio.gather(*(self._delete_group(name) for name in names))
        return dict(zip(names, answers))

    async def _delete_group(self, group: str) -> KafkaError | None:
        context = f"delete group {group!r}"

        async def send(connection: BrokerConnection) -> KafkaError | None:
            response = await connection.request(
                DELETE_GROUPS, connection.version(DELETE_GROUPS),
                DELETE_GROUPS.request(groups_names=[group]))
            answer = _only(response.results, "group_id", group, context)
            if not answer.error_code:
                return None
            error = KafkaError(answer.error_code, context)
            if error.retriable:
                raise error
            return error

        return await self._with_coordinator(group, send)

    # -- topic administration -----------------------------------------------------------
    async def _controller_connection(self) -> BrokerConnection:
        if self._cluster.controller_id < 0:
            await self._refresh_metadata([])
        if self._cluster.controller_id not in self._cluster.brokers:
            # Not reported, or not a broker we can reach (KRaft controllers are not):
            # any broker answers NOT_CONTROLLER or forwards the request.
            return await self._any_connection()
        return await self._node_connection(self._cluster.controller_id)

    def _forget_controller(self) -> None:
        self._cluster = ClusterMetadata(self._cluster.cluster_id, -1, self._cluster.brokers,
                                        self._cluster.topics)

    async def create_topics(self, topics: Mapping[str, NewTopic], *, validate_only: bool = False,
                            timeout_ms: int = 30000) -> dict[str, CreatedTopic]:
        """Create topics through the controller; each topic's outcome is returned, with
        its error (such as TOPIC_ALREADY_EXISTS) rather than raised."""
        results: dict[str, CreatedTopic] = {}
        remaining = dict(topics)

        async def attempt() -> dict[str, CreatedTopic]:
            connection = await self._controller_connection()
            body = CREATE_TOPICS.request(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
                CREATE_TOPICS.request.CreatableTopic(
                    name=name, num_partitions=spec.partitions,
                    replication_factor=spec.replication_factor,
                    configs=[CREATE_TOPICS.request.CreatableTopicConfig(name=key, value=value)
                             for key, value in spec.configs.items()])
                for name, spec in remaining.items()])
            response = await connection.request(CREATE_TOPICS, connection.version(CREATE_TOPICS), body,
                                                timeout=self.request_timeout + timeout_ms / 1000)
            for answer in response.topics:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                error = KafkaError(answer.error_code, f"create topic {answer.name!r}",
                                   answer.error_message) if answer.error_code else None
                results[answer.name] = CreatedTopic(answer.name, error, answer.topic_id,
                                                    answer.num_partitions, answer.replication_factor)
                remaining.pop(answer.name, None)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"create topics {sorted(remaining)}")
            return results

        return await self._retrying(attempt, self._forget_controller)

    async def delete_topics(self, names: Iterable[str], *,
                            timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Delete topics through the controller; each topic's error (None on success)."""
        results: dict[str, KafkaError | None] = {}
        remaining = list(names)

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self._controller_connection()
            version = connection.version(DELETE_TOPICS)
            if version >= _FIRST_TOPICS_DELETE:
                body = DELETE_TOPICS.request(timeout_ms=timeout_ms, topics=[
                    DELETE_TOPICS.request.DeleteTopicState(name=name) for name in remaining])
            else:
                body = DELETE_TOPICS.request(timeout_ms=timeout_ms, topic_names=list(remaining))
            response = await connection.request(DELETE_TOPICS, version, body,
                                                timeout=self.request_timeout + timeout_ms / 1000)
            for answer in response.responses:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                results[answer.name] = KafkaError(
                    answer.error_code, f"delete topic {answer.name!r}",
                    answer.error_message) if answer.error_code else None
                self._forget_topic(answer.name)
                if answer.name in remaining:
                    remaining.remove(answer.name)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"delete topics {sorted(remaining)}")
            return results

        return await self._retrying(attempt, self._forget_controller)


    async def create_partitions(self, counts: Mapping[str, int], *,
                                assignments: Mapping[str, Sequence[Sequence[int]]] | None = None,
                                validate_only: bool = False,
                                timeout_ms: int = 30000) -> dict[str, KafkaError | None]:
        """Grow each topic to `counts[topic]` partitions through the controller;
        `assignments[topic]` may list the replica broker ids of each new partition.
        Each topic's error (None on success) is returned, not raised."""
        results: dict[str, KafkaError | None] = {}
        remaining = dict(counts)
        assignments = assignments or {}

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self._controller_connection()
            Request = CREATE_PARTITIONS.request
            body = Request(timeout_ms=timeout_ms, validate_only=validate_only, topics=[
                Request.CreatePartitionsTopic(
                    name=name, count=count,
                    assignments=None if name not in assignments else [
                        Request.CreatePartitionsAssignment(broker_ids=list(ids))
                        for ids in assignments[name]])
                for name, count in remaining.items()])
            response = await connection.request(
                CREATE_PARTITIONS, connection.version(CREATE_PARTITIONS), body,
                timeout=self.request_timeout + timeout_ms / 1000)
            for answer in response.results:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    continue
                results[answer.name] = KafkaError(
                    answer.error_code, f"create partitions of topic {answer.name!r}",
                    answer.error_message) if answer.error_code else None
                self._forget_topic(answer.name)
                remaining.pop(answer.name, None)
            if remaining:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"create partitions {sorted(remaining)}")
            return results

        return await self._retrying(attempt, self._forget_controller)

    async def elect_leaders(self, election_type: int,
                            partitions: Iterable[tuple[str, int]] | None = None, *,
                            timeout_ms: int = 60000,
                            ) -> dict[tuple[str, int], KafkaError | None]:
        """Preferred (PREFERRED_ELECTION) or unclean (UNCLEAN_ELECTION) leader elections
        through the controller, for `partitions` or (None) every partition of the cluster.
        Each partition's error (None: elected; ELECTION_NOT_NEEDED: its leader is already
        the one the election would pick) is returned, not raised; an error refusing the
        whole request is raised."""
        wanted = None if partitions is None else sorted(set(partitions))

        async def attempt() -> dict[tuple[str, int], KafkaError | None]:
            connection = await self._controller_connection()
            version = connection.version(ELECT_LEADERS)
            if election_type != PREFERRED_ELECTION and version < _FIRST_TYPED_ELECT_LEADERS:
                raise UnsupportedVersion(f"ElectLeaders v{version} of broker {connection.address} "
                                         f"elects preferred leaders only")
            Request = ELECT_LEADERS.request
            topics: dict[str, list[int]] = {}
            for topic, partition in wanted or ():
                topics.setdefault(topic, []).append(partition)
            body = Request(election_type=election_type, timeout_ms=timeout_ms,
                           topic_partitions=None if wanted is None else [
                               Request.TopicPartitions(topic=topic, partitions=indexes)
                               for topic, indexes in topics.items()])
            response = await connection.request(ELECT_LEADERS, version, body,
                                                timeout=self.request_timeout + timeout_ms / 1000)
            if version >= 1 and response.error_code:
                check(response.error_code, "elect leaders")
            results = {}
            for answer in response.replica_election_results:
                for result in answer.partition_result:
                    if result.error_code == ErrorCode.NOT_CONTROLLER:  # v0: no top-level error
                        raise KafkaError(ErrorCode.NOT_CONTROLLER, "elect leaders")
                    results[(answer.topic, result.partition_id)] = KafkaError(
                        result.error_code, f"elect the leader of {answer.topic}-{result.partition_id}",
                        result.error_message) if result.error_code else None
            missing = [tp for tp in wanted or () if tp not in results]
            if missing:
                raise ProtocolViolation(f"elect leaders: the response has no result for {missing}")
            for topic, _ in results:
                self._forget_topic(topic)
            return results

        return await self._retrying(attempt, self._forget_controller)

    async def alter_partition_reassignments(
            self, targets: Mapping[tuple[str, int], Sequence[int] | None], *, timeout_ms: int = 60000
    ) -> dict[tuple[str, int], KafkaError | None]:
        """Reassign partitions through the controller: each partition's target replicas,
        or None to cancel its reassignment in progress. Each partition's error is
        returned, not raised; an error refusing the whole request is raised."""
        async def attempt() -> dict[tuple[str, int], KafkaError | None]:
            connection = await self._controller_connection()
            Request = ALTER_PARTITION_REASSIGNMENTS.request
            topics: dict[str, list] = {}
            for (topic, partition), replicas in sorted(targets.items()):
                topics.setdefault(topic, []).append(Request.ReassignablePartition(
                    partition_index=partition, replicas=None if replicas is None else list(replicas)))
            body = Request(timeout_ms=timeout_ms, topics=[
                Request.ReassignableTopic(name=topic, partitions=partitions)
                for topic, partitions in topics.items()])
            response = await connection.request(
                ALTER_PARTITION_REASSIGNMENTS, connection.version(ALTER_PARTITION_REASSIGNMENTS),
                body, timeout=self.request_timeout + timeout_ms / 1000)
            check(response.error_code, "alter partition reassignments", response.error_message)
            results = {}
            for answer in response.responses:
                for result in answer.partitions:
                    tp = (answer.name, result.partition_index)
                    results[tp] = KafkaError(result.error_code, f"reassign {tp[0]}-{tp[1]}",
                                             result.error_message) if result.error_code else None
            missing = [tp for tp in targets if tp not in results]
            if missing:
                raise ProtocolViolation(f"alter partition reassignments: no result for {missing}")
            for topic, _ in results:
                self._forget_topic(topic)
            return results

        return await self._retrying(attempt, self._forget_controller)

    async def list_partition_reassignments(
            self, partitions: Iterable[tuple[str, int]] | None = None, *, timeout_ms: int = 60000
    ) -> dict[tuple[str, int], OngoingReassignment]:
        """The reassignments in progress, of `partitions` or (None) of the whole cluster."""
        wanted = None if partitions is None else sorted(set(partitions))

        async def attempt() -> dict[tuple[str, int], OngoingReassignment]:
            connection = await self._controller_connection()
            Request = LIST_PARTITION_REASSIGNMENTS.request
            topics: dict[str, list[int]] = {}
            for topic, partition in wanted or ():
                topics.setdefault(topic, []).append(partition)
            body = Request(timeout_ms=timeout_ms, topics=None if wanted is None else [
                Request.ListPartitionReassignmentsTopics(name=topic, partition_indexes=indexes)
                for topic, indexes in topics.items()])
            response = await connection.request(
                LIST_PARTITION_REASSIGNMENTS, connection.version(LIST_PARTITION_REASSIGNMENTS),
                body, timeout=self.request_timeout + timeout_ms / 1000)
            check(response.error_code, "list partition reassignments", response.error_message)
            return {(topic.name, p.partition_index): OngoingReassignment(
                tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas))
                for topic in response.topics for p in topic.partitions}

        return await self._retrying(attempt, self._forget_controller)

    # -- configs -------------------------------------------------------------------------
    async def describe_configs(self, resources: Iterable[tuple[int, str]], *,
                               keys: Iterable[str] | None = None, include_synonyms: bool = False,
                               ) -> dict[tuple[int, str], dict[str, ConfigEntry]]:
        """The configs of each `(resource type, name)`: TOPIC_RESOURCE with a topic name,
        BROKER_RESOURCE with a broker id (asked of that broker). All keys unless `keys`.

        `ConfigEntry.source` tells overrides (DYNAMIC_TOPIC_CONFIG, ...) from defaults.
        A resource's error (such as UNKNOWN_TOPIC_OR_PARTITION) raises KafkaError.
        """
        wanted = list(dict.fromkeys((int(kind), str(name)) for kind, name in resources))
        key_list = None if keys is None else list(keys)

        async def attempt() -> dict[tuple[int, str], dict[str, ConfigEntry]]:
            by_node: dict[int | None, list[tuple[int, str]]] = collections.defaultdict(list)
            for kind, name in wanted:  # broker resources go to that broker, others anywhere
                by_node[int(name) if kind == BROKER_RESOURCE and name.isdigit() else None].append(
                    (kind, name))
            answers = await asyncio.gather(*(
                self._describe_configs_at(node_id, items, key_list, include_synonyms)
                for node_id, items in by_node.items()))
            return {resource: entries for answer in answers for resource, entries in answer.items()}

        return await self._retrying(attempt)

    async def _describe_configs_at(self, node_id: int | None, resources: list[tuple[int, str]],
                                   keys: list[str] | None, include_synonyms: bool,
                                   ) -> dict[tuple[int, str], dict[str, ConfigEntry]]:
        if node_id is None:
            connection = await self._any_connection()
        else:
            connection = await self._node_connection(node_id)
        version = connection.version(DESCRIBE_CONFIGS)
        Request = DESCRIBE_CONFIGS.request
        body = Request(include_synonyms=include_synonyms, include_documentation=False, resources=[
            Request.DescribeConfigsResource(resource_type=kind, resource_name=name,
                                            configuration_keys=keys)
            for kind, name in resources])
        response = await connection.request(DESCRIBE_CONFIGS, version, body)
        described = {}
        for kind, name in resources:
            context = f"describe configs of {_resource(kind, name)}"
            answer = _answer_for(response.results, kind, name, context)
            check(answer.error_code, context, answer.error_message)
            entries = {}
            for config in answer.configs:
                if version >= _FIRST_SOURCES_DESCRIBE_CONFIGS:
                    source, is_default = config.config_source, config.config_source == DEFAULT_CONFIG
                else:
                    source = DEFAULT_CONFIG if config.is_default else UNKNOWN_CONFIG
                    is_default = config.is_default
                entries[config.name] = ConfigEntry(
                    config.name, config.value, source, is_default, config.read_only,
                    config.is_sensitive,
                    tuple(ConfigSynonym(y.name, y.value, y.source) for y in config.synonyms or ()))
            described[(kind, name)] = entries
        return described

    async def alter_configs(self, configs: Mapping[tuple[int, str], Mapping[str, str]], *,
                            validate_only: bool = False) -> dict[tuple[int, str], KafkaError | None]:
        """Replace each `(resource type, name)`'s configs with `configs[resource]`: keys
        left out go back to their defaults. Each resource's error (None on success)."""
        Request = ALTER_CONFIGS.request
        return await self._alter_configs(ALTER_CONFIGS, {
            resource: [Request.AlterableConfig(name=key, value=value) for key, value in entries.items()]
            for resource, entries in configs.items()}, validate_only)

    async def incremental_alter_configs(
            self, changes: Mapping[tuple[int, str], Iterable[tuple[str, int, str | None]]], *,
            validate_only: bool = False) -> dict[tuple[int, str], KafkaError | None]:
        """Apply `(key, operation, value)` changes to each `(resource type, name)`; the
        operations are SET_CONFIG, DELETE_CONFIG, APPEND_CONFIG and SUBTRACT_CONFIG.
        Each resource's error (None on success)."""
        Request = INCREMENTAL_ALTER_CONFIGS.request
        return await self._alter_configs(INCREMENTAL_ALTER_CONFIGS, {
            resource: [Request.AlterableConfig(name=key, config_operation=op, value=value)
                       for key, op, value in entries]
            for resource, entries in changes.items()}, validate_only)

    async def _alter_configs(self, api, configs: dict[tuple[int, str], list], validate_only: bool,
                             ) -> dict[tuple[int, str], KafkaError | None]:
        """Broker resources go to that broker, the others (and the cluster default) anywhere."""
        by_node: dict[int | None, list[tuple[int, str]]] = collections.defaultdict(list)
        for kind, name in configs:
            by_node[int(name) if kind == BROKER_RESOURCE and name.isdigit() else None].append((kind, name))

        async def send(node_id: int | None, resources: list[tuple[int, str]]):
            connection = await (self._any_connection() if node_id is None else self._node_connection(node_id))
            body = api.request(validate_only=validate_only, resources=[
                api.request.AlterConfigsResource(resource_type=kind, resource_name=name,
                                                 configs=configs[(kind, name)])
                for kind, name in resources])
            response = await connection.request(api, connection.version(api), body)
            results = {}
            for kind, name in resources:
                context = f"alter configs of {_resource(kind, name)}"
                answer = _answer_for(response.responses, kind, name, context)
                results[(kind, name)] = KafkaError(answer.error_code, context, answer.error_message) \
                    if answer.error_code else None
            return results

        async def attempt() -> dict[tuple[int, str], KafkaError | None]:
            answers = await asyncio.gather(*(send(node_id, items) for node_id, items in by_node.items()))
            return {resource: error for answer in answers for resource, error in answer.items()}

        return await self._retrying(attempt)

    # -- ACLs and SCRAM credentials -------------------------------------------------------
    async def describe_acls(self, acl_filter: AclBindingFilter = ANY_ACL) -> list[AclBinding]:
        """The ACLs matching `acl_filter` (DescribeAcls, asked of any broker). A broker
        without an authorizer answers SECURITY_DISABLED, raised as KafkaError. A filter
        with an UNKNOWN value is a ValueError."""
        _check_filter(acl_filter)

        async def attempt() -> list[AclBinding]:
            connection = await self._any_connection()
            response = await connection.request(
                DESCRIBE_ACLS, connection.version(DESCRIBE_ACLS),
                DESCRIBE_ACLS.request(**_acl_filter_fields(acl_filter)))
            check(response.error_code, "describe ACLs", response.error_message)
            return [AclBinding(ResourceType.of(r.resource_type), r.resource_name,
                               PatternType.of(r.pattern_type), a.principal, a.host,
                               Operation.of(a.operation), Permission.of(a.permission_type))
                    for r in response.resources for a in r.acls]

        return await self._retrying(attempt)

    async def create_acls(self, bindings: Iterable[AclBinding]) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs (CreateAcls, any broker: Kafka's brokers forward it to the
        controller). Each binding's error (None: it exists now) is returned, not raised.
        A binding with an indefinite value (ANY, MATCH, UNKNOWN) is a ValueError: Kafka
        fails the whole request for it."""
        wanted = list(dict.fromkeys(bindings))
        for binding in wanted:
            _check_binding(binding)
        if not wanted:
            return {}
        Request = CREATE_ACLS.request
        body = Request(creations=[Request.AclCreation(
            resource_type=b.resource_type, resource_name=b.resource_name,
            resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission) for b in wanted])

        async def attempt() -> dict[AclBinding, KafkaError | None]:
            connection = await self._any_connection()
            response = await connection.request(CREATE_ACLS, connection.version(CREATE_ACLS), body)
            if len(response.results) != len(wanted):
                raise ProtocolViolation(f"create ACLs: {len(response.results)} results for "
                                        f"{len(wanted)} ACLs")
            return {binding: KafkaError(answer.error_code, f"create ACL {_acl_text(binding)}",
                                        answer.error_message) if answer.error_code else None
                    for binding, answer in zip(wanted, response.results)}

        return await self._retrying(attempt)

    async def delete_acls(self, filters: Iterable[AclBindingFilter],
                          ) -> dict[AclBindingFilter, DeletedAcls]:
        """Delete every ACL matching each filter (DeleteAcls, any broker). Each filter's
        outcome is returned, not raised: the ACLs it deleted, or its error (such as
        SECURITY_DISABLED from a broker without an authorizer). A filter with an UNKNOWN
        value is a ValueError."""
        wanted = list(dict.fromkeys(filters))
        for acl_filter in wanted:
            _check_filter(acl_filter)
        if not wanted:
            return {}
        Request = DELETE_ACLS.request
        body = Request(filters=[Request.DeleteAclsFilter(**_acl_filter_fields(f)) for f in wanted])

        async def attempt() -> dict[AclBindingFilter, DeletedAcls]:
            connection = await self._any_connection()
            response = await connection.request(DELETE_ACLS, connection.version(DELETE_ACLS), body)
            if len(response.filter_results) != len(wanted):
                raise ProtocolViolation(f"delete ACLs: {len(response.filter_results)} results for "
                                        f"{len(wanted)} filters")
            results = {}
            for acl_filter, answer in zip(wanted, response.filter_results):
                matches = []
                for m in answer.matching_acls:
                    binding = AclBinding(ResourceType.of(m.resource_type), m.resource_name,
                                         PatternType.of(m.pattern_type), m.principal, m.host,
                                         Operation.of(m.operation), Permission.of(m.permission_type))
                    matches.append(AclDeletion(binding, KafkaError(
                        m.error_code, f"delete ACL {_acl_text(binding)}", m.error_message)
                        if m.error_code else None))
                results[acl_filter] = DeletedAcls(KafkaError(
                    answer.error_code, "delete ACLs", answer.error_message)
                    if answer.error_code else None, tuple(matches))
            return results

        return await self._retrying(attempt)

    async def describe_user_scram_credentials(self, users: Iterable[str] | None = None,
                                              ) -> dict[str, UserScramCredentials]:
        """The SCRAM mechanisms and iteration counts of `users` (None or none: every user
        that has any), from any broker. A named user without credentials comes back with
        RESOURCE_NOT_FOUND as its error; an error refusing the whole request is raised."""
        names = list(dict.fromkeys(users or ()))
        Request = DESCRIBE_USER_SCRAM_CREDENTIALS.request
        body = Request(users=[Request.UserName(name=name) for name in names] or None)

        async def attempt() -> dict[str, UserScramCredentials]:
            connection = await self._any_connection()
            response = await connection.request(
                DESCRIBE_USER_SCRAM_CREDENTIALS, connection.version(DESCRIBE_USER_SCRAM_CREDENTIALS),
                body)
            check(response.error_code, "describe SCRAM credentials", response.error_message)
            results = {answer.user: UserScramCredentials(
                answer.user,
                KafkaError(answer.error_code, f"describe SCRAM credentials of user {answer.user!r}",
                           answer.error_message) if answer.error_code else None,
                tuple(ScramCredentialInfo(ScramMechanism.of(c.mechanism), c.iterations)
                      for c in answer.credential_infos))
                for answer in response.results}
            missing = [name for name in names if name not in results]
            if missing:
                raise ProtocolViolation(f"describe SCRAM credentials: no result for users {missing}")
            return results

        return await self._retrying(attempt)

    async def alter_user_scram_credentials(self, upsertions: Iterable[ScramUpsertion] = (),
                                           deletions: Iterable[ScramDeletion] = (),
                                           ) -> dict[str, KafkaError | None]:
        """Set and remove SCRAM credentials (AlterUserScramCredentials, through the
        controller as Kafka's admin client sends it). For each upsertion the client draws
        a random salt and sends it with the salted password (SCRAM's Hi()); the password
        itself never leaves. Kafka takes one change per user in a request, so a user's
        further changes go in the requests after it, deletions first. Each user's first
        error (None when all its changes were made) is returned, not raised; a password the
        client cannot salt (empty, or iterations below 1) is a ValueError."""
        Request = ALTER_USER_SCRAM_CREDENTIALS.request
        changes = [(d.user, Request.ScramCredentialDeletion(name=d.user, mechanism=d.mechanism))
                   for d in deletions]
        for u in upsertions:
            if not u.password:
                raise ValueError(f"the {u.mechanism.mechanism_name} password of user {u.user!r} is empty")
            if u.iterations < 1:
                raise ValueError(f"{u.iterations} iterations for user {u.user!r}: at least 1 is needed")
            salt = secrets.token_bytes(_SCRAM_SALT_BYTES)
            changes.append((u.user, Request.ScramCredentialUpsertion(
                name=u.user, mechanism=u.mechanism, iterations=u.iterations, salt=salt,
                salted_password=u.mechanism.salted_password(u.password, salt, u.iterations))))
        rounds: list[dict[str, Struct]] = []
        for user, change in changes:
            free = next((r for r in rounds if user not in r), None)
            if free is None:
                free = {}
                rounds.append(free)
            free[user] = change
        results: dict[str, KafkaError | None] = {}
        for changed in rounds:
            for user, error in (await self._alter_scram_round(changed)).items():
                if results.get(user) is None:
                    results[user] = error
        return results

    async def _alter_scram_round(self, changes: dict[str, Struct]) -> dict[str, KafkaError | None]:
        """One AlterUserScramCredentials request, at most one change per user."""
        Request = ALTER_USER_SCRAM_CREDENTIALS.request
        body = Request(
            deletions=[c for c in changes.values() if isinstance(c, Request.ScramCredentialDeletion)],
            upsertions=[c for c in changes.values() if isinstance(c, Request.ScramCredentialUpsertion)])

        async def attempt() -> dict[str, KafkaError | None]:
            connection = await self._controller_connection()
            response = await connection.request(
                ALTER_USER_SCRAM_CREDENTIALS, connection.version(ALTER_USER_SCRAM_CREDENTIALS), body)
            results = {}
            for answer in response.results:
                if answer.error_code == ErrorCode.NOT_CONTROLLER:
                    raise KafkaError(ErrorCode.NOT_CONTROLLER, "alter SCRAM credentials")
                results[answer.user] = KafkaError(
                    answer.error_code, f"alter SCRAM credentials of user {answer.user!r}",
                    answer.error_message) if answer.error_code else None
            missing = [user for user in changes if user not in results]
            if missing:
                raise ProtocolViolation(f"alter SCRAM credentials: no result for users {missing}")
            return results

        return await self._retrying(attempt, self._forget_controller)

    # -- client quotas -----------------------------------------------------------------
    async def describe_client_quotas(self, components: Iterable[tuple[str, int, str | None]] = (), *,
                                     strict: bool = False) -> dict[QuotaEntity, dict[str, float]]:
        """The quotas of the entities matching every filter component (entity type, match
        type of wire.quota_types, name for an exact match else None); with `strict`, of
        entities with no other entity type. A QuotaEntity is its sorted (entity type, name
        or None for the default) pairs. An error refusing the filter is raised."""
        Request = DESCRIBE_CLIENT_QUOTAS.request
        body = Request(components=[Request.ComponentData(entity_type=t, match_type=m, match=n)
                                   for t, m, n in components], strict=strict)

        async def attempt() -> dict[QuotaEntity, dict[str, float]]:
            connection = await self._any_connection()
            response = await connection.request(
                DESCRIBE_CLIENT_QUOTAS, connection.version(DESCRIBE_CLIENT_QUOTAS), body)
            check(response.error_code, "describe client quotas", response.error_message)
            return {tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)):
                    {v.key: v.value for v in entry.values} for entry in response.entries or ()}

        return await self._retrying(attempt)

    async def alter_client_quotas(self, alterations: Mapping[QuotaEntity, Mapping[str, float | None]], *,
                                  validate_only: bool = False) -> dict[QuotaEntity, KafkaError | None]:
        """Set each entity's quotas (key -> value) and remove those given None, one
        AlterClientQuotas to any broker; each entity's error (None: done) is returned, not
        raised."""
        Request = ALTER_CLIENT_QUOTAS.request
        entities = {tuple(sorted(entity)): ops for entity, ops in alterations.items()}
        body = Request(validate_only=validate_only, entries=[Request.EntryData(
            entity=[Request.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[Request.OpData(key=key, value=0.0 if value is None else float(value), remove=value is None)
                 for key, value in ops.items()]) for entity, ops in entities.items()])

        async def attempt() -> dict[QuotaEntity, KafkaError | None]:
            connection = await self._any_connection()
            response = await connection.request(
                ALTER_CLIENT_QUOTAS, connection.version(ALTER_CLIENT_QUOTAS), body)
            results = {}
            for answer in response.entries:
                entity = tuple(sorted((e.entity_type, e.entity_name) for e in answer.entity))
                results[entity] = KafkaError(answer.error_code, f"alter client quotas of {entity}",
                                             answer.error_message) if answer.error_code else None
            missing = [entity for entity in entities if entity not in results]
            if missing:
                raise ProtocolViolation(f"alter client quotas: no result for {missing}")
            return results

        return await self._retrying(attempt)


# -- helpers ---------------------------------------------------------------------------

def _parse_addresses(servers: str | Sequence[str]) -> list[tuple[str, int]]:
    """"host:port,host:port" (or a list of "host:port"); IPv6 hosts in brackets."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    addresses = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        host, colon, port = item.rpartition(":")
        if not colon or not port.isdigit() or not host:
            raise ValueError(f"bootstrap address {item!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap address given")
    return addresses


def _cluster_metadata(response: Struct) -> ClusterMetadata:
    brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
    topics = {}
    for t in response.topics:
        partitions = {p.partition_index: PartitionInfo(
            p.partition_index, p.leader_id, p.leader_epoch, tuple(p.replica_nodes),
            tuple(p.isr_nodes), tuple(p.offline_replicas), p.error_code) for p in t.partitions}
        topics[t.name] = TopicInfo(t.name, t.topic_id, partitions, t.is_internal, t.error_code)
    return ClusterMetadata(response.cluster_id, response.controller_id, brokers, topics)


def _check_topics(metadata: ClusterMetadata, names: list[str]) -> None:
    """Raise the error of named topics the brokers answered with one (a non-retriable
    error first), naming every topic that has it."""
    errors = {}
    for name in names:
        info = metadata.topics.get(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error_code
        if code:
            errors[name] = KafkaError(code)
    if errors:
        worst = min(errors.values(), key=lambda error: error.retriable)
        named = ", ".join(repr(name) for name, error in errors.items() if error.code == worst.code)
        raise KafkaError(worst.code, f"topic {named}")


def _only(items: list, field: str, value, context: str):
    """The entry of a response array that answers for `value`."""
    for item in items:
        if getattr(item, field) == value:
            return item
    raise ProtocolViolation(f"{context}: the response has no entry for {field} {value}")


def _codec(compression: int | str) -> int:
    codec = _CODECS.get(compression, compression)
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression {compression!r}; one of {sorted(_CODECS)}")
    return codec


def _record_row(record: ProducerRecord) -> tuple:
    """The (key, value, headers, timestamp) tuple `wire.records.build_batch` takes."""
    timestamp = record.timestamp if record.timestamp is not None else int(time.time() * 1000)
    return record.key, record.value, record.headers, timestamp


def visible_batches(result: FetchResult, isolation_level: int,
                    max_decompressed_bytes: int) -> tuple[list, int]:
    """The data batches a consumer sees in `result`, as (header, batch view) pairs, and
    the offset to fetch next.

    Control batches are never returned, nor batches wholly before the fetch offset (the
    first one returned may still start before it: brokers return whole batches). Under
    READ_COMMITTED, data batches of a producer are skipped from the first offset of each
    aborted transaction up to its ABORT marker.
    """
    batches = []
    next_offset = result.fetch_offset
    pending_aborts = collections.deque(sorted(result.aborted_transactions,
                                              key=lambda a: a.first_offset))
    aborting: set[int] = set()
    read_committed = isolation_level == READ_COMMITTED
    for header, batch in iter_batches(result.records):
        next_offset = max(next_offset, header.last_offset + 1)
        if read_committed:
            while pending_aborts and pending_aborts[0].first_offset <= header.last_offset:
                aborting.add(pending_aborts.popleft().producer_id)
        if header.is_control:
            if read_committed and header.producer_id in aborting:
                markers = decode_batch(batch, max_decompressed_bytes)
                if any(decode_control_record(m).type == CONTROL_ABORT for m in markers):
                    aborting.discard(header.producer_id)
            continue
        if header.last_offset < result.fetch_offset:
            continue
        if read_committed and header.is_transactional and header.producer_id in aborting:
            continue
        batches.append((header, batch))
    return batches, next_offset


_SCRAM_SALT_BYTES = 32  # random bytes of each new SCRAM salt


def _acl_filter_fields(acl_filter: AclBindingFilter) -> dict:
    """A filter as the fields of DescribeAcls' request and of DeleteAcls' filters."""
    return dict(resource_type_filter=acl_filter.resource_type,
                resource_name_filter=acl_filter.resource_name,
                pattern_type_filter=acl_filter.pattern_type, principal_filter=acl_filter.principal,
                host_filter=acl_filter.host, operation=acl_filter.operation,
                permission_type=acl_filter.permission)


def _check_binding(binding: AclBinding) -> None:
    """An ACL to create names one resource type, LITERAL or PREFIXED, one operation and
    ALLOW or DENY: not ANY, MATCH or UNKNOWN."""
    for kind, value in ((ResourceType, binding.resource_type), (PatternType, binding.pattern_type),
                        (Operation, binding.operation), (Permission, binding.permission)):
        member = kind.of(value)
        if member in (kind(0), kind(1)) or member is PatternType.MATCH:
            raise ValueError(f"ACL {_acl_text(binding)}: {member.kafka_name} is not a definite "
                             f"{kind.__name__}")


def _check_filter(acl_filter: AclBindingFilter) -> None:
    """UNKNOWN matches nothing, and Kafka refuses the request (it closes the connection)."""
    for kind, value in ((ResourceType, acl_filter.resource_type),
                        (PatternType, acl_filter.pattern_type),
                        (Operation, acl_filter.operation), (Permission, acl_filter.permission)):
        if kind.of(value) == 0:
            raise ValueError(f"{acl_filter}: an UNKNOWN {kind.__name__} matches nothing")


def _acl_text(binding: AclBinding) -> str:
    """"Allow User:alice from * to Read Topic 'events' (Literal)": an ACL in errors."""
    return (f"{binding.permission.kafka_name} {binding.principal} from {binding.host} to "
            f"{binding.operation.kafka_name} {binding.resource_type.kafka_name} "
            f"{binding.resource_name!r} ({binding.pattern_type.kafka_name})")
