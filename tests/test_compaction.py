"""Log compaction (broker/storage/cleaner.py): what a cleaning keeps, and what clients see.

The first half drives PartitionLog and LogCleaner directly (a stepped wall clock instead
of sleeping past delete.retention.ms); the second runs the real broker process with
small segments and a fast cleaner backoff, and watches through confluent-kafka, kcat
and the data directory.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, build_batch, decode_batch, decode_control_record,
                          iter_batches)

from broker.config import BrokerConfig, LogConfig, parse_topic_configs
from broker.storage.cleaner import CLEANER_CHECKPOINT, LogCleaner, OffsetMap
from broker.storage.checkpoint import read_checkpoint
from broker.storage.log import PartitionLog
from broker.storage.segment import LogSegment
from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.manual_clock import ManualClock
from tests.test_storage import BASE_TS, SteppedClock, abandon, append, open_log

DAY = 86_400_000
COMPACT = LogConfig(segment_bytes=1200, cleanup_policy="compact", min_cleanable_dirty_ratio=0.01,
                    delete_retention_ms=DAY)


# -- helpers -----------------------------------------------------------------------------

def keyed(pairs, ts=BASE_TS, *, pid=-1, epoch=-1, seq=-1, transactional=False, compression=0) -> bytes:
    """One batch of (key, value) records (value None: a tombstone)."""
    return build_batch([(k, v, [("h", b"x")], ts) for k, v in pairs], producer_id=pid, producer_epoch=epoch,
                       base_sequence=seq, transactional=transactional, compression=compression)


def stored_batches(log: PartitionLog):
    """(header, records) of every stored batch, in order."""
    out = []
    for segment in log.segments:
        data = segment.region(0, segment.size).read() if segment.size else b""
        for header, batch in iter_batches(data):
            out.append((header, decode_batch(batch, 1 << 24)))
    return out


def records_of(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for header, records in stored_batches(log) if not header.is_control
            for r in records]


def latest_per_key(sent: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    latest = {}
    for offset, key, value in sent:
        latest[key] = (offset, value)
    return latest


class Cleaner:
    """A LogCleaner over one log, run one cleaning at a time."""

    def __init__(self, log: PartitionLog, clock, **settings):
        config = BrokerConfig(data_dir=os.path.dirname(log.directory), **settings)
        self.cleaner = LogCleaner(config, lambda: [log], clock)
        self.cleaner.load()

    def clean(self) -> bool:
        return asyncio.run(self.cleaner.clean_dirtiest())


def fill_keys(log, rounds: int, keys: int, *, start_value: int = 0, ts=BASE_TS) -> list:
    """`rounds` batches of one record per key; returns [(offset, key, value)]."""
    sent = []
    for r in range(rounds):
        pairs = [(b"key-%d" % k, b"value-%d-%d" % (r + start_value, k)) for k in range(keys)]
        result = append(log, keyed(pairs, ts))
        sent += [(result.first_offset + i, k, v) for i, (k, v) in enumerate(pairs)]
    return sent


def files_in_flight(log: PartitionLog) -> list[str]:
    """The files of a cleaned group not swapped in yet (`.cleaned`, then `.swap`)."""
    return [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap"))]


async def advance_until(clock: ManualClock, condition, what: str, timeout: float = 30.0) -> None:
    """Move `clock` on 10 ms at a time until `condition()`, for at most `timeout` seconds
    of real time (the cleaner's seals run in a worker thread meanwhile). Between two
    looks, a cleaner on `clock` throttled to 20 kB/s does what 10 ms allow (200 bytes)
    and a batch more, and at each it sleeps on its throttle (no time passes while it
    works): a look sees where it is, whatever the speed of the machine."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await clock.advance(0.01)
        await asyncio.sleep(0.001)


def check_compacted(log, sent, *, keep_tombstones=True):
    """Every key's latest record is there at its offset, offsets ascend, and below the active
    segment (what a cleaning covers) no record survives a later one of its key."""
    found = records_of(log)
    offsets = [offset for offset, _, _ in found]
    assert offsets == sorted(set(offsets)), "offsets ascend and repeat nothing"
    latest = latest_per_key(sent)
    clean_end = log.segments[-1].base_offset
    by_offset = {offset: (key, value) for offset, key, value in found}
    for key, (offset, value) in latest.items():
        if value is None and not keep_tombstones:
            continue
        assert by_offset.get(offset) == (key, value), f"{key!r} lost its latest record at {offset}"
    latest_cleaned = latest_per_key([record for record in sent if record[0] < clean_end])
    for offset, key, _ in found:
        if offset < clean_end:
            assert latest_cleaned[key][0] == offset, f"superseded record {offset} ({key!r}) survived"


# -- the offset map ----------------------------------------------------------------------

def test_offset_map_capacity_follows_kafka():
    offset_map = OffsetMap(24 * 1000, 0.9)
    assert (offset_map.slots, offset_map.capacity) == (1000, 900)
    offset_map.put(b"a", 5)
    offset_map.put(b"a", 9)
    assert offset_map.get(b"a") == 9 and offset_map.get(b"b") == -1 and len(offset_map) == 1
    assert not offset_map.full


# -- cleaning a log ----------------------------------------------------------------------

@pytest.mark.parametrize("compression", [0, 1, 4], ids=["none", "gzip", "zstd"])
def test_latest_value_per_key_survives_with_offsets(tmp_path, compression):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = []
    for r in range(30):
        pairs = [(b"key-%d" % k, b"value-%d-%d" % (r, k)) for k in range(5)]
        result = append(log, keyed(pairs, compression=compression))
        sent += [(result.first_offset + i, k, v) for i, (k, v) in enumerate(pairs)]
    end = log.log_end_offset
    cleaner = Cleaner(log, clock)
    assert cleaner.clean()
    check_compacted(log, sent)
    assert log.log_end_offset == end and log.log_start_offset == 0
    assert all(header.compression == compression for header, _ in stored_batches(log) if header.record_count)
    assert read_checkpoint(str(tmp_path / CLEANER_CHECKPOINT)) == {("t", 0): log.segments[-1].base_offset}
    assert not cleaner.clean(), "nothing dirty: no second cleaning"
    # More dirt: the next cleaning merges the now small segments.
    cleaned_end = log.segments[-1].base_offset
    small = len(log.segments) - 1
    sent += fill_keys(log, 20, 5)
    assert cleaner.clean()
    check_compacted(log, sent)
    assert len([s for s in log.segments if s.base_offset < cleaned_end]) < small
    # Reads at a removed offset return the next batch kept.
    kept = {offset for offset, _, _ in records_of(log)}
    removed = next(o for o in range(end) if o not in kept)
    region = log.read(removed, 1 << 20, log.high_watermark, True)
    first = next(iter_batches(region.read()))[0]
    assert first.last_offset >= removed and first.base_offset > min(o for o in kept if o > removed) - 5
    # Both reopenings see the same compacted log, with sound indexes.
    before = records_of(log)
    log.close()
    for recovery_point in (None, 0):
        reopened = open_log(tmp_path / "t-0", COMPACT, recovery_point=recovery_point, clock=clock)
        assert records_of(reopened) == before and reopened.log_end_offset == log.log_end_offset
        for segment in reopened.segments[:-1]:
            end_offset = reopened.segments[reopened.segments.index(segment) + 1].base_offset
            assert segment.index_problem(end_offset) is None
        reopened.close()


def test_tombstones_keep_a_delete_horizon_then_go(tmp_path):
    """KIP-534: the first cleaning keeping a tombstone stamps its batch with the horizon
    (now + delete.retention.ms); cleanings before it keep the tombstone, one after drops it."""
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = fill_keys(log, 10, 6)
    result = append(log, keyed([(b"key-4", None), (b"key-5", None)]))
    sent += [(result.first_offset, b"key-4", None), (result.first_offset + 1, b"key-5", None)]
    sent += fill_keys(log, 20, 4, start_value=100)
    cleaner = Cleaner(log, clock)
    assert cleaner.clean()
    tombstones = [(h, rs) for h, rs in stored_batches(log) if any(r.value is None for r in rs)]
    assert [(r.key, r.value) for _, rs in tombstones for r in rs] == [(b"key-4", None), (b"key-5", None)]
    for header, records in tombstones:
        assert header.has_delete_horizon and header.base_timestamp == BASE_TS + DAY
        assert all(r.timestamp == BASE_TS for r in records), "record timestamps keep their values"
    check_compacted(log, sent)
    # Before the horizon: a later cleaning keeps them, and the horizon they carry.
    clock.now = BASE_TS + DAY - 1
    sent += fill_keys(log, 10, 3, start_value=300, ts=clock.now)
    assert cleaner.clean()
    assert [h.base_timestamp for h, rs in stored_batches(log) if any(r.value is None for r in rs)] == \
        [BASE_TS + DAY]
    # Past it: gone.
    clock.now = BASE_TS + DAY + 1
    sent += fill_keys(log, 10, 3, start_value=400, ts=clock.now)
    assert cleaner.clean()
    assert not any(value is None for _, _, value in records_of(log))
    assert not {b"key-4", b"key-5"} & {key for _, key, _ in records_of(log)}
    check_compacted(log, sent, keep_tombstones=False)
    log.close()


PID, EPOCH = 7000, 0


def transactional(log, pairs, seq, pid=PID):
    return append(log, keyed(pairs, pid=pid, epoch=EPOCH, seq=seq, transactional=True))


def test_aborted_transactions_go_and_markers_follow_kafka(tmp_path):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    transactional(log, [(b"c-%d" % i, b"committed") for i in range(5)], 0)
    log.append_marker(PID, EPOCH, 0, True, 0)
    aborted = transactional(log, [(b"a-%d" % i, b"aborted") for i in range(5)], 5)
    aborted_marker = log.append_marker(PID, EPOCH, 0, False, 0)
    assert [e.producer_id for s in log.segments for e in s.txn_index.entries] == [PID]
    # Another producer's open-then-committed transaction and plain records after.
    transactional(log, [(b"o-%d" % i, b"other") for i in range(3)], 0, pid=PID + 1)
    log.append_marker(PID + 1, EPOCH, 0, True, 0)
    sent = fill_keys(log, 30, 4)
    log.update_high_watermark(log.log_end_offset)
    cleaner = Cleaner(log, clock)
    assert cleaner.clean()
    values = {(k, v) for _, k, v in records_of(log)}
    assert {(b"c-%d" % i, b"committed") for i in range(5)} <= values
    assert {(b"o-%d" % i, b"other") for i in range(3)} <= values
    assert not any(v == b"aborted" for _, v in values)
    batches = stored_batches(log)
    # The aborted batch is the producer's last data batch: kept empty, its sequence intact.
    emptied = [h for h, rs in batches if h.base_offset == aborted.first_offset]
    assert len(emptied) == 1 and emptied[0].record_count == 0
    assert (emptied[0].last_offset, emptied[0].base_sequence, emptied[0].producer_id) == \
        (aborted.last_offset, 5, PID)
    # The ABORT marker stays (its transaction's batch was seen) with its index entry.
    markers = {h.base_offset: decode_control_record(rs[0]).type for h, rs in batches if h.is_control and rs}
    assert markers.get(aborted_marker) == CONTROL_ABORT
    assert [e.last_offset for s in log.segments for e in s.txn_index.entries] == [aborted_marker]
    # Committed markers whose data was seen stay too; none is stamped with a horizon yet.
    assert list(markers.values()).count(CONTROL_COMMIT) == 2
    # The producer's next transaction supersedes its committed records: the old committed
    # batch and the emptied aborted one go, then their markers get a horizon, then go.
    transactional(log, [(b"c-%d" % i, b"again") for i in range(5)], 10)
    log.append_marker(PID, EPOCH, 0, True, 0)
    sent += fill_keys(log, 20, 4, start_value=50)
    log.update_high_watermark(log.log_end_offset)
    assert cleaner.clean()
    assert aborted.first_offset not in {h.base_offset for h, _ in stored_batches(log)}
    sent += fill_keys(log, 20, 4, start_value=100)
    assert cleaner.clean()
    stamped = {h.base_offset: h.base_timestamp for h, _ in stored_batches(log) if h.is_control}
    assert stamped[aborted_marker] == BASE_TS + DAY and stamped[aborted_marker - 6] == BASE_TS + DAY
    clock.now = BASE_TS + DAY + 1
    sent += fill_keys(log, 20, 4, start_value=150, ts=clock.now)
    assert cleaner.clean()
    markers = {h.base_offset for h, rs in stored_batches(log) if h.is_control}
    assert aborted_marker not in markers and aborted_marker - 6 not in markers
    assert {(b"c-%d" % i, b"again") for i in range(5)} | {(b"o-%d" % i, b"other") for i in range(3)} <= \
        {(k, v) for _, k, v in records_of(log)}
    assert not [e for s in log.segments for e in s.txn_index.entries]
    # Producer state survives a crash and replay: the next sequences are accepted.
    abandon(log)
    reopened = open_log(tmp_path / "t-0", COMPACT, recovery_point=0, clock=clock)
    assert not append(reopened, keyed([(b"n", b"n")], pid=PID, epoch=EPOCH, seq=15)).duplicate
    assert not append(reopened, keyed([(b"n", b"m")], pid=PID + 1, epoch=EPOCH, seq=3)).duplicate
    reopened.close()


def test_compaction_lags_and_the_dirty_ratio(tmp_path):
    """min.cleanable.dirty.ratio holds a cleaning back until max.compaction.lag.ms has
    passed for the first dirty batch; min.compaction.lag.ms keeps recent segments out."""
    clock = SteppedClock(BASE_TS)
    config = dataclasses.replace(COMPACT, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=DAY,
                                 min_compaction_lag_ms=60_000)
    log = open_log(tmp_path / "t-0", config, clock=clock)
    fill_keys(log, 20, 40, ts=BASE_TS)
    cleaner = Cleaner(log, clock)
    assert not cleaner.clean(), "every segment is within min.compaction.lag.ms"
    clock.now = BASE_TS + 120_000
    assert cleaner.clean()  # all dirty: ratio 1.0 > 0.9
    first_end = read_checkpoint(str(tmp_path / CLEANER_CHECKPOINT))[("t", 0)]
    fill_keys(log, 6, 4, start_value=100, ts=BASE_TS + 10)  # old timestamps
    fill_keys(log, 6, 4, start_value=200, ts=BASE_TS + DAY)  # within the min lag, then too
    assert not cleaner.clean(), "the ratio is below 0.9 and nothing is overdue yet"
    clock.now = BASE_TS + DAY + 20
    assert cleaner.clean(), "max.compaction.lag.ms passed for the first dirty batch"
    end = read_checkpoint(str(tmp_path / CLEANER_CHECKPOINT))[("t", 0)]
    recent = [s for s in log.segments if s.max_timestamp() and s.max_timestamp()[0] == BASE_TS + DAY]
    assert first_end < end <= recent[0].base_offset, "segments within the min lag stay dirty"
    log.close()


def test_compact_delete_retention_passes_segments_the_cleaner_emptied(tmp_path):
    clock = SteppedClock(BASE_TS)
    config = dataclasses.replace(COMPACT, cleanup_policy="compact,delete", retention_ms=3_600_000)
    log = open_log(tmp_path / "t-0", config, clock=clock)
    fill_keys(log, 20, 4, ts=BASE_TS - 7_200_000)  # expired
    sent = fill_keys(log, 20, 4, start_value=100, ts=BASE_TS)  # recent: supersedes the expired
    assert Cleaner(log, clock).clean()
    emptied = [s.base_offset for s in log.segments[:-1] if s.size == 0]
    assert emptied and emptied[0] == 0
    assert log.enforce_retention(clock.now) >= len(emptied)
    assert log.log_start_offset > emptied[-1] and log.segments[0].size > 0
    check_compacted(log, sent)
    log.close()


def test_a_small_offset_map_cleans_in_steps(tmp_path):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = []
    for r in range(40):  # batches of 10 keys out of 60
        pairs = [(b"key-%d" % ((r * 10 + k) % 60), b"value-%d" % r) for k in range(10)]
        result = append(log, keyed(pairs))
        sent += [(result.first_offset + i, k, v) for i, (k, v) in enumerate(pairs)]
    # Room for 20 keys: each cleaning maps two batches' worth of keys.
    cleaner = Cleaner(log, clock, log_cleaner_dedupe_buffer_size=24 * 20, log_cleaner_io_buffer_load_factor=1.0)
    ends = []
    while cleaner.clean():
        ends.append(read_checkpoint(str(tmp_path / CLEANER_CHECKPOINT))[("t", 0)])
        assert len(ends) < 40
    assert len(ends) > 3 and ends == sorted(set(ends)) and ends[-1] == log.segments[-1].base_offset
    check_compacted(log, sent)
    log.close()


def test_an_interrupted_swap_completes_at_start_up(tmp_path, monkeypatch):
    """A stop after a cleaned group was renamed .swap, with one of the segments it replaces
    deleted and the next not yet: the next open completes the swap (no record lost or
    doubled); .cleaned leftovers are deleted."""
    clock = SteppedClock(BASE_TS)
    directory = tmp_path / "t-0"
    log = open_log(directory, COMPACT, clock=clock)
    sent = fill_keys(log, 40, 4)
    cleaner = Cleaner(log, clock)
    assert cleaner.clean()  # small segments now: the next cleaning groups several
    sent += fill_keys(log, 40, 4, start_value=100)
    deleted = []
    real_delete = LogSegment.delete_later

    def delete_then_stop(segment, delay_ms, clock):
        if segment.path.endswith(".log"):
            if deleted:
                raise KeyboardInterrupt("stopped mid-swap")
            deleted.append(segment.base_offset)
        real_delete(segment, delay_ms, clock)

    monkeypatch.setattr(LogSegment, "delete_later", delete_then_stop)
    with pytest.raises(KeyboardInterrupt):
        cleaner.clean()
    monkeypatch.undo()
    names = os.listdir(directory)
    assert deleted == [0] and "00000000000000000000.log.swap" in names
    assert "00000000000000000000.log" not in names and len([n for n in names if n.endswith(".log")]) > 2
    (directory / "00000000000000009999.log.cleaned").write_bytes(b"junk")
    (directory / "00000000000000009999.index.cleaned").write_bytes(b"junk")
    abandon(log)
    reopened = open_log(directory, COMPACT, recovery_point=0, clock=clock)
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned"))]
    found = records_of(reopened)
    offsets = [offset for offset, _, _ in found]
    assert offsets == sorted(set(offsets)), "no record doubled"
    for key, (offset, value) in latest_per_key(sent).items():
        assert (offset, key, value) in found
    assert reopened.log_end_offset == sent[-1][0] + 1 and reopened.segments[0].base_offset == 0
    reopened.close()


@pytest.mark.parametrize("change", ["delete_records", "truncate"])
def test_a_log_changed_under_a_cleaning_abandons_it(tmp_path, caplog, change):
    """Segments deleted at the head, or the tail cut (a follower's truncation), while a
    (throttled) cleaning runs: it drops what it cleaned, and the next one starts over."""
    clock = ManualClock(wall_ms=BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = fill_keys(log, 40, 4)
    cleaner = Cleaner(log, clock, log_cleaner_io_max_bytes_per_second=20_000.0)
    caplog.set_level(logging.INFO, logger="sluice.cleaner")
    before = records_of(log)

    async def cleaning(meanwhile=None) -> bool:
        """A cleaning, the clock moved on until it ends; `meanwhile()` once the first
        group is being rewritten."""
        task = asyncio.create_task(cleaner.cleaner.clean_dirtiest())
        if meanwhile is not None:
            await advance_until(clock, lambda: files_in_flight(log), "the first group's rewrite")
            assert not task.done() and records_of(log) == before
            meanwhile()
        await advance_until(clock, task.done, "the cleaning's end")
        return task.result()

    if change == "delete_records":
        assert asyncio.run(cleaning(lambda: log.delete_records_before(log.segments[2].base_offset)))
    else:
        assert asyncio.run(cleaning(lambda: log.truncate_to(log.segments[-3].base_offset + 1)))
    assert "abandoned: its segments changed meanwhile" in caplog.text
    assert not files_in_flight(log)
    assert not os.path.exists(tmp_path / CLEANER_CHECKPOINT)
    log.update_high_watermark(log.log_end_offset)
    assert asyncio.run(cleaning())
    start, end = log.log_start_offset, log.log_end_offset
    check_compacted(log, [record for record in sent if start <= record[0] < end])
    log.close()


def test_a_stop_in_the_middle_of_a_cleaning_leaves_nothing_behind(tmp_path):
    """The broker's stop cancels the cleaner's task: the group being rewritten is dropped,
    the log and the checkpoint stay as they were. The throttled cleaner runs on a manual
    clock (advance_until), so that the stop lands while the first group is rewritten:
    on the real clock a loaded machine let its throttle's headroom grow, whole groups
    went by without a pause between two looks, and the stop came after some were
    swapped in."""
    clock = ManualClock(wall_ms=BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = fill_keys(log, 40, 4)
    cleaner = Cleaner(log, clock, log_cleaner_io_max_bytes_per_second=20_000.0)
    before = records_of(log)

    async def stop_meanwhile():
        cleaning = asyncio.create_task(cleaner.cleaner.run())
        await advance_until(clock, lambda: files_in_flight(log), "the first group's rewrite")
        cleaning.cancel()
        await asyncio.gather(cleaning, return_exceptions=True)
    asyncio.run(stop_meanwhile())
    assert not files_in_flight(log)
    assert not os.path.exists(tmp_path / CLEANER_CHECKPOINT)
    assert records_of(log) == before
    log.close()
    reopened = open_log(tmp_path / "t-0", COMPACT, recovery_point=None, clock=clock)
    assert records_of(reopened) == before and Cleaner(reopened, clock).clean()
    check_compacted(reopened, sent)
    reopened.close()


class HeldWorker(ThreadPoolExecutor):
    """An event loop's default executor (the worker thread of run_in_executor(None) and
    asyncio.to_thread), whose jobs wait for `release` before they run."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.submitted = 0
        self.release = threading.Event()

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1

        def when_released():
            self.release.wait(60)
            return fn(*args, **kwargs)
        return super().submit(when_released)


def test_a_stop_during_the_seal_of_a_group_waits_for_it(tmp_path):
    """The seal of a cleaned group (fsync, rename to `.swap`) runs in a worker thread that
    a cancellation does not stop: the stop waits for it to end, then drops the group.
    Dropped before, the group got what the seal wrote after (here the largest timestamp,
    written to its time index at the seal), renamed `.swap`; and the broker's stop went on
    to unlock its data directory while the thread still wrote and renamed files there."""
    clock = ManualClock(wall_ms=BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    for r in range(40):  # no key twice: every batch kept, each a millisecond after the last
        append(log, keyed([(b"key-%d-%d" % (r, k), b"value") for k in range(4)], BASE_TS + r))
    cleaner = Cleaner(log, clock)
    before = records_of(log)
    worker = HeldWorker()

    async def stop_during_the_seal() -> bool:
        asyncio.get_running_loop().set_default_executor(worker)
        cleaning = asyncio.create_task(cleaner.cleaner.run())
        try:
            await advance_until(clock, lambda: worker.submitted, "the first group's seal")
            cleaning.cancel()
            await asyncio.sleep(0)  # the turn of the loop that delivers the cancellation
            stopped_first = cleaning.done()
        finally:
            worker.release.set()
        await asyncio.gather(cleaning, return_exceptions=True)
        return stopped_first
    stopped_before_the_seal_ended = asyncio.run(stop_during_the_seal())
    assert not files_in_flight(log)
    assert not stopped_before_the_seal_ended
    assert not os.path.exists(tmp_path / CLEANER_CHECKPOINT)
    assert records_of(log) == before
    log.close()


def test_a_fetch_holding_a_replaced_segment_reads_its_old_bytes(tmp_path):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    fill_keys(log, 40, 4)
    region = log.read(0, 1 << 20, log.high_watermark, True)
    old = region.read()
    assert Cleaner(log, clock).clean()
    assert region.read() == old, "the region's descriptor still reads the deleted file"
    assert log.read(0, 1 << 20, log.high_watermark, True).read() != old


def test_a_replay_paused_across_a_cleaning_goes_on_in_the_cleaned_segments(tmp_path):
    """A coordinator replays its partition in pieces, letting requests (and the cleaner) run
    between them: the replay reads on from the cleaned segments by offset, and ends with
    every key's latest value."""
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    sent = fill_keys(log, 60, 4)
    replay = log.decoded_batches(1 << 20)
    state, offsets = {}, []
    for header, records in (next(replay) for _ in range(5)):
        offsets.append(header.base_offset)
        state.update((r.key, r.value) for r in records)
    assert Cleaner(log, clock).clean()
    for header, records in replay:
        offsets.append(header.base_offset)
        state.update((r.key, r.value) for r in records)
    assert offsets == sorted(set(offsets)) and len(offsets) < 60, "read on in the cleaned, smaller log"
    assert state == {key: value for key, (_, value) in latest_per_key(sent).items()}


def test_a_new_follower_replicates_a_compacted_leader(tmp_path):
    """The leader's batches start past the follower's log end where the cleaner removed
    offsets: the follower takes them, as Kafka's do, and ends with the leader's records."""
    from tests.test_follower import leader_and_follower, produce, replicate
    clock = SteppedClock(BASE_TS)
    leader, follower = leader_and_follower(tmp_path, COMPACT, clock)
    for r in range(30):
        produce(leader, keyed([(b"key-%d" % k, b"value-%d" % r) for k in range(4)]))
    leader.log.update_high_watermark(leader.log.log_end_offset)
    assert Cleaner(leader.log, clock).clean()
    assert records_of(leader.log)[0][0] > 0, "the first offsets were cleaned away"
    replicate(leader, follower)
    assert records_of(follower.log) == records_of(leader.log)
    assert follower.log_end_offset == leader.log_end_offset
    leader.log.close()
    follower.log.close()


def test_topic_configs_are_validated():
    assert parse_topic_configs({"min.cleanable.dirty.ratio": "0.25", "delete.retention.ms": "0",
                                "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "100"}) == \
        {"min.cleanable.dirty.ratio": "0.25", "delete.retention.ms": "0", "min.compaction.lag.ms": "10",
         "max.compaction.lag.ms": "100"}
    for key, value, message in [("min.cleanable.dirty.ratio", "1.5", "not between 0 and 1"),
                                ("min.cleanable.dirty.ratio", "half", "not a number"),
                                ("delete.retention.ms", "-1", "below the minimum 0"),
                                ("max.compaction.lag.ms", "0", "below the minimum 1")]:
        with pytest.raises(ValueError, match=message):
            parse_topic_configs({key: value})


# -- the broker process ------------------------------------------------------------------

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,  # noqa: E402
                                  NewTopic)

TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01"}


def write_properties(path, props: dict) -> str:
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return str(path)


BROKER_PROPS = {"log.cleaner.backoff.ms": "100", "offsets.topic.num.partitions": "1",
                "transaction.state.log.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"}


@pytest.fixture(scope="module")
def compaction_broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compaction")
    config = write_properties(directory / "server.properties", BROKER_PROPS)
    with BrokerProcess(directory / "data", config_file=config) as proc:
        yield proc


def create_topic(bootstrap, name, config):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)],
                                  operation_timeout=10)
    futures[name].result(timeout=15)


