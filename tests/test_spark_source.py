"""`format("sluice")` in real Spark (the shared local[2] session) against the real broker
process, and against librdkafka's mock cluster.

Every test produces with confluent-kafka and compares what Spark read with what the
producer's delivery reports say was written, row by row: key, value, topic, partition,
offset, timestamp, timestampType and headers. Each test has its own topics on one
broker for the module; waits are bounded. The SIGKILL test runs its Spark driver as a
separate process (tests/spark_driver_job.py) so that it can be killed.

The read_committed default is shown twice: on the wire (every Fetch and ListOffsets asks
for it) and with a real aborted transaction, whose records never reach Spark. (The mock
cluster keeps no aborted-transaction index, so that test runs on our broker only.)
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402

from sluice.broker_process import BrokerProcess  # noqa: E402
from spark_connector.options import parse_source_options  # noqa: E402
from spark_connector.source import (SluiceBatchReader, SluiceDataLossError, SluiceStreamReader,  # noqa: E402
                                    read_range)
from tests.kafka_capture import API_FETCH, KafkaCaptureProxy  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from sluice_client import EARLIEST, LATEST, Client, NewTopic  # noqa: E402
from wire.protocol import decode_request  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_TIMEOUT = 120  # seconds any one streaming query may take
# Explicit CreateTime timestamps start here (ms): an hour ago, whole seconds, well inside
# the broker's default retention (7 days; older records would be deleted at once).
BASE_TS = (int(time.time()) - 3600) * 1000
API_LIST_OFFSETS = 2


# -- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """One broker process for the module; a fast retention check for the data-loss test
    (topics opt into small segments and size retention through topic configs)."""
    directory = tmp_path_factory.mktemp("spark-broker")
    config = directory / "server.properties"
    config.write_text("log.retention.check.interval.ms=200\n")
    with BrokerProcess(directory / "data", config_file=str(config)) as proc:
        yield proc.bootstrap_servers


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> str:
    with Client(bootstrap) as client:
        created = client.admin.create_topics({name: NewTopic(partitions=partitions, replication_factor=1,
                                                       configs=config or {})})
        assert created[name].error is None, created[name]
    return name


def recreate_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Delete `topic` and create it again: a new, empty topic with a new topic id."""
    with Client(bootstrap) as client:
        before = client.metadata([topic]).topics[topic].topic_id
        assert client.admin.delete_topics([topic])[topic] is None
    create_topic(bootstrap, topic, partitions)
    with Client(bootstrap) as client:
        assert client.metadata([topic]).topics[topic].topic_id != before


def log_offsets(bootstrap: str, topic: str, partitions, timestamp: int) -> dict[int, int]:
    with Client(bootstrap) as client:
        return {p: a.offset for p, a in client.consumer.list_offsets(topic, list(partitions), timestamp).items()}


def make_records(counts: dict[int, int], *, start: int = 0, timestamps: bool = False, tag: str = ""):
    """(partition, key, value, headers, timestamp) with the awkward cases mixed in: null
    keys, empty and null values, no headers, several headers, a header with a null value."""
    records = []
    for i in range(start, start + max(counts.values())):
        for partition, n in sorted(counts.items()):
            if i >= start + n:
                continue
            key = None if i % 7 == 3 else f"key-{partition}-{i}".encode()
            value = (b"" if i % 11 == 5 else None if i % 13 == 6
                     else f"value-{tag}{partition}-{i}-".encode() + bytes([i % 256]) * (i % 40))
            headers = ([("h", str(i).encode()), ("n", None), ("h", b"second")] if i % 3 == 0
                       else [("only", b"\x00\xff")] if i % 3 == 1 else [])
            ts = BASE_TS + i * 1000 + partition if timestamps else None
            records.append((partition, key, value, headers, ts))
    return records


