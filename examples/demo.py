"""`make demo`: a Sluice broker with standard Kafka clients, end to end.

1. Starts an embedded broker on a free loopback port, with a fresh data directory.
2. Creates a 4-partition topic `page-views` with Sluice's own client.
3. Produces a stream of page views (keyed by user, with headers) with confluent-kafka,
   idempotent, acks=all, lz4-compressed: a standard client, unmodified.
4. Reads every partition back with Sluice's client and shows per-page counts.
5. Restarts the broker on the same data directory and shows that every offset and
   record survived; then finds, by timestamp, where the second half of the stream began.

The Structured Streaming part of the demo arrives with the Spark connector.
"""

from __future__ import annotations

import collections
import json
import random
import shutil
import sys
import tempfile
import time

from confluent_kafka import Producer

from broker.embedded import EmbeddedBroker
from wire.client import EARLIEST, LATEST, Client, NewTopic

TOPIC = "page-views"
PARTITIONS = 4
EVENTS = 20_000
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]


def produce_page_views(bootstrap: str) -> int:
    """Produce EVENTS page views; returns the timestamp (ms) of the second half's start."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    failures = []
    rng = random.Random(7)
    start_ms = int(time.time() * 1000)
    half_ms = start_ms + EVENTS // 2
    for i in range(EVENTS):
        user = f"user-{rng.randrange(500)}"
        ts = start_ms + i  # one event per millisecond of event time
        event = {"user": user, "page": rng.choice(PAGES), "ms_on_page": rng.randrange(100, 60_000)}
        producer.produce(TOPIC, key=user, value=json.dumps(event), timestamp=ts,
                         headers=[("source", b"web"), ("schema", b"page-view/1")],
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(30)
    if remaining or failures:
        raise SystemExit(f"produce failed: {remaining} undelivered, errors {failures[:3]}")
    return half_ms


def read_all(client: Client) -> dict[int, list]:
    """Every record of every partition, fetched from the partition leader."""
    ends = client.list_offsets(TOPIC, range(PARTITIONS), LATEST)
    records = {}
    for partition in range(PARTITIONS):
        offset, got = 0, []
        while offset < ends[partition].offset:
            fetched = client.fetch_records(TOPIC, partition, offset, max_wait_ms=100)
            got.extend(fetched.records)
            offset = fetched.next_offset
        records[partition] = got
    return records


def show(records: dict[int, list]) -> None:
    print(f"{'partition':>9} {'records':>8} {'first':>6} {'last':>6}")
    for partition, rows in records.items():
        print(f"{partition:>9} {len(rows):>8} {rows[0].offset:>6} {rows[-1].offset:>6}")
    pages = collections.Counter(json.loads(r.value)["page"] for rows in records.values() for r in rows)
    print("\nviews per page:")
    for page, count in pages.most_common():
        print(f"  {page:<10} {count:>6}")


def main() -> int:
    data_dir = tempfile.mkdtemp(prefix="sluice-demo-")
    try:
        with EmbeddedBroker(data_dir) as broker:
            port = broker.broker.server.port
            print(f"Sluice broker listening on {broker.bootstrap_servers} (data in {data_dir})")
            with Client(broker.bootstrap_servers) as client:
                client.create_topics({TOPIC: NewTopic(PARTITIONS, 1, {"retention.ms": "-1"})})
                started = time.perf_counter()
                half_ms = produce_page_views(broker.bootstrap_servers)
                elapsed = time.perf_counter() - started
                print(f"confluent-kafka produced {EVENTS} page views in {elapsed:.2f}s\n")
                before = read_all(client)
                show(before)
        print("\nrestarting the broker on the same data directory...")
        with EmbeddedBroker(data_dir, port=port) as broker, Client(broker.bootstrap_servers) as client:
            after = read_all(client)
            same = all([(r.offset, r.key, r.value, r.headers) for r in after[p]] ==
                       [(r.offset, r.key, r.value, r.headers) for r in before[p]] for p in before)
            print(f"after restart: {sum(map(len, after.values()))} records, identical: {same}")
            earliest = client.list_offsets(TOPIC, range(PARTITIONS), EARLIEST)
            halfway = client.list_offsets(TOPIC, range(PARTITIONS), half_ms)
            print("second half of the stream starts at offsets",
                  {p: halfway[p].offset for p in range(PARTITIONS)},
                  "(earliest:", {p: earliest[p].offset for p in range(PARTITIONS)}, ")")
            return 0 if same else 1
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
