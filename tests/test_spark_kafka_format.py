"""Spark's own Kafka connector (spark-sql-kafka-0-10, `format("kafka")`) against the real
broker process, side by side with `format("sluice")`.

The connector is put on the shared session's classpath by tests/conftest.py (fixture
`spark_kafka`; the version is sluice/maven.py's SPARK_KAFKA_CONNECTOR). When Maven cannot
provide it these tests fail with Maven's reason; the other Spark tests run all the same.

- Batch: the same query with both formats gives the same rows (key, value, topic,
  partition, offset, timestamp, timestampType, headers) on two topics (fixture `topics`):
  keyed records with headers in gzip, lz4, snappy and zstd batches, committed and
  aborted transactions, one left open, an empty partition; and a LogAppendTime topic.
  Compared under read_committed and read_uncommitted, each set explicitly: the two
  formats' defaults differ (Spark's Kafka source inherits the Kafka consumer's
  read_uncommitted), as a test shows. `failOnDataLoss` after retention, both ways.
- Streaming: the same availableNow query (several micro-batches) with both formats into
  the memory sink gives the same rows.
- What a query names that is not there: a subscribed topic that does not exist fails
  both, batch and stream; assigned partitions that do not exist are read by neither;
  offsets or timestamps per partition that leave one out or name a stranger fail both.
- Data loss: start offsets past the end, batch and stream, and a topic deleted and
  created again under a stream, with failOnDataLoss true and false.
- Writing: Spark's Kafka sink (`df.write` and `writeStream`) into the broker; read back
  with `format("sluice")` and with confluent-kafka, the same keys, values and headers;
  without a partition column, keyed records land where Sluice's sink puts them.
- Both sinks, the same write: batch save modes (the default appends, Overwrite and
  Ignore are refused); Update output mode, which Spark's sink appends and Sluice's
  refuses at start() (PySpark cannot declare it), its Complete mode writing the same
  rows; into a missing topic, created where the broker allows it
  (the same rows), refused naming it where it does not; what Sluice's sink leaves
  besides is internal, so that subscribePattern("__.*") reads nothing with either.
"""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Producer  # noqa: E402

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from spark_connector import SluiceOptionError  # noqa: E402
from tests.test_spark_options import offsets_json  # noqa: E402
from tests.test_spark_sink import consume_to_end  # noqa: E402
from tests.test_spark_source import (_order, create_topic, error_text, headline, log_offsets,  # noqa: E402
                                     make_records, produce, recreate_topic, rows_of, unique)
from sluice_client import EARLIEST, SET_CONFIG, TOPIC_RESOURCE, Client  # noqa: E402
from wire.internal_topics import SINK_INTENTS_TOPIC  # noqa: E402

QUERY_TIMEOUT = 120  # seconds any one streaming query may take
FORMATS = ("kafka", "sluice")


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """One broker process for the module; retention checked often, for the data-loss test."""
    directory = tmp_path_factory.mktemp("kafka-format-broker")
    config = directory / "server.properties"
    config.write_text("log.retention.check.interval.ms=200\n")
    with BrokerProcess(directory / "data", config_file=str(config)) as proc:
        yield proc.bootstrap_servers


def transactional_producer(bootstrap: str) -> Producer:
    # A long transaction timeout: the open transaction stays open for the whole module.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn"),
                         "compression.type": "zstd", "linger.ms": 5, "transaction.timeout.ms": 600_000})
    producer.init_transactions(10)
    return producer


def transaction(producer: Producer, topic: str, tag: str, partitions: list[int], count: int) -> list[tuple]:
    """Begin a transaction and write `count` records (keys, some headers) round-robin over
    `partitions`; the rows as the delivery reports give them (rows as in
    tests/test_spark_source.py, headers included). The caller ends the transaction."""
    rows = []
    producer.begin_transaction()
    for i in range(count):
        key, value = f"tk-{tag}-{i}".encode(), f"tv-{tag}-{i}".encode()
        headers = [("txn", tag.encode())] if i % 2 else []

        def report(err, msg, key=key, value=value, headers=headers):
            assert err is None, err
            kind, stamp = msg.timestamp()
            rows.append((key, value, msg.topic(), msg.partition(), msg.offset(), stamp * 1000,
                         0 if kind == confluent_kafka.TIMESTAMP_CREATE_TIME else 1, tuple(headers)))
        producer.produce(topic, key=key, value=value, partition=partitions[i % len(partitions)],
                         headers=headers or None, on_delivery=report)
    assert producer.flush(10) == 0
    return rows


