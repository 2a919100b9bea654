"""Sink rows per second: `format("sluice")` exactly once against confluent-kafka.

Side by side in one run, against one Sluice broker process, each writing the same rows
(keys "0".."N-1", 100-byte values) into an 8-partition topic of its own:
- confluent-kafka: one Python process producing with acks=all, enable.idempotence=true
  (librdkafka's defaults otherwise; the murmur2 partitioner, as the sink's), until flushed;
- sink exactly_once: a Spark batch write `df.write.format("sluice")` with the default
  deliveryGuarantee, of the same rows cached in Spark beforehand;
- sink at_least_once: the same write without transactions;
- streaming availableNow: a query copying confluent-kafka's topic into a new one through
  the sink, exactly once (a read and a write).
Target: sink exactly_once >= 0.5x confluent-kafka. The run also measures Spark reads
(bench.spark_read at its usual sizes, its own broker process, the same Spark session), and
writes markdown and JSON under bench/results/.

    python -m bench.spark_write [--quick] [--rows N] [--repeats N] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from bench import spark_read
from bench.common import DEFAULT_OUT, _fmt, _loads, _rounded, write_result_files
from bench.machine import describe_machine, machine_details

PARTITIONS = 8
VALUE_SIZE = 100
TARGET = 0.5  # sink exactly_once rows/s over confluent-kafka's
FULL = {"rows": 1_000_000, "repeats": 3, "read_rows": 2_000_000, "read_repeats": 2}
QUICK = {"rows": 100_000, "repeats": 1, "read_rows": 200_000, "read_repeats": 1}
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED_CODE = ("spark_connector", "sluice_client", "wire", "broker")
STEP_TIMEOUT = 600.0  # seconds any one write may take before the run fails

# The ways of writing: (key, label in the report). Each repeat runs confluent-kafka first
# (its topic is the streaming copy's input), the two sink writes (in turn, each first) and
# the streaming copy last.
WRITERS = (("confluent", "confluent-kafka, acks=all, idempotent (one Python process)"),
           ("sink_exactly_once", "sink, batch `df.write`, exactly_once (default)"),
           ("sink_at_least_once", "sink, batch `df.write`, at_least_once"),
           ("streaming_exactly_once", "streaming availableNow copy, exactly_once (read + write)"))


def produce_confluent(bootstrap: str, topic: str, rows: int) -> float:
    """Seconds from creating the producer to the last row acknowledged."""
    from confluent_kafka import Producer

    errors = []
    value = b"x" * VALUE_SIZE
    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "partitioner": "murmur2_random", "log_level": 3, "error_cb": errors.append})
    produce, poll = producer.produce, producer.poll
    deadline = time.monotonic() + STEP_TIMEOUT
    i = 0
    while i < rows:
        try:
            produce(topic, value, str(i))
            i += 1
        except BufferError:  # the local queue is full: serve delivery reports and retry
            poll(0.005)
            if time.monotonic() > deadline:
                raise TimeoutError(f"confluent-kafka: {i} of {rows} rows queued after {STEP_TIMEOUT:g} s")
        else:
            if i & 0x3FFF == 0:
                poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - started
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} rows undelivered ({errors[:3]})")
    return elapsed


def stage_times(spark) -> dict[int, dict]:
    """Every stage Spark has run so far, from its status store (what its UI shows): id ->
    submission time (epoch ms), wall ms to completion, task count and the tasks' summed run
    time."""
    jvm = spark.sparkContext._jvm
    empty = jvm.java.util.ArrayList()
    stages = spark.sparkContext._jsc.sc().statusStore().stageList(
        empty, False, False, spark.sparkContext._gateway.new_array(jvm.double, 0), empty).iterator()
    times = {}
    while stages.hasNext():
        stage = stages.next()
        submitted, completed = stage.submissionTime(), stage.completionTime()
        if submitted.isDefined() and completed.isDefined():
            start = submitted.get().getTime()
            times[stage.stageId()] = {"submitted": start, "wall_ms": completed.get().getTime() - start,
                                      "tasks": stage.numTasks(), "task_run_ms": stage.executorRunTime()}
    return times


def batch_breakdown(progress: list[dict], stages: list[dict], started: float, ended: float) -> dict:
    """Where a streaming query's time went: from start() to its first trigger (the query's
    start: checkpoint, the Python source and sink runners), each micro-batch's stages as
    Spark's progress times them, with its addBatch split into the write stage (the tasks:
    reading, Arrow conversion, the sink's task writes) and the rest (planning the read's
    partitions, the sink's commit on the driver), and from the last trigger's end to the
    query's end. `started` and `ended` are epoch seconds around start() and its end;
    `stages` are the stages the query ran (`stage_times`)."""
    batches = []
    trigger_end = started * 1000
    for p in progress:
        begin = _epoch_ms(p["timestamp"])
        trigger_end = begin + p["durationMs"].get("triggerExecution", 0)
        own = [s for s in stages if begin <= s["submitted"] <= trigger_end]
        batch = {"rows": p["numInputRows"], "duration_ms": p["durationMs"]}
        if own:
            stage_ms = sum(s["wall_ms"] for s in own)
            batch.update(write_stage_ms=stage_ms, tasks=sum(s["tasks"] for s in own),
                         task_run_ms=sum(s["task_run_ms"] for s in own),
                         add_batch_outside_stage_ms=p["durationMs"].get("addBatch", 0) - stage_ms)
        batches.append(batch)
    first = _epoch_ms(progress[0]["timestamp"]) if progress else ended * 1000
    return {"start_ms": first - started * 1000, "end_ms": ended * 1000 - trigger_end,
            "wall_ms": (ended - started) * 1000, "batches": batches}


def _epoch_ms(timestamp: str) -> float:
    """A progress's trigger start (ISO 8601, UTC) in epoch milliseconds."""
    return datetime.datetime.fromisoformat(timestamp).timestamp() * 1000


