"""The cluster as handlers see it: one read-only view of brokers, the controller, topics
with their ids, and each partition's replicas, leader, leader epoch and ISR.

Metadata, DescribeCluster, FindCoordinator and the admin handlers answer from a
`ClusterMetadata`, never from the broker's own identity or its logs.
- `LocalMetadata` is the single node: the only broker, the controller, and the leader of
  every partition with ISR = {itself}, as the partitions (`broker.replica.partition`) say.
- `MetadataCache` is a cluster broker's view, as Kafka's brokers keep it: what the
  controller's UpdateMetadata requests said (live brokers, the controller, every topic's
  partitions with leader, epoch, replicas, ISR and offline replicas). It changes only by
  those requests; one from an older controller epoch is refused. Partition states are
  incremental (only the partitions listed change); a partition whose leader is -2
  (Kafka's LeaderDuringDelete) is being deleted and leaves the view. Before the first
  of them the view lists the brokers the broker knows of itself (`seed`): itself once
  its listeners are bound, and those registered in ZooKeeper once it registered, where
  a Kafka broker lists none (a client told of no broker has nowhere to go next).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable, Protocol

from wire.error_codes import ErrorCode

from broker.errors import BrokerError
from broker.coordinator_runtime import partition_for
from broker.replica.partition import PartitionState

# The topic of each FindCoordinator key type: 0 a group, 1 a transactional id.
COORDINATOR_TOPICS = {0: "__consumer_offsets", 1: "__transaction_state"}


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


LEADER_DURING_DELETE = -2
_INTERNAL_TOPICS = frozenset(COORDINATOR_TOPICS.values())


@dataclass
class MetadataTopic:
    """A topic as a cluster broker's view knows it (the single node's `Topic` has the
    same name, topic_id, internal and encoded_metadata)."""

    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    # The Metadata handler's encoded entries per version (see broker.handlers.metadata).
    encoded_metadata: dict[int, tuple] = field(default_factory=dict, compare=False, repr=False)

    @property
    def internal(self) -> bool:
        return self.name in _INTERNAL_TOPICS


class ClusterMetadata(Protocol):
    cluster_id: str

    def topics(self) -> Iterable: ...

    def topic(self, name: str): ...

    def topic_by_id(self, topic_id: uuid.UUID): ...

    @property
    def controller_id(self) -> int: ...

    def brokers(self, listener: str | None = None) -> list[BrokerEndpoint]: ...

    def broker(self, node_id: int, listener: str | None = None) -> BrokerEndpoint | None: ...

    def partition_states(self, topic) -> list[PartitionState]: ...

    def partition_state(self, name: str, partition: int) -> PartitionState | None: ...

    def check_replication_factor(self, replication_factor: int) -> None: ...

    def check_assignment(self, replicas: Iterable[int]) -> None: ...

    def coordinator(self, key_type: int, key: str, listener: str | None = None) -> BrokerEndpoint | None: ...


class LocalMetadata:
    """The single node's view."""

    def __init__(self, node_id: int, endpoint, topics):
        """`endpoint(listener)` gives a listener's advertised (host, port), the first
        listener's for None; `topics` is the TopicManager."""
        self.node_id = node_id
        self.cluster_id = ""
        self._endpoint = endpoint
        self._topics = topics

    @property
    def controller_id(self) -> int:
        return self.node_id

    def topics(self):
        return self._topics.topics.values()

    def topic(self, name: str):
        return self._topics.topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID):
        return self._topics.by_id.get(topic_id)

    def brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """This broker as clients on `listener` reach it."""
        host, port = self._endpoint(listener)
        return [BrokerEndpoint(self.node_id, host, port)]

    def broker(self, node_id: int, listener: str | None = None) -> BrokerEndpoint | None:
        return next((b for b in self.brokers(listener) if b.node_id == node_id), None)

    def partition_states(self, topic) -> list[PartitionState]:
        return [topic.partitions[i].state for i in sorted(topic.partitions)]

    def partition_state(self, name: str, partition: int) -> PartitionState | None:
        topic = self._topics.topics.get(name)
        found = topic.partitions.get(partition) if topic is not None else None
        return found.state if found is not None else None

    def check_replication_factor(self, replication_factor: int) -> None:
        check_replication_factor(len(self.brokers()), replication_factor)

    def check_assignment(self, replicas: Iterable[int]) -> None:
        """A manual assignment names live brokers, each once (INVALID_REPLICA_ASSIGNMENT)."""
        replicas = list(replicas)
        live = {b.node_id for b in self.brokers()}
        if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= live:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"replicas {replicas} must be distinct live brokers among {sorted(live)}")

    def coordinator(self, key_type: int, key: str, listener: str | None = None) -> BrokerEndpoint | None:
        """The broker leading the partition of `__consumer_offsets` (key type 0, a group
        id) or `__transaction_state` (1, a transactional id) that `key` maps to: here,
        this one; None would mean that partition has no leader."""
        return self.broker(self.node_id, listener)


