"""4. Start-up and memory: fresh brokers, from starting the process to the first Metadata
answer, and the RSS once idle."""

from __future__ import annotations

import os
import statistics
import time

from bench.common import Sizes, SluiceTarget, memory_kib


def cold_start(make, workdir: str, sizes: Sizes) -> dict:
    """One fresh broker: seconds from starting its process to its first Metadata answer
    naming a broker (Kafka's storage formatted beforehand, outside the time), then its
    RSS after `idle_seconds` of idleness."""
    from bench.kafka_broker import KafkaTarget, wait_for_metadata

    target = make(workdir, sizes)
    try:
        format_s = None
        if isinstance(target, KafkaTarget):
            format_s = target.process.format(sizes.step_timeout)
            target.process.start(timeout=min(sizes.step_timeout, 180.0))
            seconds = target.process.start_s
        else:
            started = time.perf_counter()
            target.process.start(timeout=60) if isinstance(target, SluiceTarget) else target.process.start()
            seconds = wait_for_metadata(target.bootstrap, time.monotonic() + 60) - started
        rss_first = memory_kib(target.pid, "VmRSS")
        time.sleep(sizes.idle_seconds)  # a measured idle period, not a wait for a condition
        rss_idle = memory_kib(target.pid, "VmRSS")
        threads = len(os.listdir(f"/proc/{target.pid}/task"))
    finally:
        target.stop()
    return {"start_s": seconds, "format_s": format_s, "rss_at_first_answer_mib": rss_first / 1024,
            "rss_idle_mib": rss_idle / 1024, "threads": threads}


def bench_startup(makes, workdir: str, sizes: Sizes, log) -> list[dict]:
    """`cold_starts` fresh brokers of each kind, taking turns; the fastest start is the
    figure (other work on a shared machine can only lengthen one), the median is kept too."""
    runs = {make.name: [] for make in makes}
    for _ in range(sizes.cold_starts):
        for make in makes:
            runs[make.name].append(cold_start(make, workdir, sizes))
    rows = []
    for make in makes:
        r = runs[make.name]
        starts = [x["start_s"] for x in r]
        row = {"broker": make.name, "start_s": min(starts), "start_median_s": statistics.median(starts),
               "all_start_s": starts,
               "rss_idle_mib": statistics.median(x["rss_idle_mib"] for x in r),
               "rss_at_first_answer_mib": statistics.median(x["rss_at_first_answer_mib"] for x in r),
               "threads": r[-1]["threads"], "idle_seconds": sizes.idle_seconds,
               "format_s": min((x["format_s"] for x in r if x["format_s"] is not None), default=None)}
        rows.append(row)
        log(f"  start-up {make.name:6}: {row['start_s']:.2f} s to the first Metadata answer (fastest "
            f"of {len(starts)}, median {row['start_median_s']:.2f} s); idle RSS {row['rss_idle_mib']:.0f} MiB "
            f"after {sizes.idle_seconds:g} s, {row['threads']} threads")
    return rows

