"""Administration of a real 3-broker cluster (tests/cluster.py) through any broker, and
leader elections on demand.

- `sluice leader-election` (sluice/leader_election.py, ElectLeaders to the controller):
  after a SIGKILL of partition 0's preferred leader, a failover and its return to the
  ISR, a preferred election gives it back its leadership; a second run finds nothing to
  do; unclean elections, unknown partitions and bad JSON files get Kafka's lines or a
  readable error. Then Kafka's own kafka-leader-election (LeaderElectionCommand).
- Kafka 4.4's kafka-topics --describe pages through DescribeTopicPartitions of the
  cluster's metadata: leaders, replicas and ISRs as Metadata has them.
- CreateTopics, CreatePartitions and DeleteTopics sent to a broker that is not the
  controller (a raw request on one connection: the clients would route them to the
  controller), and confluent-kafka's AdminClient bootstrapped from one such broker.
- unclean.leader.election.enable as a topic config: with it an out-of-sync replica is
  elected when no ISR member is live, without it the partition stays offline, and setting
  it then (`sluice configs`) elects at once.
- AlterConfigs and IncrementalAlterConfigs through one broker, DescribeConfigs through
  another, and the live logs of every replica applying the change: a record over the new
  max.message.bytes is MESSAGE_TOO_LARGE on the leader and, once leadership has moved, on
  the new leader; the broker that was down during the change reads it at start.
- Dynamic broker configs are kept in ZooKeeper as Kafka keeps them: a cluster default set
  through one broker is /config/brokers/<default> and every broker applies it to its
  logs; a broker's own is /config/brokers/<id>; a broker restarted reads both.
- A deleted topic leaves every broker's Metadata and data dir; a broker down during the
  deletion removes its leftovers when it starts again. A replica moved away while its
  broker was down is deleted at its start, and a crash in the middle of that (a fail
  point) keeps the broker's other replicas of the topic.
- Auto-creation through Metadata: LEADER_NOT_AVAILABLE first, then the topic with leaders.
- `sluice topics describe` with kafka-topics.sh's filters (under-replicated, under and at
  min ISR, unavailable) while a broker is stopped.

One cluster for the module (auto.leader.rebalance.enable=false, so that only the tests
move leaders); each test starts with every broker running.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import confluent_kafka
import confluent_kafka.admin
import pytest

from broker.zookeeper.layout import EntityConfig, TopicAssignment
from sluice import maven
from tests.cluster import FAST_FAILOVER, Cluster
from tests.test_broker_clients import INVALID_NAME, producing_to_an_invalid_name_fails_with_its_error
from tests.support.polling import wait_for
from sluice_client import (BROKER_RESOURCE, DELETE_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
                         TOPIC_RESOURCE, SET_CONFIG, BrokerConnection, Client, PREFERRED_ELECTION,
                         UNCLEAN_ELECTION)
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS, METADATA

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parent.parent
LEADER_ELECTION = "org.apache.kafka.tools.LeaderElectionCommand"


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory, zookeeper):
    with Cluster(tmp_path_factory.mktemp("admin"), zookeeper, brokers=3,
                 properties={**FAST_FAILOVER, "auto.leader.rebalance.enable": "false"}) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with every broker running (a failed test may have left one down)."""
    for broker_id in shared_cluster.ids:
        if shared_cluster.processes[broker_id].proc is None:
            shared_cluster.restart(broker_id)
    shared_cluster.wait_for_brokers()
    return shared_cluster


