"""KIP-848 consumer groups (Kafka's ConsumerGroup and the consumer group half of its
GroupMetadataManager): the broker computes the assignment, members reconcile towards it
one heartbeat (ConsumerGroupHeartbeat) at a time. They live beside the classic groups
(`groups.coordinator`) on the same coordinator runtime, share their group ids and keep
their offsets in the same offsets manager. Rules (Kafka 4.4's):

- The group epoch counts the changes of what the assignment depends on: a member
  joining, leaving or changing its subscription (topic names, a regex in RE2/J syntax
  matching whole topic names, internal topics never) or server assignor, or the
  subscribed topics, those a regex matches included, and their partitions (their hash,
  `metadata_hash`, computed at every heartbeat: a new topic a regex matches rebalances).
  A regex is resolved from the metadata at each heartbeat; Kafka's
  ConsumerGroupRegularExpression records are not written. When it passes the target assignment
  epoch, the assignor (`groups.assignors`: the members' most chosen server assignor, else
  the first of `group.consumer.assignors`) computes a new target assignment at that epoch.
- Each member reconciles towards its target (Kafka's CurrentAssignmentBuilder): the
  partitions it must give up are revoked first, the member staying at its epoch
  (UNREVOKED_PARTITIONS) until a heartbeat's owned partitions no longer hold them; only
  then does it move to the target epoch and get the partitions that no other member owns
  (those still owned wait: UNRELEASED_PARTITIONS). So no partition is ever assigned to two
  members at once.
- A heartbeat at epoch 0 joins (or rejoins), -1 leaves, -2 leaves as a static member
  that keeps its partitions until it rejoins with its instance id (the new member takes
  them over, no rebalance) or its session ends. A heartbeat from an unknown member is
  UNKNOWN_MEMBER_ID; an epoch ahead of the member's, or behind it other than the
  previous epoch with owned partitions within its assignment, FENCED_MEMBER_EPOCH (the
  member rejoins from scratch); an instance id held by a live member UNRELEASED_INSTANCE_ID;
  a new member of a group of `group.consumer.max.size` members GROUP_MAX_SIZE_REACHED.
- Members that do not heartbeat within `group.consumer.session.timeout.ms`, or do not
  revoke within their rebalance timeout, are fenced: removed, the group epoch bumped.
- An empty group's offsets expire `offsets.retention.minutes` after their commit, and
  the group with its last offset (Kafka's rule for consumer groups; the offsets of topics
  a non-empty group no longer subscribes to are kept, where Kafka expires them).
- The answer carries the assignment when the request was full (a join, or every field
  given) or when the member's assignment changed.
- Every change is written to `__consumer_offsets` with Kafka's record types (see
  `groups.offsets_log`) and applied to memory once committed; a group's heartbeats run
  one at a time. A load replays the records: members keep their epochs and assignments,
  their sessions start again.
- An empty classic group is taken over by the first consumer-protocol member (its
  metadata tombstoned, its offsets kept), and an empty consumer group by the first
  classic member (JoinGroup); a classic group with members is refused with
  GROUP_ID_NOT_FOUND, a consumer group with members INCONSISTENT_GROUP_PROTOCOL (the
  online conversion of Kafka's `bidirectional` migration policy is not implemented).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace

from wire.error_codes import ErrorCode
from wire.messages import (CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE as CURRENT_VALUE,
                           CONSUMER_GROUP_MEMBER_METADATA_VALUE as MEMBER_VALUE,
                           CONSUMER_GROUP_METADATA_VALUE as GROUP_VALUE,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE as TARGET_MEMBER_VALUE,
                           CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE as TARGET_VALUE)

from broker.errors import BrokerError
from broker.groups import offsets_log
from broker.groups.assignors import Assignment, assign
from broker.groups.offsets_log import (CONSUMER_GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT, MEMBER_METADATA,
                                       TARGET_ASSIGNMENT_MEMBER, TARGET_ASSIGNMENT_METADATA,
                                       consumer_group_record)

log = logging.getLogger("sluice.groups")

GROUP_TYPE = "consumer"
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
# A member's reconciliation state (Kafka's MemberState values, as stored).
MEMBER_STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS = 0, 1, 2
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2


@dataclass(frozen=True)
class Member:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = MEMBER_STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    # The member epoch at which it got each partition it holds (KIP-1251's assignment
    # epochs): a commit at an older epoch than the member's may still commit those
    # partitions it held by then.
    assigned_at: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)

    def metadata(self) -> tuple:
        """What its ConsumerGroupMemberMetadata record holds."""
        return (self.instance_id, self.rack_id, self.client_id, self.client_host,
                self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor,
                self.rebalance_timeout_ms)

    def subscription(self) -> tuple:
        """What the target assignment depends on, of this member."""
        return self.subscribed_topic_names, self.subscribed_topic_regex, self.server_assignor

    def assignment(self) -> tuple:
        """What its ConsumerGroupCurrentMemberAssignment record holds."""
        return (self.member_epoch, self.previous_member_epoch, self.state, self.assigned,
                self.pending_revocation, self.assigned_at)


@dataclass
class ConsumerGroup:
    group_id: str
    partition: int = field(kw_only=True)  # its partition of __consumer_offsets
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # The coordinator's stall watch's monotonic() by which each member must be heard of,
    # and by which a member asked to revoke partitions must have done so.
    session_deadlines: dict[str, float] = field(default_factory=dict)
    revocation_deadlines: dict[str, float] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MEMBER_STABLE
               for m in self.members.values()):
            return RECONCILING
        return STABLE

    def static_member(self, instance_id: str) -> Member | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)


# -- records ----------------------------------------------------------------------------

def _topic_partitions(schema, assignment: Assignment, assigned_at: dict | None = None) -> list:
    """Records' TopicPartitions, with their assignment epochs when `assigned_at` is given."""
    entries = []
    for topic_id, indexes in sorted(assignment.items()):
        if not indexes:
            continue
        entry = schema(topic_id=topic_id, partitions=sorted(indexes))
        if assigned_at is not None:
            entry.assignment_epochs = [assigned_at[(topic_id, index)] for index in entry.partitions]
        entries.append(entry)
    return entries


