"""Spark pipeline latency: `format("sluice")` source and exactly-once sink against Spark's
own Kafka source and sink, record by record (issue 33).

A paced confluent-kafka producer writes records carrying their creation time (epoch ms) to
a topic of PARTITIONS partitions; a Structured Streaming query copies them (key, value) into
another topic; a read_committed confluent-kafka consumer of that topic times each record
from its creation to its receipt. The pipelines:
- sluice: `readStream.format("sluice")` into `writeStream.format("sluice")` with the default
  deliveryGuarantee (exactly once);
- spark_kafka: Spark's own `format("kafka")` source and sink (spark-sql-kafka-0-10, at least
  once).
Each at 1,000 and 10,000 records/s, with `trigger(processingTime="0 seconds")` and
`"1 second"`, on one Sluice broker process and on one Apache Kafka 4.4 broker
(bench.kafka_broker; when it cannot run, the report says why), taking turns in one run on
one Spark session (local[2]). A case: fresh topics, the query started and its first trigger
done, then the producer for warm-up + window seconds; records created in the warm-up are not
counted, those created in the window are awaited (bounded) and give p50/p99/max; the query's
progress of the micro-batches that started in the window gives the median batch and each of
its stages (Spark's durationMs). Before the cases each pipeline runs once on each broker,
unmeasured: the first transactions create __transaction_state and the sink's intents topic,
Spark starts its Python workers. The Sluice broker serves its metrics (metrics.port): the
requests it answered during a case, by API, per micro-batch, show the round trips each
pipeline makes.
The breakdown, on the Sluice broker after its cases, with trigger "0 seconds": pipelines
one piece away from those two (the at-least-once sluice sink; the sluice source into
Spark's sink; Spark's source into the exactly-once sluice sink), to tell which piece costs
what. The floor: the same rates and triggers through a PySpark Python data source that
reads and writes nothing (bench.python_floor), which gives the micro-batch time any Python
source and sink pay before their own work.
Goals: sluice p50 and p99 <= 1.0x spark_kafka's, on the same broker, at both rates.

    python -m bench.spark_latency [--quick] [--only sluice,kafka,breakdown] [--out DIR] [--no-write]

`--only` names the brokers (`sluice`, `kafka`) the two pipelines run on, `breakdown` and
`floor`.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import statistics
import struct
import tempfile
import threading
import time
import uuid

from bench.common import VALUE_SIZE, SluiceTarget, _fmt, _loads, client_versions, sectioned_main
from bench.e2e_consumer import consumer_config, percentile
from bench.kafka_broker import start_kafka
from bench.machine import describe_machine, machine_details
from sluice.polling import wait_until
from tests.support.polling import wait_for

PARTITIONS = 2  # of the input and the output topic: one task each per batch on local[2]
RATES = (1_000, 10_000)
TRIGGERS = ("0 seconds", "1 second")

@dataclasses.dataclass(frozen=True)
class Pipeline:
    source: str              # the format read
    sink: str                # the format written
    guarantee: str | None    # the sluice sink's deliveryGuarantee
    label: str


PIPELINES = {"sluice": Pipeline("sluice", "sluice", "exactly_once", 'format("sluice") source, exactly-once sink'),
             "spark_kafka": Pipeline("kafka", "kafka", None,
                                     'format("kafka") source and sink (Spark\'s, at least once)')}
# Each one piece away from a pipeline above: which piece costs what.
BREAKDOWN = {"sluice_at_least_once": Pipeline("sluice", "sluice", "at_least_once",
                                              'format("sluice") source, at-least-once sluice sink'),
             "sluice_into_kafka": Pipeline("sluice", "kafka", None, 'format("sluice") source, Spark\'s sink'),
             "kafka_into_sluice": Pipeline("kafka", "sluice", "exactly_once",
                                           'Spark\'s source, exactly-once sluice sink')}
BREAKDOWN_TRIGGER = "0 seconds"
SECTIONS = ("sluice", "kafka", "breakdown", "floor")  # the brokers, BREAKDOWN on the Sluice broker, the floor
STAGES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
GOAL = 1.0  # sluice p50 and p99 over spark_kafka's
_RECORD = struct.Struct(">Qq")  # index, creation time in epoch ms; padded to VALUE_SIZE


@dataclasses.dataclass
class Sizes:
    warmup_seconds: float   # of producing, per case, before the window
    window_seconds: float   # of producing, per case, measured
    drain_seconds: float    # bound on waiting for the window's last records once the producer is done
    step_timeout: float     # bound on starting a query or a broker, creating topics


FULL = Sizes(warmup_seconds=10.0, window_seconds=30.0, drain_seconds=60.0, step_timeout=300.0)
QUICK = dataclasses.replace(FULL, warmup_seconds=5.0, window_seconds=5.0, drain_seconds=30.0)


def epoch_ms() -> float:
    return time.time_ns() / 1e6


class Receiver(threading.Thread):
    """A read_committed consumer of every partition of `topic` from its start: the latency
    (creation to receipt, ms) of each record from index `measured_from` on, duplicates
    counted apart."""

    def __init__(self, bootstrap: str, topic: str, measured_from: int):
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer({**consumer_config(bootstrap), "isolation.level": "read_committed"})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.measured_from = measured_from
        self.latency_ms: dict[int, float] = {}
        self.duplicates = self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                messages = self.consumer.consume(1000, 0.1)
                now = epoch_ms()
                for message in messages:
                    if message.error():
                        self.errors += 1
                        continue
                    index, created = _RECORD.unpack_from(message.value())
                    if index in self.latency_ms:
                        self.duplicates += 1
                    elif index >= self.measured_from:
                        self.latency_ms[index] = now - created
        finally:
            self.consumer.close()


def produce_paced(bootstrap: str, topic: str, rate: int, total: int, window_from: int) -> dict:
    """`total` records paced at `rate`, round-robin over the partitions, each value its
    index and creation time (epoch ms), then flushed: sent, the rate achieved, undelivered,
    and the epoch ms of the window (record `window_from` to the last record)."""
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 3,
                         "error_cb": errors.append})
    pad = bytes(VALUE_SIZE - _RECORD.size)
    interval_ns = 1_000_000_000 // rate
    started = time.monotonic_ns()
    window_start = None
    sent = 0
    while sent < total:
        due = min(total, (time.monotonic_ns() - started) // interval_ns + 1)
        while sent < due:
            if sent == window_from:
                window_start = epoch_ms()
            try:
                producer.produce(topic, _RECORD.pack(sent, time.time_ns() // 1_000_000) + pad,
                                 partition=sent % PARTITIONS)
            except BufferError:  # the local queue is full: serve delivery reports, go on pacing
                producer.poll(0.001)
                break
            sent += 1
        producer.poll(0)
        pause = (started + sent * interval_ns - time.monotonic_ns()) / 1e9
        if pause > 0:
            time.sleep(pause)
    window_end = epoch_ms()
    seconds = (time.monotonic_ns() - started) / 1e9
    left = producer.flush(30)
    return {"sent": sent, "achieved_rate": sent / seconds, "undelivered": left, "producer_errors": len(errors),
            "window_ms": (window_start, window_end)}


def broker_requests(port: int) -> dict[str, tuple[float, float]]:
    """The Sluice broker's requests answered so far, by API: (count, total ms), from its
    metrics endpoint."""
    import http.client

    from prometheus_client.parser import text_string_to_metric_families

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/metrics")
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    counts, millis = {}, {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kafka_network_requestmetrics_requests_total":
                api = sample.labels["request"]
                counts[api] = counts.get(api, 0) + sample.value  # summed over versions
            elif sample.name == "kafka_network_requestmetrics_totaltimems_sum":
                millis[sample.labels["request"]] = sample.value
    return {api: (count, millis.get(api, 0.0)) for api, count in counts.items()}


def requests_per_batch(before: dict, after: dict, batches: int) -> dict:
    """Requests answered between two `broker_requests`, by API, per micro-batch: count and
    broker ms (most first)."""
    if not batches:
        return {}
    per_batch = {api: {"requests": (count - before.get(api, (0, 0))[0]) / batches,
                       "broker_ms": (ms - before.get(api, (0, 0))[1]) / batches}
                 for api, (count, ms) in after.items()}
    return dict(sorted(((api, v) for api, v in per_batch.items() if v["requests"] > 0),
                       key=lambda item: -item[1]["requests"]))


def start_query(spark, pipeline: Pipeline, bootstrap: str, source: str, sink: str, trigger: str, checkpoint: str):
    """The pipeline's query: key and value from `source` into `sink`."""
    writer = (spark.readStream.format(pipeline.source).option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").load()
              .select("key", "value").writeStream.format(pipeline.sink)
              .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
              .option("checkpointLocation", checkpoint).trigger(processingTime=trigger))
    if pipeline.guarantee is not None:
        writer = writer.option("deliveryGuarantee", pipeline.guarantee)
    return writer.start()


