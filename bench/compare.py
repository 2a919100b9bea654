"""This tree's broker against a base revision's, side by side in one run.

bench.broker compares Sluice with librdkafka's mock cluster, and single runs of it move
by tens of percent with the machine's load, so that comparing its ratios across days
cannot tell a small regression from noise. Here the two Sluice versions take turns on
the same workloads in the same run (bench.broker's produce and consume benchmarks, and its
end-to-end latency run, acks=all, with the same clients and settings): the head/base
ratio is the regression figure (of throughput; of p99 latency, where lower is better).

The base revision is exported with `git archive` into a temporary directory and its C
extensions compiled in place; each broker runs as `python -m broker` from its own tree.

    python -m bench.compare [--base REV] [--records N] [--repeats N] [--out DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import glob
import io
import json
import os
import shlex
import subprocess
import sysconfig
import tarfile
import tempfile
import time

from bench.broker.consume import bench_consume
from bench.broker.e2e import bench_e2e
from bench.broker.produce import bench_produce
from bench.common import (DEFAULT_OUT, FULL, REPO, Sizes, SluiceTarget, _atomic_write, _fmt, _rounded,
                          value_pool)
from bench.machine import describe_machine, machine_details

DEFAULTS = {"records": 1_000_000, "repeats": 5}


class TreeTarget(SluiceTarget):
    """A Sluice broker process running the code of `source_dir`."""

    def __init__(self, workdir: str, sizes, name: str, source_dir: str):
        super().__init__(workdir, sizes)
        self.name = name
        self.process.source_dir = source_dir


def export_tree(revision: str, into: str) -> str:
    """The files of `revision` under `into`, with the C extension built in place."""
    archive = subprocess.run(["git", "-C", REPO, "archive", "--format=tar", revision],
                             capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise SystemExit(f"bench.compare: cannot export {revision!r}: "
                         f"{archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    # Compiled directly: the virtualenv's setuptools may predate ext-modules in pyproject.
    compiler = shlex.split(sysconfig.get_config_var("CC") or "cc")
    for source in glob.glob(os.path.join(into, "wire", "*.c")):
        target = source[:-2] + sysconfig.get_config_var("EXT_SUFFIX")
        build = subprocess.run([*compiler, "-O2", "-shared", "-fPIC", "-I",
                                sysconfig.get_paths()["include"], source, "-o", target],
                               capture_output=True, timeout=600)
        if build.returncode != 0:
            raise SystemExit(f"bench.compare: building {revision}'s {os.path.basename(source)} "
                             f"failed:\n{build.stderr.decode(errors='replace')[-2000:]}")
    return into


def describe_revision(revision: str) -> str:
    out = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s", revision],
                         capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or revision


def head_state() -> str:
    commit = describe_revision("HEAD")
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "wire", "sluice_client", "broker"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
    return commit + (" with uncommitted changes to wire/, sluice_client/ or broker/" if dirty else "")


def run(base: str, records: int, repeats: int, log=print, sizes: Sizes = FULL) -> dict:
    """`sizes`: bench.broker's (its consume topic among them); records and repeats replace
    its own."""
    started = time.monotonic()
    sizes = dataclasses.replace(sizes, records=records, produce_repeats=repeats,
                                consume_repeats=repeats, step_timeout=600.0)
    pool = value_pool()
    results = {"date": datetime.date.today().isoformat(), "machine": machine_details(),
               "base": describe_revision(base), "head": head_state(), "records": records,
               "repeats": repeats, "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="sluice-bench-compare-") as workdir:
        base_tree = export_tree(base, os.path.join(workdir, "base-tree"))
        targets = [TreeTarget(workdir, sizes, "base", base_tree).start(),
                   TreeTarget(workdir, sizes, "head", REPO).start()]
        try:
            produce = bench_produce(targets, sizes, pool, workdir, log)
            consume, _ = bench_consume(targets, sizes, pool, workdir, log)
            e2e = bench_e2e(targets, sizes, log)
        finally:
            for target in targets:
                target.stop()
    rows = []
    for kind, measured, keys in (("produce", produce, ("client", "acks", "partitions", "compression")),
                                 ("consume", consume, ("client",))):
        by_config: dict[tuple, dict] = {}
        for row in measured:
            by_config.setdefault(tuple(row[k] for k in keys), {})[row["broker"]] = row
        for config, pair in by_config.items():
            rows.append({"benchmark": kind, "config": " ".join(str(c) for c in config),
                         "base_rec_per_s": pair["base"]["records_per_s"],
                         "head_rec_per_s": pair["head"]["records_per_s"],
                         "head_over_base": pair["head"]["records_per_s"] / pair["base"]["records_per_s"],
                         "base_seconds": pair["base"]["all_seconds"],
                         "head_seconds": pair["head"]["all_seconds"]})
    results["rows"] = rows
    latency: dict[tuple, dict] = {}
    for row in e2e:
        latency.setdefault((row["linger_ms"], row["fetch_wait_max_ms"]), {})[row["broker"]] = row
    results["e2e"] = [{"linger_ms": linger, "fetch_wait_max_ms": wait, "rate": pair["head"]["rate"],
                       "base_p99_ms": pair["base"].get("p99_ms"), "head_p99_ms": pair["head"].get("p99_ms"),
                       "base_p50_ms": pair["base"].get("p50_ms"), "head_p50_ms": pair["head"].get("p50_ms"),
                       "lost": pair["base"]["lost"] + pair["head"]["lost"]}
                      for (linger, wait), pair in latency.items()]
    results["load_average_after"] = os.getloadavg()
    results["seconds"] = time.monotonic() - started
    return results


def markdown_report(results: dict) -> str:
    loads = "/".join(f"{v:.1f}" for v in results["load_average_before"]) + " before, " + \
        "/".join(f"{v:.1f}" for v in results["load_average_after"]) + " after"
    md = [f"# Sluice against an earlier Sluice: {results['date']}", "",
          f"- machine: {describe_machine()}",
          f"- base: {results['base']}",
          f"- head: {results['head']}",
          f"- produce: {results['records']:,} records of 100 bytes per run; consume: bench.broker's "
          f"cold starts; {results['repeats']} runs each, the brokers taking turns, median kept",
          f"- run time {results['seconds']:.0f} s; load average (1/5/15 min) {loads}", "",
          "| benchmark | configuration | base rec/s | head rec/s | head / base |",
          "|---|---|---:|---:|---:|"]
    for row in results["rows"]:
        md.append(f"| {row['benchmark']} | {row['config']} | {_fmt(row['base_rec_per_s'])} | "
                  f"{_fmt(row['head_rec_per_s'])} | {row['head_over_base']:.3f}x |")
    ratios = sorted(row["head_over_base"] for row in results["rows"])
    md += ["", f"head / base: lowest {ratios[0]:.3f}x, median {ratios[len(ratios) // 2]:.3f}x, "
               f"highest {ratios[-1]:.3f}x over {len(ratios)} configurations. Every run's "
               f"seconds are in the JSON.", "",
           "Every run together (the same records through both brokers; a single configuration's "
           "runs spread by tens of percent):", "",
           "| benchmark, client | base seconds | head seconds | head / base rate |", "|---|---:|---:|---:|"]
    totals: dict[str, list[float]] = {}
    for row in results["rows"]:
        group = f"{row['benchmark']}, {row['config'].split()[0]}" if row["benchmark"] == "produce" \
            else row["benchmark"]
        pair = totals.setdefault(group, [0.0, 0.0])
        pair[0] += sum(row["base_seconds"])
        pair[1] += sum(row["head_seconds"])
    for group, (base, head) in totals.items():
        md.append(f"| {group} | {base:.2f} | {head:.2f} | {base / head:.3f}x |")
    md += ["", f"End-to-end latency, acks=all, {results['e2e'][0]['rate']:,} records/s, one partition "
               f"(bench.broker's e2e run, one run per broker and configuration):", "",
           "| linger.ms | fetch.wait.max.ms | base p50 ms | head p50 ms | base p99 ms | head p99 ms | "
           "head / base p99 |", "|---:|---:|---:|---:|---:|---:|---:|"]
    for row in results["e2e"]:
        if row["base_p99_ms"] is None or row["head_p99_ms"] is None:
            md.append(f"| {row['linger_ms']} | {row['fetch_wait_max_ms']} | no record arrived | | | | |")
            continue
        md.append(f"| {row['linger_ms']} | {row['fetch_wait_max_ms']} | {row['base_p50_ms']:.2f} | "
                  f"{row['head_p50_ms']:.2f} | {row['base_p99_ms']:.2f} | {row['head_p99_ms']:.2f} | "
                  f"{row['head_p99_ms'] / row['base_p99_ms']:.3f}x |")
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the revision to compare with (default HEAD~1)")
    parser.add_argument("--records", type=int, default=DEFAULTS["records"])
    parser.add_argument("--repeats", type=int, default=DEFAULTS["repeats"])
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    print(f"machine: {describe_machine()}")
    print(f"this tree's broker against {args.base}'s, side by side", flush=True)
    results = run(args.base, args.records, args.repeats, log=lambda line: print(line, flush=True))
    report = markdown_report(results)
    print()
    print(report)
    if not args.no_write:
        os.makedirs(args.out, exist_ok=True)
        stem = os.path.join(args.out, f"compare-{results['date']}")
        _atomic_write(stem + ".md", report)
        _atomic_write(stem + ".json", json.dumps(_rounded(results), indent=1) + "\n")


if __name__ == "__main__":
    main()
