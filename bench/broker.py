"""Broker benchmarks: Sluice's broker, Apache Kafka and librdkafka's mock cluster side by side.

The three brokers run in the same benchmark run, each as a process of its own on 127.0.0.1:
- sluice: `python -m broker` (sluice.broker_process.BrokerProcess), durable on disk in a
  temporary directory;
- kafka: Apache Kafka (tests.maven.KAFKA_VERSION, from Maven Central) as one KRaft node in
  combined mode, in a JVM of its own with Kafka's default heap and GC settings, its log on
  the same disk (bench.kafka_broker). When it cannot be resolved or started (no network, no
  Java), the run says so and carries on with the other two;
- mock: librdkafka's mock cluster, a C broker keeping its log in memory (bench.mock_broker:
  at most ~5 MB per partition, so consume comparisons stay below that).

Benchmarks (same clients and settings against every broker):
1. produce: acks=all/1 x 1/8 partitions x none/lz4, with confluent-kafka's Producer
   (linger.ms=5, batch.size=1000000) and with kcat -P; 100-byte values. records/s, MB/s,
   broker CPU seconds (/proc/<pid>/stat) and peak broker RSS (VmHWM, reset per run).
   Then Kafka's own producer benchmark (org.apache.kafka.tools.ProducerPerformance from
   kafka-tools, acks=all, 1 and 8 partitions, the same record count and size).
2. consume from a cold start: confluent-kafka Consumer (assign from the beginning) and
   kcat -C -e -o beginning (also asking for at most 1 MiB per fetch); then one kcat run
   per broker with librdkafka's protocol log, which splits the time between waiting for
   the broker and handling its responses.
3. end-to-end latency at a fixed 10,000 records/s (linger.ms=0, acks=all): p50/p99/p99.9.
4. start-up and memory: a fresh broker per start, from starting its process to its first
   Metadata answer (Kafka's storage formatted beforehand, not counted), and its RSS once
   idle; the RSS under load is the produce runs' peak.
5. log scaling (Sluice only): small fetch at the head vs the tail of a large partition;
   start-up after a clean shutdown and after SIGKILL, small log vs large log.
6. many partitions: Metadata time, produce rate and broker RSS with N partitions.
7. profile: py-spy samples of the Sluice broker while kcat produces (acks=all, one
   partition) and while kcat consumes: the share of samples per innermost Python function.

Results: a table on stdout (Sluice/Kafka next to Sluice/mock); markdown, JSON and a PNG
chart under bench/results/. Targets are stated and marked met / NOT met, and figures where
Sluice is behind Kafka are listed with the gap; nothing here asserts speed.

    python -m bench.broker [--quick] [--records N] [--log-mb M] [--many-partitions P]
                           [--only produce,perftest,consume,e2e,startup,log,partitions,profile]
                           [--no-kafka] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import datetime
import json
import os
import random
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid

from bench.machine import describe_machine, machine_details

VALUE_SIZE = 100
MB = 1_000_000
MIB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "bench", "results")
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
SECTIONS = ("produce", "perftest", "consume", "e2e", "startup", "log", "partitions", "profile")
BROKERS = ("sluice", "kafka", "mock")  # the order of every table
MOCK_PARTITION_BYTES = 5 * MIB  # what the mock cluster keeps per partition


@dataclasses.dataclass
class Sizes:
    records: int                 # per produce configuration
    produce_repeats: int         # runs per configuration and broker (alternating); median kept
    consume_partitions: int
    consume_per_partition: int   # records; x ~110 bytes stays below the mock's 5 MB
    consume_repeats: int         # cold starts per client and broker (alternating); median kept
    e2e_rate: int
    e2e_seconds: float
    e2e_warmup_seconds: float
    log_bytes: int               # the large partition of the log-scaling benchmark
    log_segment_bytes: int
    fetch_samples: int           # per position (head, tail)
    startup_repeats: int         # clean restarts per log (fastest kept)
    many_partitions: int
    many_partitions_per_topic: int
    many_records_per_partition: int
    metadata_samples: int
    step_timeout: float          # seconds: no single step may take longer
    cold_starts: int = 5         # fresh brokers started per broker (fastest kept)
    idle_seconds: float = 5.0    # after the first answer, before reading the idle RSS


FULL = Sizes(records=5_000_000, produce_repeats=1, consume_partitions=8, consume_per_partition=40_000,
             consume_repeats=7,
             e2e_rate=10_000, e2e_seconds=15.0, e2e_warmup_seconds=2.0,
             log_bytes=3 * 1024 * MIB, log_segment_bytes=256 * MIB, fetch_samples=500,
             startup_repeats=9, many_partitions=10_000, many_partitions_per_topic=100,
             many_records_per_partition=10, metadata_samples=5, step_timeout=900.0)
QUICK = dataclasses.replace(FULL, records=200_000, produce_repeats=3, consume_per_partition=15_000,
                            consume_repeats=5,
                            e2e_seconds=2.0, e2e_warmup_seconds=0.5, log_bytes=200 * MIB,
                            log_segment_bytes=64 * MIB, fetch_samples=200, startup_repeats=5,
                            many_partitions=1_000, metadata_samples=5, step_timeout=300.0,
                            cold_starts=3, idle_seconds=2.0)
# What the smoke test runs: every code path, a few seconds each.
TINY = dataclasses.replace(QUICK, records=3_000, produce_repeats=1, consume_partitions=4, consume_per_partition=500,
                           consume_repeats=1,
                           e2e_rate=1_000, e2e_seconds=1.0, e2e_warmup_seconds=0.3,
                           log_bytes=3 * MIB, log_segment_bytes=1 * MIB, fetch_samples=5,
                           startup_repeats=1, many_partitions=20, many_partitions_per_topic=10,
                           many_records_per_partition=2, metadata_samples=2, step_timeout=120.0,
                           cold_starts=1, idle_seconds=0.5)


# -- values ------------------------------------------------------------------------------

_WORDS = ("user session page view click cart order item price search query result "
          "login logout error retry timeout region eu us ap mobile desktop tablet "
          "chrome firefox safari referrer campaign banner checkout payment card "
          "shipped delivered returned status ok fail latency bytes count").split()


def value_pool(size: int = 1024, seed: int = 7) -> list[bytes]:
    """`size` distinct printable 100-byte values (no newline): log-line-like text, so
    lz4 compresses them about as much as real event data, not like repeated bytes."""
    rng = random.Random(seed)
    pool = []
    for i in range(size):
        words = [f"id={i:06d}", f"ts={rng.randrange(10**12, 10**13)}"]
        while sum(len(w) + 1 for w in words) < VALUE_SIZE:
            words.append(rng.choice(_WORDS) + "=" + str(rng.randrange(10**rng.randrange(1, 7))))
        pool.append(" ".join(words).encode()[:VALUE_SIZE])
    return pool


# -- /proc -------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def memory_kib(pid: int, key: str) -> int | None:
    """A /proc/<pid>/status figure in KiB (VmRSS, VmHWM), None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, own processes); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Probe:
    """Wall time, broker CPU and peak broker RSS over one measurement."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_reset = reset_peak_rss(pid)
        self.children0 = os.times()
        self.cpu0 = cpu_seconds(pid)
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        wall = time.perf_counter() - self.t0
        cpu = cpu_seconds(self.pid) - self.cpu0
        t = os.times()
        peak = memory_kib(self.pid, "VmHWM")
        return {"seconds": wall, "broker_cpu_s": cpu,
                "broker_peak_rss_mib": None if peak is None else peak / 1024,
                "peak_rss_since": "run" if self.peak_reset else "broker start",
                "client_cpu_s": (t.user - self.children0.user + t.system - self.children0.system
                                 + t.children_user - self.children0.children_user
                                 + t.children_system - self.children0.children_system)}


# -- the brokers (Kafka: bench.kafka_broker.KafkaTarget) ------------------------------------

class SluiceTarget:
    name = "sluice"

    def __init__(self, workdir: str, sizes: Sizes):
        from sluice.broker_process import BrokerProcess

        self.data_dir = os.path.join(workdir, f"sluice-{uuid.uuid4().hex[:6]}")
        os.makedirs(self.data_dir)
        config = os.path.join(self.data_dir, "server.properties")
        with open(config, "w") as f:  # as the mock cluster behaves
            f.write("num.partitions=4\nauto.create.topics.enable=true\n")
        self.process = BrokerProcess(os.path.join(self.data_dir, "data"), config_file=config)
        self.timeout = sizes.step_timeout
        self.client = None

    def start(self) -> "SluiceTarget":
        from wire.client import Client

        self.process.start(timeout=60)
        self.client = Client(self.bootstrap, call_timeout=self.timeout)
        return self

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap_servers

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        from wire.client import NewTopic

        results = self.client.create_topics(
            {name: NewTopic(partitions, 1, dict(configs or {})) for name, partitions in topics.items()},
            timeout_ms=int(self.timeout * 1000))
        failed = {name: r.error for name, r in results.items() if r.error is not None}
        if failed:
            raise RuntimeError(f"sluice: create topics failed: {failed}")

    def delete_topic(self, topic: str) -> None:
        self.client.delete_topics([topic])

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process.proc is not None:
            stop_or_kill(self.process, 60)


class MockTarget:
    name = "mock"

    def __init__(self, workdir: str, sizes: Sizes):
        from bench.mock_broker import MockBrokerProcess

        self.process = MockBrokerProcess(max_seconds=4 * 3600)

    def start(self) -> "MockTarget":
        self.process.start()
        return self

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap_servers

    @property
    def pid(self) -> int:
        return self.process.pid

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        for name, partitions in topics.items():
            self.process.create_topic(name, partitions)

    def delete_topic(self, topic: str) -> None:
        self.process.delete_topic(topic)

    def stop(self) -> None:
        self.process.stop()


def watermarks(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[tuple[int, int]]:
    """(low, high) per partition, through ListOffsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks",
                         "log_level": 3})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
                for p in range(partitions)]
    finally:
        consumer.close()


