"""Fetching from the closest replica (KIP-392) on a real 3-broker cluster, one rack per
broker, with `replica.selector.class` set to Kafka's RackAwareReplicaSelector.

- A confluent-kafka consumer with `client.rack` naming a follower's rack is pointed at
  that follower by the leader (preferred_read_replica) and reads (almost) every byte from
  it: the brokers' consumer byte counters show where the bytes came from.
- Across a leader change during the read (the leader killed), the consumer reads every
  record once, in order: nothing lost, nothing duplicated.
- The config takes Kafka's selector only.
"""

from __future__ import annotations

import uuid

import confluent_kafka
import pytest

from broker.config import RACK_AWARE_SELECTOR, ConfigError, build_config
from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Cluster
from tests.test_cluster_reassignment import create_placed
from tests.test_metrics import metrics_port, scrape, value

pytestmark = pytest.mark.timeout(240)

RACKS = {0: "rack-a", 1: "rack-b", 2: "rack-c"}
VALUE = b"x" * 1000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    cluster = Cluster(tmp_path_factory.mktemp("kip392"), zookeeper, brokers=3,
                      properties={**FAST_FAILOVER, "replica.selector.class": RACK_AWARE_SELECTOR,
                                  "metrics.port": "0", "auto.leader.rebalance.enable": "false"})
    for broker_id, process in cluster.processes.items():
        with open(process.config_file, "a") as config:
            config.write(f"broker.rack={RACKS[broker_id]}\n")
    with cluster:
        yield cluster


def consumer_bytes(cluster: Cluster, topic: str) -> dict[int, float]:
    """Record bytes each live broker has sent consumers from `topic`."""
    return {b: value(scrape(metrics_port(cluster.processes[b])), "kafka_server_brokertopicmetrics_bytesout_total",
                     topic=topic) or 0.0 for b in cluster.live}


def produce(cluster: Cluster, topic: str, first: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all",
                                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, key=str(i).encode(), value=VALUE, partition=0)
    assert producer.flush(60) == 0


def rack_consumer(cluster: Cluster, topic: str, rack: str) -> confluent_kafka.Consumer:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "group.id": f"kip392-{uuid.uuid4().hex[:6]}", "client.rack": rack,
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                         "topic.metadata.refresh.interval.ms": 1000, "log_level": 3})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    return consumer


def read(consumer: confluent_kafka.Consumer, keys: list[int], until: int, timeout: float) -> None:
    """Poll until `until` records have been read, appending their keys."""
    def enough() -> bool:
        keys.extend(int(m.key()) for m in consumer.consume(1000, 0.5) if m.error() is None)
        return len(keys) >= until

    wait_for(enough, timeout, f"{until} records to be read")


def test_a_consumer_reads_from_the_follower_in_its_rack(cluster):
    topic, count = "closest-replica", 3000
    create_placed(cluster, topic, [[0, 1, 2]])
    produce(cluster, topic, 0, count)
    before = consumer_bytes(cluster, topic)
    consumer = rack_consumer(cluster, topic, RACKS[1])
    keys: list[int] = []
    try:
        read(consumer, keys, count, 60)
    finally:
        consumer.close()
    assert keys == list(range(count))
    after = consumer_bytes(cluster, topic)
    sent = {b: after[b] - before[b] for b in after}
    print(f"consumer bytes by broker: {sent}")
    assert sent[1] >= 0.9 * sum(sent.values()) and sent[2] == 0, sent


def test_a_read_from_a_follower_across_a_leader_change_loses_and_duplicates_nothing(cluster):
    topic, half = "closest-replica-failover", 1500
    create_placed(cluster, topic, [[0, 1, 2]], {"min.insync.replicas": "2"})
    produce(cluster, topic, 0, half)
    consumer = rack_consumer(cluster, topic, RACKS[2])
    keys: list[int] = []
    try:
        read(consumer, keys, half // 2, 60)
        cluster.kill(0)
        try:
            cluster.wait(lambda: cluster.partitions(topic)[0].leader_id in (1, 2), 60,
                         "a new leader of the partition")
            produce(cluster, topic, half, half)
            read(consumer, keys, 2 * half, 90)
        finally:
            cluster.restart(0)
    finally:
        consumer.close()
    assert keys == list(range(2 * half)), (len(keys), len(set(keys)))


def test_only_kafkas_rack_aware_selector_is_taken(tmp_path):
    build_config({"replica.selector.class": RACK_AWARE_SELECTOR}, {"data_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="replica.selector.class: 'com.example.Mine' is not available"):
        build_config({"replica.selector.class": "com.example.Mine"}, {"data_dir": str(tmp_path)})
