"""A Spark driver in a process of its own, for test_spark_source's SIGKILL test.

    python tests/spark_driver_job.py BOOTSTRAP TOPIC OUTPUT CHECKPOINT MODE MAX_OFFSETS

Streams TOPIC (from earliest, with headers) through `format("sluice")` into Parquet at
OUTPUT with its checkpoint at CHECKPOINT. MODE `processing` runs a 1-second
processing-time trigger until the process is killed (or gives up after LIFETIME
seconds, so a forgotten process ends); MODE `available-now` reads what is there and
exits 0.
"""

from __future__ import annotations

import os
import sys

LIFETIME = 180


def main(argv: list[str]) -> int:
    bootstrap, topic, output, checkpoint, mode, max_offsets = argv
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (SparkSession.builder.master("local[2]").appName("sluice-driver-job")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", os.path.join(os.path.dirname(checkpoint), "spark-local"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", "earliest")
          .option("includeHeaders", "true")
          .option("maxOffsetsPerTrigger", max_offsets)
          .load())
    writer = (df.writeStream.format("parquet")
              .option("path", output)
              .option("checkpointLocation", checkpoint))
    if mode == "processing":
        writer = writer.trigger(processingTime="1 second")
    elif mode == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    query = writer.start()
    print("query started", flush=True)
    finished = query.awaitTermination(LIFETIME)
    if not finished:
        query.stop()
        spark.stop()
        return 3
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
