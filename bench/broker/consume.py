"""2. Consume from a cold start: confluent-kafka's Consumer (assigned from the beginning)
and kcat -C -e, then one kcat run per broker with librdkafka's protocol log, which splits
the time between waiting for fetch responses and handling them."""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import uuid

from bench.common import KCAT, MB, MIB, VALUE_SIZE, Probe, Sizes, median_run, producer_config, watermarks


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


def consume_python(bootstrap: str, topic: str, partitions: int, expected: int, timeout: float,
                   settings: dict | None = None) -> float:
    """Seconds from creating the consumer to holding `expected` records; `settings`: more
    client settings (security)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    started = time.perf_counter()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 3, **CONSUMER_QUEUE, **(settings or {})})
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

