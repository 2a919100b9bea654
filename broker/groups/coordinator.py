"""The classic consumer-group coordinator: membership, rebalances, committed offsets.

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
  wait in JoinGroup, which the rebalance timeout governs).
- OffsetCommit needs the member and generation of a group that is Stable or preparing a
  rebalance (REBALANCE_IN_PROGRESS while it completes one); a group with no members
  accepts commits with generation -1 and no member id (`assign()` users).
- Offsets and group metadata are written to `__consumer_offsets` before the request is
  answered; the state is replayed from there on start. Offsets of groups left empty
  for `offsets.retention.minutes` expire.
- OffsetDelete removes offsets of a group that exists: any of an empty group's, and of a
  consumer group with members those of topics no member subscribes to
  (GROUP_SUBSCRIBED_TO_TOPIC for the others); a group with members of another protocol
  type is NON_EMPTY_GROUP.
- Transactional commits (TxnOffsetCommit) need no particular group state; a member id,
  instance id or generation, when given, must match as for OffsetCommit. Their offsets
  are written as the producer's transactional batch and stay pending, per producer,
  until the transaction coordinator's marker: COMMIT applies them, ABORT drops them.
  Pending offsets are invisible to OffsetFetch (which answers UNSTABLE_OFFSET_COMMIT
  for them when asked for stable offsets), never expire, and keep their partition of
  `__consumer_offsets` from being cleaned.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import Counter
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode
from wire.messages import CONSUMER_PROTOCOL_SUBSCRIPTION, GROUP_METADATA_VALUE

from broker.clock import Timer
from broker.errors import BrokerError
from broker.groups import offsets_log
from broker.groups.offsets_log import CommittedOffset

log = logging.getLogger("sluice.groups")

CONSUMER_PROTOCOL_TYPE = "consumer"  # the protocol type of the consumer's group protocol

EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (
    "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")




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
    last_heartbeat: float = field(kw_only=True)  # the coordinator clock's monotonic()

    def metadata_for(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, float] = field(default_factory=dict)  # member id -> deadline
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # Transactional commits awaiting their transaction's end: producer id -> offsets.
    pending_txn: dict[int, dict[tuple[str, int], CommittedOffset]] = field(default_factory=dict)
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


class GroupCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.clock = broker.clock
        cfg = broker.config
        self.initial_delay_s = cfg.group_initial_rebalance_delay_ms / 1000
        self.min_session_ms = cfg.group_min_session_timeout_ms
        self.max_session_ms = cfg.group_max_session_timeout_ms
        self.partitions = cfg.offsets_topic_num_partitions
        self.retention_ms = cfg.offsets_retention_minutes * 60_000
        self.max_metadata_bytes = cfg.offset_metadata_max_bytes
        self.groups: dict[str, Group] = {}

    # -- durability ------------------------------------------------------------------
    def _offsets_topic(self):
        topics = self.broker.topics
        topic = topics.topics.get(offsets_log.TOPIC)
        if topic is None:
            topic = topics.create(offsets_log.TOPIC, self.partitions,
                                  {"cleanup.policy": "compact",
                                   "segment.bytes": str(self.broker.config.offsets_topic_segment_bytes)})
        return topic

    def _partition_of(self, group_id: str):
        topic = self._offsets_topic()
        return topic.partitions[offsets_log.partition_for(group_id, len(topic.partitions))]

    def _write(self, group_id: str, records: list) -> None:
        """Append to the group's offsets partition; raises BrokerError if that fails."""
        try:
            offsets_log.append_records(self._partition_of(group_id), records, self.clock.wall_ms())
        except BrokerError as exc:  # KAFKA_STORAGE_ERROR: the log has warned
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from None

    def load(self) -> None:
        """Replay `__consumer_offsets` (when it exists) into memory."""
        topic = self.broker.topics.topics.get(offsets_log.TOPIC)
        if topic is None:
            return
        for partition in topic.partitions.values():
            pending: dict[int, set[str]] = {}  # producer id -> groups with its offsets pending
            for entry in offsets_log.read_entries(partition):
                if entry[0] == "marker":
                    _, producer_id, committed = entry
                    for group_id in pending.pop(producer_id, ()):
                        group = self.groups.get(group_id)
                        if group is not None:
                            self._end_pending(group, producer_id, committed)
                    continue
                _, key, value, producer_id = entry
                decoded = offsets_log.decode_record(key, value)
                if decoded is None:
                    continue
                kind, ident, payload = decoded
                if kind == "offset":
                    group_id, topic_name, partition = ident
                    # Without a group record (standalone commits) the commit timestamps
                    # alone decide when its offsets expire, not the time of this start.
                    group = self.groups.setdefault(group_id, Group(group_id, state_since_ms=0))
                    if producer_id >= 0 and payload is not None:
                        group.pending_txn.setdefault(producer_id, {})[(topic_name, partition)] = payload
                        pending.setdefault(producer_id, set()).add(group_id)
                    elif payload is None:
                        group.offsets.pop((topic_name, partition), None)
                    else:
                        group.offsets[(topic_name, partition)] = payload
                elif payload is None:
                    self.groups.pop(ident, None)
                else:
                    self._restore(ident, payload)
        for group_id in [g for g, group in self.groups.items() if not group.members and
                         not group.offsets and not group.pending_txn and group.generation == 0]:
            del self.groups[group_id]
        log.info("loaded %d consumer group(s) from %s", len(self.groups), offsets_log.TOPIC)

    def _restore(self, group_id: str, value) -> None:
        group = self.groups.setdefault(group_id, Group(group_id, state_since_ms=self.clock.wall_ms()))
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
                            last_heartbeat=self.clock.monotonic())
            group.members[m.member_id] = member
            if m.group_instance_id:
                group.static_members[m.group_instance_id] = m.member_id
        group.set_state(STABLE if group.members else EMPTY, self.clock.wall_ms())
        if not group.members and value.current_state_timestamp >= 0:
            group.state_since_ms = value.current_state_timestamp  # empty since then, for expiry

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

    def _persist_group(self, group: Group) -> None:
        self._write(group.group_id, [self._group_metadata_record(group)])

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
        if not self.min_session_ms <= session_timeout_ms <= self.max_session_ms:
            raise BrokerError(ErrorCode.INVALID_SESSION_TIMEOUT,
                              f"session timeout {session_timeout_ms} ms is outside "
                              f"[{self.min_session_ms}, {self.max_session_ms}]")
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            group = self.groups[group_id] = Group(group_id, state_since_ms=self.clock.wall_ms())
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
                group.pending_members[new_id] = self.clock.monotonic() + session_timeout_ms / 1000
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
                            last_heartbeat=self.clock.monotonic())
            group.members[member_id] = member
            if instance_id is not None:
                group.static_members[instance_id] = member_id
            self._prepare_rebalance(group, new_member=True)
        else:
            changed = member.protocols != protocols
            member.protocols = protocols
            member.session_timeout_ms = session_timeout_ms
            member.rebalance_timeout_ms = rebalance_timeout_ms
            member.last_heartbeat = self.clock.monotonic()
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
                        last_heartbeat=self.clock.monotonic())
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
                self._persist_group(group)
                # The leader named is the one before the replacement, as Kafka answers: a
                # rejoining leader must not assign again, a stable group would not share it.
                return JoinResult(ErrorCode.NONE, group.generation, group.protocol_type,
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
        now = self.clock.monotonic()
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
        now = self.clock.monotonic()
        wake = group.initial_delay_until if now < group.initial_delay_until else group.rebalance_deadline
        group.rebalance_timer = self.clock.call_later(
            max(wake - now, 0) + 0.001, lambda: self._maybe_complete_join(group))

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        now = self.clock.monotonic()
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
            self._persist_group(group)
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
        member.last_heartbeat = self.clock.monotonic()
        if member_id == group.leader:
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self._persist_group(group)
            group.set_state(STABLE, self.clock.wall_ms())
            for m in group.members.values():
                if m.sync_waiter is not None and not m.sync_waiter.done():
                    m.sync_waiter.set_result(m.assignment)
                m.sync_waiter = None
            return group.protocol_type, group.protocol_name, member.assignment
        waiter = member.sync_waiter = asyncio.get_running_loop().create_future()
        assignment = await waiter
        return group.protocol_type, group.protocol_name, assignment

    # -- heartbeat and leave -----------------------------------------------------------
    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> None:
        group = self.groups.get(group_id)
        member = self._member(group, member_id, instance_id)
        member.last_heartbeat = self.clock.monotonic()
        if group.state == PREPARING:
            raise BrokerError(ErrorCode.REBALANCE_IN_PROGRESS)
        if generation != group.generation:
            raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                              f"generation {generation} is not the group's {group.generation}")

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """Remove members; returns an error code per (member id, instance id)."""
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
                self._persist_group(group)
        elif group.state == PREPARING:
            self._maybe_complete_join(group)

    def expire_sessions(self) -> None:
        now = self.clock.monotonic()
        for group in list(self.groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if now > deadline:
                    del group.pending_members[member_id]
            for member in list(group.members.values()):
                waiting = member.join_waiter is not None and not member.join_waiter.done()
                if not waiting and now - member.last_heartbeat > member.session_timeout_ms / 1000:
                    log.info("member %s of group %s missed its session timeout; removing it",
                             member.member_id, group.group_id)
                    self._remove_member(group, member, rebalance=True)

    # -- offsets ---------------------------------------------------------------------
    def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
               offsets: dict[tuple[str, int], CommittedOffset]) -> dict[tuple[str, int], int]:
        """Store offsets; returns an error code per partition. Raises BrokerError for
        errors that concern the whole request."""
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            if generation >= 0 or member_id:
                raise BrokerError(ErrorCode.ILLEGAL_GENERATION if generation >= 0 else ErrorCode.UNKNOWN_MEMBER_ID,
                                  f"group {group_id!r} has no generation {generation}")
            group = self.groups[group_id] = Group(group_id, state_since_ms=self.clock.wall_ms())
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
        codes, accepted = self._acceptable(offsets)
        if accepted:
            self._write(group_id, [offsets_log.offset_record(group_id, t, p, c)
                                   for (t, p), c in accepted.items()])
            group.offsets.update(accepted)
        return codes

    def _acceptable(self, offsets: dict[tuple[str, int], CommittedOffset]) -> tuple[dict, dict]:
        """(error code per partition, the offsets that may be stored): partitions must
        exist and metadata stay within `offset.metadata.max.bytes`."""
        codes: dict[tuple[str, int], int] = {}
        accepted = {}
        for (topic, partition), committed in offsets.items():
            try:
                self.broker.topics.partition(topic, partition)
            except BrokerError:
                codes[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if committed.metadata is not None and len(committed.metadata.encode()) > self.max_metadata_bytes:
                codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[(topic, partition)] = committed
            codes[(topic, partition)] = ErrorCode.NONE
        return codes, accepted

    # -- transactional offsets --------------------------------------------------------
    def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                   member_id: str, instance_id: str | None,
                   offsets: dict[tuple[str, int], CommittedOffset],
                   verify=None) -> dict[tuple[str, int], int]:
        """Write offsets as part of a producer's transaction; they stay pending until
        `end_transaction`. `verify()` (the transaction coordinator's check) runs once
        the group accepted the commit, before anything is written. Returns an error
        code per partition; raises BrokerError for whole-request errors."""
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            group = self.groups[group_id] = Group(group_id, state_since_ms=self.clock.wall_ms())
        if generation >= 0 or member_id or instance_id is not None:
            self._member(group, member_id, instance_id)
            if generation != group.generation:
                raise BrokerError(ErrorCode.ILLEGAL_GENERATION,
                                  f"generation {generation} is not the group's {group.generation}")
        if verify is not None:
            verify()
        codes, accepted = self._acceptable(offsets)
        if accepted:
            records = [offsets_log.offset_record(group_id, t, p, c) for (t, p), c in accepted.items()]
            try:
                offsets_log.append_records(self._partition_of(group_id), records, self.clock.wall_ms(),
                                          producer_id, producer_epoch)
            except BrokerError as exc:  # e.g. a stale producer epoch
                code = exc.code
                if code == ErrorCode.KAFKA_STORAGE_ERROR:  # not a TxnOffsetCommit error code
                    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
                raise BrokerError(code, str(exc)) from None
            group.pending_txn.setdefault(producer_id, {}).update(accepted)
        return codes

    def partition_for(self, group_id: str) -> int:
        """The `__consumer_offsets` partition that holds the group (created if need be)."""
        return offsets_log.partition_for(group_id, len(self._offsets_topic().partitions))

    def end_transaction(self, producer_id: int, partition: int, committed: bool) -> None:
        """The transaction coordinator wrote a marker for `producer_id` to offsets
        partition `partition`: apply (COMMIT) or drop (ABORT) its pending offsets there."""
        topic = self.broker.topics.topics.get(offsets_log.TOPIC)
        if topic is None:
            return
        for group in list(self.groups.values()):
            if producer_id in group.pending_txn and \
                    offsets_log.partition_for(group.group_id, len(topic.partitions)) == partition:
                self._end_pending(group, producer_id, committed)

    @staticmethod
    def _end_pending(group: Group, producer_id: int, committed: bool) -> None:
        offsets = group.pending_txn.pop(producer_id, {})
        if committed:
            group.offsets.update(offsets)

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions with transactional offsets not yet committed or aborted."""
        group = self.groups.get(group_id)
        if group is None:
            return set()
        return {tp for offsets in group.pending_txn.values() for tp in offsets}

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self.groups.get(group_id)
        return {} if group is None or group.state == DEAD else group.offsets

    def delete_group(self, group_id: str) -> None:
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        if group.members:
            raise BrokerError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has active members")
        records = [offsets_log.offset_record(group_id, t, p, None) for t, p in group.offsets]
        records.append(offsets_log.group_record(group_id, None))
        self._write(group_id, records)
        group.set_state(DEAD, self.clock.wall_ms())
        del self.groups[group_id]

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """OffsetDelete: drop the group's committed offsets of `partitions`; returns an
        error code per partition. Raises BrokerError for whole-request errors: no such
        group (GROUP_ID_NOT_FOUND), or a group with members that is not a consumer group
        (NON_EMPTY_GROUP). A consumer group keeps the offsets of topics its members
        subscribe to (GROUP_SUBSCRIBED_TO_TOPIC). A partition without an offset is no error."""
        self._check_group_id(group_id)
        group = self.groups.get(group_id)
        if group is None or group.state == DEAD:
            raise BrokerError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} does not exist")
        subscribed: set[str] = set()
        if group.members:
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                raise BrokerError(ErrorCode.NON_EMPTY_GROUP, f"group {group_id!r} has active members")
            subscribed = self._subscribed_topics(group)
        codes, deleted = {}, []
        for topic, partition in partitions:
            if topic in subscribed:
                codes[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            codes[(topic, partition)] = ErrorCode.NONE
            if (topic, partition) in group.offsets:
                deleted.append((topic, partition))
        if deleted:
            self._write(group_id, [offsets_log.offset_record(group_id, t, p, None) for t, p in deleted])
            for tp in deleted:
                del group.offsets[tp]
        return codes

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

    def expire_offsets(self) -> None:
        """Drop offsets of groups that have been empty longer than the retention."""
        now_ms = self.clock.wall_ms()
        for group in list(self.groups.values()):
            if group.members or group.state != EMPTY or group.pending_txn or \
                    now_ms - group.state_since_ms < self.retention_ms:
                continue
            stale = [tp for tp, c in group.offsets.items() if now_ms - c.commit_timestamp >= self.retention_ms]
            if not stale:
                continue
            records = [offsets_log.offset_record(group.group_id, t, p, None) for t, p in stale]
            for tp in stale:
                del group.offsets[tp]
            if not group.offsets:
                records.append(offsets_log.group_record(group.group_id, None))
                del self.groups[group.group_id]
            self._write(group.group_id, records)
            log.info("expired %d offset(s) of empty group %s", len(stale), group.group_id)

    def clean_offsets_topic(self) -> None:
        """Clean every offsets partition with two or more sealed segments (see offsets_log)."""
        topic = self.broker.topics.topics.get(offsets_log.TOPIC)
        if topic is None:
            return
        for index, partition in sorted(topic.partitions.items()):
            if partition.segment_count < 3 or partition.has_open_transactions:
                continue  # small, or holding transactional offsets that still await a marker
            live = []
            for group in self.groups.values():
                if offsets_log.partition_for(group.group_id, len(topic.partitions)) != index:
                    continue
                if group.generation or group.members:
                    live.append(self._group_metadata_record(group))
                live += [offsets_log.offset_record(group.group_id, t, p, c)
                         for (t, p), c in group.offsets.items()]
            offsets_log.clean(partition, live, self.clock.wall_ms())