def produce(bootstrap: str, topic: str, records, *, flush_every: int = 0,
            headers: bool = True, config: dict | None = None, report_times: bool = True) -> list[tuple]:
    """Produce `records` (see make_records); the rows Spark should show for them, from
    the delivery reports (offset, timestamp and its type are the broker's word).

    `report_times=False` takes the records' own CreateTime timestamps instead: librdkafka's
    mock cluster answers every produce with a made-up LogAppendTime (1234) but stores
    the producer's timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
                         **(config or {})})
    rows, errors = [], []
    for n, (partition, key, value, hdrs, ts) in enumerate(records, 1):
        def report(err, msg, key=key, value=value, hdrs=hdrs, ts=ts):
            if err is not None:
                errors.append(err)
                return
            kind, stamp = msg.timestamp() if report_times else (confluent_kafka.TIMESTAMP_CREATE_TIME, ts)
            row = (key, value, msg.topic(), msg.partition(), msg.offset(), stamp * 1000,
                   {confluent_kafka.TIMESTAMP_CREATE_TIME: 0, confluent_kafka.TIMESTAMP_LOG_APPEND_TIME: 1}[kind])
            rows.append(row + ((tuple(hdrs),) if headers else ()))

        extra = {"timestamp": ts} if ts is not None else {}
        producer.produce(topic, key=key, value=value, partition=partition, headers=hdrs or None,
                         on_delivery=report, **extra)
        producer.poll(0)
        if flush_every and n % flush_every == 0:
            producer.flush(10)
    assert producer.flush(30) == 0, "records left unsent"
    assert not errors, errors
    assert len(rows) == len(records)
    return sorted(rows, key=_order)


def _order(row):
    return row[2], row[3], row[4]


def _bytes(value):
    return None if value is None else bytes(value)


def rows_of(df, headers: bool | None = None) -> list[tuple]:
    """The rows of a sluice DataFrame (or its Parquet copy) as comparable tuples, sorted by
    topic, partition, offset (duplicates stay)."""
    if headers is None:
        headers = "headers" in df.columns
    columns = ["key", "value", "topic", "partition", "offset",
               F.unix_micros("timestamp").alias("ts"), "timestampType"] + (["headers"] if headers else [])
    result = []
    for r in df.select(*columns).collect():
        row = (_bytes(r.key), _bytes(r.value), r.topic, r.partition, r.offset, r.ts, r.timestampType)
        if headers:
            row += (tuple((h.key, _bytes(h.value)) for h in (r.headers or ())),)
        result.append(row)
    return sorted(result, key=_order)


def source(spark, bootstrap: str, streaming: bool = False, **options):
    reader = (spark.readStream if streaming else spark.read).format("sluice")
    reader = reader.option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value if isinstance(value, str) else json.dumps(value))
    return reader.load()


def run_available_now(df, output, checkpoint):
    query = (df.writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not finish"
    return query


def batch_sizes(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"] > 0]


def error_text(excinfo) -> str:
    return str(excinfo.value)


# PySpark's own first line for an error raised in a task's Python worker.
TASK_ERROR_HEADER = "An exception was thrown from the Python worker:"


def headline(excinfo) -> str:
    """What a user reads first of a Spark error: its first line or, for an error in a
    task, the line after PySpark's fixed header."""
    lines = error_text(excinfo).splitlines()
    return lines[1] if lines[0] == TASK_ERROR_HEADER and len(lines) > 1 else lines[0]


# -- 1, 2: streaming into Parquet, exact; restart from the checkpoint ----------------------

def test_stream_to_parquet_exact_with_max_offsets_per_trigger(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("stream"), partitions=4)
    expected = produce(kafka, topic, make_records({0: 150, 1: 100, 2: 100, 3: 50}))
    df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                includeHeaders="true", maxOffsetsPerTrigger="100")
    query = run_available_now(df, tmp_path / "out", tmp_path / "checkpoint")

    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == expected
    sizes = batch_sizes(query)
    assert len(sizes) == 4 and all(n <= 100 for n in sizes) and sum(sizes) == 400, sizes


def test_stop_and_restart_from_checkpoint_reads_only_new_records(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("restart"), partitions=4)
    first = produce(kafka, topic, make_records({p: 30 for p in range(4)}))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                includeHeaders="true", maxOffsetsPerTrigger="50")
    query = (df.writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
             .trigger(processingTime="500 milliseconds").start())
    try:
        def caught_up():
            if not query.isActive:
                raise AssertionError(f"query died: {query.exception()}")
            return sum(p["numInputRows"] for p in query.recentProgress) >= len(first)
        wait_for(caught_up, QUERY_TIMEOUT, "the first records to be processed")
    finally:
        query.stop()
    assert rows_of(spark.read.parquet(out)) == first

    # More data while stopped, including a partition added meanwhile (read from its start).
    second = produce(kafka, topic, make_records({p: 20 for p in range(4)}, start=30, tag="b"))
    with Client(kafka) as client:
        assert client.admin.create_partitions({topic: 5})[topic] is None
    second += produce(kafka, topic, make_records({4: 25}, tag="c"))
    query = run_available_now(df, out, checkpoint)

    assert rows_of(spark.read.parquet(out)) == sorted(first + second, key=_order)
    assert sum(batch_sizes(query)) == len(second)


