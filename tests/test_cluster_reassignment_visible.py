"""What clients see of a partition that moved or is moving between brokers, in real
3-broker clusters (tests/cluster.py):

- A reassignment in progress: broker 2 of its cluster authenticates to the others'
  inter-broker listener (SASL PLAIN) with a wrong password, so the replica it is to
  add cannot fetch and the reassignment of [0, 1] to [0, 2] waits. `sluice topics
  describe` (table and JSON) and the web console (JSON, and the page in a real
  chromium) show the adding and removing replicas and the bytes left (the leader's log
  size: nothing copied yet), with the replication factor counted as kafka-topics.sh
  counts it; the leader's kafka_server_replicamanager_reassigningpartitions is 1. Once
  broker 2 restarts with the right password the move completes: the columns go, and the
  leader's reassignmentbytesout_total and broker 2's reassignmentbytesin_total have
  counted at least the log's bytes, the other follower's none.
- KIP-951: after a reassignment moved a partition's leadership, Produce v10+ sent to the
  old leader (which no longer has a replica) and Fetch v16+ sent to a follower, or with
  the old leader epoch to the new leader, name the current leader, its epoch and its
  endpoint; older versions carry none of it. librdkafka's producer takes the new leader
  from such an answer (its debug log says so) and delivers what it produced after the
  move.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import confluent_kafka
import pytest

from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Cluster
from tests.test_broker_failures import records_of
from tests.test_cluster_admin import sluice
from tests.test_cluster_reassignment import (cluster, create_placed, shared_cluster,  # noqa: F401 (fixtures)
                                             wait_until_reassigned)
from tests.test_console import WAIT, Console, _by, browser  # noqa: F401 (a fixture)
from tests.test_metrics import metrics_port, scrape, value
from sluice_client import BrokerConnection, Client
from wire.error_codes import ErrorCode
from wire.messages import FETCH, PRODUCE
from wire.records import build_batch

pytestmark = pytest.mark.timeout(180)


async def _ask(address: str, api, version: int, body):
    host, port = address.rsplit(":", 1)
    connection = BrokerConnection(host, int(port), client_id="kip-951-test", request_timeout=30)
    try:
        return await connection.request(api, version, body)
    finally:
        await connection.close()


def ask(address: str, api, version: int, body):
    """One request at `version` to the broker at `address`, its response."""
    return asyncio.run(_ask(address, api, version, body))


def produce_request(topic: str, value: bytes):
    return PRODUCE.request(acks=-1, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=build_batch(records_of(1, value.decode())))])])


def fetch_request(topic_id, leader_epoch: int = -1):
    return FETCH.request(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                         session_epoch=-1, topics=[FETCH.request.FetchTopic(topic_id=topic_id, partitions=[
                             FETCH.request.FetchPartition(partition=0, current_leader_epoch=leader_epoch,
                                                          fetch_offset=0, partition_max_bytes=1 << 20)])])


def test_produce_and_fetch_away_from_the_leader_name_the_new_one(cluster):
    topic = "leader-named"
    create_placed(cluster, topic, [[0, 1]])
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        client.producer.produce(topic, 0, [(None, b"before")])
        old_epoch = cluster.partitions(topic)[0].leader_epoch
        assert client.admin.alter_partition_reassignments({(topic, 0): [1, 2]}) == {(topic, 0): None}
    wait_until_reassigned(cluster, topic, 0, (1, 2))
    cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30, f"broker 0 to delete its {topic}-0")
    moved = cluster.partitions(topic)[0]
    assert moved.leader_id == 1 and moved.leader_epoch > old_epoch
    topic_id = cluster.metadata(topics=[topic]).topics[topic].topic_id

    def named(response, partition) -> tuple:
        return ((partition.current_leader.leader_id, partition.current_leader.leader_epoch),
                [(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints])

    expected = ((1, moved.leader_epoch), [(1, "127.0.0.1", cluster.processes[1].port, None)])
    nothing = ((-1, -1), [])
    for version in (10, 11):  # broker 0 no longer has a replica
        response = ask(cluster.address(0), PRODUCE, version, produce_request(topic, b"away"))
        (answer,) = response.responses[0].partition_responses
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert named(response, answer) == expected, version
    for version in (16, 17):  # a follower would serve a consumer's fetch (KIP-392)
        response = ask(cluster.address(0), FETCH, version, fetch_request(topic_id))
        (answer,) = response.responses[0].partitions
        assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert named(response, answer) == expected, version
    response = ask(cluster.address(1), FETCH, 17, fetch_request(topic_id, old_epoch))  # the leader
    (answer,) = response.responses[0].partitions
    assert answer.error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert named(response, answer) == expected

    response = ask(cluster.address(0), PRODUCE, 9, produce_request(topic, b"older"))
    (answer,) = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and named(response, answer) == nothing
    response = ask(cluster.address(0), FETCH, 15, fetch_request(topic_id))
    (answer,) = response.responses[0].partitions
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER and named(response, answer) == nothing


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_librdkafka_takes_the_new_leader_from_a_produce_answer(cluster):
    topic = "followed-by-librdkafka"
    create_placed(cluster, topic, [[0, 1]])
    lines = _Lines()
    logger = logging.getLogger("librdkafka-kip-951")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    delivered, failed = [], []

    def on_delivery(error, message) -> None:
        (failed if error is not None else delivered).append(error or message.value())

    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "enable.idempotence": True,
        "debug": "metadata", "logger": logger, "topic.metadata.refresh.interval.ms": 600_000})
    try:
        producer.produce(topic, b"before", partition=0, on_delivery=on_delivery)
        assert producer.flush(30) == 0 and delivered == [b"before"], failed
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            assert client.admin.alter_partition_reassignments({(topic, 0): [1, 2]}) == {(topic, 0): None}
        wait_until_reassigned(cluster, topic, 0, (1, 2))
        cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30, f"broker 0 to delete its {topic}-0")
        epoch = cluster.partitions(topic)[0].leader_epoch

        producer.produce(topic, b"after", partition=0, on_delivery=on_delivery)  # to broker 0 first
        deadline = time.monotonic() + 30
        while len(delivered) + len(failed) < 2 and time.monotonic() < deadline:
            producer.poll(0.1)
        assert delivered == [b"before", b"after"] and not failed, failed
    finally:
        producer.flush(10)
        logger.removeHandler(lines)
    updated = f"[0]: updated with leader 1 and epoch {epoch}"
    assert any(topic in line and updated in line for line in lines.lines), \
        "\n".join(line for line in lines.lines if "METADATAUPDATE" in line or topic in line)


# -- a reassignment in progress -------------------------------------------------------------

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="{password}" user_broker="broker-secret";')
# Clients on CLIENT (first: the harness talks to it), the brokers to each other on REPLICATION.
LISTENERS = {
    "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_PLAINTEXT",
    "inter.broker.listener.name": "REPLICATION",
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.replication.plain.sasl.jaas.config": JAAS.format(password="broker-secret"),
    "metrics.port": "0",
}
TOPIC = "moving-slowly"
VALUE_BYTES = 1000


def _set_password(cluster: Cluster, broker_id: int, password: str) -> None:
    """The password `broker_id` authenticates to the others with (the last key wins)."""
    config = Path(cluster.processes[broker_id].config_file)
    config.write_text(config.read_text() + "listener.name.replication.plain.sasl.jaas.config="
                      + JAAS.format(password=password) + "\n")


def _log_bytes(cluster: Cluster, broker_id: int, topic: str) -> int:
    """The size of a broker's replica of topic-0: its segments' .log files."""
    return sum(f.stat().st_size for f in (Path(cluster.processes[broker_id].data_dir) / f"{topic}-0").glob("*.log"))


@pytest.fixture(scope="module")
def stuck(tmp_path_factory, zookeeper):
    """A cluster whose broker 2 cannot fetch, with TOPIC being moved from [0, 1] to [0, 2]:
    (cluster, the leader's log size)."""
    cluster = Cluster(tmp_path_factory.mktemp("stuck"), zookeeper, brokers=3,
                      properties={**FAST_FAILOVER, **LISTENERS, "auto.leader.rebalance.enable": "false"})
    try:
        _set_password(cluster, 2, "wrong")
        cluster.processes[0].start()  # alone: the controller, which must reach broker 2
        cluster.wait(lambda: getattr(cluster._try_metadata(0, []), "controller_id", None) == 0, 30,
                     "broker 0 to become the controller")
        for broker_id in (1, 2):
            cluster.processes[broker_id].start()
        cluster.wait_for_brokers()
        create_placed(cluster, TOPIC, [[0, 1]])
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            for batch in range(4):
                client.producer.produce(TOPIC, 0, [(None, bytes(VALUE_BYTES)) for _ in range(25)])
            assert client.admin.alter_partition_reassignments({(TOPIC, 0): [0, 2]}) == {(TOPIC, 0): None}
            cluster.wait(lambda: (TOPIC, 0) in client.admin.list_partition_reassignments() and
                         cluster.partition_dirs(2, TOPIC) == [f"{TOPIC}-0"], 30,
                         f"broker 2 to create its replica of {TOPIC}-0")
        yield cluster, _log_bytes(cluster, 0, TOPIC)
    finally:
        cluster.close()


def describe(cluster: Cluster, *options: str) -> str:
    described = sluice("topics", "--bootstrap-server", cluster.bootstrap_servers, "describe", TOPIC, *options)
    assert described.returncode == 0, described
    return described.stdout


def test_describe_shows_the_replicas_being_added_and_removed_and_the_bytes_left(stuck):
    cluster, size = stuck
    assert size >= 100 * VALUE_BYTES
    text = describe(cluster)
    assert "PartitionCount: 1  ReplicationFactor: 2" in text  # of the target, as kafka-topics.sh counts
    header, row = (line.split() for line in text.splitlines()[1:])
    assert header == ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "HIGH-WATERMARK",
                      "ADDING-REPLICAS", "REMOVING-REPLICAS", "BYTES-LEFT"]
    shown = dict(zip(header, row))
    assert [shown[c] for c in ("LEADER", "REPLICAS", "ADDING-REPLICAS", "REMOVING-REPLICAS", "BYTES-LEFT")] \
        == ["0", "0,2,1", "2", "1", str(size)], text
    (topic,) = json.loads(describe(cluster, "--output", "json"))["topics"]
    (partition,) = topic["partitions"]
    assert topic["replication_factor"] == 2
    assert (partition["adding_replicas"], partition["removing_replicas"], partition["bytes_left"]) == (
        [2], [1], size)


