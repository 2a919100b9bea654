"""The partition layer: the high watermark over the ISR, acks=all, ISR changes, truncation.

Unit tests drive a `Partition` with in-process followers (their fetch positions reported
as a follower's Fetch reports them) and a clock that moves only when told; the last
tests run the real broker in this process, make a partition believe it has a second
replica, and play that follower with raw Fetch requests carrying its replica id.
"""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from wire.error_codes import ErrorCode
from wire.messages import FETCH, PRODUCE
from wire.records import build_batch, parse_header

from broker.clock import SystemClock
from broker.config import LogConfig
from broker.embedded import EmbeddedBroker
from broker.errors import BrokerError
from broker.replica.delayed import DelayedOperations
from broker.replica.partition import Partition
from broker.storage.log import PartitionLog
from tests.support.polling import wait_for
from tests.test_broker_failures import connect, frame, recv_frame, roundtrip
from tests.test_storage import BASE_TS, idempotent, make_batch
from sluice_client import Client, NewTopic
from wire.protocol import decode_response

LAG_MS = 10_000


class SteppedClock(SystemClock):
    def __init__(self, now: int = BASE_TS):
        self.now = now

    def wall_ms(self) -> int:
        return self.now


def open_partition(tmp_path, replicas=(0, 1, 2), config: LogConfig | None = None, clock=None,
                   high_watermark: int = 0):
    clock = clock or SteppedClock()
    log = PartitionLog(str(tmp_path), "t", 0, config or LogConfig(), recovery_point=None,
                       high_watermark=high_watermark, clock=clock)
    partition = Partition(log, 0, DelayedOperations(clock), clock, LAG_MS)
    partition.make_leader(log.epochs.latest_epoch + 1, list(replicas), list(replicas))
    return partition


def append(partition, count=1, acks=-1, raw=None):
    batch = bytearray(raw or make_batch(count))
    return partition.append_as_leader(parse_header(batch), memoryview(batch), acks)


def test_high_watermark_is_the_smallest_log_end_over_the_isr(tmp_path):
    partition = open_partition(tmp_path)
    append(partition, 5)
    assert (partition.log_end_offset, partition.high_watermark) == (5, 0)  # followers unknown
    assert partition.update_follower(1, 5)
    assert partition.high_watermark == 0
    partition.update_follower(2, 3)
    assert partition.high_watermark == 3
    partition.update_follower(2, 5)
    assert partition.high_watermark == 5
    # Consumers read below it, followers up to the log end.
    append(partition, 2)
    region, _ = partition.read(5, 1 << 20, read_committed=False, min_one_batch=True)
    assert region is None
    assert partition.read_as_follower(5, 1 << 20, True) is not None
    assert not partition.update_follower(7, 7)  # not a replica: nothing changes
    assert partition.high_watermark == 5


def test_a_leader_given_a_new_epoch_keeps_what_it_knows_of_its_followers(tmp_path):
    """The controller removing a dead follower from the ISR gives the leader a new epoch; the
    leader must not forget where the live follower is (the high watermark would wait for its
    next fetch), while a broker newly leading knows no follower's position."""
    partition = open_partition(tmp_path)
    append(partition, 4)
    partition.update_follower(1, 4)
    assert partition.high_watermark == 0  # follower 2 unknown
    partition.make_leader(partition.leader_epoch + 1, [0, 1, 2], [0, 1])
    assert partition.high_watermark == 4
    partition.make_follower(1, partition.leader_epoch + 1, [0, 1, 2], [0, 1])
    partition.make_leader(partition.leader_epoch + 1, [0, 1, 2], [0, 1])
    append(partition, 1)
    assert partition.high_watermark == 4  # follower 1's position is unknown again


def test_high_watermark_never_moves_backwards(tmp_path):
    partition = open_partition(tmp_path)
    append(partition, 4)
    partition.update_follower(1, 4)
    partition.update_follower(2, 4)
    assert partition.high_watermark == 4
    partition.update_follower(2, 1)  # a follower that truncated and fetches again
    assert partition.high_watermark == 4
    append(partition, 1)
    partition.update_follower(1, 5)
    assert partition.high_watermark == 4  # follower 2 is at 1 now
    partition.update_follower(2, 5)
    assert partition.high_watermark == 5


