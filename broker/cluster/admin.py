"""Topic administration in a cluster: what CreateTopics, CreatePartitions, DeleteTopics
and a Metadata auto-creation do on any broker, written to ZooKeeper as Kafka's
AdminZkClient writes it; the controller acts on the znodes.

- Create: the topic's configs go to /config/topics/<t> first, then its assignment and a
  new topic id to /brokers/topics/<t> (the znode the controller watches); a topic that
  exists there is TOPIC_ALREADY_EXISTS. Replicas are placed over the brokers registered
  in /brokers/ids with Kafka's placement (rack-aware when every broker has a rack), or
  taken from a manual assignment naming registered brokers.
- Add partitions: the assignment grows, written on the version it was read at (a lost
  race answers INVALID_PARTITIONS with the reason); a topic with a partition being
  reassigned is REASSIGNMENT_IN_PROGRESS, as Kafka refuses it.
- The internal topics (`__consumer_offsets`, `__transaction_state`) are created on the
  first FindCoordinator for one of their keys, as Kafka creates them: the configured
  partitions and replication factor (offsets.topic.* / transaction.state.log.*),
  compacted, the transaction log with min.insync.replicas =
  transaction.state.log.min.isr. With fewer live brokers than the replication factor
  the creation fails (logged) and is tried again at the next lookup.
- Delete: /admin/delete_topics/<t>.
- Configs: /config/topics/<t> replaced and a /config/changes/config_change_ notification
  written in one multi-op; every broker re-reads the topic's configs on it
  (`broker.cluster.membership`). Dynamic broker configs the same way in
  /config/brokers/<id>, or /config/brokers/<default> for the cluster default.
- The request is answered once this broker's metadata view shows the change (a created
  topic with a leader for every partition, a deleted one gone), or when the request's
  timeout passes first: REQUEST_TIMED_OUT, as Kafka answers a change that did not
  propagate in time (the change itself goes on).

ZooKeeper calls block, so they run in a worker thread; a broker cut off from ZooKeeper
answers such requests with REQUEST_TIMED_OUT rather than stalling its other requests.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from kazoo.exceptions import KazooException
from wire.error_codes import ErrorCode

from broker.client_quotas import UNBOUNDED, ControllerMutationQuota
from broker.cluster import placement
from broker.cluster.metadata import COORDINATOR_TOPICS
from broker.zookeeper.layout import DEFAULT_ENTITY, TopicAssignment
from broker.zookeeper.store import StaleVersion
from broker.config import ConfigError
from broker.errors import BrokerError
from broker.replica.topics import INTERNAL_REQUIRED_CONFIGS, MAX_PARTITIONS, checked_overrides, validate_topic_name

log = logging.getLogger("sluice.admin")

METADATA_CHANGED = ("metadata",)  # the DelayedOperations key woken by every UpdateMetadata


async def _zk(function, *args):
    """Run a blocking ZkStore call in a worker thread; ZooKeeper trouble is answered as a
    retriable timeout."""
    try:
        return await asyncio.to_thread(function, *args)
    except KazooException as exc:
        raise BrokerError(ErrorCode.REQUEST_TIMED_OUT,
                          f"ZooKeeper is unavailable: {type(exc).__name__} {exc}") from None


def _live_brokers(store) -> dict[int, str | None]:
    """Registered brokers and their racks (None: no rack)."""
    brokers = {}
    for broker_id in store.broker_ids():
        registration = store.broker(broker_id)
        if registration is not None:
            brokers[broker_id] = registration.rack
    return brokers


def broker_entity(level: str) -> str:
    """The /config/brokers entity of a dynamic config level ("": the cluster default)."""
    return level or DEFAULT_ENTITY


class ClusterTopicAdmin:
    """The cluster's TopicAdmin (broker.topic_admin): ZooKeeper, as the module says."""

    def __init__(self, broker):
        self._broker = broker
        self._creating: dict[str, asyncio.Task] = {}  # internal topics being created

    @property
    def _store(self):
        return self._broker.zk

    def _overrides(self, configs: dict[str, str | None]) -> dict[str, str]:
        try:
            return self._broker.config.topic_overrides(configs)
        except ConfigError as exc:
            raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           assignments: list[tuple[int, list[int]]] | None,
                           configs: dict[str, str | None], validate_only: bool,
                           timeout_ms: int, mutations: ControllerMutationQuota = UNBOUNDED
                           ) -> tuple[uuid.UUID, int, int, dict[str, str]]:
        """(topic id, partitions, replication factor, overrides) of the created topic
        (the zero id when only validating); -1 replication factor is
        default.replication.factor. The partitions are recorded in `mutations` once the
        checks passed."""
        validate_topic_name(name)
        if replication_factor == -1:
            replication_factor = self._broker.config.default_replication_factor
        overrides = self._overrides(configs)
        if not assignments and not 1 <= partitions <= MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"number of partitions must be between 1 and {MAX_PARTITIONS}, not {partitions}")
        store = self._store
        existing = await _zk(store.topics)
        if name in existing:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        collision = name.replace(".", "_")
        if any(t.replace(".", "_") == collision for t in existing):
            raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                              f"topic {name!r} collides with an existing topic ('.' and '_' are alike)")
        brokers = await _zk(_live_brokers, store)
        if assignments:
            assignment = placement.manual_assignment(brokers, assignments)
        else:
            assignment = placement.assign_replicas(brokers, partitions, replication_factor)
        count, factor = len(assignment), len(assignment[0])
        if validate_only:
            return uuid.UUID(int=0), count, factor, overrides
        mutations.record(count)
        topic_id = uuid.uuid4()
        created = await _zk(store.create_topic_with_configs, name,
                            TopicAssignment(topic_id, assignment), overrides)
        if not created:
            raise BrokerError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        await self._wait(lambda: self._has_leaders(name, count), timeout_ms,
                         f"topic {name!r} was created; its leaders were not known within {timeout_ms} ms")
        return topic_id, count, factor, overrides

    def auto_create_topic(self, name: str) -> None:
        """None: the topic is created in the background (`ClusterMembership.create_topic_soon`)."""
        self._broker.cluster.create_topic_soon(name)

    def ensure_internal_topic(self, name: str) -> None:
        """Create internal topic `name` in the background unless it exists or is being
        created (see the module docstring)."""
        if name in self._creating or self._broker.metadata.topic(name) is not None:
            return
        self._creating[name] = asyncio.get_running_loop().create_task(self._create_internal(name))

    async def _create_internal(self, name: str) -> None:
        cfg = self._broker.config
        if name == COORDINATOR_TOPICS[0]:
            partitions, factor = cfg.offsets_topic_num_partitions, cfg.offsets_topic_replication_factor
            configs = {"segment.bytes": str(cfg.offsets_topic_segment_bytes), "compression.type": "producer"}
        else:
            partitions = cfg.transaction_state_log_num_partitions
            factor = cfg.transaction_state_log_replication_factor
            configs = {"segment.bytes": str(cfg.transaction_state_log_segment_bytes),
                       "min.insync.replicas": str(cfg.transaction_state_log_min_isr)}
        configs.update(INTERNAL_REQUIRED_CONFIGS)
        try:
            await self.create_topic(name, partitions, factor, None, configs, False, timeout_ms=0)
            log.info("created internal topic %s: %d partitions, replication factor %d", name,
                     partitions, factor)
        except BrokerError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                log.warning("cannot create internal topic %s yet: %s", name, exc)
        finally:
            del self._creating[name]

    async def create_partitions(self, name: str, count: int,
                                assignments: list[list[int]] | None, validate_only: bool,
                                timeout_ms: int, mutations: ControllerMutationQuota = UNBOUNDED) -> None:
        if count > MAX_PARTITIONS:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS, f"at most {MAX_PARTITIONS} partitions")
        store = self._store
        found = await _zk(store.topic_assignment, name)
        if found is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        current: TopicAssignment = found.value
        if current.adding_replicas or current.removing_replicas:
            raise BrokerError(ErrorCode.REASSIGNMENT_IN_PROGRESS,
                              f"a partition reassignment is in progress for the topic {name!r}")
        existing = [current.partitions[p] for p in sorted(current.partitions)]
        brokers = await _zk(_live_brokers, store)
        added = placement.add_partitions(brokers, existing, count, assignments=assignments)
        if validate_only:
            return
        mutations.record(len(added))
        grown = TopicAssignment(current.topic_id, {**current.partitions, **added},
                                current.adding_replicas, current.removing_replicas)
        try:
            await _zk(store.set_topic_assignment, name, grown, found.zk_version)
        except StaleVersion:
            raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                              f"topic {name!r} changed while its partitions were being added; "
                              f"try again") from None
        await self._wait(lambda: self._has_leaders(name, count), timeout_ms,
                         f"partitions of {name!r} were added; their leaders were not known "
                         f"within {timeout_ms} ms")

    async def delete_topic(self, name: str, timeout_ms: int,
                           mutations: ControllerMutationQuota = UNBOUNDED) -> uuid.UUID:
        """The deleted topic's id."""
        store = self._store
        found = await _zk(store.topic_assignment, name)
        if found is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        mutations.record(len(found.value.partitions))
        await _zk(store.request_topic_deletion, name)
        await self._wait(lambda: self._broker.metadata.topic(name) is None, timeout_ms,
                         f"topic {name!r} is being deleted; it was not gone within {timeout_ms} ms")
        return found.value.topic_id

    async def topic_configs(self, name: str) -> dict[str, str]:
        """The topic's overrides (UNKNOWN_TOPIC_OR_PARTITION when it does not exist)."""
        store = self._store
        if await _zk(store.topic_assignment, name) is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return await _zk(store.topic_config, name)

    def check_topic_configs(self, name: str, configs: dict[str, str | None]) -> dict[str, str]:
        """The overrides `configs` would be, checked as the single node checks them."""
        return checked_overrides(self._broker.config, name, configs)

    async def set_topic_configs(self, name: str, configs: dict[str, str | None]) -> None:
        """Replace the topic's overrides: /config/topics/<t> and a /config/changes
        notification, on which every broker applies them to its replicas."""
        await _zk(self._store.set_topic_config, name, self.check_topic_configs(name, configs))

    async def broker_configs(self, level: str) -> dict[str, str]:
        """A level's dynamic broker configs: "" the cluster default, else a broker id."""
        return await _zk(self._store.broker_config, broker_entity(level))

    async def set_broker_configs(self, level: str, configs: dict[str, str]) -> None:
        """Replace a level's (validated) dynamic broker configs: /config/brokers/<entity>
        and a /config/changes notification, on which the brokers concerned apply them
        (this one at once)."""
        await _zk(self._store.set_broker_config, broker_entity(level), configs)
        self._broker.dynamic_configs.set_level(level, configs)  # read here at once, not once notified
        self._broker.topics.apply_broker_defaults()

    def _has_leaders(self, name: str, count: int) -> bool:
        topic = self._broker.metadata.topic(name)
        return topic is not None and len(topic.partitions) >= count and all(
            s.leader_id >= 0 for s in topic.partitions.values())

    async def _wait(self, done, timeout_ms: int, message: str) -> None:
        """Until `done()` after a metadata change, or REQUEST_TIMED_OUT after `timeout_ms`;
        a timeout of 0 or less does not wait (Kafka's "do not wait for the change")."""
        if timeout_ms <= 0:
            return
        clock = self._broker.clock
        deadline = clock.monotonic() + max(timeout_ms, 0) / 1000
        while not done():
            remaining = deadline - clock.monotonic()
            if remaining <= 0:
                raise BrokerError(ErrorCode.REQUEST_TIMED_OUT, message)
            await self._broker.delayed.wait([METADATA_CHANGED], remaining)