@pytest.fixture(scope="module")
def topics(kafka):
    """Two topics and the rows each isolation level should show for them. The first has
    four partitions: plain records in gzip, lz4, snappy and zstd batches, then committed,
    aborted and committed transactions over 0, 1 and 2, an aborted one in 2 only, plain
    records in 0 and 1, and last a transaction left open in 1 for the whole module
    (read_committed stops before it). Partition 2 ends with an abort marker, 3 is empty.
    The second topic keeps LogAppendTime."""
    mixed = create_topic(kafka, unique("mixed"), partitions=4)
    plain = []
    for n, codec in enumerate(("gzip", "lz4", "snappy", "zstd")):
        plain += produce(kafka, mixed, make_records({0: 9, 1: 6, 2: 7}, start=n * 10, timestamps=n % 2 == 0,
                                                    tag=codec),
                         config={"compression.type": codec})
    producer = transactional_producer(kafka)
    committed, aborted = [], []
    for tag, commit, partitions in (("a", True, [0, 1, 2]), ("b", False, [0, 1, 2]),
                                    ("c", True, [0, 1, 2]), ("d", False, [2])):
        rows = transaction(producer, mixed, tag, partitions, 12)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
        (committed if commit else aborted).extend(rows)
    plain += produce(kafka, mixed, make_records({0: 3, 1: 3}, start=50, tag="after"))
    pending = transaction(producer, mixed, "open", [1], 4)
    appended = create_topic(kafka, unique("append-time"), partitions=2,
                            config={"message.timestamp.type": "LogAppendTime"})
    plain += produce(kafka, appended, make_records({0: 5, 1: 4}, timestamps=True))
    rows = {"read_committed": sorted(plain + committed, key=_order),
            "read_uncommitted": sorted(plain + committed + aborted + pending, key=_order)}
    yield f"{mixed},{appended}", rows
    producer.abort_transaction(10)


def read(spark, fmt: str, bootstrap: str, topic: str | None, level: str, streaming: bool = False, **options):
    """`topic` None: the options say what to read (assign); `level` "unset" leaves
    kafka.isolation.level to the format's default."""
    reader = (spark.readStream if streaming else spark.read).format(fmt)
    options = {"kafka.bootstrap.servers": bootstrap, **({"subscribe": topic} if topic else {}),
               "startingOffsets": "earliest", "includeHeaders": "true",
               **({} if level == "unset" else {"kafka.isolation.level": level}), **options}
    if not streaming:
        options.setdefault("endingOffsets", "latest")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


# -- 1: batch reads -------------------------------------------------------------------------

def test_batch_query_gives_the_same_rows(spark_kafka, kafka, topics):
    topic, expected = topics
    frames = {fmt: read(spark_kafka, fmt, kafka, topic, "read_committed") for fmt in FORMATS}
    assert frames["kafka"].schema == frames["sluice"].schema
    rows = {fmt: rows_of(df) for fmt, df in frames.items()}
    assert rows["kafka"] == expected["read_committed"]
    assert rows["sluice"] == rows["kafka"]
    assert {row[6] for row in rows["kafka"]} == {0, 1}


def test_read_uncommitted_and_the_default_isolation_levels(spark_kafka, kafka, topics):
    """read_uncommitted gives the same rows with both formats, aborted records included.
    The one deliberate difference: without kafka.isolation.level, Spark's Kafka source
    reads uncommitted (the Kafka consumer's default), Sluice's source read_committed."""
    topic, expected = topics
    uncommitted = expected["read_uncommitted"]
    assert rows_of(read(spark_kafka, "sluice", kafka, topic, "read_uncommitted")) == uncommitted
    assert rows_of(read(spark_kafka, "kafka", kafka, topic, "unset")) == uncommitted
    assert rows_of(read(spark_kafka, "sluice", kafka, topic, "unset")) == expected["read_committed"]


