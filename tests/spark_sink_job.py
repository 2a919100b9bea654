"""A Spark driver in a process of its own, for test_spark_sink's crash and retry tests.

    python tests/spark_sink_job.py BOOTSTRAP INPUT OUTPUT CHECKPOINT MODE MAX_OFFSETS GUARANTEE

Streams INPUT (from earliest, with headers) through `format("sluice")` into the topic
OUTPUT with the `sluice` sink (`deliveryGuarantee` GUARANTEE), checkpoint at CHECKPOINT,
at most MAX_OFFSETS records per micro-batch. MODE:
- `processing`: a 500 ms processing-time trigger until the process is killed (by the
  sink's test crash hook, SLUICE_TEST_SINK_CRASH*) or LIFETIME seconds pass (exit 3);
- `available-now`: reads what is there, writes it, exits 0;
- `fail-first-attempt`: master local[2,3] (a task may fail 3 times) with
  SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT=1, so every write task's first attempt fails after
  producing its rows; runs the stream with availableNow, then writes INPUT as a batch
  job (`df.write`) into the topic OUTPUT-batch, and exits 0.

The crash hook SIGKILLs this process's group (SLUICE_TEST_SINK_CRASH_PGID, set here and
inherited by the JVM and its Python workers) and the group of the worker that reached
the point (PySpark's daemon gives its workers a group of their own). The test starts
this script with start_new_session, so the first group holds this process and the JVM,
and nothing of the test's.
"""

from __future__ import annotations

import os
import sys
import time

LIFETIME = 120  # seconds; the test gives a driver 150


class _Progress:
    """Prints each micro-batch as it completes (the log shows how far a killed run got)."""

    def __new__(cls, started):
        from pyspark.sql.streaming import StreamingQueryListener

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = event.progress
                print(f"{time.monotonic() - started:6.1f} s: batch {p.batchId} rows {p.numInputRows} "
                      f"in {p.durationMs.get('triggerExecution')} ms", flush=True)

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        return Listener()


def main(argv: list[str]) -> int:
    bootstrap, source_topic, output, checkpoint, mode, max_offsets, guarantee = argv
    started = time.monotonic()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, root)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SLUICE_TEST_SINK_CRASH_PGID"] = str(os.getpgrp())  # inherited by the workers
    if mode == "fail-first-attempt":
        os.environ["SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT"] = "1"
    from pyspark.sql import SparkSession

    import spark_connector

    master = "local[2,3]" if mode == "fail-first-attempt" else "local[2]"
    spark = (SparkSession.builder.master(master).appName("sluice-sink-job")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")  # starts faster
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", os.path.join(os.path.dirname(checkpoint), "spark-local"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    print(f"session ready after {time.monotonic() - started:.1f} s", flush=True)
    spark.streams.addListener(_Progress(started))
    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source_topic)
          .option("startingOffsets", "earliest")
          .option("includeHeaders", "true")
          .option("maxOffsetsPerTrigger", max_offsets)
          .load()
          .select("key", "value", "headers"))
    writer = (df.writeStream.format("sluice")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("topic", output)
              .option("deliveryGuarantee", guarantee)
              .option("checkpointLocation", checkpoint))
    if mode == "processing":
        writer = writer.trigger(processingTime="500 milliseconds")
    elif mode in ("available-now", "fail-first-attempt"):
        writer = writer.trigger(availableNow=True)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    query = writer.start()
    print(f"query {query.id} started after {time.monotonic() - started:.1f} s", flush=True)
    finished = query.awaitTermination(LIFETIME)
    if not finished:
        query.stop()
        spark.stop()
        return 3
    if query.exception() is not None:
        print("query failed:", query.exception(), flush=True)
        spark.stop()
        return 4
    print("batches (id, rows, ms):", [(p["batchId"], p["numInputRows"], p["durationMs"].get("triggerExecution"))
                                      for p in query.recentProgress], flush=True)
    if mode == "fail-first-attempt":
        (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", source_topic).option("includeHeaders", "true").load()
         .select("key", "value", "headers")
         .write.mode("append").format("sluice")
         .option("kafka.bootstrap.servers", bootstrap)
         .option("topic", output + "-batch")
         .option("deliveryGuarantee", guarantee)
         .save())
        print("batch write done", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