def produce_keyed(bootstrap, topic, pairs, **settings) -> list[tuple[int, bytes, bytes | None]]:
    """Produce (key, value) pairs in order; returns (offset, key, value) of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **settings})
    reports = []

    def on_delivery(err, msg):
        assert err is None, err
        reports.append((msg.offset(), msg.key(), msg.value()))

    for key, value in pairs:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(15) == 0
    assert len(reports) == len(pairs)
    return sorted(reports)


def consume_all(bootstrap, topic, isolation="read_uncommitted") -> list[tuple[int, bytes, bytes | None]]:
    """Every record from the log start to the end, through confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "c-" + uuid.uuid4().hex,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError("did not reach the end of the partition in time")
    finally:
        consumer.close()


def kcat_all(bootstrap, topic) -> list[tuple[int, bytes, bytes | None]]:
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    out = subprocess.run(["kcat", "-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", "beginning", "-e",
                          "-q", "-f", "%o|%k|%S|%s\\n"], capture_output=True, timeout=60, check=True).stdout
    records = []
    for line in out.splitlines():
        offset, key, size, value = line.split(b"|", 3)
        records.append((int(offset), key, None if int(size) < 0 else value))
    return records


def cleaned_to(proc, topic) -> int:
    """Where the broker's last cleaning of `topic`-0 ended (its cleaner checkpoint)."""
    return read_checkpoint(os.path.join(proc.data_dir, CLEANER_CHECKPOINT)).get((topic, 0), 0)