def run_bounded(args: list[str], timeout: float, stdout=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    result = subprocess.run(args, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} exited with {result.returncode}: "
                           f"{result.stderr.decode(errors='replace')[-2000:]}")
    return result


# -- 1. produce --------------------------------------------------------------------------------

def producer_config(bootstrap: str, acks: str, compression: str, linger_ms: int = 5) -> dict:
    return {"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 1_000_000,
            "acks": acks, "compression.type": compression, "enable.idempotence": False}


def produce_python(bootstrap: str, topic: str, records: int, pool: list[bytes], acks: str,
                   compression: str, timeout: float) -> None:
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**producer_config(bootstrap, acks, compression), "log_level": 3,
                         "error_cb": errors.append})
    produce, poll, mask = producer.produce, producer.poll, len(pool) - 1
    deadline = time.monotonic() + timeout
    i = 0
    while i < records:
        try:
            produce(topic, pool[i & mask])
            i += 1
        except BufferError:  # the local queue is full: serve delivery reports and retry
            poll(0.005)
            if time.monotonic() > deadline:
                raise TimeoutError(f"produce: {i} of {records} records queued after {timeout:g} s")
        else:
            if i & 0x3FFF == 0:
                poll(0)
    left = producer.flush(max(1.0, deadline - time.monotonic()))
    if left:
        raise TimeoutError(f"produce: {left} records undelivered after {timeout:g} s ({errors[:3]})")


def kcat_records_file(path: str, records: int, pool: list[bytes]) -> None:
    """`records` lines of 100 bytes (the same values as the Python producer's)."""
    mask = len(pool) - 1
    block = b"".join(v + b"\n" for v in pool)
    with open(path, "wb") as f:
        full, rest = divmod(records, len(pool))
        for _ in range(full):
            f.write(block)
        f.write(b"".join(pool[i & mask] + b"\n" for i in range(rest)))


def produce_kcat(bootstrap: str, topic: str, path: str, acks: str, compression: str,
                 timeout: float) -> None:
    args = [KCAT, "-P", "-q", "-b", bootstrap, "-t", topic, "-l", path]
    for key, value in producer_config(bootstrap, acks, compression).items():
        if key not in ("bootstrap.servers", "compression.type"):
            args += ["-X", f"{key}={str(value).lower()}"]
    if compression != "none":
        args += ["-z", compression]
    run_bounded(args, timeout)


def bench_produce(targets, sizes: Sizes, pool, workdir: str, log) -> list[dict]:
    path = os.path.join(workdir, "records.txt")
    kcat_records_file(path, sizes.records, pool)
    rows = []
    for client in ("python", "kcat"):
        for acks in ("all", "1"):
            for partitions in (1, 8):
                for compression in ("none", "lz4"):
                    runs = {target.name: [] for target in targets}
                    for _ in range(sizes.produce_repeats):  # alternating: load drifts hit both
                        for target in targets:
                            runs[target.name].append(produce_once(target, client, acks, partitions,
                                                                  compression, sizes, pool, path))
                    for target in targets:
                        m = median_run(runs[target.name])
                        row = {"client": client, "acks": acks, "partitions": partitions,
                               "compression": compression, "broker": target.name,
                               "records": sizes.records, "repeats": len(runs[target.name]),
                               "records_per_s": sizes.records / m["seconds"],
                               "mb_per_s": sizes.records * VALUE_SIZE / m["seconds"] / MB,
                               "all_seconds": [r["seconds"] for r in runs[target.name]],
                               "all_written": [r["written"] for r in runs[target.name]], **m}
                        short = [w for w in row["all_written"] if w != sizes.records]
                        rows.append(row)
                        log(f"  produce {client:6} acks={acks:3} {partitions}p {compression:4} "
                            f"{target.name:6}: {row['records_per_s']:10,.0f} rec/s "
                            f"{row['mb_per_s']:6.1f} MB/s cpu {m['broker_cpu_s']:5.2f}s "
                            f"rss {m['broker_peak_rss_mib']:6.0f} MiB"
                            + (f"  (high watermarks sum {short}, not {sizes.records})" if short else ""))
    os.remove(path)
    return rows