def _assignment_of(items) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in items if tp.partitions}


def _assignment_epochs(items, default: int) -> dict[tuple[uuid.UUID, int], int]:
    """Each partition's assignment epoch as stored; `default` (the member epoch, at least
    0) where the record has none (written before KIP-1251)."""
    epochs = {}
    for tp in items:
        stored = tp.assignment_epochs if tp.assignment_epochs is not None else []
        for i, index in enumerate(tp.partitions):
            epochs[(tp.topic_id, index)] = stored[i] if i < len(stored) else max(default, 0)
    return epochs


def group_epoch_record(group_id: str, epoch: int, metadata_hash: int):
    return consumer_group_record(CONSUMER_GROUP_METADATA, group_id, None,
                                 GROUP_VALUE(epoch=epoch, metadata_hash=metadata_hash))


def member_record(group_id: str, member: Member):
    return consumer_group_record(MEMBER_METADATA, group_id, member.member_id, MEMBER_VALUE(
        instance_id=member.instance_id, rack_id=member.rack_id, client_id=member.client_id,
        client_host=member.client_host, subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex, rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor))


def current_assignment_record(group_id: str, member: Member):
    return consumer_group_record(CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id, CURRENT_VALUE(
        member_epoch=member.member_epoch, previous_member_epoch=member.previous_member_epoch,
        state=member.state,
        assigned_partitions=_topic_partitions(CURRENT_VALUE.TopicPartitions, member.assigned, member.assigned_at),
        partitions_pending_revocation=_topic_partitions(CURRENT_VALUE.TopicPartitions,
                                                        member.pending_revocation, member.assigned_at)))


def target_member_record(group_id: str, member_id: str, assignment: Assignment):
    return consumer_group_record(TARGET_ASSIGNMENT_MEMBER, group_id, member_id, TARGET_MEMBER_VALUE(
        topic_partitions=_topic_partitions(TARGET_MEMBER_VALUE.TopicPartition, assignment)))


def target_epoch_record(group_id: str, epoch: int):
    return consumer_group_record(TARGET_ASSIGNMENT_METADATA, group_id, None, TARGET_VALUE(assignment_epoch=epoch))


