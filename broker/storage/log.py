"""A partition's log: an ordered list of segments, appended at the end.

Three positions are kept distinct, as replication will need them:
- `log_start_offset`: the first offset still readable (retention moves it forward);
- `log_end_offset` (LEO): the offset the next appended record gets;
- `high_watermark`: the offset below which records are acknowledged and visible to
  consumers. The partition (`broker.replica.partition`) moves it; the log only keeps it
  within [log start, LEO], restored from the replication-offset-checkpoint on start.
The leader epoch an append is made in is stamped into its batch (partitionLeaderEpoch).
`epochs` (leader-epoch-checkpoint) records where each epoch's records begin: kept
through truncation at either end, and rebuilt from the batches when the file is
missing or unreadable.
A fourth, `last_stable_offset` (LSO), is where read_committed consumers stop: the
first offset of the oldest open transaction (from the producer state), else the high
watermark. Transaction markers are appended by the coordinator (`append_marker`);
an ABORT that closes a transaction adds (producer id, first offset, marker offset,
LSO after it) to the `.txnindex` of the segment holding the marker, from which
read_committed fetches learn the aborted transactions in the range they return.
Recovery rebuilds the `.txnindex` of every re-validated segment while it replays
the producer state.

Appends assign offsets by patching the batch headers in place (baseOffset and leader
epoch lie outside the CRC) and write the wire bytes unchanged. A follower's appends
(`append_as_follower`) keep the leader's offsets and epochs, so its segments hold the
leader's bytes; all three kinds of append share one write path (`_store`). Reads
return file regions, never decoded records.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Iterable

from wire.error_codes import ErrorCode
from wire.primitives import DecodeError
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, HEADER_SIZE, LOG_APPEND_TIME_BIT,
                          LOG_OVERHEAD, BatchHeader, build_control_batch, decode_batch, decode_control_record,
                          has_valid_crc, iter_batches, parse_header, set_base_offset, set_log_append_time,
                          set_partition_leader_epoch)

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import LogConfig
from broker.errors import BrokerError
from broker.storage.checkpoint import sync_directory
from broker.storage.deleted_segments import remove_leftovers
from broker.storage.index import AbortedTxn, OffsetIndex, TimeIndex
from broker.storage.leader_epochs import LeaderEpochCache
from broker.storage.producer_state import ProducerStateManager
from broker.storage.segment import FileRegion, LogSegment
from broker.throttled_log import ThrottledLog

log = logging.getLogger("sluice.storage")

_LOG_SUFFIX = ".log"
# Decoding a stored batch (only to find a timestamp's exact offset) may inflate it this far.
MAX_DECOMPRESSED_BATCH = 256 * 1024 * 1024
_MAX_PRODUCER_EPOCH = 32767  # Short.MaxValue




_write_failures = ThrottledLog(log, logging.WARNING, burst=1)


LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# The log cleaner's files (broker.storage.cleaner): a cleaned segment is written as
# `<base>.log.cleaned` (and its indexes), renamed `.swap` once whole, then to its final names.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
# One thread fsyncs the segments that rolls sealed, in order, as Kafka flushes a rolled
# segment in the background: the fsync of a gigabyte written moments before takes a
# third of a second and more, which the event loop stood still for.
_ROLLED_SEGMENT_SYNCS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rolled-segment-sync")


def seal_for_swap(cleaned: LogSegment) -> None:
    """Make the log cleaner's `.cleaned` segment durable and rename it `.swap`, the
    directory synced after: the slow part of a swap, for a worker thread (the segment is
    the cleaner's alone until `PartitionLog.replace_segments` takes it)."""
    cleaned.seal()
    cleaned.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
    sync_directory(cleaned.directory)


class AppendResult:
    __slots__ = ("first_offset", "last_offset", "log_append_time", "duplicate")

    def __init__(self, first_offset: int, last_offset: int, log_append_time: int, duplicate: bool):
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time = log_append_time
        self.duplicate = duplicate


class PartitionLog:
    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig, *,
                 recovery_point: int | None, log_start_offset: int = 0, high_watermark: int = 0,
                 clock: Clock = SYSTEM_CLOCK, new: bool = False):
        """Open (or create) the log in `directory`. `recovery_point` is the offset up to
        which data is known flushed, or None after a clean shutdown (nothing to check).
        `new`: a partition being created, whose directory does not exist yet: it is made
        empty, with no file read or written (its files appear with its first batch), so
        that creating thousands of partitions costs little more than their directories."""
        self.directory = directory
        self._clock = clock
        self.topic = topic
        self.partition = partition
        self.config = config
        fresh = False
        if new:
            try:
                os.mkdir(directory)
                fresh = True
            except FileExistsError:
                pass
        if not fresh:
            os.makedirs(directory, exist_ok=True)
        self.producer_state = ProducerStateManager(directory)
        self.segments: list[LogSegment] = []
        self._base_offsets: list[int] = []
        self._unflushed_messages = 0
        self._last_flush_ms = clock.wall_ms()
        # The fsyncs of rolled segments under way, each with its segment and the offset
        # up to which it lets the recovery point go once done (`settle_rolled_syncs`).
        self._rolled: list[tuple[Future, LogSegment, int]] = []
        # Files created in the directory since its last fsync (the first flush after
        # start-up syncs it once): a flushed segment must not vanish with its name.
        self._directory_unsynced = True
        # How many times the log's tail was cut: a cleaning that saw another count
        # (its offset map may hold records that are gone) is dropped.
        self.truncations = 0
        if fresh:
            self.segments = [LogSegment(directory, 0, config.index_interval_bytes, clock.wall_ms(),
                                        empty=True)]
            self._base_offsets = [0]
        revalidated_from = None
        if not fresh:
            revalidated_from = self._load(recovery_point)
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        self.high_watermark = 0
        self.update_high_watermark(high_watermark)
        self.epochs = LeaderEpochCache(os.path.join(directory, LEADER_EPOCH_CHECKPOINT))
        if not fresh:
            self._load_epochs(revalidated_from)
        self.recovery_point = self.log_end_offset if recovery_point is None else \
            min(recovery_point, self.log_end_offset)

    # -- loading and recovery ----------------------------------------------------------
    def _load(self, recovery_point: int | None) -> int | None:
        """Open the segments, re-validating those recovery must; returns the base offset of
        the first one re-validated (None when none was)."""
        remove_leftovers(self.directory, os.listdir(self.directory))
        self._finish_cleaner_swaps()
        bases = sorted(int(name[:-len(_LOG_SUFFIX)]) for name in os.listdir(self.directory)
                       if name.endswith(_LOG_SUFFIX) and name[:-len(_LOG_SUFFIX)].isdigit())
        for name in os.listdir(self.directory):  # indexes whose .log is gone
            stem, _, suffix = name.partition(".")
            if suffix in ("index", "timeindex", "txnindex") and stem.isdigit() and int(stem) not in bases:
                os.unlink(os.path.join(self.directory, name))
        if not bases:
            bases = [0]
        created = self._clock.wall_ms()
        self.segments = [LogSegment(self.directory, base, self.config.index_interval_bytes,
                                    created) for base in bases]
        for segment, following in zip(self.segments, self.segments[1:]):
            segment.next_offset = following.base_offset
        # Why each segment to re-validate must be: from the recovery point after an unclean
        # shutdown, and wherever indexes or the tail after the last index entry look wrong.
        reasons: dict[int, str] = {}
        if recovery_point is not None:
            first = max(0, bisect_right(bases, recovery_point) - 1)
            reasons = {i: "unclean shutdown" for i in range(first, len(self.segments))}
        max_batch_bytes = self._max_batch_bytes
        for i, segment in enumerate(self.segments):
            if i in reasons:
                continue
            end = bases[i + 1] if i + 1 < len(bases) else None
            problem = segment.index_problem(end) or segment.tail_problem(max_batch_bytes, end)
            if problem is not None:
                reasons[i] = problem
        revalidated_from = None
        if reasons:
            revalidated_from = self._recover(reasons)
        else:
            self._load_producer_state(recover_from=None)
        self._base_offsets = [s.base_offset for s in self.segments]
        return revalidated_from

    def _finish_cleaner_swaps(self) -> None:
        """Kafka's start-up rules for what an interrupted cleaning left. `.cleaned` files
        never replaced anything (the segments they were cleaned from are intact): deleted,
        as are index `.swap` files without their `.log.swap` (renamed ahead of it by a swap
        that never happened). A `<base>.log.swap` was whole and synced when renamed: it
        replaces every segment whose base offset lies in [base, its next offset), whatever
        of them is left, and takes its final names."""
        names = os.listdir(self.directory)
        swaps = sorted(int(name.partition(".")[0]) for name in names
                       if name.endswith(_LOG_SUFFIX + SWAP_SUFFIX) and name.partition(".")[0].isdigit())
        for name in names:
            if name.endswith(CLEANED_SUFFIX) or (name.endswith(SWAP_SUFFIX) and (
                    not name.partition(".")[0].isdigit() or int(name.partition(".")[0]) not in swaps)):
                os.unlink(os.path.join(self.directory, name))
        for base in swaps:
            swap = LogSegment(self.directory, base, self.config.index_interval_bytes, self._clock.wall_ms(),
                              suffix=SWAP_SUFFIX)
            end = base + 1
            for _, header in swap.batches_from(0):
                end = max(end, header.last_offset + 1)
            for name in os.listdir(self.directory):
                stem, _, suffix = name.partition(".")
                if stem.isdigit() and base <= int(stem) < end and "." + suffix in _SEGMENT_FILES:
                    os.unlink(os.path.join(self.directory, name))
            swap.change_suffix(SWAP_SUFFIX, "")
            log.info("%s-%d: completed the swap of cleaned segment %s interrupted by a stop; it replaces "
                     "the segments with base offsets in [%d, %d)", self.topic, self.partition,
                     os.path.basename(swap.path), base, end)

    def _load_epochs(self, revalidated_from: int | None) -> None:
        """The epoch history from its file, else from the batches; the epochs of re-validated
        batches added (a new epoch's entry may not have been synced); cut to the log's range."""
        loaded = self.epochs.load()
        replay_from = revalidated_from if loaded else self.log_start_offset
        if replay_from is not None:
            for _, _, header in self._headers_from(replay_from):
                if header.partition_leader_epoch >= 0:
                    self.epochs.assign(header.partition_leader_epoch, header.base_offset)
            self._write_epochs(self.epochs.sync)
        self._write_epochs(lambda: self.epochs.truncate_from_end(self.log_end_offset))
        self._write_epochs(lambda: self.epochs.truncate_from_start(self.log_start_offset))

    def _write_epochs(self, change) -> None:
        """Change the epoch history; a failed write (a full disk) is warned of and the file
        rebuilt from the batches at the next start."""
        try:
            change()
        except OSError as exc:
            _write_failures("%s-%d: cannot write %s: %s", self.topic, self.partition,
                            LEADER_EPOCH_CHECKPOINT, exc)

    def _begin_epoch(self, epoch: int, base: int) -> None:
        """The first append under a new leader epoch records where it begins (written to
        the file when the recovery point moves past it)."""
        self.epochs.assign(epoch, base)

    @property
    def _max_batch_bytes(self) -> int:
        """The largest stored batch recovery accepts: max.message.bytes of records plus the
        batch's header and log overhead."""
        return self.config.max_message_bytes + HEADER_SIZE + LOG_OVERHEAD

    def _recover(self, reasons: dict[int, str]) -> int:
        """Re-validate the segments at these indexes, in order; the first bad batch
        truncates the log there, dropping every later segment, as Kafka's recovery does.
        Returns the first re-validated segment's base offset."""
        max_batch_bytes = self._max_batch_bytes
        first = min(reasons)
        for i in sorted(reasons):
            segment = self.segments[i]
            size = os.path.getsize(segment.path) if os.path.exists(segment.path) else 0
            problem = segment.recover(max_batch_bytes)
            if problem is None:
                if reasons[i] != "unclean shutdown":
                    log.warning("%s-%d: segment %s re-validated and its indexes rebuilt (%s); "
                                "no data dropped", self.topic, self.partition,
                                os.path.basename(segment.path), reasons[i])
                continue
            dropped = self.segments[i + 1:]
            log.warning("%s-%d: segment %s truncated at byte %d (%s): dropped %d byte(s) from it "
                        "and %d later segment(s) of %d byte(s)", self.topic, self.partition,
                        os.path.basename(segment.path), segment.size, problem, size - segment.size,
                        len(dropped), sum(s.size for s in dropped))
            self._cut_segments_at(segment.next_offset)
            break
        recovered_from = self.segments[first].base_offset
        self._load_producer_state(recover_from=recovered_from)
        return recovered_from

    def revalidate(self, segment: LogSegment, why: str) -> None:
        """Re-validate `segment` as start-up recovery does, truncating the log at its first
        invalid batch: for a reader that met a batch it cannot read where the start-up
        checks do not look (before a sealed segment's last index entry)."""
        self._recover({self.segments.index(segment): why})
        self._after_truncation()

    def truncate_to(self, offset: int) -> None:
        """Remove every batch holding an offset at or after `offset` (the batch `offset`
        falls inside goes whole): a follower's divergent tail. Positions, epochs and the
        producer state follow."""
        if offset >= self.log_end_offset:
            return
        if offset < self.log_start_offset:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"cannot truncate {self.topic}-{self.partition} to {offset}, below its "
                              f"log start offset {self.log_start_offset}")
        self._cut_segments_at(offset)
        self._load_producer_state(recover_from=None)
        self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it again at `offset`, as Kafka's follower does when its
        log ends below the leader's log start (the records it lacks were deleted there).
        The empty first segment's file keeps the new start across a restart."""
        try:
            self._let_go(self.segments)
            self.producer_state.clear()
            segment = LogSegment(self.directory, offset, self.config.index_interval_bytes,
                                 self._clock.wall_ms())
            os.close(os.open(segment.path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError as exc:
            raise self._storage_error("empty", exc) from None
        self.truncations += 1
        segment.next_offset = offset
        self.segments = [segment]
        self._base_offsets = [offset]
        self._directory_unsynced = True
        self.log_start_offset = self.high_watermark = self.recovery_point = offset
        self._rolled.clear()
        self._write_epochs(self.epochs.clear)

    def _let_go(self, segments: list[LogSegment]) -> None:
        """Segments leaving the log: renamed at once, removed `file.delete.delay.ms` later."""
        for segment in segments:
            segment.delete_later(self.config.file_delete_delay_ms, self._clock)

    def _cut_segments_at(self, offset: int) -> None:
        """Cut the segment holding `offset` there and delete every later one: the one way
        the log's tail goes, for recovery's torn or invalid tail and for `truncate_to`."""
        i = max(0, self._segment_index(offset))
        self.truncations += 1
        try:
            if self.segments[i].next_offset > offset:
                self.segments[i].truncate_to(offset)
            self._let_go(self.segments[i + 1:])
        except OSError as exc:
            raise self._storage_error("truncate", exc) from None
        del self.segments[i + 1:]
        self._base_offsets = [s.base_offset for s in self.segments]
        self._rolled = [rolled for rolled in self._rolled if rolled[2] <= offset]

    def _after_truncation(self) -> None:
        self._write_epochs(lambda: self.epochs.truncate_from_end(self.log_end_offset))
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)

    def _load_producer_state(self, recover_from: int | None) -> None:
        """Load the latest snapshot and replay the batch headers after it. With
        `recover_from` (the first re-validated segment's base offset), replay from a
        snapshot at or below it, rebuilding those segments' transaction indexes."""
        start = self.producer_state.load_snapshot(self.log_end_offset, upto=recover_from)
        if recover_from is None and start == self.log_end_offset:
            return
        for segment, position, header in self._headers_from(start):
            coordinator_epoch, abort = -1, False
            if header.is_control:
                coordinator_epoch, abort = self._stored_marker(segment, position, header)
            first = self.producer_state.update(header, coordinator_epoch)
            if first is not None and abort and recover_from is not None and \
                    segment.base_offset >= recover_from:
                segment.txn_index.append(self._aborted_entry(header.producer_id, first,
                                                             header.base_offset))

    def _headers_from(self, offset: int) -> Iterable[tuple[LogSegment, int, BatchHeader]]:
        for segment in self.segments[max(0, self._segment_index(offset)):]:
            position = segment.position_of(offset)[0] if segment.base_offset <= offset else 0
            for pos, header in segment.batches_from(position):
                yield segment, pos, header

    @staticmethod
    def _stored_marker(segment: LogSegment, position: int, header: BatchHeader) -> tuple[int, bool]:
        """(coordinator epoch, whether it is an ABORT) of the control batch at `position`,
        so that a replay restores what the append recorded; (-1, False) if unreadable."""
        try:
            return PartitionLog._marker_of(segment.region(position, position + header.size).read())
        except DecodeError:
            return -1, False

    def _aborted_entry(self, producer_id: int, first_offset: int, marker_offset: int) -> AbortedTxn:
        """The index entry of a transaction just aborted (the producer state already
        closed it): the LSO after it is the next open transaction's start, if any."""
        following = self.producer_state.first_unstable_offset()
        return AbortedTxn(producer_id, first_offset, marker_offset,
                          marker_offset + 1 if following is None else following)

    def _storage_error(self, what: str, exc: OSError) -> BrokerError:
        """A failed write as the produce error Kafka gives for a failed log directory.
        Unlike Kafka, the partition stays online: reads go on, and every later write
        tries again, so writes resume once space returns."""
        error = BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                            f"cannot {what} {self.topic}-{self.partition} in {self.directory}: "
                            f"{exc.strerror or exc}")
        _write_failures("%s", error)
        return error

    def _segment_index(self, offset: int) -> int:
        bases = self._base_offsets or [s.base_offset for s in self.segments]
        return bisect_right(bases, offset) - 1

    # -- positions ---------------------------------------------------------------------
    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """Below it no record belongs to an open transaction: the oldest open
        transaction's first offset, capped by the high watermark and never below the
        log start offset."""
        first = self.producer_state.first_unstable_offset()
        stable = self.high_watermark if first is None else min(first, self.high_watermark)
        return max(stable, self.log_start_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appending ---------------------------------------------------------------------
    def update_high_watermark(self, offset: int) -> None:
        """Set the high watermark (the partition decides it), kept within [log start, LEO]."""
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)

    def append(self, header: BatchHeader, batch: memoryview, leader_epoch: int) -> AppendResult:
        """Append one client batch (already validated for CRC, size and magic) in
        `leader_epoch`.

        An idempotent batch is checked against the producer state first; a duplicate
        of a recent batch is answered with its original offsets and not written. The
        batch must be a writable view: its header is patched in place.
        """
        duplicate = self.producer_state.check(header)
        if duplicate is not None:
            return AppendResult(duplicate[0], duplicate[1], -1, True)
        base = self.log_end_offset
        set_base_offset(batch, base)
        set_partition_leader_epoch(batch, leader_epoch)
        append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = self._clock.wall_ms()
            set_log_append_time(batch, append_time)
            header = header._replace(max_timestamp=append_time,
                                     attributes=header.attributes | LOG_APPEND_TIME_BIT)
        header = header._replace(base_offset=base, partition_leader_epoch=leader_epoch)
        self._store(batch, header, "append to")
        self.flush_if_due()
        return AppendResult(base, self.log_end_offset - 1, append_time, False)

    def append_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                      commit: bool, leader_epoch: int, transaction_version: int = 0) -> int:
        """Append a COMMIT or ABORT marker for a producer's transaction (from the
        transaction coordinator); returns its offset. Refused (BrokerError) for an epoch
        older than the producer's here, or an older coordinator epoch. A marker for a
        producer without an open transaction here is written and closes nothing.
        Transactions v2 (`transaction_version` 2+, KIP-890) end with the epoch bumped, so
        there the marker's epoch must be newer than the producer's, as Kafka's
        ProducerAppendInfo checks: the same epoch only as a retry, with no transaction open
        here (or at the largest epoch)."""
        entry = self.producer_state.producers.get(producer_id)
        if entry is not None and (producer_epoch < entry.epoch or (
                transaction_version >= 2 and producer_epoch == entry.epoch
                and entry.txn_first_offset >= 0 and producer_epoch != _MAX_PRODUCER_EPOCH)):
            newer = "newer than" if transaction_version >= 2 else "at least"
            raise BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                              f"marker epoch {producer_epoch} of producer {producer_id} is not {newer} "
                              f"{entry.epoch} in {self.topic}-{self.partition}")
        if entry is not None and coordinator_epoch < entry.coordinator_epoch:
            raise BrokerError(ErrorCode.TRANSACTION_COORDINATOR_FENCED,
                              f"coordinator epoch {coordinator_epoch} is older than "
                              f"{entry.coordinator_epoch} in {self.topic}-{self.partition}")
        batch = bytearray(build_control_batch(CONTROL_COMMIT if commit else CONTROL_ABORT,
                                              producer_id, producer_epoch, coordinator_epoch,
                                              self._clock.wall_ms()))
        base = self.log_end_offset
        set_base_offset(batch, base)
        set_partition_leader_epoch(batch, leader_epoch)
        header = parse_header(batch)
        self._store(batch, header, "append a transaction marker to", coordinator_epoch, abort=not commit)
        self.flush_if_due()
        return base

    def append_as_follower(self, records) -> int:
        """Append a leader's batches as its Fetch response returned them (one or more
        whole batches v2, maybe followed by a truncated one, which is ignored), byte for
        byte: their offsets and leader epochs are kept. Returns how many were appended.

        The first must start at or after the log end (OFFSET_OUT_OF_RANGE when before it,
        nothing written): past it, as Kafka's followers take it, are offsets the leader's
        log cleaner removed. Each must be CRC-valid, magic 2, within the size recovery accepts and
        above the previous one's offsets (CORRUPT_MESSAGE or MESSAGE_TOO_LARGE otherwise:
        the batches before it stay appended). The producer state follows every batch, as
        it would have on the leader, without refusing duplicates: the leader decided."""
        batches = iter_batches(records)
        appended = 0
        expected = self.log_end_offset
        try:
            for header, batch in batches:
                self._check_follower_batch(header, batch, expected, appended)
                coordinator_epoch, abort = -1, False
                if header.is_control:
                    coordinator_epoch, abort = self._marker_of(batch)
                self._store(batch, header, "append a leader's batch to", coordinator_epoch, abort)
                appended += 1
                expected = header.last_offset + 1
        except DecodeError as exc:
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE,
                              f"batch {appended + 1} from the leader of {self.topic}-{self.partition} "
                              f"cannot be read: {exc}") from None
        if appended:
            self.flush_if_due()
        return appended

    def _check_follower_batch(self, header: BatchHeader, batch, expected: int, index: int) -> None:
        """A leader's batch must continue this log: see `append_as_follower`."""
        where = f"{self.topic}-{self.partition}"
        if index == 0 and header.base_offset < expected:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"the leader's batches of {where} start at offset {header.base_offset}, "
                              f"before this log's end offset {expected}")
        if header.base_offset < expected or header.last_offset_delta < 0:
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE,
                              f"the leader's batch {index + 1} of {where} holds offsets "
                              f"{header.base_offset}..{header.last_offset}, not after {expected - 1}")
        if header.size > self._max_batch_bytes:
            raise BrokerError(ErrorCode.MESSAGE_TOO_LARGE,
                              f"the leader's batch at offset {header.base_offset} of {where} has "
                              f"{header.size} bytes, over the {self._max_batch_bytes} recovery accepts")
        if not has_valid_crc(batch):
            raise BrokerError(ErrorCode.CORRUPT_MESSAGE,
                              f"the leader's batch at offset {header.base_offset} of {where} fails "
                              f"its CRC check")

    @staticmethod
    def _marker_of(batch) -> tuple[int, bool]:
        """(coordinator epoch, whether it is an ABORT) of a control batch; (-1, False)
        for a control record that is no transaction marker."""
        records = decode_batch(batch, 1 << 20)
        if not records:
            return -1, False
        marker = decode_control_record(records[0])
        if marker.type not in (CONTROL_ABORT, CONTROL_COMMIT):
            return -1, False
        return marker.coordinator_epoch, marker.type == CONTROL_ABORT

    def _store(self, batch, header: BatchHeader, what: str, coordinator_epoch: int = -1,
               abort: bool = False) -> None:
        """Write one batch whose offsets (from the log end on) and leader epoch are set, rolling
        first if due, and account for it: the epoch history, the producer state (an
        `abort` marker closing a transaction adds it to the transaction index) and the
        count the flush policy looks at. The one write path of every append."""
        self._maybe_roll(header.size, header)
        self._begin_epoch(header.partition_leader_epoch, header.base_offset)
        segment = self.segments[-1]
        try:
            segment.append(batch, header)
        except OSError as exc:
            raise self._storage_error(what, exc) from None
        first = self.producer_state.update(header, coordinator_epoch)
        if first is not None and abort:
            segment.txn_index.append(self._aborted_entry(header.producer_id, first, header.base_offset))
        self._unflushed_messages += header.last_offset_delta + 1

    def _maybe_roll(self, incoming: int, header: BatchHeader) -> None:
        """Roll before appending the batch of `header` (offsets set) when the active segment
        is full, old, its indexes are full, or the batch's offsets overflow its relative offsets."""
        active = self.segments[-1]
        if active.size == 0:
            return
        cfg = self.config
        too_big = active.size + incoming > cfg.segment_bytes
        too_old = self._clock.wall_ms() - active.created_ms >= cfg.segment_ms
        offset_overflow = header.last_offset - active.base_offset > 0x7FFFFFFF
        # An index holds segment.index.bytes of entries, as Kafka's preallocated ones do.
        index_full = (active.offset_index.entries >= cfg.segment_index_bytes // OffsetIndex.entry.size
                      or active.time_index.entries >= cfg.segment_index_bytes // TimeIndex.entry.size)
        if too_big or too_old or offset_overflow or index_full:
            self.roll()

    def roll(self) -> None:
        """Seal the active segment and start a new one at the log end; the sealed one is
        flushed by a thread of its own. Should a write fail (BrokerError), the active
        segment stays the active one."""
        active = self.segments[-1]
        if active.size == 0:
            return
        base = self.log_end_offset
        try:
            active.seal(sync=False)  # written out, its descriptor let go
            self.producer_state.write_snapshot(base)
            segment = LogSegment(self.directory, base, self.config.index_interval_bytes,
                                 self._clock.wall_ms())
            segment.next_offset = base
            # Create its file now: should retention delete every older segment, this empty
            # file is what keeps the log end offset across a restart.
            os.close(os.open(segment.path, os.O_WRONLY | os.O_CREAT, 0o644))
        except OSError as exc:
            raise self._storage_error("roll a new segment of", exc) from None
        self._directory_unsynced = True
        self.segments.append(segment)
        self._base_offsets.append(base)
        self._rolled.append((_ROLLED_SEGMENT_SYNCS.submit(active.sync_files), active, base))

    def settle_rolled_syncs(self) -> None:
        """Let the recovery point go past the rolled segments whose fsync is done. One
        that failed holds it (and those after it) until `flush` syncs it again."""
        while self._rolled and self._rolled[0][0].done():
            future, segment, base = self._rolled[0]
            if future.exception() is not None:
                _write_failures("cannot flush the rolled segment %s: %s", segment.path, future.exception())
                return
            del self._rolled[0]
            self._advance_recovery_point(base)

    def _sync_rolled(self) -> None:
        """Wait for the rolled segments' fsyncs, one that failed done again here."""
        for future, segment, _ in self._rolled:
            if future.exception() is not None:
                segment.sync_files()
        self._rolled.clear()

    def flush_if_due(self) -> None:
        """fsync when `flush.messages` or `flush.ms` says so. By default never, as in
        Kafka: a process crash loses nothing (the page cache holds every acknowledged
        write), a power loss may lose what the kernel had not yet written back."""
        if self._unflushed_messages >= self.config.flush_messages or \
                self._clock.wall_ms() - self._last_flush_ms >= self.config.flush_ms:
            self.flush()

    def flush(self) -> None:
        """fsync the active segment (data, then indexes) and, when segments were
        created since, the directory; the rolled segments' fsyncs are waited for first."""
        try:
            self._sync_rolled()
            self.segments[-1].flush()
            if self._directory_unsynced:
                sync_directory(self.directory)
                self._directory_unsynced = False
        except OSError as exc:
            raise self._storage_error("flush", exc) from None
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock.wall_ms()
        self._advance_recovery_point(self.log_end_offset)

    def replace_segments(self, cleaned: LogSegment, old: list[LogSegment]) -> None:
        """Swap the log cleaner's segment in for the consecutive sealed segments `old` it
        was cleaned from, in Kafka's order: `cleaned` is whole, synced and named `.swap`
        already (`seal_for_swap`: from there a crash completes the swap at start-up); it
        is put in their place in one step of the event loop, their files renamed to be
        deleted later (`_let_go`), then given its final names."""
        first = self.segments.index(old[0])
        cleaned.next_offset = old[-1].next_offset
        self.segments[first:first + len(old)] = [cleaned]
        self._base_offsets = [s.base_offset for s in self.segments]
        self._let_go(old)
        cleaned.change_suffix(SWAP_SUFFIX, "")
        self._directory_unsynced = True

    def _advance_recovery_point(self, offset: int) -> None:
        """Data up to `offset` is flushed: recovery need not re-validate it, once the epoch
        entries starting there are written too (a failed write keeps the point below them)."""
        self._write_epochs(self.epochs.sync)
        pending = self.epochs.pending_from
        self.recovery_point = offset if pending is None else min(offset, pending)

    # -- reading -----------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, upper_offset: int,
             min_one_batch: bool) -> FileRegion | None:
        """Bytes of the batches from the one holding `offset`, within one segment, up to
        `max_bytes` and not past `upper_offset` (the high watermark or the last stable
        offset). The result ends at a batch boundary: Kafka's may end inside a batch, bytes
        the client throws away and fetches again. With `min_one_batch`, a first batch larger
        than `max_bytes` is returned whole; without, nothing is."""
        return self._read(offset, max_bytes, upper_offset, min_one_batch)[0]

    def read_committed(self, offset: int, max_bytes: int,
                       min_one_batch: bool) -> tuple[FileRegion | None, list[AbortedTxn]]:
        """`read` up to the last stable offset, with the aborted transactions that
        overlap [offset, end of the returned batches): what a read_committed consumer
        needs to drop their records."""
        region, segment = self._read(offset, max_bytes, self.last_stable_offset, min_one_batch)
        if region is None:
            return None, []
        end = segment.offset_at_position(region.position + region.length)
        return region, self.aborted_transactions(offset, end)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end), from the transaction
        indexes of the segment holding `start` onwards (a marker may lie far beyond
        `end`); as in Kafka, the scan stops at an entry whose LSO reached `end`."""
        found = []
        for segment in self.segments[max(0, self._segment_index(start)):]:
            for entry in segment.txn_index.entries:
                if entry.last_offset >= start and entry.first_offset < end:
                    found.append(entry)
                if entry.last_stable_offset >= end:
                    return found
        return found

    def _read(self, offset: int, max_bytes: int, upper_offset: int,
              min_one_batch: bool) -> tuple[FileRegion | None, LogSegment | None]:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"offset {offset} is outside [{self.log_start_offset}, "
                              f"{self.log_end_offset}] of {self.topic}-{self.partition}")
        if offset >= upper_offset:
            return None, None
        for segment in self.segments[max(0, self._segment_index(offset)):]:
            if segment.base_offset >= upper_offset:
                return None, None
            if segment.next_offset <= offset:
                continue
            start, header = segment.position_of(offset)
            if header is None:
                continue
            end = segment.size
            if upper_offset < segment.next_offset:
                end = segment.position_of(upper_offset)[0]
            if end - start > max_bytes:
                end = segment.last_batch_end(start, start + max_bytes)
                if end == start and min_one_batch:
                    end = start + header.size
            return (segment.region(start, end), segment) if end > start else (None, None)
        return None, None

    def decoded_batches(self, max_decompressed: int) -> Iterable[tuple[BatchHeader, list]]:
        """(header, records) of every stored batch, in order, for an owner replaying its
        state. The owner may pause between batches while the cleaner swaps segments or
        retention deletes them: each batch is read from a segment still in the log, found
        again by the next offset when the one being read has been replaced (a cleaned
        segment holds the same offsets, less what later records supersede). A batch that
        cannot be read has the log re-validated from its segment, which truncates it at
        the first invalid batch, as recovery does; a whole, CRC-valid batch whose records
        cannot be decoded is skipped, with a warning."""
        next_offset = self.segments[0].base_offset
        segment, position = None, 0
        while True:
            if segment is None or not self._holds(segment):
                index = max(self._segment_index(next_offset), 0)
                segment = self.segments[index]
                position, _ = segment.position_of(next_offset)
            if position >= segment.size:
                index = self._segment_index(segment.base_offset) + 1
                if index >= len(self.segments):
                    return
                segment, position = self.segments[index], 0
                continue
            try:
                header = segment.header_at(position)
                records = decode_batch(segment.region(position, position + header.size).read(),
                                       max_decompressed)
            except DecodeError as exc:
                self.revalidate(segment, f"a batch at byte {position} cannot be read: {exc}")
                if position >= segment.size:
                    return  # truncated there, later segments dropped: the log ends here
                log.warning("%s-%d: skipping the batch at byte %d of %s: its records cannot "
                            "be read (%s)", self.topic, self.partition, position,
                            os.path.basename(segment.path), exc)
                header = segment.header_at(position)
                position += header.size
                next_offset = header.last_offset + 1
                continue
            position += header.size
            next_offset = header.last_offset + 1
            yield header, records

    def _holds(self, segment: LogSegment) -> bool:
        """Whether `segment` is still one of the log's (not replaced by a cleaning nor deleted)."""
        index = self._segment_index(segment.base_offset)
        return 0 <= index < len(self.segments) and self.segments[index] is segment

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp`,
        below the high watermark; None when there is none."""
        for segment in self.segments:
            largest = segment.max_timestamp()
            if largest is None or largest[0] < timestamp:
                continue
            start = max(segment.time_index.lookup(timestamp), self.log_start_offset)
            position = segment.position_of(start)[0]
            for pos, header in segment.batches_from(position):
                if header.base_offset >= self.high_watermark:
                    return None
                if header.max_timestamp < timestamp:
                    continue
                batch = segment.region(pos, pos + header.size).read()
                for record in decode_batch(batch, MAX_DECOMPRESSED_BATCH):
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(largest timestamp, offset of the record carrying it) among visible records."""
        best: tuple[int, int] | None = None
        for segment in self.segments:
            largest = segment.max_timestamp()
            if largest is not None and (best is None or largest[0] > best[0]):
                best = largest
        if best is None:
            return None
        # The index records the batch's last offset; find the record itself.
        found = self.offset_for_timestamp(best[0])
        return (best[0], found[0]) if found else None

    # -- retention ---------------------------------------------------------------------
    def enforce_retention(self, now: int) -> int:
        """Delete whole old segments by time (`now`: wall-clock ms) and size; returns how
        many were deleted. The active segment is rolled first when it has itself expired."""
        cfg = self.config
        if "delete" not in cfg.cleanup_policy.split(","):
            return 0  # cleanup.policy=compact alone: only the log cleaner removes records
        deletable = 0
        if cfg.retention_ms >= 0:
            for segment in self.segments:
                if segment.size == 0 and segment is not self.segments[-1]:
                    deletable += 1  # sealed and empty (the log cleaner emptied it): nothing to keep
                    continue
                largest = segment.max_timestamp()
                if segment.size == 0 or largest is None or now - largest[0] <= cfg.retention_ms:
                    break
                deletable += 1
        if cfg.retention_bytes >= 0:
            excess = self.size_bytes - cfg.retention_bytes
            by_size = 0
            for segment in self.segments:
                if excess - segment.size < 0:
                    break
                excess -= segment.size
                by_size += 1
            deletable = max(deletable, by_size)
        if deletable == 0:
            return 0
        if deletable >= len(self.segments):
            try:
                self.roll()
            except BrokerError:
                pass  # a full disk (warned of): deleting the older segments frees space
            deletable = len(self.segments) - 1
        # Never delete past the high watermark: consumers must be able to read it.
        while deletable and self.segments[deletable].base_offset > self.high_watermark:
            deletable -= 1
        self._let_go(self.segments[:deletable])
        del self.segments[:deletable]
        self._base_offsets = [s.base_offset for s in self.segments]
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._write_epochs(lambda: self.epochs.truncate_from_start(self.log_start_offset))
        return deletable

    def delete_records_before(self, offset: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it go."""
        if offset > self.high_watermark:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"offset {offset} is beyond the high watermark {self.high_watermark}")
        self.log_start_offset = max(self.log_start_offset, offset)
        below = 0
        while below + 1 < len(self.segments) and self.segments[below + 1].base_offset <= self.log_start_offset:
            below += 1
        self._let_go(self.segments[:below])
        del self.segments[:below]
        self._base_offsets = [s.base_offset for s in self.segments]
        self._write_epochs(lambda: self.epochs.truncate_from_start(self.log_start_offset))

    # -- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Flush and close everything, leaving a producer-state snapshot at the log end."""
        self._sync_rolled()
        for segment in self.segments:
            segment.flush()
            segment.close()
        self.epochs.sync()
        self.recovery_point = self.log_end_offset
        self.producer_state.write_snapshot(self.log_end_offset)

    def delete(self, renamed_to: str) -> None:
        """Move the log's directory to `renamed_to` (one rename, which needs no space) and
        let go of its files. Their removal is the caller's (TopicManager's, in the
        background: unlinking a large segment takes long)."""
        os.rename(self.directory, renamed_to)
        for segment in self.segments:
            segment.delete()  # closes its files; their names are gone with the rename
