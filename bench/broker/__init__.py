"""Broker benchmarks: Sluice's broker, Apache Kafka and librdkafka's mock cluster side by side.

The three brokers run in the same benchmark run, each as a process of its own on 127.0.0.1
(bench.common's targets):
- sluice: `python -m broker` (sluice.broker_process.BrokerProcess), durable on disk in a
  temporary directory;
- kafka: Apache Kafka (sluice.maven.KAFKA_VERSION, from Maven Central) as one KRaft node in
  combined mode, in a JVM of its own with Kafka's default heap and GC settings, its log on
  the same disk (bench.kafka_broker). When it cannot be resolved or started (no network, no
  Java), the run says so and carries on with the other two;
- mock: librdkafka's mock cluster, a C broker keeping its log in memory (bench.mock_broker),
  its consume topics kept within MOCK_PARTITION_BYTES per partition.

One module per benchmark family, the same clients and settings against every broker:
1. produce (bench.broker.produce), then perftest (bench.broker.perftest): Kafka's own
   ProducerPerformance;
2. consume (bench.broker.consume): cold starts, and where a kcat consume's time goes;
3. e2e (bench.broker.e2e): end-to-end latency at a fixed rate;
4. startup (bench.broker.startup): fresh brokers to their first Metadata answer, idle RSS;
5. log (bench.broker.log, Sluice only): fetches at the head and tail of a large log, and
   start-up after a clean shutdown and after SIGKILL;
6. partitions (bench.broker.partitions): Metadata time, produce rate and RSS with N partitions;
7. profile (bench.broker.profile): py-spy of the Sluice broker while kcat produces and consumes,
   by innermost function and by stage of the broker's work (request read, decode,
   validation, idempotence check, append, index, fetch read, response, request handling,
   event loop), with the broker's CPU seconds shared out over the stages.

With --quotas, a fourth broker takes its turn in the produce and consume sections: Sluice
with client quotas set for every client but never reached (bench.broker.quotas), its
throughput beside plain Sluice's in every configuration (target: >= 0.97x).

Results (bench.broker.report): a table on stdout (Sluice/Kafka next to Sluice/mock);
markdown, JSON and a PNG chart under bench/results/. Targets are stated and marked met /
NOT met, and figures where Sluice is behind Kafka are listed with the gap; nothing here
asserts speed.

    python -m bench.broker [--quick] [--records N] [--log-mb M] [--many-partitions P]
                           [--only produce,perftest,consume,e2e,startup,log,partitions,profile]
                           [--no-kafka] [--quotas] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shutil
import tempfile
import time

from bench.broker.consume import bench_consume
from bench.broker.e2e import bench_e2e
from bench.broker.log import bench_log
from bench.broker.partitions import bench_partitions
from bench.broker.perftest import bench_perftest
from bench.broker.produce import bench_produce
from bench.broker.profile import bench_profile
from bench.broker.quotas import QuotedSluiceTarget, quota_cost
from bench.broker.report import comparison_rows, evaluate_targets, text_table, write_reports
from bench.broker.startup import bench_startup
from bench.common import (DEFAULT_OUT, FULL, MIB, MOCK_PARTITION_BYTES, QUICK, REPO, VALUE_SIZE, MockTarget,
                          Sizes, SluiceTarget, _loads, client_versions, section_timer,
                          value_pool)
from bench.kafka_broker import start_kafka
from bench.machine import describe_machine, machine_details

SECTIONS = ("produce", "perftest", "consume", "e2e", "startup", "log", "partitions", "profile")


def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print, with_kafka: bool = True,
        with_quotas: bool = False) -> dict:
    """Every benchmark in `sections`; returns the results (nothing written). Without
    `with_kafka`, or when Kafka cannot be resolved or started, Sluice vs mock only. With
    `with_quotas`, Sluice with quotas set but not reached takes its turn too (produce,
    consume) and "quotas" compares it with plain Sluice."""
    from bench.kafka_broker import KafkaTarget, KafkaUnavailable

    pool = value_pool()
    results = {"mode": mode, "date": datetime.date.today().isoformat(),
               "started": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": machine_details(), "clients": client_versions(),
               "load_average_before": os.getloadavg(),
               "sizes": dataclasses.asdict(sizes)}
    workdir = tempfile.mkdtemp(prefix="sluice-bench-broker-")
    started = time.perf_counter()
    timed = section_timer(results)
    results["kafka"] = {"version": None, "included": False,
                        "unavailable": None if with_kafka else "left out (--no-kafka)"}

    def kafka_missing(reason):
        results["kafka"]["unavailable"] = reason
        log(f"  KAFKA UNAVAILABLE: {reason}")
        log("  (the benchmarks carry on with Sluice and the mock cluster only)")

    try:
        if {"produce", "perftest", "consume", "e2e"} & set(sections):
            targets = []
            try:
                targets.append(SluiceTarget(workdir, sizes).start())
                if with_quotas:
                    targets.append(QuotedSluiceTarget(workdir, sizes).start())
                if with_kafka and not results["kafka"]["unavailable"]:
                    kafka, reason = start_kafka(workdir, sizes, log)
                    if kafka is None:
                        kafka_missing(reason)
                    else:
                        targets.append(kafka)
                targets.append(MockTarget(workdir, sizes).start())
                if "produce" in sections:
                    log("1. produce")
                    results["produce"] = timed("produce", bench_produce, targets, sizes, pool, workdir, log)
                if "perftest" in sections:
                    log("1b. produce with Kafka's ProducerPerformance")
                    results["perftest"] = timed("perftest", bench_perftest, targets, sizes, log)
                if "consume" in sections:
                    log("2. consume")
                    results["consume"], results["consume_fetches"] = timed(
                        "consume", bench_consume, targets, sizes, pool, workdir, log)
                if "e2e" in sections:
                    log("3. end-to-end latency")
                    results["e2e"] = timed("e2e", bench_e2e, targets, sizes, log)
            finally:
                for target in targets:
                    target.stop()
        kafka_ok = with_kafka and not results["kafka"]["unavailable"]
        if "startup" in sections:
            log("4. start-up and idle memory")
            makes = [SluiceTarget] + ([KafkaTarget] if kafka_ok else []) + [MockTarget]
            try:
                results["startup"] = timed("startup", bench_startup, makes, workdir, sizes, log)
            except KafkaUnavailable as e:  # reported, not fatal: the others are measured again
                kafka_missing(f"in the start-up benchmark: {e}")
                kafka_ok = False
                results["startup"] = timed("startup", bench_startup, [SluiceTarget, MockTarget],
                                           workdir, sizes, log)
        if "log" in sections:
            log("5. log scaling (sluice only)")
            results["log"] = timed("log", bench_log, workdir, sizes, pool, log)
        if "partitions" in sections:
            log("6. many partitions")
            makes = [SluiceTarget] + ([KafkaTarget] if kafka_ok else []) + [MockTarget]
            results["partitions"] = timed("partitions", bench_partitions, makes, workdir, sizes, log)
        if "profile" in sections:
            log("7. profile of the sluice broker (py-spy)")
            results["profile"] = timed("profile", bench_profile, workdir, sizes, pool, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if with_kafka and not results["kafka"]["unavailable"]:
            from bench.kafka_broker import version

            results["kafka"]["version"] = version()
    results["kafka"]["included"] = any(
        isinstance(rows, list) and any(isinstance(r, dict) and r.get("broker") == "kafka" for r in rows)
        for rows in results.values())
    if with_quotas:
        results["quotas"] = quota_cost(results)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    results["table"] = comparison_rows(results)
    results["targets"] = evaluate_targets(results)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.broker", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    parser.add_argument("--records", type=int, help="records per produce configuration")
    parser.add_argument("--log-mb", type=int, help="size of the large log (MiB)")
    parser.add_argument("--many-partitions", type=int, help="partitions of the many-partitions run")
    parser.add_argument("--e2e-seconds", type=float, help="measured seconds of the latency run")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json/.png")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--no-kafka", action="store_true", help="Sluice vs the mock cluster only")
    parser.add_argument("--quotas", action="store_true",
                        help="Sluice with client quotas set but not reached beside it (produce, consume)")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    overrides = {k: v for k, v in (("records", args.records),
                                   ("log_bytes", args.log_mb and args.log_mb * MIB),
                                   ("many_partitions", args.many_partitions),
                                   ("e2e_seconds", args.e2e_seconds)) if v}
    if overrides:
        sizes = dataclasses.replace(sizes, **overrides)
        mode = "custom"
    sections = SECTIONS if not args.only else tuple(s.strip() for s in args.only.split(","))
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}")
    if sizes.consume_per_partition * (VALUE_SIZE + 12) > MOCK_PARTITION_BYTES:
        parser.error("consume_per_partition exceeds what the mock cluster keeps per partition")
    print(f"machine: {describe_machine()}")
    print(f"broker benchmarks ({mode}): sluice (process, on disk)"
          + ("" if args.no_kafka else " vs Apache Kafka (JVM, KRaft, on disk)")
          + " vs librdkafka mock cluster (process, in memory), 127.0.0.1", flush=True)

    def log(line):
        print(line, flush=True)

    results = run(sizes, mode, sections, log, with_kafka=not args.no_kafka, with_quotas=args.quotas)
    print()
    print(text_table(results["table"], results["targets"]))
    print("(broker CPU and RSS: /proc of each broker's process; how each figure was taken: the .md's Method)")
    if not results["kafka"]["included"]:
        print(f"KAFKA NOT IN THIS RUN: {results['kafka']['unavailable'] or 'no section that uses it ran'}")
    print(f"({results['seconds']:.0f} s: {results['section_seconds']}; load average before "
          f"{_loads(results, 'before')}, after {_loads(results, 'after')} on "
          f"{results['machine']['cores']} cores)")
    if not args.no_write:
        paths = write_reports(results, args.out)
        print("written: " + ", ".join(os.path.relpath(p, REPO) for p in paths.values()))


if __name__ == "__main__":
    main()
