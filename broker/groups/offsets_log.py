"""The `__consumer_offsets` topic: committed offsets and group metadata, durably.

Records use Kafka's layout so tools that read the topic can follow it:
- key OffsetCommitKey (key version 1: group, topic, partition) with value
  OffsetCommitValue v3 (offset, leader epoch, metadata, commit timestamp);
- key GroupMetadataKey (key version 2: group) with value GroupMetadataValue v3;
- a KIP-848 consumer group's records, Kafka 4's typed records (the key's int16 prefix is
  the record type, the key itself version 0; values version 0):
  ConsumerGroupMetadata (3: group epoch), ConsumerGroupMemberMetadata (5: a member's
  subscription), ConsumerGroupTargetAssignmentMetadata (6: the target assignment's
  epoch), ConsumerGroupTargetAssignmentMember (7: a member's target partitions),
  ConsumerGroupCurrentMemberAssignment (8: a member's epoch, state and partitions);
- a null value (tombstone) deletes the key.
A group lives in partition `abs(javaHash(group)) % partitions`, as in Kafka
(`broker.coordinator_runtime`, which reads and writes the topic's batches).
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

from wire.messages import (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
                           CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
                           CONSUMER_GROUP_MEMBER_METADATA_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE,
                           CONSUMER_GROUP_METADATA_KEY, CONSUMER_GROUP_METADATA_VALUE,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE, GROUP_METADATA_KEY,
                           GROUP_METADATA_VALUE, OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE)
from wire.primitives import DecodeError, Writer


TOPIC = "__consumer_offsets"
_OFFSET_KEY_VERSION = 1
_GROUP_KEY_VERSION = 2
_OFFSET_VALUE_VERSION = 3
_GROUP_VALUE_VERSION = 3


# A consumer group's record types (Kafka's CoordinatorRecordType) and their schemas.
CONSUMER_GROUP_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER, \
    CURRENT_MEMBER_ASSIGNMENT = 3, 5, 6, 7, 8
_CONSUMER_GROUP_RECORDS = {
    CONSUMER_GROUP_METADATA: (CONSUMER_GROUP_METADATA_KEY, CONSUMER_GROUP_METADATA_VALUE),
    MEMBER_METADATA: (CONSUMER_GROUP_MEMBER_METADATA_KEY, CONSUMER_GROUP_MEMBER_METADATA_VALUE),
    TARGET_ASSIGNMENT_METADATA: (CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_KEY,
                                 CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE),
    TARGET_ASSIGNMENT_MEMBER: (CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_KEY,
                               CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE),
    CURRENT_MEMBER_ASSIGNMENT: (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_KEY,
                                CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE),
}


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


def consumer_group_record(record_type: int, group: str, member: str | None, value) -> tuple[bytes, bytes | None]:
    """A consumer group's record of `record_type`, keyed by the group (and `member` for
    the member's records); `value` is its value struct, or None for a tombstone."""
    key_schema, value_schema = _CONSUMER_GROUP_RECORDS[record_type]
    fields = {"group_id": group} if member is None else {"group_id": group, "member_id": member}
    writer = Writer()
    writer.int16(record_type)
    key = key_schema.encode(0, key_schema(**fields), writer).getvalue()
    return key, None if value is None else value_schema.encode_versioned(0, value)


def decode_record(key: bytes, value: bytes | None):
    """("offset", (group, topic, partition), CommittedOffset|None),
    ("group", group, GroupMetadataValue|None) or ("consumer_group", (record type, group,
    member id or None), value struct|None); None for a key we do not know."""
    try:
        version = int.from_bytes(key[:2], "big", signed=True)
        if version in _CONSUMER_GROUP_RECORDS:
            key_schema, value_schema = _CONSUMER_GROUP_RECORDS[version]
            k = key_schema.decode(0, memoryview(key)[2:])
            ident = (version, k.group_id, getattr(k, "member_id", None))
            return "consumer_group", ident, None if value is None else value_schema.decode_versioned(value)[1]
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