def member_tombstones(group_id: str, member_id: str) -> list:
    """A member's records removed, in Kafka's order."""
    return [consumer_group_record(CURRENT_MEMBER_ASSIGNMENT, group_id, member_id, None),
            consumer_group_record(TARGET_ASSIGNMENT_MEMBER, group_id, member_id, None),
            consumer_group_record(MEMBER_METADATA, group_id, member_id, None)]


def group_tombstones(group_id: str) -> list:
    """An empty group's records removed (DeleteGroups, a classic group taking over)."""
    return [consumer_group_record(TARGET_ASSIGNMENT_METADATA, group_id, None, None),
            consumer_group_record(CONSUMER_GROUP_METADATA, group_id, None, None)]


class ConsumerGroupReplay:
    """The consumer groups of one partition of `__consumer_offsets`, built from their
    records in log order."""

    def __init__(self, index: int):
        self._index = index
        self.groups: dict[str, ConsumerGroup] = {}

    def apply(self, ident: tuple, value) -> None:
        record_type, group_id, member_id = ident
        group = self.groups.get(group_id)
        if record_type == CONSUMER_GROUP_METADATA:
            if value is None:
                self.groups.pop(group_id, None)
                return
            group = self.groups.setdefault(group_id, ConsumerGroup(group_id, partition=self._index))
            group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
            return
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = ConsumerGroup(group_id, partition=self._index)
        if record_type == TARGET_ASSIGNMENT_METADATA:
            if value is not None:
                group.assignment_epoch = value.assignment_epoch
        elif record_type == TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group.target.pop(member_id, None)
            else:
                group.target[member_id] = _assignment_of(value.topic_partitions)
        elif record_type == MEMBER_METADATA:
            if value is None:
                group.members.pop(member_id, None)
                return
            member = group.members.get(member_id) or Member(member_id)
            group.members[member_id] = replace(
                member, instance_id=value.instance_id, rack_id=value.rack_id, client_id=value.client_id,
                client_host=value.client_host, subscribed_topic_names=tuple(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex, server_assignor=value.server_assignor,
                rebalance_timeout_ms=value.rebalance_timeout_ms)
        elif record_type == CURRENT_MEMBER_ASSIGNMENT and value is not None:
            member = group.members.get(member_id) or Member(member_id)
            group.members[member_id] = replace(
                member, member_epoch=value.member_epoch, previous_member_epoch=value.previous_member_epoch,
                state=value.state, assigned=_assignment_of(value.assigned_partitions),
                pending_revocation=_assignment_of(value.partitions_pending_revocation),
                assigned_at={**_assignment_epochs(value.assigned_partitions, value.member_epoch),
                             **_assignment_epochs(value.partitions_pending_revocation, value.member_epoch)})


# What RE2/J (Kafka's regex engine) refuses and Python's `re` would take: lookarounds,
# backreferences, possessive quantifiers and atomic groups.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\(\?>|\\[1-9]|\\g|\(\?P=|[*+?}]\+")


def compile_regex(regex: str) -> re.Pattern:
    """A subscription's regex; INVALID_REGULAR_EXPRESSION when RE2/J would refuse it."""
    try:
        if _NOT_RE2.search(regex):
            raise re.error("a construct RE2/J does not support")
        return re.compile(regex)
    except re.error as exc:
        raise BrokerError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                          f"SubscribedTopicRegex {regex!r} is not a valid regular expression: {exc}") from None


def _metadata_hash(topics: dict[str, tuple[uuid.UUID, int]]) -> int:
    """A signed 64-bit digest of the subscribed topics' ids and partition counts: a change
    bumps the group epoch (Kafka's KIP-1101 hash plays this part; its exact function is
    not reproduced, so a Kafka broker reading these records would rebalance once)."""
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(topics):
        topic_id, count = topics[name]
        digest.update(f"{name}\0{topic_id}\0{count}\0".encode())
    return int.from_bytes(digest.digest(), "big", signed=True)


