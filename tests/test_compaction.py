"""Log compaction (broker/storage/cleaner.py): what a cleaning keeps, and what clients see.

The first half drives PartitionLog and LogCleaner directly (a stepped wall clock instead
of sleeping past delete.retention.ms); the second runs the real broker process with
small segments and a fast cleaner backoff, and watches through confluent-kafka, kcat
and the data directory.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
import uuid

import pytest

from wire.error_codes import ErrorCode
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, build_batch, decode_batch, decode_control_record,
                          iter_batches)

from broker.config import BrokerConfig, LogConfig, parse_topic_configs
from broker.storage.cleaner import CLEANER_CHECKPOINT, LogCleaner, OffsetMap
from broker.storage.checkpoint import read_checkpoint
from broker.storage.log import PartitionLog
from broker.storage.segment import LogSegment
from sluice.broker_process import BrokerProcess
from sluice.polling import wait_for
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
    committed = transactional(log, [(b"c-%d" % i, b"committed") for i in range(5)], 0)
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
    real_delete = LogSegment.delete

    def delete_then_stop(segment):
        if segment.path.endswith(".log"):
            if deleted:
                raise KeyboardInterrupt("stopped mid-swap")
            deleted.append(segment.base_offset)
        real_delete(segment)

    monkeypatch.setattr(LogSegment, "delete", delete_then_stop)
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


def test_a_fetch_holding_a_replaced_segment_reads_its_old_bytes(tmp_path):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path / "t-0", COMPACT, clock=clock)
    fill_keys(log, 40, 4)
    region = log.read(0, 1 << 20, log.high_watermark, True)
    old = region.read()
    assert Cleaner(log, clock).clean()
    assert region.read() == old, "the region's descriptor still reads the deleted file"
    assert log.read(0, 1 << 20, log.high_watermark, True).read() != old


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