# -- 3: SIGKILL of the driver mid-query ------------------------------------------------------

def _numbered(directory: str) -> list[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


@pytest.mark.long  # a driver killed and run again, half a minute: `make test-long`
def test_sigkill_driver_mid_query_then_restart_is_exactly_once(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("sigkill"), partitions=4)
    expected = produce(kafka, topic, make_records({p: 120 for p in range(4)}))
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    log = open(tmp_path / "driver.log", "w+")

    def job(mode: str, max_offsets: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, os.path.join(ROOT, "tests", "spark_driver_job.py"),
                                 kafka, topic, out, checkpoint, mode, str(max_offsets)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)

    driver = job("processing", 40)  # 480 records: 12 batches, one per second at best
    try:
        def committed_one():
            if driver.poll() is not None:
                log.seek(0)
                raise AssertionError(f"driver exited with {driver.returncode}:\n{log.read()}")
            return len(_numbered(os.path.join(checkpoint, "commits"))) >= 1
        wait_for(committed_one, 90, "the first committed batch", interval=0.05)
        # Prefer to strike while a planned batch is running (offsets/N without commits/N).
        try:
            wait_for(lambda: len(_numbered(os.path.join(checkpoint, "offsets")))
                     > len(_numbered(os.path.join(checkpoint, "commits"))), 10, "a batch", 0.02)
        except AssertionError:
            pass
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(30)
    commits = _numbered(os.path.join(checkpoint, "commits"))
    assert 1 <= len(commits) < 12, f"not mid-way when killed: commits {commits}"

    restarted = job("available-now", 200)
    try:
        assert restarted.wait(QUERY_TIMEOUT) == 0, open(tmp_path / "driver.log").read()
    finally:
        if restarted.poll() is None:
            os.killpg(restarted.pid, signal.SIGKILL)
            restarted.wait(30)
    log.close()

    assert rows_of(spark.read.parquet(out)) == expected


# -- 4: kafka.group.id, reset-offsets, startingOffsets=group ---------------------------------

def committed_offsets(bootstrap: str, group: str, topic: str, partitions) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        answers = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    finally:
        consumer.close()
    for tp in answers:
        assert tp.error is None, tp.error
    return {tp.partition: tp.offset for tp in answers}


def sluice_cli(*args) -> subprocess.CompletedProcess:
    """The `sluice` command installed next to this interpreter."""
    command = os.path.join(os.path.dirname(sys.executable), "sluice")
    return subprocess.run([command, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def _cli_has_reset_offsets() -> bool:
    try:
        return sluice_cli("groups", "reset-offsets", "--help").returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def test_group_offsets_follow_the_query_and_reset_offsets_rereads(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("group"), partitions=4)
    group = unique("spark-group")
    expected = produce(kafka, topic, make_records({p: 40 for p in range(4)}), headers=False)
    partitions = range(4)
    seen, snapshots = [], []

    def each_batch(batch_df, batch_id):
        rows = rows_of(batch_df)
        if rows:
            first = {}
            for row in rows:
                first.setdefault(row[3], row[4])
            snapshots.append((first, committed_offsets(kafka, group, topic, partitions)))
        seen.extend(rows)

    df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger="40", **{"kafka.group.id": group})
    query = (df.writeStream.foreachBatch(each_batch).option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert sorted(seen, key=_order) == expected
    assert len(snapshots) == 4, snapshots
    # While batch k runs, the group holds where batch k started: batch k-1 is committed.
    for first, committed in snapshots:
        for partition, offset in first.items():
            assert committed[partition] == offset, (first, committed)
    totals = [sum(c.values()) for _, c in snapshots]
    assert totals == sorted(totals) and totals[0] < totals[-1], totals
    end = log_offsets(kafka, topic, partitions, LATEST)
    assert committed_offsets(kafka, group, topic, partitions) == end == {p: 40 for p in partitions}

    def from_group():
        return rows_of(source(spark, kafka, subscribe=topic, startingOffsets="group",
                              **{"kafka.group.id": group}))

    assert from_group() == []  # the group is at the end

    if _cli_has_reset_offsets():
        done = sluice_cli("groups", "--bootstrap-server", kafka, "reset-offsets", "--group", group,
                          "--all-topics", "--to-earliest", "--execute")
        assert done.returncode == 0, done.stderr
    else:  # the CLI's reset-offsets is not there yet: commit the earliest offsets directly
        with Client(kafka) as client:
            client.consumer.commit_offsets(group, {(topic, p): 0 for p in partitions})
    assert committed_offsets(kafka, group, topic, partitions) == {p: 0 for p in partitions}
    assert from_group() == expected

    with Client(kafka) as client:  # part of the way: each partition from offset 25
        client.consumer.commit_offsets(group, {(topic, p): 25 for p in partitions})
    assert from_group() == [row for row in expected if row[4] >= 25]


# -- 5: batch reads --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def timed_topic(kafka):
    """Two partitions of 20 records, CreateTime BASE_TS + i s + partition ms for record i."""
    topic = create_topic(kafka, unique("timed"), partitions=2)
    return topic, produce(kafka, topic, make_records({0: 20, 1: 20}, timestamps=True))


def test_batch_read_everything(spark, kafka, timed_topic):
    topic, expected = timed_topic
    assert rows_of(source(spark, kafka, subscribe=topic, includeHeaders="true")) == expected
    without = [row[:7] for row in expected]
    assert rows_of(source(spark, kafka, subscribe=topic)) == without
    assert [row[5] for row in expected if row[3] == 0] == [(BASE_TS + i * 1000) * 1000 for i in range(20)]


def test_batch_read_offsets_json(spark, kafka, timed_topic):
    topic, expected = timed_topic
    df = source(spark, kafka, subscribe=topic, startingOffsets={topic: {"0": -2, "1": 7}},
                endingOffsets={topic: {"0": 5, "1": -1}}, includeHeaders="true")
    assert rows_of(df) == [r for r in expected if (r[3] == 0 and r[4] < 5) or (r[3] == 1 and r[4] >= 7)]
    df = source(spark, kafka, subscribe=topic, startingOffsets={topic: {"0": 3, "1": 19}},
                endingOffsets={topic: {"0": 4, "1": 20}}, includeHeaders="true")
    assert rows_of(df) == [r for r in expected if (r[3], r[4]) in ((0, 3), (1, 19))]


def test_batch_read_by_timestamp(spark, kafka, timed_topic):
    topic, expected = timed_topic
    # Partition 0: the first record at or after BASE_TS + 5 s is offset 5; partition 1's
    # records are 1 ms later than 0's, so BASE_TS + 12.5 s finds offset 13.
    df = source(spark, kafka, subscribe=topic, includeHeaders="true",
                startingOffsetsByTimestamp={topic: {"0": BASE_TS + 5000, "1": BASE_TS + 12500}})
    assert rows_of(df) == [r for r in expected if r[4] >= (5 if r[3] == 0 else 13)]
    df = source(spark, kafka, subscribe=topic, includeHeaders="true",
                startingTimestamp=str(BASE_TS + 10_000))
    assert rows_of(df) == [r for r in expected if r[4] >= 10]
    df = source(spark, kafka, subscribe=topic, includeHeaders="true",
                startingTimestamp=str(BASE_TS + 10_000), endingTimestamp=str(BASE_TS + 15_000))
    assert rows_of(df) == [r for r in expected if 10 <= r[4] < 15]
    # After the last record: an error by default, nothing with strategy latest.
    with pytest.raises(Exception) as info:
        source(spark, kafka, subscribe=topic, startingTimestamp=str(BASE_TS + 10**6)).collect()
    assert "startingTimestamp" in error_text(info)
    df = source(spark, kafka, subscribe=topic, startingTimestamp=str(BASE_TS + 10**6),
                startingOffsetsByTimestampStrategy="latest")
    assert rows_of(df) == []


def test_batch_read_assign_and_pattern(spark, kafka, timed_topic):
    topic, expected = timed_topic
    df = source(spark, kafka, assign={topic: [1]}, includeHeaders="true")
    assert rows_of(df) == [r for r in expected if r[3] == 1]

    prefix = unique("pattern")
    one = create_topic(kafka, f"{prefix}-one", partitions=2)
    two = create_topic(kafka, f"{prefix}-two", partitions=1)
    create_topic(kafka, f"other-{prefix}", partitions=1)
    rows = produce(kafka, one, make_records({0: 5, 1: 6})) + produce(kafka, two, make_records({0: 7}))
    produce(kafka, f"other-{prefix}", make_records({0: 3}))
    df = source(spark, kafka, subscribePattern=f"{prefix}-.*", includeHeaders="true")
    assert rows_of(df) == sorted(rows, key=_order)
    df = source(spark, kafka, subscribe=f"{one},{two}", includeHeaders="true")
    assert rows_of(df) == sorted(rows, key=_order)


def test_batch_read_min_partitions(spark, kafka, timed_topic):
    topic, expected = timed_topic
    df = source(spark, kafka, subscribe=topic, minPartitions="7", includeHeaders="true")
    assert df.rdd.getNumPartitions() >= 7
    assert rows_of(df) == expected
    assert source(spark, kafka, subscribe=topic).rdd.getNumPartitions() == 2


def test_log_append_time_topic(spark, kafka):
    topic = create_topic(kafka, unique("append-time"), partitions=1,
                         config={"message.timestamp.type": "LogAppendTime"})
    expected = produce(kafka, topic, make_records({0: 10}, timestamps=True))
    assert {row[6] for row in expected} == {1}
    assert all(row[5] >= (BASE_TS + 3_500_000) * 1000 for row in expected)  # the broker's clock
    assert rows_of(source(spark, kafka, subscribe=topic, includeHeaders="true")) == expected


def test_read_committed_is_the_default_on_the_broker(spark, kafka):
    topic = create_topic(kafka, unique("txn"), partitions=1)
    producer = Producer({"bootstrap.servers": kafka, "transactional.id": unique("txn-id")})
    producer.init_transactions(10)
    _transactional_abort_checks(spark, kafka, topic, producer)


def test_read_committed_is_the_default_on_the_wire(spark, kafka, timed_topic):
    """Without a broker that coordinates transactions (the mock cluster does not filter
    aborted records either: librdkafka's own read_committed consumer sees them), the
    default shows in the requests: every Fetch and ListOffsets the driver and the tasks
    send asks for read_committed, unless read_uncommitted is set."""
    topic, expected = timed_topic

    def levels(**options) -> dict[str, set[int]]:
        with KafkaCaptureProxy(kafka) as proxy:
            assert rows_of(source(spark, proxy.bootstrap, subscribe=topic, includeHeaders="true",
                                  **options)) == expected
            requests = proxy.requests()
        seen: dict[str, set[int]] = {"fetch": set(), "list_offsets": set()}
        for frame in requests:
            if frame.api_key in (API_FETCH, API_LIST_OFFSETS):
                _, body = decode_request(frame.data)
                seen["fetch" if frame.api_key == API_FETCH else "list_offsets"].add(body.isolation_level)
        return seen

    assert levels() == {"fetch": {1}, "list_offsets": {1}}
    assert levels(**{"kafka.isolation.level": "read_uncommitted"}) == {"fetch": {0}, "list_offsets": {0}}


def _transactional_abort_checks(spark, bootstrap, topic, producer):
    """Committed, aborted, committed: read_committed (the default) sees only the committed
    records; read_uncommitted sees all of them."""
    values = {}
    for n, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"t{n}-{i}".encode(), partition=0)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
        values[n] = [f"t{n}-{i}".encode() for i in range(5)]

    def read(**options):
        return sorted(bytes(r.value) for r in source(spark, bootstrap, subscribe=topic, **options)
                      .select("value").collect())

    assert read() == sorted(values[0] + values[2])
    assert read(**{"kafka.isolation.level": "read_committed"}) == sorted(values[0] + values[2])
    assert read(**{"kafka.isolation.level": "read_uncommitted"}) == sorted(values[0] + values[1] + values[2])


# -- 5: a topic created later matching subscribePattern, in a streaming query ----------------

def test_stream_picks_up_new_topic_matching_pattern_from_earliest(spark, kafka, tmp_path):
    prefix = unique("late")
    first = create_topic(kafka, f"{prefix}-a", partitions=2)
    before = produce(kafka, first, make_records({0: 5, 1: 5}))
    # Partition 0 from its latest offset (its first 5 records are skipped), 1 from earliest.
    df = source(spark, kafka, streaming=True, subscribePattern=f"{prefix}-.*", includeHeaders="true",
                startingOffsets={first: {"0": -1, "1": -2}})
    seen = []
    query = (df.writeStream.foreachBatch(lambda batch, _: seen.extend(rows_of(batch)))
             .option("checkpointLocation", str(tmp_path / "cp"))
             .trigger(processingTime="300 milliseconds").start())
    try:
        def running():
            if not query.isActive:
                raise AssertionError(f"query died: {query.exception()}")
            return query.recentProgress
        wait_for(running, 60, "the query's first progress")
        expected = [row for row in before if row[3] == 1]
        expected += produce(kafka, first, make_records({0: 4, 1: 3}, start=5, tag="x"))
        second = create_topic(kafka, f"{prefix}-b", partitions=3)
        expected += produce(kafka, second, make_records({0: 6, 1: 2, 2: 5}))

        def all_seen():
            running()
            return len(seen) >= len(expected)
        wait_for(all_seen, 60, "the new topic's records")
        time.sleep(1)  # anything extra would show up now
    finally:
        query.stop()
    assert sorted(seen, key=_order) == sorted(expected, key=_order)


# -- 6: failOnDataLoss ---------------------------------------------------------------------

def test_fail_on_data_loss_after_retention(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("retention"), partitions=1,
                         config={"segment.bytes": "1024", "retention.bytes": "2048"})
    expected = produce(kafka, topic, make_records({0: 80}), flush_every=4)

    def settled_start():
        start = log_offsets(kafka, topic, [0], EARLIEST)[0]
        time.sleep(0.5)  # retention runs every 200 ms: a stable start is final
        return start if start > 0 and start == log_offsets(kafka, topic, [0], EARLIEST)[0] else 0
    start = wait_for(settled_start, 20, "retention to delete old segments")
    end = log_offsets(kafka, topic, [0], LATEST)[0]
    assert end == 80 and 0 < start < end
    survivors = [r for r in expected if r[4] >= start]
    below = {topic: {"0": 0}}

    # Batch.
    with pytest.raises(Exception) as info:
        source(spark, kafka, subscribe=topic, startingOffsets=below).collect()
    message = error_text(info)
    assert f"{topic}-0" in message and "offset 0" in message and f"[{start}, {end}]" in message, message
    assert "failOnDataLoss" in message
    df = source(spark, kafka, subscribe=topic, startingOffsets=below, failOnDataLoss="false",
                includeHeaders="true")
    assert rows_of(df) == survivors

    # Streaming.
    df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets=below, includeHeaders="true")
    with pytest.raises(Exception) as info:
        run_available_now(df, tmp_path / "fail-out", tmp_path / "fail-cp")
    message = error_text(info)
    assert f"{topic}-0" in message and "offset 0" in message and f"[{start}, {end}]" in message, message
    df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets=below, includeHeaders="true",
                failOnDataLoss="false")
    run_available_now(df, tmp_path / "out", tmp_path / "cp")
    assert rows_of(spark.read.parquet(str(tmp_path / "out"))) == survivors


