"""The offsets manager (Kafka's OffsetMetadataManager): the committed offsets of the
groups coordinated here, whatever their type; the group types (the classic group in
`groups.coordinator`) only validate who may commit. Rules (Kafka's):
- OffsetCommit and TxnOffsetCommit store the offsets of partitions that exist (in the
  cluster's metadata) with metadata within `offset.metadata.max.bytes`; the others get
  UNKNOWN_TOPIC_OR_PARTITION or OFFSET_METADATA_TOO_LARGE.
- Offsets are written to `__consumer_offsets` before the request is answered, and
  applied to memory once committed (acks=all, the high watermark past them), in log
  order: writes committed out of order still apply in the order of the log.
- Transactional commits (TxnOffsetCommit) are written as the producer's transactional
  batch and stay pending, per producer, until the transaction coordinator's marker:
  COMMIT applies them, ABORT drops them. Pending offsets are invisible to OffsetFetch
  (which answers UNSTABLE_OFFSET_COMMIT for them when asked for stable offsets) and
  never expire. A committed transactional offset does not replace one written later in
  the log by a plain commit (Kafka's rule, which keeps the state the same once the log
  cleaner has compacted the topic).
- Offsets of groups left empty for `offsets.retention.minutes` expire (the group says
  when it is empty); writes awaiting replication hold up only the offsets they write.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID

from broker.groups import offsets_log
from broker.groups.offsets_log import CommittedOffset

log = logging.getLogger("sluice.groups")

# Kafka's offsets.commit.timeout.ms: how long a write a client waits for may take to be
# replicated before the client is answered COORDINATOR_NOT_AVAILABLE (and retries).
COMMIT_TIMEOUT_S = 5.0

TopicPartition = tuple[str, int]


@dataclass
class GroupOffsets:
    """One group's offsets."""
    partition: int  # the group's partition of __consumer_offsets
    committed: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    # The log end after the write each offset in `committed` comes from: writes committed
    # out of order (their waits end in any order) still apply in log order.
    written_at: dict[TopicPartition, int] = field(default_factory=dict)
    # Transactional commits awaiting their transaction's end: producer id -> partition ->
    # (offset, the log end after its write).
    pending_txn: dict[int, dict[TopicPartition, tuple[CommittedOffset, int]]] = field(
        default_factory=dict)
    # Partitions whose offset a write awaiting replication sets or deletes (not applied
    # yet): expiry leaves their offsets, and the group, alone meanwhile (Kafka's
    # pendingOffsetCommits).
    in_flight: Counter[TopicPartition] = field(default_factory=Counter)

    def apply(self, offsets: dict[TopicPartition, CommittedOffset | None], end: int) -> None:
        """Committed offsets (None: deleted) written before log end `end` go to memory,
        unless a later write of the same partition's offset was applied already."""
        for tp, committed in offsets.items():
            if self.written_at.get(tp, -1) > end:
                continue
            self.written_at[tp] = end
            if committed is None:
                self.committed.pop(tp, None)
            else:
                self.committed[tp] = committed

    def end_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's transaction ended: its offsets apply (COMMIT) unless a plain
        commit of the same partition was written after them, or are dropped (ABORT)."""
        for tp, (offset, written_at) in self.pending_txn.pop(producer_id, {}).items():
            if committed:
                self.apply({tp: offset}, written_at)

    def holds_anything(self) -> bool:
        return bool(self.committed or self.pending_txn)


class OffsetsReplay:
    """The offsets of one partition of `__consumer_offsets`, built from its records in
    log order (transactional offsets wait for their marker)."""

    def __init__(self, index: int):
        self._index = index
        self.groups: dict[str, GroupOffsets] = {}
        self._pending: dict[int, set[str]] = {}  # producer id -> groups with its offsets pending

    def offset(self, group_id: str, tp: TopicPartition, committed: CommittedOffset | None,
               producer_id: int, position: int) -> None:
        offsets = self.groups.setdefault(group_id, GroupOffsets(self._index))
        if producer_id >= 0:
            pending = offsets.pending_txn.setdefault(producer_id, {})
            if committed is None:
                pending.pop(tp, None)
            else:
                pending[tp] = (committed, position)
            self._pending.setdefault(producer_id, set()).add(group_id)
        else:
            offsets.apply({tp: committed}, position)

    def marker(self, producer_id: int, committed: bool) -> None:
        for group_id in self._pending.pop(producer_id, ()):
            offsets = self.groups.get(group_id)
            if offsets is not None:
                offsets.end_transaction(producer_id, committed)

    def forget(self, group_id: str) -> None:
        """The group's tombstone: its offsets go with it."""
        self.groups.pop(group_id, None)