def sluice(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def request(cluster: Cluster, broker_id: int, api, body, timeout: float = 30.0):
    """One request to one broker, at the newest version both sides speak."""
    async def send():
        connection = BrokerConnection("127.0.0.1", cluster.processes[broker_id].port,
                                      client_id="admin-test", request_timeout=timeout)
        try:
            await connection.open()
            return await connection.request(api, connection.version(api), body, timeout=timeout)
        finally:
            await connection.close()

    return asyncio.run(send())


def not_controller(cluster: Cluster, count: int = 1) -> list[int]:
    controller = cluster.controller_id()
    return [b for b in cluster.ids if b != controller][:count]


# -- leader elections on demand -------------------------------------------------------------

def test_preferred_election_from_the_cli_gives_leadership_back(cluster):
    topic = "elect-back"
    cluster.create_topic(topic, 3, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    preferred = cluster.partitions(topic)[0].replicas[0]
    assert cluster.leader_of(topic) == preferred

    cluster.kill(preferred)
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic)
    assert cluster.leader_of(topic) != preferred
    cluster.restart(preferred)
    cluster.wait_for_brokers()
    for every in cluster.metadata().topics:  # every preferred leader can lead again
        cluster.wait_for_leaders(every, full_isr=True)
    assert cluster.leader_of(topic) != preferred  # no automatic rebalance in this cluster

    # Through a broker that is not the controller: the client finds the controller.
    elected = sluice("leader-election", "--bootstrap-server", cluster.address(not_controller(cluster)[0]),
                     "--election-type", "preferred", "--all-topic-partitions")
    assert elected.returncode == 0, elected
    assert "Successfully completed leader election (PREFERRED) for partitions" in elected.stdout
    moved = elected.stdout.split("Successfully completed leader election (PREFERRED) for partitions ")[1]
    assert f"{topic}-0" in moved.splitlines()[0].split(", "), elected.stdout
    cluster.wait_for_leaders(topic)
    for broker_id in cluster.ids:
        assert cluster.leader_of(topic, via=broker_id) == preferred, broker_id

    again = sluice("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                   "--election-type", "preferred", "--all-topic-partitions")
    assert again.returncode == 0, again
    assert "Successfully completed" not in again.stdout, again.stdout
    assert again.stdout.startswith("Valid replica already elected for partitions ")
    assert f"{topic}-0" in again.stdout.strip().split("partitions ", 1)[1].split(", ")


def test_leader_election_answers_for_each_partition_named(cluster, tmp_path):
    topic = "elect-named"
    cluster.create_topic(topic, 2, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    servers = cluster.bootstrap_servers

    unclean = sluice("leader-election", "--bootstrap-server", servers, "--election-type", "unclean",
                     "--topic", topic, "--partition", "1")
    assert (unclean.returncode, unclean.stdout) == (
        0, f"Valid replica already elected for partitions {topic}-1\n"), unclean

    partitions = tmp_path / "partitions.json"
    partitions.write_text(json.dumps({"partitions": [{"topic": topic, "partition": 0},
                                                     {"topic": topic, "partition": 7},
                                                     {"topic": "no-such-topic", "partition": 0}]}))
    mixed = sluice("leader-election", "--bootstrap-server", servers, "--election-type", "preferred",
                   "--path-to-json-file", str(partitions), "--output", "table")
    assert mixed.returncode == 1, mixed
    lines = mixed.stdout.splitlines()
    assert lines[0] == f"Valid replica already elected for partitions {topic}-0", mixed.stdout
    assert sorted(line.split(": ")[1] for line in lines[1:]) == [f"{topic}-7", "no-such-topic-0"]
    assert all(line.startswith("Error completing leader election (PREFERRED) for partition: ")
               and "UNKNOWN_TOPIC_OR_PARTITION" in line for line in lines[1:]), mixed.stdout
    assert "2 replica(s) could not be elected" in mixed.stderr and "Traceback" not in mixed.stderr

    as_json = sluice("leader-election", "--bootstrap-server", servers, "--election-type", "preferred",
                     "--topic", topic, "--partition", "0", "--output", "json")
    assert as_json.returncode == 0, as_json
    assert json.loads(as_json.stdout) == {"election_type": "preferred", "elected": [],
                                          "not_needed": [{"topic": topic, "partition": 0}],
                                          "failed": []}

    partitions.write_text('{"partitions": [{"topic": "t", "partition": 0}, '
                          '{"topic": "t", "partition": 0}]}')
    for content, complaint in [('{"partitions": [{"topic": "t", "partition": 0}, '
                                '{"topic": "t", "partition": 0}]}', "named more than once: t-0"),
                               ("{not json", "is not JSON"),
                               ('{"partitions": [{"topic": "t"}]}', 'is not {"topic": NAME'),
                               ('{"partitions": []}', "names no partition")]:
        partitions.write_text(content)
        refused = sluice("leader-election", "--bootstrap-server", servers, "--election-type",
                         "preferred", "--path-to-json-file", str(partitions))
        assert refused.returncode == 1 and complaint in refused.stderr, (content, refused)
        assert "Traceback" not in refused.stderr
    missing = sluice("leader-election", "--bootstrap-server", servers, "--election-type",
                     "preferred", "--path-to-json-file", str(tmp_path / "absent.json"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr, missing
    usage = sluice("leader-election", "--bootstrap-server", servers, "--election-type",
                   "preferred", "--topic", topic)
    assert usage.returncode == 2 and "--topic and --partition go together" in usage.stderr, usage


def test_unclean_election_from_the_cli_brings_an_offline_partition_back(cluster):
    """RF=2: the follower leaves (out of the ISR), then the leader, the last ISR member: the
    partition is offline. The follower comes back but is not in the ISR, and
    unclean.leader.election.enable is false: still offline, until an unclean election on
    demand makes it leader."""
    topic = "elect-unclean"
    cluster.create_topic(topic, 1, 2)
    cluster.wait_for_leaders(topic, full_isr=True)
    leader, follower = cluster.partitions(topic)[0].replicas
    _produce_value(cluster, topic, 100)
    assert cluster.stop(follower) == 0  # controlled shutdown takes it out of the ISR
    cluster.wait_for_brokers()
    cluster.wait_for_isr(topic, 0, [leader])
    assert cluster.stop(leader) == 0  # the last ISR member: nobody can take over
    cluster.wait_for_brokers()
    cluster.restart(follower)
    cluster.wait_for_brokers()
    offline = cluster.partitions(topic)[0]
    assert offline.leader_id < 0 and offline.isr == (leader,), offline

    preferred = sluice("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                       "--election-type", "preferred", "--topic", topic, "--partition", "0")
    assert preferred.returncode == 1 and "PREFERRED_LEADER_NOT_AVAILABLE" in preferred.stdout, preferred
    unclean = sluice("leader-election", "--bootstrap-server", cluster.bootstrap_servers,
                     "--election-type", "unclean", "--topic", topic, "--partition", "0")
    assert (unclean.returncode, unclean.stdout) == (
        0, f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0\n"), unclean
    cluster.wait_for_leaders(topic)
    assert cluster.partitions(topic)[0].leader_id == follower
    _produce_value(cluster, topic, 100)  # writable again
    cluster.restart(leader)
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic, full_isr=True)


def test_a_topic_allowing_unclean_election_elects_an_out_of_sync_replica(cluster):
    """Two topics on the same two replicas (neither the controller), one created with
    unclean.leader.election.enable=true by confluent-kafka's AdminClient. The follower
    leaves the ISR (controlled shutdown), then the leader, the last ISR member, stops; the
    follower comes back out of sync. The topic that allows it elects the follower, the
    other stays offline (one controller event decides both, one UpdateMetadata tells both)
    until `sluice configs` sets the key on it too: then it elects the follower at once,
    as Kafka's controller does on that change."""
    key, allowing, strict = "unclean.leader.election.enable", "unclean-allowed", "unclean-refused"
    controller = cluster.controller_id()
    leader, follower = [b for b in cluster.ids if b != controller]
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    created = admin.create_topics([
        confluent_kafka.admin.NewTopic(allowing, 1, replica_assignment=[[leader, follower]], config={key: "true"}),
        confluent_kafka.admin.NewTopic(strict, 1, replica_assignment=[[leader, follower]])],
        operation_timeout=30, request_timeout=30)
    for future in created.values():
        future.result(60)
    for topic in (allowing, strict):
        cluster.wait_for_leaders(topic, full_isr=True)
    assert cluster.stop(follower) == 0
    cluster.wait_for_brokers()
    for topic in (allowing, strict):
        cluster.wait_for_isr(topic, 0, [leader])
    assert cluster.stop(leader) == 0
    cluster.wait_for_brokers()
    cluster.restart(follower)
    cluster.wait_for_brokers()

    def partition(topic: str):
        return cluster.metadata(follower, [allowing, strict]).topics[topic].partitions[0]

    wait_for(lambda: partition(allowing).leader_id == follower, 30,
             f"{allowing}-0 to elect broker {follower}, out of its ISR")
    assert partition(allowing).isr == (follower,)
    offline = partition(strict)
    assert (offline.leader_id, offline.isr) == (-1, (leader,)), offline

    topic_entity = ("--bootstrap-server", cluster.bootstrap_servers, "--entity-type", "topics",
                    "--entity-name", strict)
    altered = sluice("configs", *topic_entity, "--alter", "--add-config", f"{key}=true")
    assert altered.returncode == 0, altered
    wait_for(lambda: partition(strict).leader_id == follower, 30,
             f"{strict}-0 to elect broker {follower} once its config allows it")
    described = sluice("configs", *topic_entity, "--describe")
    assert f"  {key}=true" in described.stdout.splitlines(), described
    cluster.restart(leader)
    cluster.wait_for_brokers()


def test_the_client_follows_the_controller_when_it_moves(cluster):
    """A client that cached the controller before it moved (SIGTERM: the controller resigns,
    another takes over, the old one comes back as a plain broker) gets NOT_CONTROLLER from
    it, looks the controller up again and retries."""
    topic = "elect-client"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    with Client(cluster.all_servers, call_timeout=60) as client:
        old = client.metadata([]).controller_id
        first = client.admin.elect_leaders(PREFERRED_ELECTION, [(topic, 0)])
        assert first[(topic, 0)].code == ErrorCode.ELECTION_NOT_NEEDED, first
        cluster.stop(old)
        cluster.wait_for_brokers()
        cluster.restart(old)
        cluster.wait_for_brokers()
        cluster.wait_for_leaders(topic, full_isr=True)
        assert cluster.controller_id() != old
        assert client.cached_metadata.controller_id == old
        results = client.admin.elect_leaders(PREFERRED_ELECTION, [(topic, 0), (topic, 5)])
        assert client.cached_metadata.controller_id == cluster.controller_id()
    assert set(results) == {(topic, 0), (topic, 5)}
    assert results[(topic, 0)] is None or results[(topic, 0)].code == ErrorCode.ELECTION_NOT_NEEDED
    assert results[(topic, 5)].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with Client(cluster.address(old), call_timeout=60) as client:
        unclean = client.admin.elect_leaders(UNCLEAN_ELECTION, [(topic, 0)])
    assert unclean[(topic, 0)].code == ErrorCode.ELECTION_NOT_NEEDED, unclean


@functools.lru_cache(maxsize=1)
def _kafka_tools() -> list[Path]:
    return maven.classpath(["org.apache.kafka:kafka-tools:" + maven.KAFKA_VERSION])


def test_kafkas_leader_election_tool(cluster):
    try:
        command = maven.java_command(_kafka_tools(), LEADER_ELECTION, "--bootstrap-server",
                                     cluster.bootstrap_servers, "--election-type", "PREFERRED",
                                     "--topic", "elect-kafka", "--partition", "0")
    except maven.MavenUnavailable as exc:
        unavailable = str(exc)
    else:
        unavailable = None
    if unavailable is not None:
        pytest.fail(unavailable, pytrace=False)
    topic = "elect-kafka"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    preferred = cluster.partitions(topic)[0].replicas[0]
    cluster.stop(preferred)  # controlled shutdown: leadership moves away at once
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic)
    cluster.restart(preferred)
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic, full_isr=True)
    assert cluster.leader_of(topic) != preferred

    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-0" \
        in done.stdout, done.stdout
    cluster.wait_for_leaders(topic)
    assert cluster.leader_of(topic) == preferred
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again
    assert f"Valid replica already elected for partitions {topic}-0" in again.stdout, again.stdout


# -- kafka-topics.sh's partition filters -----------------------------------------------------

def test_topics_describe_filters_the_partitions_a_stopped_broker_leaves_short(cluster):
    """A broker stopped (SIGTERM), its replicas in three topics (min.insync.replicas 2, 2
    and the default 1) out of the ISR: each filter of `sluice topics describe` lists the
    partitions Kafka's TopicCommand would, and several list those any of them would."""
    stopped = not_controller(cluster)[0]
    first, second = (b for b in cluster.ids if b != stopped)
    placed = {"short-3": ([[stopped, first, second]], {"min.insync.replicas": "2"}),
              "short-2": ([[stopped, first], [first, second]], {"min.insync.replicas": "2"}),
              "short-1": ([[stopped], [first]], {})}
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for future in admin.create_topics([
            confluent_kafka.admin.NewTopic(topic, len(replicas), replica_assignment=replicas, config=configs)
            for topic, (replicas, configs) in placed.items()]).values():
        future.result(30)
    for topic in placed:
        cluster.wait_for_leaders(topic, full_isr=True)

    def listed(*filters: str) -> set[tuple[str, int]]:
        done = sluice("topics", "--bootstrap-server", cluster.bootstrap_servers, "--output", "json",
                      "describe", *filters)
        assert done.returncode == 0, done
        return {(p["topic"], p["partition"]) for p in json.loads(done.stdout)["partitions"]
                if p["topic"] in placed}

    assert listed("--under-replicated-partitions", "--unavailable-partitions",
                  "--under-min-isr-partitions") == set()
    assert listed("--at-min-isr-partitions") == {("short-2", 0), ("short-2", 1), ("short-1", 0),
                                                 ("short-1", 1)}
    cluster.stop(stopped)
    cluster.wait_for_brokers()
    expected = {
        "--under-replicated-partitions": {("short-3", 0), ("short-2", 0)},
        "--under-min-isr-partitions": {("short-2", 0), ("short-1", 0)},  # short-1-0: no leader
        # short-1-0 too: its ISR keeps its last member, as Kafka keeps it, and Kafka's rule
        # compares the ISR's size alone.
        "--at-min-isr-partitions": {("short-3", 0), ("short-2", 1), ("short-1", 0), ("short-1", 1)},
        "--unavailable-partitions": {("short-1", 0)},
    }
    cluster.wait(lambda: listed("--under-replicated-partitions") == expected["--under-replicated-partitions"],
                 30, f"the ISRs to shrink without broker {stopped}")
    for option, partitions in expected.items():
        assert listed(option) == partitions, option
    assert listed("--unavailable-partitions", "--at-min-isr-partitions") == {
        ("short-1", 0), ("short-3", 0), ("short-2", 1), ("short-1", 1)}
    table = sluice("topics", "--bootstrap-server", cluster.bootstrap_servers, "describe", "short-1",
                   "--unavailable-partitions")
    assert table.stdout.split("\n")[0].split() == ["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"]
    assert table.stdout.split("\n")[1].split() == ["short-1", "0", "-", str(stopped), str(stopped)]


# -- topic administration through any broker ------------------------------------------------

def _topic_body(name: str, partitions: int, replication_factor: int, configs=None):
    Request = CREATE_TOPICS.request
    return Request(timeout_ms=30000, validate_only=False, topics=[Request.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=replication_factor,
        configs=[Request.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])


def test_create_topics_and_partitions_through_brokers_that_are_not_the_controller(cluster):
    plain, other = not_controller(cluster, 2)
    created = request(cluster, plain, CREATE_TOPICS, _topic_body("via-plain", 2, 3,
                                                                 {"retention.ms": "3600000"}))
    (answer,) = created.topics
    assert (answer.name, answer.error_code, answer.num_partitions, answer.replication_factor) == \
        ("via-plain", 0, 2, 3), answer
    cluster.wait_for_leaders("via-plain", full_isr=True)
    for broker_id in cluster.ids:
        info = cluster.partitions("via-plain", via=broker_id)
        assert sorted(info) == [0, 1] and all(len(p.replicas) == 3 for p in info.values())
        assert cluster.partition_dirs(broker_id, "via-plain") == ["via-plain-0", "via-plain-1"]
    again = request(cluster, other, CREATE_TOPICS, _topic_body("via-plain", 2, 3))
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    too_many = request(cluster, other, CREATE_TOPICS, _topic_body("too-many-replicas", 1, 4))
    assert too_many.topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR

    Partitions = CREATE_PARTITIONS.request
    grown = request(cluster, other, CREATE_PARTITIONS, Partitions(
        timeout_ms=30000, validate_only=False,
        topics=[Partitions.CreatePartitionsTopic(name="via-plain", count=4, assignments=None)]))
    assert grown.results[0].error_code == 0, grown
    cluster.wait_for_leaders("via-plain", full_isr=True)
    for broker_id in cluster.ids:
        assert sorted(cluster.partitions("via-plain", via=broker_id)) == [0, 1, 2, 3]
        assert len(cluster.partition_dirs(broker_id, "via-plain")) == 4
    shrink = request(cluster, plain, CREATE_PARTITIONS, Partitions(
        timeout_ms=30000, validate_only=False,
        topics=[Partitions.CreatePartitionsTopic(name="via-plain", count=2, assignments=None)]))
    assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS

    # confluent-kafka's AdminClient knowing only that one broker.
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.address(plain)})
    futures = admin.create_topics([confluent_kafka.admin.NewTopic("via-confluent", 3, 3)],
                                  operation_timeout=30, request_timeout=30)
    futures["via-confluent"].result(60)
    cluster.wait_for_leaders("via-confluent", full_isr=True)
    grown = admin.create_partitions([confluent_kafka.admin.NewPartitions("via-confluent", 5)],
                                    operation_timeout=30, request_timeout=30)
    grown["via-confluent"].result(60)
    cluster.wait_for_leaders("via-confluent", full_isr=True)
    listed = admin.list_topics("via-confluent", timeout=30).topics["via-confluent"]
    assert sorted(listed.partitions) == [0, 1, 2, 3, 4]


def test_topic_configs_are_checked_across_keys_in_the_cluster_as_on_one_node(cluster):
    """min.compaction.lag.ms above max.compaction.lag.ms is INVALID_CONFIG through any
    broker, on creation and on alteration, as the single node refuses it."""
    plain = not_controller(cluster)[0]
    conflict = {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"}
    message = "min.compaction.lag.ms (5000) > max.compaction.lag.ms (1000)"
    (refused,) = request(cluster, plain, CREATE_TOPICS, _topic_body("lags-conflict", 1, 3, conflict)).topics
    assert refused.error_code == ErrorCode.INVALID_CONFIG and message in refused.error_message, refused
    assert "lags-conflict" not in cluster.metadata(plain).topics
    cluster.create_topic("lags", 1, 3)
    resource = (TOPIC_RESOURCE, "lags")
    with Client(cluster.address(plain), call_timeout=60) as client:
        (error,) = client.admin.alter_configs({resource: conflict}).values()
        assert error is not None and error.code == ErrorCode.INVALID_CONFIG and message in str(error), error
        assert client.admin.alter_configs({resource: {"min.compaction.lag.ms": "5000"}}) == {resource: None}
        (error,) = client.admin.incremental_alter_configs(  # with the topic's min.compaction.lag.ms
            {resource: [("max.compaction.lag.ms", SET_CONFIG, "1000")]}).values()
        assert error is not None and error.code == ErrorCode.INVALID_CONFIG and message in str(error), error


def _produce_value(cluster: Cluster, topic: str, size: int, via: str | None = None) -> None:
    with Client(via or cluster.bootstrap_servers, call_timeout=60, retries=5) as client:
        client.producer.produce(topic, 0, [(None, b"x" * size)])


def test_configs_changed_through_one_broker_apply_on_every_replica(cluster):
    topic = "configured"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    first, second, third = cluster.ids
    resource = (TOPIC_RESOURCE, topic)
    _produce_value(cluster, topic, 5000)  # accepted under the default limit

    with Client(cluster.address(first), call_timeout=60) as client:
        assert client.admin.alter_configs({resource: {"max.message.bytes": "2000"}}) == {resource: None}

    def described(broker_id: int) -> dict[str, str]:
        with Client(cluster.address(broker_id), call_timeout=60) as client:
            return {k: e.value for k, e in client.admin.describe_configs([resource])[resource].items()}

    wait_for(lambda: all(described(b)["max.message.bytes"] == "2000" for b in cluster.ids), 15,
             "every broker to describe max.message.bytes=2000")

    leader = cluster.leader_of(topic)

    def refused_on_leader() -> bool:
        try:
            _produce_value(cluster, topic, 5000, cluster.address(leader))
        except KafkaError as exc:
            assert exc.code == ErrorCode.MESSAGE_TOO_LARGE, exc
            return True
        return False

    wait_for(refused_on_leader, 15, f"leader {leader} to refuse a 5000-byte record")
    _produce_value(cluster, topic, 500)  # under the new limit

    with Client(cluster.address(second), call_timeout=60) as client:
        assert client.admin.incremental_alter_configs(
            {resource: [("retention.ms", SET_CONFIG, "7200000")]}) == {resource: None}
    wait_for(lambda: all(described(b).get("retention.ms") == "7200000" for b in cluster.ids), 15,
             "every broker to describe retention.ms=7200000")
    assert described(third)["max.message.bytes"] == "2000"  # an incremental change keeps it

    # Leadership moves (controlled shutdown of the leader): the new leader refuses too.
    assert cluster.stop(leader) == 0
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic)
    new_leader = cluster.leader_of(topic)
    assert new_leader != leader
    with pytest.raises(KafkaError) as refused:
        _produce_value(cluster, topic, 5000, cluster.address(new_leader))
    assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE

    # Changed while the old leader was down: it reads the configs at start.
    with Client(cluster.address(new_leader), call_timeout=60) as client:
        assert client.admin.incremental_alter_configs(
            {resource: [("max.message.bytes", SET_CONFIG, "1000")]}) == {resource: None}
    cluster.restart(leader)
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic, full_isr=True)
    assert described(leader)["max.message.bytes"] == "1000"
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        elected = client.admin.elect_leaders(PREFERRED_ELECTION, [(topic, 0)])
    assert elected[(topic, 0)] is None, elected
    cluster.wait_for_leaders(topic)
    assert cluster.leader_of(topic) == leader
    with pytest.raises(KafkaError) as refused:
        _produce_value(cluster, topic, 1500, cluster.address(leader))
    assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE


def broker_config(zk, cluster: Cluster, entity: str) -> dict[str, str]:
    """/config/brokers/<entity> (a broker id or <default>) as ZooKeeper holds it."""
    path = f"{cluster.chroot}/config/brokers/{entity}"
    found = zk.exists(path)
    return dict(EntityConfig.from_json(path, zk.get(path)[0]).config) if found else {}


def test_dynamic_broker_configs_are_kept_in_zookeeper_and_read_by_every_broker(cluster, zk):
    topic = "broker-defaults"
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    first, second, _ = cluster.ids
    default, own = (BROKER_RESOURCE, ""), (BROKER_RESOURCE, str(second))

    def described(broker_id: int) -> dict[str, tuple[str, int]]:
        resource = (BROKER_RESOURCE, str(broker_id))
        with Client(cluster.address(broker_id), call_timeout=60) as client:
            entries = client.admin.describe_configs([resource])[resource]
        return {key: (entries[key].value, entries[key].source) for key in ("message.max.bytes", "log.retention.ms")}

    try:
        with Client(cluster.address(first), call_timeout=60) as client:
            assert client.admin.incremental_alter_configs({default: [("message.max.bytes", SET_CONFIG, "2000")],
                                                     own: [("log.retention.ms", SET_CONFIG, "7200000")]}) == {
                default: None, own: None}
        assert broker_config(zk, cluster, "<default>") == {"message.max.bytes": "2000"}
        assert broker_config(zk, cluster, str(second)) == {"log.retention.ms": "7200000"}
        wait_for(lambda: all(described(b)["message.max.bytes"] == ("2000", DYNAMIC_DEFAULT_BROKER_CONFIG)
                             for b in cluster.ids), 15, "every broker to apply the cluster default")
        with pytest.raises(KafkaError) as refused:  # the topic's leader, wherever it is
            _produce_value(cluster, topic, 5000)
        assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE

        cluster.restart(second)
        cluster.wait_for_brokers()
        assert described(second) == {"message.max.bytes": ("2000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                                     "log.retention.ms": ("7200000", DYNAMIC_BROKER_CONFIG)}
    finally:
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            assert client.admin.incremental_alter_configs({default: [("message.max.bytes", DELETE_CONFIG, None)],
                                                     own: [("log.retention.ms", DELETE_CONFIG, None)]}) == {
                default: None, own: None}
    assert broker_config(zk, cluster, "<default>") == broker_config(zk, cluster, str(second)) == {}
    wait_for(lambda: all(described(b)["message.max.bytes"][0] == "1048588" for b in cluster.ids), 15,
             "every broker to drop the cluster default")


def test_a_topic_deleted_through_a_non_controller_leaves_every_broker(cluster):
    topic = "deleted"
    cluster.create_topic(topic, 2, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    _produce_value(cluster, topic, 100)
    plain, down = not_controller(cluster, 2)
    assert all(cluster.partition_dirs(b, topic) for b in cluster.ids)

    assert cluster.stop(down) == 0
    cluster.wait_for_brokers()
    deleted = request(cluster, plain, DELETE_TOPICS, DELETE_TOPICS.request(
        timeout_ms=30000, topics=[DELETE_TOPICS.request.DeleteTopicState(name=topic)]))
    assert deleted.responses[0].error_code == 0, deleted

    def gone_everywhere() -> bool:
        return all(topic not in cluster.metadata(b).topics and not cluster.partition_dirs(b, topic)
                   for b in cluster.live)

    cluster.wait(gone_everywhere, 30, f"{topic} to leave every live broker's Metadata and data dir")
    assert cluster.partition_dirs(down, topic) == [f"{topic}-0", f"{topic}-1"]

    cluster.restart(down)
    cluster.wait_for_brokers()
    assert cluster.partition_dirs(down, topic) == []
    assert topic not in cluster.metadata(down).topics
    # The name is free again: a new topic of that name (a new topic id) on every broker.
    cluster.create_topic(topic, 1, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    for broker_id in cluster.ids:
        assert cluster.partition_dirs(broker_id, topic) == [f"{topic}-0"]


def test_a_crash_while_deleting_a_moved_replica_keeps_the_brokers_other_replicas(cluster, zk, monkeypatch):
    """A replica moved to another broker while its broker was down is deleted when that
    broker starts (Membership.remove_stray_replicas). A crash between renaming its
    directory and rewriting topics.json (fail point replica-deleted-before-registry) left
    a directory that the next start took for the whole topic's deletion, and the
    broker's other replicas of the topic went with it. The topic's replicas are all on
    one broker, so nothing could re-replicate what it lost."""
    topic = "moved"
    down, other = not_controller(cluster, 2)
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, 2, replica_assignment=[[down], [down]])])[
        topic].result(30)
    cluster.wait_for_leaders(topic)
    values = [f"kept-{i}".encode() for i in range(50)]
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        client.producer.produce(topic, 1, [(None, v) for v in values])
    assert cluster.stop(down) == 0

    path = f"{cluster.chroot}/brokers/topics/{topic}"
    data, stat = zk.get(path)
    assignment = TopicAssignment.from_json(path, data)
    zk.set(path, TopicAssignment(assignment.topic_id, {**assignment.partitions, 0: (other,)}).to_json(),
           version=stat.version)
    monkeypatch.setenv("SLUICE_FAILPOINTS", "replica-deleted-before-registry")
    with pytest.raises(RuntimeError, match="fail point replica-deleted-before-registry reached"):
        cluster.processes[down].start()
    monkeypatch.delenv("SLUICE_FAILPOINTS")
    assert cluster.partition_dirs(down, topic) == [
        f"{topic}-0.{assignment.topic_id.hex}.replica-delete", f"{topic}-1"]

    cluster.restart(down)
    cluster.wait_for_brokers()
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        fetched = client.consumer.fetch_records(topic, 1, 0, max_wait_ms=0)
        assert [r.value for r in fetched.records] == values
        assert cluster.partition_dirs(down, topic) == [f"{topic}-1"]
        assert client.admin.delete_topics([topic]) == {topic: None}


def test_metadata_auto_creates_a_topic_in_the_cluster(cluster):
    topic = "auto-created"
    via = not_controller(cluster)[0]
    Request = METADATA.request
    body = Request(topics=[Request.MetadataRequestTopic(name=topic)],
                   allow_auto_topic_creation=True)
    first = request(cluster, via, METADATA, body)
    (answer,) = first.topics
    assert answer.error_code == ErrorCode.LEADER_NOT_AVAILABLE, answer

    def led():
        (answer,) = request(cluster, via, METADATA, body).topics
        if answer.error_code or not answer.partitions:
            return None
        if any(p.error_code or p.leader_id < 0 for p in answer.partitions):
            return None
        return answer

    answer = wait_for(led, 30, f"{topic} to be created with leaders")
    assert len(answer.partitions) >= 1
    assert all(len(p.replica_nodes) == 1 for p in answer.partitions)  # default.replication.factor
    cluster.wait_for_leaders(topic)


def test_metadata_auto_creation_answers_the_creation_error(cluster):
    """A creation that cannot succeed answers its error with Kafka's code, as the single
    node does: an invalid name at once (a producer fails with it, not at its
    message.timeout.ms), a name colliding with an existing topic ('.' and '_' alike, the
    controller's check in ZooKeeper) from the next Metadata on, for as long as it stands."""
    via = not_controller(cluster)[0]
    Request = METADATA.request

    def ask(name: str) -> int:
        body = Request(topics=[Request.MetadataRequestTopic(name=name)], allow_auto_topic_creation=True)
        (answer,) = request(cluster, via, METADATA, body).topics
        return answer.error_code

    assert ask(INVALID_NAME) == ErrorCode.INVALID_TOPIC_EXCEPTION
    producing_to_an_invalid_name_fails_with_its_error(cluster.bootstrap_servers)

    cluster.create_topic("auto_collides", 1, 1)
    wait_for(lambda: ask("auto.collides") == ErrorCode.INVALID_TOPIC_EXCEPTION, 30,
             "Metadata to answer the failed creation's error")
    assert [ask("auto.collides") for _ in range(3)] == [ErrorCode.INVALID_TOPIC_EXCEPTION] * 3
    assert "auto.collides" not in cluster.metadata(via).topics


def test_kafka_topics_describe_reads_the_cluster_view(cluster):
    """Kafka 4.4's kafka-topics.sh --describe asks DescribeTopicPartitions (seen through a capture
    proxy), in pages of one partition here, of whichever broker: each partition's leader,
    replicas and ISR as the cluster's metadata has them."""
    from tests.kafka_capture import KafkaCaptureProxy
    from tests.test_kafka_tools import TOPICS, tool
    from wire.messages import DESCRIBE_TOPIC_PARTITIONS

    topic = "described-in-pages"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    cluster.wait_for_leaders(topic, full_isr=True)
    expected = {p.id: (str(p.leader), ",".join(map(str, p.replicas)), ",".join(map(str, p.isrs)))
                for p in confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
                .list_topics(topic, timeout=15).topics[topic].partitions.values()}
    with KafkaCaptureProxy(cluster.bootstrap_servers.split(",")[0]) as proxy:  # the others it learns
        described = tool(TOPICS, "--bootstrap-server", proxy.bootstrap, "--describe", "--topic", topic,
                         "--partition-size-limit-per-response", "1")
        pages = [f for f in proxy.responses() if f.api_key == DESCRIBE_TOPIC_PARTITIONS.key]
    assert len(pages) == 2
    rows = [dict(re.findall(r"(\w+): (\S+)", line)) for line in described.stdout.splitlines()[1:] if line.strip()]
    assert {int(r["Partition"]): (r["Leader"], r["Replicas"], r["Isr"]) for r in rows} == expected