def code_state() -> dict:
    """The commit measured, and which files under the measured code differed from it."""
    def git(*args):
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=30)
        return done.stdout if done.returncode == 0 else None

    changed = git("status", "--porcelain", "--", *MEASURED_CODE)
    return {"commit": (git("rev-parse", "--short", "HEAD") or "?").strip(),
            "uncommitted": None if changed is None else [line[3:] for line in changed.splitlines()]}


def _first(version) -> str:  # confluent-kafka gives a string or (string, int) by release
    return version if isinstance(version, str) else version[0]


def session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver binds to loopback only
    from pyspark.sql import SparkSession

    import spark_connector

    builder, _ = spark_read.with_kafka_connector(  # for the reads' format("kafka") rows
        SparkSession.builder.master("local[2]").appName("sluice-bench")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)
    return spark


def run(rows: int, repeats: int = 1, read_rows: int = 0, read_repeats: int = 1, spark=None,
        mode: str = "custom", log=lambda line: None, read_with_kafka: bool = True) -> dict:
    """Every writer `repeats` times (fastest kept), then the reads (skipped when read_rows
    is 0; `read_with_kafka` adds the reads from an Apache Kafka broker); uses (and leaves
    running) `spark` when one is given. Writes no report."""
    import confluent_kafka
    import pyspark

    from sluice.broker_process import BrokerProcess
    from sluice_client import Client, NewTopic

    results = {"mode": mode, "date": datetime.date.today().isoformat(),
               "started": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": machine_details(), "code": code_state(),
               "clients": {"confluent_kafka": _first(confluent_kafka.version()),
                           "librdkafka": _first(confluent_kafka.libversion()), "pyspark": pyspark.__version__},
               "load_average_before": os.getloadavg(),
               "rows": rows, "value_bytes": VALUE_SIZE, "partitions": PARTITIONS, "repeats": repeats,
               "read_rows": read_rows, "read_repeats": read_repeats}
    started = time.perf_counter()
    own_session = spark is None
    if own_session:
        spark = session()
    data_dir = tempfile.mkdtemp(prefix="sluice-bench-write-")
    seconds = {key: [] for key, _ in WRITERS}
    streaming = {}  # where the last streaming copy's time went (batch_breakdown)
    try:
        with BrokerProcess(os.path.join(data_dir, "data")) as broker, \
                Client(broker.bootstrap_servers) as client:
            bootstrap = broker.bootstrap_servers

            def new_topic(name: str) -> str:
                client.admin.create_topics({name: NewTopic(PARTITIONS, 1)})
                return name

            def count(topic: str) -> int:  # read_committed: transaction markers are not rows
                return (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
                        .option("subscribe", topic).load().count())

            def sink_write(df, topic: str, guarantee: str) -> None:
                (df.write.mode("append").format("sluice").option("kafka.bootstrap.servers", bootstrap)
                 .option("topic", topic).option("deliveryGuarantee", guarantee).save())

            def stream_copy(source: str, topic: str) -> float:
                """Seconds from start() to the query's end."""
                before = stage_times(spark)
                started = time.time()
                query = (spark.readStream.format("sluice").option("kafka.bootstrap.servers", bootstrap)
                         .option("subscribe", source).option("startingOffsets", "earliest").load()
                         .select("key", "value").writeStream.format("sluice")
                         .option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
                         .option("checkpointLocation", os.path.join(data_dir, "checkpoint-" + topic))
                         .trigger(availableNow=True).start())
                if not query.awaitTermination(STEP_TIMEOUT):
                    query.stop()
                    raise TimeoutError(f"streaming copy into {topic}: not done after {STEP_TIMEOUT:g} s")
                ended = time.time()
                if query.exception():
                    raise RuntimeError(f"streaming copy into {topic}: {query.exception()}")
                stages = [times for stage, times in stage_times(spark).items() if stage not in before]
                streaming.update(batch_breakdown(query.recentProgress, stages, started, ended))
                return ended - started

            def timed(fn, *args) -> float:
                t0 = time.perf_counter()
                fn(*args)
                return time.perf_counter() - t0

            df = spark.range(rows).selectExpr(
                "cast(id as string) as key",
                f"cast(repeat('x', {VALUE_SIZE}) as binary) as value").repartition(2).cache()
            df.count()
            # One small write of each kind first: the first transactions create the broker's
            # __transaction_state topic (50 partitions), Spark starts its Python workers, the
            # streaming query compiles: one-time costs, paid here rather than measured.
            warm = df.limit(PARTITIONS * 10)
            produce_confluent(bootstrap, new_topic("warm-confluent"), PARTITIONS * 10)
            sink_write(warm, new_topic("warm-sink-eos"), "exactly_once")
            sink_write(warm, new_topic("warm-sink-alo"), "at_least_once")
            stream_copy("warm-confluent", new_topic("warm-stream"))
            log(f"{rows:,} rows of {VALUE_SIZE}-byte values into {PARTITIONS} partitions, "
                f"fastest of {repeats}")
            for repeat in range(repeats):
                source = new_topic(f"confluent-{repeat}")
                runs = {"confluent": produce_confluent(bootstrap, source, rows)}
                sinks = [("sink_exactly_once", "eos", "exactly_once"), ("sink_at_least_once", "alo", "at_least_once")]
                for key, prefix, guarantee in sinks[::1 if repeat % 2 == 0 else -1]:  # each first in turn
                    runs[key] = timed(sink_write, df, new_topic(f"{prefix}-{repeat}"), guarantee)
                runs["streaming_exactly_once"] = stream_copy(source, new_topic(f"stream-{repeat}"))
                for (key, label), topic in zip(WRITERS, (source, f"eos-{repeat}", f"alo-{repeat}",
                                                         f"stream-{repeat}")):
                    written = count(topic)
                    if written != rows:
                        raise RuntimeError(f"{label}: {written} rows in {topic}, expected {rows}")
                    seconds[key].append(runs[key])
                    log(f"  {label}: {rows / runs[key]:,.0f} rows/s")
            df.unpersist()
        results["write"] = {key: {"label": label, "rows_per_s": rows / min(seconds[key]),
                                  "mb_per_s": rows * VALUE_SIZE / min(seconds[key]) / 1e6,
                                  "all_seconds": seconds[key]} for key, label in WRITERS}
        results["write"]["streaming_exactly_once"]["last_run"] = streaming
        confluent = results["write"]["confluent"]["rows_per_s"]
        for entry in results["write"].values():
            entry["vs_confluent"] = entry["rows_per_s"] / confluent
        ratio = results["write"]["sink_exactly_once"]["vs_confluent"]
        results["target"] = {"target": f"sink exactly_once >= {TARGET}x confluent-kafka acks=all",
                             "ratio": ratio, "limit": TARGET, "met": ratio >= TARGET}
        if read_rows:
            log(f"reads: {read_rows:,} rows, fastest of {read_repeats} (bench.spark_read)")
            read = spark_read.run(read_rows, read_repeats, spark=spark, with_kafka=read_with_kafka, log=log)
            read.pop("machine")
            results["read"] = read
    finally:
        if own_session:
            spark.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    results["load_average_after"] = os.getloadavg()
    results["seconds"] = time.perf_counter() - started
    return results


