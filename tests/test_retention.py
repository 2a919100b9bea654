"""Retention: whole old segments deleted by time and by size, and what clients then see.

The first half drives PartitionLog directly (timestamps in the past instead of sleeping);
the second runs the real broker process with a small segment size and a fast retention
check, and watches through confluent-kafka clients and the data directory.
"""

from __future__ import annotations

import gc
import logging
import os
import time
import uuid

import pytest

from wire.error_codes import ErrorCode
from wire.records import parse_header

from broker.config import LogConfig
from broker.errors import BrokerError
from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.manual_clock import ManualClock
from tests.test_storage import (BASE_TS, abandon, append, check_consistent, check_duplicates,
                                make_batch, open_log, produce_sequence)

HOUR = 3_600_000
NOW = BASE_TS + 100 * HOUR


def segment_files(directory) -> list[int]:
    return sorted(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log"))


# -- PartitionLog ------------------------------------------------------------------------

def test_retention_by_time(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_ms=HOUR))
    for i in range(30):
        append(log, make_batch(3, NOW - 5 * HOUR + i, tag=i))  # expired
    for i in range(30):
        append(log, make_batch(3, NOW - 10 * 60_000 + i, tag=i))  # recent
    segments = [(s.base_offset, s.max_timestamp()[0]) for s in log.segments]
    expired = [base for base, ts in segments if NOW - ts > HOUR]
    assert len(expired) >= 3 and expired == [base for base, _ in segments[:len(expired)]]
    first_kept = segments[len(expired)][0]
    end = log.log_end_offset

    assert log.enforce_retention(now=NOW) == len(expired)
    assert segment_files(tmp_path) == [base for base, _ in segments[len(expired):]]
    for base in expired:
        for suffix in (".log", ".index", ".timeindex"):
            assert not os.path.exists(tmp_path / f"{base:020d}{suffix}")
    assert log.log_start_offset == first_kept and log.log_end_offset == end
    with pytest.raises(BrokerError) as info:
        log.read(first_kept - 1, 1 << 20, log.high_watermark, True)
    assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert parse_header(log.read(first_kept, 1 << 20, log.high_watermark, True).read()).base_offset == first_kept
    assert log.offset_for_timestamp(0)[0] == first_kept
    check_consistent(log)
    # Nothing more to delete: a second pass is a no-op.
    assert log.enforce_retention(now=NOW) == 0
    log.close()


def test_retention_by_time_stops_at_the_first_recent_segment(tmp_path):
    """Like Kafka: an expired segment after a recent one waits for the recent one."""
    log = open_log(tmp_path, LogConfig(segment_bytes=400, retention_ms=HOUR))
    stamps = [NOW - 5 * HOUR, NOW - 4 * HOUR, NOW - 60_000, NOW - 3 * HOUR, NOW]
    for i, ts in enumerate(stamps):
        append(log, make_batch(3, ts, value_size=80, tag=i))
        log.roll()
    assert log.enforce_retention(now=NOW) == 2
    assert log.log_start_offset == 6
    log.close()


def test_retention_with_the_real_clock(tmp_path):
    now = int(time.time() * 1000)
    log = open_log(tmp_path, LogConfig(segment_bytes=600, retention_ms=HOUR))
    for i in range(10):
        append(log, make_batch(3, now - 2 * HOUR, tag=i))
    for i in range(10):
        append(log, make_batch(3, now, tag=i))
    assert log.enforce_retention(int(time.time() * 1000)) > 0
    assert all(now - s.max_timestamp()[0] <= HOUR for s in log.segments if s.size)
    log.close()


def test_deleted_segments_are_removed_after_file_delete_delay_ms_on_the_logs_clock(tmp_path):
    """Retention renames a segment's files `.deleted` at once; they are removed once
    `file.delete.delay.ms` has passed on the log's clock (one thread removes every log's,
    in the order they fall due), not before."""
    clock = ManualClock()
    waiting = open_log(tmp_path / "waiting", LogConfig(segment_bytes=600, retention_ms=HOUR,
                                                       file_delete_delay_ms=60_000), clock=clock)
    at_once = open_log(tmp_path / "at-once", LogConfig(segment_bytes=600, retention_ms=HOUR,
                                                       file_delete_delay_ms=0), clock=clock)
    for log in (waiting, at_once):
        for i in range(10):
            append(log, make_batch(3, NOW - 2 * HOUR, tag=i))
        for i in range(10):
            append(log, make_batch(3, NOW, tag=i))
        assert log.enforce_retention(now=NOW) > 0
    renamed = {name for name in os.listdir(tmp_path / "waiting") if name.endswith(".deleted")}
    assert any(name.endswith(".log.deleted") for name in renamed)
    # Due before the waiting log's files: once these are gone, those were passed over.
    wait_for(lambda: not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "at-once")), 15,
             "the files deleted with no delay removed")
    assert {name for name in os.listdir(tmp_path / "waiting") if name.endswith(".deleted")} == renamed
    clock.stall(60)
    wait_for(lambda: not any(n.endswith(".deleted") for n in os.listdir(tmp_path / "waiting")), 15,
             "the files removed once the delay passed on the log's clock")
    for log in (waiting, at_once):
        check_consistent(log)
        log.close()


