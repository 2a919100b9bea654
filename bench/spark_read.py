"""Rows per second into Spark (noop sink): `format("sluice")` against the API's ceiling
and against Spark's own Kafka connector.

Side by side in one run, on the same Spark session:
- sluice: an 8-partition topic on a Sluice broker process, read with `format("sluice")`;
- spark-kafka: the same topic on the same broker, read with Spark's own Kafka connector,
  `format("kafka")` (sluice.maven.SPARK_KAFKA_CONNECTOR; spark.jars gets only the jars
  pyspark does not ship: the connector, its token provider, kafka-clients, commons-pool2);
- on Apache Kafka (bench.kafka_broker), the same rows in the same batches: `format("kafka")`
  and `format("sluice")` again;
- ceiling: an in-memory Python Data Source yielding the equivalent Arrow batches (same
  schema, rows, value sizes and partitioning), so the difference is what reading from
  Kafka costs on top of the Python Data Source API itself.
Target: sluice >= 0.6 of the ceiling and >= 1,000,000 rows/s of 100-byte values. When the
connector or Kafka cannot be resolved or started, or a session given to `run` lacks the
connector, those rows say why and the others are measured.

    python -m bench.spark_read [--rows N] [--quick] [--no-kafka]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time

from bench.machine import describe_machine, machine_details

PARTITIONS = 8
VALUE_SIZE = 100
BATCH_ROWS = 5000


def connector_jars() -> list[str]:
    """Spark's Kafka connector and those of its runtime dependencies pyspark does not ship
    (compared by artifact name: pyspark's own version of a shared jar is kept)."""
    import pyspark

    from sluice import maven

    def artifact(name: str) -> str:
        return re.sub(r"-\d[^-]*(-[A-Za-z0-9.]+)?\.jar$", "", name)

    shipped = {artifact(n) for n in os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))}
    return [str(p) for p in maven.classpath([maven.SPARK_KAFKA_CONNECTOR]) if artifact(p.name) not in shipped]


def with_kafka_connector(builder):
    """`builder` with spark.jars set to the connector's jars; (builder, None) or (builder, why not)."""
    from sluice import maven

    try:
        return builder.config("spark.jars", ",".join(connector_jars())), None
    except maven.MavenUnavailable as e:
        return builder, f"Spark's Kafka connector could not be resolved: {e}"


def produce(bootstrap: str, topic: str, rows: int) -> None:
    from sluice_client import Client, NewTopic
    from wire.records import build_batch

    per_partition = rows // PARTITIONS
    value = b"x" * VALUE_SIZE
    now = int(time.time() * 1000)
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(PARTITIONS, 1)})
        for partition in range(PARTITIONS):
            for start in range(0, per_partition, BATCH_ROWS):
                count = min(BATCH_ROWS, per_partition - start)
                batch = build_batch([(b"k%d" % i, value, (), now) for i in range(start, start + count)])
                client.producer.produce_batch(topic, partition, batch)