NOTES = [
    "The machine's 2 cores are shared: the broker process, Spark's JVM and its Python workers "
    "(local[2]), this process, and other engineers' Spark tests running at the same time. "
    "Timings are noisy; the load averages above show the other work. Each figure is the "
    "fastest of the repeats (every run's seconds are in the table). Each repeat runs "
    "confluent-kafka, the two sink writes (exactly_once first in even repeats, at_least_once "
    "first in odd ones), then the streaming copy.",
    "Every write goes into a fresh 8-partition topic of one Sluice broker process "
    "(`python -m broker`, data on local disk), and is counted afterwards with a read_committed "
    "`format(\"sluice\")` read, which must find exactly the rows written (transaction markers "
    "are not rows).",
    "confluent-kafka: the timing runs from creating the producer to flush() returning (every "
    "row acknowledged), no delivery callback per row. The rows are produced from a Python loop "
    "(str keys, one 100-byte value).",
    "Sink: the timing is the wall time of `save()`: the Spark job reading the cached rows (2 "
    "partitions, so 2 tasks), the Python workers turning them into record batches, and for "
    "exactly_once the transactions and their commit by the driver.",
    "Streaming availableNow: the wall time from start() to the end of the query, copying the "
    "rows confluent-kafka wrote (8 partitions, so 8 tasks) into a new topic in one micro-batch: "
    "a read and an exactly-once write, with the query's start-up and checkpointing. Its "
    "breakdown comes from Spark's progress (durationMs) and Spark's record of the query's "
    "stages (submission to completion, the tasks' summed run time).",
    "A small write of each kind runs first and is not measured (the first transactions create "
    "__transaction_state, Spark starts its Python workers).",
    "Reads: bench.spark_read as it runs on its own (its own broker process and topic, noop "
    "sink, the in-memory Python Data Source as the ceiling), on this run's Spark session: "
    "Sluice's connector and Spark's own Kafka connector (spark-sql-kafka-0-10, its jars "
    "pyspark does not ship given as spark.jars) on the same topic of the Sluice broker, then "
    "both on the same rows in an Apache Kafka broker (bench.kafka_broker).",
]


