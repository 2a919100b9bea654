"""`make demo`: the main job, end to end, on an embedded single broker.

1. Starts a Sluice broker in this process (a fresh data directory, a free port).
2. Produces a stream of page views with confluent-kafka (keyed by user, with headers).
3. Runs a Structured Streaming query: `sluice` source -> views per page -> `sluice` sink,
   exactly once, committing its progress to the consumer group `page-view-counter`.
   Each micro-batch writes the complete, updated table of counts (complete mode).
   Progress (records in, batches, the group's lag) is shown while it runs.
4. Prints the resulting table, read back from the output topic.
5. Reprocesses history: resets the group's offsets to the earliest with
   `sluice groups reset-offsets`, then re-runs the count as a batch job that starts
   from the group's offsets, and shows that it saw every view again.
6. Starts the web console (`sluice console`) on the broker and reads the group's page of
   it (members, lag), then says how to run broker and console yourself.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

EVENTS = 20_000
PARTITIONS = 4
PAGES = ["/", "/pricing", "/docs", "/blog", "/signup", "/login"]
GROUP = "page-view-counter"


def produce_page_views(bootstrap: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "compression.type": "lz4", "linger.ms": 5})
    failures = []
    rng = random.Random(7)
    for i in range(EVENTS):
        user = f"user-{rng.randrange(500)}"
        event = {"user": user, "page": rng.choice(PAGES), "ms_on_page": rng.randrange(100, 60_000)}
        producer.produce("page-views", key=user, value=json.dumps(event),
                         headers=[("source", b"web"), ("schema", b"page-view/1")],
                         on_delivery=lambda err, msg: failures.append(err) if err else None)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30) or failures:
        raise SystemExit(f"producing failed: {failures[:3]}")


def lag(client, topic: str) -> int:
    from sluice_client import LATEST

    ends = client.consumer.list_offsets(topic, range(PARTITIONS), LATEST)
    committed = client.consumer.fetch_offsets(GROUP, [(topic, p) for p in range(PARTITIONS)])
    return sum(ends[p].offset - max(committed[(topic, p)].offset, 0) for p in range(PARTITIONS))


def sluice_cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True,
                          text=True, timeout=60)
    if done.returncode:
        raise SystemExit(f"sluice {' '.join(args)} failed: {done.stderr}")
    return done.stdout


def console_view_of_group(bootstrap: str) -> None:
    """`sluice console` on a free port: its URL and what its group page's data says."""
    import urllib.request

    console = subprocess.Popen([sys.executable, "-m", "sluice.cli", "console", "--bootstrap-server", bootstrap,
                                "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = console.stdout.readline()  # "Sluice console of cluster ... on http://127.0.0.1:P/ (read-only)"
        url = line.split(" on ", 1)[1].split()[0] if " on http://" in line else None
        if url is None:
            raise SystemExit(f"sluice console did not start: {line}{console.stdout.read()}")
        with urllib.request.urlopen(f"{url}api/groups/{GROUP}", timeout=30) as response:
            group = json.load(response)
        print(f"6. the web console: {url} (sluice console --bootstrap-server {bootstrap})")
        print(f"   its page of group {GROUP}: state {group['state']}, "
              f"{len(group['members'])} members, total lag {group['total_lag']}")
        print("   to keep one open: .venv/bin/sluice broker --data-dir /tmp/sluice-data --port 9092, "
              "then .venv/bin/sluice console --bootstrap-server 127.0.0.1:9092 and open http://127.0.0.1:8080/")
    finally:
        console.terminate()
        console.wait(15)


def main() -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import functions as F

    from broker.embedded import EmbeddedBroker
    from examples._support import spark_session
    from sluice_client import Client, NewTopic

    work = tempfile.mkdtemp(prefix="sluice-demo-")
    try:
        with EmbeddedBroker(os.path.join(work, "data")) as broker, \
                Client(broker.bootstrap_servers) as client:
            bootstrap = broker.bootstrap_servers
            print(f"1. Sluice broker listening on {bootstrap}")
            client.admin.create_topics({"page-views": NewTopic(PARTITIONS, 1),
                                  "views-per-page": NewTopic(1, 1)})
            started = time.perf_counter()
            produce_page_views(bootstrap)
            print(f"2. confluent-kafka produced {EVENTS} page views "
                  f"in {time.perf_counter() - started:.1f}s")

            spark = spark_session("sluice-demo")  # errors only: the lines below are the story

            views = (spark.readStream.format("sluice")
                     .option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", "page-views")
                     .option("startingOffsets", "earliest")
                     .option("maxOffsetsPerTrigger", "5000")
                     .option("kafka.group.id", GROUP)
                     .load())
            page = F.get_json_object(F.col("value").cast("string"), "$.page")
            counts = views.groupBy(page.alias("page")).count()
            query = (counts.select(F.col("page").alias("key"),
                                   F.to_json(F.struct("page", "count")).alias("value"))
                     .writeStream.format("sluice")
                     .option("kafka.bootstrap.servers", bootstrap)
                     .option("topic", "views-per-page")
                     .option("checkpointLocation", os.path.join(work, "checkpoint"))
                     .outputMode("complete")
                     .trigger(availableNow=True)
                     .start())
            print("3. streaming page-views -> count per page -> views-per-page (exactly once)")
            shown = 0

            def show_progress() -> int:
                progress = query.recentProgress
                for batch in progress[shown:]:
                    print(f"   batch {batch['batchId']}: {batch['numInputRows']} records in, "
                          f"group lag now {lag(client, 'page-views')}")
                return len(progress)

            while query.isActive:
                shown = show_progress()
                time.sleep(0.2)
            query.awaitTermination()
            show_progress()

            latest = (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", "views-per-page").load()
                      .select(F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"),
                              F.get_json_object(F.col("value").cast("string"), "$.count")
                              .cast("long").alias("views"), "offset"))
            table = (latest.groupBy("page").agg(F.max_by("views", "offset").alias("views"))
                     .orderBy(F.desc("views")))
            print("4. views per page, read back from the output topic:")
            rows = table.collect()
            for row in rows:
                print(f"   {row['page']:<10} {row['views']:>6}")
            total = sum(row["views"] for row in rows)

            print("5. reprocessing: reset the group to the earliest offsets, then recount as a batch job")
            print(sluice_cli("groups", "--bootstrap-server", bootstrap, "reset-offsets",
                             "--group", GROUP, "--all-topics", "--to-earliest", "--execute"))
            again = (spark.read.format("sluice").option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", "page-views").option("startingOffsets", "group")
                     .option("kafka.group.id", GROUP).load().count())
            print(f"   the batch job read {again} page views again (the stream counted {total})")
            spark.stop()
            console_view_of_group(bootstrap)
            return 0 if again == total == EVENTS else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
