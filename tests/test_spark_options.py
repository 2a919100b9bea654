"""Spark's Kafka options in `format("sluice")`: each works as Spark documents it, or is
refused at load() (reads) or save()/start() (writes) with an error naming it; options
nobody knows are warnings in the worker's log.

Real Spark (the shared local[2] session), a real broker process, and, to see what
reaches the wire, tests/kafka_capture.py's recording proxy in front of it. Tests that
make a broker fall silent (SIGSTOP) get a broker of their own.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from contextlib import contextmanager

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka")

from spark_connector import offsets_behind_latest  # noqa: E402
from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.kafka_capture import API_FETCH, API_METADATA, API_PRODUCE, KafkaCaptureProxy  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.test_spark_source import (QUERY_TIMEOUT, _order, create_topic, headline,  # noqa: E402
                                     make_records, produce, rows_of, source, unique)
from sluice_client import Client  # noqa: E402
from wire.protocol import decode_request  # noqa: E402

API_LIST_OFFSETS = 2
NOWHERE = "127.0.0.1:9"  # never connected to: these options fail before any connection


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("options-broker") / "data") as proc:
        yield proc.bootstrap_servers


@pytest.fixture
def worker_logs(spark):
    """Python workers' log records, collected by Spark (spark.tvf.python_worker_logs())."""
    spark.conf.set("spark.sql.pyspark.worker.logging.enabled", "true")
    try:
        yield lambda: [row.msg for row in spark.tvf.python_worker_logs().select("msg").collect()]
    finally:
        spark.conf.unset("spark.sql.pyspark.worker.logging.enabled")


def reader(spark, streaming: bool, options: dict):
    result = (spark.readStream if streaming else spark.read).format("sluice")
    for name, value in options.items():
        result = result.option(name, value)
    return result


def driver_requests(proxy: KafkaCaptureProxy, api_key: int, direction: str = "request") -> list:
    """Frames of one API between the driver (client id sluice-spark) and the broker."""
    frames = [f for f in proxy.frames() if f.api_key == api_key and f.direction == direction]
    if direction == "request":
        return [f for f in frames if decode_request(f.data)[0].client_id == "sluice-spark"]
    return frames


def offsets_json(value) -> dict:
    return json.loads(value) if isinstance(value, str) else value


@contextmanager
def running(query):
    try:
        yield query
    finally:
        query.stop()


def process_all_available(query, timeout: float = QUERY_TIMEOUT) -> None:
    """query.processAllAvailable(), bounded: it has no timeout of its own."""
    failure = []

    def run():
        try:
            query.processAllAvailable()
        except Exception as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        query.stop()
        raise AssertionError(f"processAllAvailable did not return within {timeout} s")
    if failure:
        raise failure[0]


# -- mistakes are errors at load() -------------------------------------------------------------

