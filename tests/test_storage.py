"""The storage layer: PartitionLog and LogSegment on real files in temporary directories.

Batches come from wire.records.build_batch, as a client would send them; every check
compares the log against an independent model (a linear scan, a brute-force search)
rather than against the log's own indexes.
"""

from __future__ import annotations

import errno
import os
import random
import struct
import time

import pytest

from wire.compression import GZIP, NONE
from wire.error_codes import ErrorCode
from wire.records import (HEADER_SIZE, LOG_APPEND_TIME_BIT, build_batch, decode_batch,
                          has_valid_crc, iter_batches, parse_header)

import broker.storage.segment as segment_module
import broker.replica.topics as topics_module
from broker.clock import SystemClock
from broker.config import BrokerConfig, LogConfig
from broker.errors import BrokerError
from broker.storage.log import PartitionLog
from broker.storage.producer_state import CACHED_BATCHES
from broker.storage.segment import segment_name
from tests.support.polling import wait_for
from tests.replicas import topic_manager

BASE_TS = 1_700_000_000_000
PID = 4242


# -- helpers -----------------------------------------------------------------------------

def make_batch(count=3, ts=BASE_TS, *, value_size=40, pid=-1, epoch=-1, seq=-1,
               compression=NONE, tag=0) -> bytes:
    """A client batch of `count` records; `ts` is one timestamp or one per record."""
    stamps = list(ts) if isinstance(ts, (list, tuple)) else [ts + i for i in range(count)]
    records = [(b"k%d" % tag, bytes([(tag + i) % 256]) * value_size, [("h", b"%d" % i)], stamps[i])
               for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       compression=compression)


class SteppedClock(SystemClock):
    """Wall time that moves only when a test moves it."""

    def __init__(self, now: int):
        self.now = now

    def wall_ms(self) -> int:
        return self.now


def append(log: PartitionLog, raw: bytes, leader_epoch: int = 0):
    """Append as a single broker's partition does: the high watermark follows."""
    buf = bytearray(raw)
    result = log.append(parse_header(buf), memoryview(buf), leader_epoch)
    log.update_high_watermark(log.log_end_offset)
    return result


def open_log(directory, config: LogConfig | None = None, recovery_point=0, **kwargs) -> PartitionLog:
    """The log as a single broker opens it: its partition's high watermark at the log end."""
    log = PartitionLog(str(directory), "t", 0, config or LogConfig(), recovery_point=recovery_point,
                       **kwargs)
    log.update_high_watermark(log.log_end_offset)
    return log


def abandon(log: PartitionLog) -> None:
    """Simulate a crash: close file descriptors without flushing indexes or snapshots."""
    for segment in log.segments:
        segment._file = None  # the last reference: its descriptor closes unflushed


def stored(log: PartitionLog) -> list[tuple[str, int, bytes]]:
    """(segment file, position, batch bytes) of every stored batch, by reading the files."""
    out = []
    for name in sorted(os.listdir(log.directory)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(log.directory, name), "rb") as f:
            data = f.read()
        position = 0
        for header, view in iter_batches(data):
            out.append((name, position, bytes(view)))
            position += header.size
        assert position == len(data), f"{name} ends with {len(data) - position} stray bytes"
    return out


def all_records(log: PartitionLog) -> list[tuple[int, int]]:
    """(offset, timestamp) of every stored record, by decoding every batch."""
    return [(r.offset, r.timestamp) for _, _, batch in stored(log)
            for r in decode_batch(batch, 1 << 24)]


def region_bytes(region) -> bytes:
    return b"" if region is None else region.read()


def read_index(path: str, fmt: str) -> list[tuple[int, int]]:
    entry = struct.Struct(fmt)
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % entry.size == 0
    return list(entry.iter_unpack(data))


def fill(log, batches=40, count=3, value_size=40, ts=BASE_TS):
    raws = []
    for i in range(batches):
        raw = make_batch(count, ts + i * 10, value_size=value_size, tag=i)
        raws.append(raw)
        append(log, raw)
    return raws


