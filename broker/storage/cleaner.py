"""Log compaction: Kafka's log cleaner, for logs whose cleanup.policy has `compact`.

Rules (Kafka's Cleaner, LogCleaner and LogCleanerManager, for record batches v2):
- What is dirty: `cleaner-offset-checkpoint` in the data directory (Kafka's checkpoint
  format) holds each partition's first dirty offset, where its last cleaning ended; no
  entry, or one below the log start or past the log end, means the log start. Cleaning
  stops at the first uncleanable offset: the least of the last stable offset (so the
  high watermark too), the active segment's base offset and the base offset of the first
  dirty segment whose largest timestamp is within `min.compaction.lag.ms` of now, taken
  down to the base offset of its segment: only whole sealed segments are cleaned.
- Which log: the dirty ratio is the size of the dirty segments over that of every segment
  below the first uncleanable offset. The log with the highest ratio above
  `min.cleanable.dirty.ratio` is cleaned first, as is a log with dirty segments whose
  first batch is older than `max.compaction.lag.ms`. With none, the cleaner waits
  `log.cleaner.backoff.ms`. A log whose cleaning fails (an unreadable batch) is left
  uncleanable until the broker restarts, as Kafka marks it.
- The offset map (`OffsetMap`): MD5 of each key of the dirty range -> its latest offset,
  for as many keys as `log.cleaner.dedupe.buffer.size` holds at Kafka's 24 bytes a key,
  times `log.cleaner.io.buffer.load.factor`. Records of aborted transactions are not
  mapped. When the map is full the cleaning ends at the last batch mapped (whole
  batches: a batch started is mapped whole, so a cleaning always progresses) and the
  next cleaning goes on from there.
- Cleaning (`LogCleaning`): every segment from the log start to the end of the map's
  range is rewritten, in groups of consecutive segments whose sizes add up to at most
  `segment.bytes` (their index entries to `segment.index.bytes`, their offsets to 2^31);
  a group becomes one segment named by its first base offset. A record is kept unless
  the map holds a newer offset for its key; records past the map's range are kept,
  records without a key dropped. Offsets are kept, gaps and all: a rewritten batch keeps
  its base offset, last offset delta, producer id, epoch, base sequence, leader epoch
  and codec; a batch that loses nothing is copied byte for byte.
- Tombstones (null values) follow KIP-534's delete horizon: the first cleaning that keeps
  a tombstone (or a transaction marker that may go, below) rewrites its batch with
  attribute bit 6 set and its base timestamp set to now + `delete.retention.ms` (record
  timestamps keep their values: their deltas are rewritten); a later cleaning drops the
  tombstone, or the marker, once that horizon has passed.
- Transactions (Kafka's CleanedTransactionMetadata): records of aborted transactions (the
  `.txnindex` entries) are removed. An ABORT marker is kept while the cleaning saw a
  batch of its transaction (its `.txnindex` entry is copied to the cleaned segment's), a
  COMMIT marker while it saw a data batch of its transaction; after that until its delete
  horizon has passed. The batch holding a producer's last sequence (without one: its
  last marker of its epoch) is kept even when all its records go, as an empty batch
  (record count 0), so that the idempotent producer's state survives restart and
  truncation; so is the batch that ends at the cleaning's upper bound.
- Crash safety, as Kafka: a group is written to `<base>.log.cleaned` and its indexes,
  fsynced, renamed `.swap` (directory synced: `seal_for_swap`), swapped into the segment
  list with the old segments' files deleted, then renamed to its final names
  (`PartitionLog.replace_segments`). At start-up `.cleaned` files are deleted and `.swap`
  files complete their swap (`PartitionLog._finish_cleaner_swaps`): a `.swap` is always a
  whole cleaning of segments that are still there, or of what is left of them. The
  checkpoint is written after the swaps: a stop in between cleans the range again, which
  keeps what the first cleaning kept.

Never blocking the event loop: the cleaner is one asyncio task on the broker's loop
that works in slices of about `SLICE_SECONDS` and yields after each (a slice ends between
batches, or inside a large batch every `RECORDS_PER_STEP` records decoded, judged or
re-encoded: a producer's batch of a megabyte is tens of milliseconds of Python),
rather than a thread: its work is Python (decoding batches, hashing keys) that would
hold the GIL against the loop anyway, and on the loop it sees each log between two
appends, never inside one, so the swap of segment lists needs no lock and the checks of
what changed meanwhile (retention, truncation, a deleted topic: the cleaned group is
then dropped) are exact. The long system calls, the fsync of a cleaned segment before
its swap and the directory's after its rename, run in a worker thread (the segment is
the cleaner's alone until swapped); a stop waits for them to end before the group is
dropped.
Source segments are read through the cleaner's own descriptors, and fetches hold theirs,
so that a deleted segment's bytes stay readable to whoever was reading them. Bytes read
plus written are throttled to `log.cleaner.io.max.bytes.per.second` by sleeping between
slices, their rate measured by broker.quota over the last second in windows of 100 ms
(a burst lasts a tenth of a second at most).
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import os
from bisect import bisect_right
from typing import Callable, Generator, Iterable, Iterator

from wire.primitives import DecodeError
from wire.records import (COMPRESSION_MASK, CONTROL_ABORT, CONTROL_COMMIT, DELETE_HORIZON_BIT,
                          LOG_APPEND_TIME_BIT, BatchHeader, Record, assemble_batch, decode_batch,
                          decode_batch_in_chunks, decode_control_record, encode_record, iter_batches,
                          parse_header)

from broker.clock import Clock
from broker.config import CLEANER_BYTES_PER_KEY, INT_MAX, BrokerConfig
from broker.quota import Quota
from broker.storage.checkpoint import read_checkpoint, write_checkpoint
from broker.storage.index import AbortedTxn, OffsetIndex, TimeIndex
from broker.storage.log import CLEANED_SUFFIX, MAX_DECOMPRESSED_BATCH, PartitionLog, seal_for_swap
from broker.storage.segment import LogSegment, SegmentFile
from broker.throttled_log import ThrottledLog

log = logging.getLogger("sluice.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
# The longest the cleaner works before letting the event loop run.
SLICE_SECONDS = 0.005
# Records decoded, judged or re-encoded between two chances to pause (about a millisecond
# of work): a producer's batch may hold thousands, too many for one slice.
RECORDS_PER_STEP = 500
# Turns of the event loop a pause lets go by. A turn runs what was ready before it began,
# the cleaner's wake-up first, then what became ready meanwhile (a request's bytes, a due
# timer): with one turn every step of a request would wait for a whole slice; with a few,
# a request goes through several steps (read, handle, answer) between two slices.
LOOP_TURNS_PER_PAUSE = 4
_READ_CHUNK = 256 * 1024
_MB = 1024 * 1024


class OffsetMap:
    """Key -> latest offset for the dirty range of one cleaning, bounded as Kafka's
    SkimpyOffsetMap: `slots` of 24 bytes (16 of MD5, 8 of offset) in the dedupe buffer,
    filled to `capacity` (slots times the load factor). Keys are kept as their MD5, as
    Kafka does: two keys colliding is as unlikely here as there. It is a dict, so a full
    map takes some four times the configured bytes of memory: the bound is on keys."""

    def __init__(self, buffer_bytes: int, load_factor: float):
        self.slots = buffer_bytes // CLEANER_BYTES_PER_KEY
        self.capacity = max(1, int(self.slots * load_factor))
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the last offset the map covers

    def clear(self) -> None:
        self._offsets = {}
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.capacity

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[hashlib.md5(key).digest()] = offset

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, -1 when the map does not hold it."""
        return self._offsets.get(hashlib.md5(key).digest(), -1)

    @property
    def utilization(self) -> float:
        return len(self._offsets) / self.slots if self.slots else 1.0