@pytest.mark.parametrize("reopen", ["clean", "unclean"])
def test_retention_of_everything_keeps_the_log_end(tmp_path, reopen):
    """When even the active segment expired, it is rolled first; the log end survives,
    and a restart neither reuses offsets nor puts the start past the end."""
    log = open_log(tmp_path, LogConfig(segment_bytes=700, retention_ms=HOUR))
    for i in range(12):
        append(log, make_batch(3, NOW - 2 * HOUR, tag=i))
    end = log.log_end_offset
    deleted = log.enforce_retention(now=NOW)
    assert deleted >= 3
    assert log.log_start_offset == log.log_end_offset == log.high_watermark == end
    assert log.read(end, 1 << 20, log.high_watermark, True) is None
    assert segment_files(tmp_path) == [end]
    if reopen == "clean":
        log.close()
        log = open_log(tmp_path, log.config, recovery_point=None, log_start_offset=log.log_start_offset)
    else:
        abandon(log)
        log = open_log(tmp_path, log.config, recovery_point=log.recovery_point,
                       log_start_offset=log.log_start_offset)
    assert log.log_start_offset == log.log_end_offset == end
    assert append(log, make_batch(3, NOW)).first_offset == end
    check_consistent(log)
    log.close()


def test_retention_by_size(tmp_path):
    retention_bytes = 3000
    log = open_log(tmp_path, LogConfig(segment_bytes=1000, retention_bytes=retention_bytes))
    for i in range(60):
        append(log, make_batch(3, NOW + i, tag=i))
    total = log.size_bytes
    sizes = [s.size for s in log.segments]
    # Kafka's rule: delete the oldest segment while what remains stays >= retention.bytes.
    expected, remaining = 0, total
    while remaining - sizes[expected] >= retention_bytes:
        remaining -= sizes[expected]
        expected += 1
    assert expected >= 3
    kept_base = log.segments[expected].base_offset
    assert log.enforce_retention(now=NOW) == expected
    assert log.size_bytes == remaining >= retention_bytes
    assert log.size_bytes - log.segments[0].size < retention_bytes
    assert log.log_start_offset == kept_base == segment_files(tmp_path)[0]
    check_consistent(log)
    log.close()
    reopened = open_log(tmp_path, log.config, recovery_point=None, log_start_offset=kept_base)
    assert reopened.log_start_offset == kept_base
    reopened.close()


def test_no_retention_when_unlimited(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=500, retention_ms=-1, retention_bytes=-1))
    for i in range(20):
        append(log, make_batch(3, 0 + i, tag=i))  # timestamps from 1970
    count = len(log.segments)
    assert log.enforce_retention(now=NOW) == 0
    assert len(log.segments) == count and log.log_start_offset == 0
    log.close()


def test_producer_state_across_retention(tmp_path):
    log = open_log(tmp_path, LogConfig(segment_bytes=450, retention_bytes=900))
    sent = produce_sequence(log, batches=20)
    assert log.enforce_retention(now=NOW) > 0
    start = log.log_start_offset
    assert start > 0
    check_duplicates(log, sent)
    abandon(log)
    log = open_log(tmp_path, log.config, recovery_point=log.recovery_point, log_start_offset=start)
    assert log.log_start_offset == start
    check_duplicates(log, sent)
    check_consistent(log)
    log.close()


# -- the broker process ------------------------------------------------------------------

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def write_properties(path, **props) -> str:
    path.write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in props.items()))
    return str(path)


@pytest.fixture
def retention_broker(tmp_path):
    config = write_properties(tmp_path / "server.properties", log_segment_bytes=1024,
                              log_retention_bytes=4096, log_retention_check_interval_ms=200)
    with BrokerProcess(tmp_path / "data", config_file=config) as proc:
        yield proc