def test_a_lagging_follower_leaves_the_isr_and_rejoins_when_caught_up(tmp_path):
    clock = SteppedClock()
    partition = open_partition(tmp_path, clock=clock)
    append(partition, 3)
    partition.update_follower(1, 3)
    assert partition.high_watermark == 0  # follower 2 has not fetched
    clock.now += LAG_MS
    assert partition.lagging_followers() == []  # not yet past replica.lag.time.max.ms
    clock.now += 1
    partition.update_follower(1, 3)  # caught up again just now
    assert partition.lagging_followers() == [2]
    partition.remove_from_isr([2])
    assert partition.isr == {0, 1} and partition.high_watermark == 3
    assert partition.state.isr == (0, 1)
    partition.update_follower(2, 2)  # below the high watermark: still out
    assert partition.isr == {0, 1}
    partition.update_follower(2, 3)
    assert partition.isr == {0, 1, 2} and partition.state.isr == (0, 1, 2)


def test_min_insync_replicas_before_and_after_the_append(tmp_path):
    clock = SteppedClock()
    partition = open_partition(tmp_path, replicas=(0, 1), clock=clock,
                               config=LogConfig(min_insync_replicas=2))
    result = append(partition, 2, acks=-1)
    assert partition.acks_all_result(result.last_offset + 1) is None  # waits for follower 1
    clock.now += LAG_MS + 1
    assert partition.lagging_followers() == [1]
    partition.remove_from_isr([1])
    # The ISR is {leader}: the high watermark passes the batch, but too few replicas have it.
    assert partition.high_watermark == 2
    assert partition.acks_all_result(result.last_offset + 1) == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    with pytest.raises(BrokerError) as refused:
        append(partition, 1, acks=-1)
    assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
    assert partition.log_end_offset == 2  # refused before the append
    assert append(partition, 1, acks=1).first_offset == 2
    partition.update_follower(1, 3)
    assert partition.isr == {0, 1}
    result = append(partition, 1, acks=-1)
    partition.update_follower(1, result.last_offset + 1)
    assert partition.acks_all_result(result.last_offset + 1) == ErrorCode.NONE


def test_acks_all_waiters_wake_exactly_when_the_high_watermark_passes(tmp_path):
    async def run():
        clock = SystemClock()
        log = PartitionLog(str(tmp_path), "t", 0, LogConfig(), recovery_point=None, clock=clock)
        delayed = DelayedOperations(clock)
        partition = Partition(log, 0, delayed, clock, LAG_MS)
        partition.make_leader(1, [0, 1], [0, 1])
        required = append(partition, 3).last_offset + 1
        outcomes = []

        async def producer_waiting():
            while partition.acks_all_result(required) is None:
                await delayed.wait([partition.key], 30)
            outcomes.append((partition.high_watermark, partition.acks_all_result(required)))

        task = asyncio.ensure_future(producer_waiting())
        await asyncio.sleep(0)
        partition.update_follower(1, 2)  # woken, but the batch is not covered yet
        await asyncio.sleep(0)
        assert outcomes == [] and not task.done()
        partition.update_follower(1, 3)
        await asyncio.wait_for(task, 5)
        assert outcomes == [(3, ErrorCode.NONE)]

    asyncio.run(run())


def test_high_watermark_is_restored_from_the_checkpoint_not_the_log_end(tmp_path):
    first = open_partition(tmp_path, replicas=(0,))
    append(first, 6)
    assert first.high_watermark == 6
    first.log.close()
    # Restarted as the leader of two replicas, the checkpointed high watermark was 4.
    partition = open_partition(tmp_path, replicas=(0, 1), high_watermark=4)
    assert (partition.log_end_offset, partition.high_watermark) == (6, 4)
    partition.update_follower(1, 6)
    assert partition.high_watermark == 6


