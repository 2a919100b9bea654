"""The cluster as handlers see it: one read-only view of brokers, the controller, topics
with their ids, and each partition's replicas, leader, leader epoch and ISR.

Metadata, DescribeCluster, FindCoordinator and the admin handlers answer from a
`ClusterMetadata`, never from the broker's own identity or its logs, so that a
ZooKeeper-backed view can replace the single-node one without touching them.
`LocalMetadata` is the single node: the only broker, the controller, and the leader of
every partition with ISR = {itself}, as the partitions (`broker.replica.partition`) say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol

from wire.error_codes import ErrorCode

from broker.errors import BrokerError


@dataclass(frozen=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionState:
    index: int
    leader_id: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


class ClusterMetadata(Protocol):
    cluster_id: str

    @property
    def controller_id(self) -> int: ...

    def brokers(self) -> list[BrokerEndpoint]: ...

    def broker(self, node_id: int) -> BrokerEndpoint | None: ...

    def partition_states(self, topic) -> list[PartitionState]: ...

    def check_replication_factor(self, replication_factor: int) -> None: ...

    def check_assignment(self, replicas: Iterable[int]) -> None: ...

    def coordinator(self, key_type: int, key: str) -> BrokerEndpoint | None: ...


class LocalMetadata:
    """The single node's view."""

    def __init__(self, node_id: int, endpoint, topics):
        """`endpoint()` gives the advertised (host, port); `topics` is the TopicManager."""
        self.node_id = node_id
        self.cluster_id = ""
        self._endpoint = endpoint
        self._topics = topics

    @property
    def controller_id(self) -> int:
        return self.node_id

    def brokers(self) -> list[BrokerEndpoint]:
        host, port = self._endpoint()
        return [BrokerEndpoint(self.node_id, host, port)]

    def broker(self, node_id: int) -> BrokerEndpoint | None:
        return next((b for b in self.brokers() if b.node_id == node_id), None)

    def partition_states(self, topic) -> list[PartitionState]:
        return [p.state for p in topic.partitions]

    def check_replication_factor(self, replication_factor: int) -> None:
        """INVALID_REPLICATION_FACTOR unless `replication_factor` (-1: the default) fits the
        live brokers."""
        live = len(self.brokers())
        if replication_factor == -1 or 1 <= replication_factor <= live:
            return
        raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {replication_factor} is not between 1 and the "
                          f"{live} available broker(s)")

    def check_assignment(self, replicas: Iterable[int]) -> None:
        """A manual assignment names live brokers, each once (INVALID_REPLICA_ASSIGNMENT)."""
        replicas = list(replicas)
        live = {b.node_id for b in self.brokers()}
        if not replicas or len(set(replicas)) != len(replicas) or not set(replicas) <= live:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"replicas {replicas} must be distinct live brokers among {sorted(live)}")

    def coordinator(self, key_type: int, key: str) -> BrokerEndpoint | None:
        """The broker leading the partition of `__consumer_offsets` (key type 0, a group
        id) or `__transaction_state` (1, a transactional id) that `key` maps to: here,
        this one; None would mean that partition has no leader."""
        return self.broker(self.node_id)
