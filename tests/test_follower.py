"""The follower side of replication: a follower's log takes the leader's batches byte for
byte, its high watermark and log start offset follow the leader's, it cuts a divergent
tail by Kafka's truncation rule, and only the leader serves produces and reads.

Leaders and followers are real `Partition`s over real files in temporary directories;
"replication" hands the follower exactly the bytes the leader's `read_as_follower`
returns (as a Fetch response would carry them, cut at various sizes, mid-batch
included) and reports the follower's position back as its next fetch would. The last
test but one runs the real broker in this process and makes one of its partitions a
follower while requests wait on it; the last runs a real `ReplicaFetcher` against a broker
process.
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from wire.compression import GZIP, LZ4
from wire.error_codes import ErrorCode
from wire.messages import DELETE_RECORDS, FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, PRODUCE
from wire.protocol import decode_response
from wire.records import (HEADER_SIZE, LOG_APPEND_TIME_BIT, build_batch, iter_batches, parse_header,
                          set_base_offset)

from broker.clock import SystemClock
from broker.config import BrokerConfig, LogConfig
from broker.embedded import EmbeddedBroker
from broker.errors import BrokerError
from broker.quota import Quota
from broker.replica.delayed import DelayedOperations
from broker.replica.fetcher import ReplicaFetcher
from broker.replica.partition import Partition
from broker.storage.log import PartitionLog
from tests.test_broker_failures import connect, frame, recv_frame, roundtrip
from tests.support.polling import wait_for
from tests.test_partition import SteppedClock, _fetch, _on_loop, _produce
from tests.test_metrics import metrics_port, scrape, start_broker, value
from tests.test_storage import BASE_TS, make_batch
from sluice_client import Client, NewTopic

pytestmark = pytest.mark.timeout(120)

LAG_MS = 10_000
LEADER, FOLLOWER = 0, 1
PID, TXN_PID, OTHER_TXN_PID = 4242, 7, 8


def open_replica(directory, local_id: int, config: LogConfig, clock, high_watermark: int = 0,
                 recovery_point: int | None = None) -> Partition:
    log = PartitionLog(str(directory), "t", 0, config, recovery_point=recovery_point,
                       high_watermark=high_watermark, clock=clock)
    return Partition(log, local_id, DelayedOperations(clock), clock, LAG_MS)


def leader_and_follower(tmp_path, config: LogConfig, clock=None, epoch: int = 1):
    clock = clock or SteppedClock()
    leader = open_replica(tmp_path / "leader", LEADER, config, clock)
    follower = open_replica(tmp_path / "follower", FOLLOWER, config, clock)
    leader.make_leader(epoch, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    assert follower.make_follower(LEADER, epoch, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    return leader, follower


def produce(partition: Partition, raw: bytes):
    batch = bytearray(raw)
    return partition.append_as_leader(parse_header(batch), memoryview(batch), 1)


def replicate(leader: Partition, follower: Partition, cuts=(1 << 20,)) -> int:
    """Fetch from the leader until the follower has its whole log; each response is cut
    after the next of `cuts` bytes (cycled), so responses may end inside a batch.
    Returns how many fetches it took."""
    rounds = 0
    for rounds in range(1, 10_001):
        leader.update_follower(follower.local_id, follower.log_end_offset)  # the fetch's position
        if follower.log_end_offset == leader.log_end_offset and \
                follower.high_watermark == leader.high_watermark:
            return rounds
        region = leader.read_as_follower(follower.log_end_offset, 1 << 20, True)
        data = b"" if region is None else region.read()
        cut = data[:cuts[rounds % len(cuts)]]
        if cut and follower.append_as_follower(cut, leader.high_watermark, leader.log_start_offset) == 0:
            # Shorter than its first batch: the leader's response was cut too short to
            # hold one; the next fetch is answered in full, as a larger limit would be.
            follower.append_as_follower(data, leader.high_watermark, leader.log_start_offset)
        elif not cut:
            follower.append_as_follower(b"", leader.high_watermark, leader.log_start_offset)
    raise AssertionError(f"not replicated after {rounds} fetches")


def close(*partitions: Partition) -> None:
    for partition in partitions:
        partition.log.close()


def files(directory) -> dict[str, bytes]:
    """Every segment and index file of a log directory, by name."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith((".log", ".index", ".timeindex", ".txnindex")):
            with open(os.path.join(directory, name), "rb") as f:
                out[name] = f.read()
    return out