def check_consistent(log: PartitionLog) -> None:
    """The files, the segment list and the positions tell one story."""
    batches = stored(log)
    names = sorted(n for n in os.listdir(log.directory) if n.endswith(".log"))
    assert names == [segment_name(s.base_offset, ".log") for s in log.segments if os.path.exists(s.path)]
    expected = log.segments[0].base_offset
    for _, _, batch in batches:
        header = parse_header(batch)
        assert has_valid_crc(batch)
        assert header.base_offset == expected, "offsets must be contiguous"
        expected = header.last_offset + 1
    assert log.log_end_offset == expected
    for segment, following in zip(log.segments, log.segments[1:]):
        assert segment.next_offset == following.base_offset
    # Every offset is found through the index at the batch that holds it.
    for _, position, batch in batches:
        header = parse_header(batch)
        for offset in {header.base_offset, header.last_offset}:
            region = log.read(offset, 1 << 20, log.log_end_offset, True)
            assert region_bytes(region)[:header.size] == batch


# -- segment files and rolling -----------------------------------------------------------

def test_segment_files_are_named_by_base_offset(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1200))
    fill(log, batches=30)
    log.flush()  # the leader epochs' file is written with the recovery point
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4 and bases[0] == 0
    names = set(os.listdir(tmp_path))
    for base in bases:
        stem = f"{base:020d}"
        assert len(stem) == 20
        assert stem + ".log" in names
        if base != bases[-1]:  # sealed segments have both indexes on disk
            assert {stem + ".index", stem + ".timeindex"} <= names
    assert "leader-epoch-checkpoint" in names
    for name in names - {"leader-epoch-checkpoint"}:
        stem, _, suffix = name.partition(".")
        assert suffix in ("log", "index", "timeindex", "snapshot") and len(stem) == 20
        assert int(stem) in bases
    check_consistent(log)
    log.close()


def test_a_new_partition_writes_nothing_until_its_first_batch(tmp_path):
    """A partition being created makes its directory only; its first batch makes only
    its `.log` (the epoch history is written when it is closed or flushed), and it
    reopens like any other log. A directory that already holds a log (a stray left by a
    crash) is loaded, not taken as empty."""
    directory = tmp_path / "t-0"
    log = open_log(directory, recovery_point=None, new=True)
    assert os.listdir(directory) == []
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    append(log, make_batch(count=3), leader_epoch=4)
    assert os.listdir(directory) == ["00000000000000000000.log"]
    log.close()
    assert "leader-epoch-checkpoint" in os.listdir(directory)
    reopened = open_log(directory, recovery_point=None)
    assert reopened.log_end_offset == 3 and reopened.epochs.entries == [(4, 0)]
    reopened.close()
    again = open_log(directory, recovery_point=None, new=True)
    assert again.log_end_offset == 3 and all_records(again) == all_records(reopened)
    check_consistent(again)
    again.close()


def test_roll_by_size(tmp_path):
    segment_bytes = 1500
    log = open_log(tmp_path, LogConfig(segment_bytes=segment_bytes))
    raws = fill(log, batches=40)
    batch_size = len(raws[0])
    assert len(log.segments) > 5
    for segment in log.segments:
        assert segment.size <= segment_bytes
    for segment in log.segments[:-1]:  # rolled only when the next batch would not fit
        assert segment.size + batch_size > segment_bytes
        assert os.path.getsize(segment.path) == segment.size
    # The next segment starts exactly where the previous one ended.
    for segment, following in zip(log.segments, log.segments[1:]):
        assert segment.next_offset == following.base_offset
    # A batch larger than segment.bytes still goes in, alone in its segment.
    big = make_batch(2, value_size=segment_bytes)
    result = append(log, big)
    assert log.segments[-1].base_offset == result.first_offset
    assert log.segments[-1].size == len(big)
    append(log, make_batch())
    assert log.segments[-1].base_offset == result.last_offset + 1
    check_consistent(log)
    log.close()


def test_roll_by_time(tmp_path, monkeypatch):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path, LogConfig(segment_ms=1000), clock=clock)
    append(log, make_batch())
    clock.now += 999
    append(log, make_batch())
    assert len(log.segments) == 1
    clock.now += 1
    append(log, make_batch())
    assert [s.base_offset for s in log.segments] == [0, 6]
    clock.now += 500
    append(log, make_batch())
    assert len(log.segments) == 2
    clock.now += 600  # 1100 ms after the second segment was created
    append(log, make_batch())
    assert [s.base_offset for s in log.segments] == [0, 6, 12]
    check_consistent(log)
    log.close()


def test_roll_by_time_real_clock(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_ms=1))
    append(log, make_batch())
    time.sleep(0.005)
    append(log, make_batch())
    assert len(log.segments) == 2
    log.close()


# -- indexes -----------------------------------------------------------------------------