def anomalies(found, sent, below) -> dict[str, int]:
    """What a compacted read of `sent` may not show: a key whose latest record is missing
    (lost), an offset twice (duplicated), offsets going backwards, a record superseded below
    the cleaned offset `below` still there."""
    latest = latest_per_key(sent)
    latest_cleaned = latest_per_key([r for r in sent if r[0] < below])
    offsets = [offset for offset, _, _ in found]
    present = set(found)
    return {"lost": sum((offset, key, value) not in present for key, (offset, value) in latest.items()),
            "duplicated": len(offsets) - len(set(offsets)),
            "backwards": sum(b <= a for a, b in zip(offsets, offsets[1:])),
            "superseded": sum(latest_cleaned[key][0] != offset for offset, key, _ in found if offset < below)}


NO_ANOMALY = {"lost": 0, "duplicated": 0, "backwards": 0, "superseded": 0}


def test_broker_keeps_the_latest_value_per_key(compaction_broker):
    bootstrap = compaction_broker.bootstrap_servers
    topic = "compacted-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic, TOPIC_CONFIG)
    sent = []
    for r in range(20):
        sent += produce_keyed(bootstrap, topic, [(b"key-%d" % k, b"value-%d-%d" % (r, k) * 4) for k in range(30)])
    end = sent[-1][0] + 1
    wait_for(lambda: cleaned_to(compaction_broker, topic) > end // 2, what="a cleaning of most of the log")
    below = cleaned_to(compaction_broker, topic)
    found = consume_all(bootstrap, topic)
    assert anomalies(found, sent, below) == NO_ANOMALY
    assert len(found) < len(sent) // 2, "superseded records were removed"
    assert kcat_all(bootstrap, topic) == found
    assert any(f"Log cleaner cleaned log {topic}-0" in line for line in compaction_broker.output)


def test_broker_tombstones_expire_after_delete_retention(compaction_broker):
    bootstrap = compaction_broker.bootstrap_servers
    topic = "tombstones-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic, {**TOPIC_CONFIG, "delete.retention.ms": "1500"})
    sent = produce_keyed(bootstrap, topic, [(b"key-%d" % k, b"value" * 20) for k in range(40)])
    sent += produce_keyed(bootstrap, topic, [(b"key-%d" % k, None) for k in range(20)])
    filler = iter(range(10_000))

    def fill(rounds=1):
        return produce_keyed(bootstrap, topic, [(b"filler-%d" % (next(filler) % 7), b"x" * 200)
                                                 for _ in range(25 * rounds)])
    sent += fill(2)
    tombstone_end = sent[59][0] + 1
    wait_for(lambda: cleaned_to(compaction_broker, topic) >= tombstone_end, what="a cleaning past the tombstones")
    found = consume_all(bootstrap, topic)
    assert {(k, v) for _, k, v in found if v is None} == {(b"key-%d" % k, None) for k in range(20)}
    started = time.monotonic()

    def tombstones_gone():
        nonlocal sent
        sent += fill()  # dirt for the next cleaning
        return not any(v is None for _, _, v in consume_all(bootstrap, topic))
    wait_for(tombstones_gone, timeout=20, interval=0.3, what="the tombstones to go")
    assert time.monotonic() - started >= 1.0, "kept for delete.retention.ms first"
    found = consume_all(bootstrap, topic)
    keys = {k for _, k, _ in found}
    assert not {b"key-%d" % k for k in range(20)} & keys and {b"key-%d" % k for k in range(20, 40)} <= keys
    assert anomalies(found, [r for r in sent if r[2] is not None], 0)["duplicated"] == 0


def test_broker_removes_aborted_transactions(compaction_broker):
    bootstrap = compaction_broker.bootstrap_servers
    topic = "txn-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic, TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t-" + uuid.uuid4().hex,
                         "linger.ms": 5})
    producer.init_transactions(15)
    for kind in ("committed", "aborted", "committed-too"):
        producer.begin_transaction()
        for k in range(30):
            producer.produce(topic, key=b"%s-%d" % (kind.encode(), k), value=kind.encode() * 10, partition=0)
        producer.flush(15)
        (producer.abort_transaction if kind == "aborted" else producer.commit_transaction)(15)
    sent = []
    for _ in range(6):  # batches of their own: some segments roll past the transactions
        sent += produce_keyed(bootstrap, topic, [(b"filler-%d" % (i % 5), b"f" * 300) for i in range(10)])
    wait_for(lambda: cleaned_to(compaction_broker, topic) >= sent[0][0], what="a cleaning past the transactions")
    for isolation in ("read_uncommitted", "read_committed"):
        found = consume_all(bootstrap, topic, isolation)
        kinds = {v for _, _, v in found}
        assert b"aborted" * 10 not in kinds, f"{isolation}: aborted records were removed"
        assert {b"committed" * 10, b"committed-too" * 10} <= kinds
        assert [v for _, _, v in found].count(b"committed" * 10) == 30
        offsets = [o for o, _, _ in found]
        assert offsets == sorted(set(offsets))