LOAD_ERRORS = [
    ({"subscribe": "t"}, ["kafka.bootstrap.servers", "required"]),
    ({"kafka.security.protocol": "TLS"}, ["kafka.security.protocol", "SASL_SSL"]),
    ({"kafka.security.protocol": "SASL_PLAINTEXT"}, ["kafka.sasl.mechanism", "GSSAPI"]),
    ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "OAUTHBEARER"},
     ["kafka.sasl.mechanism", "not supported"]),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
     ["kafka.ssl.truststore.location", "cannot read"]),
    ({"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"},
     ["kafka.ssl.truststore.location", "security.protocol is PLAINTEXT"]),
    ({"kafka.sasl.jaas.config": "PlainLoginModule required;"},
     ["kafka.sasl.jaas.config", "security.protocol is PLAINTEXT"]),
    ({"kafka.auto.offset.reset": "earliest"}, ["kafka.auto.offset.reset", "startingOffsets"]),
    ({"kafka.key.deserializer": "StringDeserializer"}, ["kafka.key.deserializer", "DataFrame operations"]),
    ({"kafka.value.deserializer": "StringDeserializer"}, ["kafka.value.deserializer", "DataFrame operations"]),
    ({"kafka.enable.auto.commit": "true"}, ["kafka.enable.auto.commit", "not supported"]),
    ({"kafka.interceptor.classes": "com.example.Spy"}, ["kafka.interceptor.classes", "not supported"]),
    ({"minOffsetsPerTrigger": "50", "maxOffsetsPerTrigger": "10"},
     ["minOffsetsPerTrigger", "higher than", "maxOffsetsPerTrigger"]),
    ({"minOffsetsPerTrigger": "0"}, ["minOffsetsPerTrigger", "at least 1"]),
    ({"minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"}, ["maxTriggerDelay", "duration"]),
    ({"maxRecordsPerPartition": "0"}, ["maxRecordsPerPartition", "at least 1"]),
    ({"kafkaConsumer.pollTimeoutMs": "2m"}, ["kafkaConsumer.pollTimeoutMs", "integer"]),
    ({"kafkaConsumer.pollTimeoutMs": "1000", "kafka.fetch.max.wait.ms": "1000"},
     ["kafka.fetch.max.wait.ms", "below", "kafkaConsumer.pollTimeoutMs"]),
    ({"fetchOffset.numRetries": "-1"}, ["fetchOffset.numRetries", "at least 0"]),
    ({"fetchOffset.retryIntervalMs": "10ms"}, ["fetchOffset.retryIntervalMs", "integer"]),
    ({"kafka.request.timeout.ms": "0"}, ["kafka.request.timeout.ms", "at least 1"]),
    ({"kafka.retries": "many"}, ["kafka.retries", "integer"]),
    ({"kafka.max.partition.fetch.bytes": "0"}, ["kafka.max.partition.fetch.bytes", "at least 1"]),
    ({"kafka.isolation.level": "read_some"}, ["kafka.isolation.level"]),
    ({"startingOffsetsByTimestampStrategy": "closest"}, ["startingOffsetsByTimestampStrategy"]),
    ({"startingOffsets": '{"t": {"0": 1'}, ["startingOffsets", "JSON"]),
    ({"includeHeaders": "yes"}, ["includeHeaders", "true or false"]),
]


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "stream"])
@pytest.mark.parametrize("options, said", LOAD_ERRORS, ids=[next(iter(o)) + "-" + str(i)
                                                             for i, (o, _) in enumerate(LOAD_ERRORS)])
def test_option_mistakes_fail_at_load(spark, streaming, options, said):
    options = {"kafka.bootstrap.servers": NOWHERE, "subscribe": "t", **options}
    if "kafka.bootstrap.servers" in said:
        del options["kafka.bootstrap.servers"]
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        reader(spark, streaming, options).load()
    for text in said:
        assert text in str(info.value), (text, str(info.value)[-600:])
    # The message comes first, the traceback below it.
    assert said[0] in headline(info), str(info.value)[:600]
    assert "Traceback (most recent call last)" in str(info.value)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("options, said", [
    ({"kafka.security.protocol": "SASL_SSL"}, ["kafka.sasl.mechanism", "GSSAPI"]),
    ({"kafka.security.protocol": "SSL", "kafka.ssl.keystore.location": "/etc/kafka/keystore.jks"},
     ["kafka.ssl.keystore.location", "cannot read"]),
    ({"kafka.sasl.mechanism": "PLAIN"}, ["kafka.sasl.mechanism", "security.protocol is PLAINTEXT"]),
    ({"kafka.key.serializer": "StringSerializer"}, ["kafka.key.serializer", "DataFrame operations"]),
    ({"kafka.value.serializer": "StringSerializer"}, ["kafka.value.serializer", "DataFrame operations"]),
    ({"kafka.interceptor.classes": "com.example.Spy"}, ["kafka.interceptor.classes", "not supported"]),
    ({"kafka.compression.type": "brotli"}, ["kafka.compression.type"]),
    ({"kafka.retries": "-2"}, ["kafka.retries", "at least 0"]),
    ({"includeHeaders": "maybe"}, ["includeHeaders", "true or false"]),
])
def test_sink_option_mistakes_fail_at_save_and_start(spark, tmp_path, options, said):
    rows = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = rows.write.format("sluice").mode("append")
    for name, value in {"kafka.bootstrap.servers": NOWHERE, "topic": "t", **options}.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception) as info:
        writer.save()
    for text in said:
        assert text in str(info.value), (text, str(info.value)[-600:])
    assert said[0] in headline(info), str(info.value)[:600]

    stream = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value")
    stream_writer = stream.writeStream.format("sluice").option("checkpointLocation", str(tmp_path / "cp"))
    for name, value in {"kafka.bootstrap.servers": NOWHERE, "topic": "t", **options}.items():
        stream_writer = stream_writer.option(name, value)
    with pytest.raises(Exception) as info:
        with running(stream_writer.start()) as query:
            query.awaitTermination(60)
    for text in said:
        assert text in str(info.value), (text, str(info.value)[-600:])
    assert said[0] in headline(info), str(info.value)[:600]


