"""The group coordinator: the classic group's membership and rebalances, over the
coordinator runtime (`broker.coordinator_runtime`), with the groups' committed offsets
kept by the offsets manager (`groups.offsets`), which asks the group who may commit.
KIP-848 consumer groups (`groups.consumer_group`) share its runtime, offsets and group
ids: a JoinGroup for an empty consumer group's id turns it into a classic group (its
records tombstoned, its offsets kept), for one with members it is
INCONSISTENT_GROUP_PROTOCOL; the offset APIs and DeleteGroups follow the consumer group's
rules for its ids.

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable, back to
PreparingRebalance on any membership change, Dead once deleted. Rules (Kafka's):
- JoinGroup from a new dynamic member (v4+) is answered MEMBER_ID_REQUIRED with the
  id it must rejoin with. A rebalance completes when every member has rejoined, or
  when the largest rebalance timeout passes (members that did not rejoin are removed).
  A group's first rebalance waits `group.initial.rebalance.delay.ms` for more members,
  extended by each newcomer up to the rebalance timeout.
- The protocol is the one every member supports that most members list first; the
  leader (kept when it rejoins) receives every member's metadata and sends the
  assignment in SyncGroup; followers wait for it.
- A static member (group.instance.id) that rejoins under a new member id replaces its
  old id and, when the group is stable and the protocol it would select is unchanged
  (the member's metadata may differ), gets its assignment back without a rebalance, its
  JoinGroup naming the leader as it was before (a rejoining leader does not assign);
  the replaced id is FENCED_INSTANCE_ID.
- Members that miss heartbeats for their session timeout are removed (not while they
  wait in JoinGroup, which the rebalance timeout governs). Time the broker stood still
  (broker.clock.StallWatch: a SIGSTOP, a long pause), when no heartbeat could be heard,
  does not count against sessions and rebalances.
- OffsetCommit needs the member and generation of a group that is Stable or preparing a
  rebalance (REBALANCE_IN_PROGRESS while it completes one); a group with no members
  accepts commits with generation -1 and no member id (`assign()` users).
- Group metadata is written to `__consumer_offsets` before the request is answered;
  the state is replayed from there on start. A group left empty for
  `offsets.retention.minutes` loses its offsets, and goes once it has none left.
- OffsetDelete removes offsets of a group that exists: any of an empty group's, and of a
  consumer group with members those of topics no member subscribes to
  (GROUP_SUBSCRIBED_TO_TOPIC for the others); a group with members of another protocol
  type is NON_EMPTY_GROUP.
- Transactional commits (TxnOffsetCommit) need no particular group state; a member id,
  instance id or generation, when given, must match as for OffsetCommit.

Coordination follows the leadership of `__consumer_offsets` (see broker.coordinator_runtime): a
group's coordinator is the leader of partition abs(javaHash(group)) % partitions. On the
single node every partition is loaded at start (or when the topic is created). In a
cluster a partition is replayed when this broker becomes its leader and its groups are
dropped when it stops leading (their waiting JoinGroup/SyncGroup answered
NOT_COORDINATOR, their timers cancelled). Every request first checks that its group's
partition is coordinated here: NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while
it loads or is suspended (after a stall, see broker.coordinator_runtime); as in Kafka, a
Heartbeat is then answered blindly and a SyncGroup REBALANCE_IN_PROGRESS (the member
joins again).

Writes a client waits for (OffsetCommit, TxnOffsetCommit, the leader's SyncGroup, a
static member's replacement, DeleteGroups, OffsetDelete) are answered once committed in
Kafka's sense (acks=all, the high watermark past them) and only then applied to memory,
in log order, so that nothing a client saw is lost when another replica takes over.
Writes nobody waits for (an emptied group, expiry) go to memory first and are appended
without waiting; a failure there is logged at a bounded rate. The log cleaner compacts
`__consumer_offsets` (a compacted topic, as in Kafka); replay copes with what it
leaves (see offsets_log).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from wire.error_codes import ErrorCode
from wire.messages import CONSUMER_PROTOCOL_SUBSCRIPTION, GROUP_METADATA_VALUE

from broker.clock import Timer
from broker.coordinator_runtime import CoordinatorRuntime
from broker.errors import BrokerError
from broker.groups import consumer_group, offsets_log
from broker.groups.consumer_group import ConsumerGroupReplay, ConsumerGroups
from broker.groups.offsets import COMMIT_TIMEOUT_S, OffsetsManager, OffsetsReplay

log = logging.getLogger("sluice.groups")

CONSUMER_PROTOCOL_TYPE = "consumer"  # the protocol type of the consumer's group protocol
CLASSIC_GROUP_TYPE = "classic"

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")


class ListedGroup(NamedTuple):
    """A group as ListGroups lists it."""
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list = field(default_factory=list)  # (member id, instance id, metadata) for the leader


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list  # [(name, metadata bytes)] in the member's preference order
    assignment: bytes = b""
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None
    last_heartbeat: float = field(kw_only=True)  # the coordinator's stall watch's monotonic()

    def metadata_for(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclass
class Group:
    group_id: str
    partition: int = field(kw_only=True)  # its partition of __consumer_offsets
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, float] = field(default_factory=dict)  # member id -> deadline
    state_since_ms: int = field(kw_only=True)  # the coordinator clock's wall_ms()
    rebalance_timer: Timer | None = None
    rebalance_deadline: float = 0.0
    initial_delay_until: float = 0.0

    def set_state(self, state: str, now_ms: int) -> None:
        self.state = state
        self.state_since_ms = now_ms

    def supports(self, protocol_type: str, protocols: list) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        names = {name for name, _ in protocols}
        members_type = next(iter(self.members.values())).protocol_type
        return protocol_type == members_type and bool(names & self._common_protocols())

    def _common_protocols(self) -> set[str]:
        common = None
        for member in self.members.values():
            names = {name for name, _ in member.protocols}
            common = names if common is None else common & names
        return common or set()

    def select_protocol(self) -> str:
        common = self._common_protocols()
        votes = Counter(next(name for name, _ in m.protocols if name in common)
                        for m in self.members.values())
        return max(sorted(common), key=lambda name: votes[name])


class _PartitionReplay:
    """The groups of one partition of `__consumer_offsets`, built from its entries in log
    order; their offsets go to `offsets` (an OffsetsReplay)."""

    def __init__(self, index: int, clock, stalls, offsets: OffsetsReplay):
        self._index = index
        self._clock = clock
        self._stalls = stalls
        self._groups: dict[str, Group] = {}
        self.offsets = offsets
        self.consumer_groups = ConsumerGroupReplay(index)

    def apply(self, entry: tuple) -> None:
        if entry[0] == "marker":
            self.offsets.marker(*entry[1:])
            return
        _, key, value, producer_id, position = entry
        decoded = offsets_log.decode_record(key, value)
        if decoded is None:
            return
        kind, ident, payload = decoded
        if kind == "consumer_group":
            self.consumer_groups.apply(ident, payload)
        elif kind == "offset":
            group_id, topic_name, topic_partition = ident
            # Without a group record (standalone commits) the commit timestamps
            # alone decide when its offsets expire, not the time of this start.
            self._groups.setdefault(group_id, Group(group_id, partition=self._index, state_since_ms=0))
            self.offsets.offset(group_id, (topic_name, topic_partition), payload, producer_id, position)
        elif payload is None:
            self._groups.pop(ident, None)
            self.offsets.forget(ident)
        else:
            self._restore(ident, payload)

    def _restore(self, group_id: str, value) -> None:
        group = self._groups.setdefault(group_id, Group(group_id, partition=self._index,
                                                        state_since_ms=self._clock.wall_ms()))
        group.generation = value.generation
        group.protocol_type = value.protocol_type
        group.protocol_name = value.protocol
        group.leader = value.leader
        group.members.clear()
        group.static_members.clear()
        for m in value.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.session_timeout, m.rebalance_timeout, value.protocol_type,
                            [(value.protocol, bytes(m.subscription))], bytes(m.assignment),
                            last_heartbeat=self._stalls.monotonic())
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
        group.set_state(STABLE if group.members else EMPTY, self._clock.wall_ms())
        if not group.members and value.current_state_timestamp >= 0:
            group.state_since_ms = value.current_state_timestamp  # empty since then, for expiry

    def groups(self) -> dict[str, Group]:
        """The classic groups replayed, those that left no trace (no members, offsets or
        generation) and the ids of consumer groups left out."""
        offsets = self.offsets.groups
        return {group_id: group for group_id, group in self._groups.items()
                if group_id not in self.consumer_groups.groups and (
                    group.members or group.generation != 0
                    or (group_id in offsets and offsets[group_id].holds_anything()))}


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.clock = broker.clock
        # Sessions and rebalances time out on it: time this broker stood still (and so
        # could hear no heartbeat) does not count.
        self.stalls = broker.stalls
        cfg = broker.config
        self.initial_delay_s = cfg.group_initial_rebalance_delay_ms / 1000
        self.min_session_ms = cfg.group_min_session_timeout_ms
        self.max_session_ms = cfg.group_max_session_timeout_ms
        self.groups: dict[str, Group] = {}
        self.runtime = CoordinatorRuntime(broker, offsets_log.TOPIC, cfg.offsets_topic_num_partitions,
                                          cfg.offsets_topic_segment_bytes,
                                          self.load_partition, self.unload_partition)
        self.offsets = OffsetsManager(broker, self.runtime, self)
        self.consumer_groups = ConsumerGroups(self)

    # -- placement -------------------------------------------------------------------
    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition that holds the group (the single node
        creates the topic if need be)."""
        return self.runtime.partition_for(group_id)

    def coordinating(self, group_id: str) -> int:
        """The group's partition, once sure it is coordinated here: NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS otherwise."""
        index = self.partition_for(group_id)
        self.runtime.coordinated.epoch(index)
        return index

    # -- durability ------------------------------------------------------------------
    async def store(self, index: int, records: list) -> None:
        """Append to partition `index` of `__consumer_offsets` and wait until the records
        are committed."""
        await self.runtime.write(index, self.runtime.coordinated.epoch(index), records, COMMIT_TIMEOUT_S)

    def _write_later(self, group, records: list) -> None:
        """A write nobody waits for about a group (classic or consumer), its effect already
        in memory (Kafka's background stores): a failure, such as the partition having moved, is only logged (by the
        runtime)."""
        index = group.partition
        try:
            self.runtime.append(index, self.runtime.coordinated.epoch(index), records)
        except BrokerError:
            pass

    async def load(self) -> None:
        """The single node: replay every partition of `__consumer_offsets` (when it
        exists) into memory, and coordinate them all."""
        await self.runtime.load_local()

    async def load_partition(self, partition, epoch: int) -> None:
        """This broker now leads `partition` of `__consumer_offsets` at `epoch`: replay it,
        letting other requests run meanwhile; its groups appear at once at the end."""
        replay = _PartitionReplay(partition.index, self.clock, self.stalls, OffsetsReplay(partition.index))
        await self.runtime.replay(partition, replay.apply)
        groups = replay.groups()
        consumer_groups = replay.consumer_groups.groups
        self.groups.update(groups)
        self.consumer_groups.loaded(consumer_groups)
        self.offsets.loaded(replay.offsets, [*groups, *consumer_groups])
        log.info("loaded %d classic and %d consumer group(s) from %s-%d at coordinator epoch %d", len(groups),
                 len(consumer_groups), offsets_log.TOPIC, partition.index, epoch)

    def unload_partition(self, index: int) -> None:
        """This broker no longer coordinates partition `index`: its groups go, their
        waiting members are answered NOT_COORDINATOR (they look for the new coordinator)."""
        dropped = [group for group in self.groups.values() if group.partition == index]
        for group in dropped:
            del self.groups[group.group_id]
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
                group.rebalance_timer = None
            for member in group.members.values():
                for waiter in (member.join_waiter, member.sync_waiter):
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(BrokerError(
                            ErrorCode.NOT_COORDINATOR, f"this broker no longer coordinates group "
                                                       f"{group.group_id!r}"))
            group.set_state(DEAD, self.clock.wall_ms())
        self.consumer_groups.unload(index)
        self.offsets.unload(index)
        if dropped:
            log.info("dropped %d consumer group(s) of %s-%d", len(dropped), offsets_log.TOPIC, index)

    def _group_metadata_record(self, group: Group):
        members = [GROUP_METADATA_VALUE.MemberMetadata(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host, rebalance_timeout=m.rebalance_timeout_ms,
            session_timeout=m.session_timeout_ms,
            subscription=m.metadata_for(group.protocol_name) if group.protocol_name else b"",
            assignment=m.assignment) for m in group.members.values()]
        value = GROUP_METADATA_VALUE(protocol_type=group.protocol_type or "", generation=group.generation,
                                     protocol=group.protocol_name, leader=group.leader,
                                     current_state_timestamp=group.state_since_ms, members=members)
        return offsets_log.group_record(group.group_id, value)

    def _persist_group_later(self, group: Group) -> None:
        self._write_later(group, [self._group_metadata_record(group)])

    def classic_group(self, group_id: str) -> Group | None:
        """The classic group of that id, if there is one."""
        group = self.groups.get(group_id)
        return None if group is None or group.state == DEAD else group

    def drop_classic_group(self, group_id: str) -> None:
        """A consumer group took over the (empty) classic group: it goes, its offsets stay."""
        group = self.groups.pop(group_id, None)
        if group is not None:
            if group.rebalance_timer is not None:
                group.rebalance_timer.cancel()
            group.set_state(DEAD, self.clock.wall_ms())

    def _new_group(self, group_id: str, index: int, keep_offsets: bool = False) -> Group:
        group = self.groups[group_id] = Group(group_id, partition=index,
                                              state_since_ms=self.clock.wall_ms())
        if not keep_offsets:
            self.offsets.forget(group_id)  # those of a deleted group that had this id
        return group

    # -- lookups ---------------------------------------------------------------------
    @staticmethod
    def _check_group_id(group_id: str | None) -> None:
        if not group_id:
            raise BrokerError(ErrorCode.INVALID_GROUP_ID, "the group id is empty")

    def _member(self, group: Group | None, member_id: str, instance_id: str | None) -> Member:
        if group is None or group.state == DEAD:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"no group has member {member_id!r}")
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is not None and known != member_id:
                raise BrokerError(ErrorCode.FENCED_INSTANCE_ID,
                                  f"instance {instance_id!r} now belongs to member {known!r}")
        member = group.members.get(member_id)
        if member is None:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member")
        return member

    # -- join ------------------------------------------------------------------------
    async def join(self, group_id: str, member_id: str, instance_id: str | None, client_id: str,
                   client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                   protocol_type: str, protocols: list, require_known_member_id: bool) -> JoinResult:
        self._check_group_id(group_id)
        index = self.coordinating(group_id)
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise BrokerError(ErrorCode.INVALID_SESSION_TIMEOUT,
                              f"session timeout {session_timeout_ms} ms is outside "
                              f"[{self.min_session_ms}, {self.max_session_ms}]")
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            # An empty consumer group becomes a classic one, its offsets kept (Kafka's rule).
            await self.consumer_groups.convert_to_classic(consumer_group)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            group = self._new_group(group_id, index, keep_offsets=consumer_group is not None)
        if not group.supports(protocol_type, protocols):
            raise BrokerError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                              "protocol type or protocols do not match the group's")
        loop = asyncio.get_running_loop()
        if not member_id:
            new_id = f"{instance_id or client_id}-{uuid.uuid4()}"
            if instance_id is not None:
                return await self._join_static(group, new_id, instance_id, client_id, client_host,
                                               session_timeout_ms, rebalance_timeout_ms,
                                               protocol_type, protocols)
            if require_known_member_id:
                group.pending_members[new_id] = self.stalls.monotonic() + session_timeout_ms / 1000
                return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id)
            member_id = new_id
        elif member_id in group.pending_members:
            del group.pending_members[member_id]
        elif member_id not in group.members:
            raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID, f"{member_id!r} is not a member")
        else:
            self._member(group, member_id, instance_id)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                            rebalance_timeout_ms, protocol_type, protocols,
                            last_heartbeat=self.stalls.monotonic())
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            self._prepare_rebalance(group, new_member=True)
        else:
            changed = member.protocols != protocols
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_heartbeat = self.stalls.monotonic()
            if group.state in (STABLE, COMPLETING) and not changed and member_id != group.leader:
                return self._join_result(group, member)  # nothing to rebalance
            if group.state != PREPARING:
                self._prepare_rebalance(group, new_member=False)
        waiter = member.join_waiter = loop.create_future()
        self._maybe_complete_join(group)
        return await waiter

    async def _join_static(self, group: Group, new_id: str, instance_id: str, client_id: str,
                           client_host: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                           protocol_type: str, protocols: list) -> JoinResult:
        old_id = group.static_members.get(instance_id)
        old = group.members.pop(old_id, None) if old_id else None
        leader_before = group.leader
        member = Member(new_id, instance_id, client_id, client_host, session_timeout_ms,
                        rebalance_timeout_ms, protocol_type, protocols,
                        last_heartbeat=self.stalls.monotonic())
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if old is not None:
            member.assignment = old.assignment
            if group.leader == old_id:
                group.leader = new_id
            for waiter in (old.join_waiter, old.sync_waiter):
                if waiter is not None and not waiter.done():
                    waiter.set_exception(BrokerError(ErrorCode.FENCED_INSTANCE_ID))
            # As in Kafka, only a change of the group's protocol rebalances: the metadata of
            # a restarted member (the Java client's owned partitions, generation) may differ.
            if group.state == STABLE and group.select_protocol() == group.protocol_name:
                generation = group.generation
                try:
                    await self.store(group.partition, [self._group_metadata_record(group)])
                except BrokerError:
                    # Kafka's answer to a failed store: the old member id is back.
                    if group.static_members.get(instance_id) == new_id:
                        group.members.pop(new_id, None)
                        group.members[old_id] = old
                        group.static_members[instance_id] = old_id
                        if group.leader == new_id:
                            group.leader = old_id
                    raise
                # The leader named is the one before the replacement, as Kafka answers: a
                # rejoining leader must not assign again, a stable group would not share it.
                return JoinResult(ErrorCode.NONE, generation, group.protocol_type,
                                  group.protocol_name, leader_before or "", new_id)
        waiter = member.join_waiter = asyncio.get_running_loop().create_future()
        self._prepare_rebalance(group, new_member=old is None)
        self._maybe_complete_join(group)
        return await waiter

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        result = JoinResult(ErrorCode.NONE, group.generation, group.protocol_type,
                            group.protocol_name, group.leader or "", member.member_id)
        if member.member_id == group.leader:
            result.members = [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                              for m in group.members.values()]
        return result

    def _prepare_rebalance(self, group: Group, new_member: bool) -> None:
        now = self.stalls.monotonic()
        if group.state in (EMPTY, DEAD):
            group.initial_delay_until = now + self.initial_delay_s
        elif new_member and group.state == PREPARING and group.initial_delay_until > now:
            group.initial_delay_until = now + self.initial_delay_s
        if group.state == COMPLETING:
            for m in group.members.values():  # followers waiting for an assignment rejoin
                if m.sync_waiter is not None and not m.sync_waiter.done():
                    m.sync_waiter.set_exception(BrokerError(ErrorCode.REBALANCE_IN_PROGRESS))
        if group.state != PREPARING:
            timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
            group.rebalance_deadline = now + timeout
            group.set_state(PREPARING, self.clock.wall_ms())
        group.initial_delay_until = min(group.initial_delay_until, group.rebalance_deadline)
        self._schedule_check(group)

    def _schedule_check(self, group: Group) -> None:
        """Wake when the initial delay ends, else at the rebalance deadline."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        now = self.stalls.monotonic()
        wake = group.initial_delay_until if now < group.initial_delay_until else group.rebalance_deadline
        group.rebalance_timer = self.clock.call_later(
            max(wake - now, 0) + 0.001, lambda: self._maybe_complete_join(group))

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        now = self.stalls.monotonic()
        everyone_joined = all(m.join_waiter is not None and not m.join_waiter.done()
                              for m in group.members.values())
        deadline_passed = now >= group.rebalance_deadline
        if (not everyone_joined or now < group.initial_delay_until) and not deadline_passed:
            self._schedule_check(group)
            return
        for m in [m for m in group.members.values()
                  if m.join_waiter is None or m.join_waiter.done()]:
            self._remove_member(group, m, rebalance=False)  # did not rejoin in time
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        if not group.members:
            group.generation += 1
            group.protocol_name = group.leader = None
            group.set_state(EMPTY, self.clock.wall_ms())
            self._persist_group_later(group)
            return
        group.generation += 1
        group.protocol_type = next(iter(group.members.values())).protocol_type
        group.protocol_name = group.select_protocol()
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.set_state(COMPLETING, self.clock.wall_ms())
        for member in group.members.values():
            member.assignment = b""
            member.last_heartbeat = now
            waiter, member.join_waiter = member.join_waiter, None
            waiter.set_result(self._join_result(group, member))

    # -- sync ------------------------------------------------------------------------
    async def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: dict[str, bytes]) -> tuple[str | None, str | None, bytes]:
        """A member's assignment. The leader's SyncGroup stores the group's metadata
        with every assignment; members are answered once that is committed, or with the
        store's error (the group then rebalances), as Kafka's. While the group's partition
        loads or is suspended, REBALANCE_IN_PROGRESS sends the member back to JoinGroup, as
        Kafka answers (aiokafka takes COORDINATOR_LOAD_IN_PROGRESS here for a fatal error)."""
        try:
            self.coordinating(group_id)
        except BrokerError as exc:
            if exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise BrokerError(ErrorCode.REBALANCE_IN_PROGRESS, str(exc)) from None
            raise
        group = self.groups.get(group_id)
        member = self._member(group, member_id, instance_id)
        if generation != group.generation:
            raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                              f"generation {generation} is not the group's {group.generation}")
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            raise BrokerError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, "protocol differs from the group's")
        if group.state == PREPARING:
            raise BrokerError(ErrorCode.REBALANCE_IN_PROGRESS)
        if group.state == STABLE:
            return group.protocol_type, group.protocol_name, member.assignment
        member.last_heartbeat = self.stalls.monotonic()
        waiter = member.sync_waiter = asyncio.get_running_loop().create_future()
        if member_id == group.leader:
            await self._store_assignment(group, {m: assignments.get(m, b"") for m in group.members})
        assignment = await waiter
        return group.protocol_type, group.protocol_name, assignment

    async def _store_assignment(self, group: Group, assignments: dict[str, bytes]) -> None:
        """The leader's assignment: written with the group's metadata, then given to the
        members waiting in SyncGroup, unless the group moved on meanwhile (a new
        rebalance, unloaded): those waiting then had their answer already."""
        generation = group.generation
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        error = None
        try:
            await self.store(group.partition, [self._group_metadata_record(group)])
        except BrokerError as exc:
            error = exc
        if self.groups.get(group.group_id) is not group or group.state != COMPLETING \
                or group.generation != generation:
            return
        if error is not None:
            log.info("group %s: its assignment for generation %d was not stored (%s); rebalancing",
                     group.group_id, generation, error)
        else:
            group.set_state(STABLE, self.clock.wall_ms())
        for m in group.members.values():
            if error is not None:
                m.assignment = b""
            if m.sync_waiter is not None and not m.sync_waiter.done():
                if error is not None:
                    m.sync_waiter.set_exception(BrokerError(error.code, str(error)))
                else:
                    m.sync_waiter.set_result(m.assignment)
            m.sync_waiter = None
        if error is not None and group.members:
            self._prepare_rebalance(group, new_member=False)

    # -- heartbeat and leave -----------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        """While the group's partition loads or is suspended the heartbeat is answered
        blindly, as Kafka does (aiokafka takes COORDINATOR_LOAD_IN_PROGRESS here for a
        fatal error: its consumer stops); a suspended group's member counts as heard."""
        try:
            self.coordinating(group_id)
        except BrokerError as exc:
            if exc.code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise
            group = self.groups.get(group_id)
            member = group.members.get(member_id) if group is not None else None
            if member is not None:
                member.last_heartbeat = self.stalls.monotonic()
            return
        group = self.groups.get(group_id)
        member = self._member(group, member_id, instance_id)
        member.last_heartbeat = self.stalls.monotonic()
        if group.state == PREPARING:
            raise BrokerError(ErrorCode.REBALANCE_IN_PROGRESS)
        if generation != group.generation:
            raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                              f"generation {generation} is not the group's {group.generation}")

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """Remove members; returns an error code per (member id, instance id). Raises
        BrokerError when the group is not coordinated here."""
        self.coordinating(group_id)
        group = self.groups.get(group_id)
        codes = []
        for member_id, instance_id in members:
            try:
                if instance_id is not None and not member_id and group is not None:
                    member_id = group.static_members.get(instance_id, "")
                member = self._member(group, member_id, instance_id)
                self._remove_member(group, member, rebalance=True)
                codes.append(ErrorCode.NONE)
            except BrokerError as exc:
                codes.append(exc.code)
        return codes

    def _remove_member(self, group: Group, member: Member, rebalance: bool) -> None:
        group.members.pop(member.member_id, None)
        if member.group_instance_id and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_exception(BrokerError(ErrorCode.UNKNOWN_MEMBER_ID))
        if not rebalance:
            return
        if group.state in (STABLE, COMPLETING):
            if group.members:
                self._prepare_rebalance(group, new_member=False)
            else:
                group.generation += 1
                group.protocol_name = group.leader = None
                group.set_state(EMPTY, self.clock.wall_ms())
                self._persist_group_later(group)
        elif group.state == PREPARING:
            self._maybe_complete_join(group)

    def expire_sessions(self) -> None:
        """Remove the members of coordinated groups whose session timed out."""
        coordinated = set(self.runtime.coordinated.coordinated())
        self.consumer_groups.expire_sessions(coordinated)
        now = self.stalls.monotonic()
        for group in list(self.groups.values()):
            if group.partition not in coordinated:
                continue
            for member_id, deadline in list(group.pending_members.items()):
                if now > deadline:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                waiting = member.join_waiter is not None and not member.join_waiter.done()
                if not waiting and now - member.last_heartbeat > member.session_timeout_ms / 1000:
                    log.info("member %s of group %s missed its session timeout; removing it",
                             member.member_id, group.group_id)
                    self._remove_member(group, member, rebalance=True)

    # -- what the offsets manager asks -------------------------------------------------
    def validate_offset_commit(self, group_id: str, generation: int, member_id: str,
                               instance_id: str | None, partitions) -> tuple[int, dict]:
        """An OffsetCommit's group, member and generation: the group's partition, and the
        error of each of `partitions` the member may not commit (a consumer group's rule,
        see `ConsumerGroups.validate_offset_commit`). A group that does not exist is created
        (without members, it accepts commits with generation -1 and no member id)."""
        self._check_group_id(group_id)
        index = self.coordinating(group_id)
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            return index, self.consumer_groups.validate_offset_commit(consumer_group, generation, member_id,
                                                                      partitions)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            if generation >= 0 or member_id:
                raise BrokerError(ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"group {group_id!r} has no generation {generation}")
            self._new_group(group_id, index)
        elif group.members or generation >= 0 or member_id:
            if generation < 0 and not member_id:
                raise BrokerError(ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"group {group_id!r} has members: commit as one of them")
            self._member(group, member_id, instance_id)
            if generation != group.generation:
                raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                                  f"generation {generation} is not the group's {group.generation}")
            if group.state == COMPLETING:
                # Kafka's rule: while a rebalance is only being prepared, members still commit
                # for their generation (what they consumed before rejoining); once the new
                # generation exists, commits wait for its assignment.
                raise BrokerError(ErrorCode.REBALANCE_IN_PROGRESS)
        return index, {}

    def validate_txn_offset_commit(self, group_id: str, generation: int, member_id: str,
                                   instance_id: str | None) -> int:
        """A TxnOffsetCommit's group: any state, the member and generation checked when
        given; the group's partition (the group is created if need be)."""
        self._check_group_id(group_id)
        index = self.coordinating(group_id)
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            self.consumer_groups.validate_offset_commit(consumer_group, generation, member_id)
            return index
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            group = self._new_group(group_id, index)
        if generation >= 0 or member_id or instance_id is not None:
            self._member(group, member_id, instance_id)
            if generation != group.generation:
                raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                                  f"generation {generation} is not the group's {group.generation}")
        return index

    def validate_offset_fetch(self, group_id: str, member_id: str | None = None, member_epoch: int = -1) -> bool:
        """Whether the group exists (NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        unless coordinated here). A consumer group checks the member and epoch given (the
        classic group ignores them, as Kafka's)."""
        self.coordinating(group_id)
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            self.consumer_groups.validate_offset_fetch(consumer_group, member_id, member_epoch)
            return True
        group = self.groups.get(group_id)
        return group is not None and group.state != DEAD

    def validate_offset_delete(self, group_id: str) -> set[str]:
        """An OffsetDelete's group: the topics whose offsets must stay (those its members
        subscribe to). GROUP_ID_NOT_FOUND for no such group, NON_EMPTY_GROUP for a group
        with members that is not a consumer group."""
        self._check_group_id(group_id)
        self.coordinating(group_id)
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            return self.consumer_groups.group_subscribed_topics(consumer_group)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if not group.members:
            return set()
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise BrokerError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has active members")
        return self._subscribed_topics(group)

    @staticmethod
    def _subscribed_topics(group: Group) -> set[str]:
        """The topics the members of a consumer-protocol group subscribe to (every member's
        metadata for the group's protocol, or while none is chosen, for any protocol)."""
        topics: set[str] = set()
        for member in group.members.values():
            for name, metadata in member.protocols:
                if group.protocol_name and name != group.protocol_name:
                    continue
                try:
                    _, subscription = CONSUMER_PROTOCOL_SUBSCRIPTION.decode_versioned(metadata)
                except ValueError:  # wire's DecodeError, or bytes that are not text
                    continue
                topics.update(subscription.topics)
        return topics

    # -- describing and deleting groups ------------------------------------------------
    def describe(self, group_id: str) -> Group | None:
        """The group (None when it does not exist), if coordinated here."""
        self.coordinating(group_id)
        group = self.groups.get(group_id)
        return None if group is None or group.state == DEAD else group

    def describe_consumer_group(self, group_id: str):
        """The consumer group (ConsumerGroupDescribe): GROUP_ID_NOT_FOUND when there is
        none, or the group is a classic one, as Kafka answers."""
        self.coordinating(group_id)
        group = self.consumer_groups.groups.get(group_id)
        if group is None:
            classic = self.classic_group(group_id) is not None
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND,
                              f"Group {group_id} is not a consumer group." if classic else f"Group {group_id} not found.")
        return group

    def listed(self) -> list[ListedGroup]:
        """The groups of the partitions coordinated here, classic and consumer;
        COORDINATOR_LOAD_IN_PROGRESS while one of them loads (Kafka's ListGroups answer)."""
        topic = self.broker.topics.topics.get(offsets_log.TOPIC)
        for index in sorted(topic.partitions) if topic is not None else ():
            try:
                self.runtime.coordinated.epoch(index)
            except BrokerError as exc:
                if exc.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                    raise
        coordinated = set(self.runtime.coordinated.coordinated())
        return [ListedGroup(g.group_id, g.protocol_type or "", g.state, CLASSIC_GROUP_TYPE)
                for g in self.groups.values() if g.partition in coordinated and g.state != DEAD] + \
            [ListedGroup(g.group_id, CONSUMER_PROTOCOL_TYPE, g.state, consumer_group.GROUP_TYPE)
             for g in self.consumer_groups.groups.values() if g.partition in coordinated]

    async def delete_group(self, group_id: str) -> None:
        """Delete an empty group and its offsets; done once the tombstones are committed."""
        self._check_group_id(group_id)
        self.coordinating(group_id)
        consumer_group = self.consumer_groups.groups.get(group_id)
        if consumer_group is not None:
            await self.consumer_groups.delete(consumer_group, self.offsets.tombstones(group_id))
            self.offsets.forget(group_id)
            return
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if group.members:
            raise BrokerError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has active members")
        records = self.offsets.tombstones(group_id) + [offsets_log.group_record(group_id, None)]
        # Dead while the tombstones are written: a new member or commit meanwhile makes
        # a new group, written after them.
        state = group.state
        group.set_state(DEAD, self.clock.wall_ms())
        try:
            await self.store(group.partition, records)
        except BrokerError:
            if self.groups.get(group_id) is group:
                group.set_state(state, self.clock.wall_ms())
            raise
        if self.groups.get(group_id) is group:
            del self.groups[group_id]
            self.offsets.forget(group_id)

    def expire_offsets(self) -> None:
        """Drop offsets of groups that have been empty longer than the retention, and the
        groups left with none (a consumer group's by their commit times, see
        `ConsumerGroups.expire_offsets`). Writes awaiting replication on the same partition hold up
        only the offsets they write (and the group's removal), as in Kafka: the others
        expire between them."""
        now_ms = self.clock.wall_ms()
        writable = {index for index in self.runtime.coordinated.coordinated() if self.runtime.leads(index)}
        for group in list(self.groups.values()):
            if group.partition not in writable or group.members or group.state != EMPTY or \
                    now_ms - group.state_since_ms < self.offsets.retention_ms:
                continue
            records, emptied = self.offsets.expire(group.group_id, now_ms)
            if not records:
                continue
            if emptied:
                records.append(offsets_log.group_record(group.group_id, None))
                del self.groups[group.group_id]
                self.offsets.forget(group.group_id)
            self._write_later(group, records)
        for records, group in self.consumer_groups.expire_offsets(writable, now_ms):
            self._write_later(group, records)