@pytest.mark.parametrize("interval", [1, 300, 1000, 4096])
def test_sparse_offset_index(tmp_path, interval):
    rng = random.Random(interval)
    log = open_log(tmp_path, LogConfig(segment_bytes=20_000, index_interval_bytes=interval))
    for i in range(120):
        append(log, make_batch(rng.randint(1, 6), BASE_TS + i, value_size=rng.randint(1, 120), tag=i))
    log.close()
    batches = stored(log)
    max_batch = max(len(b) for _, _, b in batches)
    for segment in log.segments:
        positions = {p: parse_header(b) for name, p, b in batches if name == os.path.basename(segment.path)}
        entries = read_index(segment.offset_index.path, ">ii")
        assert entries[0] == (0, 0)
        last_position = -1
        for relative, position in entries:
            assert position in positions, "index entries point at batch starts"
            assert positions[position].base_offset == segment.base_offset + relative
            if last_position >= 0:  # about one entry per index interval
                gap = position - last_position
                assert interval <= gap < interval + max_batch
            last_position = position
        # No long stretch without an entry at the end either.
        assert segment.size - last_position < interval + 2 * max_batch
        expected_entries = segment.size / max(interval, 1)
        assert len(entries) <= expected_entries + 1
        # Time index: timestamps strictly ascending, offsets inside the segment.
        times = read_index(segment.time_index.path, ">qi")
        assert times and all(a[0] < b[0] for a, b in zip(times, times[1:]))
        assert all(0 <= rel < segment.next_offset - segment.base_offset for _, rel in times)


def test_index_lookups_match_a_linear_scan(tmp_path):
    rng = random.Random(7)
    log = open_log(tmp_path, LogConfig(segment_bytes=5000, index_interval_bytes=700))
    for i in range(200):
        append(log, make_batch(rng.randint(1, 8), BASE_TS + i, value_size=rng.randint(0, 100), tag=i))
    batches = [(name, position, parse_header(b), b) for name, position, b in stored(log)]

    def scan(offset):
        for name, position, header, raw in batches:
            if header.base_offset <= offset <= header.last_offset:
                return name, position, raw
        raise AssertionError(offset)

    for offset in [0, log.log_end_offset - 1] + [rng.randrange(log.log_end_offset) for _ in range(300)]:
        name, position, raw = scan(offset)
        segment = log.segments[log._segment_index(offset)]
        assert os.path.basename(segment.path) == name
        found, header = segment.position_of(offset)
        assert found == position and header.base_offset == parse_header(raw).base_offset
        index_offset, index_position = segment.offset_index.lookup(offset)
        assert index_offset <= offset and index_position <= position
        region = log.read(offset, len(raw), log.log_end_offset, False)
        assert region_bytes(region) == raw
    log.close()


def test_stored_batches_are_byte_identical(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=3000))
    raws = []
    for i in range(30):
        codec = GZIP if i % 3 == 0 else NONE
        raw = make_batch(i % 5 + 1, BASE_TS + i * 3, tag=i, compression=codec)
        raws.append(raw)
        result = append(log, raw, leader_epoch=7)
        assert result.last_offset - result.first_offset == i % 5
    batches = stored(log)
    assert len(batches) == len(raws)
    offset = 0
    for raw, (_, _, kept) in zip(raws, batches):
        assert len(kept) == len(raw)
        assert struct.unpack(">q", kept[:8])[0] == offset            # baseOffset assigned
        assert kept[8:12] == raw[8:12]                               # batchLength
        assert struct.unpack(">i", kept[12:16])[0] == 7              # partitionLeaderEpoch
        assert kept[16:] == raw[16:]                                 # magic, CRC and the rest
        assert has_valid_crc(kept)
        offset += parse_header(raw).record_count
    log.close()


# -- reading -----------------------------------------------------------------------------