def log_bytes(log: PartitionLog) -> bytes:
    return b"".join(s.region(0, s.size).read() for s in log.segments)


def assert_same_log(leader: Partition, follower: Partition, same_segments: bool = True) -> None:
    """The same bytes (in the same segment and index files with `same_segments`; a
    follower that truncated may have rolled elsewhere), the same epoch history, producer
    state, positions and aborted transactions."""
    a, b = leader.log, follower.log
    assert log_bytes(a) == log_bytes(b)
    if same_segments:
        assert [s.base_offset for s in a.segments] == [s.base_offset for s in b.segments]
        for segment in a.segments + b.segments:
            segment.seal()  # the active one's time index gets its maximum, as a restart does
        assert files(a.directory) == files(b.directory)
    assert a.epochs.entries == b.epochs.entries
    assert a.producer_state.producers == b.producer_state.producers
    assert a.producer_state.ongoing == b.producer_state.ongoing
    assert (a.log_start_offset, a.log_end_offset, a.high_watermark, a.last_stable_offset) == \
           (b.log_start_offset, b.log_end_offset, b.high_watermark, b.last_stable_offset)
    assert a.aborted_transactions(0, a.log_end_offset) == b.aborted_transactions(0, b.log_end_offset)


def txn(pid: int, seq: int, count: int, tag: int, compression: int = 0) -> bytes:
    return build_batch([(b"k", bytes([tag]) * 30, [], BASE_TS + i) for i in range(count)],
                       producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=True,
                       compression=compression)


