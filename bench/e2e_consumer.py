"""The consuming half of `bench.broker`'s end-to-end latency benchmark, in its own process
(so that it never waits for the paced producer's GIL).

Each record's value starts with (index, send time) as two big-endian 64-bit integers,
the send time from CLOCK_MONOTONIC (`time.monotonic_ns`, shared by every process of the
machine). The consumer reads partition 0 from the beginning, prints `ready` once
assigned, and then for every record with index >= WARMUP keeps receive - send. It stops
after the record with index COUNT - 1, or SECONDS after it started, whichever is first,
and prints one JSON line: records received and latency percentiles in milliseconds.

    python -m bench.e2e_consumer BOOTSTRAP TOPIC COUNT WARMUP SECONDS [FETCH_WAIT_MAX_MS]
"""

from __future__ import annotations

import json
import math
import struct
import sys
import time
import uuid

_HEADER = struct.Struct(">Qq")


def percentile(sorted_values: list, q: float):
    """Nearest-rank percentile of an ascending list (None when it is empty)."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def consumer_config(bootstrap: str, fetch_wait_max_ms: int = 500) -> dict:
    """The same consumer settings against every broker: librdkafka's defaults but for
    fetch.wait.max.ms (default 500: a broker that does not answer a waiting fetch as soon
    as data arrives shows up as up to that much latency)."""
    return {"bootstrap.servers": bootstrap, "group.id": f"bench-e2e-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": fetch_wait_max_ms, "log_level": 3}


def main(argv=None) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    args = list(argv if argv is not None else sys.argv[1:])
    bootstrap, topic, count, warmup, seconds = args[:5]
    count, warmup, seconds = int(count), int(warmup), float(seconds)
    fetch_wait_max_ms = int(args[5]) if len(args) > 5 else 500
    started = time.monotonic()
    deadline = started + seconds
    consumer = Consumer(consumer_config(bootstrap, fetch_wait_max_ms))
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    print("ready", flush=True)
    latencies_ns = []
    received = errors = 0
    last_index = -1
    while last_index < count - 1 and time.monotonic() < deadline:
        message = consumer.poll(0.1)
        if message is None:
            continue
        now = time.monotonic_ns()
        if message.error():
            errors += 1
            continue
        index, sent = _HEADER.unpack_from(message.value())
        received += 1
        last_index = max(last_index, index)
        if index >= warmup:
            latencies_ns.append(now - sent)
    consumer.close()
    latencies_ns.sort()

    def ms(value):
        return None if value is None else value / 1e6

    print(json.dumps({
        "received": received, "errors": errors, "measured": len(latencies_ns),
        "complete": last_index >= count - 1,
        "p50_ms": ms(percentile(latencies_ns, 0.50)), "p99_ms": ms(percentile(latencies_ns, 0.99)),
        "p999_ms": ms(percentile(latencies_ns, 0.999)),
        "max_ms": ms(latencies_ns[-1] if latencies_ns else None),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