def median_run(runs: list[dict]) -> dict:
    """The run of median duration (the slower middle one of an even count)."""
    return sorted(runs, key=lambda m: m["seconds"])[len(runs) // 2]


def produce_once(target, client: str, acks: str, partitions: int, compression: str,
                 sizes: Sizes, pool, path: str) -> dict:
    """One produce run into a fresh topic (deleted afterwards): the Probe's figures and
    the records the broker reports written (sum of high watermarks)."""
    topic = f"produce-{client}-{acks}-{partitions}-{compression}-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: partitions})
    probe = Probe(target.pid)
    if client == "python":
        produce_python(target.bootstrap, topic, sizes.records, pool, acks, compression,
                       sizes.step_timeout)
    else:
        produce_kcat(target.bootstrap, topic, path, acks, compression, sizes.step_timeout)
    m = probe.stop()
    m["written"] = sum(high for _, high in watermarks(target.bootstrap, topic, partitions))
    target.delete_topic(topic)
    return m


# -- 2. consume ----------------------------------------------------------------------------------

def fill_consume_topic(target, topic: str, sizes: Sizes, pool) -> int:
    from confluent_kafka import Producer

    target.create_topics({topic: sizes.consume_partitions})
    producer = Producer({**producer_config(target.bootstrap, "all", "none"), "log_level": 3})
    mask = len(pool) - 1
    deadline = time.monotonic() + sizes.step_timeout
    for i in range(sizes.consume_per_partition):
        for p in range(sizes.consume_partitions):
            while True:
                try:
                    producer.produce(topic, pool[(i * 31 + p) & mask], partition=p)
                    break
                except BufferError:
                    producer.poll(0.005)
                    if time.monotonic() > deadline:
                        raise TimeoutError("consume set-up: producer stuck")
    if producer.flush(max(1.0, deadline - time.monotonic())):
        raise TimeoutError("consume set-up: records undelivered")
    marks = watermarks(target.bootstrap, topic, sizes.consume_partitions)
    if any(low for low, _ in marks):
        raise RuntimeError(f"{target.name} dropped records of {topic} (low watermarks {marks}): "
                           f"keep consume_per_partition within the mock's 5 MB per partition")
    return sum(high - low for low, high in marks)


# librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s) whenever its local
# queue passes queued.min.messages (100,000) or queued.max.messages.kbytes: a consumer that
# reads a whole topic at once would measure that pause, not the broker. Both clients, both
# brokers get room for the whole topic.
CONSUMER_QUEUE = {"queued.min.messages": 10_000_000, "queued.max.messages.kbytes": 1_048_576}
# The consume clients: librdkafka's defaults (fetch.max.bytes 50 MB, 1 MB per partition:
# Sluice answers with up to 8 MB here, the mock with one batch per partition, ~0.5 MB), and
# kcat asking for at most 1 MiB per fetch from every broker, which shows how much of the
# difference is the client's handling of large responses rather than the broker.
CONSUME_CLIENTS = {"python": {}, "kcat": {}, "kcat fetch.max.bytes=1MiB": {"fetch.max.bytes": MIB}}


def consume_python(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float) -> float:
    """Seconds from creating the consumer to holding `expected` records."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    started = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 3, **CONSUMER_QUEUE})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + timeout
        count = 0
        while count < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consume: {count} of {expected} records after {timeout:g} s")
            messages = consumer.consume(num_messages=min(10_000, expected - count), timeout=1.0)
            if any(m.error() for m in messages):
                raise RuntimeError(f"consume: {[m.error() for m in messages if m.error()][:3]}")
            count += len(messages)
        return time.perf_counter() - started
    finally:
        consumer.close()


def consume_kcat(bootstrap: str, topic: str, expected: int, timeout: float,
                 protocol_log=subprocess.DEVNULL, config: dict | None = None) -> float:
    """Seconds from starting kcat -C -e to its exit; the records it printed are counted.
    With a `protocol_log` file, kcat writes librdkafka's protocol debug log there."""
    started = time.perf_counter()
    queue = [arg for key, value in {**CONSUMER_QUEUE, **(config or {})}.items()
             for arg in ("-X", f"{key}={value}")]
    debug = [] if protocol_log is subprocess.DEVNULL else ["-d", "protocol"]
    proc = subprocess.Popen([KCAT, "-C", "-q", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e",
                             *queue, *debug], stdout=subprocess.PIPE, stderr=protocol_log)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines = 0
    try:
        while chunk := proc.stdout.read1(1 << 20):
            lines += chunk.count(b"\n")
        code = proc.wait(timeout)
    finally:
        watchdog.cancel()
    elapsed = time.perf_counter() - started
    if code != 0 or lines != expected:
        raise RuntimeError(f"kcat -C exited with {code} after {lines} of {expected} records")
    return elapsed


_FETCH_LINE = re.compile(r"^%\d\|(?P<time>\d+\.\d+)\|.*: (?P<event>Sent|Received) "
                         r"Fetch(?:Request|Response) \(v\d+, (?P<bytes>\d+) bytes"
                         r"(?:.*rtt (?P<rtt>[\d.]+)ms)?")


def fetch_timeline(lines) -> dict:
    """Where a kcat cold-start consume spent its time, from librdkafka's protocol debug log:
    librdkafka keeps one Fetch in flight per broker, so the run alternates between waiting
    for a response (the broker's work, the transfer and the client reading the socket) and
    handling it before the next request (the client's alone). The last response, the end-of-topic poll that every broker
    hold for fetch.wait.max.ms, is left out."""
    start, events = None, []
    for line in lines:
        if start is None and line.startswith("%"):
            start = float(line.split("|")[1])
        match = _FETCH_LINE.match(line)
        if match:
            events.append((match["event"], float(match["time"]), int(match["bytes"]),
                           float(match["rtt"] or 0)))
    sent = [e for e in events if e[0] == "Sent"]
    received = [e for e in events if e[0] == "Received"][:-1]
    if not sent or not received:
        return {"error": "no fetches in kcat's protocol log"}
    data_ms = (received[-1][1] - sent[0][1]) * 1e3
    waiting_ms = sum(r[3] for r in received)  # rtt has microseconds, the log's clock only ms
    return {"fetches": len(received), "mb": sum(r[2] for r in received) / MB,
            "mb_per_fetch": sum(r[2] for r in received) / MB / len(received),
            "to_first_fetch_ms": (sent[0][1] - start) * 1e3, "data_ms": data_ms,
            "waiting_ms": waiting_ms, "handling_ms": max(data_ms - waiting_ms, 0.0)}


def consume_timeline(target, topic: str, count: int, timeout: float, workdir: str) -> dict:
    path = os.path.join(workdir, f"kcat-protocol-{target.name}.log")
    with open(path, "w") as protocol_log:
        seconds = consume_kcat(target.bootstrap, topic, count, timeout, protocol_log)
    with open(path) as f:
        timeline = fetch_timeline(f)
    os.remove(path)
    return {"broker": target.name, "seconds": seconds, **timeline}


def bench_consume(targets, sizes: Sizes, pool, workdir: str, log) -> tuple[list[dict], list[dict]]:
    """Cold starts alternate between the brokers (load drifts hit all); the median run
    is kept. One more kcat run per broker, with librdkafka's protocol log, shows where
    the time goes (`fetch_timeline`)."""
    topics = {target.name: f"consume-{uuid.uuid4().hex[:6]}" for target in targets}
    expected = {target.name: fill_consume_topic(target, topics[target.name], sizes, pool)
                for target in targets}
    rows = []
    for client, config in CONSUME_CLIENTS.items():
        runs = {target.name: [] for target in targets}
        for _ in range(sizes.consume_repeats):
            for target in targets:
                topic, count = topics[target.name], expected[target.name]
                probe = Probe(target.pid)
                if client == "python":
                    consume_python(target.bootstrap, topic, sizes.consume_partitions, count,
                                   sizes.step_timeout)
                else:
                    consume_kcat(target.bootstrap, topic, count, sizes.step_timeout, config=config)
                runs[target.name].append(probe.stop())
        for target in targets:
            m = median_run(runs[target.name])
            count = expected[target.name]
            row = {"client": client, "broker": target.name, "records": count,
                   "partitions": sizes.consume_partitions, "repeats": len(runs[target.name]),
                   "records_per_s": count / m["seconds"], "mb_per_s": count * VALUE_SIZE / m["seconds"] / MB,
                   "all_seconds": [r["seconds"] for r in runs[target.name]], **m}
            rows.append(row)
            log(f"  consume {client:26} {target.name:6}: {row['records_per_s']:10,.0f} rec/s "
                f"{row['mb_per_s']:6.1f} MB/s ({count} records, median {m['seconds']:.2f} s incl. "
                f"start-up; runs {', '.join(f'{r:.2f}' for r in row['all_seconds'])})")
    timelines = []
    for target in targets:
        t = consume_timeline(target, topics[target.name], expected[target.name], sizes.step_timeout,
                             workdir)
        timelines.append(t)
        if "error" not in t:
            log(f"  kcat fetches {target.name:6}: {t['fetches']} of {t['mb_per_fetch']:.2f} MB, "
                f"first after {t['to_first_fetch_ms']:.1f} ms, waiting {t['waiting_ms']:.0f} ms, "
                f"handling {t['handling_ms']:.0f} ms")
        target.delete_topic(topics[target.name])
    return rows, timelines


# -- 3. end-to-end latency ------------------------------------------------------------------------

# (producer linger.ms, consumer fetch.wait.max.ms). The first is the target's setting:
# linger.ms=0 and librdkafka's default long poll (500 ms: a broker that does not answer
# a waiting fetch as soon as data arrives, as the mock cluster does not, shows it). The
# short poll (1 ms) takes the long poll out; linger.ms=1 lets the producer batch the
# records that arrive within a millisecond (~10 at 10,000/s) instead of sending a request
# per record or so.
E2E_VARIANTS = ((0, 500), (0, 1), (1, 500), (1, 1))


def e2e_once(target, sizes: Sizes, linger_ms: int, fetch_wait_ms: int) -> dict:
    """One paced run: records carry their send time, a consumer process measures arrival."""
    from confluent_kafka import Producer

    warmup = int(sizes.e2e_rate * sizes.e2e_warmup_seconds)
    total = warmup + int(sizes.e2e_rate * sizes.e2e_seconds)
    budget = sizes.e2e_warmup_seconds + sizes.e2e_seconds
    pad = bytes(VALUE_SIZE - 16)
    pack = struct.Struct(">Qq").pack
    interval_ns = 1_000_000_000 // sizes.e2e_rate
    topic = f"e2e-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: 1})
    consumer = subprocess.Popen(
        [sys.executable, "-m", "bench.e2e_consumer", target.bootstrap, topic, str(total),
         str(warmup), str(budget + 60), str(fetch_wait_ms)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO)
    producer = None
    try:
        if consumer.stdout.readline().strip() != "ready":
            raise RuntimeError("e2e consumer did not start")
        producer = Producer({**producer_config(target.bootstrap, "all", "none", linger_ms=linger_ms),
                             "log_level": 3})
        produce, poll = producer.produce, producer.poll
        started = time.monotonic_ns()
        deadline = started + int((budget + 30) * 1e9)
        sent = 0
        while sent < total:
            now = time.monotonic_ns()
            if now > deadline:
                raise TimeoutError(f"e2e: {sent} of {total} records sent")
            due = min(total, (now - started) // interval_ns + 1)
            while sent < due:
                try:
                    produce(topic, pack(sent, time.monotonic_ns()) + pad, partition=0)
                    sent += 1
                except BufferError:
                    poll(0.001)
                    break
            poll(0)
            pause = (started + sent * interval_ns - time.monotonic_ns()) / 1e9
            if pause > 0:
                time.sleep(pause)
        send_seconds = (time.monotonic_ns() - started) / 1e9
        producer.flush(30)
        out, _ = consumer.communicate(timeout=budget + 90)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
    target.delete_topic(topic)
    result = json.loads(out.strip().splitlines()[-1])
    return {"broker": target.name, "linger_ms": linger_ms, "fetch_wait_max_ms": fetch_wait_ms,
            "rate": sizes.e2e_rate, "lost": total - result["received"],
            "sent": total, "achieved_rate": total / send_seconds, "warmup_records": warmup, **result}


def bench_e2e(targets, sizes: Sizes, log) -> list[dict]:
    rows = []
    for linger_ms, fetch_wait_ms in E2E_VARIANTS:
        for target in targets:
            row = e2e_once(target, sizes, linger_ms, fetch_wait_ms)
            rows.append(row)
            label = f"linger.ms={linger_ms} fetch.wait.max.ms={fetch_wait_ms:3} {target.name:6}"
            if row["measured"] == 0:
                log(f"  e2e {label}: no record arrived")
                continue
            log(f"  e2e {label}: p50 {row['p50_ms']:.2f} ms  "
                f"p99 {row['p99_ms']:.2f} ms  p99.9 {row['p999_ms']:.2f} ms  max {row['max_ms']:.2f} ms "
                f"({row['measured']} records at {row['achieved_rate']:,.0f}/s"
                + ("" if row["complete"] else ", INCOMPLETE")
                + (f", {row['lost']} records never arrived" if row["lost"] else "") + ")")
    return rows


# -- 1b. Kafka's own producer benchmark --------------------------------------------------------------

PERFTEST_PARTITIONS = (1, 8)
# Kafka's Java client cannot use librdkafka's mock cluster: the mock answers its ApiVersions
# v5 request with UNSUPPORTED_VERSION in a body the client reads as throttle_time_ms=1179648,
# and the client then waits those 20 minutes before sending anything (seen with Kafka 4.4's
# client and confluent-kafka 2.16's librdkafka).
PERFTEST_SKIPPED = {"mock": "Kafka's Java client reads the mock's ApiVersions fallback answer as a "
                            "20-minute throttle and never sends"}


def bench_perftest(targets, sizes: Sizes, log) -> list[dict] | dict:
    """org.apache.kafka.tools.ProducerPerformance against each broker: acks=all, the same
    record count and size and the same batching settings as the other producers. Its rate
    is its own (clock started at the first send); wall time includes the JVM's start."""
    from bench.kafka_broker import KafkaUnavailable, producer_performance

    props = {k: v for k, v in producer_config("", "all", "none").items() if k != "bootstrap.servers"}
    props = {k: str(v).lower() for k, v in props.items()}
    rows = []
    for name, reason in PERFTEST_SKIPPED.items():
        if any(t.name == name for t in targets):
            log(f"  ProducerPerformance against {name}: not run ({reason})")
    for partitions in PERFTEST_PARTITIONS:
        for target in targets:
            if target.name in PERFTEST_SKIPPED:
                continue
            topic = f"perftest-{partitions}-{uuid.uuid4().hex[:6]}"
            target.create_topics({topic: partitions})
            probe = Probe(target.pid)
            try:
                perf = producer_performance(target.bootstrap, topic, sizes.records, VALUE_SIZE, props,
                                            sizes.step_timeout)
            except KafkaUnavailable as e:
                log(f"  Kafka's ProducerPerformance is unavailable: {e}")
                return {"error": str(e)}
            m = probe.stop()
            written = sum(high for _, high in watermarks(target.bootstrap, topic, partitions))
            target.delete_topic(topic)
            row = {"client": "kafka-perf", "acks": "all", "partitions": partitions, "compression": "none",
                   "broker": target.name, "written": written, **m, **perf,
                   "wall_seconds": m["seconds"]}
            rows.append(row)
            log(f"  ProducerPerformance acks=all {partitions}p {target.name:6}: "
                f"{row['records_per_s']:10,.0f} rec/s {row['mb_per_s']:6.1f} MB/s, avg latency "
                f"{row['avg_latency_ms']:.0f} ms, broker cpu {m['broker_cpu_s']:5.2f}s rss "
                f"{m['broker_peak_rss_mib']:6.0f} MiB"
                + (f"  (high watermarks sum {written}, not {sizes.records})" if written != sizes.records else ""))
    return rows


# -- 3b. start-up and memory ------------------------------------------------------------------------

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


# -- 4. log scaling (Sluice only) ------------------------------------------------------------------

def fill_log(bootstrap: str, topic: str, total_bytes: int, pool, timeout: float) -> dict:
    """Small batches at the head, ~1 MiB batches in the middle, small batches at the tail
    (so that a small fetch at either end returns a small batch)."""
    from wire.client import AsyncClient
    from wire.records import build_batch

    now = int(time.time() * 1000)
    mask = len(pool) - 1
    small = build_batch([(None, pool[i & mask], (), now) for i in range(10)])
    big = build_batch([(None, pool[i & mask], (), now) for i in range(9_000)])
    bulk_batches = max(1, total_bytes // len(big))

    async def fill():
        async with AsyncClient(bootstrap, request_timeout=60) as client:
            for _ in range(50):
                await client.produce_batch(topic, 0, small, acks=1)
            in_flight = asyncio.Semaphore(4)

            async def one():
                async with in_flight:
                    await client.produce_batch(topic, 0, big, acks=1)

            started = time.perf_counter()
            for start in range(0, bulk_batches, 64):  # bounded groups, never all at once
                await asyncio.gather(*(one() for _ in range(min(64, bulk_batches - start))))
            seconds = time.perf_counter() - started
            for _ in range(50):
                await client.produce_batch(topic, 0, small, acks=1)
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
            result = client.fetch(topic, 0, offset, max_wait_ms=0, max_bytes=4096)
            timings[name].append(time.perf_counter() - started)
            if len(result.records) == 0:
                raise RuntimeError(f"fetch at {name} offset {offset} returned nothing")
    return timings


def stop_or_kill(process, timeout: float) -> None:
    """SIGTERM and wait (BrokerProcess.stop); SIGKILL if it is still running after `timeout`."""
    proc = process.proc
    try:
        process.stop(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise


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
    from sluice.broker_process import BrokerProcess
    from wire.client import Client, NewTopic

    timeout = sizes.step_timeout
    out = {}
    # small log: 1 MB in one partition
    small = BrokerProcess(os.path.join(workdir, "log-small"))
    small.start(timeout=60)
    try:
        with Client(small.bootstrap_servers) as client:
            client.create_topics({"small": NewTopic(1, 1)})
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
            client.create_topics({"large": NewTopic(1, 1, {"segment.bytes": str(sizes.log_segment_bytes)})})
            fill = fill_log(large.bootstrap_servers, "large", sizes.log_bytes, pool, timeout)
            end = client.fetch("large", 0, 0, max_wait_ms=0, max_bytes=1024).high_watermark
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


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


# -- 5. many partitions -----------------------------------------------------------------------------

def bench_partitions(makes, workdir: str, sizes: Sizes, log) -> list[dict]:
    from confluent_kafka import Consumer, Producer

    from wire.client import Client

    per_topic = sizes.many_partitions_per_topic
    topics = {f"many-{t:04d}": per_topic for t in range(max(1, sizes.many_partitions // per_topic))}
    partitions = sum(topics.values())
    rows = []
    from bench.kafka_broker import KafkaUnavailable

    for make in makes:
        try:
            target = make(workdir, sizes).start()  # a fresh broker: its RSS is these partitions'
        except KafkaUnavailable as e:
            log(f"  {make.name}: not measured, KAFKA UNAVAILABLE: {e}")
            continue
        try:
            rss_before = memory_kib(target.pid, "VmRSS")
            started = time.perf_counter()
            target.create_topics(topics)
            create_s = time.perf_counter() - started
            consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "bench-md",
                                 "log_level": 3})
            confluent_ms, wire_ms = [], []
            try:
                with Client(target.bootstrap, call_timeout=sizes.step_timeout) as client:
                    for _ in range(sizes.metadata_samples):
                        t0 = time.perf_counter()
                        listed = consumer.list_topics(timeout=sizes.step_timeout)
                        confluent_ms.append((time.perf_counter() - t0) * 1e3)
                        t0 = time.perf_counter()
                        metadata = client.metadata()
                        wire_ms.append((time.perf_counter() - t0) * 1e3)
                seen = sum(len(listed.topics[t].partitions) for t in topics if t in listed.topics)
                if seen != partitions or sum(len(metadata.topics[t].partitions) for t in topics) != partitions:
                    raise RuntimeError(f"{target.name}: metadata shows {seen} of {partitions} partitions")
            finally:
                consumer.close()
            records = partitions * sizes.many_records_per_partition
            probe = Probe(target.pid)
            producer = Producer({**producer_config(target.bootstrap, "all", "none"), "log_level": 3})
            deadline = time.monotonic() + sizes.step_timeout
            for _ in range(sizes.many_records_per_partition):
                for topic in topics:
                    for p in range(per_topic):
                        while True:
                            try:
                                producer.produce(topic, b"v" * VALUE_SIZE, partition=p)
                                break
                            except BufferError:
                                producer.poll(0.005)
                                if time.monotonic() > deadline:
                                    raise TimeoutError("many partitions: producer stuck")
            if producer.flush(max(1.0, deadline - time.monotonic())):
                raise TimeoutError("many partitions: records undelivered")
            m = probe.stop()
            del producer  # destroyed now, not after its broker stopped (no reconnect noise)
            row = {"broker": target.name, "partitions": partitions, "topics": len(topics),
                   "create_s": create_s,
                   "metadata_confluent_ms": statistics.median(confluent_ms),
                   "metadata_wire_ms": statistics.median(wire_ms),
                   "records": records, "records_per_s": records / m["seconds"],
                   "rss_before_mib": rss_before / 1024,
                   "rss_after_mib": memory_kib(target.pid, "VmRSS") / 1024, **m}
            rows.append(row)
            log(f"  {partitions} partitions {target.name:6}: create {create_s:.2f} s, metadata "
                f"{row['metadata_confluent_ms']:.1f} ms (confluent) {row['metadata_wire_ms']:.1f} ms "
                f"(wire), produce {row['records_per_s']:,.0f} rec/s, RSS {row['rss_after_mib']:.0f} MiB")
        finally:
            target.stop()
    return rows


# -- 6. where the broker's time goes -----------------------------------------------------------

_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*?)(?::\d+)?\)$")
PROFILE_TOP = 12
PROFILE_RATE_HZ = 250
PROFILE_MIN_SECONDS = 2.0  # py-spy skips idle samples: a produce shorter than a few of its
PROFILE_MAX_ROUNDS = 200   # intervals (a tiny run) can leave it with none, so short runs repeat


def py_spy_path() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def leaf_shares(raw_lines, top: int = PROFILE_TOP) -> tuple[int, list[dict]]:
    """(samples, the `top` innermost functions by share) from py-spy's raw output, one
    `frame;frame;...;leaf count` line per distinct stack. A system call counts for the
    Python function that made it (py-spy samples Python frames only)."""
    counts: collections.Counter = collections.Counter()
    total = 0
    for line in raw_lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        leaf = stack.split(";")[-1].strip()
        match = _FRAME.match(leaf)
        name = f"{match['function']} ({os.path.basename(match['file'])})" if match else leaf or "?"
        counts[name] += int(count)
        total += int(count)
    return total, [{"function": name, "share": n / total} for name, n in counts.most_common(top)]


def _stop_recorder(recorder: subprocess.Popen) -> str:
    """SIGINT makes py-spy write its output and exit; its stderr."""
    recorder.send_signal(signal.SIGINT)
    try:
        return recorder.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        recorder.kill()
        return recorder.communicate()[1]


def _recorded(spy: str, pid: int, out: str, work) -> tuple[dict, str, int]:
    """py-spy recording broker `pid` while `work(round)` runs (again until PROFILE_MIN_SECONDS
    have passed): (the Probe's figures, py-spy's stderr, rounds)."""
    recorder = subprocess.Popen([spy, "record", "--pid", str(pid), "--format", "raw",
                                 "--output", out, "--rate", str(PROFILE_RATE_HZ), "--nonblocking"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # attached before the first record
        probe = Probe(pid)
        rounds = 0
        while rounds < PROFILE_MAX_ROUNDS and (
                rounds == 0 or time.perf_counter() - probe.t0 < PROFILE_MIN_SECONDS):
            work(rounds)
            rounds += 1
        m = probe.stop()
    finally:
        err = _stop_recorder(recorder)
    return m, err, rounds


def bench_profile(workdir: str, sizes: Sizes, pool, log) -> dict:
    """py-spy of the Sluice broker while kcat produces (acks=all, one partition), then while
    kcat consumes that partition from the beginning (cold starts, as in 2.)."""
    spy = py_spy_path()
    if spy is None:
        log("  py-spy is not installed: no profile")
        return {"error": "py-spy is not installed"}
    path = os.path.join(workdir, "profile-records.txt")
    kcat_records_file(path, sizes.records, pool)
    outs = {kind: os.path.join(workdir, f"profile-{kind}.txt") for kind in ("produce", "consume")}
    target = SluiceTarget(os.path.join(workdir, "profile"), sizes).start()
    topic = f"profile-{uuid.uuid4().hex[:6]}"
    try:
        target.create_topics({topic: 1})
        m, err, rounds = _recorded(spy, target.pid, outs["produce"], lambda _: produce_kcat(
            target.bootstrap, topic, path, "all", "none", sizes.step_timeout))
        produced = rounds * sizes.records
        cm, cerr, crounds = _recorded(spy, target.pid, outs["consume"], lambda _: consume_kcat(
            target.bootstrap, topic, produced, sizes.step_timeout))
    finally:
        target.stop()
        os.remove(path)
    result = {}
    for kind, figures, error, records in (("produce", m, err, produced),
                                          ("consume", cm, cerr, crounds * produced)):
        if not os.path.exists(outs[kind]):
            log(f"  py-spy recorded nothing ({kind}): {error.strip()[-300:]}")
            result[kind] = {"error": f"py-spy recorded nothing: {error.strip()[-300:]}"}
            continue
        with open(outs[kind]) as f:
            samples, top = leaf_shares(f)
        log(f"  {kind}: {samples} samples while kcat {kind}d {records:,} records "
            f"({records / figures['seconds']:,.0f} rec/s, broker CPU {figures['broker_cpu_s']:.2f} s "
            f"of {figures['seconds']:.2f} s):")
        for entry in top:
            log(f"    {entry['share']:6.1%}  {entry['function']}")
        result[kind] = {"client": "kcat", "partitions": 1, "compression": "none", "records": records,
                        "records_per_s": records / figures["seconds"], "samples": samples,
                        "rate_hz": PROFILE_RATE_HZ, "top": top, **figures}
    produce = result["produce"]
    # the produce profile's figures stay at the top level, as before; the consume one beside them
    return {**({"acks": "all"} if "error" not in produce else {}), **produce, "consume": result["consume"]}


# -- the report ------------------------------------------------------------------------------------

def _pick(rows, **match):
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    return found[0] if found else None


# Which way is better, per unit of the table (for "where Sluice is behind")
HIGHER_IS_BETTER = {"rec/s": True, "MB/s": True}


def comparison_rows(results: dict) -> list[dict]:
    """One row per figure: sluice, kafka, mock, sluice/kafka and sluice/mock."""
    out = []

    def add(section, name, unit, sluice, mock=None, kafka=None):
        def ratio(other):
            return sluice / other if sluice is not None and other else None

        out.append({"section": section, "name": name, "unit": unit, "sluice": sluice,
                    "kafka": kafka, "mock": mock, "ratio_kafka": ratio(kafka), "ratio": ratio(mock)})

    def others(rows, key, **match):
        k, m = _pick(rows, broker="kafka", **match), _pick(rows, broker="mock", **match)
        return {"kafka": k and k[key], "mock": m and m[key]}

    produce = results.get("produce") or []
    for r in produce:
        if r["broker"] != "sluice":
            continue
        match = {k: r[k] for k in ("client", "acks", "partitions", "compression")}
        label = f"{r['client']} acks={r['acks']} {r['partitions']}p {r['compression']}"
        for key, unit in (("records_per_s", "rec/s"), ("mb_per_s", "MB/s"), ("broker_cpu_s", "broker CPU s"),
                          ("broker_peak_rss_mib", "broker peak RSS MiB")):
            add("produce", label, unit, r[key], **others(produce, key, **match))
    perf = results.get("perftest") if isinstance(results.get("perftest"), list) else []
    for r in perf:
        if r["broker"] != "sluice":
            continue
        label = f"Kafka ProducerPerformance acks=all {r['partitions']}p"
        for key, unit in (("records_per_s", "rec/s"), ("avg_latency_ms", "avg latency ms"),
                          ("broker_cpu_s", "broker CPU s"), ("broker_peak_rss_mib", "broker peak RSS MiB")):
            add("produce", label, unit, r[key], **others(perf, key, partitions=r["partitions"]))
    consume = results.get("consume") or []
    for r in consume:
        if r["broker"] != "sluice":
            continue
        for key, unit in (("records_per_s", "rec/s"), ("mb_per_s", "MB/s")):
            add("consume", f"{r['client']} cold start", unit, r[key], **others(consume, key, client=r["client"]))
    e2e = results.get("e2e") or []
    for linger, wait in E2E_VARIANTS:
        s = _pick(e2e, broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
        if s:
            for key, label in (("p50_ms", "p50"), ("p99_ms", "p99"), ("p999_ms", "p99.9")):
                add("e2e", f"{s['rate']:,}/s linger {linger} fetch.wait {wait} {label}", "ms",
                    s[key], **others(e2e, key, linger_ms=linger, fetch_wait_max_ms=wait))
            lost = others(e2e, "lost", linger_ms=linger, fetch_wait_max_ms=wait)
            if s.get("lost") or any(lost.values()):
                add("e2e", f"{s['rate']:,}/s linger {linger} fetch.wait {wait} lost", "records",
                    s.get("lost"), **lost)
    startup = results.get("startup") or []
    s = _pick(startup, broker="sluice")
    if s:
        add("startup", "cold start to first Metadata answer (fastest)", "s", s["start_s"],
            **others(startup, "start_s"))
        add("memory", f"RSS idle ({s['idle_seconds']:g} s after start)", "MiB", s["rss_idle_mib"],
            **others(startup, "rss_idle_mib"))
    if peak_rss(results, "sluice"):
        add("memory", "RSS under load (highest produce peak)", "MiB", peak_rss(results, "sluice"),
            mock=peak_rss(results, "mock"), kafka=peak_rss(results, "kafka"))
    log_ = results.get("log")
    if log_:
        large, small = log_["large"], log_["small"]
        add("log", f"fetch head ({large['log_bytes'] / MB:,.0f} MB log)", "ms median",
            large["fetch"]["head"]["median_ms"])
        add("log", f"fetch tail ({large['log_bytes'] / MB:,.0f} MB log)", "ms median",
            large["fetch"]["tail"]["median_ms"])
        add("log", "start-up clean, small log", "s", small["clean_s"])
        add("log", "start-up clean, large log", "s", large["clean_s"])
        add("log", "start-up after SIGKILL, small log", "s", small["after_sigkill_s"])
        add("log", "start-up after SIGKILL, large log", "s", large["after_sigkill_s"])
    many = results.get("partitions") or []
    s = _pick(many, broker="sluice")
    if s:
        n = f"{s['partitions']:,} partitions"
        for key, name, unit in (("metadata_confluent_ms", "metadata (confluent)", "ms"),
                                ("metadata_wire_ms", "metadata (wire client)", "ms"),
                                ("records_per_s", "produce", "rec/s"), ("rss_after_mib", "broker RSS", "MiB"),
                                ("create_s", "create topics", "s")):
            add("partitions", f"{n}: {name}", unit, s[key], **others(many, key))
    return out


def peak_rss(results: dict, broker: str) -> float | None:
    """The broker's highest peak RSS over the produce runs (kcat, Python, ProducerPerformance)."""
    perf = results.get("perftest") if isinstance(results.get("perftest"), list) else []
    values = [r["broker_peak_rss_mib"] for r in (results.get("produce") or []) + perf
              if r["broker"] == broker and r.get("broker_peak_rss_mib") is not None]
    return max(values) if values else None


def behind_kafka(rows: list[dict]) -> list[dict]:
    """The table's rows where Sluice does worse than Kafka, with the gap (Sluice's figure
    as a share of Kafka's, or how many times Kafka's it is)."""
    behind = []
    for r in rows:
        ratio = r.get("ratio_kafka")
        if ratio is None or r["section"] == "e2e" and r["unit"] == "records":
            continue
        higher = HIGHER_IS_BETTER.get(r["unit"], False)
        if (ratio < 1.0) if higher else (ratio > 1.0):
            gap = f"{1 - ratio:.0%} slower" if higher else f"{ratio:.2f}x Kafka's"
            behind.append({**r, "gap": gap})
    return behind


def evaluate_targets(results: dict) -> list[dict]:
    """The issue's targets: each met / NOT met with its ratio (never asserted)."""
    targets = []

    def add(name, ratio, limit, higher_is_better, detail):
        if ratio is None:
            met = None
        else:
            met = ratio >= limit if higher_is_better else ratio <= limit
        targets.append({"target": name, "ratio": ratio, "limit": limit,
                        "higher_is_better": higher_is_better, "met": met, "detail": detail})

    produce = results.get("produce") or []
    for client in ("python", "kcat"):
        ratios = []
        for r in produce:
            if r["broker"] == "sluice" and r["client"] == client and r["acks"] == "all":
                m = _pick(produce, broker="mock", client=client, acks="all",
                          partitions=r["partitions"], compression=r["compression"])
                if m:
                    ratios.append((r["records_per_s"] / m["records_per_s"],
                                   f"{r['partitions']}p {r['compression']}"))
        worst = min(ratios) if ratios else None
        add(f"produce >= 1.0x mock, {client}, acks=all", worst and worst[0], 1.0, True,
            f"worst of {len(ratios)} configurations: {worst[1]}" if worst else "not run")
    consume = results.get("consume") or []
    ratios = []
    for r in consume:
        m = _pick(consume, broker="mock", client=r["client"])
        if r["broker"] == "sluice" and m and not CONSUME_CLIENTS[r["client"]]:  # the defaults
            ratios.append((r["records_per_s"] / m["records_per_s"], r["client"]))
    worst = min(ratios) if ratios else None
    add("consume >= 1.0x mock", worst and worst[0], 1.0, True,
        f"worst client: {worst[1]}" if worst else "not run")
    linger, wait = E2E_VARIANTS[0]
    s = _pick(results.get("e2e") or [], broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
    ok = s and s["p99_ms"] is not None
    add(f"e2e p99 <= 5 ms at {s['rate'] if s else 10_000:,} rec/s", ok and s["p99_ms"] / 5.0, 1.0, False,
        f"p99 {s['p99_ms']:.2f} ms at {s['achieved_rate']:,.0f} rec/s, linger.ms={linger}, "
        f"fetch.wait.max.ms={wait} (ratio to 5 ms)" if ok else "not run")
    log_ = results.get("log")
    if log_:
        head, tail = log_["large"]["fetch"]["head"]["median_ms"], log_["large"]["fetch"]["tail"]["median_ms"]
        add("head fetch within 1.2x of tail", head / tail, 1.2, False,
            f"head {head:.3f} ms / tail {tail:.3f} ms (medians)")
        big, small = log_["large"]["clean_s"], log_["small"]["clean_s"]
        add("clean start-up independent of log size", big / small, 1.2, False,
            f"{log_['large']['log_bytes'] / MB:,.0f} MB log {big:.2f} s / "
            f"{log_['small']['log_bytes'] / MB:.1f} MB log {small:.2f} s (fastest of "
            f"{len(log_['small']['clean_all_s'])} starts each; limit 1.2x)")
    else:
        add("head fetch within 1.2x of tail", None, 1.2, False, "not run")
        add("clean start-up independent of log size", None, 1.2, False, "not run")
    if (results.get("kafka") or {}).get("included"):
        targets += kafka_targets(results)
    return targets


def kafka_targets(results: dict) -> list[dict]:
    """Sluice against Apache Kafka: produce and consume throughput >= 1.0x with the Python
    and kcat clients (the worst configuration counts), e2e p99 <= Kafka's, a faster cold
    start, a lower RSS idle and under load. Each met / NOT met, never asserted."""
    targets = []

    def add(name, ratio, limit, higher_is_better, detail):
        met = None if ratio is None else ratio >= limit if higher_is_better else ratio <= limit
        targets.append({"target": name, "ratio": ratio, "limit": limit, "vs": "kafka",
                        "higher_is_better": higher_is_better, "met": met, "detail": detail})

    produce = results.get("produce") or []
    for client in ("python", "kcat"):
        ratios = []
        for r in produce:
            if r["broker"] == "sluice" and r["client"] == client:
                k = _pick(produce, broker="kafka", client=client, acks=r["acks"],
                          partitions=r["partitions"], compression=r["compression"])
                if k:
                    ratios.append((r["records_per_s"] / k["records_per_s"],
                                   f"acks={r['acks']} {r['partitions']}p {r['compression']}"))
        worst = min(ratios) if ratios else None
        add(f"produce >= 1.0x Kafka, {client}", worst and worst[0], 1.0, True,
            f"worst of {len(ratios)} configurations: {worst[1]}" if worst else "not run")
    consume = results.get("consume") or []
    for client in ("python", "kcat"):
        s, k = _pick(consume, broker="sluice", client=client), _pick(consume, broker="kafka", client=client)
        add(f"consume >= 1.0x Kafka, {client}", s and k and s["records_per_s"] / k["records_per_s"], 1.0,
            True, f"{s['records_per_s']:,.0f} vs {k['records_per_s']:,.0f} rec/s (cold start, median)"
            if s and k else "not run")
    linger, wait = E2E_VARIANTS[0]
    e2e = results.get("e2e") or []
    s = _pick(e2e, broker="sluice", linger_ms=linger, fetch_wait_max_ms=wait)
    k = _pick(e2e, broker="kafka", linger_ms=linger, fetch_wait_max_ms=wait)
    ok = s and k and s["p99_ms"] is not None and k["p99_ms"]
    add(f"e2e p99 <= Kafka's at {s['rate'] if s else 10_000:,} rec/s", ok and s["p99_ms"] / k["p99_ms"], 1.0,
        False, f"p99 {s['p99_ms']:.2f} ms vs {k['p99_ms']:.2f} ms, linger.ms={linger}, "
        f"fetch.wait.max.ms={wait}" if ok else "not run")
    startup = results.get("startup") or []
    s, k = _pick(startup, broker="sluice"), _pick(startup, broker="kafka")
    add("cold start faster than Kafka", s and k and s["start_s"] / k["start_s"], 1.0, False,
        f"{s['start_s']:.2f} s vs {k['start_s']:.2f} s to the first Metadata answer (fastest of "
        f"{len(s['all_start_s'])}; Kafka's storage formatted beforehand)" if s and k else "not run")
    add("RSS idle lower than Kafka's", s and k and s["rss_idle_mib"] / k["rss_idle_mib"], 1.0, False,
        f"{s['rss_idle_mib']:.0f} MiB vs {k['rss_idle_mib']:.0f} MiB" if s and k else "not run")
    peaks = {b: peak_rss(results, b) for b in ("sluice", "kafka")}
    add("RSS under load lower than Kafka's", peaks["kafka"] and peaks["sluice"] and peaks["sluice"] / peaks["kafka"],
        1.0, False,
        f"highest peak over the produce runs: {peaks['sluice']:.0f} MiB vs {peaks['kafka']:.0f} MiB "
        f"(Kafka's heap is -Xmx1g -Xms1g)" if peaks["kafka"] and peaks["sluice"] else "not run")
    return targets


def _fmt(value) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def _ratio(ratio) -> str:
    """A target's ratio, with a third decimal (so 0.998 never reads as a missed 1.00)."""
    return "-" if ratio is None else f"{ratio:.3f}x" if ratio < 10 else f"{ratio:.1f}x"


def _verdict(t) -> str:
    if t["met"] is None:
        return "not run"
    return "met" if t["met"] else "NOT met"


def _x(ratio) -> str:
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio:.3f}x" if ratio >= 0.001 else f"{ratio:.1e}x"


def text_table(rows: list[dict], targets: list[dict]) -> str:
    width = max(len(f"{r['name']} [{r['unit']}]") for r in rows) if rows else 20
    lines = [f"{'benchmark':11} {'figure':{width}} {'sluice':>12} {'kafka':>12} {'mock':>12} "
             f"{'sluice/kafka':>12} {'sluice/mock':>11}"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r['section']:11} {r['name'] + ' [' + r['unit'] + ']':{width}} "
                     f"{_fmt(r['sluice']):>12} {_fmt(r.get('kafka')):>12} {_fmt(r['mock']):>12} "
                     f"{_x(r.get('ratio_kafka')):>12} {_x(r['ratio']):>11}")
    lines.append("")
    lines.append("targets:")
    for t in targets:
        ratio = _ratio(t["ratio"])
        sign = ">=" if t["higher_is_better"] else "<="
        lines.append(f"  {_verdict(t):8} {t['target']}: {ratio} (needs {sign} {t['limit']}x; {t['detail']})")
    return "\n".join(lines)


def consume_figures(results: dict) -> str:
    """This run's consume ratios and each broker's CPU share of the time."""
    consume = results.get("consume") or []
    parts = []
    for client in CONSUME_CLIENTS:
        s = _pick(consume, broker="sluice", client=client)
        if not s:
            continue
        vs = [f"{s['records_per_s'] / o['records_per_s']:.2f}x {name}" for name in ("kafka", "mock")
              if (o := _pick(consume, broker=name, client=client))]
        cpu = ", ".join(f"{name} {r['broker_cpu_s']:.2f} s of {r['seconds']:.2f} s" for name in BROKERS
                        if (r := _pick(consume, broker=name, client=client)))
        parts.append(f"{client}: Sluice {' and '.join(vs)} (broker CPU {cpu})")
    return "In this run: " + "; ".join(parts) + "." if parts else ""


def profile_figures(profile: dict) -> str:
    """What this run's profile says, in figures: the broker's CPU share of the wall time and
    the leading functions."""
    if "top" not in profile:
        return ""
    top = profile["top"][:3]
    return (f"In this run the broker was busy {profile['broker_cpu_s']:.2f} CPU-s of {profile['seconds']:.2f} s "
            f"({profile['broker_cpu_s'] / profile['seconds']:.0%} of one core); the leading functions: "
            + ", ".join(f"`{e['function']}` {e['share']:.0%}" for e in top) + ".")


NOTES = [
    "Apache Kafka runs as it ships: one KRaft node in combined mode (broker and controller in "
    "one JVM), Kafka's default heap and GC settings (-Xmx1g -Xms1g, G1, as bin/kafka-server-start.sh), "
    "no fsync per write (Kafka's default, like Sluice's), its log in a temporary directory on the "
    "same disk, num.partitions=4 and auto-created topics as for the other brokers, replication "
    "factor 1, group.initial.rebalance.delay.ms=0; no SLF4J binding on the classpath, so it logs "
    "nothing. Topics are created with the admin API and the benchmark waits until every "
    "partition's leader is known before producing. Its JVM compiles as it goes: the first runs "
    "against it run partly interpreted (no warm-up round is given to any broker).",
    "Kafka's ProducerPerformance (kafka-tools, Java client) produces the same record count of "
    "100-byte values (random letters, its default) with acks=all and the same batching as the "
    "other producers (linger.ms=5, batch.size=1000000, idempotence off); its rate is its own, "
    "clocked from the first send (the JVM's start is outside it). Its MB/s are converted from "
    "MiB to MB.",
    "Start-up: a fresh broker per start, from starting its process (`python -m broker`, the JVM, "
    "the mock's process) to the first answer to a Metadata request naming a broker, polled every "
    "20 ms on a new connection; Kafka's storage is formatted beforehand (kafka-storage format "
    "--standalone, a JVM of its own) and that time is reported apart. Idle RSS is read after "
    "idle_seconds without clients. RSS under load is the highest VmHWM over the produce runs.",
    "The mock cluster runs in a process of its own (bench.mock_broker, through librdkafka's C "
    "API), not inside the benchmark process, so its CPU and RSS are read from /proc/<pid> like "
    "Sluice's; that process also holds an idle Python interpreter (~10 MB RSS, no CPU). The "
    "client's CPU (producer/consumer, this process and kcat) is in the JSON as client_cpu_s.",
    "Broker CPU comes from /proc/<pid>/stat in clock ticks (10 ms): short runs read as 0.",
    "Produce: every configuration writes a fresh topic; the high watermarks are checked "
    "against the records sent. Python client and kcat send the same 100-byte values "
    "(log-line-like text, so lz4 gains about what it gains on real events); keyless, so "
    "librdkafka's sticky partitioner spreads them over the partitions. kcat ships its own "
    "librdkafka (older than confluent-kafka's).",
    "Consume: a cold start (consumer creation, metadata, first fetches included), on a "
    "topic filled beforehand within the mock's ~5 MB per partition; runs alternate between "
    "the brokers and the median is kept. Both clients get room for the whole topic in "
    "librdkafka's local queue (queued.min.messages, queued.max.messages.kbytes): past those "
    "thresholds librdkafka pauses fetching for fetch.queue.backoff.ms (1 s), which a cold "
    "read of the whole topic would otherwise measure instead of the broker. Now and then "
    "librdkafka starts a cold consumer 500 ms late, with either broker: it handles the "
    "assignment before the metadata has named the partitions' leader ('no current leader "
    "for partition' in its debug log) and retries the offset query on a 500 ms timer. The "
    "median of the repeats leaves such runs out; all_seconds in the JSON shows them.",
    "End-to-end latency: records sent at a fixed rate by a producer in this process, received "
    "by a consumer in another (bench.e2e_consumer), both timed with CLOCK_MONOTONIC; the first "
    "records (warm-up) are not counted. Four settings, identical for every broker: producer "
    "linger.ms 0 (the target's setting) or 1, consumer fetch.wait.max.ms 500 (librdkafka's "
    "default) or 1. The mock cluster does not answer a waiting fetch when data arrives (it "
    "always waits fetch.wait.max.ms on an empty fetch), so only fetch.wait.max.ms=1 compares "
    "brokers there. With linger.ms=0 at 10,000 records/s the producer sends a request every "
    "record or few: a broker that cannot keep up with the request rate falls behind and the "
    "latency grows for as long as the run lasts. A consumer more than ~5 MB behind loses "
    "records on the mock (it drops its oldest data; the consumer resets to the earliest): "
    "those show as 'lost' records, the percentiles cover the records that arrived.",
    "Log scaling and start-up: Sluice only (the mock keeps no log). The partition holds 50 "
    "small batches (10 records) at the head, ~1 MiB batches, then 50 small batches at the "
    "tail, so a 4 KB fetch at either end returns one small batch; head and tail fetches "
    "alternate. Start-up is the time from starting `python -m broker` to its 'listening on' "
    "line (interpreter start and imports included), the fastest of the clean starts (other "
    "work on the machine can only lengthen one; the JSON has them all); the start "
    "after SIGKILL is the first start after killing the broker right after writing. The page "
    "cache is warm throughout (no cache dropping on a shared machine).",
    "All three brokers, the clients and this harness share the machine's cores.",
]


def _loads(results: dict, when: str) -> str:
    return "/".join(f"{v:.1f}" for v in results.get(f"load_average_{when}") or ())


def _profile_section(kind: str, profile: dict) -> list[str]:
    if "error" in profile:
        return ["", f"Profile ({kind}): {profile['error']}"]
    md = ["", f"### While kcat {kind}s", "",
          f"{profile['samples']} samples at {profile['rate_hz']} Hz of the Sluice broker while kcat "
          f"{kind}d {profile['records']:,} records (one partition, no compression"
          + (", acks=all" if kind == "produce" else ", cold starts from the beginning")
          + f") at {profile['records_per_s']:,.0f} records/s, broker CPU {profile['broker_cpu_s']:.2f} s "
          f"of {profile['seconds']:.2f} s. Share of samples per innermost Python function (a system "
          "call counts for the function that made it):", "", "| share | function |", "|---:|---|"]
    md += [f"| {e['share']:.1%} | `{e['function']}` |" for e in profile["top"]]
    return md + ["", profile_figures(profile)]


def cpu_per_record(results: dict) -> list[str]:
    """Broker CPU per million records for the produce and consume runs where Sluice is behind
    Kafka: whether the gap is the broker's own work or elsewhere (client, waiting)."""
    lines = []
    for section, keys in (("produce", ("client", "acks", "partitions", "compression")),
                          ("perftest", ("client", "partitions")), ("consume", ("client",))):
        rows = results.get(section) if isinstance(results.get(section), list) else []
        for s in rows:
            if s["broker"] != "sluice":
                continue
            k = _pick(rows, broker="kafka", **{key: s[key] for key in keys})
            if not k or s["records_per_s"] >= k["records_per_s"]:
                continue
            label = " ".join(f"acks={s[key]}" if key == "acks" else f"{s[key]}p" if key == "partitions"
                             else str(s[key]) for key in keys)
            per = {r["broker"]: r["broker_cpu_s"] / r["records"] * 1e6 for r in (s, k)}
            if s["broker_cpu_s"] <= k["broker_cpu_s"]:
                reading = ("Sluice's broker used no more CPU than Kafka's: the gap is not its computing "
                           "(per-request latency, the client, or other load)")
            else:
                reading = (f"Sluice's broker used {s['broker_cpu_s'] - k['broker_cpu_s']:.2f} CPU-s more "
                           f"({s['broker_cpu_s'] / max(k['broker_cpu_s'], 0.01):.1f}x): see the profile")
            lines.append(f"| {section} {label} | {1 - s['records_per_s'] / k['records_per_s']:.0%} | "
                         f"{s['seconds']:.2f} / {k['seconds']:.2f} | {s['broker_cpu_s']:.2f} / "
                         f"{k['broker_cpu_s']:.2f} | {per['sluice']:.2f} / {per['kafka']:.2f} | "
                         f"{s['client_cpu_s']:.2f} / {k['client_cpu_s']:.2f} | {reading} |")
    if not lines:
        return []
    return ["", "Where the produce and consume time goes, per run where Sluice is behind (Sluice / "
            "Kafka; broker CPU from /proc, client CPU this process's and kcat's; on a machine "
            "whose cores broker and client share, a broker's CPU comes out of the client's):", "",
            "| run | Sluice behind by | wall s | broker CPU s | broker CPU s per M records | client CPU s | this run says |",
            "|---|---:|---:|---:|---:|---:|---|"] + lines


def markdown_report(results: dict, rows: list[dict], targets: list[dict], chart_name: str | None) -> str:
    kafka = results.get("kafka") or {}
    if kafka.get("included"):
        kafka_line = (f"- kafka: Apache Kafka {kafka['version']} (Maven Central's kafka_2.13), one KRaft node "
                      "in combined mode (broker and controller), a JVM of its own with Kafka's default "
                      "heap and GC flags (-Xmx1g -Xms1g, G1), log on the same disk as Sluice's "
                      "(bench.kafka_broker).")
    else:
        kafka_line = f"- kafka: NOT IN THIS RUN: {kafka.get('unavailable') or 'no section that uses it ran'}"
    md = [f"# Broker benchmarks: Sluice vs Apache Kafka vs librdkafka's mock cluster ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']}), {results['clients']['kcat']}"
          + (f", Kafka's ProducerPerformance {kafka['version']}" if kafka.get("included") else ""),
          f"- sizes: {json.dumps(results['sizes'])}",
          "- sluice: `python -m broker` process, data on local disk (temporary directory);"
          " mock: librdkafka's mock cluster in a process of its own (bench.mock_broker), log"
          " in memory, ~5 MB kept per partition.",
          kafka_line,
          f"- run time: {results['seconds']:.0f} s ({results.get('section_seconds', {})}); "
          f"load average (1/5/15 min) before {_loads(results, 'before')}, after "
          f"{_loads(results, 'after')} on {results['machine']['cores']} cores (other work on the "
          f"machine shows here)", ""]
    md += ["## Targets", "", "| target | ratio | needs | verdict | detail |", "|---|---|---|---|---|"]
    for t in targets:
        ratio = _ratio(t["ratio"])
        sign = "≥" if t["higher_is_better"] else "≤"
        md.append(f"| {t['target']} | {ratio} | {sign} {t['limit']}x | {_verdict(t)} | {t['detail']} |")
    md += ["", "## Figures", "", "| benchmark | figure | unit | sluice | kafka | mock | sluice/kafka | sluice/mock |",
           "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        md.append(f"| {r['section']} | {r['name']} | {r['unit']} | {_fmt(r['sluice'])} | "
                  f"{_fmt(r.get('kafka'))} | {_fmt(r['mock'])} | {_x(r.get('ratio_kafka'))} | {_x(r['ratio'])} |")
    startup = results.get("startup") or []
    if startup:
        md += ["", "Start-up: a fresh broker per start, timed from starting its process to its first "
                   "Metadata answer naming a broker (Kafka: the JVM's start, its storage formatted "
                   "beforehand" + (f", which took {k['format_s']:.2f} s more"
                                   if (k := _pick(startup, broker="kafka")) and k.get("format_s") else "")
                   + "); all starts: " + "; ".join(
                       f"{r['broker']} " + ", ".join(f"{x:.2f}" for x in r["all_start_s"]) + " s"
                       for r in startup) + ". Threads once idle: " + ", ".join(
                       f"{r['broker']} {r['threads']}" for r in startup) + "."]
    if results.get("log"):
        large = results["log"]["large"]
        md += ["", f"Log scaling (Sluice only): {large['records']:,} records in {large['segments']} segments of "
                   f"{large['segment_bytes'] // MIB} MiB, filled at {large['fill']['bulk_mb_per_s']:.0f} MB/s "
                   f"(wire client, 1 MiB batches, 4 in flight, acks=1). First fetch after a clean "
                   f"restart: head {large['first_fetch_after_restart_ms']['head']:.2f} ms, tail "
                   f"{large['first_fetch_after_restart_ms']['tail']:.2f} ms. Page cache warm throughout."]
    behind = behind_kafka(rows)
    if behind:
        md += ["", "## Where Sluice is behind Kafka", "",
               f"{len(behind)} of the {sum(1 for r in rows if r.get('ratio_kafka') is not None)} figures "
               "measured on both:", "", "| benchmark | figure | unit | sluice | kafka | gap |", "|---|---|---|---:|---:|---|"]
        md += [f"| {r['section']} | {r['name']} | {r['unit']} | {_fmt(r['sluice'])} | {_fmt(r['kafka'])} | "
               f"{r['gap']} |" for r in behind]
        md += cpu_per_record(results)
        md += ["", "The consume time split (librdkafka's protocol log) and the broker's profile (py-spy) "
                   "follow."]
    elif kafka.get("included"):
        md += ["", "## Where Sluice is behind Kafka", "", "Nowhere among the figures measured on both in this run."]
    fetches = [t for t in results.get("consume_fetches") or [] if "error" not in t]
    if fetches:
        md += ["", "## Where the consume time goes (librdkafka's protocol log)", "",
               "One more kcat cold start per broker (default settings), with `-d protocol`. "
               "librdkafka keeps one Fetch in flight per broker, so the data phase (first Fetch "
               "sent to last data received) alternates between waiting for a response (the "
               "sum of the round trips: the broker's work, the transfer and the client reading "
               "the socket) and handling it before the next request (the client's work alone). "
               "The end-of-topic poll, held fetch.wait.max.ms by every broker, is left out.", "",
               "| broker | run s | fetches | MB per fetch | first fetch after ms | data phase ms | "
               "waiting ms | handling ms |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        md += [f"| {t['broker']} | {t['seconds']:.2f} | {t['fetches']} | {t['mb_per_fetch']:.2f} | "
               f"{t['to_first_fetch_ms']:.0f} | {t['data_ms']:.0f} | {t['waiting_ms']:.0f} | "
               f"{t['handling_ms']:.0f} |" for t in fetches]
        md += ["", consume_figures(results)]
    profile = results.get("profile")
    if profile:
        md += ["", "## Where the broker's time goes (py-spy)"]
        md += _profile_section("produce", profile)
        if profile.get("consume"):
            md += _profile_section("consume", profile["consume"])
    md += ["", "## Notes", ""] + [f"- {note}" for note in NOTES]
    if chart_name:
        md += ["", f"![chart]({chart_name})"]
    return "\n".join(md) + "\n"


def chart(results: dict, path: str) -> None:
    """Six panels of the table's figures, one bar per broker measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
    import numpy as np

    colors = {"sluice": "#1f77b4", "kafka": "#2ca02c", "mock": "#ff7f0e"}
    rows = comparison_rows(results)
    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    fig.suptitle(f"Sluice vs Apache Kafka vs librdkafka mock cluster ({results['mode']}, {results['date']})\n"
                 f"{describe_machine()}", fontsize=9)

    def panel(ax, selected, title, xlabel, scale=1.0, log_scale=False, limit=None):
        if not selected:
            ax.set_title(title + " (not run)", fontsize=9)
            ax.axis("off")
            return
        brokers = [b for b in BROKERS if any(r.get(b) is not None for r in selected)]
        y = np.arange(len(selected))
        h = 0.8 / len(brokers)
        for i, broker in enumerate(brokers):
            ax.barh(y - 0.4 + h * (i + 0.5), [(r.get(broker) or 0) * scale for r in selected], h,
                    label=broker, color=colors[broker])
        ax.set_yticks(y, [f"{r['name']} [{r['unit']}]" if r["unit"] not in ("rec/s", "ms", "broker CPU s")
                          else r["name"] for r in selected], fontsize=6.5)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        if log_scale:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        if limit:
            ax.axvline(limit, color="red", linestyle="--", linewidth=0.8)
        ax.legend(fontsize=7)

    def pick(section, unit=None, name=None):
        return [r for r in rows if r["section"] == section and (unit is None or r["unit"] == unit)
                and (name is None or name in r["name"])]

    panel(axes[0][0], pick("produce", "rec/s"), "produce (100-byte records)", "thousand records/s", 1e-3)
    panel(axes[1][0], pick("produce", "broker CPU s"), "produce: broker CPU", "CPU seconds")
    panel(axes[0][1], pick("consume", "rec/s"), "consume, cold start", "thousand records/s", 1e-3)
    panel(axes[1][1], pick("e2e", "ms"), "end-to-end latency (producer paced)", "ms (log scale)",
          log_scale=True, limit=5.0)
    panel(axes[0][2], pick("startup") + pick("memory"), "start-up and memory", "s / MiB (log scale)",
          log_scale=True)
    panel(axes[1][2], pick("partitions"), "many partitions", "value (log scale)", log_scale=True)
    fig.tight_layout()
    fig.savefig(path, dpi=72, format="png")
    plt.close(fig)


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _rounded(value):
    """Floats to 4 significant digits: the JSON stays small and diffable."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def section_timer(results: dict):
    """`timed(name, fn, *args)`: runs fn(*args), noting its seconds in
    results["section_seconds"][name] (also when it fails)."""
    results["section_seconds"] = {}

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            results["section_seconds"][name] = round(time.perf_counter() - t0, 1)

    return timed


def publish(name: str, results: dict, markdown: str, out_dir: str | None) -> None:
    """Print a run's report and, unless `out_dir` is None, write it and the results
    there (`write_result_files`), naming the files written."""
    print()
    print(markdown)
    if out_dir is not None:
        paths = write_result_files(name, results, out_dir, markdown)
        print("written: " + ", ".join(os.path.relpath(p, REPO) for p in paths.values()))


def write_result_files(name: str, results: dict, out_dir: str, markdown: str) -> dict:
    """`<name>-<date>[-<mode>].json` and `.md` in `out_dir` (a full run's without the mode),
    each written atomically; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{name}-{results['date']}" + ("" if results["mode"] == "full" else f"-{results['mode']}")
    paths = {"json": os.path.join(out_dir, stem + ".json"), "md": os.path.join(out_dir, stem + ".md")}
    _atomic_write(paths["json"], json.dumps(_rounded(results), indent=1) + "\n")
    _atomic_write(paths["md"], markdown)
    return paths


def write_reports(results: dict, out_dir: str, with_chart: bool = True) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    stem = f"broker-{results['date']}" + ("-quick" if results["mode"] == "quick" else "") \
        + ("" if results["mode"] in ("quick", "full") else f"-{results['mode']}")
    paths = {"json": os.path.join(out_dir, stem + ".json"), "md": os.path.join(out_dir, stem + ".md")}
    chart_name = None
    if with_chart:
        paths["png"] = os.path.join(out_dir, stem + ".png")
        chart(results, paths["png"] + ".tmp")  # format given: the name ends in .tmp
        os.replace(paths["png"] + ".tmp", paths["png"])
        chart_name = os.path.basename(paths["png"])
    _atomic_write(paths["json"], json.dumps(_rounded(results), indent=1) + "\n")
    _atomic_write(paths["md"], markdown_report(results, results["table"], results["targets"], chart_name))
    return paths


# -- the run ------------------------------------------------------------------------------------------

def client_versions() -> dict:
    import confluent_kafka

    try:
        kcat = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"Version (\S+) .*?(librdkafka \S+)", kcat)
        kcat = f"kcat {match.group(1)} ({match.group(2)})" if match else "kcat ?"
    except (OSError, subprocess.TimeoutExpired):
        kcat = "kcat not found"

    def first(version):  # a string, or (string, int) depending on the release
        return version if isinstance(version, str) else version[0]

    return {"confluent_kafka": first(confluent_kafka.version()),
            "librdkafka": first(confluent_kafka.libversion()), "kcat": kcat}


def start_kafka(workdir: str, sizes: Sizes, log):
    """A started KafkaTarget, or (None, the reason) when Kafka cannot be had."""
    from bench.kafka_broker import KafkaTarget, KafkaUnavailable, version

    try:
        target = KafkaTarget(workdir, sizes)
    except Exception as e:  # noqa: BLE001 (reported, and the run carries on)
        return None, f"{type(e).__name__}: {e}"
    try:
        target.start()
    except KafkaUnavailable as e:
        target.stop()
        return None, str(e)
    log(f"  Kafka {version()} started: storage formatted in {target.process.format_s:.1f} s, "
        f"JVM start to first Metadata answer {target.process.start_s:.1f} s")
    return target, None


def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print, with_kafka: bool = True) -> dict:
    """Every benchmark in `sections`; returns the results (nothing written). Without
    `with_kafka`, or when Kafka cannot be resolved or started, Sluice vs mock only."""
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
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    results["table"] = comparison_rows(results)
    results["targets"] = evaluate_targets(results)
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: about a minute")
    parser.add_argument("--records", type=int, help="records per produce configuration")
    parser.add_argument("--log-mb", type=int, help="size of the large log (MiB)")
    parser.add_argument("--many-partitions", type=int, help="partitions of the many-partitions run")
    parser.add_argument("--e2e-seconds", type=float, help="measured seconds of the latency run")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json/.png")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--no-kafka", action="store_true", help="Sluice vs the mock cluster only")
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
    print(f"broker benchmarks ({mode}): sluice (process, on disk) vs Apache Kafka (JVM, KRaft, on "
          f"disk) vs librdkafka mock cluster (process, in memory), 127.0.0.1", flush=True)

    def log(line):
        print(line, flush=True)

    results = run(sizes, mode, sections, log, with_kafka=not args.no_kafka)
    print()
    print(text_table(results["table"], results["targets"]))
    print("(broker CPU/RSS: /proc of each broker process, Kafka's JVM and the mock's too; e2e: the "
          "mock never ends a waiting fetch early, compare it at fetch.wait 1; see the .md notes)")
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
