"""Log compaction benchmarks (issue 21): how fast the log cleaner compacts, what it costs
acks=all produce latency while it runs, and how long the group coordinator takes to load
from a compacted `__consumer_offsets` as offset commits accumulate.

Every broker is a `python -m broker` process on 127.0.0.1 started by this run, with the
settings BROKER_CONFIG lists (printed in the report); clients are confluent-kafka and the
project's Sluice client.

1. throughput: a 1-partition topic (cleanup.policy=delete) receives `compact_records`
   records of 100 bytes over `compact_keys` distinct keys; then its policy is altered to
   compact (IncrementalAlterConfigs) and the cleaner compacts it. MB/s cleaned: the
   cleaner's own figures (bytes it read / its cleaning time, from its log lines) and,
   beside them, the bytes that left the partition's segments over the time from the
   alteration until the cleaning ended (that includes the cleaner's backoff).
2. latency: on the same broker, a confluent-kafka producer sends small records (acks=all,
   linger.ms=0) at a fixed rate to a topic of its own, and the delivery latency of each
   (librdkafka's own measure, produce() to acknowledgement) is kept, p50/p99: while the
   cleaner has nothing to clean, then while it compacts a dirty backlog (a topic filled
   under cleanup.policy=delete and altered to compact when the window starts; sized from
   section 1's throughput so that cleaning outlasts the window), then idle again.
3. load: a fresh broker receives offset commits through the wire (OffsetCommit requests
   of `partitions_per_commit` partitions each, AsyncClient.consumer.commit_offsets) over a fixed
   set of `commit_keys` group/partition keys, in cumulative steps; after each step the
   cleaner is left to compact `__consumer_offsets` (until a cleaning has reached its
   active segment, which it never cleans), then the broker is stopped (SIGTERM)
   and started again `restarts` times, timing from the process start until OffsetFetch
   of every group returns the last committed offsets (the median is kept). The size of
   `__consumer_offsets` on disk is reported after each step.

Nothing here asserts speed: the report states what the run measured.

    python -m bench.compaction [--quick] [--only throughput,latency,load] [--out DIR] [--no-write]
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid

from bench.common import (MB, MIB, VALUE_SIZE, _fmt, _loads, client_versions, sectioned_main, value_pool)
from bench.e2e_consumer import percentile
from bench.machine import describe_machine, machine_details
from tests.support.polling import wait_for

SECTIONS = ("throughput", "latency", "load")
OFFSETS_TOPIC = "__consumer_offsets"
# One broker configuration for every section. The cleaner's backoff (Kafka's default is
# 15 s) is short so that a cleaning starts soon after there is something to clean; the
# offsets topic has one partition (the one coordinator partition the load replays) and
# 1 MiB segments (Kafka's default is 100 MiB, which would keep 1M commits in the one
# active segment the cleaner never touches).
BROKER_CONFIG = {
    "log.cleaner.backoff.ms": "200",
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": str(MIB),
    "auto.create.topics.enable": "false",
}
WARMUP_SECONDS = 1.0  # of each latency window, left out
# The cleaner's summary line of one cleaning (broker.storage.cleaner._log_summary; its MB
# are MiB): what it read (the offset map's pass plus the rewriting pass) and in how long.
_CLEANED = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Log cleaner cleaned log "
                      r"(?P<topic>\S+)-(?P<partition>\d+) \(dirty section \[(?P<first>\d+), (?P<end>\d+)\)\): "
                      r"(?P<processed>[\d.]+) MB "
                      r"of log processed in (?P<seconds>[\d.]+) s .*? built from (?P<map>[\d.]+) MB in "
                      r"(?P<map_seconds>[\d.]+) s; (?P<rewritten>[\d.]+) MB of segments rewritten into "
                      r"(?P<written>[\d.]+) MB \([^)]*\); "
                      r"(?P<kept>\d+) records kept, (?P<removed>\d+) removed")


@dataclasses.dataclass(frozen=True)
class Sizes:
    compact_records: int       # 1. records produced before compaction
    compact_keys: int          # 1. distinct keys among them
    segment_bytes: int         # 1. and 2.: segment.bytes of the compacted topics
    latency_rate: int          # 2. records/s
    latency_seconds: float     # 2. per window (warm-up included)
    backlog_records_max: int   # 2. the dirty backlog's ceiling
    commit_counts: tuple       # 3. cumulative offset commits at each step
    commit_keys: int           # 3. group/partition keys they cover
    partitions_per_commit: int  # 3. partitions per OffsetCommit request (one group each)
    restarts: int              # 3. timed restarts per step (median kept)
    timeout: float             # no single wait may take longer


FULL = Sizes(compact_records=2_000_000, compact_keys=10_000, segment_bytes=16 * MIB,
             latency_rate=1_000, latency_seconds=15.0, backlog_records_max=6_000_000,
             commit_counts=(1_000, 10_000, 100_000, 1_000_000), commit_keys=1_000,
             partitions_per_commit=100, restarts=3, timeout=600.0)
QUICK = Sizes(compact_records=300_000, compact_keys=10_000, segment_bytes=4 * MIB,
              latency_rate=1_000, latency_seconds=6.0, backlog_records_max=1_500_000,
              commit_counts=(1_000, 10_000, 100_000), commit_keys=1_000,
              partitions_per_commit=100, restarts=2, timeout=300.0)
TINY = Sizes(compact_records=20_000, compact_keys=500, segment_bytes=256 * 1024,
             latency_rate=200, latency_seconds=2.0, backlog_records_max=50_000,
             commit_counts=(100, 2_000), commit_keys=100,
             partitions_per_commit=50, restarts=1, timeout=120.0)


# -- the broker --------------------------------------------------------------------------------

class Broker:
    """One Sluice broker process with BROKER_CONFIG, a Sluice client on it, and its data dir."""

    def __init__(self, workdir: str, sizes: Sizes):
        from sluice.broker_process import BrokerProcess

        self.dir = os.path.join(workdir, f"sluice-{uuid.uuid4().hex[:6]}")
        os.makedirs(self.dir)
        config = os.path.join(self.dir, "server.properties")
        with open(config, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in BROKER_CONFIG.items()))
        self.data_dir = os.path.join(self.dir, "data")
        self.process = BrokerProcess(self.data_dir, config_file=config)
        self.timeout = sizes.timeout
        self.client = None

    def start(self) -> float:
        """Start the process and open the client; seconds until the broker listened."""
        from sluice_client import Client

        started = time.monotonic()
        self.process.start(timeout=self.timeout)
        seconds = time.monotonic() - started
        self.client = Client(self.bootstrap, call_timeout=self.timeout)
        return seconds

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap_servers

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process.proc is not None:
            self.process.stop(120)

    def create_topic(self, name: str, partitions: int, configs: dict) -> None:
        from sluice_client import NewTopic

        result = self.client.admin.create_topics({name: NewTopic(partitions, 1, configs)})[name]
        if result.error is not None:
            raise RuntimeError(f"cannot create {name}: {result.error}")

    def set_topic_config(self, name: str, key: str, value: str) -> None:
        from sluice_client import SET_CONFIG, TOPIC_RESOURCE

        errors = self.client.admin.incremental_alter_configs({(TOPIC_RESOURCE, name): [(key, SET_CONFIG, value)]})
        if any(errors.values()):
            raise RuntimeError(f"cannot set {key}={value} on {name}: {errors}")

    def end_offset(self, topic: str, partition: int = 0) -> int:
        from sluice_client import LATEST

        return self.client.consumer.list_offsets(topic, [partition], LATEST)[partition].offset

    def topic_disk(self, topic: str) -> dict:
        """The topic's files: bytes in its .log segments, their count, the bytes of the last
        (active) segment of partition 0, and the bytes all its files (indexes included)
        occupy on disk (allocated blocks)."""
        log_bytes = segments = allocated = 0
        active = (-1, 0)  # (base offset, bytes) of partition 0's last segment
        prefix = topic + "-"
        for name in os.listdir(self.data_dir):
            if not (name.startswith(prefix) and name[len(prefix):].isdigit()):
                continue
            directory = os.path.join(self.data_dir, name)
            for file in os.listdir(directory):
                try:
                    stat = os.stat(os.path.join(directory, file))
                except OSError:  # removed by the cleaner meanwhile
                    continue
                allocated += stat.st_blocks * 512
                if file.endswith(".log"):
                    log_bytes += stat.st_size
                    segments += 1
                    if name == f"{topic}-0" and file[:-4].isdigit():
                        active = max(active, (int(file[:-4]), stat.st_size))
        return {"log_bytes": log_bytes, "segments": segments, "active_bytes": active[1],
                "disk_bytes": allocated}

    def cleanings(self, topic: str, since_line: int = 0) -> list[dict]:
        """The cleaner's summary lines about `topic` in the broker's output since line
        `since_line`: what each cleaning read, wrote and removed, and its seconds."""
        found = []
        for line in self.process.output[since_line:]:
            match = _CLEANED.search(line)
            if match and match["topic"] == topic:
                at = datetime.datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                found.append({"ended_at": at, "dirty_end": int(match["end"]),
                              "bytes_read": round(float(match["processed"]) * MIB),
                              "seconds": float(match["seconds"]),
                              "map_bytes": round(float(match["map"]) * MIB),
                              "map_seconds": float(match["map_seconds"]),
                              "rewritten_bytes": round(float(match["rewritten"]) * MIB),
                              "written_bytes": round(float(match["written"]) * MIB),
                              "records_kept": int(match["kept"]), "records_removed": int(match["removed"])})
        return found


    def active_base(self, topic: str) -> int:
        """The base offset of partition 0's last (active) segment, from its file names."""
        directory = os.path.join(self.data_dir, f"{topic}-0")
        return max(int(n[:-4]) for n in os.listdir(directory) if n.endswith(".log") and n[:-4].isdigit())

    def compacted(self, topic: str, since_line: int, timeout: float) -> list[dict]:
        """Wait until the cleaner has cleaned partition 0 of `topic` up to its active
        segment (a cleaning since line `since_line` of the output ended there), or there
        is nothing to clean (one segment); the cleanings since that line."""
        def done():
            cleanings = self.cleanings(topic, since_line)
            base = self.active_base(topic)
            return (base == 0 or (cleanings and cleanings[-1]["dirty_end"] >= base)) and (cleanings or [{}])
        found = wait_for(done, timeout, f"the cleaner to compact {topic}", interval=0.2)
        return [c for c in found if c]


