"""Replication throttles in a real 3-broker cluster (tests/cluster.py), as Kafka applies
them: the dynamic broker configs leader.replication.throttled.rate and
follower.replication.throttled.rate, the topic configs leader/follower.replication.
throttled.replicas.

- The configs are validated as Kafka validates them (INVALID_CONFIG naming the key); the
  rates are kept in ZooKeeper as Kafka keeps them (/config/brokers/<id>,
  /config/brokers/<default>), and a cluster default set through one broker reaches the
  others. replica.alter.log.dirs.io.max.bytes.per.second is refused with the reason;
  deleting it changes nothing.
- Three partitions holding 3 MB each move from one broker to two at once, at 300 KB/s:
  the one throttled by its leader and the one throttled by its new follower each take
  at least half of 3 MB / 300 KB/s, while the unlisted one is done before them; the
  brokers' Prometheus byte-rate gauges show the throttled traffic.
- Six partitions copied from one leader in the same fetches share its rate: its gauge
  never shows more than twice the rate.
- `sluice reassign --execute --throttle` writes Kafka's throttle configs (leader: the
  existing replicas, follower: the new ones; the rate on every broker involved), and
  `--verify` removes them once nothing moves (kept with --preserve-throttles);
  --replica-alter-log-dirs-throttle is refused with the reason.

Sizes and rates are small (a test takes seconds); the rate's accuracy belongs in bench/.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.cluster import Cluster
from tests.test_cluster_admin import broker_config, sluice
from tests.test_cluster_reassignment import (PROPERTIES, create_placed, throttle_configs,
                                             wait_until_reassigned)
from tests.test_metrics import metrics_port, scrape, value
from sluice_client import (BROKER_RESOURCE, DEFAULT_CONFIG, DELETE_CONFIG, DYNAMIC_BROKER_CONFIG,
                           DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG, SET_CONFIG, TOPIC_RESOURCE,
                           Client)
from wire.error_codes import ErrorCode

pytestmark = pytest.mark.timeout(180)

LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = ("leader.replication.throttled.replicas",
                                      "follower.replication.throttled.replicas")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with Cluster(tmp_path_factory.mktemp("throttles"), zookeeper, brokers=3,
                 properties={**PROPERTIES, "metrics.port": "0"}) as running:
        yield running


def described_rates(client: Client, broker_id: int) -> dict[str, tuple[str, int]]:
    """The broker's throttle rates as it describes them: key -> (value, source)."""
    resource = (BROKER_RESOURCE, str(broker_id))
    entries = client.admin.describe_configs([resource])[resource]
    return {key: (entries[key].value, entries[key].source) for key in (LEADER_RATE, FOLLOWER_RATE)}


def test_throttle_configs_are_validated_and_kept_in_zookeeper(cluster, zk):
    topic = "throttle-configs"
    create_placed(cluster, topic, [[0, 1]])
    resource = (TOPIC_RESOURCE, topic)
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        for bad in ("0:x", "*,0:1", "0-1", "0:1:2", "1"):
            error = client.admin.incremental_alter_configs({resource: [(LEADER_REPLICAS, SET_CONFIG, bad)]})[resource]
            assert error.code == ErrorCode.INVALID_CONFIG and LEADER_REPLICAS in str(error), (bad, error)
        assert client.admin.incremental_alter_configs({resource: [
            (LEADER_REPLICAS, SET_CONFIG, " 0:0, 0:1 "), (FOLLOWER_REPLICAS, SET_CONFIG, "*")]})[resource] is None
        described = client.admin.describe_configs([resource])[resource]
        assert (described[LEADER_REPLICAS].value, described[LEADER_REPLICAS].source) == (
            "0:0,0:1", DYNAMIC_TOPIC_CONFIG)
        assert described[FOLLOWER_REPLICAS].value == "*"

        broker1, default = (BROKER_RESOURCE, "1"), (BROKER_RESOURCE, "")
        for bad in ("-1", "fast", "9223372036854775808"):
            error = client.admin.incremental_alter_configs({broker1: [(LEADER_RATE, SET_CONFIG, bad)]})[broker1]
            assert error.code == ErrorCode.INVALID_CONFIG and LEADER_RATE in str(error), (bad, error)
        alter_dirs = "replica.alter.log.dirs.io.max.bytes.per.second"
        error = client.admin.incremental_alter_configs({broker1: [(alter_dirs, SET_CONFIG, "1000")]})[broker1]
        assert error.code == ErrorCode.INVALID_CONFIG and "one log directory" in str(error), error
        assert client.admin.incremental_alter_configs({broker1: [(alter_dirs, DELETE_CONFIG, None)]})[broker1] is None

        assert client.admin.incremental_alter_configs({broker1: [(LEADER_RATE, SET_CONFIG, "1000000")],
                                                 default: [(FOLLOWER_RATE, SET_CONFIG, "2000000")]}) == {
            broker1: None, default: None}
        assert broker_config(zk, cluster, "1") == {LEADER_RATE: "1000000"}
        assert broker_config(zk, cluster, "<default>") == {FOLLOWER_RATE: "2000000"}

        unlimited = (str((1 << 63) - 1), DEFAULT_CONFIG)
        cluster.wait(lambda: described_rates(client, 2) == {
            LEADER_RATE: unlimited, FOLLOWER_RATE: ("2000000", DYNAMIC_DEFAULT_BROKER_CONFIG)},
            30, "broker 2 to read the cluster default from ZooKeeper")
        assert described_rates(client, 1) == {LEADER_RATE: ("1000000", DYNAMIC_BROKER_CONFIG),
                                              FOLLOWER_RATE: ("2000000", DYNAMIC_DEFAULT_BROKER_CONFIG)}
        assert client.admin.incremental_alter_configs({broker1: [(LEADER_RATE, DELETE_CONFIG, None)],
                                                 default: [(FOLLOWER_RATE, DELETE_CONFIG, None)]}) == {
            broker1: None, default: None}
    assert broker_config(zk, cluster, "1") == broker_config(zk, cluster, "<default>") == {}