def code_line(code: dict) -> str:
    if code["uncommitted"] is None:
        return f"commit {code['commit']} (working tree not inspected)"
    if not code["uncommitted"]:
        return f"commit {code['commit']}, no uncommitted changes in {', '.join(MEASURED_CODE)}"
    return (f"commit {code['commit']} with the working tree's uncommitted changes to "
            f"{', '.join(code['uncommitted'])} (measured as they stood)")


def markdown_report(results: dict) -> str:
    md = ["# Spark benchmarks: the sluice sink against confluent-kafka, and reads "
          f"({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} (librdkafka "
          f"{results['clients']['librdkafka']}), PySpark {results['clients']['pyspark']} (local[2])",
          f"- code: {code_line(results['code'])}",
          f"- sizes: {results['rows']:,} rows of {results['value_bytes']}-byte values (string keys), "
          f"{results['partitions']} partitions, fastest of {results['repeats']}; reads "
          f"{results['read_rows']:,} rows, fastest of {results['read_repeats']}",
          f"- run time: {results['seconds']:.0f} s; load average (1/5/15 min) before "
          f"{_loads(results, 'before')}, after {_loads(results, 'after')} on "
          f"{results['machine']['cores']} cores (other work on the machine shows here)", ""]
    t = results["target"]
    md += ["## Target", "", "| target | ratio | needs | verdict |", "|---|---|---|---|",
           f"| {t['target']} | {t['ratio']:.3f}x | ≥ {t['limit']}x | {'met' if t['met'] else 'NOT met'} |",
           "", "## Writes", "", "| writer | rows/s | MB/s | vs confluent-kafka | seconds (every run) |",
           "|---|---:|---:|---:|---|"]
    for entry in results["write"].values():
        runs = ", ".join(f"{s:.2f}" for s in entry["all_seconds"])
        md.append(f"| {entry['label']} | {_fmt(entry['rows_per_s'])} | {entry['mb_per_s']:.1f} | "
                  f"{entry['vs_confluent']:.2f}x | {runs} |")
    streaming = results["write"]["streaming_exactly_once"].get("last_run")
    if streaming:
        md += ["", "## Streaming copy: where the last run's time went", "",
               "| stage | ms |", "|---|---:|",
               f"| start() to the first trigger (checkpoint, the Python source and sink runners) | "
               f"{streaming['start_ms']:,.0f} |"]
        for number, b in enumerate(streaming["batches"]):
            label = f"micro-batch {number} ({b['rows']:,} rows)"
            for name in ("latestOffset", "queryPlanning", "getBatch", "walCommit", "addBatch", "commitOffsets"):
                if name in b["duration_ms"]:
                    md.append(f"| {label}: {name} | {b['duration_ms'][name]:,} |")
                if name == "addBatch" and "write_stage_ms" in b:
                    md += [f"| {label}: addBatch's write stage ({b['tasks']} tasks reading, converting to "
                           f"Arrow and writing; their run times sum to {b['task_run_ms']:,} ms) | "
                           f"{b['write_stage_ms']:,} |",
                           f"| {label}: addBatch outside that stage (planning the read's partitions, the "
                           f"sink's commit on the driver) | {b['add_batch_outside_stage_ms']:,} |"]
            md.append(f"| {label}: the whole trigger (triggerExecution) | "
                      f"{b['duration_ms'].get('triggerExecution', 0):,} |")
        md += [f"| the last trigger's end to the query's end | {streaming['end_ms']:,.0f} |",
               f"| start() to the end (the figure in the writes table) | {streaming['wall_ms']:,.0f} |"]
    read = results.get("read")
    if read:
        met = "met" if read["targets_met"] else "NOT met"
        md += ["", "## Reads (bench.spark_read)", "", "| source (noop sink) | rows/s | vs Spark's connector, same broker |",
               "|---|---:|---:|"]
        for key, label in spark_read.SOURCES:
            value = read.get(f"{key}_rows_per_s")
            base = read.get("spark_kafka_on_kafka_rows_per_s" if key.endswith("on_kafka") else "spark_kafka_rows_per_s")
            md.append(f"| {label} | {_fmt(value) if value else 'not measured'} | "
                      + (f"{value / base:.2f}x |" if value and base and key != "ceiling" else "- |"))
        md += [""] + [f"Not measured, {key}: {why}" for key, why in (read.get("unavailable") or {}).items()]
        md += ["", f"sluice / ceiling {read['ratio']:.2f} (target ≥ 0.6, and ≥ 1,000,000 rows/s): {met}. "
               + (f"Sluice's connector / Spark's Kafka connector on the Sluice broker: {read['vs_spark_kafka']:.2f}. "
                  if "vs_spark_kafka" in read else "")
               + f"{read['rows']:,} rows of {read['value_bytes']}-byte values from {read['partitions']} partitions."]
    md += ["", "## Notes", ""] + [f"- {note}" for note in NOTES]
    return "\n".join(md) + "\n"


