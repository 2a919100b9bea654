"""5. Log scaling (Sluice only): small fetches at the head and the tail of a large
partition, and start-up after a clean shutdown and after SIGKILL, small log vs large."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import time

from bench.common import MB, Sizes, dir_bytes, stop_or_kill
from sluice.broker_process import BrokerProcess


def fill_log(bootstrap: str, topic: str, total_bytes: int, pool, timeout: float) -> dict:
    """Small batches at the head, ~1 MiB batches in the middle, small batches at the tail
    (so that a small fetch at either end returns a small batch)."""
    from sluice_client import AsyncClient
    from wire.records import build_batch

    now = int(time.time() * 1000)
    mask = len(pool) - 1
    small = build_batch([(None, pool[i & mask], (), now) for i in range(10)])
    big = build_batch([(None, pool[i & mask], (), now) for i in range(9_000)])
    bulk_batches = max(1, total_bytes // len(big))

    async def fill():
        async with AsyncClient(bootstrap, request_timeout=60) as client:
            for _ in range(50):
                await client.producer.produce_batch(topic, 0, small, acks=1)
            in_flight = asyncio.Semaphore(4)

            async def one():
                async with in_flight:
                    await client.producer.produce_batch(topic, 0, big, acks=1)

            started = time.perf_counter()
            for start in range(0, bulk_batches, 64):  # bounded groups, never all at once
                await asyncio.gather(*(one() for _ in range(min(64, bulk_batches - start))))
            seconds = time.perf_counter() - started
            for _ in range(50):
                await client.producer.produce_batch(topic, 0, small, acks=1)
            return seconds

    seconds = asyncio.run(asyncio.wait_for(fill(), timeout))
    return {"bulk_bytes": bulk_batches * len(big), "bulk_seconds": seconds,
            "bulk_mb_per_s": bulk_batches * len(big) / seconds / MB,
            "records": 1000 + bulk_batches * 9_000}


def fetch_latencies(client, topic: str, offsets: dict[str, int], samples: int) -> dict[str, list[float]]:
    """Alternating small fetches at each offset: seconds per fetch."""
    timings = {name: [] for name in offsets}
    for _ in range(samples):
        for name, offset in offsets.items():
            started = time.perf_counter()
            result = client.consumer.fetch(topic, 0, offset, max_wait_ms=0, max_bytes=4096)
            timings[name].append(time.perf_counter() - started)
            if len(result.records) == 0:
                raise RuntimeError(f"fetch at {name} offset {offset} returned nothing")
    return timings


def timed_start(process, timeout: float) -> float:
    started = time.perf_counter()
    process.start(timeout=timeout)
    return time.perf_counter() - started


def startup_times(process, repeats: int, timeout: float) -> dict:
    """The process is running with unflushed data: SIGKILL, time the recovering start;
    then stop cleanly and time `repeats` clean starts. The fastest is the figure: other
    work on a shared machine can only lengthen a start (the median is kept too)."""
    process.kill()
    after_kill = timed_start(process, timeout)
    clean = []
    for _ in range(repeats):
        stop_or_kill(process, timeout)
        clean.append(timed_start(process, timeout))
    return {"after_sigkill_s": after_kill, "clean_s": min(clean), "clean_median_s": statistics.median(clean),
            "clean_all_s": clean}


def bench_log(workdir: str, sizes: Sizes, pool, log) -> dict:
    from sluice_client import Client, NewTopic

    timeout = sizes.step_timeout
    out = {}
    # small log: 1 MB in one partition
    small = BrokerProcess(os.path.join(workdir, "log-small"))
    small.start(timeout=60)
    try:
        with Client(small.bootstrap_servers) as client:
            client.admin.create_topics({"small": NewTopic(1, 1)})
        fill_log(small.bootstrap_servers, "small", MB, pool, timeout)
        out["small"] = {"log_bytes": dir_bytes(small.data_dir),
                        **startup_times(small, sizes.startup_repeats, timeout)}
    finally:
        small.kill()
    shutil.rmtree(os.path.join(workdir, "log-small"), ignore_errors=True)
    log(f"  start-up, small log ({out['small']['log_bytes'] / MB:.1f} MB): clean "
        f"{out['small']['clean_s']:.2f} s, after SIGKILL {out['small']['after_sigkill_s']:.2f} s")

    large = BrokerProcess(os.path.join(workdir, "log-large"))
    large.start(timeout=60)
    try:
        with Client(large.bootstrap_servers, call_timeout=timeout) as client:
            client.admin.create_topics({"large": NewTopic(1, 1, {"segment.bytes": str(sizes.log_segment_bytes)})})
            fill = fill_log(large.bootstrap_servers, "large", sizes.log_bytes, pool, timeout)
            end = client.consumer.fetch("large", 0, 0, max_wait_ms=0, max_bytes=1024).high_watermark
            offsets = {"head": 0, "tail": end - 5}
            timings = fetch_latencies(client, "large", offsets, sizes.fetch_samples)
        segments = len([n for n in os.listdir(os.path.join(large.data_dir, "large-0")) if n.endswith(".log")])
        fetch = {name: {"median_ms": statistics.median(t) * 1e3,
                        "p90_ms": sorted(t)[int(0.9 * (len(t) - 1))] * 1e3} for name, t in timings.items()}
        out["large"] = {"log_bytes": dir_bytes(large.data_dir), "records": end, "segments": segments,
                        "segment_bytes": sizes.log_segment_bytes, "fill": fill, "fetch": fetch,
                        "fetch_samples": sizes.fetch_samples}
        log(f"  log: {out['large']['log_bytes'] / MB:,.0f} MB, {end:,} records, {segments} segments "
            f"(filled at {fill['bulk_mb_per_s']:.0f} MB/s with 1 MiB batches)")
        log(f"  fetch 4 KB at head: median {fetch['head']['median_ms']:.3f} ms; at tail: "
            f"median {fetch['tail']['median_ms']:.3f} ms ({sizes.fetch_samples} each)")
        out["large"].update(startup_times(large, sizes.startup_repeats, timeout))
        # the first fetch after a clean restart: indexes not yet touched by this process
        with Client(large.bootstrap_servers, call_timeout=timeout) as client:
            client.metadata(["large"])  # connected, versions and leader known: only the fetch is timed
            first = fetch_latencies(client, "large", {"head": 0, "tail": end - 5}, 1)
        out["large"]["first_fetch_after_restart_ms"] = {k: v[0] * 1e3 for k, v in first.items()}
    finally:
        large.kill()
    shutil.rmtree(os.path.join(workdir, "log-large"), ignore_errors=True)
    log(f"  start-up, large log ({out['large']['log_bytes'] / MB:,.0f} MB): clean "
        f"{out['large']['clean_s']:.2f} s, after SIGKILL {out['large']['after_sigkill_s']:.2f} s")
    return out