def test_read_limits(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=100_000))
    raws = fill(log, batches=10)
    size = len(raws[0])
    hw = log.log_end_offset
    whole = b"".join(b for _, _, b in stored(log))
    # From an offset in the middle of a batch: the whole batch holding it.
    assert region_bytes(log.read(4, 10 * size, hw, False)) == whole[size:]
    # max_bytes cuts the result at the last batch boundary within it, never inside a batch.
    assert region_bytes(log.read(0, size * 2 + 10, hw, False)) == whole[:size * 2]
    assert region_bytes(log.read(0, size * 2, hw, False)) == whole[:size * 2]
    assert region_bytes(log.read(3, size * 2 - 1, hw, False)) == whole[size:size * 2]
    assert log.read(0, 10, hw, False) is None
    # min_one_batch: a first batch larger than max_bytes comes whole, and only it.
    assert region_bytes(log.read(0, 10, hw, True)) == whole[:size]
    assert region_bytes(log.read(3, 0, hw, True)) == whole[size:2 * size]
    # max_bytes 0 without min_one_batch: nothing.
    assert log.read(0, 0, hw, False) is None
    # upper_offset stops at the batch holding it (the high watermark is a boundary).
    assert region_bytes(log.read(0, 1 << 20, 9, False)) == whole[:3 * size]
    assert region_bytes(log.read(0, 10, 9, True)) == whole[:size]
    assert log.read(9, 1 << 20, 9, True) is None
    # At the log end: nothing; past it or below the start: OFFSET_OUT_OF_RANGE.
    assert log.read(log.log_end_offset, 1 << 20, hw, True) is None
    for offset in (-1, log.log_end_offset + 1):
        with pytest.raises(BrokerError) as info:
            log.read(offset, 1 << 20, hw, True)
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()


@pytest.mark.parametrize("index_interval", [1, 300, 4096])
def test_read_returns_the_most_whole_batches_that_fit(tmp_path, index_interval):
    """Batches of varied sizes, indexed densely or sparsely: for every start and limit the
    result is the longest run of whole batches within the limit (the first batch alone
    when it is larger and min_one_batch is set), never a partial batch."""
    log = open_log(tmp_path, LogConfig(segment_bytes=1 << 20, index_interval_bytes=index_interval))
    raws = [make_batch(1 + i % 4, BASE_TS + i, value_size=(i * 37) % 150, tag=i) for i in range(30)]
    for raw in raws:
        append(log, raw)
    stored_batches = [b for _, _, b in stored(log)]
    first_offsets = [sum(1 + j % 4 for j in range(i)) for i in range(30)]
    hw = log.log_end_offset
    for first in range(0, 30, 3):
        sizes = [len(b) for b in stored_batches[first:]]
        for limit in range(0, sum(sizes[:6]) + 2, 23):
            fitting, used = 0, 0
            while fitting < len(sizes) and used + sizes[fitting] <= limit:
                used += sizes[fitting]
                fitting += 1
            expect = b"".join(stored_batches[first:first + fitting])
            assert region_bytes(log.read(first_offsets[first], limit, hw, False)) == expect
            expect_one = expect or stored_batches[first]
            assert region_bytes(log.read(first_offsets[first], limit, hw, True)) == expect_one
    log.close()


def test_read_stays_in_one_segment(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1000))
    fill(log, batches=20)
    hw = log.log_end_offset
    for segment in log.segments[:-1]:
        with open(segment.path, "rb") as f:
            data = f.read()
        assert region_bytes(log.read(segment.base_offset, 1 << 20, hw, False)) == data
        # The last offset of the segment: its last batch only, not the next segment.
        last = log.read(segment.next_offset - 1, 1 << 20, hw, False)
        assert data.endswith(region_bytes(last))
    log.close()


# -- timestamps --------------------------------------------------------------------------

def brute_force_offset_for(records, target):
    for offset, ts in sorted(records):
        if ts >= target:
            return offset, ts
    return None


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_offset_for_timestamp_matches_brute_force(tmp_path, seed):
    rng = random.Random(seed)
    log = open_log(tmp_path, LogConfig(segment_bytes=4000, index_interval_bytes=rng.choice([1, 500, 2000])))
    for i in range(150):
        count = rng.randint(1, 6)
        # Out of order within a batch and across batches; a trend upwards with noise.
        stamps = [BASE_TS + i * 100 + rng.randint(-3000, 3000) for _ in range(count)]
        append(log, make_batch(count, stamps, value_size=rng.randint(1, 60), tag=i))
    records = all_records(log)
    timestamps = sorted({ts for _, ts in records})
    targets = [0, timestamps[0], timestamps[-1], timestamps[-1] + 1]
    targets += [rng.choice(timestamps) + rng.choice((-1, 0, 1)) for _ in range(200)]
    for target in targets:
        assert log.offset_for_timestamp(target) == brute_force_offset_for(records, target), target
    # After a clean reopen, answers come from the indexes on disk.
    log.close()
    log = open_log(tmp_path, log.config, recovery_point=None)
    for target in targets[:60]:
        assert log.offset_for_timestamp(target) == brute_force_offset_for(records, target), target
    log.close()


