"""The broker's Prometheus endpoint (broker.metrics), scraped over HTTP from real broker
processes while real clients (confluent-kafka) produce, consume and commit: the counters
move by what the clients did, the gauges read the broker's state (logs on disk, lag,
purgatory, connections), the Grafana dashboard asks only for names the broker exports,
and a cluster reports one active controller and a leader's ISR shrinking when a
follower dies."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(120)

DASHBOARD = Path(__file__).resolve().parent.parent / "examples" / "grafana" / "sluice-broker.json"
BROKER_PROPERTIES = {"metrics.port": "0", "group.initial.rebalance.delay.ms": "0",
                     "offsets.topic.num.partitions": "2"}


def metrics_port(process: BrokerProcess) -> int:
    """The port the broker's last start logged for its metrics endpoint."""
    assert process.metrics_port is not None, "no metrics endpoint logged:\n" + "".join(process.output[-20:])
    return process.metrics_port


def get(port: int, path: str = "/metrics", method: str = "GET") -> tuple[int, str, str]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path)
        response = connection.getresponse()
        return response.status, response.getheader("content-type", ""), response.read().decode()
    finally:
        connection.close()


def scrape(port: int) -> dict[str, dict[frozenset, float]]:
    """Sample name -> {frozenset of label items: value}, parsed by prometheus_client."""
    status, _, text = get(port)
    assert status == 200, text
    samples: dict[str, dict[frozenset, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return samples


def requests_answered(process: BrokerProcess, request: str) -> int:
    """How many requests of an API (Kafka's name) the broker has answered, all versions."""
    samples = scrape(metrics_port(process))
    return int(sum(count for labels, count in samples.get("kafka_network_requestmetrics_requests_total", {}).items()
                   if dict(labels)["request"] == request))


def value(samples, name: str, **labels) -> float | None:
    return samples.get(name, {}).get(frozenset(labels.items()))


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on: its socket descriptors matched with the kernel's
    LISTEN sockets (/proc/<pid>/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def start_broker(directory: Path, properties: dict[str, str]) -> BrokerProcess:
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    return BrokerProcess(directory / "data", config_file=str(config)).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("metrics"), BROKER_PROPERTIES)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def port(broker):
    return metrics_port(broker)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, value=b"v%05d" % i + b"x" * 90, partition=i % partitions)
    assert producer.flush(15) == 0


def consumer(bootstrap: str, group: str, **settings) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, **settings})


def consume(client: Consumer, count: int) -> list:
    received = []

    def more():
        message = client.poll(0.2)
        if message is not None and not message.error():
            received.append(message)
        return len(received) >= count

    wait_for(more, 30, f"{count} records", interval=0)
    return received


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def traffic(broker: BrokerProcess, produced: int = 30, committed: int = 12) -> tuple[str, str]:
    """A topic of 3 partitions with `produced` records, read by a group member that
    commits `committed` as partition 0's offset; (topic, group)."""
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, 3)
    produce(broker.bootstrap_servers, topic, produced, partitions=3)
    member = consumer(broker.bootstrap_servers, group)
    try:
        member.subscribe([topic])
        consume(member, produced)
        member.commit(offsets=[TopicPartition(topic, 0, committed)], asynchronous=False)
    finally:
        member.close()
    return topic, group


