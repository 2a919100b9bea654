"""A Spark driver in a process of its own, for tests/test_spark_cluster.py (a standalone
cluster) and tests/test_spark_connect.py (a Spark Connect client).

    python tests/spark_cluster_job.py CONFIG_JSON

CONFIG_JSON keys:
- `master` (a spark:// URL) or `remote` (an sc:// URL: a Spark Connect client session);
- `bootstrap`, `input`, `output`, `checkpoint`, `max_offsets`: streams the topic `input`
  (from earliest, with headers, at most `max_offsets` records per micro-batch, until the
  end: availableNow) through `format("sluice")` into the topic `output` with the sink's
  default delivery guarantee (exactly once);
- `markers`: a directory; a Python UDF on the value column creates a file
  BATCH-PARTITION-ATTEMPT-PID there at the first row of each task attempt, so the test
  sees which task attempts ran, and when;
- `pause`: seconds each task attempt waits at its first row (keeps tasks in flight);
- `slow`: {"partition": P, "batches": {BATCH: "stuck" | "race"}, "seconds": S}: for
  speculation. In the listed micro-batches, the task of Spark partition P is slow at its
  first row: "stuck": attempt 0 waits S seconds (a speculative copy overtakes it, and
  attempt 0 is killed); "race": attempt 0 waits (at most S seconds) until another
  attempt of the task has reached its first row, then goes on at once, while every later
  attempt waits 5 s there (attempt 0 finishes first, with a copy running beside it);
- `conf`: more Spark configuration;
- `register`: false to leave `format("sluice")` to PySpark's lookup of the installed
  `pyspark_sluice` module instead of calling `spark_connector.register`.
Exit codes: 0 done, 3 not done within `lifetime` seconds, 4 the query failed.
"""

from __future__ import annotations

import json
import os
import sys
import time


def marker_udf(markers: str, pause: float, slow: dict | None):
    """The marking (and pausing) UDF; an identity on the value."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    seen = set()

    def mark(value):
        ctx = TaskContext.get()
        if ctx.taskAttemptId() not in seen:
            seen.add(ctx.taskAttemptId())
            batch = ctx.getLocalProperty("streaming.sql.batchId")
            name = f"{batch}-{ctx.partitionId()}-{ctx.attemptNumber()}-{os.getpid()}"
            with open(os.path.join(markers, name), "w"):
                pass
            if pause:
                time.sleep(pause)
            mode = slow and ctx.partitionId() == slow["partition"] and slow["batches"].get(batch)
            if mode == "stuck" and ctx.attemptNumber() == 0:
                time.sleep(slow["seconds"])
            elif mode == "race" and ctx.attemptNumber() == 0:
                prefix = f"{batch}-{ctx.partitionId()}-"
                deadline = time.monotonic() + slow["seconds"]
                while time.monotonic() < deadline and not any(
                        n.startswith(prefix) and n != name for n in os.listdir(markers)):
                    time.sleep(0.05)
            elif mode == "race":
                time.sleep(5)
        return value

    return udf(mark, "binary")


def main(config: dict) -> int:
    started = time.monotonic()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    if "remote" in config:
        builder = SparkSession.builder.remote(config["remote"])
    else:
        builder = (SparkSession.builder.master(config["master"])
                   .config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1")
                   .config("spark.driver.memory", "512m")
                   .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
                   .config("spark.ui.enabled", "false")
                   .config("spark.ui.showConsoleProgress", "false")
                   .config("spark.executor.memory", "512m")
                   .config("spark.executor.extraJavaOptions", "-XX:TieredStopAtLevel=1")
                   # Executors' Python workers import spark_connector and wire from here.
                   .config("spark.pyspark.python", sys.executable)
                   .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
                   .config("spark.executorEnv.PYTHONPATH", os.environ.get("PYTHONPATH", ""))
                   .config("spark.sql.shuffle.partitions", "2")
                   .config("spark.local.dir", os.path.join(os.path.dirname(config["checkpoint"]),
                                                           "driver-local")))
    for key, value in config.get("conf", {}).items():
        builder = builder.config(key, value)
    spark = builder.appName("sluice-cluster-job").getOrCreate()
    if "remote" not in config:
        spark.sparkContext.setLogLevel("WARN")
        print(f"application {spark.sparkContext.applicationId}", flush=True)
    print(f"session {type(spark).__module__}.{type(spark).__name__}", flush=True)
    if config.get("register", True):
        import spark_connector
        spark_connector.register(spark)
    print(f"session ready after {time.monotonic() - started:.1f} s", flush=True)

    mark = marker_udf(config["markers"], config.get("pause", 0), config.get("slow"))
    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", config["bootstrap"])
          .option("subscribe", config["input"])
          .option("startingOffsets", "earliest")
          .option("includeHeaders", "true")
          .option("maxOffsetsPerTrigger", config["max_offsets"])
          .load()
          .select("key", mark("value").alias("value"), "headers"))
    query = (df.writeStream.format("sluice")
             .option("kafka.bootstrap.servers", config["bootstrap"])
             .option("topic", config["output"])
             .option("checkpointLocation", config["checkpoint"])
             .trigger(availableNow=True)
             .start())
    print(f"query {query.id} started after {time.monotonic() - started:.1f} s", flush=True)
    finished = query.awaitTermination(config.get("lifetime", 120))
    if not finished:
        query.stop()
        spark.stop()
        return 3
    if query.exception() is not None:
        print("query failed:", query.exception(), flush=True)
        spark.stop()
        return 4
    batches = [(p.batchId, p.numInputRows, p.durationMs.get("triggerExecution")) for p in query.recentProgress]
    print("batches (id, rows, ms):", batches, flush=True)
    print(f"done after {time.monotonic() - started:.1f} s", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