def test_data_loss_is_logged_when_the_stream_goes_on(kafka, caplog):
    """failOnDataLoss false: the stream reader goes on past a start offset beyond the
    partition's end, from that end, and says so in a warning. PySpark collects no logs
    from the worker that runs a stream's source (they reach its stderr only), so this
    drives the reader itself against the broker; test_spark_kafka_format.py has the query."""
    topic = create_topic(kafka, unique("logged"), partitions=1)
    produce(kafka, topic, make_records({0: 6}))
    reader = SluiceStreamReader({"kafka.bootstrap.servers": kafka, "subscribe": topic, "failOnDataLoss": "false",
                                 "startingOffsets": json.dumps({topic: {"0": 1000}})})
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadAllAvailable())
        with caplog.at_level(logging.WARNING, "spark_connector"):
            assert reader.partitions(start, end) == []
    finally:
        reader.stop()
    assert (start, end) == ({topic: {"0": 1000}}, {topic: {"0": 6}})
    assert [r.message for r in caplog.records if f"data loss: {topic}-0" in r.message
            and "read on from offset 6" in r.message], caplog.text


def test_a_task_reading_a_recreated_topic_reports_data_loss(kafka):
    """A topic deleted and created again between planning and reading: the task notices
    by the topic id (its client would follow the new topic's id to the new records at the
    same offsets) and reports data loss, or with failOnDataLoss false reads nothing of
    the range, whose records are gone. Spark offers no pause between planning and
    reading, so this plans with the batch reader and reads as a task does, in this
    process, against the broker."""
    topic = create_topic(kafka, unique("recreated-task"))
    produce(kafka, topic, make_records({0: 8}))
    ranges = {fail: SluiceBatchReader(parse_source_options(
        {"kafka.bootstrap.servers": kafka, "subscribe": topic, "failOnDataLoss": fail}, batch=True)).partitions()
        for fail in ("true", "false")}
    assert [(r.from_offset, r.until_offset) for r in ranges["true"] + ranges["false"]] == [(0, 8), (0, 8)]
    recreate_topic(kafka, topic)
    produce(kafka, topic, make_records({0: 8}, tag="again"))
    with pytest.raises(SluiceDataLossError, match=f"topic '{topic}' was deleted and created again"):
        list(read_range(ranges["true"][0]))
    assert list(read_range(ranges["false"][0])) == []