def test_topic_counters_follow_what_clients_produced_and_fetched(broker, port):
    before = scrape(port)
    topic, _ = traffic(broker, produced=30)
    after = scrape(port)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 30
    bytes_in = value(after, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic)
    bytes_out = value(after, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert bytes_in > 30 * 96 and bytes_out >= bytes_in  # every batch was fetched at least once
    for name in ("messagesin", "bytesin", "bytesout"):
        full = f"kafka_server_brokertopicmetrics_{name}_total"
        per_topic = sum(v for labels, v in after[full].items() if labels)
        assert value(after, full) == per_topic  # the broker-wide series is the sum over topics
    grown = value(after, "kafka_server_brokertopicmetrics_messagesin_total") - (
        value(before, "kafka_server_brokertopicmetrics_messagesin_total") or 0)
    assert grown == 30

    # the bytes in are the batches stored: the log size of the topic's partitions, which
    # is what their segment files hold on disk
    sizes = {p: value(after, "kafka_log_log_size", topic=topic, partition=str(p)) for p in range(3)}
    assert sum(sizes.values()) == bytes_in
    for p, size in sizes.items():
        directory = Path(broker.data_dir) / f"{topic}-{p}"
        assert size == sum(f.stat().st_size for f in directory.glob("*.log")) > 0
        assert value(after, "kafka_log_log_logendoffset", topic=topic, partition=str(p)) == 10
        assert value(after, "kafka_log_log_logstartoffset", topic=topic, partition=str(p)) == 0


def test_a_deleted_topic_loses_its_series_and_the_total_keeps_its_counts(broker, port):
    from confluent_kafka.admin import AdminClient

    topic = f"doomed-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, 1)
    produce(broker.bootstrap_servers, topic, 7)
    before = scrape(port)
    assert value(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 7
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.delete_topics([topic])[topic].result(15)
    after = scrape(port)
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) is None
    assert value(after, "kafka_log_log_size", topic=topic, partition="0") is None
    assert value(after, "kafka_server_brokertopicmetrics_messagesin_total") == \
        value(before, "kafka_server_brokertopicmetrics_messagesin_total")


def test_request_counts_and_latency_histograms_per_api(broker, port):
    traffic(broker, produced=5)
    samples = scrape(port)
    for request in ("Produce", "Fetch", "Metadata"):
        count = sum(v for labels, v in samples["kafka_network_requestmetrics_requests_total"].items()
                    if dict(labels)["request"] == request)
        assert count > 0, request
        assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request=request) == count
        assert value(samples, "kafka_network_requestmetrics_totaltimems_sum", request=request) > 0
        buckets = sorted(((float(dict(labels)["le"]), v) for labels, v in
                          samples["kafka_network_requestmetrics_totaltimems_bucket"].items()
                          if dict(labels)["request"] == request))
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)  # cumulative
        assert buckets[-1] == (float("inf"), count)


def test_purgatory_holds_a_long_poll_fetch_while_it_waits(broker, port):
    topic = f"empty-{uuid.uuid4().hex[:8]}"
    create_topic(broker.bootstrap_servers, topic, 1)
    assert value(scrape(port), "kafka_server_delayedoperationpurgatory_purgatorysize",
                 delayedOperation="Fetch") == 0
    waiting = consumer(broker.bootstrap_servers, "purgatory", **{"fetch.wait.max.ms": 20000})
    try:
        waiting.assign([TopicPartition(topic, 0, 0)])
        wait_for(lambda: waiting.poll(0.1) is None and value(
            scrape(port), "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") >= 1,
            20, "a long-poll Fetch in the purgatory")
    finally:
        waiting.close()
    wait_for(lambda: value(scrape(port), "kafka_server_delayedoperationpurgatory_purgatorysize",
                           delayedOperation="Fetch") == 0, 20, "the purgatory to empty once the client left")
    assert value(scrape(port), "kafka_server_delayedoperationpurgatory_purgatorysize",
                 delayedOperation="Produce") == 0  # the single node's acks=all never waits


def test_consumer_lag_is_the_high_watermark_less_the_committed_offset(broker, port):
    topic, group = traffic(broker, produced=30, committed=4)
    samples = scrape(port)
    labels = {"consumergroup": group, "topic": topic, "partition": "0"}
    assert value(samples, "kafka_consumergroup_current_offset", **labels) == 4
    assert value(samples, "kafka_consumergroup_lag", **labels) == 10 - 4
    assert value(samples, "kafka_consumergroup_members", consumergroup=group) == 0  # it left

    produce(broker.bootstrap_servers, topic, 3, partitions=1)  # all three to partition 0
    assert value(scrape(port), "kafka_consumergroup_lag", **labels) == 13 - 4


