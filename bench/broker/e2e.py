"""3. End-to-end latency at a fixed rate: a paced producer in this process, a consumer in
another (bench.e2e_consumer); p50/p99/p99.9 per producer/consumer setting."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
import uuid

from bench.common import REPO, VALUE_SIZE, Sizes, producer_config


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