def _progress_ms(progress) -> float:
    """The epoch ms at which a progress's trigger started."""
    stamp = datetime.datetime.strptime(progress["timestamp"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return stamp.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000


def batch_summary(progresses, window_ms: tuple[float, float]) -> dict:
    """The micro-batches with rows that started in the window: how many, median rows, the
    median of each stage and of the whole trigger (ms), and the median time between the
    starts of consecutive ones."""
    start, end = window_ms
    batches = [p for p in progresses if p["numInputRows"] > 0 and start <= _progress_ms(p) <= end]
    if not batches:
        return {"batches": 0}
    starts = [_progress_ms(p) for p in batches]
    return {"batches": len(batches), "rows_median": statistics.median(p["numInputRows"] for p in batches),
            "batch_ms_median": statistics.median(p["durationMs"].get("triggerExecution", 0) for p in batches),
            "stage_ms_median": {stage: statistics.median(p["durationMs"].get(stage, 0) for p in batches)
                                for stage in STAGES},
            "interval_ms_median": statistics.median(b - a for a, b in zip(starts, starts[1:]))
            if len(starts) > 1 else None}


def latency_case(spark, target, pipeline: str, rate: int, trigger: str, sizes: Sizes, workdir: str) -> dict:
    """One pipeline at one rate and trigger on `target`, in fresh topics."""
    name = f"latency-{uuid.uuid4().hex[:6]}"
    source, sink = name + "-in", name + "-out"
    target.create_topics({source: PARTITIONS, sink: PARTITIONS})
    warm = int(rate * sizes.warmup_seconds)
    total = warm + int(rate * sizes.window_seconds)
    receiver = Receiver(target.bootstrap, sink, warm)
    receiver.start()
    query = None
    try:
        query = start_query(spark, {**PIPELINES, **BREAKDOWN}[pipeline], target.bootstrap, source, sink, trigger,
                            os.path.join(workdir, "checkpoint-" + name))
        wait_for(lambda: query.lastProgress is not None or not query.isActive, sizes.step_timeout,
                 "the query's first trigger")
        metrics_port = getattr(target.process, "metrics_port", None)  # Sluice's broker only
        requests_before = broker_requests(metrics_port) if metrics_port else None
        produced = produce_paced(target.bootstrap, source, rate, total, warm)
        wait_until(lambda: len(receiver.latency_ms) >= total - warm or not query.isActive,
                   sizes.drain_seconds, interval=0.05)
        requests_after = broker_requests(metrics_port) if metrics_port else None
        if query.exception() is not None:
            raise RuntimeError(f"{pipeline} on {target.name}: the query failed: {query.exception()}")
        # stopped between triggers, not in the middle of a batch whose rows the consumer has seen
        wait_until(lambda: not query.isActive or not (query.status["isTriggerActive"]
                                                      or query.status["isDataAvailable"]), 10.0, interval=0.01)
        progresses = query.recentProgress
    finally:
        if query is not None:
            query.stop()
        receiver.stop.set()
        receiver.join(30)
    for topic in (source, sink):
        target.delete_topic(topic)
    latencies = sorted(receiver.latency_ms.values())
    return {"broker": target.name, "pipeline": pipeline, "rate": rate, "trigger": trigger,
            "measured": len(latencies), "missing": total - warm - len(latencies),
            "duplicates": receiver.duplicates, "consumer_errors": receiver.errors, **produced,
            **{key: percentile(latencies, q) for key, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("max_ms", 1.0))},
            **batch_summary(progresses, produced["window_ms"]),
            "requests_per_batch": requests_per_batch(requests_before, requests_after,
                                                     sum(1 for p in progresses if p["numInputRows"] > 0))
            if metrics_port else None}


def floor_case(spark, rate: int, trigger: str, sizes: Sizes, workdir: str) -> dict:
    """bench.python_floor's query at `rate` and `trigger` for warm-up + window seconds: the
    micro-batches that started in the window."""
    from bench import python_floor

    query = (spark.readStream.format(python_floor.NAME).option("rate", rate).option("valueBytes", VALUE_SIZE)
             .load().writeStream.format(python_floor.NAME)
             .option("checkpointLocation", os.path.join(workdir, f"checkpoint-floor-{uuid.uuid4().hex[:6]}"))
             .trigger(processingTime=trigger).start())
    try:
        wait_for(lambda: query.lastProgress is not None or not query.isActive, sizes.step_timeout,
                 "the floor query's first trigger")
        window_start = epoch_ms() + sizes.warmup_seconds * 1000
        window_end = window_start + sizes.window_seconds * 1000
        wait_until(lambda: epoch_ms() >= window_end or not query.isActive,
                   sizes.warmup_seconds + sizes.window_seconds + 1, interval=0.1)
        if query.exception() is not None:
            raise RuntimeError(f"the floor query failed: {query.exception()}")
        wait_until(lambda: not query.isActive or not query.status["isTriggerActive"], 10.0, interval=0.01)
        progresses = query.recentProgress
    finally:
        query.stop()
    return {"pipeline": "python_floor", "rate": rate, "trigger": trigger,
            **batch_summary(progresses, (window_start, window_end))}


def kafka_connector_missing(spark) -> str | None:
    """Why the session has no `format("kafka")` (None when it has): the data source is
    looked up at load(), which connects to nothing."""
    try:
        (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
         .option("subscribe", "probe").load())
    except Exception as e:  # noqa: BLE001 (AnalysisException: the connector's jars are missing)
        return f"format(\"kafka\") is not available in this session: {str(e).splitlines()[0][:300]}"
    return None


def _log_case(log, row: dict, prefix: str = "") -> None:
    log(f"  {prefix}{row['broker']:6} {row['rate']:>6,}/s trigger {row['trigger']:9} {row['pipeline']:11}: "
        f"p50 {_fmt(row['p50_ms'])} ms, p99 {_fmt(row['p99_ms'])} ms, max {_fmt(row['max_ms'])} ms; "
        f"{row['batches']} batches, median {_fmt(row.get('batch_ms_median'))} ms, addBatch "
        f"{_fmt((row.get('stage_ms_median') or {}).get('addBatch'))} ms"
        + (f"; {row['missing']} records missing" if row["missing"] else "")
        + (f"; {row['duplicates']} duplicates" if row["duplicates"] else ""))


def bench_pipelines(spark, target, pipelines: tuple[str, ...], triggers: tuple[str, ...], sizes: Sizes,
                    workdir: str, log) -> list[dict]:
    """Each pipeline once unmeasured, then at every rate and trigger, the pipelines taking
    turns (rotating which goes first)."""
    for pipeline in pipelines:
        _log_case(log, latency_case(spark, target, pipeline, RATES[0], triggers[0],
                                    dataclasses.replace(sizes, window_seconds=1.0), workdir), "warm-up, discarded: ")
    rows = []
    for i, (rate, trigger) in enumerate((r, t) for r in RATES for t in triggers):
        for pipeline in pipelines[i % len(pipelines):] + pipelines[:i % len(pipelines)]:
            row = latency_case(spark, target, pipeline, rate, trigger, sizes, workdir)
            rows.append(row)
            _log_case(log, row)
    return rows


def goals(cases: list[dict]) -> list[dict]:
    """Per broker, rate and trigger where both pipelines were measured: sluice's p50 and p99
    against spark_kafka's."""
    by_key = {(c["broker"], c["rate"], c["trigger"], c["pipeline"]): c for c in cases}
    out = []
    for (broker, rate, trigger, pipeline), case in by_key.items():
        base = by_key.get((broker, rate, trigger, "spark_kafka"))
        if pipeline != "sluice" or base is None:
            continue
        for key in ("p50_ms", "p99_ms"):
            ratio = case[key] / base[key] if case[key] and base[key] else None
            out.append({"broker": broker, "rate": rate, "trigger": trigger, "measure": key[:3],
                        "sluice_ms": case[key], "spark_kafka_ms": base[key], "ratio": ratio,
                        "met": ratio is not None and ratio <= GOAL and not case["missing"]})
    return out


def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print, spark=None) -> dict:
    """Every case on every broker of `sections`; uses (and leaves running) `spark` when one is
    given (it needs spark-sql-kafka on its classpath for the spark_kafka pipeline)."""
    import pyspark

    from bench import spark_write
    from bench.kafka_broker import version as kafka_version
    from sluice import maven

    results = {"mode": mode, "date": datetime.date.today().isoformat(), "machine": machine_details(),
               "clients": {**client_versions(), "pyspark": pyspark.__version__,
                           "spark_sql_kafka": maven.SPARK_KAFKA_CONNECTOR.rsplit(":", 1)[1]},
               "kafka_version": kafka_version(), "code": spark_write.code_state(),
               "load_average_before": os.getloadavg(), "sizes": dataclasses.asdict(sizes),
               "partitions": PARTITIONS, "value_bytes": VALUE_SIZE, "sections": list(sections),
               "cases": [], "floor": [], "unavailable": {}}
    started = time.perf_counter()
    own_session = spark is None
    if own_session:
        spark = spark_write.session()
    # every micro-batch of a case's window in recentProgress (Spark keeps 100 by default)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    missing = kafka_connector_missing(spark)
    if missing:
        results["unavailable"]["format(\"kafka\")"] = missing
        log(f"format(\"kafka\"): not measured ({missing})")

    def available(pipelines: dict) -> tuple[str, ...]:
        return tuple(key for key, p in pipelines.items() if missing is None or "kafka" not in (p.source, p.sink))

    workdir = tempfile.mkdtemp(prefix="sluice-bench-latency-")
    try:
        if "floor" in sections:
            from bench import python_floor

            spark.dataSource.register(python_floor.FloorDataSource)
            log(f"the floor: {python_floor.NAME}, a Python data source reading and writing nothing")
            floor_case(spark, RATES[0], TRIGGERS[0], dataclasses.replace(sizes, window_seconds=1.0), workdir)
            for rate, trigger in ((r, t) for r in RATES for t in TRIGGERS):
                row = floor_case(spark, rate, trigger, sizes, workdir)
                results["floor"].append(row)
                log(f"  floor {rate:>6,}/s trigger {trigger:9}: {row['batches']} batches, median "
                    f"{_fmt(row.get('batch_ms_median'))} ms, addBatch "
                    f"{_fmt((row.get('stage_ms_median') or {}).get('addBatch'))} ms")
        for broker in ("sluice", "kafka"):
            breakdown = broker == "sluice" and "breakdown" in sections
            if broker not in sections and not breakdown:
                continue
            if broker == "sluice":
                target = SluiceTarget(workdir, sizes, {"metrics.port": 0}).start()
            else:
                target, why = start_kafka(workdir, sizes, log)
                if target is None:
                    results["unavailable"]["kafka"] = why
                    log(f"kafka: not measured ({why})")
                    continue
            log(f"on the {broker} broker, {PARTITIONS} partitions, {sizes.warmup_seconds:g} s warm-up and "
                f"{sizes.window_seconds:g} s measured per case")
            try:
                if broker in sections:
                    results["cases"] += bench_pipelines(spark, target, available(PIPELINES), TRIGGERS, sizes,
                                                        workdir, log)
                if breakdown:
                    results["cases"] += bench_pipelines(spark, target, available(BREAKDOWN), (BREAKDOWN_TRIGGER,),
                                                        sizes, workdir, log)
            finally:
                target.stop()
    finally:
        if own_session:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["goals"] = goals(results["cases"])
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    return results