def test_data_loss_after_retention_is_reported_alike(spark_kafka, kafka):
    """startingOffsets below the log start: both formats fail by default and, with
    failOnDataLoss=false, both give the records retention left."""
    topic = create_topic(kafka, unique("retention"), partitions=1, config={"segment.bytes": "1024"})
    expected = produce(kafka, topic, make_records({0: 60}), flush_every=4)
    with Client(kafka) as client:  # one retention pass deletes what is over the limit, at once
        resource = (TOPIC_RESOURCE, topic)
        changed = client.admin.incremental_alter_configs({resource: [("retention.bytes", SET_CONFIG, "2048")]})
        assert changed[resource] is None, changed
    start = wait_for(lambda: log_offsets(kafka, topic, [0], EARLIEST)[0], 20, "retention to delete segments")
    survivors = [row for row in expected if row[4] >= start]
    assert 0 < len(survivors) < len(expected)
    below = json.dumps({topic: {"0": 0}})
    for fmt in FORMATS:
        with pytest.raises(Exception) as info:
            read(spark_kafka, fmt, kafka, topic, "read_committed", startingOffsets=below).collect()
        assert "failOnDataLoss" in str(info.value) or "data loss" in str(info.value).lower(), (fmt, info.value)
        assert rows_of(read(spark_kafka, fmt, kafka, topic, "read_committed", startingOffsets=below,
                            failOnDataLoss="false")) == survivors, fmt


# -- 2: streaming reads ---------------------------------------------------------------------

def stream(spark, fmt: str, bootstrap: str, topic: str | None, checkpoint, **options) -> tuple[list, list]:
    """An availableNow query with `fmt` (read_committed, from the earliest offsets unless
    told otherwise) into the memory sink: the rows it read and its progress. The query's
    error is raised."""
    name = f"kafka_format_{fmt}_{unique('q').replace('-', '_')}"
    df = read(spark, fmt, bootstrap, topic, "read_committed", streaming=True, **options)
    query = (df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), f"{fmt}: availableNow query did not finish"
        return rows_of(spark.table(name)), query.recentProgress
    finally:
        query.stop()
        spark.catalog.dropTempView(name)


def test_streaming_query_gives_the_same_rows(spark_kafka, kafka, topics, tmp_path):
    topic, expected = topics
    rows = {}
    for fmt in FORMATS:
        rows[fmt], progress = stream(spark_kafka, fmt, kafka, topic, tmp_path / f"cp-{fmt}",
                                     maxOffsetsPerTrigger="100")
        batches = [p["numInputRows"] for p in progress if p["numInputRows"]]
        assert len(batches) >= 2, (fmt, batches)
    assert rows["kafka"] == expected["read_committed"]
    assert rows["sluice"] == rows["kafka"]


# -- 3: Spark's Kafka sink writes into the broker ---------------------------------------------

