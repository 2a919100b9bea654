"""Leader epochs: the history file, OffsetForLeaderEpoch and the epochs in ListOffsets and
Metadata, against the real broker process and with confluent-kafka and kafka-python.

- `LeaderEpochCache`: Kafka's rules for the end offset of an epoch (latest, older,
  below every entry, above every entry, undefined), truncation at both ends, the file
  format, and an unreadable file rebuilt from the batches.
- The broker: each restart opens partitions one epoch past the last one holding records
  (as a Kafka leader's epoch moves on when its broker comes back); batches carry it,
  Metadata reports it, OffsetForLeaderEpoch answers for old and current epochs at every
  version, ListOffsets returns the epoch of the offset it returns, and a stale
  current_leader_epoch is FENCED_LEADER_EPOCH.
- Clients: confluent-kafka and kafka-python consumers carry on across the epoch bump,
  reading every record once (librdkafka validates its position with OffsetForLeaderEpoch
  when it sees the new epoch).

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import os
import time

import pytest

from broker.config import LogConfig
from broker.storage.leader_epochs import LeaderEpochCache
from broker.storage.log import LEADER_EPOCH_CHECKPOINT, PartitionLog
from tests.support.polling import wait_for
from tests.replicas import leading
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import FETCH, LIST_OFFSETS, METADATA, OFFSET_FOR_LEADER_EPOCH
from wire.records import build_batch

pytestmark = pytest.mark.timeout(120)


def cache_with(tmp_path, entries) -> LeaderEpochCache:
    cache = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"))
    for epoch, start in entries:
        cache.assign(epoch, start)
    cache.write()
    return cache


def test_end_offset_rules(tmp_path):
    cache = cache_with(tmp_path, [(2, 10), (4, 25), (7, 40)])
    assert cache.end_offset_for(7, 55) == (7, 55)  # the latest epoch: the log end
    assert cache.end_offset_for(4, 55) == (4, 40)  # an older one: where the next begins
    assert cache.end_offset_for(5, 55) == (4, 40)  # unknown, between: the largest below it
    assert cache.end_offset_for(1, 55) == (1, 10)  # below every entry: the first start
    assert cache.end_offset_for(8, 55) == (-1, -1)  # above every entry
    assert cache.end_offset_for(-1, 55) == (-1, -1)
    assert [cache.epoch_for(o) for o in (9, 10, 24, 25, 100)] == [-1, 2, 2, 4, 7]


def test_assign_truncate_and_file_format(tmp_path):
    cache = cache_with(tmp_path, [(0, 0), (1, 5)])
    assert not cache.assign(1, 9)  # not newer: ignored
    assert cache.assign(3, 5)  # epoch 1 had no records: replaced
    assert cache.entries == [(0, 0), (3, 5)]
    assert cache.pending_from == 5  # in memory only
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n1 5\n"
    cache.sync()
    assert cache.pending_from is None
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n2\n0 0\n3 5\n"
    cache.assign(4, 12)
    cache.truncate_from_end(12)
    assert cache.entries == [(0, 0), (3, 5)]
    cache.truncate_from_start(7)
    assert cache.entries == [(3, 7)]
    reloaded = LeaderEpochCache(cache.path)
    assert reloaded.load() and reloaded.entries == [(3, 7)]
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n3 7\n2 9\n")
    assert not LeaderEpochCache(cache.path).load()  # not ascending: unreadable


def test_history_is_rebuilt_from_batches_and_epoch_moves_on(tmp_path):
    config = LogConfig(segment_bytes=400)
    log = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=None)
    partition = leading(log)
    for epoch in (0, 0, 2, 2, 5):
        partition.make_leader(epoch, [0], [0])
        batch = memoryview(bytearray(build_batch([(b"k", b"v" * 100, [], int(time.time() * 1000))])))
        partition.append_as_leader(*_header(batch), required_acks=-1)
    assert log.epochs.entries == [(0, 0), (2, 2), (5, 4)]
    log.close()
    (tmp_path / LEADER_EPOCH_CHECKPOINT).write_text("garbage")
    reopened = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=None)
    assert reopened.epochs.entries == [(0, 0), (2, 2), (5, 4)]
    partition = leading(reopened)
    assert partition.leader_epoch == 6
    assert partition.end_offset_for_epoch(6) == (6, 5)
    partition.delete_records_before(3)
    assert reopened.epochs.entries == [(2, 3), (5, 4)]
    reopened.close()


def test_new_epoch_kept_in_memory_until_flushed_and_recovered_from_the_batches(tmp_path):
    """A new epoch's entry is kept in memory; the recovery point stays below it until a
    flush writes it, and should the entry be lost (a crash), recovery from the recovery
    point puts it back from the batches."""
    config = LogConfig(segment_bytes=10_000)
    log = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=None, new=True)
    partition = leading(log)

    def append(epoch):
        partition.make_leader(epoch, [0], [0])
        batch = memoryview(bytearray(build_batch([(b"k", b"v" * 100, [], int(time.time() * 1000))])))
        partition.append_as_leader(*_header(batch), required_acks=-1)

    append(0)
    assert log.epochs.pending_from == 0 and not (tmp_path / LEADER_EPOCH_CHECKPOINT).exists()
    log.flush()
    assert log.epochs.pending_from is None and log.recovery_point == 1
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    append(3)
    append(3)
    assert log.epochs.entries == [(0, 0), (3, 1)] and log.epochs.pending_from == 1
    assert log.recovery_point == 1
    log.roll()  # the rolled segment is flushed in a thread: then the recovery point moves, (3, 1) written
    wait_for(lambda: log.settle_rolled_syncs() or log.recovery_point == 3, 10, "the rolled segment's fsync")
    assert log.epochs.pending_from is None
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n2\n0 0\n3 1\n"
    append(4)
    for segment in log.segments:  # a crash: (4, 3) never written
        segment.close()
    reopened = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=3)
    assert reopened.epochs.entries == [(0, 0), (3, 1), (4, 3)]
    assert (tmp_path / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n3\n0 0\n3 1\n4 3\n"
    reopened.close()


def _header(batch):
    from wire.records import parse_header

    return parse_header(batch), batch


def _raw(broker, api, version, body):
    from tests.test_broker_failures import connect, roundtrip

    with connect(broker.port) as sock:
        return roundtrip(sock, api, version, body, 11)


def _metadata_epoch(broker, topic: str) -> int:
    response = _raw(broker, METADATA, 12, METADATA.request(
        topics=[METADATA.request.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    return response.topics[0].partitions[0].leader_epoch


def _end_offset(broker, topic: str, epoch: int, version: int, current: int = -1):
    Req = OFFSET_FOR_LEADER_EPOCH.request
    body = Req(replica_id=-1, topics=[Req.OffsetForLeaderTopic(topic=topic, partitions=[
        Req.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
    answer = _raw(broker, OFFSET_FOR_LEADER_EPOCH, version, body).topics[0].partitions[0]
    return answer.error_code, answer.leader_epoch, answer.end_offset


def _list_offset(broker, topic: str, timestamp: int):
    Req = LIST_OFFSETS.request
    body = Req(replica_id=-1, isolation_level=0, topics=[Req.ListOffsetsTopic(name=topic, partitions=[
        Req.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])])
    answer = _raw(broker, LIST_OFFSETS, 8, body).topics[0].partitions[0]
    return answer.offset, answer.leader_epoch


def _diverging(broker, topic: str, last_epoch: int, offset: int):
    """(error, (diverging epoch, end offset), whether records came) of a Fetch v12."""
    Req = FETCH.request
    body = Req(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
               session_id=0, session_epoch=-1, topics=[Req.FetchTopic(topic=topic, partitions=[
                   Req.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=offset,
                                      last_fetched_epoch=last_epoch, log_start_offset=-1,
                                      partition_max_bytes=1 << 20)])],
               forgotten_topics_data=[], rack_id="")
    data = _raw(broker, FETCH, 12, body).responses[0].partitions[0]
    diverging = data.diverging_epoch
    return (data.error_code, (diverging.epoch, diverging.end_offset) if diverging else (-1, -1),
            bool(data.records))


def test_epochs_move_on_across_restarts(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"e": NewTopic(1, 1, {})})
        client.producer.produce("e", 0, [(b"k", b"%d" % i) for i in range(3)])  # epoch 0: 0..2
    assert _metadata_epoch(broker, "e") == 0
    broker.restart()
    assert _metadata_epoch(broker, "e") == 1
    with Client(broker.bootstrap_servers) as client:
        client.producer.produce("e", 0, [(b"k", b"3"), (b"k", b"4")])  # epoch 1: 3..4
        batches = client.consumer.fetch("e", 0, 0).records
    broker.restart()
    assert _metadata_epoch(broker, "e") == 2
    for version in range(5):
        expected_epoch = (lambda e: e) if version >= 1 else (lambda e: -1)  # v0 has no epoch field
        assert _end_offset(broker, "e", 0, version) == (0, expected_epoch(0), 3)
        assert _end_offset(broker, "e", 1, version) == (0, expected_epoch(1), 5)
        assert _end_offset(broker, "e", 2, version) == (0, expected_epoch(2), 5)  # current, no records yet
        assert _end_offset(broker, "e", 3, version) == (0, -1, -1)
    assert _end_offset(broker, "e", 0, 4, current=1)[0] == ErrorCode.FENCED_LEADER_EPOCH
    assert _end_offset(broker, "e", 0, 4, current=3)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert _end_offset(broker, "missing", 0, 4)[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _list_offset(broker, "e", -2) == (0, 0)  # earliest: written under epoch 0
    assert _list_offset(broker, "e", -1) == (5, 2)  # latest: the current epoch
    assert _list_offset(broker, "e", -3)[1] == 1  # max timestamp: the last record, epoch 1
    assert batches is not None
    assert sorted(os.listdir(os.path.join(broker.data_dir, "e-0"))).count(LEADER_EPOCH_CHECKPOINT) == 1
    # Fetch v12+ last_fetched_epoch: a fetcher past the end of its last epoch diverged.
    assert _diverging(broker, "e", last_epoch=0, offset=3) == (0, (-1, -1), True)  # epoch 0 ends at 3
    assert _diverging(broker, "e", last_epoch=0, offset=5) == (0, (0, 3), False)  # truncate to 3
    assert _diverging(broker, "e", last_epoch=1, offset=5) == (0, (-1, -1), False)  # at the end: no data yet
    assert _diverging(broker, "e", last_epoch=1, offset=7) == (0, (1, 5), False)
    assert _diverging(broker, "e", last_epoch=9, offset=2)[0] == ErrorCode.OFFSET_OUT_OF_RANGE


def test_consumers_carry_on_across_the_epoch_bump(broker):
    """A consumer whose broker comes back under a new epoch reads on without a gap or a
    duplicate: librdkafka validates its position with OffsetForLeaderEpoch."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTopicPartition

    bootstrap = broker.bootstrap_servers
    producer = Producer({"bootstrap.servers": bootstrap})
    with Client(bootstrap) as client:
        client.admin.create_topics({"bump": NewTopic(1, 1, {})})

    def produce(values):
        for v in values:
            producer.produce("bump", b"%d" % v, partition=0)
        assert producer.flush(15) == 0

    produce(range(10))
    ck = Consumer({"bootstrap.servers": bootstrap, "group.id": "ck", "enable.auto.commit": False,
                   "topic.metadata.refresh.interval.ms": 500})
    ck.assign([TopicPartition("bump", 0, 0)])
    kp = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, metadata_max_age_ms=500)
    kp.assign([KpTopicPartition("bump", 0)])
    kp.seek(KpTopicPartition("bump", 0), 0)
    seen = {"ck": [], "kp": []}

    def drain(until: int, deadline_s: float = 30.0) -> None:
        deadline = time.monotonic() + deadline_s
        while (len(seen["ck"]) < until or len(seen["kp"]) < until) and time.monotonic() < deadline:
            message = ck.poll(0.1)
            if message is not None and message.error() is None:
                seen["ck"].append(int(message.value()))
            for records in kp.poll(timeout_ms=100).values():
                seen["kp"].extend(int(r.value) for r in records)

    drain(10)
    broker.restart()
    produce(range(10, 20))
    drain(20)
    ck.close()
    kp.close()
    assert seen["ck"] == list(range(20)), seen["ck"]
    assert seen["kp"] == list(range(20)), seen["kp"]
