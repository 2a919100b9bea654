"""The `__consumer_offsets` topic: committed offsets and group metadata, durably.

Records use Kafka's layout so tools that read the topic can follow it:
- key OffsetCommitKey (key version 1: group, topic, partition) with value
  OffsetCommitValue v3 (offset, leader epoch, metadata, commit timestamp);
- key GroupMetadataKey (key version 2: group) with value GroupMetadataValue v3;
- a null value (tombstone) deletes the key.
A group lives in partition `abs(javaHash(group)) % partitions`, as in Kafka.
Transactional offset commits (TxnOffsetCommit) are written as a transactional batch
of the producer (its id and epoch, no sequence); they take effect at the COMMIT
marker the transaction coordinator later writes to the partition and are dropped at
an ABORT marker, at run time and when the log is replayed. Of two commits of one
partition's offset, the one later in the log wins (Kafka's rule): a transactional
commit whose marker comes after a later plain commit does not replace it.

The topic is compacted by the log cleaner (cleanup.policy=compact, as Kafka creates
it): only the latest record of each key remains, tombstones go after
delete.retention.ms, aborted transactional records go and so, once nothing of their
transaction is left, do their markers. Replay therefore meets offset gaps, keys whose
history is gone, markers without records and records of committed transactions
whose marker may be the only trace left; it yields the same state as the whole log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from wire.messages import (GROUP_METADATA_KEY, GROUP_METADATA_VALUE, OFFSET_COMMIT_KEY,
                           OFFSET_COMMIT_VALUE)
from wire.primitives import DecodeError
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                          build_batch, decode_control_record, iter_batches)


TOPIC = "__consumer_offsets"
_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSION = 3
_GROUP_VALUE_VERSION = 3
_MAX_DECOMPRESSED = 256 * 1024 * 1024
_RECORDS_PER_BATCH = 500


def partition_for(group: str, partitions: int) -> int:
    """Kafka's placement: Utils.abs(group.hashCode()) % partitions."""
    units = group.encode("utf-16-be")  # Java's String.hashCode runs over UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


def offset_record(group: str, topic: str, partition: int, value: CommittedOffset | None):
    key = OFFSET_COMMIT_KEY.encode_versioned(
        _OFFSET_KEY_VERSION, OFFSET_COMMIT_KEY(group=group, topic=topic, partition=partition))
    if value is None:
        return key, None
    body = OFFSET_COMMIT_VALUE(offset=value.offset, leader_epoch=value.leader_epoch,
                               metadata=value.metadata, commit_timestamp=value.commit_timestamp)
    return key, OFFSET_COMMIT_VALUE.encode_versioned(_OFFSET_VALUE_VERSION, body)


def group_record(group: str, metadata) -> tuple[bytes, bytes | None]:
    """`metadata` is a GROUP_METADATA_VALUE struct, or None for a tombstone."""
    key = GROUP_METADATA_KEY.encode_versioned(_GROUP_KEY_VERSION, GROUP_METADATA_KEY(group=group))
    if metadata is None:
        return key, None
    return key, GROUP_METADATA_VALUE.encode_versioned(_GROUP_VALUE_VERSION, metadata)


def batches_of(records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
               producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH) -> Iterable[bytearray]:
    """Batches of at most 500 records; transactional ones when a producer is given."""
    for i in range(0, len(records), _RECORDS_PER_BATCH):
        chunk = records[i:i + _RECORDS_PER_BATCH]
        yield bytearray(build_batch([(k, v, (), timestamp_ms) for k, v in chunk],
                                    producer_id=producer_id, producer_epoch=producer_epoch,
                                    transactional=producer_id != NO_PRODUCER_ID))


def read_entries(partition):
    """Everything stored in one partition of the topic, in order: ("record", key, value,
    producer id, position) for each keyed record (producer id -1 unless the batch is
    transactional; position: the log end after its batch, which orders writes) and
    ("marker", producer id, committed) for each transaction marker."""
    for header, records in partition.decoded_batches(_MAX_DECOMPRESSED):
        if header.is_control:
            try:
                marker = decode_control_record(records[0]) if records else None
            except DecodeError:
                marker = None
            if marker is not None and marker.type in (CONTROL_COMMIT, CONTROL_ABORT):
                yield "marker", header.producer_id, marker.type == CONTROL_COMMIT
            continue
        producer = header.producer_id if header.is_transactional else NO_PRODUCER_ID
        position = header.last_offset + 1
        for record in records:
            if record.key is not None:
                yield "record", record.key, record.value, producer, position


def read_records(partition):
    """Every (key bytes, value bytes or None) of non-control batches in one partition,
    in order (for logs without transactions)."""
    for entry in read_entries(partition):
        if entry[0] == "record":
            yield entry[1], entry[2]


def decode_record(key: bytes, value: bytes | None):
    """("offset", (group, topic, partition), CommittedOffset|None) or
    ("group", group, GroupMetadataValue|None); None for a key we do not know."""
    try:
        version = int.from_bytes(key[:2], "big", signed=True)
        if version in (0, 1):
            _, k = OFFSET_COMMIT_KEY.decode_versioned(key)
            if value is None:
                return "offset", (k.group, k.topic, k.partition), None
            _, v = OFFSET_COMMIT_VALUE.decode_versioned(value)
            return "offset", (k.group, k.topic, k.partition), CommittedOffset(
                v.offset, v.leader_epoch, v.metadata, v.commit_timestamp)
        if version == _GROUP_KEY_VERSION:
            _, k = GROUP_METADATA_KEY.decode_versioned(key)
            if value is None:
                return "group", k.group, None
            _, v = GROUP_METADATA_VALUE.decode_versioned(value)
            return "group", k.group, v
    except DecodeError:
        return None
    return None


def append_records(partition, records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                   producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
    """Append records to a partition of the offsets topic (one batch per chunk), as
    part of a producer's transaction when `producer_id` is given; the log end offset
    after them (what the high watermark must reach for them to be committed)."""
    for batch in batches_of(records, timestamp_ms, producer_id, producer_epoch):
        view = memoryview(batch)
        header = next(iter(iter_batches(view)))[0]
        partition.append_as_leader(header, view, required_acks=-1)
    return partition.log_end_offset