def consume_all(bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """(partition, key, value, headers) as confluent-kafka's consumer sees them, in offset order."""
    rows = consume_to_end(bootstrap, topic, partitions, "read_committed")  # librdkafka's default
    return [(p, k, v, h) for p, _, k, v, h in sorted(rows, key=lambda r: r[:2])]


def written(spark, bootstrap: str, topic: str, partitions: int) -> list[tuple]:
    """What format("sluice") and confluent-kafka both read back, as (partition, key, value,
    headers) in partition and offset order."""
    via_sluice = [(r[3], r[0], r[1], r[7]) for r in rows_of(read(spark, "sluice", bootstrap, topic,
                                                                  "read_committed"))]
    via_client = consume_all(bootstrap, topic, partitions)
    assert via_sluice == via_client
    return via_sluice


def sink_rows(count: int, partitions: int) -> list[tuple]:
    """(partition, key, value, headers) to write: null keys, empty and null values, several
    headers with a repeated key and a null value."""
    rows = []
    for i in range(count):
        key = None if i % 5 == 2 else f"sk-{i}".encode()
        value = b"" if i % 9 == 4 else None if i % 11 == 6 else f"sv-{i}-".encode() + bytes([i % 256]) * (i % 20)
        headers = (("h", str(i).encode()), ("n", None), ("h", b"again")) if i % 3 == 0 else \
            (("only", b"\x00\xff"),) if i % 3 == 1 else ()
        rows.append((i % partitions, key, value, headers))
    return rows


def per_partition(rows) -> list[tuple]:
    """Rows in partition order, each partition's rows in the order written."""
    return sorted(rows, key=lambda r: r[0])


def test_batch_write_with_spark_kafka_sink(spark_kafka, kafka):
    rows = sink_rows(60, 3)
    df = spark_kafka.createDataFrame(
        [(p, k, v, [{"key": hk, "value": hv} for hk, hv in h]) for p, k, v, h in rows],
        "partition int, key binary, value binary, headers array<struct<key: string, value: binary>>")
    topic = create_topic(kafka, unique("kafka-sink"), partitions=3)
    (df.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", kafka).option("topic", topic)
     .option("kafka.compression.type", "zstd").save())
    assert written(spark_kafka, kafka, topic, 3) == per_partition(rows)

    # Without a partition column, both sinks put each keyed record in the same partition
    # (murmur2 of the key, as Kafka's default partitioner).
    keyed = df.where("key IS NOT NULL").drop("partition").coalesce(1)
    placed = {}
    for fmt in FORMATS:
        target = create_topic(kafka, unique(f"{fmt}-keyed"), partitions=3)
        (keyed.write.mode("append").format(fmt).option("kafka.bootstrap.servers", kafka)
         .option("topic", target).save())
        placed[fmt] = written(spark_kafka, kafka, target, 3)
    assert placed["kafka"] == placed["sluice"]
    assert sorted((r[1:] for r in placed["kafka"]), key=lambda r: r[0]) == sorted(
        (r[1:] for r in rows if r[1] is not None), key=lambda r: r[0])
    assert len({p for p, *_ in placed["kafka"]}) == 3


def test_streaming_write_with_spark_kafka_sink(spark_kafka, kafka, tmp_path):
    source, target = (create_topic(kafka, unique(name), partitions=2) for name in ("from", "to"))
    rows = sink_rows(40, 2)
    expected = produce(kafka, source, [(p, k, v, list(h), None) for p, k, v, h in rows])
    df = read(spark_kafka, "sluice", kafka, source, "read_committed", streaming=True)
    query = (df.select("partition", "key", "value", "headers").writeStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT), "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    # Each partition's records go to the same partition of the target, in offset order.
    assert written(spark_kafka, kafka, target, 2) == [(r[3], r[0], r[1], r[7]) for r in expected]


# -- 4: both sinks, the same write ------------------------------------------------------------

def stream_into(df, fmt: str, bootstrap: str, checkpoint: str, mode: str = "append", **options):
    """The integration guide's streaming write: the streaming DataFrame `df` written with
    `fmt`, output mode `mode` and `options`, availableNow; the finished query."""
    writer = (df.writeStream.format(fmt).outputMode(mode)
              .option("kafka.bootstrap.servers", bootstrap).option("checkpointLocation", checkpoint)
              .trigger(availableNow=True))
    for name, value in options.items():
        writer = writer.option(name, value)
    query = writer.start()
    assert query.awaitTermination(QUERY_TIMEOUT), f"{fmt}: availableNow query did not finish"
    return query


def test_streaming_write_creates_a_missing_topic_and_leaves_no_topic_for_patterns(spark_kafka, kafka, tmp_path):
    """The guide's streaming write with a `topic` option, into a topic that does not exist:
    the broker allows auto-creation (auto.create.topics.enable, Kafka's default), so each
    sink's Metadata request creates it, with the broker's num.partitions (1), and both
    write the same rows. What Sluice's sink leaves besides, its decisions in
    __sluice_sink_intents, is internal in Metadata: subscribePattern("__.*") reads
    nothing with either format."""
    source = create_topic(kafka, unique("guide-in"), partitions=2)
    rows = sink_rows(30, 2)
    produce(kafka, source, [(p, k, v, list(h), None) for p, k, v, h in rows])
    got = {}
    for fmt in FORMATS:
        target = unique(f"{fmt}-created")
        df = read(spark_kafka, "sluice", kafka, source, "read_committed", streaming=True).selectExpr("key", "value")
        query = stream_into(df, fmt, kafka, str(tmp_path / fmt), topic=target)
        assert query.exception() is None, (fmt, query.exception())
        got[fmt] = sorted(consume_all(kafka, target, 1), key=repr)
    assert len(got["kafka"]) == len(rows)
    assert got["sluice"] == got["kafka"]

    with Client(kafka) as client:
        assert client.metadata([SINK_INTENTS_TOPIC]).topics[SINK_INTENTS_TOPIC].is_internal
    for fmt in FORMATS:
        internal = (spark_kafka.read.format(fmt).option("kafka.bootstrap.servers", kafka)
                    .option("subscribePattern", "__.*").load())
        assert internal.count() == 0, fmt


def test_batch_save_modes(spark_kafka, kafka):
    """The guide's batch write, without .mode(...) (ErrorIfExists), appends with both
    formats, as Append does; Overwrite and Ignore are refused by both, naming the mode,
    and write nothing."""
    df = spark_kafka.createDataFrame([("k1", "v1"), ("k2", "v2")], "key string, value string").coalesce(1)
    got = {}
    for fmt in FORMATS:
        target = create_topic(kafka, unique(f"{fmt}-modes"), partitions=1)

        def writer():
            return df.write.format(fmt).option("kafka.bootstrap.servers", kafka).option("topic", target)

        writer().save()
        writer().mode("append").save()
        for mode in ("overwrite", "ignore"):
            with pytest.raises(Exception) as info:
                writer().mode(mode).save()
            assert mode in str(info.value).lower(), (fmt, mode, info.value)
        got[fmt] = [row[1:] for row in consume_all(kafka, target, 1)]
    assert got["kafka"] == [(b"k1", b"v1", ()), (b"k2", b"v2", ())] * 2
    assert got["sluice"] == got["kafka"]


def test_update_output_mode(spark_kafka, kafka, tmp_path):
    """An aggregation in Update mode: Spark's Kafka sink appends the updated rows. PySpark
    gives a Python data source no way to declare that, so format("sluice") refuses it at
    start(), before any query runs, naming Complete mode instead; which writes, here
    (one trigger), the rows Spark's sink wrote in Update mode."""
    source = create_topic(kafka, unique("counted"), partitions=1)
    produce(kafka, source, [(0, f"k{i % 4}".encode(), b"v", [], None) for i in range(12)])
    counts = (read(spark_kafka, "sluice", kafka, source, "read_committed", streaming=True)
              .groupBy("key").count().selectExpr("key", "CAST(count AS STRING) AS value"))
    running = len(spark_kafka.streams.active)
    with pytest.raises(SluiceOptionError) as refused:
        stream_into(counts, "sluice", kafka, str(tmp_path / "update"), "update", topic=unique("never"))
    assert "output mode Update" in str(refused.value) and 'outputMode("complete")' in str(refused.value)
    assert len(spark_kafka.streams.active) == running
    got = {}
    for fmt, mode in (("kafka", "update"), ("sluice", "complete")):
        target = create_topic(kafka, unique(f"{fmt}-{mode}"), partitions=1)
        query = stream_into(counts, fmt, kafka, str(tmp_path / fmt), mode, topic=target)
        assert query.exception() is None, (fmt, query.exception())
        got[fmt] = sorted(row[1:] for row in consume_all(kafka, target, 1))
    assert got["kafka"] == [(f"k{i}".encode(), b"3", ()) for i in range(4)]
    assert got["sluice"] == got["kafka"]


def test_write_to_a_missing_topic_without_auto_creation_names_it(spark_kafka, tmp_path):
    """With auto.create.topics.enable=false both sinks fail naming the missing topic:
    Spark's once its producer has waited kafka.max.block.ms for the topic's metadata,
    Sluice's at once, naming the broker setting too."""
    config = tmp_path / "server.properties"
    config.write_text("auto.create.topics.enable=false\n")
    df = spark_kafka.createDataFrame([("k", "v")], "key string, value string")
    with BrokerProcess(tmp_path / "data", config_file=str(config)) as proc:
        for fmt in FORMATS:
            target = unique(f"{fmt}-missing")
            with pytest.raises(Exception) as info:
                (df.write.mode("append").format(fmt).option("kafka.bootstrap.servers", proc.bootstrap_servers)
                 .option("topic", target).option("kafka.max.block.ms", "3000").save())
            assert target in str(info.value), (fmt, info.value)
            assert fmt == "kafka" or "auto.create.topics.enable" in str(info.value), info.value

# -- 5: what a query names that is not there ----------------------------------------------------

def test_unknown_subscribed_topic_fails_alike(spark_kafka, kafka, tmp_path):
    """A misspelled topic in 'subscribe': Spark's connector fails, in a batch and in a
    stream (UnknownTopicOrPartitionException), and so does Sluice's, naming the topic
    first: neither reads 0 rows or waits for it. (Sluice's driver asks again until
    kafka.default.api.timeout.ms has passed, 20 s by default: here 2 s, which Kafka's
    admin client takes only with a shorter request timeout.)"""
    known, missing = create_topic(kafka, unique("known")), unique("missing")
    bound = {"kafka.default.api.timeout.ms": "2000", "kafka.request.timeout.ms": "1000"}
    for fmt in FORMATS:
        with pytest.raises(Exception) as batch:
            read(spark_kafka, fmt, kafka, f"{known},{missing}", "read_committed", **bound).collect()
        with pytest.raises(Exception) as streaming:
            stream(spark_kafka, fmt, kafka, missing, tmp_path / f"cp-{fmt}", **bound)
        for info in (batch, streaming):
            if fmt == "kafka":
                assert "UnknownTopicOrPartitionException" in error_text(info), error_text(info)[:600]
            else:
                assert missing in headline(info) and "UNKNOWN_TOPIC_OR_PARTITION" in headline(info), \
                    error_text(info)[:600]


def test_assigned_partitions_that_do_not_exist_are_not_read_alike(spark_kafka, kafka, tmp_path):
    topic = create_topic(kafka, unique("assigned"), partitions=2)
    expected = [row for row in produce(kafka, topic, make_records({0: 4, 1: 3})) if row[3] == 1]
    for fmt in FORMATS:
        assert rows_of(read(spark_kafka, fmt, kafka, None, "read_committed",
                            assign=json.dumps({topic: [7]}))) == [], fmt
        assert rows_of(read(spark_kafka, fmt, kafka, None, "read_committed",
                            assign=json.dumps({topic: [1, 7]}))) == expected, fmt
        rows, _ = stream(spark_kafka, fmt, kafka, None, tmp_path / f"cp-{fmt}", assign=json.dumps({topic: [1, 7]}))
        assert rows == expected, fmt


def test_subscribe_pattern_matches_anywhere_in_a_name_alike(spark_kafka, kafka):
    """subscribePattern finds its pattern anywhere in a topic's name, as Spark's connector
    does (findFirstIn), not only a whole name; internal topics are left out by Metadata's
    flag, not by a "__" prefix."""
    prefix = unique("pattern")
    inner, other = create_topic(kafka, f"{prefix}-inner-x"), create_topic(kafka, f"{prefix}-other")
    produce(kafka, other, make_records({0: 2}))
    expected = produce(kafka, inner, make_records({0: 3}))
    for fmt in FORMATS:
        assert rows_of(read(spark_kafka, fmt, kafka, None, "read_committed",
                            subscribePattern=f"{prefix}-inn")) == expected, fmt


def test_offsets_per_partition_name_each_partition_read_alike(spark_kafka, kafka, tmp_path):
    """Offsets or timestamps per partition that leave out a partition the query reads, or
    name one it does not (another topic, a partition that does not exist): Spark's
    connector refuses them ("Partitions specified ... don't match what are assigned"),
    batch and stream, and so does Sluice's, naming the option; neither fills in a
    default or ignores the stranger."""
    topic = create_topic(kafka, unique("json"), partitions=2)
    produce(kafka, topic, make_records({0: 3, 1: 3}))
    stranger = unique("stranger")
    batch_cases = [("startingOffsets", {topic: {"0": 1}}),
                   ("endingOffsets", {topic: {"0": 2}}),
                   ("startingOffsets", {topic: {"0": 1, "1": 1}, stranger: {"0": 0}}),
                   ("startingOffsets", {topic: {"0": 1, "1": 1, "2": 0}}),
                   ("startingOffsetsByTimestamp", {topic: {"0": 0}})]

    def refused(fmt: str, option: str, info) -> None:
        if fmt == "kafka":
            assert re.search("match what are assigned|must specify all TopicPartitions", error_text(info)), \
                error_text(info)[:600]
        else:
            assert option in headline(info) and "each partition the query reads" in headline(info), \
                error_text(info)[:600]

    for fmt in FORMATS:
        for option, offsets in batch_cases:
            with pytest.raises(Exception) as info:
                read(spark_kafka, fmt, kafka, topic, "read_committed", **{option: json.dumps(offsets)}).collect()
            refused(fmt, option, info)
        with pytest.raises(Exception) as info:
            stream(spark_kafka, fmt, kafka, topic, tmp_path / f"cp-{fmt}", startingOffsets=json.dumps({topic: {"0": 1}}))
        refused(fmt, "startingOffsets", info)


# -- 5: data loss ------------------------------------------------------------------------------

def test_start_offsets_past_the_end_alike(spark_kafka, kafka, tmp_path):
    """startingOffsets past a partition's end. A batch: both refuse, "resolved start
    offset 1000 is greater than the resolved end offset 6", whatever failOnDataLoss says.
    A stream: both fail by default, naming the partition and offsets; with failOnDataLoss
    false both read the other partition and go on from this one's end (a warning, see
    tests/test_spark_source.py), where Sluice's source used to start it again from its
    earliest offset without a word."""
    topic = create_topic(kafka, unique("past-end"), partitions=2)
    expected = produce(kafka, topic, make_records({0: 6, 1: 5}))
    past = json.dumps({topic: {"0": 1000, "1": 0}})
    for fmt in FORMATS:
        for fail in ("true", "false"):
            with pytest.raises(Exception) as info:
                read(spark_kafka, fmt, kafka, topic, "read_committed", startingOffsets=past,
                     failOnDataLoss=fail).collect()
            said = "resolved start offset 1000 is greater than the resolved end offset 6"
            assert said in (error_text(info) if fmt == "kafka" else headline(info)), error_text(info)[:600]
        with pytest.raises(Exception) as info:
            stream(spark_kafka, fmt, kafka, topic, tmp_path / f"fail-{fmt}", startingOffsets=past)
        for said in (f"{topic}-0", "1000", "failOnDataLoss"):
            assert said in (error_text(info) if fmt == "kafka" else headline(info)), error_text(info)[:600]
        rows, _ = stream(spark_kafka, fmt, kafka, topic, tmp_path / f"cp-{fmt}", startingOffsets=past,
                         failOnDataLoss="false")
        assert rows == [row for row in expected if row[3] == 1], fmt


def test_topic_deleted_and_created_again_under_a_stream(spark_kafka, kafka, tmp_path):
    """A topic deleted and created again while a stream reads it, the new topic shorter
    than what the query had read: both fail by default, naming it (Spark's connector sees
    the offsets go back, "deleted and re-created"; Sluice's sees the topic id change).
    With failOnDataLoss false both go on: Sluice's reads the new topic from its earliest
    offset (a warning says why), Spark's from the old offset on, skipping the new
    topic's first records. Sluice's source used to go on silently either way."""
    for fail in ("true", "false"):
        for fmt in FORMATS:
            topic = create_topic(kafka, unique(f"recreated-{fmt}"))
            first = produce(kafka, topic, make_records({0: 10}))
            seen = []
            df = read(spark_kafka, fmt, kafka, topic, "read_committed", streaming=True, failOnDataLoss=fail)
            query = (df.writeStream.foreachBatch(lambda batch, _: seen.extend(rows_of(batch)))
                     .option("checkpointLocation", str(tmp_path / f"cp-{fmt}-{fail}"))
                     .trigger(processingTime="300 milliseconds").start())
            try:
                wait_for(lambda: len(seen) >= len(first) or query.exception(), QUERY_TIMEOUT, "the first records")
                assert seen == first, (fmt, query.exception())
                recreate_topic(kafka, topic)
                second = produce(kafka, topic, make_records({0: 5}, tag="again"))
                if fail == "true":
                    wait_for(lambda: not query.isActive, QUERY_TIMEOUT, f"{fmt}'s query to fail")
                    text = str(query.exception())
                    said = "deleted and re-created" if fmt == "kafka" else \
                        f"topic '{topic}' was deleted and created again while the query read it (topic id"
                    assert said in text, text[:600]
                elif fmt == "sluice":
                    wait_for(lambda: len(seen) >= len(first + second) or query.exception(), QUERY_TIMEOUT,
                             "the new topic's records")
                    assert seen == first + second, query.exception()
                else:  # Spark's: a batch that ends at the new topic's end, and reads none of it
                    wait_for(lambda: not query.isActive or query.lastProgress and offsets_json(
                        query.lastProgress["sources"][0]["endOffset"]) == {topic: {"0": 5}},
                             QUERY_TIMEOUT, "a batch past the new topic's records")
                    assert query.isActive and seen == first, query.exception()
            finally:
                query.stop()