def fill(client: Client, topic: str, partition: int, size: int, batch: int = 64 * 1024) -> None:
    """`size` bytes of incompressible values, in batches of `batch` bytes."""
    for _ in range(size // batch):
        client.producer.produce(topic, partition, [(None, os.urandom(batch // 8)) for _ in range(8)])


def test_a_throttled_move_is_held_to_its_rate_and_an_unlisted_one_is_not(cluster):
    topic, size, rate = "throttled-moves", 3 * 1024 * 1024, 300_000
    source, target = 0, 2
    # Partition 0 is throttled by its leader, 1 by its new follower, 2 not at all.
    create_placed(cluster, topic, [[source]] * 3, {LEADER_REPLICAS: f"0:{source}",
                                                   FOLLOWER_REPLICAS: f"1:{target}"})
    with Client(cluster.bootstrap_servers, call_timeout=120) as client:
        for partition in range(3):
            fill(client, topic, partition, size)
        brokers = [(BROKER_RESOURCE, str(b)) for b in (source, target)]
        assert client.admin.incremental_alter_configs({b: [(LEADER_RATE, SET_CONFIG, str(rate)),
                                                     (FOLLOWER_RATE, SET_CONFIG, str(rate))]
                                                 for b in brokers}) == dict.fromkeys(brokers)
        try:
            started = time.monotonic()
            moves = {(topic, p): [source, target] for p in range(3)}
            assert client.admin.alter_partition_reassignments(moves) == dict.fromkeys(moves)
            wait_until_reassigned(cluster, topic, 2, (source, target))
            unthrottled = time.monotonic() - started
            still = client.admin.list_partition_reassignments()
            assert {(topic, 0), (topic, 1)} <= set(still), still

            rates = {}

            def byte_rates() -> bool:  # the gauges while both throttled moves go on
                rates["leader"] = value(scrape(metrics_port(cluster.processes[source])),
                                        "kafka_server_leaderreplication_byte_rate")
                rates["follower"] = value(scrape(metrics_port(cluster.processes[target])),
                                          "kafka_server_followerreplication_byte_rate")
                return (rates["leader"] or 0) > 0 and (rates["follower"] or 0) > 0

            cluster.wait(byte_rates, 30, "the byte-rate gauges to show the throttled traffic")
            took = {}
            for partition in (0, 1):
                wait_until_reassigned(cluster, topic, partition, (source, target), timeout=120)
                took[partition] = time.monotonic() - started
        finally:
            client.admin.incremental_alter_configs({b: [(LEADER_RATE, DELETE_CONFIG, None),
                                                  (FOLLOWER_RATE, DELETE_CONFIG, None)] for b in brokers})
    print(f"moved {size} bytes: unthrottled in {unthrottled:.1f} s, throttled by the leader in "
          f"{took[0]:.1f} s, by the follower in {took[1]:.1f} s (at {rate} B/s: {size / rate:.1f} s); "
          f"byte-rate gauges {rates}")
    for partition, seconds in took.items():
        assert seconds >= size / rate * 0.5, (partition, took)


def test_a_fetch_of_many_throttled_partitions_shares_the_leaders_rate(cluster):
    """A follower asks for every partition it copies from a leader in one fetch: the
    leader's throttle bounds what that fetch takes of them all, not of each. The move
    starts at a trickle, so that all six partitions are in the new replica's fetches,
    then the rate is raised: the quota's credit went to each of them (six times the rate
    at once, and the leader's byte-rate gauge showed it for seconds)."""
    topic, partitions, trickle, rate = "throttled-together", 6, 1_000, 200_000
    source, target = 1, 2  # broker 1 has led no throttled replica in this module: its rate starts at 0
    create_placed(cluster, topic, [[source]] * partitions,
                  {LEADER_REPLICAS: ",".join(f"{p}:{source}" for p in range(partitions))})
    port = metrics_port(cluster.processes[source])
    broker = (BROKER_RESOURCE, str(source))
    with Client(cluster.bootstrap_servers, call_timeout=120) as client:
        for partition in range(partitions):
            fill(client, topic, partition, 1024 * 1024)
        assert client.admin.incremental_alter_configs({broker: [(LEADER_RATE, SET_CONFIG, str(trickle))]}) == {
            broker: None}
        seen: list[float] = []
        try:
            moves = {(topic, p): [source, target] for p in range(partitions)}
            assert client.admin.alter_partition_reassignments(moves) == dict.fromkeys(moves)
            cluster.wait(lambda: len(client.admin.describe_log_dirs(target, moves)) == partitions, 30,
                         "the new replicas to be created")
            assert client.admin.incremental_alter_configs({broker: [(LEADER_RATE, SET_CONFIG, str(rate))]}) == {
                broker: None}
            # The gauge is the bytes of the last 11 s over the time since they began (1 s
            # at least): a burst shows above the rate for seconds after it.
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                seen.append(value(scrape(port), "kafka_server_leaderreplication_byte_rate") or 0.0)
                time.sleep(0.1)
        finally:
            client.admin.incremental_alter_configs({broker: [(LEADER_RATE, DELETE_CONFIG, None)]})
        for partition in range(partitions):
            wait_until_reassigned(cluster, topic, partition, (source, target))
    print(f"leader byte-rate gauge at {rate} B/s: highest {max(seen):.0f} over {len(seen)} samples")
    assert rate / 2 < max(seen) <= 2 * rate, seen


def test_sluice_reassign_throttles_and_verify_removes_them(cluster, tmp_path):
    topic = "throttled-by-sluice"
    create_placed(cluster, topic, [[0, 1], [1, 2]])
    bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2, 1]},
                                                             {"topic": topic, "partition": 1, "replicas": [1, 2]}]}))
    executed = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(plan),
                      "--throttle", "100000000")
    assert executed.returncode == 0, executed
    assert "The inter-broker throttle limit was set to 100000000 B/s" in executed.stdout, executed
    # Kafka's lists: leader = the existing replicas, follower = the new ones, of each moving
    # partition (1 moves nowhere: its replicas only); the rate on each broker they name.
    rates = {LEADER_RATE: "100000000", FOLLOWER_RATE: "100000000"}
    replicas = {LEADER_REPLICAS: "0:0,0:1,1:1,1:2", FOLLOWER_REPLICAS: "0:2"}
    assert throttle_configs(cluster, topic) == {topic: replicas, "0": rates, "1": rates, "2": rates}
    wait_until_reassigned(cluster, topic, 0, (2, 1))
    kept = sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file", str(plan),
                  "--preserve-throttles")
    assert kept.returncode == 0 and "Clearing" not in kept.stdout, kept
    assert throttle_configs(cluster, topic)[topic] == replicas
    verified = sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert verified.returncode == 0, verified
    assert f"Reassignment of partition {topic}-0 is completed." in verified.stdout
    assert ("Clearing broker-level throttles on brokers 0,1,2\n"
            f"Clearing topic-level throttles on topic {topic}\n") in verified.stdout, verified
    assert throttle_configs(cluster, topic) == {topic: {}, "0": {}, "1": {}, "2": {}}

    refused = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(plan),
                     "--replica-alter-log-dirs-throttle", "1000")
    assert refused.returncode == 2 and "one log directory" in refused.stderr, refused