# -- 7: configuration mistakes ---------------------------------------------------------------

@pytest.mark.parametrize("options, named", [
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "nocolon", "subscribe": "t"}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "assign": '{"t": [0]}'}, "assign"),
    ({"kafka.bootstrap.servers": "B"}, "subscribe"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "startingOffsets": '{"t": {"0": 1'}, "startingOffsets"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "endingOffsets": "[1, 2]"}, "endingOffsets"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "startingOffsets": '{"t": {"0": -1}}'},
     "startingOffsets"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "startingOffsets": "latest"}, "startingOffsets"),
    ({"kafka.bootstrap.servers": "B", "assign": "t:0"}, "assign"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "minPartitions": "zero"}, "minPartitions"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "startingOffsets": "group"}, "kafka.group.id"),
])
def test_batch_option_mistakes_name_the_option(spark, kafka, options, named):
    options = {k: v.replace("B", kafka) if k == "kafka.bootstrap.servers" else v for k, v in options.items()}
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        reader = spark.read.format("sluice")
        for name, value in options.items():
            reader = reader.option(name, value)
        reader.load().collect()
    assert named in headline(info), error_text(info)[:600]
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("options, named", [
    ({"subscribe": "t"}, "kafka.bootstrap.servers"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "subscribePattern": "t.*"}, "subscribePattern"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "endingOffsets": "latest"}, "endingOffsets"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
    ({"kafka.bootstrap.servers": "B", "subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
])
def test_stream_option_mistakes_name_the_option(spark, kafka, tmp_path, options, named):
    options = {k: v.replace("B", kafka) if k == "kafka.bootstrap.servers" else v for k, v in options.items()}
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        reader = spark.readStream.format("sluice")
        for name, value in options.items():
            reader = reader.option(name, value)
        query = (reader.load().writeStream.format("noop")
                 .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
        try:
            query.awaitTermination(60)
        finally:
            query.stop()
    assert named in headline(info), error_text(info)[:600]
    assert time.monotonic() - started < 30


def test_unreachable_broker_fails_in_bounded_time(spark):
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        spark.read.format("sluice").option("kafka.bootstrap.servers", f"127.0.0.1:{port}") \
            .option("subscribe", "t").load().collect()
    elapsed = time.monotonic() - started
    assert "kafka.bootstrap.servers" in error_text(info) and f"127.0.0.1:{port}" in error_text(info)
    assert elapsed < 60, elapsed


# -- 8: librdkafka's mock cluster ------------------------------------------------------------

def test_mock_cluster_batch_read_exact(spark, mock_cluster):
    topic = unique("spark-mock")
    expected = produce(mock_cluster, topic, make_records({0: 30, 1: 20, 2: 25, 3: 10}, timestamps=True),
                       report_times=False)
    assert {row[3] for row in expected} == {0, 1, 2, 3}
    df = source(spark, mock_cluster, subscribe=topic, includeHeaders="true")
    assert rows_of(df) == expected
    df = source(spark, mock_cluster, subscribe=topic, includeHeaders="true", minPartitions="6",
                startingOffsets={topic: {"0": 10, "1": -2, "2": -2, "3": -2}},
                endingOffsets={topic: {"0": -1, "1": 15, "2": -1, "3": -1}})
    assert df.rdd.getNumPartitions() >= 6
    assert rows_of(df) == [r for r in expected if not (r[3] == 0 and r[4] < 10) and not (r[3] == 1 and r[4] >= 15)]