def write_reports(results: dict, out_dir: str) -> dict:
    return write_result_files("spark", results, out_dir, markdown_report(results))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK['rows']:,} rows once, reads of {QUICK['read_rows']:,}")
    parser.add_argument("--rows", type=int, help=f"rows per write (default {FULL['rows']:,})")
    parser.add_argument("--repeats", type=int, help=f"runs of each writer (default {FULL['repeats']})")
    parser.add_argument("--read-rows", type=int, help="rows of the read benchmark (0: skip it)")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    sizes, mode = (dict(QUICK), "quick") if args.quick else (dict(FULL), "full")
    for key, value in (("rows", args.rows), ("repeats", args.repeats), ("read_rows", args.read_rows)):
        if value is not None:
            sizes[key], mode = value, "custom"
    if not args.json:
        print(f"machine: {describe_machine()}")
        print(f"spark benchmarks ({mode}): sluice sink vs confluent-kafka, one broker process, 127.0.0.1",
              flush=True)
    results = run(**sizes, mode=mode, log=(lambda line: None) if args.json else
                  (lambda line: print(line, flush=True)))
    paths = None if args.no_write else write_reports(results, args.out)
    if args.json:
        print(json.dumps(_rounded(results), indent=1))
        return
    print()
    for entry in results["write"].values():
        print(f"  {entry['label']:<58} {entry['rows_per_s']:10,.0f} rows/s  {entry['vs_confluent']:.2f}x")
    t = results["target"]
    print(f"  target: {t['target']}: {t['ratio']:.3f}x -> {'met' if t['met'] else 'NOT met'}")
    read = results.get("read")
    if read:
        print(f"  reads: sluice {read['sluice_rows_per_s']:,.0f} rows/s, ceiling "
              f"{read['ceiling_rows_per_s']:,.0f} rows/s, ratio {read['ratio']:.2f} (target >= 0.6; "
              f"and >= 1,000,000 rows/s) -> {'met' if read['targets_met'] else 'NOT met'}")
        others = [f"{label} {read[f'{key}_rows_per_s']:,.0f}" for key, label in spark_read.SOURCES[1:4]
                  if read.get(f"{key}_rows_per_s")]
        if others:
            print("  reads, rows/s: " + "; ".join(others))
        for key, why in (read.get("unavailable") or {}).items():
            print(f"  reads, not measured ({key}): {why}")
    print(f"({results['seconds']:.0f} s; load average before {_loads(results, 'before')}, after "
          f"{_loads(results, 'after')} on {results['machine']['cores']} cores)")
    if paths:
        print(f"wrote {paths['md']} and {paths['json']}")


if __name__ == "__main__":
    main()
