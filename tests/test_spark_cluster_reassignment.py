"""Spark across partition reassignments (issue 32): four real brokers on a real ZooKeeper
(tests/cluster.py), the fourth started mid-test, and every replica on broker 0 of the
topics concerned moved to broker 3 and back (test_cluster_reassignment_failures'
move_replicas) while Spark reads or writes.

- The `sluice` source: a streaming query of the shared Spark session reads an RF=3 topic
  (300 rows a trigger) while an idempotent producer writes and the topic moves. The query
  is never restarted; its Parquet output holds every acknowledged record exactly once, at
  the offset its producer was told (lost, duplicated, unexpected printed, all 0).
- The exactly-once `sluice` sink (`make chaos`: a minute and a half): a driver in a process of its own (test_spark_sink's)
  copies an RF=3 input topic into an RF=3 output topic 40 records a micro-batch, while the
  output topic and `__transaction_state` move; a micro-batch commits after each move.
  test_spark_sink_cluster's counts (lost, duplicated, left open, aborted reads,
  non-monotonic and inconsistent offsets, ...) are printed and all 0.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from broker.transactions.txn_log import TOPIC as TRANSACTION_STATE  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed  # noqa: E402
from tests.test_cluster_reassignment_failures import move_replicas, wait_for_no_orphans  # noqa: E402
from tests.test_spark_cluster_source import QUERY_TIMEOUT, processed, read_back  # noqa: E402
from tests.test_spark_sink import next_batch  # noqa: E402
from tests.test_spark_sink_cluster import (PROPERTIES as SINK_PROPERTIES, Running,  # noqa: E402
                                           count_anomalies, create_case, wait_for_batch)

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 3
MOVES = ((0, 3), (3, 0))  # (from broker, to broker)


def three_of_four(tmp_path, zookeeper, properties) -> Cluster:
    """A cluster of four brokers of which 0, 1 and 2 are started."""
    cluster = Cluster(tmp_path / "cluster", zookeeper, brokers=4, properties=properties)
    try:
        for broker_id in (0, 1, 2):
            cluster.processes[broker_id].start()
        cluster.wait_for_brokers()
    except BaseException:
        cluster.close()
        raise
    return cluster


def start_fourth(cluster: Cluster) -> None:
    cluster.processes[3].start()
    cluster.wait_for_brokers()


def test_the_source_reads_across_moves_onto_a_new_broker_and_back(spark, tmp_path, zookeeper, request):
    seed, topic = pick_seed(), "spark-moved"
    print(f"{request.node.name} seed={seed}")
    cluster = three_of_four(tmp_path, zookeeper, FAST_FAILOVER)
    workloads = []
    try:
        cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_leaders(topic, full_isr=True)
        workloads.append(Workload(cluster.all_servers, topic, PARTITIONS, seed=seed, name="before",
                                  rate=2000, count=600).start())
        workloads[0].complete()
        query = (spark.readStream.format("sluice")
                 .option("kafka.bootstrap.servers", cluster.all_servers)
                 .option("subscribe", topic).option("startingOffsets", "earliest")
                 .option("maxOffsetsPerTrigger", "300").load()
                 .selectExpr("partition", "offset", "value").writeStream.format("parquet")
                 .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="300 milliseconds").start())
        try:
            wait_for(processed(query, 300), QUERY_TIMEOUT, "the query to read its first batch")
            workloads.append(Workload(cluster.all_servers, topic, PARTITIONS, seed=seed, name="during",
                                      rate=150, count=100_000).start())
            start_fourth(cluster)
            for leaving, joining in MOVES:
                move_replicas(cluster, (topic,), leaving, joining)
                workloads[1].wait_acked(150, timeout=60)
            workloads[1].finish()
            total = sum(len(w.acked) for w in workloads)
            wait_for(processed(query, total), QUERY_TIMEOUT, f"the query to read all {total} records")
        finally:
            query.stop()
        counts = read_back(spark, str(tmp_path / "out"), workloads, f"{request.node.name} seed={seed}")
        assert counts == {name: 0 for name in counts}
        wait_for_no_orphans(cluster, topic)
    finally:
        for workload in workloads:
            workload.abandon()
        cluster.close()


@pytest.mark.chaos  # a minute and a half of a Spark driver: `make chaos`
def test_the_exactly_once_sink_writes_across_moves_of_its_output_and_transaction_state(
        tmp_path, zookeeper, request):
    cluster = three_of_four(tmp_path, zookeeper, SINK_PROPERTIES)
    try:
        driver, output, expected, checkpoint = create_case(cluster, tmp_path, "moved-sink", 1200)
        run = Running(driver, "available-now", 40)
        assert wait_for_batch(cluster, run, checkpoint, 0), driver.log()  # __transaction_state exists
        start_fourth(cluster)
        for leaving, joining in MOVES:
            move_replicas(cluster, (output, TRANSACTION_STATE), leaving, joining)
            batch = next_batch(checkpoint)  # not committed yet
            assert wait_for_batch(cluster, run, checkpoint, batch), \
                f"the driver ended before a micro-batch committed after the move:\n{driver.log()}"
        assert run.join(driver.timeout + 30) == 0, driver.log()
        counts = count_anomalies(cluster, request.node.name, output, expected)
        assert counts == {name: 0 for name in counts}
        for topic in (output, TRANSACTION_STATE):
            wait_for_no_orphans(cluster, topic)
    finally:
        cluster.close()