def fill_leader(leader: Partition, rng: random.Random) -> None:
    """Plain, compressed, idempotent and transactional batches, committed and aborted
    transactions (one left open), across two leader epochs."""
    seq = {PID: 0, TXN_PID: 0, OTHER_TXN_PID: 0}

    def idempotent(count, tag, compression=0):
        produce(leader, make_batch(count, pid=PID, epoch=0, seq=seq[PID], tag=tag, compression=compression))
        seq[PID] += count

    def transactional(pid, count, tag):
        produce(leader, txn(pid, seq[pid], count, tag, compression=rng.choice([0, GZIP])))
        seq[pid] += count

    for i in range(6):
        produce(leader, make_batch(rng.randint(1, 5), tag=i, value_size=rng.randint(10, 80)))
        produce(leader, make_batch(3, tag=i, compression=rng.choice([GZIP, LZ4])))
        idempotent(2, i)
    transactional(TXN_PID, 3, 1)
    produce(leader, make_batch(2, tag=50))
    transactional(OTHER_TXN_PID, 2, 2)  # interleaved with the first
    transactional(TXN_PID, 2, 3)
    leader.append_marker_as_leader(TXN_PID, 0, 5, commit=True)
    leader.append_marker_as_leader(OTHER_TXN_PID, 0, 5, commit=False)
    # A new leader epoch (the same leader elected again).
    leader.make_leader(leader.leader_epoch + 1, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    idempotent(4, 60, compression=GZIP)
    transactional(TXN_PID, 2, 4)
    leader.append_marker_as_leader(TXN_PID, 0, 6, commit=False)
    for i in range(4):
        produce(leader, make_batch(rng.randint(1, 4), tag=70 + i))
    transactional(OTHER_TXN_PID, 1, 5)  # left open: the last stable offset stays before it


CUTS = [(1 << 20,), (HEADER_SIZE - 1, 150, 1000, 333, 4096), (1, 61, 62, 200, 99, 7000)]


@pytest.mark.parametrize("cuts", CUTS, ids=["whole", "mid-batch", "tiny"])
@pytest.mark.parametrize("timestamps", ["CreateTime", "LogAppendTime"])
def test_the_follower_log_is_the_leader_log_byte_for_byte(tmp_path, cuts, timestamps):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    clock = SteppedClock()
    config = LogConfig(segment_bytes=900, index_interval_bytes=200, message_timestamp_type=timestamps)
    leader, follower = leader_and_follower(tmp_path, config, clock)
    fill_leader(leader, rng)
    clock.now += 1000  # the follower appends later: LogAppendTime must not be stamped again
    rounds = replicate(leader, follower, cuts)
    print(f"{leader.log_end_offset} offsets in {len(leader.log.segments)} segments, {rounds} fetches")
    assert len(leader.log.segments) > 3
    assert len(leader.log.epochs.entries) == 2
    assert leader.log.aborted_transactions(0, leader.log_end_offset)  # two aborts indexed
    assert leader.log.producer_state.ongoing and leader.last_stable_offset < leader.high_watermark
    if timestamps == "LogAppendTime":
        first = follower.log.segments[0].header_at(0)
        assert first.attributes & LOG_APPEND_TIME_BIT and first.max_timestamp == BASE_TS
    assert_same_log(leader, follower)
    # A read_committed read sees the same aborted transactions on both.
    for offset in (0, 20, 40):
        assert leader.log.read_committed(offset, 1 << 20, True)[1] == \
            follower.log.read_committed(offset, 1 << 20, True)[1]

    # An unclean restart of the follower re-validates its segments and rebuilds its
    # transaction indexes and producer state from the batches: still the leader's.
    for segment in follower.log.segments:
        segment._file = None
    for name in os.listdir(follower.log.directory):
        if name.endswith((".snapshot", ".txnindex")):
            os.unlink(os.path.join(follower.log.directory, name))
    restarted = open_replica(tmp_path / "follower", FOLLOWER, config, clock,
                             high_watermark=follower.high_watermark, recovery_point=0)
    assert_same_log(leader, restarted)
    close(leader, restarted)


def test_appends_keep_the_leader_epochs_and_follow_its_positions(tmp_path):
    leader, follower = leader_and_follower(tmp_path, LogConfig(), epoch=3)
    for i in range(3):
        produce(leader, make_batch(2, tag=i))
    region = leader.read_as_follower(0, 1 << 20, True).read()
    # The leader's high watermark waits for this follower: nothing acknowledged yet.
    assert follower.append_as_follower(region, leader.high_watermark, leader.log_start_offset) == 3
    assert (follower.log_end_offset, follower.high_watermark, follower.latest_epoch) == (6, 0, 3)
    leader.update_follower(FOLLOWER, 6)
    assert leader.high_watermark == 6
    assert follower.append_as_follower(b"", leader.high_watermark, leader.log_start_offset) == 0
    assert follower.high_watermark == 6
    # The leader's high watermark counts only as far as the follower's log reaches,
    # and never moves the follower's backwards.
    produce(leader, make_batch(4, tag=9))
    leader.make_leader(4, [LEADER], [LEADER])  # the follower left the ISR
    produce(leader, make_batch(1, tag=10))
    assert leader.high_watermark == 11
    region = leader.read_as_follower(6, 1 << 20, True).read()
    first = next(iter(iter_batches(region)))[1]
    assert follower.append_as_follower(first, leader.high_watermark, leader.log_start_offset) == 1
    assert (follower.log_end_offset, follower.high_watermark) == (10, 10)
    follower.append_as_follower(b"", 7, leader.log_start_offset)
    assert follower.high_watermark == 10
    follower.append_as_follower(region[len(first):], leader.high_watermark, leader.log_start_offset)
    assert (follower.log_end_offset, follower.high_watermark) == (11, 11)
    assert follower.log.epochs.entries == leader.log.epochs.entries == [(3, 0), (4, 10)]
    # DeleteRecords on the leader moves the follower's log start with its next fetch.
    leader.delete_records_before(5)
    follower.append_as_follower(b"", leader.high_watermark, leader.log_start_offset)
    assert follower.log_start_offset == 5
    follower.append_as_follower(b"", leader.high_watermark, 3)  # an older answer: no move back
    assert follower.log_start_offset == 5
    close(leader, follower)


def _three_batches(tmp_path) -> tuple[Partition, Partition, bytes, list]:
    leader, follower = leader_and_follower(tmp_path, LogConfig())
    for i in range(3):
        produce(leader, make_batch(2, tag=i))
    data = leader.read_as_follower(0, 1 << 20, True).read()
    return leader, follower, data, [h for h, _ in iter_batches(data)]


def _refused(follower: Partition, records, code: ErrorCode) -> str:
    with pytest.raises(BrokerError) as refused:
        follower.append_as_follower(records, 100, 0)
    assert refused.value.code == code
    return str(refused.value)


def test_an_offset_gap_is_taken_and_a_batch_behind_refused_with_nothing_written(tmp_path):
    """As Kafka's followers: batches past the log end (offsets a compacted leader's cleaner
    removed) are taken; a batch before it is refused."""
    leader, follower, data, headers = _three_batches(tmp_path)
    assert follower.append_as_follower(data[headers[0].size:headers[0].size + headers[1].size], 0, 0) == 1
    assert follower.log_end_offset == 4 and follower.log.size_bytes == headers[1].size
    message = _refused(follower, data[:headers[0].size], ErrorCode.OFFSET_OUT_OF_RANGE)
    assert "start at offset 0" in message and "before this log's end offset 4" in message
    assert follower.log_end_offset == 4 and follower.log.size_bytes == headers[1].size
    follower.append_as_follower(data[headers[0].size + headers[1].size:], 0, 0)
    assert follower.log_end_offset == 6
    close(leader, follower)


@pytest.mark.parametrize("damage", ["crc", "magic", "offsets"])
def test_a_bad_batch_is_refused_with_nothing_after_it_written(tmp_path, damage):
    leader, follower, data, headers = _three_batches(tmp_path)
    records = bytearray(data)
    second = headers[0].size
    if damage == "crc":
        records[second + HEADER_SIZE + 5] ^= 0xFF
    elif damage == "magic":
        records[second + 16] = 1
    else:  # the second batch overlaps the first (the base offset lies outside the CRC)
        set_base_offset(memoryview(records)[second:], 1)
    message = _refused(follower, bytes(records), ErrorCode.CORRUPT_MESSAGE)
    print(message)
    assert follower.log_end_offset == 2  # the first batch, and nothing of the others
    assert follower.log.size_bytes == headers[0].size
    with open(follower.log.segments[0].path, "rb") as f:
        assert f.read() == data[:second]
    follower.append_as_follower(data[second:], leader.high_watermark, 0)  # the good bytes go on
    assert follower.log_end_offset == 6
    close(leader, follower)


def test_a_trailing_partial_batch_is_ignored(tmp_path):
    leader, follower, data, headers = _three_batches(tmp_path)
    assert follower.append_as_follower(data[:-1], 0, 0) == 2
    assert follower.log_end_offset == 4
    assert follower.append_as_follower(data[headers[0].size + headers[1].size:][:HEADER_SIZE + 3], 0, 0) == 0
    assert follower.append_as_follower(data[headers[0].size + headers[1].size:], 0, 0) == 1
    assert follower.log_end_offset == 6
    close(leader, follower)


def test_a_follower_behind_the_leader_log_start_starts_over_there(tmp_path):
    clock = SteppedClock()
    config = LogConfig(segment_bytes=600)
    leader, follower = leader_and_follower(tmp_path, config, clock)
    for i in range(3):
        produce(leader, make_batch(2, pid=PID, epoch=0, seq=2 * i, tag=i))
    replicate(leader, follower)
    leader.make_leader(2, [LEADER, FOLLOWER], [LEADER])  # the follower falls behind
    for i in range(12):
        produce(leader, make_batch(3, tag=10 + i))
    start = leader.log.segments[2].base_offset
    leader.delete_records_before(start)
    assert leader.log.segments[0].base_offset == start
    with pytest.raises(BrokerError) as refused:  # the follower's next fetch
        leader.read_as_follower(follower.log_end_offset, 1 << 20, True)
    assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    follower.truncate_fully_and_start_at(leader.log_start_offset)
    assert (follower.log_start_offset, follower.log_end_offset, follower.high_watermark) == (start,) * 3
    assert follower.latest_epoch == -1 and not follower.log.producer_state.producers
    assert not [n for n in os.listdir(follower.log.directory) if n.endswith(".snapshot")]
    # A restart keeps the new start: the empty segment's file holds it.
    follower.log.close()
    follower = open_replica(tmp_path / "follower", FOLLOWER, config, clock, recovery_point=0)
    follower.make_follower(LEADER, 2, [LEADER, FOLLOWER], [LEADER])
    assert (follower.log_start_offset, follower.log_end_offset, follower.latest_epoch) == (start, start, -1)
    assert not follower.log.producer_state.producers
    leader.make_leader(3, [LEADER, FOLLOWER], [LEADER])
    replicate(leader, follower, (500, 80))
    # The leader's producer state still knows producer PID from the deleted records.
    del leader.log.producer_state.producers[PID]
    assert_same_log(leader, follower)
    close(leader, follower)


# -- divergence and truncation ------------------------------------------------------------

def elect(new_leader: Partition, epoch: int, others: list[Partition]) -> None:
    """`new_leader` leads from `epoch` (an unclean election when it lacks records); the
    others follow it."""
    everyone = sorted([new_leader.local_id] + [p.local_id for p in others])
    new_leader.make_leader(epoch, everyone, [new_leader.local_id])
    for follower in others:
        follower.make_follower(new_leader.local_id, epoch, everyone, [new_leader.local_id])


def truncate_like_a_follower(follower: Partition, leader: Partition, via: str) -> list[int]:
    """Kafka's follower truncation against `leader`, asking OffsetForLeaderEpoch (the
    leader's `end_offset_for_epoch`) or fetching with last_fetched_epoch (its
    `diverging_epoch`) until the truncation is complete; the offsets it cut to."""
    cuts = []
    for _ in range(10):
        if via == "offset_for_leader_epoch":
            epoch, end = leader.end_offset_for_epoch(follower.latest_epoch)
        else:
            diverging = leader.diverging_epoch(follower.latest_epoch, follower.log_end_offset)
            if diverging is None:
                return cuts
            epoch, end = diverging
        offset, complete = follower.truncation_point(epoch, end)
        assert offset == follower.truncation_offset(epoch, end)
        follower.truncate_to(offset)
        cuts.append(offset)
        if complete and via == "offset_for_leader_epoch":
            return cuts
    raise AssertionError(f"truncation did not complete: {cuts}")


@pytest.mark.parametrize("via", ["offset_for_leader_epoch", "diverging_epoch"])
def test_a_follower_with_an_old_epoch_tail_truncates_and_catches_up(tmp_path, via):
    clock = SteppedClock()
    config = LogConfig(segment_bytes=500)
    a, b = leader_and_follower(tmp_path, config, clock)
    for i in range(5):
        produce(a, make_batch(2, pid=PID, epoch=0, seq=2 * i, tag=i))
    replicate(a, b)
    for i in range(5, 8):  # written by A alone, lost when B takes over
        produce(a, make_batch(2, pid=PID, epoch=0, seq=2 * i, tag=i))
    assert (a.log_end_offset, b.log_end_offset) == (16, 10)
    elect(b, 2, [a])
    for i in range(4):  # B's records at the same offsets, different bytes
        produce(b, make_batch(3, tag=100 + i))
    assert a.latest_epoch == 1 and b.latest_epoch == 2
    cuts = truncate_like_a_follower(a, b, via)
    assert cuts == [10]
    assert a.log_end_offset == 10 and a.high_watermark <= 10
    assert a.log.producer_state.producers[PID].last_sequence == 9  # the cut batches are forgotten
    # A restart between the truncation and the next fetch keeps the truncated log.
    a.log.close()
    a = open_replica(tmp_path / "leader", LEADER, config, clock, high_watermark=a.high_watermark,
                     recovery_point=0)
    a.make_follower(FOLLOWER, 2, [LEADER, FOLLOWER], [FOLLOWER])
    assert (a.log_end_offset, a.log.epochs.entries) == (10, [(1, 0)])
    assert a.log.producer_state.producers[PID].last_sequence == 9
    assert not [n for n in os.listdir(a.log.directory) if n.endswith(".snapshot") and int(n[:20]) > 10]
    replicate(b, a, (700, 64, 5000))
    assert_same_log(b, a, same_segments=False)
    assert truncate_like_a_follower(a, b, via) in ([], [22])  # nothing more to cut
    close(a, b)


@pytest.mark.parametrize("via", ["offset_for_leader_epoch", "diverging_epoch"])
def test_truncation_across_epochs_the_follower_never_saw(tmp_path, via):
    """A: epoch 1 at 0, epoch 3 at 10; B: epoch 1 at 0, epoch 2 at 8, epoch 4 at 12. B
    answers A's epoch 3 with its epoch 2 ending at 12; A does not have epoch 2, so it
    cuts to where its own epoch 1 ends (10) and asks again: epoch 1 ends at 8 on B."""
    clock = SteppedClock()
    config = LogConfig(segment_bytes=700)
    a, b = leader_and_follower(tmp_path, config, clock)
    for i in range(4):
        produce(a, make_batch(2, tag=i))
    replicate(a, b)
    produce(a, make_batch(2, tag=4))  # 8-9, A alone
    elect(b, 2, [a])  # A is down: unclean
    produce(b, make_batch(4, tag=20))  # 8-11
    elect(a, 3, [b])  # B is down: unclean
    produce(a, make_batch(5, tag=30))  # 10-14
    elect(b, 4, [a])
    produce(b, make_batch(2, tag=40))  # 12-13
    assert a.log.epochs.entries == [(1, 0), (3, 10)]
    assert b.log.epochs.entries == [(1, 0), (2, 8), (4, 12)]
    assert a.truncation_point(*b.end_offset_for_epoch(3)) == (10, False)
    cuts = truncate_like_a_follower(a, b, via)
    assert cuts == [10, 8]
    assert a.log.epochs.entries == [(1, 0)]
    replicate(b, a, (100, 1000))
    assert_same_log(b, a, same_segments=False)
    close(a, b)


def test_truncation_rule_cases(tmp_path):
    clock = SteppedClock()
    a, b = leader_and_follower(tmp_path, LogConfig(), clock, epoch=2)
    for i in range(3):
        produce(a, make_batch(2, tag=i))
    replicate(a, b)
    a.make_leader(5, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
    for i in range(2):
        produce(a, make_batch(2, tag=10 + i))
    replicate(a, b)
    # B: epoch 2 at 0, epoch 5 at 6, LEO 10, its high watermark put at 8.
    assert (b.log.epochs.entries, b.log_end_offset) == ([(2, 0), (5, 6)], 10)
    b.log.update_high_watermark(8)
    assert b.truncation_point(-1, -1) == (8, True)  # undefined: the high watermark
    assert b.truncation_point(5, 7) == (7, True)  # the same epoch: the smaller end
    assert b.truncation_point(5, 50) == (10, True)
    assert b.truncation_point(2, 4) == (4, True)  # an older epoch: the smaller end of it
    assert b.truncation_point(2, 9) == (6, True)
    assert b.truncation_point(3, 9) == (6, False)  # one B never had: its epoch 2 ends at 6
    assert b.truncation_point(1, 3) == (0, True)  # below all of B's: where its first begins
    assert b.truncation_offset(5, 7) == 7
    close(a, b)


# -- leadership -------------------------------------------------------------------------------

def test_only_the_leader_serves(tmp_path):
    clock = SteppedClock()
    leader, follower = leader_and_follower(tmp_path, LogConfig(), clock, epoch=4)
    produce(leader, make_batch(2))
    fresh = open_replica(tmp_path / "fresh", 2, LogConfig(), clock)
    for partition, names in ((follower, "broker 0 is"), (fresh, "no broker is")):
        assert not partition.is_leader
        with pytest.raises(BrokerError) as refused:
            partition.check_leader()
        assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert "t-0" in str(refused.value) and names in str(refused.value), str(refused.value)
        for attempt in (lambda: produce(partition, make_batch(1)),
                        lambda: partition.append_marker_as_leader(TXN_PID, 0, 0, True),
                        lambda: partition.read(0, 1 << 20, False, True)):
            with pytest.raises(BrokerError) as refused:
                attempt()
            assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert partition.lagging_followers() == []
    assert follower.log_end_offset == 0
    assert leader.is_leader
    leader.check_leader()
    with pytest.raises(BrokerError) as refused:  # a leader appends nobody else's batches
        leader.append_as_follower(leader.read_as_follower(0, 1 << 20, True).read(), 2, 0)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.log_end_offset == 2
    with pytest.raises(ValueError):
        follower.make_follower(FOLLOWER, 5, [LEADER, FOLLOWER], [LEADER])
    assert not follower.make_follower(LEADER, 4, [LEADER, FOLLOWER], [LEADER])  # nothing new
    assert follower.state.isr == (LEADER,)
    assert follower.make_follower(LEADER, 5, [LEADER, FOLLOWER], [LEADER])
    assert (follower.state.leader_id, follower.state.leader_epoch) == (LEADER, 5)
    close(leader, follower, fresh)


def test_a_follower_made_leader_starts_its_epoch_at_its_log_end(tmp_path):
    leader, follower = leader_and_follower(tmp_path, LogConfig(), epoch=1)
    for i in range(3):
        produce(leader, make_batch(2, tag=i))
    replicate(leader, follower)
    follower.make_leader(2, [LEADER, FOLLOWER], [FOLLOWER])
    assert follower.end_offset_for_epoch(2) == (2, 6)  # before its first record
    assert follower.end_offset_for_epoch(1) == (1, 6)
    assert produce(follower, make_batch(1)).first_offset == 6
    assert follower.log.epochs.entries == [(1, 0), (2, 6)]
    assert follower.high_watermark == 7
    leader.make_follower(FOLLOWER, 2, [LEADER, FOLLOWER], [FOLLOWER])
    assert leader.truncation_point(*follower.end_offset_for_epoch(leader.latest_epoch)) == (6, True)
    replicate(follower, leader)
    assert_same_log(follower, leader)
    close(leader, follower)


def test_becoming_a_follower_fails_an_acks_all_waiter_at_once(tmp_path):
    async def run():
        clock = SystemClock()
        log = PartitionLog(str(tmp_path), "t", 0, LogConfig(), recovery_point=None, clock=clock)
        delayed = DelayedOperations(clock)
        partition = Partition(log, LEADER, delayed, clock, LAG_MS)
        partition.make_leader(1, [LEADER, FOLLOWER], [LEADER, FOLLOWER])
        required = produce(partition, make_batch(3)).last_offset + 1
        outcomes = []

        async def producer_waiting():
            while partition.acks_all_result(required) is None:
                await delayed.wait([partition.key], 60)
            outcomes.append(partition.acks_all_result(required))

        task = asyncio.ensure_future(producer_waiting())
        await asyncio.sleep(0)
        assert not task.done()
        partition.make_follower(FOLLOWER, 2, [LEADER, FOLLOWER], [FOLLOWER])
        await asyncio.wait_for(task, 5)
        assert outcomes == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
        log.close()

    asyncio.run(run())


def _answer(sock, api, correlation_id: int, version: int = 9):
    header, response = decode_response(api.key, version, recv_frame(sock))
    assert header.correlation_id == correlation_id
    return response


def test_a_broker_that_stops_leading_answers_waiting_and_new_requests(tmp_path):
    """The real broker: an acks=all produce and a consumer's long-poll fetch wait on a
    partition with a second (absent) replica; the partition then follows broker 1. Both
    are answered NOT_LEADER_OR_FOLLOWER at once, and so is every later request for it.
    The consumer fetches at v10: from v11 it gives its client metadata and a follower
    serves it (KIP-392, tests/test_cluster_follower_fetching.py)."""
    with EmbeddedBroker(tmp_path / "data") as embedded:
        with Client(embedded.bootstrap_servers) as client:
            client.admin.create_topics({"replicated": NewTopic(1, 1, {})})
        port = embedded.broker.server.port
        partition = _on_loop(embedded, lambda: embedded.broker.topics.partition("replicated", 0))
        epoch = _on_loop(embedded, lambda: partition.leader_epoch) + 1
        _on_loop(embedded, lambda: partition.make_leader(epoch, [0, 1], [0, 1]))
        with connect(port) as producer, connect(port) as consumer, connect(port) as other:
            producer.sendall(frame(PRODUCE, 9, _produce(-1, 60_000, 0), 1))
            consumer.sendall(frame(FETCH, 10, _fetch(-1, 0, max_wait_ms=60_000), 2))
            # Both wait: the follower never fetches.
            wait_for(lambda: len(_on_loop(embedded, lambda: embedded.broker.delayed._waiters.get(
                partition.key, ()))) == 2, what="the produce and the fetch to wait")
            Req = LIST_OFFSETS.request
            list_offsets = Req(replica_id=-1, isolation_level=0, topics=[Req.ListOffsetsTopic(
                name="replicated", partitions=[Req.ListOffsetsPartition(
                    partition_index=0, current_leader_epoch=-1, timestamp=-1)])])
            assert _on_loop(embedded, lambda: partition.log_end_offset) == 1
            answer = roundtrip(other, LIST_OFFSETS, 8, list_offsets, 3).topics[0].partitions[0]
            assert (answer.error_code, answer.offset) == (ErrorCode.NONE, 0)  # HW: not yet acknowledged

            assert _on_loop(embedded, lambda: partition.make_follower(1, epoch + 1, [0, 1], [1]))
            producer.settimeout(10)
            consumer.settimeout(10)
            produced = _answer(producer, PRODUCE, 1).responses[0].partition_responses[0]
            assert produced.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, produced
            fetched = _answer(consumer, FETCH, 2, 10).responses[0].partitions[0]
            assert fetched.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

            # Every request for the partition now: produce, consumer and replica fetches,
            # ListOffsets, OffsetForLeaderEpoch, DeleteRecords.
            answer = roundtrip(other, PRODUCE, 9, _produce(1, 1000, 1), 4).responses[0].partition_responses[0]
            assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            for replica_id, version, correlation in ((-1, 10, 5), (1, 12, 6)):
                data = roundtrip(other, FETCH, version, _fetch(replica_id, 0), correlation).responses[0].partitions[0]
                assert data.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and not data.records
            answer = roundtrip(other, LIST_OFFSETS, 8, list_offsets, 7).topics[0].partitions[0]
            assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            Req = OFFSET_FOR_LEADER_EPOCH.request
            body = Req(replica_id=1, topics=[Req.OffsetForLeaderTopic(topic="replicated", partitions=[
                Req.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=epoch)])])
            answer = roundtrip(other, OFFSET_FOR_LEADER_EPOCH, 4, body, 8).topics[0].partitions[0]
            assert (answer.error_code, answer.end_offset) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)
            Req = DELETE_RECORDS.request
            body = Req(timeout_ms=1000, topics=[Req.DeleteRecordsTopic(
                name="replicated", partitions=[Req.DeleteRecordsPartition(partition_index=0, offset=-1)])])
            answer = roundtrip(other, DELETE_RECORDS, 2, body, 9).topics[0].partitions[0]
            assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert _on_loop(embedded, lambda: (partition.log_end_offset, partition.log_start_offset)) == (1, 0)


