"""A Spark driver in a process of its own, for test_spark_sink's crash and retry tests.

    python tests/spark_sink_job.py BOOTSTRAP INPUT OUTPUT CHECKPOINT MODE MAX_OFFSETS GUARANTEE

Streams INPUT (from earliest, with headers) through `format("sluice")` into the topic
OUTPUT with the `sluice` sink (`deliveryGuarantee` GUARANTEE), checkpoint at CHECKPOINT,
at most MAX_OFFSETS records per micro-batch. MODE:
- `processing`: a 500 ms processing-time trigger until the process is killed (by the
  fault injection below, SLUICE_TEST_SINK_CRASH*) or LIFETIME seconds pass (exit 3);
- `available-now`: reads what is there, writes it, exits 0;
- `fail-first-attempt`: master local[2,3] (a task may fail 3 times) with
  SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT=1, so every write task's first attempt fails after
  producing its rows; runs the stream with availableNow, then writes INPUT as a batch
  job (`df.write`) into the topic OUTPUT-batch, and exits 0.

Faults are injected here, in test code: the job registers `format("sluice")` as a
subclass of the connector's data source whose stream writer wraps the real one
(cloudpickle ships classes of `__main__` by value to Spark's Python workers). At the
crash point SLUICE_TEST_SINK_CRASH (during-task-writes, after-task-writes, after-intent,
mid-commit, after-commit) of a batch >= SLUICE_TEST_SINK_CRASH_BATCH it appends the
point to SLUICE_TEST_SINK_CRASH_LOG and SIGKILLs this process's group
(SLUICE_TEST_SINK_CRASH_PGID, set here and inherited by the JVM and its Python
workers) and the group of the worker that reached the point (PySpark's daemon gives
its workers a group of their own). The test starts this script with
start_new_session, so the first group holds this process and the JVM, and nothing of
the test's. With SLUICE_TEST_SINK_FAULT=raise the point raises instead. With
SLUICE_TEST_SINK_SLOW=BATCH:SECONDS every write task of micro-batch BATCH that wrote
rows waits SECONDS before handing over its open transaction. SLUICE_TEST_SINK_OPTIONS
holds more sink options as a JSON object. In `fail-first-attempt` mode the first attempt of every write task fails
after producing its rows, leaving its transaction open: on an even Spark partition the
Python worker exits at once (like a lost executor), on an odd one the task raises.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

LIFETIME = float(os.environ.get("SLUICE_TEST_LIFETIME", "120"))  # the test gives a driver 30 s more


def crash_at(point: str, batch_id: int) -> None:
    if os.environ.get("SLUICE_TEST_SINK_CRASH") != point:
        return
    if batch_id < int(os.environ.get("SLUICE_TEST_SINK_CRASH_BATCH", "0")):
        return
    with open(os.environ["SLUICE_TEST_SINK_CRASH_LOG"], "a") as out:
        out.write(f"{point} {batch_id} {os.getpid()}\n")
    if os.environ.get("SLUICE_TEST_SINK_FAULT") == "raise":
        raise RuntimeError(f"sluice test: {point} of batch {batch_id} fails on purpose")
    own = os.getpgrp()
    driver = int(os.environ.get("SLUICE_TEST_SINK_CRASH_PGID", own))
    if driver != own:
        os.killpg(driver, signal.SIGKILL)
    os.killpg(own, signal.SIGKILL)


def fail_first_attempt() -> None:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if os.environ.get("SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT") != "1" or ctx.attemptNumber() != 0:
        return
    if ctx.partitionId() % 2 == 0:
        os._exit(17)
    raise RuntimeError(f"sluice test: first attempt of write task {ctx.partitionId()} fails on purpose")


def faulty_sluice():
    """`format("sluice")` with the faults above around the real writers."""
    from pyspark import TaskContext

    from spark_connector import SluiceDataSource
    from spark_connector.sink import SluiceBatchWriter, SluiceStreamWriter

    class FaultyStreamWriter(SluiceStreamWriter):
        def write(self, iterator):
            message = super().write(iterator)
            batch_id = int(TaskContext.get().getLocalProperty("streaming.sql.batchId"))
            slow_batch, _, seconds = os.environ.get("SLUICE_TEST_SINK_SLOW", "-1:0").partition(":")
            if batch_id == int(slow_batch) and message.txn is not None:
                time.sleep(float(seconds))  # a slow task: its transaction stays open meanwhile
            crash_at("during-task-writes", batch_id)
            fail_first_attempt()
            return message

        def commit(self, messages, batchId):
            self.batch_id, self.committed = batchId, 0
            crash_at("after-task-writes", batchId)
            super().commit(messages, batchId)
            crash_at("after-commit", batchId)

        def _decide(self, client, tasks, batch_id):
            intent = super()._decide(client, tasks, batch_id)
            self.deciding = len(intent.txns())
            crash_at("after-intent", batch_id)
            return intent

        def _commit_transaction(self, client, txn):
            fate = super()._commit_transaction(client, txn)
            self.committed += 1
            if self.committed < self.deciding:
                crash_at("mid-commit", self.batch_id)
            return fate

    class FaultyBatchWriter(SluiceBatchWriter):
        def write(self, iterator):
            message = super().write(iterator)
            fail_first_attempt()
            return message

    class FaultySluice(SluiceDataSource):
        def writer(self, schema, overwrite):
            return FaultyBatchWriter(super().writer(schema, overwrite).options)

        def streamWriter(self, schema, overwrite):
            return FaultyStreamWriter(super().streamWriter(schema, overwrite).options)

    return FaultySluice


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

    master = "local[2,3]" if mode == "fail-first-attempt" else "local[2]"
    spark = (SparkSession.builder.master(master).appName("sluice-sink-job")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")  # starts faster
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.local.dir", os.path.join(os.path.dirname(checkpoint), "spark-local"))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(faulty_sluice())
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
    for name, value in json.loads(os.environ.get("SLUICE_TEST_SINK_OPTIONS", "{}")).items():
        writer = writer.option(name, value)
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
