"""`format("sluice")` reading a replicated topic while its leader is killed: three real
brokers on a real ZooKeeper (tests/cluster.py), the shared Spark session, and idempotent
confluent-kafka producers at acks=all.

A streaming query reads an RF=3 topic a few hundred rows per trigger; midway the leader
of partition 0 is SIGKILLed and more records are produced through the survivors. Once
the query has read up to the end, its Parquet output must hold every acknowledged record
exactly once (lost and duplicated are counted and printed) at the offset its producer was
told, and nothing else.
"""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("pyspark")

from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(300)

TOPIC = "spark-rf3"
PARTITIONS = 3
QUERY_TIMEOUT = 120


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path / "cluster", zookeeper, brokers=3, properties=FAST_FAILOVER) as running:
        yield running


def test_the_source_reads_across_a_leader_kill_without_loss_or_repeats(spark, cluster, tmp_path, request):
    seed = pick_seed()
    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    before = Workload(cluster.bootstrap_servers, TOPIC, PARTITIONS, seed=seed, name="before",
                      rate=2000, count=1500).start()
    before.complete()

    output, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", cluster.all_servers)
          .option("subscribe", TOPIC).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "300").load())
    query = (df.selectExpr("partition", "offset", "value").writeStream.format("parquet")
             .option("path", output).option("checkpointLocation", checkpoint)
             .trigger(processingTime="300 milliseconds").start())
    try:
        wait_for(processed(query, 600), QUERY_TIMEOUT, "the query to read its first batches")
        victim = cluster.leader_of(TOPIC, 0)
        cluster.kill(victim)
        after = Workload(cluster.bootstrap_servers, TOPIC, PARTITIONS, seed=seed + 1, name="after",
                         rate=2000, count=1500).start()
        after.complete(120)
        wait_for(processed(query, 3000), QUERY_TIMEOUT, "the query to read every record")
    finally:
        query.stop()

    assert sum(len(w.acked) for w in (before, after)) == 3000
    counts = read_back(spark, output, (before, after), f"{request.node.name} seed={seed} killed={victim}")
    assert counts == {name: 0 for name in counts}


def processed(query, rows: int):
    """A wait condition: the streaming query has read `rows` rows in all (an error at once
    if it died)."""
    def check():
        if not query.isActive:
            raise AssertionError(f"the query died: {query.exception()}")
        return sum(p["numInputRows"] for p in query.recentProgress) >= rows
    return check


def read_back(spark, output: str, workloads, title: str) -> dict[str, int]:
    """The query's Parquet output (partition, offset, value) against what the workloads
    had acknowledged: lost, duplicated, and unexpected (a record read at an offset no
    value of it was acknowledged at), printed after `title`."""
    acked = {(a.partition, a.offset): a.value for w in workloads for a in w.acked}
    read = collections.Counter((r.partition, r.offset, bytes(r.value))
                               for r in spark.read.parquet(output).collect())
    counts = {"lost": sum(1 for (p, o), v in acked.items() if (p, o, v) not in read),
              "duplicated": sum(n - 1 for n in read.values() if n > 1),
              "unexpected": sum(1 for (p, o, v) in read if acked.get((p, o)) != v)}
    print(f"{title} read={sum(read.values())} " + " ".join(f"{k}={v}" for k, v in counts.items()))
    return counts
