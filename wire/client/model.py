"""The values the client takes and returns: plain, immutable, with Kafka's meanings."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from wire.errors import KafkaError
from wire.messages import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION
from wire.records import Record

__all__ = [
    "EARLIEST", "LATEST", "MAX_TIMESTAMP", "READ_UNCOMMITTED", "READ_COMMITTED",
    "TOPIC_RESOURCE", "BROKER_RESOURCE", "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG",
    "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG", "UNKNOWN_CONFIG",
    "SET_CONFIG", "DELETE_CONFIG", "APPEND_CONFIG", "SUBTRACT_CONFIG",
    "AbortedTransaction", "BrokerInfo", "ClusterDescription", "ClusterMetadata",
    "CommittedOffset", "ConfigEntry", "ConfigSynonym", "Coordinator", "CreatedTopic",
    "FetchResult", "FetchedRecords", "GroupDescription", "GroupMember", "ListedGroup",
    "NewTopic", "OffsetAndTimestamp", "PartitionInfo", "ProduceResult", "ProducerRecord",
    "TopicInfo",
]

# ListOffsets timestamps with special meanings.
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # the offset of the record with the largest timestamp (ListOffsets v7+)

# Fetch and ListOffsets isolation levels.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# DescribeConfigs resource types (Kafka's ConfigResource.Type) ...
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4

# ... and where a config's value comes from (Kafka's ConfigEntry.ConfigSource).
UNKNOWN_CONFIG = 0  # also what DescribeConfigs v0 reports for a non-default value
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType); APPEND and SUBTRACT
# are for list-typed configs.
SET_CONFIG = 0
DELETE_CONFIG = 1
APPEND_CONFIG = 2
SUBTRACT_CONFIG = 3

# ElectLeaders' election types.
PREFERRED_ELECTION = 0  # the first replica of the assignment, when alive and in sync
UNCLEAN_ELECTION = 1  # any live replica, for a partition with no live in-sync leader


class ProducerRecord(NamedTuple):
    """A record to produce; a timestamp of None means now (CreateTime)."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None


@dataclass(frozen=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader_id: int  # -1 while no leader is available
    leader_epoch: int  # -1 when the broker does not report it (Metadata < v7)
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error_code: int = 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID  # all zeros when the broker does not report it (Metadata < v10)
    partitions: dict[int, PartitionInfo]
    is_internal: bool = False
    error_code: int = 0


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int  # -1 when unknown
    brokers: dict[int, BrokerInfo]
    topics: dict[str, TopicInfo]


@dataclass(frozen=True)
class NewTopic:
    """A topic for `create_topics`; -1 leaves partitions or replication to the broker."""

    partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class CreatedTopic:
    """One topic's outcome in `create_topics`; `error` is None on success."""

    name: str
    error: KafkaError | None
    topic_id: uuid.UUID
    partitions: int  # -1 when the broker does not report it (CreateTopics < v5)
    replication_factor: int


@dataclass(frozen=True)
class ProduceResult:
    topic: str
    partition: int
    base_offset: int  # -1 for acks=0, which gets no answer
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False  # the broker had this batch already (idempotent retry)


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


@dataclass(frozen=True)
class FetchResult:
    topic: str
    partition: int
    fetch_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTransaction, ...]
    preferred_read_replica: int
    records: memoryview  # whole batches, possibly followed by one cut-off batch


@dataclass(frozen=True)
class FetchedRecords:
    """Decoded records at or after the fetch offset, and where to fetch next."""

    result: FetchResult
    records: list[Record]
    next_offset: int


class OffsetAndTimestamp(NamedTuple):
    offset: int  # -1 when no offset matches the timestamp
    timestamp: int
    leader_epoch: int


class CommittedOffset(NamedTuple):
    offset: int  # -1 when the group has committed nothing for the partition
    metadata: str | None
    leader_epoch: int


class Coordinator(NamedTuple):
    node_id: int
    host: str
    port: int


@dataclass(frozen=True)
class ClusterDescription:
    """DescribeCluster's answer."""

    cluster_id: str
    controller_id: int  # -1 when unknown
    brokers: dict[int, BrokerInfo]


class TransactionDescription(NamedTuple):
    """A transactional id's state at its coordinator (DescribeTransactions)."""

    transactional_id: str
    state: str  # Kafka's state names: Empty, Ongoing, PrepareCommit, CompleteCommit, ...
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int  # when the current transaction began; -1 when none is open
    partitions: tuple[tuple[str, int], ...]


class ListedTransaction(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int  # the broker that listed it


class ListedGroup(NamedTuple):
    group_id: str
    protocol_type: str  # "consumer" for consumer groups, "" for groups that only commit
    state: str  # "" when the broker does not report it (ListGroups < v4)
    group_type: str  # "classic" or "consumer"; "" when not reported (ListGroups < v5)
    coordinator_id: int  # the broker that listed it


@dataclass(frozen=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None  # None for dynamic members (and DescribeGroups < v4)
    client_id: str
    client_host: str
    metadata: bytes  # the protocol's subscription bytes (for "consumer": the consumer protocol)
    assignment: bytes  # what the leader assigned to this member

    def consumer_subscription(self) -> tuple[str, ...]:
        """The topics of a consumer-protocol subscription (`metadata`); () when empty.
        Raises `wire.primitives.DecodeError` for bytes of another protocol."""
        if not self.metadata:
            return ()
        _, subscription = CONSUMER_PROTOCOL_SUBSCRIPTION.decode_versioned(self.metadata)
        return tuple(subscription.topics)

    def consumer_assignment(self) -> dict[str, tuple[int, ...]]:
        """{topic: partitions} of a consumer-protocol `assignment`; {} when empty.
        Raises `wire.primitives.DecodeError` for bytes of another protocol."""
        if not self.assignment:
            return {}
        _, assignment = CONSUMER_PROTOCOL_ASSIGNMENT.decode_versioned(self.assignment)
        assigned: dict[str, tuple[int, ...]] = {}
        for item in assignment.assigned_partitions:
            assigned[item.topic] = tuple(sorted({*assigned.get(item.topic, ()), *item.partitions}))
        return assigned


@dataclass(frozen=True)
class GroupDescription:
    """A group as its coordinator describes it. A group the coordinator does not know
    is reported by Kafka (DescribeGroups < v6) as state "Dead" with no members."""

    group_id: str
    state: str  # "Empty", "Stable", "PreparingRebalance", "CompletingRebalance", "Dead"
    protocol_type: str
    protocol: str  # the chosen assignor for consumer groups ("range", ...); "" when none
    members: tuple[GroupMember, ...]
    coordinator: Coordinator
    authorized_operations: int = -2147483648  # not requested


class ConfigSynonym(NamedTuple):
    name: str
    value: str | None
    source: int


@dataclass(frozen=True)
class ConfigEntry:
    """One config of a resource. `source` is UNKNOWN_CONFIG for non-default values
    reported by DescribeConfigs v0, which only says whether a value is the default."""

    name: str
    value: str | None  # None for sensitive values
    source: int
    is_default: bool
    read_only: bool
    is_sensitive: bool
    synonyms: tuple[ConfigSynonym, ...] = ()