def test_a_fenced_answer_about_a_replaced_leader_epoch_does_not_hold_the_follower(tmp_path):
    """A follower's fetcher asks OffsetForLeaderEpoch at the leader epoch it was given; if
    the controller gives it a newer epoch while that request is out, the leader's
    FENCED_LEADER_EPOCH speaks of the old epoch only. Taken for the new one, it held the
    partition unfetched until a LeaderAndIsr that never came (the follower dropped out
    of the ISR: a reassignment's epoch bump right after a failover did it). The leader is
    a real broker process, paused while the request is out; its request counts show the
    follower fetching once resumed."""
    leader = start_broker(tmp_path / "leader", {"metrics.port": "0"})
    try:
        with Client(leader.bootstrap_servers) as client:
            client.admin.create_topics({"t": NewTopic(1, 1)})
            client.producer.produce("t", 0, [(None, b"x")])
        leader.restart()  # it leads from one epoch past the last it holds records of
        with Client(leader.bootstrap_servers) as client:
            epoch = client.metadata(["t"]).topics["t"].partitions[0].leader_epoch
        assert epoch >= 1
        port = metrics_port(leader)

        def replica_fetches() -> float:
            return value(scrape(port), "kafka_network_requestmetrics_requests_total",
                         request="Fetch", version="12") or 0

        async def follow() -> None:
            clock = SystemClock()
            replica = open_replica(tmp_path / "follower", FOLLOWER, LogConfig(), clock)
            replica.make_leader(0, [FOLLOWER], [FOLLOWER])  # a record of epoch 0: something to ask about
            produce(replica, make_batch(1))
            replica.make_follower(LEADER, epoch - 1, [LEADER, FOLLOWER], [LEADER])
            leader.pause()
            try:
                config = BrokerConfig()
                fetcher = ReplicaFetcher(FOLLOWER, LEADER, "127.0.0.1", leader.port, config, clock, None,
                                         Quota(clock, lambda: config.follower_replication_throttled_rate))
                fetcher.add(replica)
                await asyncio.sleep(0)  # the fetcher's task builds its request at the old epoch
                replica.make_follower(LEADER, epoch, [LEADER, FOLLOWER], [LEADER])
                fetcher.add(replica)
            finally:
                leader.resume()
            try:
                await asyncio.to_thread(wait_for, lambda: replica_fetches() > 0, 30,
                                        "the follower to fetch at its new epoch")
            finally:
                await fetcher.close()
                replica.log.close()

        asyncio.run(follow())
    finally:
        leader.stop()