@pytest.fixture
def overrides_broker(tmp_path):
    config = write_properties(tmp_path / "server.properties", log_retention_check_interval_ms=200)
    with BrokerProcess(tmp_path / "data", config_file=config) as proc:
        yield proc


def create_topic(bootstrap, name, config=None, partitions=1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                            config=config or {})], operation_timeout=10)
    try:
        futures[name].result(timeout=15)
    finally:
        del futures, admin
        gc.collect()  # no client left to reconnect to a stopped broker


def produce(bootstrap, topic, count, *, size=100, timestamp=0, flush_every=5, start=0):
    """Produce `count` records valued by their index; returns the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    reports = []

    def on_delivery(err, msg):
        reports.append((err, msg.offset() if err is None else None))

    for i in range(start, start + count):
        value = str(i).encode().ljust(size, b".")
        producer.produce(topic, value=value, partition=0, timestamp=timestamp, on_delivery=on_delivery)
        if (i + 1) % flush_every == 0:
            producer.flush(10)
    assert producer.flush(10) == 0
    assert len(reports) == count
    return reports


def watermarks(bootstrap, topic):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm-" + uuid.uuid4().hex})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()


class _Collect(logging.Handler):
    def __init__(self, into: list):
        super().__init__()
        self.into = into

    def emit(self, record):
        self.into.append(record.getMessage())


def consume(bootstrap, topic, offset, reset, *, want=1, timeout=10.0, logger=None):
    """Messages (or errors) polled after assigning at `offset`, until `want` arrive.
    With `logger` (a list), librdkafka's log lines are gathered into it during polls."""
    config = {"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex,
              "auto.offset.reset": reset, "enable.auto.commit": False}
    if logger is not None:
        log = logging.getLogger("rdkafka-" + uuid.uuid4().hex)
        log.propagate = False
        log.addHandler(_Collect(logger))
        config["logger"] = log
    consumer = Consumer(config)
    consumer.assign([TopicPartition(topic, 0, offset)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None:
                out.append(msg)
                if msg.error() is not None:
                    break
        return out, consumer
    except BaseException:
        consumer.close()
        raise


def trimmed_by_size(directory, retention_bytes: int) -> list[int] | None:
    """The segments' base offsets once retention by size has nothing more to delete
    (without the oldest segment the log would be under `retention_bytes`), else None.
    Asked only after the last produce, so that no later append makes a deletion due."""
    files = segment_files(directory)
    try:
        sizes = [os.path.getsize(directory / f"{b:020d}.log") for b in files]
    except FileNotFoundError:  # deleted by retention between the listing and here
        return None
    return files if files and files[0] > 0 and sum(sizes) - sizes[0] < retention_bytes else None


def test_broker_retention_by_size_and_consumer_resets(retention_broker, tmp_path):
    bootstrap = retention_broker.bootstrap_servers
    topic = "sized"
    create_topic(bootstrap, topic)
    reports = produce(bootstrap, topic, 150)
    assert all(err is None for err, _ in reports)
    assert sorted(o for _, o in reports) == list(range(150))
    directory = tmp_path / "data" / f"{topic}-0"

    files = wait_for(lambda: trimmed_by_size(directory, 4096), what="old segments to be deleted")
    low, high = wait_for(lambda: (lambda w: w if w[0] == segment_files(directory)[0] else None)(
        watermarks(bootstrap, topic)), what="ListOffsets earliest to advance")
    assert low == files[0] > 0 and high == 150
    wait_for(lambda: f"log start offset now {low}" in "".join(retention_broker.output),
             what="the broker to log the deletion")

    # earliest: from the new log start, records intact.
    msgs, consumer = consume(bootstrap, topic, 0, "earliest", want=high - low)
    consumer.close()
    assert [m.error() for m in msgs] == [None] * (high - low)
    assert [m.offset() for m in msgs] == list(range(low, high))
    assert all(m.value().startswith(str(m.offset()).encode() + b".") for m in msgs)

    # latest: starts at the end, so only a record produced afterwards arrives.
    resets = []
    msgs, consumer = consume(bootstrap, topic, 0, "latest", want=1, timeout=0.5, logger=resets)
    try:
        assert msgs == []
        deadline = time.monotonic() + 10  # librdkafka logs the reset; then produce
        while not any("to offset END" in r for r in resets) and time.monotonic() < deadline:
            assert consumer.poll(0.1) is None
        assert any("to offset END" in r for r in resets)
        produce(bootstrap, topic, 1, start=150)
        deadline = time.monotonic() + 10
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
        assert msg is not None and msg.error() is None and msg.offset() == 150
    finally:
        consumer.close()

    # error: the consumer reports the out-of-range offset instead of resetting.
    msgs, consumer = consume(bootstrap, topic, 0, "error", want=1)
    consumer.close()
    assert msgs and msgs[0].error() is not None
    assert msgs[0].error().code() == KafkaError._AUTO_OFFSET_RESET
    assert "out of range" in msgs[0].error().str().lower() or "OFFSET_OUT_OF_RANGE" in msgs[0].error().str()


def test_topic_level_overrides(overrides_broker, tmp_path):
    bootstrap = overrides_broker.bootstrap_servers
    data = tmp_path / "data"
    create_topic(bootstrap, "by-time", {"retention.ms": "60000", "segment.bytes": "1024"})
    create_topic(bootstrap, "by-size", {"retention.bytes": "2048", "segment.bytes": "1024"})
    create_topic(bootstrap, "plain")
    old = int(time.time() * 1000) - 2 * HOUR
    # plain first: the retention passes that trim the others have looked at it too.
    produce(bootstrap, "plain", 60, timestamp=old)
    produce(bootstrap, "by-time", 60, timestamp=old)
    produce(bootstrap, "by-size", 60)

    # segment.bytes=1024: every segment of by-size stays within it.
    # retention.ms: even the active segment expired, so everything goes.
    wait_for(lambda: watermarks(bootstrap, "by-time") == (60, 60), what="time retention")
    assert segment_files(data / "by-time-0") == [60]
    # retention.bytes: whole segments go until what remains fits (a pass may have run
    # half way through the produce: wait until none has more to delete).
    files = wait_for(lambda: trimmed_by_size(data / "by-size-0", 2048), what="size retention")
    low, high = wait_for(lambda: (lambda w: w if w[0] == segment_files(data / "by-size-0")[0] else None)(
        watermarks(bootstrap, "by-size")), what="ListOffsets earliest to advance")
    assert low == files[0] and high == 60
    sizes = [os.path.getsize(data / "by-size-0" / f"{b:020d}.log") for b in files]
    assert all(s <= 1024 for s in sizes) and sum(sizes) >= 2048
    # Broker defaults (7 days, 1 GiB segments) keep the plain topic whole, old stamps or
    # not, through the passes that trimmed the others.
    assert watermarks(bootstrap, "plain") == (0, 60)
    assert segment_files(data / "plain-0") == [0]


def test_log_append_time_topic(overrides_broker):
    bootstrap = overrides_broker.bootstrap_servers
    create_topic(bootstrap, "append-time", {"message.timestamp.type": "LogAppendTime"})
    create_topic(bootstrap, "create-time")
    old = int(time.time() * 1000) - 2 * HOUR
    before = int(time.time() * 1000)
    produce(bootstrap, "append-time", 3, timestamp=old)
    produce(bootstrap, "create-time", 3, timestamp=old)
    after = int(time.time() * 1000)
    msgs, consumer = consume(bootstrap, "append-time", 0, "earliest", want=3)
    consumer.close()
    assert len(msgs) == 3
    for msg in msgs:
        kind, ts = msg.timestamp()
        assert kind == ck.TIMESTAMP_LOG_APPEND_TIME and before - 5 <= ts <= after + 5
    msgs, consumer = consume(bootstrap, "create-time", 0, "earliest", want=3)
    consumer.close()
    assert [m.timestamp() for m in msgs] == [(ck.TIMESTAMP_CREATE_TIME, old)] * 3


def test_max_message_bytes_topic(overrides_broker):
    bootstrap = overrides_broker.bootstrap_servers
    create_topic(bootstrap, "small", {"max.message.bytes": "1000"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    reports = []
    producer.produce("small", value=b"x" * 5000, partition=0,
                     on_delivery=lambda err, msg: reports.append(err))
    producer.flush(10)
    producer.produce("small", value=b"y" * 100, partition=0,
                     on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(10) == 0
    assert reports[0] is not None and reports[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert reports[1] is None
    assert watermarks(bootstrap, "small") == (0, 1)


def test_invalid_topic_configs_are_refused(overrides_broker):
    bootstrap = overrides_broker.bootstrap_servers
    for config in ({"retention.ms": "soon"}, {"segment.bytes": "1"},
                   {"message.timestamp.type": "Whenever"}, {"no.such.config": "1"}):
        with pytest.raises(ck.KafkaException) as info:
            create_topic(bootstrap, "bad-" + uuid.uuid4().hex[:6], config)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG, config