def test_max_timestamp(tmp_path):
    rng = random.Random(5)
    log = open_log(tmp_path, LogConfig(segment_bytes=2000, index_interval_bytes=600))
    assert log.max_timestamp() is None
    for i in range(60):
        stamps = [BASE_TS + rng.randint(0, 100_000) for _ in range(rng.randint(1, 4))]
        append(log, make_batch(len(stamps), stamps, tag=i))
    records = all_records(log)
    top = max(ts for _, ts in records)
    first = min(o for o, ts in records if ts == top)
    assert log.max_timestamp() == (top, first)
    # The maximum may sit in an older segment than the active one.
    append(log, make_batch(1, BASE_TS))
    assert log.max_timestamp() == (top, first)
    log.close()
    reopened = open_log(tmp_path, log.config, recovery_point=None)
    assert reopened.max_timestamp() == (top, first)
    reopened.close()


def test_log_append_time(tmp_path, monkeypatch):
    clock = SteppedClock(BASE_TS + 123_456)
    log = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime", segment_bytes=1000),
                   clock=clock)
    produced = []
    for i in range(12):
        clock.now += 10
        raw = make_batch(3, BASE_TS - 50_000 + i, tag=i)  # old CreateTime stamps
        produced.append(raw)
        result = append(log, raw)
        assert result.log_append_time == clock.now
    for i, (_, _, batch) in enumerate(stored(log)):
        header = parse_header(batch)
        assert header.attributes & LOG_APPEND_TIME_BIT
        assert header.max_timestamp == BASE_TS + 123_456 + 10 * (i + 1)
        assert has_valid_crc(batch)
        assert {r.timestamp for r in decode_batch(batch, 1 << 20)} == {header.max_timestamp}
        assert batch[61:] == produced[i][61:]  # the records themselves are untouched
    records = all_records(log)
    for target in (0, BASE_TS + 123_466, BASE_TS + 123_467, BASE_TS + 123_530, BASE_TS + 999_999):
        assert log.offset_for_timestamp(target) == brute_force_offset_for(records, target)
    assert log.max_timestamp() == (BASE_TS + 123_576, 33)
    log.close()


def test_flush_policy_moves_the_recovery_point(tmp_path, monkeypatch):
    clock = SteppedClock(BASE_TS)
    log = open_log(tmp_path, LogConfig(flush_messages=5), clock=clock)
    append(log, make_batch(3))
    assert log.recovery_point == 0
    append(log, make_batch(3))  # 6 unflushed messages >= 5
    assert log.recovery_point == log.log_end_offset == 6
    log.close()
    log = open_log(tmp_path / "by-time", LogConfig(flush_ms=1000), clock=clock)
    append(log, make_batch(3))
    assert log.recovery_point == 0
    clock.now += 1000
    log.flush_if_due()  # what the broker's periodic job calls
    assert log.recovery_point == 3
    log.close()


# -- recovery ----------------------------------------------------------------------------

def build_log(path, batches=40, **config):
    config.setdefault("segment_bytes", 2000)
    config.setdefault("index_interval_bytes", 300)
    log = open_log(path, LogConfig(**config))
    fill(log, batches=batches)
    return log