def test_consumer_protocol_groups_are_reported_too(broker, port):
    """A KIP-848 consumer group (group.protocol=consumer) has its members and lag reported."""
    topic, group = "metrics-kip848", "metrics-kip848-group"
    produce(broker.bootstrap_servers, topic, 5)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group,
                         "group.protocol": "consumer", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        def assigned():
            consumer.poll(0.2)
            return bool(consumer.assignment())
        wait_for(assigned, 30, "the consumer's assignment")
        consumer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
        samples = scrape(port)
        assert value(samples, "kafka_consumergroup_members", consumergroup=group) == 1
        assert value(samples, "kafka_consumergroup_lag", consumergroup=group, topic=topic, partition="0") == 5 - 2
    finally:
        consumer.close()


def test_connection_count_follows_clients(broker, port):
    def count():
        return value(scrape(port), "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT")

    start = count()
    clients = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(3)]
    try:
        wait_for(lambda: count() == start + 3, 10, "3 more connections")
    finally:
        for client in clients:
            client.close()
    wait_for(lambda: count() == start, 10, "the connections to close")


def test_only_metrics_is_served_on_the_broker_host(broker, port):
    assert listening_ports(broker.proc.pid) == {broker.port, port}
    status, content_type, text = get(port)
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    assert "kafka_controller_kafkacontroller_activecontrollercount 1.0" in text  # its own controller
    assert get(port, "/")[0] == 404
    assert get(port, "/metrics/extra")[0] == 404
    assert get(port, "/metrics", method="POST")[0] == 405


def test_the_dashboard_uses_only_exported_names(broker, port):
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 30 and dashboard["title"]
    assert any(v["type"] == "datasource" and v["query"] == "prometheus"
               for v in dashboard["templating"]["list"])
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", ())]
    expressions += [v["query"] if isinstance(v["query"], str) else v["query"]["query"]
                    for v in dashboard["templating"]["list"] if v["type"] == "query"]
    used = {name for expr in expressions for name in re.findall(r"\b(?:kafka|process)_[a-z_]+\b", expr)}
    assert len(used) >= 15, used

    traffic(broker, produced=5)  # every family has samples: requests, topics, a group's lag
    exported = set(scrape(port))
    assert used <= exported, f"the dashboard asks for names the broker does not export: {used - exported}"


def test_formatting_by_pieces_gives_generate_latest_s_text():
    """Large families are formatted in pieces between turns of the event loop: the text is
    byte for byte prometheus_client's for the whole registry."""
    import asyncio

    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from broker.metrics import FORMAT_PIECE, BrokerMetrics

    class Large:
        def collect(self):
            gauge = GaugeMetricFamily("kafka_log_log_size", "Bytes", labels=["topic", "partition"])
            for index in range(2 * FORMAT_PIECE + 7):
                gauge.add_metric(["t", str(index)], index)
            counter = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin", "Records", labels=["topic"])
            for index in range(FORMAT_PIECE + 1):
                counter.add_metric([f"t{index}"], index)
            return [gauge, GaugeMetricFamily("kafka_empty", "No samples"), counter]

    metrics = BrokerMetrics(None)
    metrics.registry = CollectorRegistry(auto_describe=False)
    metrics.registry.register(Large())
    text = asyncio.run(metrics.exposition())
    assert text == generate_latest(metrics.registry)
    assert len(list(text_string_to_metric_families(text.decode()))) == 3


