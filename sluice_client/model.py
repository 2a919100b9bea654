"""The values the client takes and returns: plain, immutable, with Kafka's meanings."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from wire.acl_types import Operation, PatternType, Permission, ResourceType
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
    "ConsumerGroupDescription", "ConsumerGroupMember", "FetchResult", "FetchedRecords", "GroupDescription",
    "GroupMember", "ListedGroup",
    "NewTopic", "OffsetAndTimestamp", "PartitionInfo", "ProduceResult", "ProducerRecord",
    "TopicInfo",
    "AclBinding", "AclBindingFilter", "AclDeletion", "DeletedAcls", "ANY_ACL",
    "ScramMechanism", "ScramCredentialInfo", "UserScramCredentials", "ScramUpsertion",
    "ScramDeletion", "DEFAULT_SCRAM_ITERATIONS",
]

# ListOffsets timestamps with special meanings.
EARLIEST = -2
LATEST = -1
MAX_TIMESTAMP = -3  # the offset of the record with the largest timestamp (ListOffsets v7+)

# Fetch and ListOffsets isolation levels.
READ_UNCOMMITTED = 0
READ_COMMITTED = 1

# A client quota entity (Describe/AlterClientQuotas): its (entity type, name) pairs
# sorted, a name of None for the type's default (types and match kinds: wire.quota_types).
QuotaEntity = tuple[tuple[str, "str | None"], ...]

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

# FindCoordinator's key types: a consumer group, a transactional id.
GROUP_KEY = 0
TRANSACTION_KEY = 1

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


class OngoingReassignment(NamedTuple):
    """A partition being reassigned: its replicas, those being added and those being removed."""
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


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


@dataclass(frozen=True)
class ConsumerGroupMember:
    """A member of a consumer group of KIP-848's protocol, as ConsumerGroupDescribe tells
    it: its epoch, what it subscribes to, the partitions it owns and those the group's
    target assignment gives it (the two differ while it reconciles)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    subscribed_regex: str | None
    assignment: dict[str, tuple[int, ...]]
    target_assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """A consumer group of KIP-848's protocol (ConsumerGroupDescribe): its state ("Empty",
    "Assigning", "Reconciling", "Stable"), epochs and server-side assignor."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerGroupMember, ...]
    coordinator: Coordinator


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


# -- ACLs (DescribeAcls, CreateAcls, DeleteAcls) -------------------------------------------

@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern (type, name, LITERAL or PREFIXED) and an entry saying
    that `principal` ("User:alice", "User:*") connecting from `host` ("*" for any) is
    allowed or denied `operation` on it. The enums are Kafka's (wire.acl_types)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def to_filter(self) -> AclBindingFilter:
        """The filter matching exactly this ACL (to delete it and nothing else)."""
        return AclBindingFilter(self.resource_type, self.resource_name, self.pattern_type,
                                self.principal, self.host, self.operation, self.permission)


@dataclass(frozen=True)
class AclBindingFilter:
    """Which ACLs DescribeAcls and DeleteAcls select. ANY, and None for the strings, match
    every value; otherwise a field matches its own value only (the wildcards "*" and
    "User:*" are values like any other), except the pattern type MATCH: the ACLs whose
    patterns cover `resource_name` (the literal name, the wildcard "*", and prefixes of it)."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY


ANY_ACL = AclBindingFilter()  # every ACL of the cluster


@dataclass(frozen=True)
class AclDeletion:
    """An ACL a DeleteAcls filter matched; `error` is None when it was deleted."""

    binding: AclBinding
    error: KafkaError | None


@dataclass(frozen=True)
class DeletedAcls:
    """One filter's outcome in `delete_acls`: an error for the whole filter, or the ACLs
    it matched (none is not an error)."""

    error: KafkaError | None
    matches: tuple[AclDeletion, ...]


# -- SCRAM credentials (DescribeUserScramCredentials, AlterUserScramCredentials) ---------------

DEFAULT_SCRAM_ITERATIONS = 4096  # Kafka's default and minimum; its maximum is 16384


class ScramMechanism(IntEnum):
    """Kafka's ScramMechanism codes; `mechanism_name` is the SASL mechanism's name."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @classmethod
    def parse(cls, text: str) -> ScramMechanism:
        """"SCRAM-SHA-256" or "SCRAM-SHA-512" (any case); ValueError otherwise."""
        for member in (cls.SCRAM_SHA_256, cls.SCRAM_SHA_512):
            if text.strip().upper().replace("_", "-") == member.mechanism_name:
                return member
        raise ValueError(f"{text.strip()!r} is not SCRAM-SHA-256 or SCRAM-SHA-512")

    @classmethod
    def of(cls, code: int) -> ScramMechanism:
        """The member for a code read from the wire; UNKNOWN when this side does not know it."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """SCRAM's Hi(password, salt, iterations) (RFC 5802): PBKDF2 with HMAC of the
        mechanism's hash, over the password's UTF-8 bytes as Kafka's clients take them."""
        if self is ScramMechanism.UNKNOWN:
            raise ValueError("no hash for an unknown SCRAM mechanism")
        digest = "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"
        return hashlib.pbkdf2_hmac(digest, password.encode("utf-8"), salt, iterations)


class ScramCredentialInfo(NamedTuple):
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True)
class UserScramCredentials:
    """A user's SCRAM mechanisms and iteration counts (never a salt or key), or the error
    describing them (RESOURCE_NOT_FOUND: the user has none)."""

    user: str
    error: KafkaError | None
    credentials: tuple[ScramCredentialInfo, ...]


@dataclass(frozen=True)
class ScramUpsertion:
    """Set `user`'s credential for `mechanism`. The password never leaves the client (nor
    shows in repr): the client sends a random salt and the salted password."""

    user: str
    mechanism: ScramMechanism
    password: str = field(repr=False)
    iterations: int = DEFAULT_SCRAM_ITERATIONS


@dataclass(frozen=True)
class ScramDeletion:
    """Remove `user`'s credential for `mechanism`."""

    user: str
    mechanism: ScramMechanism
