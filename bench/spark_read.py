"""Rows per second into Spark (noop sink): `format("sluice")` against the API's ceiling.

Side by side in one run, on the same Spark session:
- sluice: an 8-partition topic on a Sluice broker process, read with `format("sluice")`;
- ceiling: an in-memory Python Data Source yielding the equivalent Arrow batches (same
  schema, rows, value sizes and partitioning), so the difference is what reading from
  Kafka costs on top of the Python Data Source API itself.
Target: sluice >= 0.6 of the ceiling and >= 1,000,000 rows/s of 100-byte values.

    python -m bench.spark_read [--rows N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

from bench.machine import describe_machine, machine_details

PARTITIONS = 8
VALUE_SIZE = 100
BATCH_ROWS = 5000


def produce(bootstrap: str, topic: str, rows: int) -> None:
    from wire.client import Client, NewTopic
    from wire.records import build_batch

    per_partition = rows // PARTITIONS
    value = b"x" * VALUE_SIZE
    now = int(time.time() * 1000)
    with Client(bootstrap) as client:
        client.create_topics({topic: NewTopic(PARTITIONS, 1)})
        for partition in range(PARTITIONS):
            for start in range(0, per_partition, BATCH_ROWS):
                count = min(BATCH_ROWS, per_partition - start)
                batch = build_batch([(b"k%d" % i, value, (), now) for i in range(start, start + count)])
                client.produce_batch(topic, partition, batch)


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


def run(rows: int, repeats: int, spark=None) -> dict:
    """Measure both sources; uses (and leaves running) `spark` when one is given."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector
    from tests.broker_process import BrokerProcess

    own_session = spark is None

    data_dir = tempfile.mkdtemp(prefix="sluice-bench-")
    try:
        with BrokerProcess(os.path.join(data_dir, "data")) as broker:
            produce(broker.bootstrap_servers, "bench", rows)
            if own_session:
                spark = (SparkSession.builder.master("local[2]").appName("sluice-bench")
                         .config("spark.ui.enabled", "false").getOrCreate())
                spark.sparkContext.setLogLevel("ERROR")
                spark_connector.register(spark)
            spark.dataSource.register(ceiling_source(rows))
            sluice_df = (spark.read.format("sluice")
                         .option("kafka.bootstrap.servers", broker.bootstrap_servers)
                         .option("subscribe", "bench").load())
            ceiling_df = spark.read.format("memory_ceiling").load()
            assert sluice_df.count() == ceiling_df.count() == rows // PARTITIONS * PARTITIONS
            sluice_s = min(timed_noop(sluice_df) for _ in range(repeats))
            ceiling_s = min(timed_noop(ceiling_df) for _ in range(repeats))
            if own_session:
                spark.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    total = rows // PARTITIONS * PARTITIONS
    result = {"rows": total, "value_bytes": VALUE_SIZE, "partitions": PARTITIONS,
              "sluice_rows_per_s": total / sluice_s, "ceiling_rows_per_s": total / ceiling_s}
    result["ratio"] = result["sluice_rows_per_s"] / result["ceiling_rows_per_s"]
    result["targets_met"] = result["ratio"] >= 0.6 and result["sluice_rows_per_s"] >= 1_000_000
    result["machine"] = machine_details()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="200,000 rows, one repeat")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows, repeats = (200_000, 1) if args.quick else (args.rows, args.repeats)
    result = run(rows, repeats)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {describe_machine()}")
    print(f"{result['rows']} rows of {VALUE_SIZE}-byte values from {PARTITIONS} partitions, noop sink")
    print(f"  sluice : {result['sluice_rows_per_s']:12,.0f} rows/s")
    print(f"  ceiling: {result['ceiling_rows_per_s']:12,.0f} rows/s (in-memory Python Data Source)")
    print(f"  ratio  : {result['ratio']:.2f} (target >= 0.6; and >= 1,000,000 rows/s)"
          f" -> {'met' if result['targets_met'] else 'NOT met'}")


if __name__ == "__main__":
    main()