# -- what is accepted without effect is a warning ------------------------------------------------

def test_unknown_and_ineffective_source_options_are_warnings(spark, kafka, tmp_path, worker_logs):
    topic = create_topic(kafka, unique("warned"), partitions=2)
    expected = produce(kafka, topic, make_records({0: 6, 1: 4}), headers=False)
    marker = uuid.uuid4().hex[:8]
    prefix = f"prefix-{marker}"
    options = {"subscribe": topic, f"kafka.linger{marker}.ms": "5", f"someOption{marker}": "x",
               "groupIdPrefix": prefix, "maxTriggerDelay": "5s", "maxOffsetsPerTrigger": "3"}

    assert rows_of(source(spark, kafka, **options)) == expected  # a batch query
    seen = []
    query = (source(spark, kafka, streaming=True, startingOffsets="earliest", **options).writeStream
             .foreachBatch(lambda batch, _: seen.extend(rows_of(batch)))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert sorted(seen, key=_order) == expected

    logs = worker_logs()
    for text in (f"option 'kafka.linger{marker}.ms' is not a Kafka setting the sluice connector applies",
                 f"option 'someoption{marker}' is unknown to the sluice connector",
                 "option 'groupIdPrefix' has no effect",
                 "option 'maxTriggerDelay' has no effect without 'minOffsetsPerTrigger'",
                 "option 'maxOffsetsPerTrigger' applies to streaming queries only"):
        assert any(text in line for line in logs), (text, logs[-20:])
    with Client(kafka) as client:  # the prefix names no group: the source uses none
        assert not [g for g in client.admin.list_groups() if g.group_id.startswith(prefix)]


def test_unknown_sink_options_are_warnings_and_client_id_reaches_the_wire(spark, kafka, worker_logs):
    topic = create_topic(kafka, unique("sink-settings"), partitions=1)
    client_id = unique("sink-client")
    rows = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(5)], "key string, value string")
    with KafkaCaptureProxy(kafka) as proxy:
        (rows.write.format("sluice").mode("append").option("kafka.bootstrap.servers", proxy.bootstrap)
         .option("topic", topic).option("deliveryGuarantee", "at_least_once")
         .option("kafka.client.id", client_id).option("kafka.security.protocol", "PLAINTEXT")
         .option("kafka.acks", "all").option("includeHeaders", "true").save())
        produced = [decode_request(f.data)[0].client_id for f in proxy.requests() if f.api_key == API_PRODUCE]
    assert produced and set(produced) == {client_id}
    assert sorted(bytes(r.value) for r in source(spark, kafka, subscribe=topic).collect()) == \
        sorted(f"v{i}".encode() for i in range(5))
    assert any("option 'kafka.acks' is not a Kafka setting the sluice connector applies" in line
               for line in worker_logs())


# -- kafka.* client settings reach the wire ------------------------------------------------------

def test_kafka_client_settings_reach_the_wire(spark, kafka):
    topic = create_topic(kafka, unique("wire-settings"), partitions=1)
    expected = produce(kafka, topic, make_records({0: 40}), flush_every=4)
    client_id = unique("client")
    with KafkaCaptureProxy(kafka) as proxy:
        df = source(spark, proxy.bootstrap, subscribe=topic, includeHeaders="true",
                    **{"kafka.client.id": client_id, "kafka.fetch.max.wait.ms": "123",
                       "kafka.max.partition.fetch.bytes": "4096", "kafka.fetch.max.bytes": "1000"})
        assert rows_of(df) == expected
        requests = [decode_request(f.data) for f in proxy.requests()]
    assert requests and {header.client_id for header, _ in requests} == {client_id}
    fetches = [body for header, body in requests if header.request_api_key == API_FETCH]
    assert len(fetches) > 1  # 1000 bytes at a time: the 40 records take several fetches
    assert {f.max_wait_ms for f in fetches} == {123}
    assert {f.max_bytes for f in fetches} == {1000}  # the smaller of the two limits
    assert {p.partition_max_bytes for f in fetches for t in f.topics for p in t.partitions} == {1000}