def test_truncate_to_drops_the_tail_and_what_it_held(tmp_path):
    clock = SteppedClock()
    partition = open_partition(tmp_path, replicas=(0,), clock=clock, config=LogConfig(segment_bytes=600))
    sent = []
    for i in range(12):  # idempotent batches of producer 1 across several segments
        raw = idempotent(i * 2, 2, 0, tag=i)
        sent.append(raw)
        append(partition, raw=raw, acks=1)
    partition.make_leader(partition.leader_epoch + 1, [0], [0])
    for i in range(12, 16):
        append(partition, raw=idempotent(i * 2, 2, 0, tag=i), acks=1)
    log = partition.log
    assert len(log.segments) > 3 and partition.log_end_offset == 32
    epochs_before = list(log.epochs.entries)
    partition.truncate_to(13)  # inside the batch 12-13: the whole batch goes
    assert partition.log_end_offset == 12 and partition.high_watermark == 12
    assert log.epochs.entries == epochs_before[:1]
    assert max(s.base_offset for s in log.segments) <= 12
    names = sorted(n for n in os.listdir(tmp_path) if n.endswith(".log"))
    assert len(names) == len(log.segments)
    # The producer state forgot the removed batches: sequence 12 is new again, 10 a duplicate.
    assert append(partition, raw=sent[6], acks=1).first_offset == 12
    assert append(partition, raw=sent[5], acks=1).duplicate
    with pytest.raises(BrokerError) as refused:
        log.truncate_to(log.log_start_offset - 1)
    assert refused.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    log.close()
    reopened = PartitionLog(str(tmp_path), "t", 0, log.config, recovery_point=0, clock=clock)
    assert reopened.log_end_offset == 14
    reopened.close()


# -- the real broker, one partition with a second (played) replica --------------------------

def _on_loop(embedded, call):
    """Run `call` on the broker's event loop thread; its result."""
    done = threading.Event()
    out = []

    def run():
        out.append(call())
        done.set()

    embedded._loop.call_soon_threadsafe(run)
    assert done.wait(10)
    return out[0]


def _produce(acks: int, timeout_ms: int, tag: int):
    Req = PRODUCE.request
    batch = build_batch([(b"k", b"v%d" % tag, [], BASE_TS)])
    return Req(transactional_id=None, acks=acks, timeout_ms=timeout_ms, topic_data=[
        Req.TopicProduceData(name="replicated", partition_data=[Req.PartitionProduceData(index=0, records=batch)])])