NOTES = [
    "Latency: from the record's creation (epoch ms, in its value, just before the producer's "
    "produce()) to the return of the read_committed consumer's consume() that brought it "
    "(librdkafka's defaults but fetch.wait.max.ms, 500 ms, and a group of its own; a broker "
    "answers a waiting fetch as soon as the last stable offset moves). It includes the "
    "producer (acks=all, librdkafka's defaults), the wait for the next trigger, the micro-batch, "
    "the sink's commit and the consumer's fetch.",
    "A case: fresh input and output topics, the query started from the earliest offsets and its "
    "first trigger done, the consumer assigned; the producer then writes for warm-up + window "
    "seconds. Records created in the warm-up are not counted; those of the window are awaited "
    "for up to drain_seconds after the producer is done (missing: never received by then).",
    "Micro-batches: Spark's progress (durationMs) of the batches with rows whose trigger started "
    "in the window; medians. triggerExecution is the whole batch; the stages are Spark's own: "
    "latestOffset (the source's end offsets), getBatch, queryPlanning, addBatch (the tasks "
    "reading and writing, and the sink's commit), walCommit (the offset log) and commitOffsets "
    "(the commit log, and the source's commit). interval: between the starts of consecutive "
    "batches.",
    "The machine's 2 cores are shared: the broker, Spark's JVM and Python workers, this process "
    "(producer and consumer threads) and whatever else runs (see the load averages).",
]