def produce_keyed(bootstrap: str, topic: str, records: int, keys: int, timeout: float) -> float:
    """`records` records of VALUE_SIZE bytes with keys key-0 .. key-(keys-1) in turn into
    partition 0 (acks=1, batched); seconds taken."""
    from confluent_kafka import Producer

    pool = value_pool()
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 20,
                         "batch.size": 1_000_000, "enable.idempotence": False, "log_level": 3})
    failed = []
    started = time.monotonic()
    deadline = started + timeout
    for i in range(records):
        while True:
            try:
                producer.produce(topic, pool[i % len(pool)], f"key-{i % keys:07d}".encode(), partition=0,
                                 on_delivery=lambda err, _: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.01)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{i} of {records} records produced") from None
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left or failed:
        raise RuntimeError(f"produce to {topic}: {left} unsent, {len(failed)} failed ({failed[:3]})")
    return time.monotonic() - started


# -- 1. throughput -----------------------------------------------------------------------------

def bench_throughput(broker: Broker, sizes: Sizes, log) -> dict:
    topic = "compaction-throughput"
    broker.create_topic(topic, 1, {"cleanup.policy": "delete", "segment.bytes": str(sizes.segment_bytes)})
    produce_s = produce_keyed(broker.bootstrap, topic, sizes.compact_records, sizes.compact_keys, sizes.timeout)
    before = broker.topic_disk(topic)
    log(f"  {sizes.compact_records:,} records over {sizes.compact_keys:,} keys in {produce_s:.1f} s: "
        f"{before['log_bytes'] / MB:.1f} MB in {before['segments']} segments")
    mark = len(broker.process.output)
    altered_at = time.time()
    broker.set_topic_config(topic, "cleanup.policy", "compact")
    cleanings = broker.compacted(topic, mark, sizes.timeout)
    after = broker.topic_disk(topic)
    shrink_s = cleanings[-1]["ended_at"] - altered_at if cleanings else None
    read = sum(c["bytes_read"] for c in cleanings)
    cleaning_s = sum(c["seconds"] for c in cleanings)
    removed = before["log_bytes"] - after["log_bytes"]
    result = {"records": sizes.compact_records, "keys": sizes.compact_keys, "produce_s": produce_s,
              "before": before, "after": after, "shrink_s": shrink_s, "removed_bytes": removed,
              "records_removed": sum(c["records_removed"] for c in cleanings),
              "removed_mb_per_s": removed / MB / shrink_s if shrink_s else None,
              "cleanings": cleanings, "cleaner_bytes_read": read, "cleaner_seconds": cleaning_s,
              "cleaner_mb_per_s": read / MB / cleaning_s if cleaning_s > 0 else None}
    log(f"  compacted to {after['log_bytes'] / MB:.2f} MB in {after['segments']} segments: "
        f"{len(cleanings)} cleaning(s), {read / MB:.1f} MB read in {cleaning_s:.2f} s "
        f"({_fmt(result['cleaner_mb_per_s'])} MB/s); {removed / MB:.1f} MB gone {_fmt(shrink_s)} s "
        f"after the alteration ({_fmt(result['removed_mb_per_s'])} MB/s)")
    return result