@pytest.mark.parametrize("settings, attempts, interval", [
    ({"fetchOffset.numRetries": "0"}, (1, 1), None),
    ({"fetchOffset.numRetries": "3", "fetchOffset.retryIntervalMs": "300"}, (4, 4), 0.3),
    ({"kafka.retries": "2", "kafka.retry.backoff.ms": "300", "kafka.retry.backoff.max.ms": "300"}, (3, 3), 0.3),
    ({"kafka.retries": "100", "kafka.retry.backoff.ms": "200", "kafka.retry.backoff.max.ms": "200",
      "kafka.default.api.timeout.ms": "1000"}, (3, 6), 0.2),
], ids=["fetchOffset-no-retry", "fetchOffset-3x300ms", "kafka.retries-2x300ms", "default.api.timeout"])
def test_driver_retries_follow_the_options(spark, kafka, settings, attempts, interval):
    """The driver asks for the offsets of a topic that does not exist (a retriable error):
    one Metadata request per attempt, as many attempts and as far apart as the options say."""
    missing = unique("missing")
    with KafkaCaptureProxy(kafka) as proxy:
        with pytest.raises(Exception) as info:
            source(spark, proxy.bootstrap, assign={missing: [0]}, **settings).collect()
        asked = [f.timestamp for f in driver_requests(proxy, API_METADATA)
                 if missing in [t.name for t in decode_request(f.data)[1].topics or ()]]
    assert missing in str(info.value)
    assert attempts[0] <= len(asked) <= attempts[1], asked
    if interval is not None:
        gaps = [b - a for a, b in zip(asked, asked[1:])]
        assert all(gap >= interval * 0.9 for gap in gaps), gaps


@contextmanager
def silenced(broker: BrokerProcess):
    """The broker process stopped (SIGSTOP): its socket accepts connections, nothing answers."""
    broker.pause()
    try:
        yield
    finally:
        broker.resume()


def test_request_timeout_bounds_a_silent_broker(spark, broker):
    topic = create_topic(broker.bootstrap_servers, unique("silent"), partitions=1)
    with silenced(broker):
        started = time.monotonic()
        with pytest.raises(Exception) as info:
            source(spark, broker.bootstrap_servers, subscribe=topic,
                   **{"kafka.request.timeout.ms": "1000", "kafka.retries": "0"}).collect()
        elapsed = time.monotonic() - started
    assert f"kafka.bootstrap.servers={broker.bootstrap_servers}" in str(info.value)
    assert "no response" in str(info.value)
    assert elapsed < 20, elapsed  # Kafka's default request timeout alone is 30 s