def _fetch(replica_id: int, offset: int, max_wait_ms: int = 0):
    Req = FETCH.request
    return Req(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
               isolation_level=0, session_id=0, session_epoch=-1, topics=[Req.FetchTopic(
                   topic="replicated", partitions=[Req.FetchPartition(
                       partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                       partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")


def _leading_with_an_absent_follower(embedded):
    """Partition 0 of a new topic "replicated", led here with broker 1 (which never
    fetches unless a test fetches as it) in its ISR."""
    with Client(embedded.bootstrap_servers) as client:
        client.admin.create_topics({"replicated": NewTopic(1, 1, {})})
    partition = _on_loop(embedded, lambda: embedded.broker.topics.partition("replicated", 0))
    _on_loop(embedded, lambda: partition.make_leader(partition.leader_epoch + 1, [0, 1], [0, 1]))
    return partition


def test_acks_all_waits_for_the_follower_and_times_out_without_it(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as embedded:
        _leading_with_an_absent_follower(embedded)
        port = embedded.broker.server.port
        with connect(port) as sock:
            answer = roundtrip(sock, PRODUCE, 9, _produce(-1, 300, 0), 1).responses[0].partition_responses[0]
            assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT  # appended, never replicated
            answer = roundtrip(sock, PRODUCE, 9, _produce(1, 300, 1), 2).responses[0].partition_responses[0]
            assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 1)  # acks=1: the leader's word
            # A consumer sees nothing above the high watermark.
            data = roundtrip(sock, FETCH, 12, _fetch(-1, 0), 3).responses[0].partitions[0]
            assert (data.high_watermark, len(data.records or b"")) == (0, 0)

            sock.sendall(frame(PRODUCE, 9, _produce(-1, 30_000, 2), 4))  # waits for the follower
            with connect(port) as follower:
                data = roundtrip(follower, FETCH, 12, _fetch(1, 0), 5).responses[0].partitions[0]
                assert len(data.records) > 0  # a follower reads to the log end
                data = roundtrip(follower, FETCH, 12, _fetch(1, 3, max_wait_ms=0), 6).responses[0].partitions[0]
                assert data.high_watermark == 3
            sock.settimeout(10)
            header, response = decode_response(PRODUCE.key, 9, recv_frame(sock))
            answer = response.responses[0].partition_responses[0]
            assert (header.correlation_id, answer.error_code, answer.base_offset) == (4, ErrorCode.NONE, 2)
            data = roundtrip(sock, FETCH, 12, _fetch(-1, 0), 7).responses[0].partitions[0]
            assert data.high_watermark == 3 and len(data.records) > 0


def test_pipelined_acks_all_produces_are_appended_at_once_and_answered_in_order(tmp_path):
    """A client with several acks=all produces in flight on one connection: the later ones
    are appended while the first waits for the follower, one follower fetch acknowledges
    them all, and the responses come in order, a fetch behind them included (handled
    when it arrived, so it saw the high watermark before the follower fetched)."""
    with EmbeddedBroker(tmp_path / "data") as embedded:
        partition = _leading_with_an_absent_follower(embedded)
        port = embedded.broker.server.port
        with connect(port) as sock:
            sock.sendall(frame(PRODUCE, 9, _produce(-1, 30_000, 0), 1)
                         + frame(PRODUCE, 9, _produce(-1, 30_000, 1), 2)
                         + frame(PRODUCE, 9, _produce(1, 30_000, 2), 3)
                         + frame(FETCH, 12, _fetch(-1, 0), 4))
            wait_for(lambda: _on_loop(embedded, lambda: partition.log_end_offset) == 3,
                     what="all three produces appended while the first waits")
            assert _on_loop(embedded, lambda: partition.high_watermark) == 0
            with connect(port) as follower:
                roundtrip(follower, FETCH, 12, _fetch(1, 0), 5)
                data = roundtrip(follower, FETCH, 12, _fetch(1, 3), 6).responses[0].partitions[0]
                assert data.high_watermark == 3
            sock.settimeout(10)
            answers = [decode_response(api.key, version, recv_frame(sock))
                       for api, version in ((PRODUCE, 9), (PRODUCE, 9), (PRODUCE, 9), (FETCH, 12))]
        assert [header.correlation_id for header, _ in answers] == [1, 2, 3, 4]
        produced = [body.responses[0].partition_responses[0] for _, body in answers[:3]]
        assert [(p.error_code, p.base_offset) for p in produced] == [(ErrorCode.NONE, i) for i in range(3)]
        fetched = answers[3][1].responses[0].partitions[0]  # read while the produces waited
        assert (fetched.error_code, fetched.high_watermark) == (ErrorCode.NONE, 0)


def test_a_broker_that_is_not_a_replica_gets_no_records(tmp_path):
    with EmbeddedBroker(tmp_path / "data") as embedded:
        with Client(embedded.bootstrap_servers) as client:
            client.admin.create_topics({"replicated": NewTopic(1, 1, {})})
        with connect(embedded.broker.server.port) as sock:
            assert roundtrip(sock, PRODUCE, 9, _produce(-1, 1000, 0), 1).responses[0] \
                .partition_responses[0].error_code == ErrorCode.NONE
            data = roundtrip(sock, FETCH, 12, _fetch(5, 0), 2).responses[0].partitions[0]
            assert (data.error_code, len(data.records or b""), data.high_watermark) == (ErrorCode.NONE, 0, 1)