def ceiling_source(rows: int):
    """An in-memory Data Source yielding Arrow batches shaped like sluice's."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from spark_connector.arrow import SPARK_SCHEMA

    per_partition = rows // PARTITIONS

    class MemoryReader(DataSourceReader):
        def partitions(self):
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition):
            import struct

            import pyarrow as pa

            from spark_connector.arrow import TIMESTAMP_TYPE, arrow_schema
            schema = arrow_schema(False)
            n = BATCH_ROWS
            key_size = 8  # keys like b"k0000042", values of VALUE_SIZE bytes
            keys = b"".join(b"k%07d" % i for i in range(n))

            def binary(size, data):
                offsets = struct.pack(f"<{n + 1}i", *range(0, (n + 1) * size, size))
                return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                              pa.py_buffer(data)])

            def int_column(kind, fmt, value):
                return pa.Array.from_buffers(kind, n, [None, pa.py_buffer(struct.pack(fmt, value) * n)])

            template = [binary(key_size, keys), binary(VALUE_SIZE, b"x" * (VALUE_SIZE * n)),
                        pa.array(["bench"] * n, pa.string()), int_column(pa.int32(), "<i", partition.value),
                        pa.array(range(n), pa.int64()), int_column(TIMESTAMP_TYPE, "<q", 0),
                        int_column(pa.int32(), "<i", 0)]
            batch = pa.RecordBatch.from_arrays(template, schema=schema)
            for start in range(0, per_partition, n):
                yield batch.slice(0, min(n, per_partition - start))

    class MemorySource(DataSource):
        @classmethod
        def name(cls):
            return "memory_ceiling"

        def schema(self):
            return SPARK_SCHEMA

        def reader(self, schema):
            return MemoryReader()

    return MemorySource


def timed_noop(df) -> float:
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def _kafka_df(spark, bootstrap: str, topic: str):
    return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").load())


def _sluice_df(spark, bootstrap: str, topic: str):
    return (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).load())


def run(rows: int, repeats: int, spark=None, with_kafka: bool = True, log=lambda line: None) -> dict:
    """Measure every source; uses (and leaves running) `spark` when one is given (its
    session then needs spark.jars from `with_kafka_connector` for the format("kafka") rows)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector
    from sluice.broker_process import BrokerProcess

    own_session = spark is None
    total = rows // PARTITIONS * PARTITIONS
    seconds, unavailable = {}, {}

    def measure(key, df):
        count = df.count()
        if count != total:
            raise RuntimeError(f"{key}: {count} rows read, not {total}")
        seconds[key] = min(timed_noop(df) for _ in range(repeats))
        log(f"  {key}: {total / seconds[key]:,.0f} rows/s")

    data_dir = tempfile.mkdtemp(prefix="sluice-bench-")
    try:
        connector_missing = None
        if own_session:
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver binds to loopback only
            builder, connector_missing = with_kafka_connector(
                SparkSession.builder.master("local[2]").appName("sluice-bench")
                .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark_connector.register(spark)
        with BrokerProcess(os.path.join(data_dir, "data")) as broker:
            produce(broker.bootstrap_servers, "bench", rows)
            spark.dataSource.register(ceiling_source(rows))
            measure("sluice", _sluice_df(spark, broker.bootstrap_servers, "bench"))
            measure("ceiling", spark.read.format("memory_ceiling").load())
            if connector_missing is None:
                try:
                    kafka_df = _kafka_df(spark, broker.bootstrap_servers, "bench")
                except Exception as e:  # noqa: BLE001 (the session has no format("kafka"))
                    connector_missing = f"format(\"kafka\") is not available in this session: {str(e)[:300]}"
                else:
                    measure("spark_kafka", kafka_df)
            if connector_missing:
                unavailable["spark_kafka"] = connector_missing
                log(f"  spark_kafka: not measured ({connector_missing})")
        if with_kafka:
            kafka_rows(spark, data_dir, rows, connector_missing, measure, unavailable, log)
        else:
            unavailable["on_kafka"] = "left out (--no-kafka)"
        if own_session:
            spark.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    result = {"rows": total, "value_bytes": VALUE_SIZE, "partitions": PARTITIONS,
              "repeats": repeats, "unavailable": unavailable,
              **{f"{key}_rows_per_s": total / s for key, s in seconds.items()}}
    result["ratio"] = result["sluice_rows_per_s"] / result["ceiling_rows_per_s"]
    if "spark_kafka_rows_per_s" in result:
        result["vs_spark_kafka"] = result["sluice_rows_per_s"] / result["spark_kafka_rows_per_s"]
    result["targets_met"] = result["ratio"] >= 0.6 and result["sluice_rows_per_s"] >= 1_000_000
    result["machine"] = machine_details()
    return result


def kafka_rows(spark, data_dir: str, rows: int, connector_missing, measure, unavailable, log) -> None:
    """The same topic on Apache Kafka: format("kafka") (when the session has it) and format("sluice")."""
    from bench.kafka_broker import KafkaBrokerProcess, KafkaUnavailable, version

    try:
        kafka = KafkaBrokerProcess(data_dir).start()
    except KafkaUnavailable as e:
        unavailable["on_kafka"] = f"Kafka unavailable: {e}"
        log(f"  on Kafka: not measured (Kafka unavailable: {e})")
        return
    try:
        log(f"  Kafka {version()} started in {kafka.start_s:.1f} s")
        produce(kafka.bootstrap_servers, "bench", rows)
        if connector_missing is None:
            measure("spark_kafka_on_kafka", _kafka_df(spark, kafka.bootstrap_servers, "bench"))
        measure("sluice_on_kafka", _sluice_df(spark, kafka.bootstrap_servers, "bench"))
    finally:
        kafka.stop()


SOURCES = (("sluice", 'sluice broker, format("sluice")'),
           ("spark_kafka", 'sluice broker, format("kafka") (Spark\'s connector)'),
           ("sluice_on_kafka", 'Kafka broker, format("sluice")'),
           ("spark_kafka_on_kafka", 'Kafka broker, format("kafka") (Spark\'s connector)'),
           ("ceiling", "ceiling: in-memory Python Data Source"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="200,000 rows, one repeat")
    parser.add_argument("--no-kafka", action="store_true", help="no Apache Kafka broker")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows, repeats = (200_000, 1) if args.quick else (args.rows, args.repeats)
    result = run(rows, repeats, with_kafka=not args.no_kafka, log=lambda line: None if args.json else print(line))
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {describe_machine()}")
    print(f"{result['rows']} rows of {VALUE_SIZE}-byte values from {PARTITIONS} partitions, noop sink, "
          f"fastest of {repeats}")
    for key, label in SOURCES:
        value = result.get(f"{key}_rows_per_s")
        print(f"  {label:50}: " + (f"{value:12,.0f} rows/s" if value else "not measured"))
    for key, why in result["unavailable"].items():
        print(f"  ({key}: {why})")
    print(f"  sluice / ceiling: {result['ratio']:.2f} (target >= 0.6; and >= 1,000,000 rows/s)"
          f" -> {'met' if result['targets_met'] else 'NOT met'}")
    if "vs_spark_kafka" in result:
        print(f"  sluice / Spark's Kafka connector, same topic and broker: {result['vs_spark_kafka']:.2f}")


if __name__ == "__main__":
    main()