def test_connection_setup_timeout_bounds_a_connect(spark):
    """A listener whose accept queue is full drops new connection attempts: a connect
    hangs until the client gives up."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(0)
        address = server.getsockname()
        fillers = []
        try:
            for _ in range(4):  # more than the queue holds; the last ones stay pending
                filler = socket.socket()
                filler.setblocking(False)
                filler.connect_ex(address)
                fillers.append(filler)
            started = time.monotonic()
            with pytest.raises(Exception) as info:
                source(spark, f"127.0.0.1:{address[1]}", subscribe="t",
                       **{"kafka.socket.connection.setup.timeout.ms": "500", "kafka.retries": "0"}).collect()
            elapsed = time.monotonic() - started
        finally:
            for filler in fillers:
                filler.close()
    assert f"kafka.bootstrap.servers=127.0.0.1:{address[1]}" in str(info.value)
    assert elapsed < 8, elapsed  # the default is 10 s per attempt


def test_poll_timeout_fails_a_task_whose_broker_stops_answering(spark, broker):
    topic = create_topic(broker.bootstrap_servers, unique("poll"), partitions=1)
    with Client(broker.bootstrap_servers) as client:
        for i in range(300):  # one batch each; fetched one at a time below
            client.producer.produce(topic, 0, [(None, b"x" * 100, [], None)])
    stopped = threading.Event()
    with KafkaCaptureProxy(broker.bootstrap_servers) as proxy:
        def stop_at_first_fetch():
            wait_for(lambda: any(f.api_key == API_FETCH for f in proxy.requests()), 60,
                     "a task's first fetch", interval=0.005)
            broker.pause()
            stopped.set()

        watcher = threading.Thread(target=stop_at_first_fetch, daemon=True)
        watcher.start()
        try:
            started = time.monotonic()
            with pytest.raises(Exception) as info:
                source(spark, proxy.bootstrap, subscribe=topic,
                       **{"kafkaConsumer.pollTimeoutMs": "2000", "kafka.max.partition.fetch.bytes": "1"}).collect()
            elapsed = time.monotonic() - started
        finally:
            watcher.join(70)
            broker.resume()
    assert stopped.is_set()
    assert f"{topic}-0" in headline(info) and "kafkaConsumer.pollTimeoutMs=2000" in headline(info)
    assert elapsed < 25, elapsed  # the request timeout alone is 30 s


# -- how offsets are cut into batches and Spark partitions --------------------------------------

def test_max_records_per_partition_splits_ranges(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("max-records"), partitions=2)
    expected = produce(kafka, topic, make_records({0: 20, 1: 9}), headers=False)

    def sizes(df) -> list[int]:
        return df.rdd.glom().map(len).collect()

    df = source(spark, kafka, subscribe=topic, maxRecordsPerPartition="6")
    assert rows_of(df) == expected
    assert sorted(sizes(df)) == [4, 5, 5, 5, 5, 5]  # 20 in four pieces, 9 in two, none above 6
    df = source(spark, kafka, subscribe=topic, maxRecordsPerPartition="6", minPartitions="10")
    assert rows_of(df) == expected
    assert len(sizes(df)) >= 10 and max(sizes(df)) <= 6

    batches = []
    query = (source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                    maxRecordsPerPartition="4", maxOffsetsPerTrigger="15").writeStream
             .foreachBatch(lambda batch, _: batches.append((rows_of(batch), sizes(batch))))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert sorted((row for rows, _ in batches for row in rows), key=_order) == expected
    assert all(max(parts, default=0) <= 4 for _, parts in batches), batches
    assert all(sum(parts) == len(rows) for rows, parts in batches)


def test_max_offsets_per_trigger_never_starves_a_small_partition(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("starve"), partitions=2)
    expected = produce(kafka, topic, make_records({0: 600, 1: 3}), headers=False)
    per_batch = []
    query = (source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="100").writeStream
             .foreachBatch(lambda batch, _: per_batch.append(rows_of(batch)))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert sorted((row for rows in per_batch for row in rows), key=_order) == expected
    per_batch = [rows for rows in per_batch if rows]
    # 600 beside 3: a proportional share of 100 would be 0 for the small partition; it gets
    # one record in each of the first three triggers, which still read 100 records each.
    assert [sum(1 for row in rows if row[3] == 1) for rows in per_batch[:3]] == [1, 1, 1]
    assert [len(rows) for rows in per_batch] == [100] * 6 + [3]


def append(bootstrap: str, topic: str, numbers) -> None:
    """Values b"0", b"1", ... as one record batch: readers see all of them or none."""
    with Client(bootstrap) as client:
        client.producer.produce(topic, 0, [(None, b"%d" % i, [], None) for i in numbers])


def test_min_offsets_per_trigger_waits_for_records_or_max_trigger_delay(spark, kafka, tmp_path):
    def alive(query):
        if not query.isActive:
            raise AssertionError(f"query died: {query.exception()}")
        return True

    def start(topic, bootstrap, delay, seen, name):
        df = source(spark, bootstrap, streaming=True, subscribe=topic, startingOffsets="earliest",
                    minOffsetsPerTrigger="50", maxTriggerDelay=delay)
        query = (df.writeStream.foreachBatch(lambda batch, _: seen.append(rows_of(batch)))
                 .option("checkpointLocation", str(tmp_path / name))
                 .trigger(processingTime="200 milliseconds").start())
        # A new query's first trigger goes ahead and Spark runs batch 0, here empty.
        wait_for(lambda: alive(query) and seen, QUERY_TIMEOUT, "the query's first batch")
        assert seen == [[]]
        return query

    # Held back: 10 records stay unread through triggers, until 55 make the minimum.
    held = create_topic(kafka, unique("min-held"), partitions=1)
    seen = []
    with KafkaCaptureProxy(kafka) as proxy, running(start(held, proxy.bootstrap, "1h", seen, "held")) as query:
        append(kafka, held, range(10))
        asked = len(driver_requests(proxy, API_LIST_OFFSETS))
        # Four more ListOffsets: a batch planned on the first (latestOffset, then two in
        # partitions()) would have run before the fourth (the next trigger's latestOffset).
        wait_for(lambda: alive(query) and len(driver_requests(proxy, API_LIST_OFFSETS)) >= asked + 4,
                 QUERY_TIMEOUT, "triggers after the first records")
        assert seen == [[]]
        append(kafka, held, range(10, 55))
        wait_for(lambda: alive(query) and len(seen) > 1, QUERY_TIMEOUT, "the held records")
    assert [[(row[1], row[4]) for row in rows] for rows in seen[1:]] == [[(b"%d" % i, i) for i in range(55)]]

    # Released: after maxTriggerDelay a trigger goes ahead with fewer records.
    delayed = create_topic(kafka, unique("min-delay"), partitions=1)
    seen = []
    with running(start(delayed, kafka, "1s", seen, "delayed")) as query:
        append(kafka, delayed, range(10))
        wait_for(lambda: alive(query) and len(seen) > 1, QUERY_TIMEOUT, "the delayed batch")
    assert [[(row[1], row[4]) for row in rows] for rows in seen[1:]] == [[(b"%d" % i, i) for i in range(10)]]


def test_available_now_does_not_wait_for_min_offsets_per_trigger(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("min-available-now"), partitions=2)
    expected = produce(kafka, topic, make_records({0: 20, 1: 10}), headers=False)
    seen = []
    query = (source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                    minOffsetsPerTrigger="1000", maxTriggerDelay="1h").writeStream
             .foreachBatch(lambda batch, _: seen.extend(rows_of(batch)))
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    assert sorted(seen, key=_order) == expected


# -- progress: how far behind, and the consumer group ------------------------------------------

def test_progress_shows_offsets_behind_latest(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("behind"), partitions=2)
    produce(kafka, topic, make_records({0: 30, 1: 10}), headers=False)
    query = (source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="20").writeStream.format("noop")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT)
    progress = [p["sources"][0] for p in query.recentProgress if p["numInputRows"] > 0]
    assert [offsets_json(p["latestOffset"]) for p in progress] == [{topic: {"0": 30, "1": 10}}] * 2
    assert [offsets_json(p["endOffset"]) for p in progress] == [{topic: {"0": 15, "1": 5}},
                                                                 {topic: {"0": 30, "1": 10}}]
    assert [offsets_behind_latest(p) for p in progress] == [
        {"minOffsetsBehindLatest": 5, "maxOffsetsBehindLatest": 15, "avgOffsetsBehindLatest": 10.0},
        {"minOffsetsBehindLatest": 0, "maxOffsetsBehindLatest": 0, "avgOffsetsBehindLatest": 0.0}]


def test_group_matches_the_last_batch_when_the_query_stops(spark, kafka, tmp_path):
    topic = create_topic(kafka, unique("group-stop"), partitions=4)
    group = unique("group-stop")
    partitions = [(topic, p) for p in range(4)]
    checkpoint = str(tmp_path / "cp")

    def run_until_caught_up() -> dict:
        """Start, process what there is, stop between batches; the last batch's end."""
        df = source(spark, kafka, streaming=True, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger="30", **{"kafka.group.id": group})
        with running(df.writeStream.format("noop").option("checkpointLocation", checkpoint)
                     .trigger(processingTime="300 milliseconds").start()) as query:
            process_all_available(query)
            return offsets_json(query.lastProgress["sources"][0]["endOffset"])

    def committed() -> dict:
        with Client(kafka) as client:
            answers = client.consumer.fetch_offsets(group, partitions)
        return {t: {str(p): answers[(t, p)].offset for (t, p) in partitions} for t in {topic}}

    produce(kafka, topic, make_records({p: 25 for p in range(4)}), headers=False)
    end = run_until_caught_up()
    assert end == {topic: {str(p): 25 for p in range(4)}}
    assert committed() == end

    produce(kafka, topic, make_records({0: 7, 2: 40}, start=25), headers=False)
    end = run_until_caught_up()
    assert end == {topic: {"0": 32, "1": 25, "2": 65, "3": 25}}
    assert committed() == end