# -- 2. latency --------------------------------------------------------------------------------

def paced_latencies(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    """Send `rate` records/s for `seconds` (acks=all, linger.ms=0) and keep each delivery's
    latency in ms, the warm-up left out: count, p50, p99, max, and when the window ran."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": False, "log_level": 3})
    latencies, errors = [], []
    warmup = int(rate * WARMUP_SECONDS)
    total = int(rate * seconds)
    payload = bytes(VALUE_SIZE)

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        elif msg.latency() is not None:
            latencies.append((msg.offset(), msg.latency() * 1000))

    interval = 1.0 / rate
    started = time.monotonic()
    window_start = time.time()
    for sent in range(total):
        pause = started + sent * interval - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        producer.produce(topic, payload, partition=0, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(60)
    window_end = time.time()
    kept = sorted(ms for _, ms in sorted(latencies)[warmup:])
    return {"sent": total, "acknowledged": len(latencies), "failed": len(errors) + left,
            "measured": len(kept), "p50_ms": percentile(kept, 0.5), "p99_ms": percentile(kept, 0.99),
            "max_ms": kept[-1] if kept else None, "achieved_rate": total / (time.monotonic() - started),
            "window": (window_start, window_end)}


def bench_latency(broker: Broker, sizes: Sizes, throughput: dict | None, log) -> dict:
    topic = "compaction-latency"
    broker.create_topic(topic, 1, {})
    # A backlog the cleaner needs longer than the window to compact (at section 1's rate).
    record_bytes = VALUE_SIZE + 80  # value, key and per-record overhead in a batch, roughly
    rate = (throughput or {}).get("cleaner_mb_per_s") or (throughput or {}).get("removed_mb_per_s") or 5.0
    backlog_records = min(sizes.backlog_records_max,
                          int(rate * MB * (sizes.latency_seconds + 5) * 1.5 / record_bytes))
    backlog = "compaction-backlog"
    broker.create_topic(backlog, 1, {"cleanup.policy": "delete", "segment.bytes": str(sizes.segment_bytes)})
    log(f"  backlog: {backlog_records:,} records (sized for {rate:.1f} MB/s of cleaning)")
    produce_keyed(broker.bootstrap, backlog, backlog_records, sizes.compact_keys, sizes.timeout)
    backlog_before = broker.topic_disk(backlog)
    windows = {}
    log(f"  idle: {sizes.latency_rate:,} records/s for {sizes.latency_seconds:g} s")
    windows["idle_before"] = paced_latencies(broker.bootstrap, topic, sizes.latency_rate, sizes.latency_seconds)
    mark = len(broker.process.output)
    altered_at = time.time()
    broker.set_topic_config(backlog, "cleanup.policy", "compact")
    log("  cleaning: the backlog altered to compact")
    windows["cleaning"] = paced_latencies(broker.bootstrap, topic, sizes.latency_rate, sizes.latency_seconds)
    cleanings = broker.compacted(backlog, mark, sizes.timeout)
    cleaned_by = cleanings[-1]["ended_at"] if cleanings else altered_at
    shrink_s = cleaned_by - altered_at
    start, end = windows["cleaning"]["window"]
    overlap = max(0.0, min(end, cleaned_by) - max(start, altered_at)) / (end - start)
    log(f"  idle again: {sizes.latency_rate:,} records/s for {sizes.latency_seconds:g} s")
    windows["idle_after"] = paced_latencies(broker.bootstrap, topic, sizes.latency_rate, sizes.latency_seconds)
    for name, w in windows.items():
        log(f"    {name:12} p50 {_fmt(w['p50_ms'])} ms p99 {_fmt(w['p99_ms'])} ms max {_fmt(w['max_ms'])} ms "
            f"({w['measured']:,} measured, {w['failed']} failed)")
    log(f"  the backlog ({backlog_before['log_bytes'] / MB:.1f} MB) was compacted {shrink_s:.1f} s after its "
        f"alteration: the cleaner ran through {overlap:.0%} of the cleaning window")
    return {"rate": sizes.latency_rate, "seconds": sizes.latency_seconds, "backlog_records": backlog_records,
            "backlog_before": backlog_before, "backlog_after": broker.topic_disk(backlog),
            "backlog_compacted_s": shrink_s, "cleaner_share_of_window": overlap, "cleanings": cleanings,
            "windows": windows}


# -- 3. load -----------------------------------------------------------------------------------

async def commit_offsets(bootstrap: str, topic: str, groups: list[str], partitions: int,
                         first_round: int, rounds: int) -> None:
    """`rounds` OffsetCommit requests per group (the groups in parallel, each in order),
    round r committing offset r for every partition."""
    from sluice_client import AsyncClient

    async with AsyncClient(bootstrap) as client:
        async def rounds_of(group: str) -> None:
            for r in range(first_round, first_round + rounds):
                await client.consumer.commit_offsets(group, {(topic, p): r for p in range(partitions)})
        await asyncio.gather(*(rounds_of(g) for g in groups))


def time_until_served(broker: Broker, groups: list[str], expected: dict, timeout: float) -> float:
    """Start the (stopped) broker; seconds from the process start until OffsetFetch of
    every group answers the expected offsets."""
    from sluice_client import Client, ClientError
    from wire.errors import KafkaError

    started = time.monotonic()
    broker.process.start(timeout=timeout)
    with Client(broker.bootstrap, retries=0, call_timeout=timeout) as client:
        def served():
            try:
                return all({tp: c.offset for tp, c in client.consumer.fetch_offsets(g).items()} == expected
                           for g in groups)
            except (ClientError, KafkaError):  # COORDINATOR_LOAD_IN_PROGRESS and the like
                return False
        wait_for(served, timeout, "the groups' offsets to be served", interval=0.01)
    seconds = time.monotonic() - started
    broker.client = Client(broker.bootstrap, call_timeout=timeout)
    return seconds


def bench_load(workdir: str, sizes: Sizes, log) -> dict:
    broker = Broker(workdir, sizes)
    broker.start()
    topic, partitions = "committed", sizes.partitions_per_commit
    groups = [f"load-{n}" for n in range(sizes.commit_keys // partitions)]
    steps = []
    try:
        broker.create_topic(topic, partitions, {})
        done, mark = 0, 0
        for target in sizes.commit_counts:
            rounds = (target - done) // (partitions * len(groups))
            first = done // (partitions * len(groups))
            started = time.monotonic()
            asyncio.run(commit_offsets(broker.bootstrap, topic, groups, partitions, first, max(1, rounds)))
            commit_s = time.monotonic() - started
            done = (first + max(1, rounds)) * partitions * len(groups)
            expected = {(topic, p): first + max(1, rounds) - 1 for p in range(partitions)}
            written = broker.end_offset(OFFSETS_TOPIC)
            at_end = broker.topic_disk(OFFSETS_TOPIC)
            waited = time.monotonic()
            broker.compacted(OFFSETS_TOPIC, mark, sizes.timeout)
            settle_s = time.monotonic() - waited
            mark = len(broker.process.output)
            compacted = broker.topic_disk(OFFSETS_TOPIC)
            broker.stop()
            runs = [time_until_served(broker, groups, expected, sizes.timeout)]
            for _ in range(sizes.restarts - 1):
                broker.stop()
                runs.append(time_until_served(broker, groups, expected, sizes.timeout))
            step = {"commits": done, "requests": done // partitions, "commit_s": commit_s,
                    "commits_per_s": (done - (steps[-1]["commits"] if steps else 0)) / commit_s,
                    "offsets_written": written, "after_commits": at_end, "compacted": compacted,
                    "compacted_after_s": settle_s, "served_s": statistics.median(runs), "all_served_s": runs}
            steps.append(step)
            log(f"  {done:>9,} commits ({step['commits_per_s']:,.0f}/s): {OFFSETS_TOPIC} "
                f"{at_end['log_bytes'] / MB:.2f} MB after the commits, {compacted['log_bytes'] / MB:.2f} MB "
                f"({compacted['disk_bytes'] / MB:.2f} MB on disk) once compacted; served "
                f"{step['served_s']:.2f} s after the start (runs {', '.join(f'{r:.2f}' for r in runs)})")
    finally:
        broker.stop()
    return {"topic_partitions": partitions, "groups": len(groups), "keys": partitions * len(groups),
            "steps": steps}


# -- running and reporting ---------------------------------------------------------------------

def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print) -> dict:
    results = {"mode": mode, "date": datetime.date.today().isoformat(), "machine": machine_details(),
               "clients": client_versions(), "load_average_before": os.getloadavg(),
               "sizes": dataclasses.asdict(sizes), "broker_config": dict(BROKER_CONFIG)}
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-compaction-")
    try:
        if {"throughput", "latency"} & set(sections):
            broker = Broker(workdir, sizes)
            broker.start()
            try:
                if "throughput" in sections:
                    log("1. compaction throughput")
                    results["throughput"] = bench_throughput(broker, sizes, log)
                if "latency" in sections:
                    log("2. produce latency, idle vs while the cleaner runs")
                    results["latency"] = bench_latency(broker, sizes, results.get("throughput"), log)
            finally:
                broker.stop()
        if "load" in sections:
            log("3. coordinator load from a compacted __consumer_offsets")
            results["load"] = bench_load(workdir, sizes, log)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    return results


def markdown_report(results: dict) -> str:
    sizes = results["sizes"]
    md = [f"# Log compaction benchmarks ({results['mode']})", "",
          f"- date: {results['date']}", f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']}), Sluice's client (sluice)",
          "- broker: one `python -m broker` process per section on 127.0.0.1, with "
          + ", ".join(f"`{k}={v}`" for k, v in results["broker_config"].items()) + ", defaults otherwise",
          f"- run time: {results['seconds']:.0f} s; load average before {_loads(results, 'before')}, "
          f"after {_loads(results, 'after')} on {results['machine']['cores']} cores", ""]
    if "throughput" in results:
        t = results["throughput"]
        md += ["## 1. Compaction throughput", "",
               f"{t['records']:,} records of {VALUE_SIZE} bytes over {t['keys']:,} keys in one partition "
               f"(segment.bytes={sizes['segment_bytes']:,}), produced under cleanup.policy=delete, then "
               "altered to compact.", "",
               "| measure | value |", "|---|---:|",
               f"| before | {t['before']['log_bytes'] / MB:.1f} MB in {t['before']['segments']} segments |",
               f"| after | {t['after']['log_bytes'] / MB:.2f} MB in {t['after']['segments']} segments, "
               f"{t['after']['active_bytes'] / MB:.2f} MB of it the active segment (never cleaned) |",
               f"| cleanings (the cleaner's log) | {len(t['cleanings'])} |",
               f"| bytes the cleaner read (offset map pass + rewriting pass) | {t['cleaner_bytes_read'] / MB:.1f} MB |",
               f"| records it removed | {t['records_removed']:,} |",
               f"| its cleaning time | {t['cleaner_seconds']:.2f} s |",
               f"| **MB/s cleaned (read / cleaning time)** | **{_fmt(t['cleaner_mb_per_s'])}** |",
               f"| bytes gone from the segments | {t['removed_bytes'] / MB:.1f} MB |",
               f"| from the alteration until the last cleaning ended | {_fmt(t['shrink_s'])} s |",
               f"| MB/s gone (bytes gone / that time, backoff included) | {_fmt(t['removed_mb_per_s'])} |", ""]
    if "latency" in results:
        lat = results["latency"]
        md += ["## 2. Produce latency while the cleaner runs", "",
               f"confluent-kafka, acks=all, linger.ms=0, {VALUE_SIZE}-byte records at {lat['rate']:,}/s for "
               f"{lat['seconds']:g} s per window (the first {WARMUP_SECONDS:g} s left out), to a topic of its "
               f"own on the same broker. The cleaning window starts as a backlog of {lat['backlog_records']:,} "
               f"records ({lat['backlog_before']['log_bytes'] / MB:.1f} MB, "
               f"{lat['backlog_before']['segments']} segments) is altered to cleanup.policy=compact; it was "
               f"compacted to {lat['backlog_after']['log_bytes'] / MB:.2f} MB "
               f"{lat['backlog_compacted_s']:.1f} s after that, so the cleaner ran through "
               f"{lat['cleaner_share_of_window']:.0%} of the window.", "",
               "| window | p50 ms | p99 ms | max ms | measured | failed | achieved rate/s |",
               "|---|---:|---:|---:|---:|---:|---:|"]
        for name, label in (("idle_before", "idle (nothing to clean)"), ("cleaning", "cleaner running"),
                            ("idle_after", "idle again")):
            w = lat["windows"][name]
            md.append(f"| {label} | {_fmt(w['p50_ms'])} | {_fmt(w['p99_ms'])} | {_fmt(w['max_ms'])} | "
                      f"{w['measured']:,} | {w['failed']} | {w['achieved_rate']:,.0f} |")
        idle, busy = lat["windows"]["idle_before"], lat["windows"]["cleaning"]
        if idle["p99_ms"] and busy["p99_ms"]:
            md += ["", f"p99 while cleaning / idle: {busy['p99_ms'] / idle['p99_ms']:.2f}x; "
                       f"p50: {busy['p50_ms'] / idle['p50_ms']:.2f}x"]
        md.append("")
    if "load" in results:
        load = results["load"]
        md += ["## 3. Coordinator load after offset commits", "",
               f"OffsetCommit requests of {load['topic_partitions']} partitions each from {load['groups']} "
               f"groups in parallel ({load['keys']:,} group/partition keys), cumulative; after each step the "
               f"cleaner compacts {OFFSETS_TOPIC} (until a cleaning has reached its active segment), then the broker is restarted "
               f"{sizes['restarts']} time(s) (SIGTERM, then a new process): seconds from the process start until "
               "OffsetFetch of every group answers the last committed offsets (median; the process start "
               "itself is included).", "",
               "| commits | commits/s | offsets topic after the commits MB | compacted MB (segments) | "
               "on disk MB | served after start s | runs s |",
               "|---:|---:|---:|---:|---:|---:|---|"]
        for s in load["steps"]:
            md.append(f"| {s['commits']:,} | {s['commits_per_s']:,.0f} | {s['after_commits']['log_bytes'] / MB:.2f} | "
                      f"{s['compacted']['log_bytes'] / MB:.2f} ({s['compacted']['segments']}) | "
                      f"{s['compacted']['disk_bytes'] / MB:.2f} | {s['served_s']:.2f} | "
                      f"{', '.join(f'{r:.2f}' for r in s['all_served_s'])} |")
        md.append("")
    md += ["## Notes", "",
           "- The machine has 2 cores shared with other sessions' builds and tests: figures measured while "
           "they ran are not comparable between runs; the load averages above say how busy it was.",
           "- The cleaner is one task on the broker's event loop (broker.storage.cleaner), working in "
           "slices and yielding to requests between them: section 2 shows what that costs a producer.",
           "- MB are 10^6 bytes. The offsets topic's size is the bytes of its .log segments; 'on disk' "
           "counts every file's allocated blocks (indexes included)."]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "compaction", __doc__.splitlines()[0], "small sizes", SECTIONS, FULL, QUICK, run,
                   markdown_report, prog="python -m bench.compaction")


if __name__ == "__main__":
    main()