def test_torn_tail_is_truncated(tmp_path):
    log = build_log(tmp_path)
    before = stored(log)
    abandon(log)
    active = log.segments[-1].path
    last_name, last_position, last_batch = before[-1]
    assert last_name == os.path.basename(active)
    os.truncate(active, last_position + len(last_batch) // 2)  # torn in the middle of a batch

    log = open_log(tmp_path, log.config, recovery_point=0)
    assert stored(log) == before[:-1]
    assert log.log_end_offset == parse_header(last_batch).base_offset
    assert os.path.getsize(active) == last_position
    check_consistent(log)
    result = append(log, make_batch())
    assert result.first_offset == parse_header(last_batch).base_offset
    check_consistent(log)
    log.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 5, b"\x00" * 200, os.urandom(300),
                                     b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x00" * 100])
def test_garbage_after_the_tail_is_dropped(tmp_path, garbage):
    log = build_log(tmp_path)
    before = stored(log)
    end = log.log_end_offset
    abandon(log)
    with open(log.segments[-1].path, "ab") as f:
        f.write(garbage)
    log = open_log(tmp_path, log.config, recovery_point=log.recovery_point)
    assert stored(log) == before
    assert log.log_end_offset == end
    check_consistent(log)
    log.close()


def test_corrupted_crc_in_the_middle_truncates_there(tmp_path):
    log = build_log(tmp_path)
    assert len(log.segments) >= 5
    before = stored(log)
    abandon(log)
    victim_segment = log.segments[2]
    victims = [(p, b) for n, p, b in before if n == os.path.basename(victim_segment.path)]
    position, batch = victims[len(victims) // 2]
    with open(victim_segment.path, "r+b") as f:
        f.seek(position + HEADER_SIZE + 5)  # a byte inside the records: CRC mismatch
        byte = f.read(1)
        f.seek(position + HEADER_SIZE + 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    later = [s.path for s in log.segments[3:]]

    log = open_log(tmp_path, log.config, recovery_point=0)
    bad_offset = parse_header(batch).base_offset
    assert log.log_end_offset == bad_offset
    assert len(log.segments) == 3
    assert os.path.getsize(victim_segment.path) == position
    for path in later:  # later segments and their indexes are gone
        stem = path[:-len(".log")]
        for suffix in (".log", ".index", ".timeindex"):
            assert not os.path.exists(stem + suffix)
    kept = [b for _, _, b in before if parse_header(b).base_offset < bad_offset]
    assert [b for _, _, b in stored(log)] == kept
    check_consistent(log)
    assert append(log, make_batch()).first_offset == bad_offset
    check_consistent(log)
    log.close()


def test_recovery_starts_at_the_recovery_point(tmp_path, monkeypatch):
    log = build_log(tmp_path)
    active_base = log.segments[-1].base_offset
    settled(log, active_base)
    tails = {header.base_offset for segment in log.segments[:-1]
             for _, header in segment.batches_from(segment.offset_index.last()[1])}
    abandon(log)
    checked = []
    real = segment_module.has_valid_crc
    monkeypatch.setattr(segment_module, "has_valid_crc", lambda b: checked.append(parse_header(b).base_offset) or real(b))
    log = open_log(tmp_path, log.config, recovery_point=log.recovery_point)
    assert checked and max(checked) >= active_base
    # Sealed segments were flushed: only their tails after the last index entry are re-read.
    assert {offset for offset in checked if offset < active_base} <= tails
    log.close()


def settled(log: PartitionLog, recovery_point: int) -> None:
    """Until the rolled segments' fsyncs (in a thread) let the recovery point reach `recovery_point`."""
    wait_for(lambda: log.settle_rolled_syncs() or log.recovery_point == recovery_point, 10,
             f"the recovery point to reach {recovery_point}, not {log.recovery_point}")


def test_a_roll_leaves_the_fsync_of_the_segment_it_seals_to_a_thread(tmp_path):
    """Kafka flushes a rolled segment in the background. Here the roll did, in the event
    loop: some 0.3 s for a gigabyte's segment, during which a new replica copying one
    (bench.reassignment) answered its other partitions' leaders nothing. The recovery
    point moves past the rolled segment once the thread has flushed it."""
    log = build_log(tmp_path)
    log.flush()
    flushed = log.recovery_point
    append(log, make_batch(3, BASE_TS))
    base = log.log_end_offset
    log.roll()
    assert log.segments[-1].base_offset == base
    assert log.recovery_point == flushed < base  # nothing flushed by the roll itself
    settled(log, base)
    log.close()


@pytest.mark.parametrize("damage", ["delete", "truncate", "garbage", "zero"])
def test_damaged_indexes_are_rebuilt(tmp_path, damage):
    log = build_log(tmp_path)
    log.close()
    originals = {}
    for segment in log.segments:
        for index in (segment.offset_index, segment.time_index):
            with open(index.path, "rb") as f:
                originals[index.path] = f.read()
    victim = log.segments[1]
    for path in (victim.offset_index.path, victim.time_index.path):
        if damage == "delete":
            os.unlink(path)
        elif damage == "truncate":
            os.truncate(path, os.path.getsize(path) - 3)
        elif damage == "garbage":
            with open(path, "ab") as f:
                f.write(b"\x7f" * 24)
        else:
            with open(path, "r+b") as f:
                f.write(b"\x00" * os.path.getsize(path))
    # An unclean start re-validates everything from the recovery point and rebuilds.
    log = open_log(tmp_path, log.config, recovery_point=0)
    for path, data in originals.items():
        with open(path, "rb") as f:
            assert f.read() == data, path
    check_consistent(log)
    log.close()


@pytest.mark.parametrize("damage", ["delete", "truncate", "empty"])
def test_damaged_indexes_on_a_clean_start(tmp_path, damage):
    """Index files missing or torn although the shutdown was clean: detected from their
    sizes, rebuilt, and lookups stay right."""
    log = build_log(tmp_path)
    records = all_records(log)
    log.close()
    victim = log.segments[1]
    originals = {}
    for path in (victim.offset_index.path, victim.time_index.path):
        with open(path, "rb") as f:
            originals[path] = f.read()
        if damage == "delete":
            os.unlink(path)
        else:
            os.truncate(path, 0 if damage == "empty" else os.path.getsize(path) - 1)
    log = open_log(tmp_path, log.config, recovery_point=None)
    for path, data in originals.items():
        with open(path, "rb") as f:
            assert f.read() == data, path
    check_consistent(log)
    for _, ts in records[::5]:
        assert log.offset_for_timestamp(ts) == brute_force_offset_for(records, ts)
    assert log.max_timestamp() == (records[-1][1], records[-1][0])
    log.close()


def test_clean_reopen_reads_only_segment_tails(tmp_path, monkeypatch):
    """After a clean shutdown only each segment's batches from its last index entry are
    re-checked (headers and CRCs), a bounded read whatever the segment sizes."""
    log = build_log(tmp_path, batches=60, index_interval_bytes=400)
    end, sizes = log.log_end_offset, [s.size for s in log.segments]
    batch_size = min(len(batch) for _, _, batch in stored(log))
    largest = max(len(batch) for _, _, batch in stored(log))
    log.close()

    crc_checks, reads, opened = [], [], []
    real_pread, real_open = os.pread, os.open
    monkeypatch.setattr(segment_module, "has_valid_crc", lambda b: crc_checks.append(1) or True)
    monkeypatch.setattr(os, "pread", lambda fd, n, pos: reads.append(n) or real_pread(fd, n, pos))
    monkeypatch.setattr(os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    log = open_log(tmp_path, log.config, recovery_point=None)
    monkeypatch.undo()

    per_tail = 400 // batch_size + 2  # batches from the last index entry to the end
    assert 0 < len(crc_checks) <= per_tail * len(sizes)
    assert len(reads) <= 2 * per_tail * len(sizes)
    assert sum(reads) <= per_tail * len(sizes) * (HEADER_SIZE + largest), "tails only"
    opened_logs = [p for p in opened if p.endswith(".log")]
    assert sorted(opened_logs) == sorted(set(opened_logs)), "each segment opened once at most"
    assert log.log_end_offset == end and [s.size for s in log.segments] == sizes
    check_consistent(log)
    log.close()


def test_unclean_reopen_without_damage_keeps_everything(tmp_path):
    log = build_log(tmp_path)
    before, end = stored(log), log.log_end_offset
    abandon(log)  # index entries still pending in memory are lost
    log = open_log(tmp_path, log.config, recovery_point=0)
    assert stored(log) == before and log.log_end_offset == end
    check_consistent(log)
    log.close()


# -- idempotent producers ----------------------------------------------------------------

def idempotent(seq, count=2, epoch=0, pid=PID, tag=0):
    return make_batch(count, pid=pid, epoch=epoch, seq=seq, tag=tag)


def produce_sequence(log, batches=8, count=2, epoch=0):
    """`batches` consecutive idempotent batches; returns [(seq, raw, first, last)]."""
    out = []
    for i in range(batches):
        raw = idempotent(i * count, count, epoch, tag=i)
        result = append(log, raw)
        assert not result.duplicate
        out.append((i * count, raw, result.first_offset, result.last_offset))
    return out


def expect_error(log, raw, code):
    end = log.log_end_offset
    with pytest.raises(BrokerError) as info:
        append(log, raw)
    assert info.value.code == code
    assert log.log_end_offset == end


def check_duplicates(log, sent):
    end = log.log_end_offset
    for seq, raw, first, last in sent[-CACHED_BATCHES:]:
        result = append(log, raw)
        assert result.duplicate and (result.first_offset, result.last_offset) == (first, last)
    assert log.log_end_offset == end


def test_idempotent_duplicates_and_errors(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=600))
    append(log, make_batch())  # a non-idempotent batch first: offsets do not start at 0
    sent = produce_sequence(log, batches=8)
    check_duplicates(log, sent)
    # Older than the last five: not recognised, and out of sequence.
    expect_error(log, sent[-CACHED_BATCHES - 1][1], ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    next_seq = sent[-1][0] + 2
    expect_error(log, idempotent(next_seq + 2), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)  # a gap
    expect_error(log, idempotent(3, pid=PID + 1), ErrorCode.UNKNOWN_PRODUCER_ID)
    # The right next sequence is accepted.
    assert append(log, idempotent(next_seq)).first_offset == sent[-1][3] + 1
    # A new epoch must start at 0; then the old epoch is fenced.
    expect_error(log, idempotent(5, epoch=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    first_new = append(log, idempotent(0, epoch=1)).first_offset
    expect_error(log, idempotent(next_seq + 2, epoch=0), ErrorCode.INVALID_PRODUCER_EPOCH)
    # After the epoch bump, a duplicate of the new epoch's first batch is recognised.
    again = append(log, idempotent(0, epoch=1))
    assert again.duplicate and again.first_offset == first_new
    # A new producer starting at 0 is accepted; other producers are independent.
    assert not append(log, idempotent(0, pid=PID + 1)).duplicate
    assert not append(log, idempotent(2, epoch=1)).duplicate
    check_consistent(log)
    log.close()


def test_idempotent_state_survives_a_clean_reopen(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=700))
    sent = produce_sequence(log, batches=12)
    log.close()
    log = open_log(tmp_path, log.config, recovery_point=None)
    check_duplicates(log, sent)
    expect_error(log, idempotent(sent[-1][0] + 4), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert not append(log, idempotent(sent[-1][0] + 2)).duplicate
    log.close()


@pytest.mark.parametrize("snapshots", ["kept", "deleted"])
def test_idempotent_state_survives_an_unclean_reopen(tmp_path, snapshots):
    log = open_log(tmp_path, LogConfig(segment_bytes=450))
    sent = produce_sequence(log, batches=12)
    assert len(log.segments) > 3
    recovery_point = log.recovery_point
    abandon(log)  # the snapshot at the log end is never written
    if snapshots == "deleted":
        for name in os.listdir(tmp_path):
            if name.endswith(".snapshot"):
                os.unlink(tmp_path / name)
    assert not os.path.exists(tmp_path / f"{log.log_end_offset:020d}.snapshot")
    log = open_log(tmp_path, log.config, recovery_point=recovery_point)
    check_duplicates(log, sent)
    expect_error(log, idempotent(sent[-1][0] + 4), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    assert not append(log, idempotent(sent[-1][0] + 2)).duplicate
    log.close()


def test_producer_state_after_truncation(tmp_path):
    """Batches lost in a torn tail are forgotten: the producer may resend them."""
    log = open_log(tmp_path, LogConfig(segment_bytes=100_000))
    sent = produce_sequence(log, batches=6)
    abandon(log)
    seq, raw, first, _ = sent[-1]
    os.truncate(log.segments[-1].path, log.segments[-1].size - 5)
    log = open_log(tmp_path, log.config, recovery_point=0)
    assert log.log_end_offset == first
    result = append(log, raw)
    assert not result.duplicate and result.first_offset == first
    check_duplicates(log, sent)
    log.close()


@pytest.mark.parametrize("grow", [False, True])
def test_partitions_that_cannot_all_be_opened_are_not_created(tmp_path, monkeypatch, grow):
    """Running out of file descriptors half way through thousands of new partitions is
    KAFKA_STORAGE_ERROR, and the logs opened so far are gone (they held files open)."""
    topics = topic_manager(BrokerConfig(data_dir=str(tmp_path)))
    topics.load()
    if grow:
        topics.create("t", 1, {})
    opened = []

    def open_until_the_third(directory, *args, **kwargs):
        if len(opened) == 2:
            os.makedirs(directory)
            raise OSError(errno.EMFILE, "Too many open files")
        opened.append(PartitionLog(directory, *args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(topics_module, "PartitionLog", open_until_the_third)
    with pytest.raises(BrokerError) as info:
        topics.add_partitions("t", 5) if grow else topics.create("t", 5, {})
    assert info.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert "Too many open files" in str(info.value)
    assert len(topics.topics["t"].partitions) == 1 if grow else "t" not in topics.topics
    left = {name for name in os.listdir(tmp_path) if name.startswith("t-")}
    assert left == ({"t-0"} if grow else set())
    assert all(not os.path.exists(log.directory) for log in opened)
    topics.close()