def reconcile(member: Member, target_epoch: int, target: Assignment,
              owned_elsewhere: set[tuple[uuid.UUID, int]], owned: Assignment | None) -> Member:
    """The member's next assignment state towards `target` (Kafka's
    CurrentAssignmentBuilder). `owned_elsewhere`: partitions other members hold; `owned`:
    what the member's heartbeat says it owns (None: not said)."""
    def still_owns(partitions: Assignment) -> bool:
        if owned is None:
            return True
        return any(partitions.get(topic_id, frozenset()) & indexes for topic_id, indexes in owned.items())

    if member.state == MEMBER_STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned_elsewhere, still_owns)
    if member.state == UNREVOKED_PARTITIONS:
        if still_owns(member.pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch + 1, target_epoch, target, owned_elsewhere,
                                still_owns)
    return _next_assignment(member, member.member_epoch, target_epoch, target, owned_elsewhere, still_owns)


def _next_assignment(member: Member, epoch: int, target_epoch: int, target: Assignment,
                     owned_elsewhere, still_owns) -> Member:
    assigned, revoking, pending = {}, {}, {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        if kept:
            assigned[topic_id] = kept
        if current - kept:
            revoking[topic_id] = current - kept
        free = {index for index in wanted - kept if (topic_id, index) not in owned_elsewhere}
        unreleased = unreleased or len(free) < len(wanted - kept)
        if free:
            pending[topic_id] = frozenset(free)
    if revoking and still_owns(revoking):
        return _moved(member, epoch, UNREVOKED_PARTITIONS, assigned, revoking)
    for topic_id, indexes in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | indexes
    return _moved(member, target_epoch, UNRELEASED_PARTITIONS if unreleased else MEMBER_STABLE, assigned, {})


def _moved(member: Member, epoch: int, state: int, assigned: Assignment, revoking: Assignment) -> Member:
    """The member at `epoch`: partitions it held keep their assignment epochs, new ones
    take `epoch`."""
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
    assigned_at = {(topic_id, index): member.assigned_at.get((topic_id, index), epoch)
                   for held in (assigned, revoking) for topic_id, indexes in held.items() for index in indexes}
    return replace(member, member_epoch=epoch, previous_member_epoch=previous, state=state,
                   assigned=assigned, pending_revocation=revoking, assigned_at=assigned_at)


@dataclass
class HeartbeatResult:
    member_id: str
    member_epoch: int
    assignment: Assignment | None  # None: not sent


class ConsumerGroups:
    """The consumer groups coordinated here. `coordinator` is the group coordinator: its
    runtime, offsets manager and classic groups (for the conversion of an empty one)."""

    def __init__(self, coordinator):
        self.coordinator = coordinator
        self.broker = coordinator.broker
        self.stalls = coordinator.stalls
        cfg = self.broker.config
        self.session_timeout_ms = cfg.group_consumer_session_timeout_ms
        self.heartbeat_interval_ms = cfg.group_consumer_heartbeat_interval_ms
        self.assignors = cfg.group_consumer_assignors
        self.max_size = cfg.group_consumer_max_size
        self.groups: dict[str, ConsumerGroup] = {}
        # (group, member) -> the task fencing it in the background (held: a task is only weakly referenced)
        self._fencing: dict[tuple[str, str], asyncio.Task] = {}

    # -- loading ---------------------------------------------------------------------
    def loaded(self, groups: dict[str, ConsumerGroup]) -> None:
        """A partition's replay is done: its groups are coordinated here, every member's
        session starting now."""
        deadline = self.stalls.monotonic() + self.session_timeout_ms / 1000
        for group in groups.values():
            group.session_deadlines = dict.fromkeys(group.members, deadline)
        self.groups.update(groups)

    def unload(self, index: int) -> None:
        for group_id in [g for g, group in self.groups.items() if group.partition == index]:
            del self.groups[group_id]

    # -- heartbeats ------------------------------------------------------------------
    def _validate(self, request, version: int) -> None:
        """Kafka's checks of a heartbeat before anything is looked up."""
        def invalid(message):
            return BrokerError(ErrorCode.INVALID_REQUEST, message)
        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if request.subscribed_topic_regex:  # v1+; empty: no regex (librdkafka sends one)
            compile_regex(request.subscribed_topic_regex)
        epoch = request.member_epoch
        if epoch > 0 or epoch == LEAVE_EPOCH or version >= 1:
            if not request.member_id:
                raise invalid("MemberId can't be empty.")
        if epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if not request.subscribed_topic_names and not request.subscribed_topic_regex:
                raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        elif epoch == STATIC_LEAVE_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < STATIC_LEAVE_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.assignors:
            raise BrokerError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                              f"ServerAssignor {request.server_assignor} is not supported. "
                              f"Supported assignors: {', '.join(self.assignors)}.")

    async def heartbeat(self, request, version: int, client_id: str, client_host: str) -> HeartbeatResult:
        self._validate(request, version)
        group_id = request.group_id
        group = self.groups.get(group_id)
        try:
            index = self.coordinator.coordinating(group_id)
        except BrokerError as exc:
            # While its partition is suspended (after a stall) the member counts as heard,
            # as a classic member's heartbeat does: its session is not its fault.
            if exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS and group is not None \
                    and request.member_id in group.session_deadlines:
                group.session_deadlines[request.member_id] = self.stalls.monotonic() + self.session_timeout_ms / 1000
            raise
        if group is None:
            if request.member_epoch != JOIN_EPOCH:
                raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"group {group_id!r} has no members")
            group = self._new_group(group_id, index)
        async with group.lock:
            if self.groups.get(group_id) is not group:  # unloaded or deleted meanwhile
                raise BrokerError(ErrorCode.NOT_COORDINATOR, f"group {group_id!r} moved")
            try:
                if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                    return await self._leave(group, request)
                return await self._heartbeat(group, request, client_id, client_host)
            finally:
                if not group.members and group.group_epoch == 0 and self.groups.get(group_id) is group:
                    del self.groups[group_id]  # created for a join that failed: nothing was written

    def _new_group(self, group_id: str, index: int) -> ConsumerGroup:
        classic = self.coordinator.classic_group(group_id)
        if classic is not None and classic.members:
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND,
                              f"group {group_id!r} is a classic group with members, not a consumer group")
        group = self.groups[group_id] = ConsumerGroup(group_id, partition=index)
        return group

    def _member_for(self, group: ConsumerGroup, request) -> tuple[Member, Member | None]:
        """(the member the heartbeat is from, as it stands; the static member it replaces)."""
        epoch, member_id, instance_id = request.member_epoch, request.member_id, request.instance_id
        if epoch == JOIN_EPOCH:
            member_id = member_id or str(uuid.uuid4())
            if instance_id is not None:
                static = group.static_member(instance_id)
                if static is not None and static.member_id != member_id:
                    if static.member_epoch != STATIC_LEAVE_EPOCH:
                        raise BrokerError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                          f"instance id {instance_id!r} is owned by member {static.member_id}")
                    # Its partitions pass to the new member id, which reconciles to them.
                    return replace(static, member_id=member_id, state=MEMBER_STABLE), static
            return group.members.get(member_id) or Member(member_id), None
        if instance_id is not None:
            static = group.static_member(instance_id)
            if static is None:
                raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {instance_id!r} is unknown")
            if static.member_id != member_id:
                raise BrokerError(ErrorCode.FENCED_INSTANCE_ID,
                                  f"instance id {instance_id!r} belongs to member {static.member_id}")
        member = group.members.get(member_id)
        if member is None:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of {group.group_id!r}")
        owned = None if request.topic_partitions is None else _assignment_of(request.topic_partitions)
        if epoch > member.member_epoch or (epoch < member.member_epoch and (
                epoch != member.previous_member_epoch or owned is None or any(
                    indexes - member.assigned.get(topic_id, frozenset()) for topic_id, indexes in owned.items()))):
            raise BrokerError(ErrorCode.FENCED_MEMBER_EPOCH,
                              f"member epoch {epoch} is not {member.member_epoch}: the member must abandon "
                              f"its partitions and rejoin")
        return member, None

    def subscribed_topics(self, member: Member) -> set[str]:
        """The topics a member subscribes to: by name, and those of the topics that exist
        (not the internal ones) its regex matches in full."""
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            pattern = compile_regex(member.subscribed_topic_regex)
            names.update(t.name for t in self.broker.metadata.topics()
                         if not t.internal and pattern.fullmatch(t.name))
        return names

    def group_subscribed_topics(self, group: ConsumerGroup) -> set[str]:
        return {name for m in group.members.values() for name in self.subscribed_topics(m)}

    def _topics(self, names) -> dict[str, tuple[uuid.UUID, int]]:
        """The subscribed topics that exist: name -> (topic id, partition count)."""
        topics = {}
        for name in names:
            topic = self.broker.metadata.topic(name)
            if topic is not None and topic.partitions:
                topics[name] = (topic.topic_id, len(topic.partitions))
        return topics

    def preferred_assignor(self, members) -> str:
        """The server assignor most members chose, else the first configured."""
        chosen = Counter(m.server_assignor for m in members if m.server_assignor is not None)
        return max(sorted(chosen), key=lambda name: chosen[name]) if chosen else self.assignors[0]

    async def _heartbeat(self, group: ConsumerGroup, request, client_id: str, client_host: str) -> HeartbeatResult:
        group_id = group.group_id
        member, replaced = self._member_for(group, request)
        updated = replace(
            member, client_id=client_id, client_host=client_host,
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms,
            server_assignor=request.server_assignor if request.server_assignor is not None
            else member.server_assignor,
            subscribed_topic_names=tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None else member.subscribed_topic_names,
            subscribed_topic_regex=(request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None else member.subscribed_topic_regex)
        is_new = member.member_id not in group.members
        if is_new and replaced is None and len(group.members) >= self.max_size:
            raise BrokerError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                              f"group {group_id!r} has reached its maximum size of {self.max_size} members")
        members = {m.member_id: m for m in group.members.values() if m is not replaced}
        members[updated.member_id] = updated
        records = []
        classic = self.coordinator.classic_group(group_id)
        if classic is not None and classic.members:  # joined while this group was being created
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} is a classic group with members")
        if replaced is not None:
            records += member_tombstones(group_id, replaced.member_id)
        elif classic is not None:
            records.append(offsets_log.group_record(group_id, None))  # the empty classic group taken over
        if is_new or updated.metadata() != member.metadata():
            records.append(member_record(group_id, updated))
        subscribed = {m.member_id: self.subscribed_topics(m) for m in members.values()}
        topics = self._topics(set().union(*subscribed.values()))
        metadata_hash = _metadata_hash(topics)
        group_epoch = group.group_epoch
        if (is_new and replaced is None) or metadata_hash != group.metadata_hash \
                or updated.subscription() != member.subscription():
            group_epoch += 1
            records.append(group_epoch_record(group_id, group_epoch, metadata_hash))
        target = dict(group.target)
        if replaced is not None:
            target[updated.member_id] = target.pop(replaced.member_id, {})
            records.append(target_member_record(group_id, updated.member_id, target[updated.member_id]))
        assignment_epoch = group.assignment_epoch
        if group_epoch > assignment_epoch:
            ids = {name: topic_id for name, (topic_id, _) in topics.items()}
            new_target = assign(self.preferred_assignor(members.values()),
                                {member_id: {ids[n] for n in names if n in ids}
                                 for member_id, names in subscribed.items()},
                                {topic_id: count for topic_id, count in topics.values()}, target)
            for member_id, assignment in new_target.items():
                if target.get(member_id) != assignment:
                    records.append(target_member_record(group_id, member_id, assignment))
            target, assignment_epoch = new_target, group_epoch
            records.append(target_epoch_record(group_id, assignment_epoch))
        owned = None if request.topic_partitions is None else _assignment_of(request.topic_partitions)
        owned_elsewhere = {(topic_id, index) for m in members.values() if m.member_id != updated.member_id
                           for held in (m.assigned, m.pending_revocation)
                           for topic_id, indexes in held.items() for index in indexes}
        reconciled = reconcile(updated, assignment_epoch, target.get(updated.member_id, {}), owned_elsewhere,
                               owned)
        if is_new or reconciled.assignment() != member.assignment():
            records.append(current_assignment_record(group_id, reconciled))
        if records:
            await self.coordinator.store(group.partition, records)
        if self.groups.get(group_id) is not group:
            raise BrokerError(ErrorCode.NOT_COORDINATOR, f"group {group_id!r} moved")
        # Committed: memory follows.
        if replaced is not None:
            group.session_deadlines.pop(replaced.member_id, None)
            group.revocation_deadlines.pop(replaced.member_id, None)
        self.coordinator.drop_classic_group(group_id)
        members[reconciled.member_id] = reconciled
        group.members = members
        group.target, group.group_epoch, group.assignment_epoch = target, group_epoch, assignment_epoch
        group.metadata_hash = metadata_hash
        now = self.stalls.monotonic()
        group.session_deadlines[reconciled.member_id] = now + self.session_timeout_ms / 1000
        if reconciled.state == UNREVOKED_PARTITIONS:
            if member.state != UNREVOKED_PARTITIONS or member.member_epoch != reconciled.member_epoch:
                group.revocation_deadlines[reconciled.member_id] = now + max(reconciled.rebalance_timeout_ms, 0) / 1000
        else:
            group.revocation_deadlines.pop(reconciled.member_id, None)
        if is_new:
            log.info("group %s: member %s joined at group epoch %d", group_id, reconciled.member_id, group_epoch)
        full = request.member_epoch == JOIN_EPOCH or (
            request.rebalance_timeout_ms != -1 and owned is not None
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None))
        changed = reconciled.assigned != member.assigned or is_new
        return HeartbeatResult(reconciled.member_id, reconciled.member_epoch,
                               reconciled.assigned if full or changed else None)

    async def _leave(self, group: ConsumerGroup, request) -> HeartbeatResult:
        if request.member_epoch == STATIC_LEAVE_EPOCH:
            member = group.static_member(request.instance_id)
            if member is None:
                raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"instance id {request.instance_id!r} is unknown")
            if member.member_id != request.member_id:
                raise BrokerError(ErrorCode.FENCED_INSTANCE_ID,
                                  f"instance id {request.instance_id!r} belongs to member {member.member_id}")
            left = replace(member, member_epoch=STATIC_LEAVE_EPOCH, previous_member_epoch=member.member_epoch,
                           pending_revocation={})
            await self.coordinator.store(group.partition, [current_assignment_record(group.group_id, left)])
            if self.groups.get(group.group_id) is group:
                group.members[left.member_id] = left
                group.revocation_deadlines.pop(left.member_id, None)
            return HeartbeatResult(left.member_id, STATIC_LEAVE_EPOCH, None)
        member = group.members.get(request.member_id)
        if member is None:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{request.member_id!r} is not a member")
        await self._remove(group, member)
        return HeartbeatResult(member.member_id, LEAVE_EPOCH, None)

    async def _remove(self, group: ConsumerGroup, member: Member) -> None:
        """The member leaves (or is fenced): its records go, the group epoch moves on, so the
        next heartbeat computes a target assignment without it."""
        remaining = [m for m in group.members.values() if m.member_id != member.member_id]
        metadata_hash = _metadata_hash(self._topics({n for m in remaining for n in self.subscribed_topics(m)}))
        epoch = group.group_epoch + 1
        await self.coordinator.store(group.partition, member_tombstones(group.group_id, member.member_id)
                                     + [group_epoch_record(group.group_id, epoch, metadata_hash)])
        if self.groups.get(group.group_id) is not group:
            return
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        group.session_deadlines.pop(member.member_id, None)
        group.revocation_deadlines.pop(member.member_id, None)
        group.group_epoch, group.metadata_hash = epoch, metadata_hash
        log.info("group %s: member %s left; group epoch %d", group.group_id, member.member_id, epoch)

    # -- timeouts --------------------------------------------------------------------
    def expire_sessions(self, coordinated: set[int]) -> None:
        """Fence members whose session ended or that did not revoke in time (a write
        each, in the background)."""
        now = self.stalls.monotonic()
        for group in self.groups.values():
            if group.partition not in coordinated:
                continue
            for member_id in list(group.members):
                late = now > group.session_deadlines.get(member_id, now) or \
                    now > group.revocation_deadlines.get(member_id, now)
                if late and (group.group_id, member_id) not in self._fencing:
                    self._fencing[(group.group_id, member_id)] = asyncio.get_running_loop().create_task(
                        self._fence(group, member_id))

    async def _fence(self, group: ConsumerGroup, member_id: str) -> None:
        try:
            async with group.lock:
                member = group.members.get(member_id)
                now = self.stalls.monotonic()
                if member is None or self.groups.get(group.group_id) is not group or not (
                        now > group.session_deadlines.get(member_id, now)
                        or now > group.revocation_deadlines.get(member_id, now)):
                    return
                log.info("group %s: member %s missed its session or revocation timeout; fencing it",
                         group.group_id, member_id)
                await self._remove(group, member)
        except BrokerError as exc:
            log.info("group %s: member %s not fenced yet (%s)", group.group_id, member_id, exc)
        finally:
            self._fencing.pop((group.group_id, member_id), None)

    def expire_offsets(self, writable: set[int], now_ms: int) -> list[tuple[list, ConsumerGroup]]:
        """Kafka's expiry for consumer groups: an empty group's offsets go once their commit
        is older than `offsets.retention.minutes`, the group with the last of them. The
        records to write (nobody waits for them) with their group; groups in the middle of
        a heartbeat are left for the next round."""
        writes = []
        for group in list(self.groups.values()):
            if group.partition not in writable or group.members or group.lock.locked():
                continue
            offsets = self.coordinator.offsets
            records, emptied = offsets.expire(group.group_id, now_ms)
            if emptied:
                records += group_tombstones(group.group_id)
                del self.groups[group.group_id]
                offsets.forget(group.group_id)
                log.info("group %s: empty with no offsets left; deleted", group.group_id)
            if records:
                writes.append((records, group))
        return writes

    # -- what the offsets manager and the other APIs ask ------------------------------
    def validate_offset_commit(self, group: ConsumerGroup, member_epoch: int, member_id: str,
                               partitions=None) -> dict[tuple[str, int], int]:
        """Kafka's ConsumerGroup.validateOffsetCommit: a commit without a member (epoch
        < 0) only while the group is empty; else from a member at its current epoch or,
        for `partitions` (topic name, partition) given (a plain commit: KIP-1251), at an
        older epoch for the partitions it has held since then: the others answer
        STALE_MEMBER_EPOCH, returned by partition."""
        if member_epoch < 0 and not member_id and not group.members:
            return {}
        member = group.members.get(member_id)
        if member is None:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of {group.group_id!r}")
        if member_epoch == member.member_epoch:
            return {}
        if partitions is None or member_epoch > member.member_epoch or member_epoch < 0:
            raise BrokerError(ErrorCode.STALE_MEMBER_EPOCH,
                              f"member epoch {member_epoch} is not {member.member_epoch}")
        stale = {}
        for name, index in partitions:
            topic = self.broker.metadata.topic(name)
            since = member.assigned_at.get((topic.topic_id, index)) if topic is not None else None
            if since is None or since > member_epoch:
                stale[(name, index)] = ErrorCode.STALE_MEMBER_EPOCH
        return stale

    @staticmethod
    def validate_offset_fetch(group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch: a fetch without a member (the admin's)
        always; else from a member at its current epoch."""
        if member_epoch < 0 and member_id is None:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member of {group.group_id!r}")
        if member_epoch != member.member_epoch:
            raise BrokerError(ErrorCode.STALE_MEMBER_EPOCH,
                              f"member epoch {member_epoch} is not {member.member_epoch}")

    async def convert_to_classic(self, group: ConsumerGroup) -> None:
        """A classic member joins: an empty group's records go (its offsets stay) and the
        classic group takes its id; one with members is INCONSISTENT_GROUP_PROTOCOL (the
        online conversion of Kafka's `bidirectional` policy is not implemented)."""
        async with group.lock:
            if group.members:
                raise BrokerError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                  f"group {group.group_id!r} is a consumer group with members")
            if self.groups.get(group.group_id) is not group:
                return
            await self.coordinator.store(group.partition, group_tombstones(group.group_id))
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]

    async def delete(self, group: ConsumerGroup, offset_tombstones: list) -> None:
        """DeleteGroups of an empty group: its records and offsets go."""
        if group.members:
            raise BrokerError(ErrorCode.NON_EMPTY_GROUP, f"group {group.group_id!r} has active members")
        async with group.lock:
            await self.coordinator.store(group.partition, offset_tombstones + group_tombstones(group.group_id))
            if self.groups.get(group.group_id) is group:
                del self.groups[group.group_id]
