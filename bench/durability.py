"""What flushing every batch costs: produce rates with and without `flush.messages=1`.

One Sluice broker process, data in a temporary directory (the report names its file
system: fsync costs differ by orders of magnitude between tmpfs, a local SSD and a
network disk). Two topics of one partition each: `flush.messages=1` (fsync before every
acknowledgement) and the default (no fsync: the page cache holds acknowledged writes).
confluent-kafka produces 100-byte values with acks=all, idempotent, in two shapes: large
batches (linger.ms=5, batch.size=1 MB) and one record per request, each acknowledged
before the next is sent (linger.ms=0), where fsync is paid once per record. The topics alternate per repeat;
the fastest run of each is kept.

    python -m bench.durability [--quick] [--records N] [--repeats N] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
import uuid

from bench.common import (DEFAULT_OUT, QUICK as BROKER_QUICK, VALUE_SIZE, Sizes, SluiceTarget,
                          _atomic_write, _fmt, _rounded)
from bench.machine import describe_machine, machine_details

POLICIES = (("default", {}), ("flush.messages=1", {"flush.messages": "1"}))
# (key, label, producer settings, records as a share of --records)
SHAPES = (("batches", "large batches (linger.ms=5, batch.size=1 MB)",
           {"linger.ms": 5, "batch.size": 1_000_000}, 1.0),
          ("single", "one record per request, each awaited (linger.ms=0)",
           {"linger.ms": 0}, 0.01))
FULL = {"records": 500_000, "repeats": 3}
QUICK = {"records": 100_000, "repeats": 2}
STEP_TIMEOUT = 600.0


def file_system_of(path: str) -> str:
    """The type and source of the mount holding `path` (the longest matching mount point)."""
    path = os.path.realpath(path)
    best = ("", "unknown", "?")
    with open("/proc/mounts") as f:
        for line in f:
            source, point, fstype = line.split()[:3]
            if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) > len(best[0]):
                best = (point, fstype, source)
    return f"{best[1]} ({best[2]} on {best[0]})"


def produce(bootstrap: str, topic: str, records: int, settings: dict, each_awaited: bool) -> float:
    """Seconds from the first of `records` values to the last acknowledged (acks=all,
    idempotent), after one acknowledged warm-up record (connections and producer id)."""
    from confluent_kafka import Producer

    errors = []
    value = b"x" * VALUE_SIZE
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "log_level": 3, "error_cb": errors.append, **settings})
    producer.produce(topic, value)
    if producer.flush(STEP_TIMEOUT):
        raise TimeoutError(f"{topic}: the warm-up record was not delivered ({errors[:3]})")
    deadline = time.monotonic() + STEP_TIMEOUT
    started = time.perf_counter()
    i = 0
    while i < records:
        try:
            producer.produce(topic, value)
            i += 1
        except BufferError:
            producer.poll(0.005)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: {i} of {records} records queued in {STEP_TIMEOUT:g} s")
        else:
            if each_awaited:
                if producer.flush(STEP_TIMEOUT):
                    raise TimeoutError(f"{topic}: record {i} undelivered ({errors[:3]})")
            elif i & 0x3FF == 0:
                producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left:
        raise TimeoutError(f"{topic}: {left} records undelivered ({errors[:3]})")
    return time.perf_counter() - started


def run(records: int, repeats: int, mode: str, log=print) -> dict:
    started = time.monotonic()
    results = {"date": datetime.date.today().isoformat(), "mode": mode, "machine": machine_details(),
               "records": records, "repeats": repeats, "value_bytes": VALUE_SIZE, "shapes": {}}
    with tempfile.TemporaryDirectory(prefix="sluice-bench-durability-") as workdir:
        results["file_system"] = file_system_of(workdir)
        sizes: Sizes = BROKER_QUICK
        target = SluiceTarget(workdir, sizes).start()
        try:
            for key, label, settings, share in SHAPES:
                count = max(1, int(records * share))
                seconds = {policy: [] for policy, _ in POLICIES}
                for repeat in range(repeats):
                    order = POLICIES if repeat % 2 == 0 else POLICIES[::-1]
                    for policy, configs in order:
                        topic = f"durability-{key}-{uuid.uuid4().hex[:6]}"
                        target.create_topics({topic: 1}, configs)
                        seconds[policy].append(produce(target.bootstrap, topic, count, settings,
                                                       each_awaited=key == "single"))
                        target.delete_topic(topic)
                        log(f"  {label}, {policy}: {count / seconds[policy][-1]:,.0f} rec/s")
                rates = {policy: count / min(runs) for policy, runs in seconds.items()}
                results["shapes"][key] = {
                    "label": label, "records": count, "rec_per_s": rates,
                    "all_seconds": seconds,
                    "flush_over_default": rates["flush.messages=1"] / rates["default"]}
        finally:
            target.stop()
    results["seconds"] = time.monotonic() - started
    return results


def markdown_report(results: dict) -> str:
    md = [f"# Durability: the cost of flush.messages=1 ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- data directory's file system: {results['file_system']}",
          f"- {results['value_bytes']}-byte values, one partition, acks=all, idempotent; "
          f"fastest of {results['repeats']} runs per topic; run time {results['seconds']:.0f} s", "",
          "| producer | records | default rec/s | flush.messages=1 rec/s | flush / default |",
          "|---|---:|---:|---:|---:|"]
    for shape in results["shapes"].values():
        rates = shape["rec_per_s"]
        md.append(f"| {shape['label']} | {shape['records']:,} | {_fmt(rates['default'])} | "
                  f"{_fmt(rates['flush.messages=1'])} | {shape['flush_over_default']:.2f}x |")
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--records", type=int, help=f"records per large-batch run (default {FULL['records']:,})")
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--out", default=DEFAULT_OUT)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    sizes, mode = (dict(QUICK), "quick") if args.quick else (dict(FULL), "full")
    for key in ("records", "repeats"):
        if getattr(args, key) is not None:
            sizes[key], mode = getattr(args, key), "custom"
    print(f"machine: {describe_machine()}")
    print(f"durability benchmark ({mode}): flush.messages=1 vs the default, one broker process", flush=True)
    results = run(**sizes, mode=mode)
    report = markdown_report(results)
    print()
    print(report)
    if not args.no_write:
        os.makedirs(args.out, exist_ok=True)
        stem = f"durability-{results['date']}" + ("" if mode == "full" else f"-{mode}")
        _atomic_write(os.path.join(args.out, stem + ".md"), report)
        _atomic_write(os.path.join(args.out, stem + ".json"), json.dumps(_rounded(results), indent=1) + "\n")


if __name__ == "__main__":
    main()
