"""An asyncio Kafka client's core: connections, metadata, routing and retries, which its
roles share: `client.producer` (sluice_client.producer: produce, transactions),
`client.consumer` (sluice_client.consumer: fetch, offsets, committed offsets) and
`client.admin` (sluice_client.admin: topics, configs, groups, ACLs, users, quotas), as
franz-go's kadm is built over its kgo client.

The client keeps state and moves bytes; every encoding is `wire`'s. It holds one
connection per broker address (so one per node id), a metadata cache filled on demand
and the coordinators it has found.

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
from typing import Awaitable, Callable, Iterable, Sequence, TypeVar

from sluice_client.admin import Admin
from sluice_client.connection import DEFAULT_MAX_RESPONSE_BYTES, BrokerConnection
from sluice_client.consumer import Consumer
from sluice_client.errors import (BrokerUnreachable, ClientError, ConnectionFailed, RequestTimedOut,
                                  UnsupportedVersion)
from sluice_client.model import GROUP_KEY, BrokerInfo, ClusterMetadata, Coordinator, PartitionInfo, TopicInfo
from sluice_client.producer import Producer
from sluice_client.responses import entry_for
from sluice_client.security import ClientSecurity
from sluice_client.versions import CLIENT_VERSIONS
from wire.error_codes import ErrorCode
from wire.errors import KafkaError, check
from wire.messages import APIS, FIND_COORDINATOR, METADATA
from wire.schema import Struct

__all__ = ["AsyncClient"]

_T = TypeVar("_T")

# A coordinator moving to another broker or loading its state, or a transaction
# coordinator still writing the markers of the id's last transaction: waited for, not counted.
_COORDINATOR_BUSY = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.CONCURRENT_TRANSACTIONS})

# The first wait for a transaction's markers (Kafka's producer retries AddPartitionsToTxn
# after 20 ms for them, not its retry.backoff.ms): they take a replicated write or two.
_MARKERS_BACKOFF = 0.02
_FIRST_BATCHED_FIND_COORDINATOR = 4


class AsyncClient:
    """A Kafka client for asyncio; usable as `async with AsyncClient("host:9092") as c`,
    then `await c.producer.produce(...)`, `await c.consumer.fetch(...)`, `await c.admin.create_topics(...)`.

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
        self._closed = False
        self.producer = Producer(self)
        self.consumer = Consumer(self)
        self.admin = Admin(self)

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
            connection = await self.any_connection()
        else:
            connection = await self.node_connection(node_id)
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
            fresh = await self.refresh_metadata(names, allow_auto_topic_creation)
            if require_topics:
                _check_topics(fresh, names or [])
            return fresh

        return await self.retrying(attempt)

    async def refresh_metadata(self, topics: list[str] | None,
                                allow_auto_topic_creation: bool = False) -> ClusterMetadata:
        """One Metadata request to any broker; the answer is merged into the cache."""
        connection = await self.any_connection()
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
            await self.refresh_metadata([topic])
            info = self._cluster.topics.get(topic)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r}")
        return info

    async def partition_info(self, topic: str, partition: int) -> tuple[TopicInfo, PartitionInfo]:
        info = await self._topic(topic)
        found = info.partitions.get(partition)
        if found is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition}")
        if found.leader_id < 0:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition}")
        return info, found

    def forget_topic(self, topic: str) -> None:
        """Drop a topic from the cache, so that the next use asks the brokers again."""
        topics = dict(self._cluster.topics)
        if topics.pop(topic, None) is not None:
            self._cluster = ClusterMetadata(self._cluster.cluster_id, self._cluster.controller_id,
                                            self._cluster.brokers, topics)

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

    async def node_connection(self, node_id: int) -> BrokerConnection:
        broker = self._cluster.brokers.get(node_id)
        if broker is None:
            await self.refresh_metadata([])
            broker = self._cluster.brokers.get(node_id)
            if broker is None:
                raise ConnectionFailed(f"broker {node_id} is not in the cluster metadata")
        return await self.named_connection(broker.host, broker.port)

    async def named_connection(self, host: str, port: int) -> BrokerConnection:
        """A connection to a broker the cluster named for a role; BrokerUnreachable when
        it cannot be had."""
        try:
            return await self._connection(host, port)
        except BrokerUnreachable:
            raise
        except ConnectionFailed as exc:
            raise BrokerUnreachable(str(exc)) from exc

    async def any_connection(self) -> BrokerConnection:
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

    async def leader_connection(self, topic: str, partition: int,
                                 ) -> tuple[BrokerConnection, TopicInfo, PartitionInfo]:
        topic_info, info = await self.partition_info(topic, partition)
        return await self.node_connection(info.leader_id), topic_info, info

    # -- retries -----------------------------------------------------------------------
    async def retrying(self, attempt: Callable[[], Awaitable[_T]],
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

    # -- coordinators ----------------------------------------------------------------------
    def known_coordinator(self, key: str, key_type: int = GROUP_KEY) -> Coordinator | None:
        """The coordinator last found for a group (key type 0) or transactional id (1)."""
        return self._coordinators.get((key_type, key))

    async def find_coordinator(self, group: str) -> Coordinator:
        """The broker coordinating consumer group `group`."""
        return await self.retrying(lambda: self._find_coordinator(group, GROUP_KEY))

    async def _find_coordinator(self, key: str, key_type: int) -> Coordinator:
        connection = await self.any_connection()
        version = connection.version(FIND_COORDINATOR)
        kind = "group" if key_type == GROUP_KEY else "transactional id"
        context = f"find coordinator of {kind} {key!r}"
        if version >= _FIRST_BATCHED_FIND_COORDINATOR:
            body = FIND_COORDINATOR.request(key_type=key_type, coordinator_keys=[key])
            answer = entry_for((await connection.request(FIND_COORDINATOR, version, body)).coordinators,
                           "key", key, context)
        else:
            body = FIND_COORDINATOR.request(key=key, key_type=key_type)
            answer = await connection.request(FIND_COORDINATOR, version, body)
        check(answer.error_code, context, answer.error_message)
        coordinator = Coordinator(answer.node_id, answer.host, answer.port)
        self._coordinators[(key_type, key)] = coordinator
        return coordinator

    async def with_coordinator(self, key: str, send: Callable[[BrokerConnection], Awaitable[_T]],
                                key_type: int = 0) -> _T:
        """`send` to the coordinator of a group (key type 0) or transactional id (1),
        finding it again after retriable errors."""
        async def attempt() -> _T:
            coordinator = self._coordinators.get((key_type, key))
            if coordinator is None:
                coordinator = await self._find_coordinator(key, key_type)
            return await send(await self.named_connection(coordinator.host, coordinator.port))

        return await self.retrying(attempt, lambda: self._coordinators.pop((key_type, key), None))

    async def from_every_broker(self, ask: Callable[[int], Awaitable[list[_T]]]) -> list[_T]:
        """What `ask(node id)` lists at each broker of the cluster, together; retried
        whole (the broker list is fetched again)."""
        async def attempt() -> list[_T]:
            brokers = (await self.refresh_metadata([])).brokers
            answers = await asyncio.gather(*(ask(node_id) for node_id in sorted(brokers)))
            return [item for answer in answers for item in answer]

        return await self.retrying(attempt)

    # -- the controller ----------------------------------------------------------------
    async def controller_connection(self) -> BrokerConnection:
        if self._cluster.controller_id < 0:
            await self.refresh_metadata([])
        if self._cluster.controller_id not in self._cluster.brokers:
            # Not reported, or not a broker we can reach (KRaft controllers are not):
            # any broker answers NOT_CONTROLLER or forwards the request.
            return await self.any_connection()
        return await self.node_connection(self._cluster.controller_id)

    def forget_controller(self) -> None:
        self._cluster = ClusterMetadata(self._cluster.cluster_id, -1, self._cluster.brokers,
                                        self._cluster.topics)


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