def check_replication_factor(live: int, replication_factor: int) -> None:
    """INVALID_REPLICATION_FACTOR unless `replication_factor` (-1: the default) fits the
    `live` brokers."""
    if replication_factor == -1 or 1 <= replication_factor <= live:
        return
    raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                      f"replication factor {replication_factor} is not between 1 and the "
                      f"{live} available broker(s)")


class MetadataCache:
    """A cluster broker's view, kept from the controller's UpdateMetadata requests."""

    def __init__(self, node_id: int, inter_broker_listener: str = "PLAINTEXT"):
        """`inter_broker_listener`: whose endpoints the broker's own connections use (a
        lookup without a listener)."""
        self.node_id = node_id
        self.cluster_id = ""
        self.controller_epoch = -1
        self._controller_id = -1
        self._inter_broker_listener = inter_broker_listener
        self._brokers: dict[int, dict[str, BrokerEndpoint]] = {}  # node -> listener -> endpoint
        self._topics: dict[str, MetadataTopic] = {}
        self._by_id: dict[uuid.UUID, MetadataTopic] = {}

    # -- updates ------------------------------------------------------------------------
    def update(self, controller_id: int, controller_epoch: int, brokers: dict[int, dict[str, BrokerEndpoint]],
               topics: Iterable[tuple[str, uuid.UUID, list[PartitionState]]]) -> None:
        """Apply one UpdateMetadata: every live broker (its endpoint on each of its
        listeners), and the partitions it lists.
        BrokerError(STALE_CONTROLLER_EPOCH) when an older controller sent it."""
        if controller_epoch < self.controller_epoch:
            raise BrokerError(ErrorCode.STALE_CONTROLLER_EPOCH,
                              f"controller epoch {controller_epoch} is older than {self.controller_epoch}")
        self.controller_epoch = controller_epoch
        self._controller_id = controller_id
        self._brokers = dict(brokers)
        for name, topic_id, states in topics:
            topic = self._topics.get(name)
            if topic is None or (topic_id.int and topic.topic_id != topic_id):
                if topic is not None:  # deleted and created again under the same name
                    self._forget(topic)
                topic = self._topics[name] = MetadataTopic(name, topic_id)
                self._by_id[topic_id] = topic
            for state in states:
                if state.leader_id == LEADER_DURING_DELETE:
                    topic.partitions.pop(state.index, None)
                else:
                    topic.partitions[state.index] = state
            if not topic.partitions:
                self._forget(topic)

    def seed(self, brokers: dict[int, dict[str, BrokerEndpoint]]) -> None:
        """Add brokers (their endpoint per listener) known without the controller, while
        no UpdateMetadata has come: the controller's view replaces them."""
        if self.controller_epoch < 0:
            self._brokers = {**self._brokers, **brokers}

    def _forget(self, topic: MetadataTopic) -> None:
        self._topics.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)

    # -- the view -----------------------------------------------------------------------
    @property
    def controller_id(self) -> int:
        return self._controller_id

    def topics(self):
        return self._topics.values()

    def topic(self, name: str) -> MetadataTopic | None:
        return self._topics.get(name)

    def topic_by_id(self, topic_id: uuid.UUID) -> MetadataTopic | None:
        return self._by_id.get(topic_id)

    def brokers(self, listener: str | None = None) -> list[BrokerEndpoint]:
        """The live brokers as clients on `listener` reach them (the inter-broker listener
        for None); a broker without that listener is left out, as Kafka leaves it out."""
        listener = listener or self._inter_broker_listener
        return [self._brokers[i][listener] for i in sorted(self._brokers) if listener in self._brokers[i]]

    def broker(self, node_id: int, listener: str | None = None) -> BrokerEndpoint | None:
        return self._brokers.get(node_id, {}).get(listener or self._inter_broker_listener)

    def partition_states(self, topic) -> list[PartitionState]:
        return [topic.partitions[i] for i in sorted(topic.partitions)]

    def partition_state(self, name: str, partition: int) -> PartitionState | None:
        topic = self._topics.get(name)
        return topic.partitions.get(partition) if topic else None

    def check_replication_factor(self, replication_factor: int) -> None:
        check_replication_factor(len(self._brokers), replication_factor)

    def check_assignment(self, replicas: Iterable[int]) -> None:
        replicas = list(replicas)
        live = set(self._brokers)
        if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= live:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"replicas {replicas} must be distinct live brokers among {sorted(live)}")

    def coordinator(self, key_type: int, key: str, listener: str | None = None) -> BrokerEndpoint | None:
        """The live leader of the partition of `__consumer_offsets` (key type 0, a group
        id) or `__transaction_state` (1, a transactional id) that `key` maps to; None
        while that topic does not exist or the partition has no live leader."""
        topic = self._topics.get(COORDINATOR_TOPICS[key_type])
        if topic is None or not topic.partitions:
            return None
        state = topic.partitions.get(partition_for(key, len(topic.partitions)))
        return None if state is None or state.leader_id < 0 else self.broker(state.leader_id, listener)