def test_keyless_records_are_refused(compaction_broker):
    bootstrap = compaction_broker.bootstrap_servers
    topic = "keyless-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, topic, TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0})
    errors = []
    producer.produce(topic, value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD
    kafka = pytest.importorskip("kafka")  # kafka-python shows the broker's error message
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        with pytest.raises(kafka.errors.InvalidRecordError,
                           match=f"Compacted topic cannot accept message without key in topic partition {topic}-0"):
            producer.send(topic, value=b"no key either", partition=0).get(15)
    finally:
        producer.close(5)
    assert produce_keyed(bootstrap, topic, [(b"k", b"with a key")])[0][0] == 0, "nothing was appended"


def test_compaction_configs(compaction_broker, tmp_path):
    bootstrap = compaction_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "bad-ratio-" + uuid.uuid4().hex[:8]
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={**TOPIC_CONFIG, "min.cleanable.dirty.ratio": "1.5"})])
    with pytest.raises(KafkaException) as info:
        futures[topic].result(15)
    error = info.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "min.cleanable.dirty.ratio: 1.5 is not between 0 and 1" in error.str()
    conflict = "lags-" + uuid.uuid4().hex[:8]
    futures = admin.create_topics([NewTopic(conflict, 1, 1, config={"min.compaction.lag.ms": "5000",
                                                                   "max.compaction.lag.ms": "1000"})])
    with pytest.raises(KafkaException, match=r"min.compaction.lag.ms \(5000\) > max.compaction.lag.ms \(1000\)"):
        futures[conflict].result(15)
    good = "configs-" + uuid.uuid4().hex[:8]
    create_topic(bootstrap, good, {**TOPIC_CONFIG, "delete.retention.ms": "1000", "max.compaction.lag.ms": "60000"})
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, good)])
    entries = list(described.values())[0].result(15)
    assert entries["min.cleanable.dirty.ratio"].value == "0.01"
    assert entries["delete.retention.ms"].value == "1000"
    assert entries["min.compaction.lag.ms"].value == "0" and entries["max.compaction.lag.ms"].value == "60000"
    # A bad broker setting stops the start with a readable message.
    config = write_properties(tmp_path / "bad.properties", {"log.cleaner.min.cleanable.ratio": "2"})
    with pytest.raises(RuntimeError, match="log.cleaner.min.cleanable.ratio: 2 is not between 0 and 1"):
        BrokerProcess(tmp_path / "bad-data", config_file=config).start()


