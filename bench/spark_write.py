"""Sink rows per second: `format("sluice")` exactly_once against at_least_once.

Both runs write the same DataFrame (100-byte values, string keys) from Spark to an
8-partition topic on a Sluice broker process, in one Spark session, back to back, after
one small warm-up write with each guarantee.

    python -m bench.spark_write [--rows N] [--quick]
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


def run(rows: int, spark=None) -> dict:
    """Measure both guarantees; uses (and leaves running) `spark` when one is given."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector
    from tests.broker_process import BrokerProcess
    from wire.client import Client, NewTopic

    own_session = spark is None
    data_dir = tempfile.mkdtemp(prefix="sluice-bench-")
    result = {"rows": rows, "value_bytes": VALUE_SIZE, "partitions": PARTITIONS}
    try:
        with BrokerProcess(os.path.join(data_dir, "data")) as broker:
            bootstrap = broker.bootstrap_servers
            if own_session:
                spark = (SparkSession.builder.master("local[2]").appName("sluice-bench")
                         .config("spark.ui.enabled", "false").getOrCreate())
                spark.sparkContext.setLogLevel("ERROR")
                spark_connector.register(spark)
            df = spark.range(rows).selectExpr(
                "cast(id as string) as key",
                f"cast(repeat('x', {VALUE_SIZE}) as binary) as value").repartition(2).cache()
            df.count()
            # First use of transactions creates the broker's __transaction_state topic
            # (50 partitions): a one-time cost, paid here rather than measured.
            with Client(bootstrap) as client:
                client.create_topics({"warm-up": NewTopic(PARTITIONS, 1)})
            for guarantee in ("exactly_once", "at_least_once"):
                (df.limit(PARTITIONS).write.mode("append").format("sluice")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", "warm-up")
                 .option("deliveryGuarantee", guarantee).save())
            for guarantee in ("exactly_once", "at_least_once"):
                topic = f"sink-{guarantee}"
                with Client(bootstrap) as client:
                    client.create_topics({topic: NewTopic(PARTITIONS, 1)})
                started = time.perf_counter()
                (df.write.mode("append").format("sluice").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", topic).option("deliveryGuarantee", guarantee).save())
                elapsed = time.perf_counter() - started
                written = (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
                           .option("subscribe", topic).load().count())
                if written != rows:
                    raise SystemExit(f"{guarantee}: wrote {written} rows, expected {rows}")
                result[f"{guarantee}_rows_per_s"] = rows / elapsed
            df.unpersist()
            if own_session:
                spark.stop()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    result["exactly_once_vs_at_least_once"] = result["exactly_once_rows_per_s"] / result["at_least_once_rows_per_s"]
    result["machine"] = machine_details()
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="100,000 rows")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(100_000 if args.quick else args.rows)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"machine: {describe_machine()}")
    print(f"{result['rows']} rows of {VALUE_SIZE}-byte values into {PARTITIONS} partitions")
    print(f"  exactly_once : {result['exactly_once_rows_per_s']:12,.0f} rows/s")
    print(f"  at_least_once: {result['at_least_once_rows_per_s']:12,.0f} rows/s")
    print(f"  ratio        : {result['exactly_once_vs_at_least_once']:.2f}")


if __name__ == "__main__":
    main()