def test_the_metrics_port_is_checked_against_the_listeners():
    from broker.config import ConfigError, build_config

    config, _ = build_config({"metrics.port": "9404", "metrics.host": "127.0.0.2"}, {"data_dir": "d", "port": 9092})
    assert (config.metrics_port, config.metrics_host) == (9404, "127.0.0.2")
    assert build_config({}, {"data_dir": "d"})[0].metrics_port is None  # off by default
    with pytest.raises(ConfigError, match="metrics.port: 9092 is a listener's port"):
        build_config({"metrics.port": "9092"}, {"data_dir": "d", "port": 9092})
    with pytest.raises(ConfigError, match="metrics.port: 70000 is above the maximum 65535"):
        build_config({"metrics.port": "70000"}, {"data_dir": "d"})


def test_metrics_off_nothing_more_listens(tmp_path):
    with BrokerProcess(tmp_path / "data") as plain:
        assert listening_ports(plain.proc.pid) == {plain.port}
        assert plain.metrics_port is None


def test_a_taken_metrics_port_stops_the_start_with_a_clear_error(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        with pytest.raises(RuntimeError) as failed:
            start_broker(tmp_path, {"metrics.port": str(port)})
    finally:
        taken.close()
    assert f"sluice broker: metrics.port: cannot listen on 127.0.0.1:{port}: address already in use" \
        in str(failed.value)


def test_a_cluster_has_one_active_controller_and_counts_isr_changes_and_elections(tmp_path, zookeeper):
    """Replicas [leader, follower, controller]: the follower's SIGKILL shrinks the leader's
    ISR; the leader's SIGTERM (controlled shutdown) has the controller elect itself."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.cluster import FAST_FAILOVER, Cluster

    # the leader drops the dead follower (replica.lag.time.max.ms) well before the controller
    # would (zookeeper.session.timeout.ms): the shrink is the leader's
    properties = {**FAST_FAILOVER, "replica.lag.time.max.ms": "2000", "metrics.port": "0"}
    with Cluster(tmp_path, zookeeper, brokers=3, properties=properties) as cluster:
        ports = {b: metrics_port(cluster.processes[b]) for b in cluster.ids}
        controller = cluster.controller_id()
        samples = {b: scrape(p) for b, p in ports.items()}
        assert [value(samples[b], "kafka_controller_kafkacontroller_activecontrollercount")
                for b in cluster.ids] == [int(b == controller) for b in cluster.ids]

        leader, follower = (b for b in cluster.ids if b != controller)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("replicated", 1, replica_assignment=[[leader, follower, controller]])]
                            )["replicated"].result(30)
        cluster.wait_for_leaders("replicated", full_isr=True)
        assert cluster.leader_of("replicated") == leader
        produce(cluster.bootstrap_servers, "replicated", 20)
        wait_for(lambda: value(scrape(ports[leader]), "kafka_server_brokertopicmetrics_replicationbytesout_total")
                 >= value(scrape(ports[leader]), "kafka_server_brokertopicmetrics_bytesin_total", topic="replicated")
                 * 2, 20, "both followers to fetch the records")
        before = scrape(ports[leader])
        elections = value(scrape(ports[controller]), "kafka_controller_controllerstats_leaderelectionrateandtimems_count")
        assert value(before, "kafka_server_replicamanager_underreplicatedpartitions") == 0
        assert value(before, "kafka_server_replicamanager_leadercount") >= 1

        cluster.kill(follower)
        wait_for(lambda: value(scrape(ports[leader]), "kafka_server_replicamanager_underreplicatedpartitions") == 1,
                 30, "the leader to count its partition under-replicated")
        assert value(scrape(ports[leader]), "kafka_server_replicamanager_isrshrinks_total") > \
            value(before, "kafka_server_replicamanager_isrshrinks_total")

        assert cluster.stop(leader) == 0  # controlled shutdown: the controller moves the leadership
        after = scrape(ports[controller])
        assert value(after, "kafka_controller_controllerstats_leaderelectionrateandtimems_count") > elections
        assert value(after, "kafka_controller_controllerstats_leaderelectionrateandtimems_sum") > 0
        assert value(after, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
        assert value(after, "kafka_server_replicamanager_underreplicatedpartitions") >= 1  # ISR {controller}