def test_the_console_shows_the_reassignment(stuck, browser):
    By = _by()
    cluster, size = stuck
    running = Console(cluster.bootstrap_servers)
    try:
        (partition,) = running.json(f"/api/topics/{TOPIC}")["partitions"]
        assert (partition["adding_replicas"], partition["removing_replicas"], partition["bytes_left"]) == (
            [2], [1], size)
        browser.get(running.url + f"topics/{TOPIC}")
        headers = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#partitions th")]
        assert headers[6:9] == ["Adding replicas", "Removing replicas", "Bytes left"], headers
        (row,) = browser.find_elements(By.CSS_SELECTOR, "#partitions tr[data-partition]")
        assert [c.text for c in row.find_elements(By.TAG_NAME, "td")][6:9] == ["2", "1", str(size)]
    finally:
        running.close()


def test_metrics_count_the_reassigning_partition_then_its_bytes(stuck):
    cluster, size = stuck
    ports = {b: metrics_port(cluster.processes[b]) for b in (0, 1)}
    reassigning = "kafka_server_replicamanager_reassigningpartitions"
    assert value(scrape(ports[0]), reassigning) == 1  # the leader's
    assert value(scrape(ports[1]), reassigning) == 0
    assert value(scrape(ports[0]), "kafka_server_brokertopicmetrics_reassignmentbytesout_total") == 0

    _set_password(cluster, 2, "broker-secret")
    cluster.restart(2)
    wait_until_reassigned(cluster, TOPIC, 0, (0, 2))
    ports[2] = metrics_port(cluster.processes[2])
    wait_for(lambda: value(scrape(ports[0]), reassigning) == 0, WAIT, "the leader to see the move done")
    assert value(scrape(ports[0]), "kafka_server_brokertopicmetrics_reassignmentbytesout_total") >= size
    assert value(scrape(ports[2]), "kafka_server_brokertopicmetrics_reassignmentbytesin_total") >= size
    assert value(scrape(ports[1]), "kafka_server_brokertopicmetrics_reassignmentbytesin_total") == 0
    text = describe(cluster)
    assert "ReplicationFactor: 2" in text and "ADDING-REPLICAS" not in text, text