def test_sigkill_mid_cleaning_loses_and_duplicates_nothing(tmp_path):
    """A consumer reading from the start while a throttled cleaning runs sees a consistent
    log; a SIGKILL in the middle of it, then a restart, loses and doubles nothing; the
    idempotent producer goes on after it without a sequence error."""
    config = write_properties(tmp_path / "server.properties",
                              {**BROKER_PROPS, "log.cleaner.io.max.bytes.per.second": "250000"})
    proc = BrokerProcess(tmp_path / "data", config_file=config).start()
    try:
        bootstrap = proc.bootstrap_servers
        topic = "killed"
        # min.compaction.lag.ms holds the cleaning back until everything is written; lowered
        # then, one cleaning of the whole log follows, slowed by the I/O throttle to seconds.
        create_topic(bootstrap, topic, {**TOPIC_CONFIG, "segment.bytes": "65536",
                                        "min.compaction.lag.ms": "3600000"})
        idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
        sent = []

        def produce(pairs, producer):
            reports = []
            for key, value in pairs:
                producer.produce(topic, key=key, value=value, partition=0,
                                 on_delivery=lambda err, msg: reports.append((err, msg)))
                producer.poll(0)
            assert producer.flush(15) == 0
            assert [err for err, _ in reports if err is not None] == []
            return sorted((m.offset(), m.key(), m.value()) for _, m in reports)
        for r in range(8):
            sent += produce([(b"key-%d" % k, b"%d-%d-" % (r, k) + b"v" * 80) for k in range(1000)], idempotent)
        # Another producer supersedes every key: the idempotent producer's last batch is
        # cleaned empty, and kept for its sequence.
        plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent += produce([(b"key-%d" % k, b"plain-%d-" % k + b"v" * 80) for k in range(1000)], plain)
        sent += produce([(b"tail-%d" % k, b"v" * 80) for k in range(1000)], plain)  # rolls past them
        assert not any(f"cleaning of log {topic}-0" in line for line in proc.output)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
                "min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])])
        list(futures.values())[0].result(15)
        wait_for(lambda: any(f"Beginning cleaning of log {topic}-0" in line for line in proc.output),
                 what="the cleaning to begin")
        # Reads during the cleaning: every key's latest value, offsets ascending, nothing
        # twice; the kill comes once groups were swapped in and another is being written.
        directory = tmp_path / "data" / f"{topic}-0"

        def in_flight(from_offset=0):
            return [n for n in os.listdir(directory) if n.endswith((".cleaned", ".swap"))
                    and int(n.partition(".")[0]) >= from_offset]
        wait_for(in_flight, timeout=30, interval=0.01, what="the first group's rewrite")
        reads = 0
        while not in_flight(6000) and reads < 50:
            assert not any(f"cleaned log {topic}-0" in line for line in proc.output), "killed mid-cleaning"
            assert anomalies(consume_all(bootstrap, topic), sent, 0) == NO_ANOMALY
            reads += 1
        leftovers = wait_for(lambda: in_flight(6000), timeout=30, interval=0.01, what="a later group's rewrite")
        print(f"{reads} consistent reads during the cleaning")
        proc.kill()
        proc.start()
        found = consume_all(bootstrap, topic)
        counts = anomalies(found, sent, 0)
        print(f"after SIGKILL mid-cleaning (files in flight: {leftovers}): {counts}, "
              f"{len(found)} of {len(sent)} records read")
        assert {k: counts[k] for k in ("lost", "duplicated", "backwards")} == \
            {"lost": 0, "duplicated": 0, "backwards": 0}
        wait_for(lambda: cleaned_to(proc, topic) > 0, timeout=60, what="the cleaning to finish after the restart")
        summary = next(line for line in proc.output if f"cleaned log {topic}-0" in line)
        print(summary)
        assert summary.endswith(" 1 batches kept empty\n"), "the idempotent producer's last batch stayed"
        final = consume_all(bootstrap, topic)
        assert anomalies(final, sent, cleaned_to(proc, topic)) == NO_ANOMALY
        # A SIGKILL again, and the idempotent producer goes on: the broker knows its sequence.
        proc.kill()
        proc.start()
        sent += produce([(b"key-%d" % k, b"after-%d" % k) for k in range(50)], idempotent)
        assert anomalies(consume_all(bootstrap, topic), sent, 0)["lost"] == 0
    finally:
        proc.kill()