class _Transactions:
    """What one pass over the log learnt of transactions, batch by batch (Kafka's
    CleanedTransactionMetadata): which producers are inside an aborted transaction,
    whether a batch of it was seen, and which have a committed one open."""

    def __init__(self):
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # by first offset, not reached yet
        self._known: set[tuple[int, int]] = set()
        self._aborted: dict[int, list] = {}  # producer id -> [its AbortedTxn, a batch of it seen]
        self._committed: set[int] = set()

    def add_aborted(self, entries: Iterable[AbortedTxn]) -> None:
        for entry in entries:
            if (entry.producer_id, entry.last_offset) not in self._known:
                self._known.add((entry.producer_id, entry.last_offset))
                heapq.heappush(self._pending, (entry.first_offset, entry.last_offset, entry))

    def _reach(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            entry = heapq.heappop(self._pending)[2]
            self._aborted.setdefault(entry.producer_id, [entry, False])

    def on_batch(self, header: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        aborted = self._aborted.get(header.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, kind: int | None) -> tuple[bool, AbortedTxn | None]:
        """A control batch of `kind` (None: emptied by an earlier cleaning): whether it may
        go, and the aborted transaction to index when it must stay."""
        self._reach(header.last_offset)
        if kind is None:
            return True, None
        if kind == CONTROL_ABORT:
            aborted = self._aborted.pop(header.producer_id, None)
            if aborted is not None and aborted[1]:
                return False, aborted[0]
            return True, None
        if kind == CONTROL_COMMIT:
            if header.producer_id in self._committed:
                self._committed.discard(header.producer_id)
                return False, None
            return True, None
        return False, None


def _batches(file: SegmentFile, size: int, start: int = 0) -> Iterator[tuple[BatchHeader, memoryview]]:
    """(header, bytes) of each batch of a segment file from byte `start` to `size`, read
    in chunks through the cleaner's own descriptor."""
    position = start
    while position < size:
        chunk = os.pread(file.fd, min(_READ_CHUNK, size - position), position)
        consumed = 0
        for header, batch in iter_batches(chunk):
            yield header, batch
            consumed += header.size
        if consumed == 0:  # a batch larger than a chunk
            header = parse_header(chunk)
            batch = os.pread(file.fd, header.size, position)
            if len(batch) != header.size:
                raise DecodeError(f"torn batch at byte {position}")
            yield header, memoryview(batch)
            consumed = header.size
        position += consumed


def _rebuilt(header: BatchHeader, records: list[Record], horizon: int | None) -> Generator[int, None, bytes]:
    """The batch of `header` holding only `records`: base offset, last offset delta,
    producer fields and codec kept; with a delete `horizon`, bit 6 set and the base
    timestamp the horizon, as Kafka's MemoryRecordsBuilder writes it. Pauses (yields 0)
    every RECORDS_PER_STEP records."""
    base_timestamp = records[0].timestamp if horizon is None else horizon
    if header.attributes & LOG_APPEND_TIME_BIT:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r.timestamp for r in records)
    parts = []
    for first in range(0, len(records), RECORDS_PER_STEP):
        parts.append(b"".join(encode_record(r, r.offset - header.base_offset, r.timestamp - base_timestamp)
                              for r in records[first:first + RECORDS_PER_STEP]))
        yield 0
    section = b"".join(parts)
    attributes = header.attributes & ~DELETE_HORIZON_BIT | (0 if horizon is None else DELETE_HORIZON_BIT)
    return assemble_batch(header._replace(attributes=attributes, base_timestamp=base_timestamp,
                                          max_timestamp=max_timestamp, record_count=len(records)), section)


def _emptied(header: BatchHeader) -> bytes:
    """The batch of `header` without records (Kafka's writeEmptyHeader): its offsets and
    producer fields only, uncompressed."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_BIT)
    return assemble_batch(header._replace(attributes=attributes, base_timestamp=header.max_timestamp,
                                          record_count=0), b"")


class CleaningStats:
    """What one cleaning did, for its summary line."""

    def __init__(self, started: float):
        self.started = started
        self.map_done = started
        self.map_bytes = 0
        self.bytes_read = 0
        self.bytes_written = 0
        self.records_read = 0
        self.records_kept = 0
        self.batches_emptied = 0


class LogCleaning:
    """One cleaning of one log: the offset map of [first_dirty, first_uncleanable), then
    the rewrite of every group of segments up to the map's end. The steps are generators
    that yield the bytes each batch cost, so that the cleaner can pause between batches."""

    def __init__(self, log: PartitionLog, offset_map: OffsetMap, first_dirty: int,
                 first_uncleanable: int, now_ms: int, stats: CleaningStats):
        self.log = log
        self.map = offset_map
        self.first_dirty = first_dirty
        self.first_uncleanable = first_uncleanable
        self.now = now_ms
        self.stats = stats
        self.truncations = log.truncations  # as the log was when the cleaning began
        self._transactions = _Transactions()
        self._last_of_producers: dict[int, tuple[int | None, int]] = {}

    # -- the offset map ----------------------------------------------------------------
    def build_offset_map(self) -> Iterator[int]:
        offset_map, start, end = self.map, self.first_dirty, self.first_uncleanable
        offset_map.clear()
        transactions = _Transactions()
        transactions.add_aborted(self.log.aborted_transactions(start, end))
        for segment in [s for s in self.log.segments if s.base_offset < end and s.next_offset > start]:
            # One descriptor at a time; a segment deleted meanwhile ends the cleaning.
            position = segment.position_of(start)[0] if segment.base_offset < start else 0
            file = SegmentFile(segment.path, os.O_RDONLY)
            for header, batch in _batches(file, segment.size, position):
                if header.is_control:
                    transactions.on_marker(header, _marker_kind(decode_batch(batch, MAX_DECOMPRESSED_BATCH)))
                elif not transactions.on_batch(header):
                    if offset_map.full:
                        return
                    for records in decode_batch_in_chunks(batch, MAX_DECOMPRESSED_BATCH, RECORDS_PER_STEP):
                        for record in records:
                            if record.key is not None and record.offset >= start:
                                offset_map.put(record.key, record.offset)
                        yield 0
                if header.last_offset >= start:
                    offset_map.latest_offset = max(offset_map.latest_offset, header.last_offset)
                self.stats.map_bytes += header.size
                yield header.size
            offset_map.latest_offset = max(offset_map.latest_offset, segment.next_offset - 1)

    # -- the rewrite -------------------------------------------------------------------
    def groups(self, end: int) -> list[list[LogSegment]]:
        """Consecutive sealed segments below `end`, grouped as Kafka's groupSegmentsBySize."""
        config = self.log.config
        segments = [s for s in self.log.segments[:-1] if s.base_offset < end]
        groups: list[list[LogSegment]] = []
        while segments:
            group = [segments.pop(0)]
            size = group[0].size
            offset_entries = group[0].offset_index.entries
            time_entries = group[0].time_index.entries
            while segments:
                following = segments[0]
                if (size + following.size > config.segment_bytes
                        or (offset_entries + following.offset_index.entries) * OffsetIndex.entry.size
                        > config.segment_index_bytes
                        or (time_entries + following.time_index.entries) * TimeIndex.entry.size
                        > config.segment_index_bytes
                        or (following.size and following.next_offset - 1 - group[0].base_offset > INT_MAX)):
                    break
                group.append(segments.pop(0))
                size += following.size
                offset_entries += following.offset_index.entries
                time_entries += following.time_index.entries
            groups.append(group)
        return groups

    def new_segment(self, group: list[LogSegment]) -> LogSegment:
        """The empty `.cleaned` segment `group` is rewritten into (its file created, so that
        a group cleaned to nothing still keeps its base offset)."""
        cleaned = LogSegment(self.log.directory, group[0].base_offset, self.log.config.index_interval_bytes,
                             self.now, empty=True, suffix=CLEANED_SUFFIX)
        cleaned.delete()  # what an attempt cut short may have left
        os.close(os.open(cleaned.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
        return cleaned

    def clean_group(self, group: list[LogSegment], cleaned: LogSegment) -> Iterator[int]:
        """Write what `group` keeps into `cleaned`, reading one segment at a time (a
        segment deleted or cut meanwhile ends the cleaning, before or at its swap)."""
        self._last_of_producers = {
            pid: (entry.batches[-1].last_offset if entry.batches else None, entry.epoch)
            for pid, entry in self.log.producer_state.producers.items()}
        for segment in group:
            self._transactions.add_aborted(self.log.aborted_transactions(segment.base_offset,
                                                                         segment.next_offset))
            for header, batch in _batches(SegmentFile(segment.path, os.O_RDONLY), segment.size):
                kept, aborted = yield from self._kept(header, batch)
                if aborted is not None:
                    cleaned.txn_index.append(aborted)
                written = 0
                if kept is not None:
                    cleaned.append(kept, parse_header(kept))
                    written = len(kept)
                self.stats.bytes_read += header.size
                self.stats.bytes_written += written
                yield header.size + written

    def _kept(self, header: BatchHeader,
              batch: memoryview) -> Generator[int, None, tuple[bytes | None, AbortedTxn | None]]:
        """What of one batch stays (None: nothing), and an aborted transaction its marker
        keeps indexed (see the module's docstring for the rules). Pauses (yields 0) every
        RECORDS_PER_STEP records."""
        records = None
        aborted = None
        if header.is_control:
            records = decode_batch(batch, MAX_DECOMPRESSED_BATCH)
            kind = _marker_kind(records)
            may_go, aborted = self._transactions.on_marker(header, kind)
            drop_records = may_go and header.has_delete_horizon and header.base_timestamp <= self.now
        else:
            may_go = drop_records = self._transactions.on_batch(header)
        keep_empty = header.producer_id >= 0 and self._is_last_of_producer(header) or \
            header.last_offset + 1 == self.first_uncleanable
        if drop_records and not keep_empty:
            self.stats.records_read += header.record_count
            return None, aborted
        if records is None and not drop_records:
            records = []
            for chunk in decode_batch_in_chunks(batch, MAX_DECOMPRESSED_BATCH, RECORDS_PER_STEP):
                records += chunk
                yield 0
        self.stats.records_read += header.record_count
        if drop_records:
            kept = []
        elif header.is_control:
            kept = records
        else:
            kept = []
            for first in range(0, len(records), RECORDS_PER_STEP):
                kept += [record for record in records[first:first + RECORDS_PER_STEP] if self._keeps(header, record)]
                yield 0
        self.stats.records_kept += len(kept)
        if kept:
            needs_horizon = not header.has_delete_horizon and (
                (header.is_control and may_go) or any(record.value is None for record in kept))
            if len(kept) == len(records) and not needs_horizon:
                return bytes(batch), aborted
            if needs_horizon:
                horizon = self.now + self.log.config.delete_retention_ms
            else:
                horizon = header.base_timestamp if header.has_delete_horizon else None
            return (yield from _rebuilt(header, kept, horizon)), aborted
        if keep_empty:
            self.stats.batches_emptied += header.record_count > 0
            return _emptied(header), aborted
        return None, aborted

    def _keeps(self, header: BatchHeader, record: Record) -> bool:
        if record.offset > self.map.latest_offset:
            return True
        if record.key is None:
            return False
        if record.offset < self.map.get(record.key):
            return False
        return record.value is not None or not header.has_delete_horizon or self.now < header.base_timestamp

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        last = self._last_of_producers.get(header.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset is not None:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch


def _marker_kind(records: list[Record]) -> int | None:
    """The type of a control batch's record; None when a cleaning emptied the batch."""
    return decode_control_record(records[0]).type if records else None


class _Dirt:
    """A compacted log's cleanable range and how dirty it is (Kafka's LogToClean)."""

    __slots__ = ("log", "first_dirty", "first_uncleanable", "ratio", "overdue", "dirty_bytes")

    def __init__(self, log: PartitionLog, first_dirty: int, first_uncleanable: int, ratio: float,
                 overdue: bool, dirty_bytes: int):
        self.log, self.first_dirty, self.first_uncleanable = log, first_dirty, first_uncleanable
        self.ratio, self.overdue, self.dirty_bytes = ratio, overdue, dirty_bytes

    @property
    def cleanable(self) -> bool:
        return (self.overdue and self.dirty_bytes > 0) or \
            self.ratio > self.log.config.min_cleanable_dirty_ratio


async def _in_thread_to_its_end(function: Callable[..., None], *args) -> None:
    """`function(*args)` in a worker thread, waited for to its end even when the caller is
    cancelled meanwhile (a broker's stop; the cancellation is raised once it has ended):
    a thread cannot be stopped, and what it writes or renames must not be so after the
    caller dropped the files, nor after the broker's stop unlocked the data directory."""
    running = asyncio.get_running_loop().run_in_executor(None, function, *args)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        while not running.done():
            try:
                await asyncio.wait([running])
            except asyncio.CancelledError:
                pass  # cancelled again: still the thread's end first
        running.exception()  # seen: the caller drops what the thread did, failed or not
        raise


class _Abandoned(Exception):
    """The log changed under a cleaning (retention, truncation, deletion): it ends, and
    the next one starts over."""


class LogCleaner:
    """The broker's one cleaner (log.cleaner.threads=1): picks the dirtiest compacted
    log, cleans it, records where it ended; see the module's docstring."""

    def __init__(self, config: BrokerConfig, logs: Callable[[], list[PartitionLog]], clock: Clock):
        """`logs()`: the broker's partition logs now (those of deleted topics gone)."""
        self.config = config
        self._logs = logs
        self.clock = clock
        self.offset_map = OffsetMap(config.log_cleaner_dedupe_buffer_size,
                                    config.log_cleaner_io_buffer_load_factor)
        self.checkpoint_path = os.path.join(config.data_dir, CLEANER_CHECKPOINT)
        self.first_dirty: dict[tuple[str, int], int] = {}
        self.uncleanable: set[tuple[str, int]] = set()
        self._io = Quota(clock, lambda: config.log_cleaner_io_max_bytes_per_second, samples=10, window_s=0.1)
        self._failures = ThrottledLog(log, logging.WARNING, burst=1, window=60.0)

    def load(self) -> None:
        self.first_dirty = read_checkpoint(self.checkpoint_path)

    async def run(self) -> None:
        """Clean logs until cancelled, pausing `log.cleaner.backoff.ms` when none is dirty."""
        while True:
            cleaned = False
            try:
                cleaned = await self.clean_dirtiest()
            except OSError as exc:  # a full disk: the next round tries again
                self._failures("log cleaning failed: %s", exc)
            except Exception:
                log.exception("log cleaner round failed")
            if not cleaned:
                await self.clock.sleep(self.config.log_cleaner_backoff_ms / 1000)

    async def clean_dirtiest(self) -> bool:
        """Clean the dirtiest log that needs it; whether there was one."""
        now = self.clock.wall_ms()
        candidates = []
        logs = self._logs()
        self.uncleanable &= {(l.topic, l.partition) for l in logs}  # a deleted topic's name may come back
        for partition_log in logs:
            key = (partition_log.topic, partition_log.partition)
            if partition_log.config.compact and key not in self.uncleanable:
                dirt = self._dirt(partition_log, now)
                if dirt is not None and dirt.cleanable:
                    candidates.append(dirt)
        if not candidates:
            return False
        dirt = max(candidates, key=lambda d: d.ratio)
        key = (dirt.log.topic, dirt.log.partition)
        try:
            await self._clean(dirt, now)
        except _Abandoned as exc:
            log.info("Cleaning of log %s-%d abandoned: %s", *key, exc)
        except OSError:
            raise
        except Exception:  # an unreadable batch: as Kafka, the log is not tried again
            self.uncleanable.add(key)
            log.exception("Cleaning of log %s-%d failed; it stays uncleanable until the broker restarts",
                          *key)
        finally:
            self.offset_map.clear()  # its memory is not held between cleanings
        return True

    def _dirt(self, partition_log: PartitionLog, now: int) -> _Dirt | None:
        segments = partition_log.segments
        bases = [s.base_offset for s in segments]
        first_dirty = self.first_dirty.get((partition_log.topic, partition_log.partition),
                                           partition_log.log_start_offset)
        if not partition_log.log_start_offset <= first_dirty <= partition_log.log_end_offset:
            first_dirty = partition_log.log_start_offset
        uncleanable = min(partition_log.last_stable_offset, segments[-1].base_offset)
        config = partition_log.config
        dirty_sealed = segments[max(0, bisect_right(bases, first_dirty) - 1):-1]
        if config.min_compaction_lag_ms > 0:
            for segment in dirty_sealed:
                largest = segment.max_timestamp()
                if largest is not None and largest[0] > now - config.min_compaction_lag_ms:
                    uncleanable = min(uncleanable, segment.base_offset)
                    break
        uncleanable = max(first_dirty, uncleanable)
        uncleanable = bases[max(0, bisect_right(bases, uncleanable) - 1)]
        clean_bytes = sum(s.size for s in segments if s.base_offset < first_dirty)
        dirty_bytes = sum(s.size for s in segments
                          if s.base_offset < uncleanable and s.next_offset > first_dirty)
        if clean_bytes + dirty_bytes == 0:
            return None
        overdue = False
        clean_until = now - config.max_compaction_lag_ms
        if clean_until > 0:
            firsts = [s.header_at(0).max_timestamp for s in dirty_sealed if s.size]
            overdue = any(0 < first < clean_until for first in firsts)
        return _Dirt(partition_log, first_dirty, uncleanable, dirty_bytes / (clean_bytes + dirty_bytes),
                     overdue, dirty_bytes)

    def _intact(self, cleaning: LogCleaning, group: list[LogSegment] | None = None,
                sizes: list[int] | None = None) -> bool:
        """Whether the log is as `cleaning` found it: still the broker's, its tail not cut
        since, and `group` (when given) still in it, consecutive, sealed, of `sizes`."""
        partition_log = cleaning.log
        if partition_log.truncations != cleaning.truncations or \
                not any(candidate is partition_log for candidate in self._logs()):
            return False
        if group is None:
            return True
        segments = partition_log.segments
        try:
            first = segments.index(group[0])
        except ValueError:
            return False
        return (segments[first:first + len(group)] == group and first + len(group) < len(segments)
                and [s.size for s in group] == sizes)

    async def _clean(self, dirt: _Dirt, now: int) -> None:
        partition_log = dirt.log
        name = f"{partition_log.topic}-{partition_log.partition}"
        stats = CleaningStats(self.clock.monotonic())
        log.info("Beginning cleaning of log %s (dirty section [%d, %d), dirty ratio %.2f)", name,
                 dirt.first_dirty, dirt.first_uncleanable, dirt.ratio)
        cleaning = LogCleaning(partition_log, self.offset_map, dirt.first_dirty, dirt.first_uncleanable,
                               now, stats)
        try:
            await self._work(cleaning.build_offset_map())
        except (OSError, DecodeError) as exc:  # a segment deleted or cut while it was read
            if isinstance(exc, FileNotFoundError) or not self._intact(cleaning):
                raise _Abandoned("its segments changed meanwhile") from None
            raise
        stats.map_done = self.clock.monotonic()
        end = min(self.offset_map.latest_offset + 1, dirt.first_uncleanable)
        for group in cleaning.groups(end):
            sizes = [s.size for s in group]
            if not self._intact(cleaning, group, sizes):
                raise _Abandoned("its segments changed meanwhile")
            cleaned = cleaning.new_segment(group)
            try:
                await self._work(cleaning.clean_group(group, cleaned))
                await _in_thread_to_its_end(seal_for_swap, cleaned)
                if not self._intact(cleaning, group, sizes):
                    raise _Abandoned("its segments changed meanwhile")
            except BaseException as exc:
                cleaned.delete()
                if isinstance(exc, (OSError, DecodeError)) and not self._intact(cleaning, group, sizes):
                    raise _Abandoned("its segments changed meanwhile") from None  # or went with its topic
                raise
            partition_log.replace_segments(cleaned, group)
        self.first_dirty[(partition_log.topic, partition_log.partition)] = end
        live = {(l.topic, l.partition) for l in self._logs()}
        self.first_dirty = {key: offset for key, offset in self.first_dirty.items() if key in live}
        await _in_thread_to_its_end(write_checkpoint, self.checkpoint_path, dict(self.first_dirty))
        self._log_summary(name, dirt, end, stats)

    async def _work(self, steps: Iterator[int]) -> None:
        """Run a cleaning step, letting the event loop run every SLICE_SECONDS and
        sleeping as the I/O throttle says."""
        clock = self.clock
        slice_end = clock.monotonic() + SLICE_SECONDS
        for io_bytes in steps:
            self._io.record(io_bytes)
            delay = self._io.throttle_time()
            if delay > 0 or clock.monotonic() >= slice_end:
                if delay > 0:
                    await clock.sleep(delay)
                else:
                    for _ in range(LOOP_TURNS_PER_PAUSE):
                        await asyncio.sleep(0)
                slice_end = clock.monotonic() + SLICE_SECONDS

    def _log_summary(self, name: str, dirt: _Dirt, end: int, stats: CleaningStats) -> None:
        elapsed = max(self.clock.monotonic() - stats.started, 1e-6)
        mapping = max(stats.map_done - stats.started, 1e-6)
        processed = stats.map_bytes + stats.bytes_read
        removed = stats.records_read - stats.records_kept
        log.info("Log cleaner cleaned log %s (dirty section [%d, %d)): %.1f MB of log processed in %.1f s "
                 "(%.1f MB/s); offset map of %d keys (%.1f%% of its buffer) built from %.1f MB in %.1f s; "
                 "%.1f MB of segments rewritten into %.1f MB (%.1f%% smaller); %d records kept, %d removed, "
                 "%d batches kept empty",
                 name, dirt.first_dirty, end, processed / _MB, elapsed, processed / _MB / elapsed,
                 len(self.offset_map), 100 * self.offset_map.utilization, stats.map_bytes / _MB, mapping,
                 stats.bytes_read / _MB, stats.bytes_written / _MB,
                 100 * (1 - stats.bytes_written / stats.bytes_read) if stats.bytes_read else 0.0,
                 stats.records_kept, removed, stats.batches_emptied)