def _case_label(case: dict) -> str:
    return f"{case['broker']} | {case['rate']:,}/s | {case['trigger']}"


def markdown_report(results: dict) -> str:
    from bench.spark_write import code_line

    c = results["clients"]
    sizes = results["sizes"]
    md = [f"# Spark pipeline latency: format(\"sluice\") exactly once against Spark's Kafka connector "
          f"({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {c['confluent_kafka']} (librdkafka {c['librdkafka']}), PySpark "
          f"{c['pyspark']} (local[2]), spark-sql-kafka-0-10 {c['spark_sql_kafka']}; Apache Kafka "
          f"{results['kafka_version']}",
          f"- code: {code_line(results['code'])}",
          f"- sizes: {sizes['warmup_seconds']:g} s warm-up and {sizes['window_seconds']:g} s measured per "
          f"case, {results['partitions']} partitions in and out, {results['value_bytes']}-byte values",
          f"- run time: {results['seconds']:.0f} s; load average (1/5/15 min) before "
          f"{_loads(results, 'before')}, after {_loads(results, 'after')} on {results['machine']['cores']} cores",
          ""]
    md += ["## Goals", "",
           f"sluice (format(\"sluice\") source and exactly-once sink) p50 and p99 ≤ {GOAL:g}× spark_kafka "
           "(Spark's format(\"kafka\") source and sink, at least once), on the same broker.", "",
           "| broker | rate | trigger | measure | sluice ms | spark_kafka ms | ratio | verdict |",
           "|---|---:|---|---|---:|---:|---:|---|"]
    for g in results["goals"]:
        md.append(f"| {g['broker']} | {g['rate']:,}/s | {g['trigger']} | {g['measure']} | {_fmt(g['sluice_ms'])} | "
                  f"{_fmt(g['spark_kafka_ms'])} | {_fmt(g['ratio'])}× | {'met' if g['met'] else 'NOT met'} |")
    if not results["goals"]:
        md.append("| - | - | - | - | - | - | - | not measurable |")
    md += ["", "## End-to-end latency", "",
           "| broker | rate | trigger | pipeline | records | missing | duplicates | p50 ms | p99 ms | max ms | "
           "rate achieved |", "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for case in results["cases"]:
        md.append(f"| {_case_label(case)} | {case['pipeline']} | {case['measured']:,} | {case['missing']:,} | "
                  f"{case['duplicates']:,} | {_fmt(case['p50_ms'])} | {_fmt(case['p99_ms'])} | "
                  f"{_fmt(case['max_ms'])} | {case['achieved_rate']:,.0f}/s |")
    md += ["", "## Where a micro-batch's time goes (medians, ms)", "",
           "| broker | rate | trigger | pipeline | batches | rows | batch | interval | "
           + " | ".join(STAGES) + " |", "|---|---:|---|---|---:|---:|---:|---:|" + "---:|" * len(STAGES)]
    for case in results["cases"]:
        stages = case.get("stage_ms_median") or {}
        md.append(f"| {_case_label(case)} | {case['pipeline']} | {case['batches']} | {_fmt(case.get('rows_median'))} | "
                  f"{_fmt(case.get('batch_ms_median'))} | {_fmt(case.get('interval_ms_median'))} | "
                  + " | ".join(_fmt(stages.get(stage)) for stage in STAGES) + " |")
    if results.get("floor"):
        md += ["", "## The floor: a Python data source that reads and writes nothing (medians, ms)", "",
               "PySpark's cost per micro-batch before any connector's work, at the same rates and triggers "
               "(bench.python_floor); set it beside spark_kafka's batch above, which is Spark's whole "
               "micro-batch with its JVM Kafka source and sink.", "",
               "| rate | trigger | batches | rows | batch | interval | " + " | ".join(STAGES) + " |",
               "|---:|---|---:|---:|---:|---:|" + "---:|" * len(STAGES)]
        for row in results["floor"]:
            stages = row.get("stage_ms_median") or {}
            md.append(f"| {row['rate']:,}/s | {row['trigger']} | {row['batches']} | {_fmt(row.get('rows_median'))} | "
                      f"{_fmt(row.get('batch_ms_median'))} | {_fmt(row.get('interval_ms_median'))} | "
                      + " | ".join(_fmt(stages.get(stage)) for stage in STAGES) + " |")
    counted = [case for case in results["cases"] if case.get("requests_per_batch")]
    if counted:
        md += ["", "## Requests the Sluice broker answered per micro-batch", "",
               "From the first trigger to the last record received, divided by the micro-batches with "
               "rows; the producer's Produce and the consumer's Fetch requests are in it. Each: requests "
               "per batch (broker ms per batch, from decoding to the response, waits included).", "",
               "| rate | trigger | pipeline | by API |", "|---:|---|---|---|"]
        for case in counted:
            md.append(f"| {case['rate']:,}/s | {case['trigger']} | {case['pipeline']} | " + ", ".join(
                f"{api} {_fmt(v['requests'])} ({_fmt(v['broker_ms'])})"
                for api, v in case["requests_per_batch"].items()) + " |")
    if results["unavailable"]:
        md += [""] + [f"Not measured, {key}: {why}" for key, why in results["unavailable"].items()]
    md += ["", "## Method", "", "- Pipelines: " + "; ".join(f"{key}: {p.label}" for key, p in PIPELINES.items()) + ".",
           f"- Breakdown (on the Sluice broker, trigger \"{BREAKDOWN_TRIGGER}\", after the cases above): "
           + "; ".join(f"{key}: {p.label}" for key, p in BREAKDOWN.items()) + "."]
    md += [f"- {note}" for note in NOTES]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "spark-latency", __doc__.splitlines()[0], "a few seconds per case", SECTIONS, FULL,
                   QUICK, run, markdown_report)


if __name__ == "__main__":
    main()