class OffsetsManager:
    """The committed offsets of the groups coordinated here, by group id. `groups` is the
    group coordinator: it validates commits, deletions and fetches against the group's
    membership (Kafka's group.validateOffsetCommit and kin), and says when a group is
    empty long enough for its offsets to expire."""

    def __init__(self, broker, runtime, groups):
        self.broker = broker
        self.clock = broker.clock
        self.runtime = runtime
        self._groups = groups
        self.retention_ms = broker.config.offsets_retention_minutes * 60_000
        self.max_metadata_bytes = broker.config.offset_metadata_max_bytes
        self._by_group: dict[str, GroupOffsets] = {}

    # -- the state -------------------------------------------------------------------
    def _of(self, group_id: str, index: int) -> GroupOffsets:
        offsets = self._by_group.get(group_id)
        if offsets is None:
            offsets = self._by_group[group_id] = GroupOffsets(index)
        return offsets

    def offsets_of(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets as they are in memory (no coordination check)."""
        offsets = self._by_group.get(group_id)
        return {} if offsets is None else offsets.committed

    def holds_anything(self, group_id: str) -> bool:
        offsets = self._by_group.get(group_id)
        return offsets is not None and offsets.holds_anything()

    def forget(self, group_id: str) -> None:
        """The group is gone from memory (deleted, expired, replaced): its offsets too."""
        self._by_group.pop(group_id, None)

    def loaded(self, replay: OffsetsReplay, group_ids) -> None:
        """A partition's replay is done: the offsets of `group_ids` (the groups kept) apply."""
        self._by_group.update({g: replay.groups[g] for g in group_ids if g in replay.groups})

    def unload(self, index: int) -> None:
        for group_id in [g for g, offsets in self._by_group.items() if offsets.partition == index]:
            del self._by_group[group_id]

    async def _store(self, offsets: GroupOffsets, records: list, written, producer_id: int = NO_PRODUCER_ID,
                     producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
        """Append to the group's partition and wait until the records are committed; the
        log end after them. `written`: the partitions whose offsets they set or delete,
        in flight meanwhile."""
        index = offsets.partition
        partition, end = self.runtime.append(index, self.runtime.coordinated.epoch(index), records,
                                             producer_id, producer_epoch)
        writing = Counter(written)
        offsets.in_flight += writing
        try:
            await self.runtime.committed(partition, end, COMMIT_TIMEOUT_S)
        finally:
            offsets.in_flight -= writing
        return end

    # -- commits ---------------------------------------------------------------------
    async def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                     offsets: dict[TopicPartition, CommittedOffset]) -> dict[TopicPartition, int]:
        """Store offsets; returns an error code per partition once they are committed
        (then they are in memory). Raises BrokerError for errors that concern the whole
        request."""
        index, refused = self._groups.validate_offset_commit(group_id, generation, member_id, instance_id,
                                                             offsets.keys())
        codes, accepted = self._acceptable({tp: c for tp, c in offsets.items() if tp not in refused})
        codes.update(refused)
        if accepted:
            state = self._of(group_id, index)
            end = await self._store(state, [offsets_log.offset_record(group_id, t, p, c)
                                            for (t, p), c in accepted.items()], accepted.keys())
            state.apply(accepted, end)
        return codes

    def _acceptable(self, offsets: dict[TopicPartition, CommittedOffset]) -> tuple[dict, dict]:
        """(error code per partition, the offsets that may be stored): partitions must
        exist (in the cluster's metadata) and metadata stay within `offset.metadata.max.bytes`."""
        codes: dict[TopicPartition, int] = {}
        accepted = {}
        for (topic, partition), committed in offsets.items():
            known = self.broker.metadata.topic(topic)
            if known is None or partition not in known.partitions:
                codes[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if committed.metadata is not None and len(committed.metadata.encode()) > self.max_metadata_bytes:
                codes[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            accepted[(topic, partition)] = committed
            codes[(topic, partition)] = ErrorCode.NONE
        return codes, accepted

    async def txn_commit(self, group_id: str, producer_id: int, producer_epoch: int, generation: int,
                         member_id: str, instance_id: str | None,
                         offsets: dict[TopicPartition, CommittedOffset],
                         verify=None) -> dict[TopicPartition, int]:
        """Write offsets as part of a producer's transaction; they stay pending until
        `end_transaction`. `verify()` (the transaction coordinator's check) runs once
        the group accepted the commit, before anything is written. Returns an error
        code per partition once the write is committed (the offsets are then pending in
        memory); raises BrokerError for whole-request errors (NOT_COORDINATOR,
        COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE when the write is not
        replicated in time, the producer's errors from the append)."""
        index = self._groups.validate_txn_offset_commit(group_id, generation, member_id, instance_id)
        if verify is not None:
            verify()
        codes, accepted = self._acceptable(offsets)
        if accepted:
            state = self._of(group_id, index)
            records = [offsets_log.offset_record(group_id, t, p, c) for (t, p), c in accepted.items()]
            end = await self._store(state, records, accepted.keys(), producer_id, producer_epoch)
            state.pending_txn.setdefault(producer_id, {}).update(
                {tp: (committed, end) for tp, committed in accepted.items()})
        return codes

    def end_transaction(self, producer_id: int, partition: int, committed: bool) -> None:
        """The transaction coordinator wrote a marker for `producer_id` to offsets
        partition `partition`: apply (COMMIT) or drop (ABORT) its pending offsets there."""
        for offsets in list(self._by_group.values()):
            if offsets.partition == partition and producer_id in offsets.pending_txn:
                offsets.end_transaction(producer_id, committed)

    # -- fetches ---------------------------------------------------------------------
    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions with transactional offsets not yet committed or aborted."""
        self._groups.validate_offset_fetch(group_id)
        offsets = self._by_group.get(group_id)
        if offsets is None:
            return set()
        return {tp for pending in offsets.pending_txn.values() for tp in pending}

    def committed(self, group_id: str, member_id: str | None = None,
                  member_epoch: int = -1) -> dict[TopicPartition, CommittedOffset]:
        """The group's committed offsets (NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS
        unless coordinated here; a consumer group's member, when given, must be at its
        epoch: OffsetFetch v9)."""
        if not self._groups.validate_offset_fetch(group_id, member_id, member_epoch):
            return {}
        return self.offsets_of(group_id)

    # -- deletions -------------------------------------------------------------------
    async def delete(self, group_id: str,
                     partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        """OffsetDelete: drop the group's committed offsets of `partitions`; returns an
        error code per partition once the deletion is committed. Raises BrokerError for
        whole-request errors (the group's: see `validate_offset_delete`). The offsets of
        topics the group's members subscribe to stay (GROUP_SUBSCRIBED_TO_TOPIC). A
        partition without an offset is no error."""
        subscribed = self._groups.validate_offset_delete(group_id)
        state = self._by_group.get(group_id)
        codes, deleted = {}, []
        for topic, partition in partitions:
            if topic in subscribed:
                codes[(topic, partition)] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            codes[(topic, partition)] = ErrorCode.NONE
            if state is not None and (topic, partition) in state.committed:
                deleted.append((topic, partition))
        if deleted:
            end = await self._store(state, [offsets_log.offset_record(group_id, t, p, None)
                                            for t, p in deleted], deleted)
            state.apply(dict.fromkeys(deleted), end)
        return codes

    def tombstones(self, group_id: str) -> list:
        """The records deleting every committed offset of the group (DeleteGroups)."""
        return [offsets_log.offset_record(group_id, t, p, None) for t, p in self.offsets_of(group_id)]

    def expire(self, group_id: str, now_ms: int) -> tuple[list, bool]:
        """An empty group's offsets older than the retention leave memory: (the records
        deleting them, whether the group has no offset left nor any being written). Not
        while the group has transactional offsets pending."""
        state = self._by_group.get(group_id)
        if state is None or state.pending_txn:
            return [], False
        stale = [tp for tp, c in state.committed.items() if tp not in state.in_flight
                 and now_ms - c.commit_timestamp >= self.retention_ms]
        for tp in stale:
            del state.committed[tp]
        if stale:
            log.info("expired %d offset(s) of empty group %s", len(stale), group_id)
        return ([offsets_log.offset_record(group_id, t, p, None) for t, p in stale],
                not state.committed and not state.in_flight)
