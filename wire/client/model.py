"""The values the client takes and returns: plain, immutable, with Kafka's meanings."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

from wire.errors import KafkaError
from wire.records import Record

__all__ = [
    "EARLIEST", "LATEST", "MAX_TIMESTAMP", "READ_UNCOMMITTED", "READ_COMMITTED",
    "AbortedTransaction", "BrokerInfo", "ClusterMetadata", "CommittedOffset", "Coordinator",
    "CreatedTopic", "FetchResult", "FetchedRecords", "NewTopic", "OffsetAndTimestamp",
    "PartitionInfo", "ProduceResult", "ProducerRecord", "TopicInfo",
]

# ListOffsets timestamps with special meanings.
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # the offset of the record with the largest timestamp (ListOffsets v7+)

# Fetch and ListOffsets isolation levels.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


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