@pytest.mark.long
def test_produce_and_fetch_go_on_during_a_long_cleaning(tmp_path):
    """The cleaner works in slices on the broker's event loop: while it cleans a log of
    tens of MB, single-record produces (acks=1) and fetches are answered without waiting
    for it. Latencies are printed; the bound asserted is loose (a busy machine)."""
    config = write_properties(tmp_path / "server.properties", BROKER_PROPS)
    with BrokerProcess(tmp_path / "data", config_file=config) as proc:
        bootstrap = proc.bootstrap_servers
        topic, probe = "big", "probe"
        create_topic(bootstrap, topic, {**TOPIC_CONFIG, "segment.bytes": str(4 << 20),
                                        "min.compaction.lag.ms": "3600000"})
        create_topic(bootstrap, probe, {})
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20,
                             "compression.type": "none"})
        for i in range(400_000):
            producer.produce(topic, key=b"key-%d" % (i % 100_000), value=b"v" * 100, partition=0)
            if i % 10_000 == 0:
                producer.poll(0)
                assert producer.flush(30) == 0
        assert producer.flush(30) == 0
        acked = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": 1})
        acked.produce(probe, key=b"k", value=b"connected", partition=0)  # connections and metadata first
        assert acked.flush(10) == 0
        admin = AdminClient({"bootstrap.servers": bootstrap})
        list(admin.incremental_alter_configs([ConfigResource(
            ConfigResource.Type.TOPIC, topic, incremental_configs=[ConfigEntry(
                "min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])]).values())[0].result(15)
        wait_for(lambda: any(f"Beginning cleaning of log {topic}-0" in line for line in proc.output),
                 what="the cleaning to begin")
        latencies = []
        deadline = time.monotonic() + 120
        while not any(f"cleaned log {topic}-0" in line for line in proc.output) and time.monotonic() < deadline:
            started = time.monotonic()
            acked.produce(probe, key=b"k", value=b"v", partition=0)
            assert acked.flush(10) == 0
            latencies.append(time.monotonic() - started)
        found = consume_all(bootstrap, probe)
        assert len(found) == len(latencies) + 1 and latencies, "produces answered during the cleaning"
        latencies.sort()
        print(f"{len(latencies)} produces during the cleaning: p50 {latencies[len(latencies) // 2] * 1000:.1f} ms, "
              f"p99 {latencies[int(len(latencies) * 0.99)] * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms")
        print("".join(line for line in proc.output if f"cleaned log {topic}-0" in line))
        assert latencies[-1] < 1.0
