"""Partition reassignments in a real 3-broker cluster (tests/cluster.py), as Kafka's
ZooKeeper-mode controller carries them out (KIP-455): AlterPartitionReassignments and
ListPartitionReassignments through the project's client, and /admin/reassign_partitions
written as Kafka's tools wrote it.

- A partition moves from brokers {0, 1} to {2, 1} while an idempotent producer writes at
  acks=all with min.insync.replicas=2: nothing lost or duplicated, the new replica holds
  every acknowledged record (read from it as the leader), the topic znode keeps no adding
  or removing replicas, and the old replica's directory is deleted. The produces the old
  leader held waiting for acks=all are answered when its replica is deleted, not left to
  time out.
- The replication factor grows from 1 to 3 and shrinks to 2, the data kept.
- A partition of __consumer_offsets moves off the broker leading it: its groups'
  coordinator follows the new leader, the committed offsets kept.
- An acks=all produce the old leader holds (its follower paused) is answered
  NOT_LEADER_OR_FOLLOWER as soon as the reassignment deletes the old leader's replica,
  not after the produce's timeout.
- A partition moved off its leader: the old leader renames its replica's directory
  (`-delete`) and answers requests while a thread of its own empties and removes it.
- A reassignment whose new replica cannot catch up (its broker paused) is listed with
  its adding replicas (CreatePartitions refuses its topic meanwhile: REASSIGNMENT_IN_PROGRESS;
  `sluice topics describe --under-replicated-partitions` does not count them) and cancelled: the replicas are the original ones again, and the broker, once resumed,
  deletes what it had started.
- `sluice reassign` (kafka-reassign-partitions' shape): --execute prints the assignment to
  roll back to and starts the plan, --verify says completed or still in progress, --list
  shows the replicas being added, a second --execute is refused without --additional,
  --cancel restores the original replicas; malformed JSON is named with its line
  (--throttle: tests/test_replication_throttles.py).
- Bad input gets Kafka's error codes and changes nothing: an empty or duplicate replica
  list, a broker that never was, stopped or is in controlled shutdown, an unknown
  partition or topic, a topic being deleted, a cancellation of nothing. `sluice reassign`
  refuses a --decommission that would leave fewer brokers than a replication factor and a
  --rebalance while a broker holding replicas is down, starting nothing.
- A new target for a partition being reassigned replaces the one in progress (Kafka's
  rule); the replica the first target was adding is deleted.
- `sluice reassign --generate` prints the current assignment and a proposal in Kafka's
  JSON, Kafka's placement over the brokers listed, and starts nothing; a malformed topics
  file is named with its line, unknown topics and brokers, duplicate brokers and too few
  brokers for the replication factor are refused.
- Kafka's kafka-reassign-partitions (ReassignPartitionsCommand of kafka-tools 4.4):
  --generate proposes a plan over the brokers given, --execute starts the plan `sluice
  reassign --generate` proposed (and `sluice reassign --execute` the one Kafka's tool
  proposed), --execute --throttle starts a move with its replication throttles, --verify
  sees it completed and removes the throttles, and --list finds nothing left.
- /admin/reassign_partitions: the controller carries out what it lists, drops an entry
  it refuses, and deletes the znode once done.
- The controller SIGKILLed as it finds a reassignment's new replica in sync (fail point
  reassignment-before-completion): the next controller completes it from ZooKeeper, with
  nothing lost, and the old replica's broker deletes its replica when it starts again.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import confluent_kafka.admin
import pytest

from broker.zookeeper.layout import TopicAssignment
from broker.coordinator_runtime import partition_for
from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed, verify
from tests.test_cluster import ask_controlled_shutdown
from tests.test_cluster_admin import sluice
from tests.test_kafka_tools import tool
from sluice_client import BROKER_RESOURCE, DEFAULT_CONFIG, PREFERRED_ELECTION, TOPIC_RESOURCE, Client
from wire.error_codes import ErrorCode
from wire.errors import KafkaError

pytestmark = pytest.mark.timeout(180)

REASSIGN = "org.apache.kafka.tools.reassign.ReassignPartitionsCommand"

# Sessions long enough for a broker paused a few seconds to stay registered, and in the
# ISR while paused.
PROPERTIES = {**FAST_FAILOVER, "zookeeper.session.timeout.ms": "20000",
              "replica.lag.time.max.ms": "10000", "auto.leader.rebalance.enable": "false"}


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory, zookeeper):
    with Cluster(tmp_path_factory.mktemp("reassign"), zookeeper, brokers=3,
                 properties=PROPERTIES) as running:
        yield running


@pytest.fixture
def cluster(shared_cluster):
    """The module's cluster with every broker running (a failed test may have left one down)."""
    for broker_id in shared_cluster.ids:
        if broker_id in shared_cluster.paused:
            shared_cluster.resume(broker_id)
        if shared_cluster.processes[broker_id].proc is None:
            shared_cluster.restart(broker_id)
    shared_cluster.wait_for_brokers()
    return shared_cluster


def create_placed(cluster: Cluster, topic: str, replicas: list[list[int]], configs=None) -> None:
    """A topic with its partitions' replicas placed by hand, led and in sync."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([confluent_kafka.admin.NewTopic(topic, len(replicas), replica_assignment=replicas,
                                                        config=dict(configs or {}))])[topic].result(30)
    cluster.wait_for_leaders(topic, full_isr=True)


def assignment_in_zk(cluster: Cluster, zk, topic: str) -> TopicAssignment:
    path = f"{cluster.chroot}/brokers/topics/{topic}"
    data, _ = zk.get(path)
    return TopicAssignment.from_json(path, data)


def wait_until_reassigned(cluster: Cluster, topic: str, partition: int, replicas: tuple[int, ...],
                          timeout: float = 60.0) -> None:
    """Until the controller lists no reassignment of the partition and every live broker's
    Metadata gives it `replicas`."""
    with Client(cluster.bootstrap_servers, call_timeout=30) as client:
        def done() -> bool:
            if client.admin.list_partition_reassignments([(topic, partition)]):
                return False
            return all(cluster.partitions(topic, b)[partition].replicas == replicas for b in cluster.live)

        cluster.wait(done, timeout, f"{topic}-{partition} to be reassigned to {list(replicas)}")


THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
                 "leader.replication.throttled.rate", "follower.replication.throttled.rate")


def throttle_configs(cluster: Cluster, topic: str) -> dict[str, dict[str, str]]:
    """The replication throttle configs set on `topic` and on each live broker (not left
    at their defaults): the topic's name or the broker's id -> key -> value."""
    resources = [(TOPIC_RESOURCE, topic)] + [(BROKER_RESOURCE, str(b)) for b in cluster.live]
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        described = client.admin.describe_configs(resources)
    return {name: {key: entry.value for key, entry in entries.items()
                   if key in THROTTLE_KEYS and entry.source != DEFAULT_CONFIG}
            for (_, name), entries in described.items()}


def test_a_partition_moves_to_another_broker_under_an_idempotent_producer(cluster, zk):
    topic, seed = "moved-under-load", pick_seed()
    create_placed(cluster, topic, [[0, 1]], {"min.insync.replicas": "2"})
    workload = Workload(cluster.bootstrap_servers, topic, 1, seed=seed, rate=300, count=100_000).start()
    try:
        workload.wait_acked(300)
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            assert client.admin.alter_partition_reassignments({(topic, 0): [2, 1]}) == {(topic, 0): None}
        wait_until_reassigned(cluster, topic, 0, (2, 1))
        # The producer goes on writing, without waiting out librdkafka's request timeout
        # (30 s) on an acks=all produce the old leader held when its replica was deleted.
        workload.wait_acked(300, timeout=15)
        workload.finish()
    except BaseException:
        workload.abandon()
        raise
    assignment = assignment_in_zk(cluster, zk, topic)
    assert (assignment.partitions, assignment.adding_replicas, assignment.removing_replicas) == (
        {0: (2, 1)}, {}, {})
    cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30,
                 f"broker 0 to delete its replica of {topic}-0")

    with Client(cluster.bootstrap_servers, call_timeout=60) as client:  # the new replica leads
        client.admin.elect_leaders(PREFERRED_ELECTION, [(topic, 0)])
    cluster.wait(lambda: cluster.leader_of(topic) == 2, 30, f"broker 2 to lead {topic}-0")
    anomalies = verify(cluster, topic, 1, [workload], test="move under load", seed=seed)
    assert anomalies.clean, anomalies.summary()


def test_replication_factor_grows_from_1_to_3_and_shrinks_to_2(cluster):
    topic = "refactored"
    create_placed(cluster, topic, [[0]])
    values = [b"rf-%d" % i for i in range(50)]
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        client.producer.produce(topic, 0, [(None, v) for v in values])
        assert client.admin.alter_partition_reassignments({(topic, 0): [0, 1, 2]}) == {(topic, 0): None}
        wait_until_reassigned(cluster, topic, 0, (0, 1, 2))
        cluster.wait_for_isr(topic, 0, (0, 1, 2))
        assert client.admin.alter_partition_reassignments({(topic, 0): [1, 2]}) == {(topic, 0): None}
        wait_until_reassigned(cluster, topic, 0, (1, 2))
        assert cluster.isr_of(topic) == (1, 2) and cluster.leader_of(topic) == 1
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
    assert [r.value for r in fetched.records] == values
    cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30,
                 f"broker 0 to delete its replica of {topic}-0")


def test_a_group_coordinator_follows_its_offsets_partition_off_a_broker(cluster):
    group, topic, offsets_topic = "moved-coordinator", "coordinated-reads", "__consumer_offsets"
    create_placed(cluster, topic, [[1]])
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        client.consumer.commit_offsets(group, {(topic, 0): 42})
        cluster.wait_for_leaders(offsets_topic, full_isr=True)
        partition = partition_for(group, len(cluster.partitions(offsets_topic)))
        old = cluster.leader_of(offsets_topic, partition)
        assert client.find_coordinator(group).node_id == old
        kept = tuple(b for b in cluster.partitions(offsets_topic)[partition].replicas if b != old)
        assert client.admin.alter_partition_reassignments({(offsets_topic, partition): kept}) == {
            (offsets_topic, partition): None}
        wait_until_reassigned(cluster, offsets_topic, partition, kept)
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        assert client.find_coordinator(group).node_id in kept
        assert client.consumer.fetch_offsets(group, [(topic, 0)])[(topic, 0)].offset == 42
        client.consumer.commit_offsets(group, {(topic, 0): 43})
        assert client.consumer.fetch_offsets(group, [(topic, 0)])[(topic, 0)].offset == 43
    cluster.wait(lambda: cluster.partition_dirs(old, offsets_topic) == sorted(
        f"{offsets_topic}-{p}" for p, info in cluster.partitions(offsets_topic).items()
        if old in info.replicas), 30, f"broker {old} to delete its replica of {offsets_topic}-{partition}")


def roles(cluster: Cluster) -> tuple[int, int, int]:
    """Two brokers, then one that is not the controller: the one a test pauses (the
    controller must answer throughout)."""
    controller = cluster.controller_id()
    paused = max(b for b in cluster.ids if b != controller)
    first, second = (b for b in cluster.ids if b != paused)
    return first, second, paused


def test_a_produce_the_old_leader_holds_is_answered_when_its_replica_is_deleted(cluster):
    topic = "held-by-old-leader"
    leader, new, follower = roles(cluster)
    create_placed(cluster, topic, [[leader, follower]])
    log = Path(cluster.processes[leader].data_dir) / f"{topic}-0" / f"{0:020d}.log"
    cluster.pause(follower)  # in the ISR, fetching nothing: the leader holds acks=all produces
    try:
        with ThreadPoolExecutor(1) as pool, Client(cluster.address(leader), retries=0, call_timeout=120,
                                                   request_timeout=90) as writer:
            held = pool.submit(writer.producer.produce, topic, 0, [(None, b"held")], acks=-1, timeout_ms=60000)
            cluster.wait(lambda: log.exists() and log.stat().st_size > 0, 30,
                         f"broker {leader} to append the produce")
            with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                assert client.admin.alter_partition_reassignments({(topic, 0): [new]}) == {(topic, 0): None}
            started = time.monotonic()
            with pytest.raises(KafkaError) as answered:
                held.result(timeout=50)
            assert answered.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER, answered.value
            assert time.monotonic() - started < 30
    finally:
        cluster.resume(follower)
    wait_until_reassigned(cluster, topic, 0, (new,))


def test_the_old_leader_answers_while_its_moved_replica_is_removed(cluster):
    """Its files were unlinked in the event loop, some 0.3 s a gigabyte: beside the move
    of a 1 GB partition, a producer to another partition of the old leader waited 57
    times its idle p99 (bench.reassignment). Files enough to take a while to remove
    stand for a large log here; a request the old leader answers once the directory is
    renamed must find them still there."""
    topic = "moved-off-its-leader"
    leader, new, follower = roles(cluster)
    create_placed(cluster, topic, [[leader, follower]])
    data = Path(cluster.processes[leader].data_dir)
    for n in range(40_000):
        os.close(os.open(data / f"{topic}-0" / f"{n:08d}.filler", os.O_WRONLY | os.O_CREAT, 0o644))

    def renamed() -> Path | None:
        return next(data.glob(f"{topic}-0.*-delete"), None)

    with Client(cluster.address(leader), call_timeout=30) as asked, \
            Client(cluster.bootstrap_servers, call_timeout=60) as admin:
        asked.metadata([topic])  # connected beforehand: the question below is one request
        assert admin.admin.alter_partition_reassignments({(topic, 0): [new, follower]}) == {(topic, 0): None}
        directory = cluster.wait(renamed, 60, f"broker {leader} to rename {topic}-0 for deletion")
        asked.metadata([topic])
        assert directory.exists() and any(directory.iterdir()), \
            f"broker {leader} answered only once {directory.name} was emptied"
    cluster.wait(lambda: renamed() is None, 60, f"broker {leader} to remove {directory.name}")
    wait_until_reassigned(cluster, topic, 0, (new, follower))


def test_a_reassignment_is_listed_and_cancelled(cluster):
    topic = "cancelled"
    kept, _, added = roles(cluster)
    create_placed(cluster, topic, [[kept]])
    with Client(cluster.address(kept), call_timeout=60) as client:
        client.producer.produce(topic, 0, [(None, b"kept-%d" % i) for i in range(20)])
        cluster.pause(added)  # registered, but the new replica cannot catch up
        try:
            assert client.admin.alter_partition_reassignments({(topic, 0): [kept, added]}) == {(topic, 0): None}
            listed = client.admin.list_partition_reassignments()
            assert listed[(topic, 0)] == ((kept, added), (added,), ()), listed
            # Not under-replicated, by Kafka's rule: the replica being added is not counted.
            described = sluice("topics", "--bootstrap-server", cluster.bootstrap_servers, "--output", "json",
                               "describe", topic, "--under-replicated-partitions")
            assert json.loads(described.stdout) == {"partitions": []}, described
            (refused,) = client.admin.create_partitions({topic: 2}).values()
            assert refused.code == ErrorCode.REASSIGNMENT_IN_PROGRESS, refused
            assert client.admin.alter_partition_reassignments({(topic, 0): None}) == {(topic, 0): None}
            assert client.admin.list_partition_reassignments([(topic, 0)]) == {}
        finally:
            cluster.resume(added)
        assert cluster.partitions(topic)[0].replicas == (kept,)
        cluster.wait(lambda: cluster.partition_dirs(added, topic) == [], 30,
                     f"broker {added} to delete what it started of {topic}-0")
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
        assert [r.value for r in fetched.records] == [b"kept-%d" % i for i in range(20)]


def test_sluice_reassign_executes_verifies_lists_and_cancels(cluster, tmp_path):
    moved, held = "moved-by-sluice", "cancelled-by-sluice"
    kept, other, added = roles(cluster)
    create_placed(cluster, moved, [[kept, added]])
    create_placed(cluster, held, [[kept]])
    bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)
    plan = tmp_path / "moved.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": moved, "partition": 0, "replicas": [other, kept], "log_dirs": ["any", "any"]}]}))
    executed = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(plan))
    assert executed.returncode == 0, executed
    assert json.dumps({"version": 1, "partitions": [{"topic": moved, "partition": 0, "replicas": [
        kept, added], "log_dirs": ["any", "any"]}]}) in executed.stdout  # to roll back with
    assert f"Successfully started partition reassignment for {moved}-0" in executed.stdout
    cluster.wait(lambda: sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file",
                                str(plan)).returncode == 0, 60, f"--verify to find {moved}-0 done")
    verified = sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file", str(plan))
    assert f"Reassignment of partition {moved}-0 is completed." in verified.stdout, verified

    stuck = tmp_path / "held.json"
    stuck.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": held, "partition": 0, "replicas": [kept, added]}]}))
    cluster.pause(added)  # registered, but the new replica cannot catch up
    try:
        bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)  # without the paused broker
        assert sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file",
                      str(stuck)).returncode == 0
        listed = sluice("reassign", *bootstrap, "--list")
        assert listed.stdout == (f"Current partition reassignments:\n{held}-0: replicas: "
                                 f"{kept},{added}. adding: {added}. removing: .\n"), listed
        again = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(stuck))
        assert again.returncode == 1 and "Use --additional" in again.stderr, again
        pending = sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file", str(stuck))
        assert pending.returncode == 1, pending
        assert f"Reassignment of partition {held}-0 is still in progress." in pending.stdout
        cancelled = sluice("reassign", *bootstrap, "--cancel", "--reassignment-json-file", str(stuck))
        assert f"Successfully cancelled partition reassignments for: {held}-0" in cancelled.stdout
    finally:
        cluster.resume(added)
    assert "No partition reassignments found." in sluice("reassign", *bootstrap, "--list").stdout
    assert cluster.partitions(held)[0].replicas == (kept,)

    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1,\n "partitions": [\n  {"topic": "t", "partition": 0,}\n]}')
    refused = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(broken))
    assert refused.returncode == 1 and "at line 3, column 33" in refused.stderr, refused


def test_bad_reassignments_get_kafkas_errors_and_change_nothing(cluster, zk):
    """As Kafka 3.9's controller answers them (validateReplicas, then
    maybeTriggerPartitionReassignment): a topic being deleted is unknown; a target broker
    that is not live (never was, or stopped) is INVALID_REPLICA_ASSIGNMENT."""
    topic, deleted = "reassign-bad", "reassign-bad-deleted"
    first, second, other = roles(cluster)
    create_placed(cluster, topic, [[first, second]])
    create_placed(cluster, deleted, [[first, other]])
    before = cluster.partitions(topic)[0]
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        results = client.admin.alter_partition_reassignments({
            (topic, 0): [], ("no-such-topic", 0): [first, second], (topic, 5): [first, second]})
        assert {tp: error.code for tp, error in results.items()} == {
            (topic, 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            ("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            (topic, 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        for target in ([first, first], [first, 7], [first, -1]):  # duplicate, no such broker, negative
            (error,) = client.admin.alter_partition_reassignments({(topic, 0): target}).values()
            assert error.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, (target, error)
        (error,) = client.admin.alter_partition_reassignments({(topic, 0): None}).values()
        assert error.code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, error

        cluster.pause(other)  # the deletion waits for its StopReplica
        try:
            zk.create(f"{cluster.chroot}/admin/delete_topics/{deleted}", makepath=True)

            def deleting() -> bool:  # the controller's UpdateMetadata dropped the topic
                found = cluster.metadata(first, [deleted]).topics.get(deleted)
                return found is None or found.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

            cluster.wait(deleting, 30, f"the controller to start deleting {deleted}")
            (error,) = client.admin.alter_partition_reassignments({(deleted, 0): [first, second]}).values()
            assert error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error
        finally:
            cluster.resume(other)
        cluster.wait(lambda: zk.exists(f"{cluster.chroot}/brokers/topics/{deleted}") is None, 60,
                     f"{deleted} to be deleted")

        cluster.stop(other)  # not live any more
        cluster.wait_for_brokers()
        (error,) = client.admin.alter_partition_reassignments({(topic, 0): [first, other]}).values()
        assert error.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, error
        assert "not live" in error.message, error
        assert client.admin.list_partition_reassignments() == {}
    after = cluster.partitions(topic)[0]
    assert (after.replicas, after.leader_id, after.leader_epoch) == (
        before.replicas, before.leader_id, before.leader_epoch)


def test_a_broker_in_controlled_shutdown_is_not_live_for_a_reassignment(cluster, zk):
    """Kafka's controller checks the brokers to add against its live brokers less those
    shutting down (liveBrokerIds): one whose ControlledShutdown it has taken (sent here on
    the broker's behalf, as its SIGTERM sends it first) is INVALID_REPLICA_ASSIGNMENT,
    though still registered."""
    topic = "reassign-to-leaving"
    kept, _, leaving = roles(cluster)
    create_placed(cluster, topic, [[kept]])
    controller = cluster.controller_id()
    epoch = zk.exists(f"{cluster.chroot}/brokers/ids/{leaving}").czxid
    answer = asyncio.run(ask_controlled_shutdown(cluster, controller, leaving, epoch))
    try:
        assert answer.error_code == ErrorCode.NONE, answer
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            (error,) = client.admin.alter_partition_reassignments({(topic, 0): [kept, leaving]}).values()
            assert error is not None and error.code == ErrorCode.INVALID_REPLICA_ASSIGNMENT, error
            assert client.admin.list_partition_reassignments() == {}
        assert cluster.partitions(topic)[0].replicas == (kept,)
    finally:
        cluster.restart(leaving)  # registered again: live for the controller again


def test_a_new_target_replaces_the_reassignment_in_progress(cluster):
    """Kafka's rule: a target for a partition being reassigned replaces the one in
    progress, from the same original replicas; the replica the first one was adding is
    dropped, and deleted by its broker."""
    topic = "retargeted"
    kept, other, added = roles(cluster)
    create_placed(cluster, topic, [[kept]])
    with Client(cluster.address(kept), call_timeout=60) as client:
        client.producer.produce(topic, 0, [(None, b"kept-%d" % i) for i in range(20)])
        cluster.pause(added)  # registered, but the new replica cannot catch up
        try:
            assert client.admin.alter_partition_reassignments({(topic, 0): [added]}) == {(topic, 0): None}
            listed = client.admin.list_partition_reassignments()
            assert listed[(topic, 0)] == ((added, kept), (added,), (kept,)), listed
            assert client.admin.alter_partition_reassignments({(topic, 0): [other]}) == {(topic, 0): None}
            wait_until_reassigned(cluster, topic, 0, (other,))
        finally:
            cluster.resume(added)
        cluster.wait(lambda: cluster.partition_dirs(added, topic) == [] and
                     cluster.partition_dirs(kept, topic) == [], 30,
                     f"brokers {added} and {kept} to delete their replicas of {topic}-0")
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
        assert [r.value for r in fetched.records] == [b"kept-%d" % i for i in range(20)]


def test_admin_reassign_partitions_znode_is_carried_out_and_deleted(cluster, zk):
    topic = "reassigned-in-zk"
    create_placed(cluster, topic, [[0]])
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        client.producer.produce(topic, 0, [(None, b"zk-%d" % i) for i in range(20)])
    path = f"{cluster.chroot}/admin/reassign_partitions"
    zk.create(path, json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1]},
        {"topic": "no-such-topic", "partition": 0, "replicas": [1]}]}).encode())
    wait_until_reassigned(cluster, topic, 0, (1,))
    cluster.wait(lambda: zk.exists(path) is None, 30, f"the controller to delete {path}")
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
    assert [r.value for r in fetched.records] == [b"zk-%d" % i for i in range(20)]
    cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30,
                 f"broker 0 to delete its replica of {topic}-0")


def generated_plans(output: str) -> tuple[dict, dict]:
    """The current assignment and the proposal kafka-reassign-partitions --generate printed."""
    current, proposed = output.split("Proposed partition reassignment configuration\n")
    heading, current = current.split("\n", 1)
    assert heading == "Current partition replica assignment", output
    return json.loads(current), json.loads(proposed)


def test_sluice_reassign_generates_a_plan_over_the_brokers_listed(cluster, tmp_path):
    topic = "generated-by-sluice"
    placed = [[0, 1], [1, 2], [2, 0]]
    create_placed(cluster, topic, placed)
    bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)
    wanted = tmp_path / "topics.json"
    wanted.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))

    def generate(path: Path, brokers: str):
        return sluice("reassign", *bootstrap, "--generate", "--topics-to-move-json-file", str(path),
                      "--broker-list", brokers)

    generated = generate(wanted, "0,2")
    assert generated.returncode == 0, generated
    current, proposed = generated_plans(generated.stdout)
    assert current == {"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": replicas, "log_dirs": ["any", "any"]}
        for p, replicas in enumerate(placed)]}
    assert [(p["topic"], p["partition"], sorted(p["replicas"]), p["log_dirs"]) for p in proposed["partitions"]] == [
        (topic, p, [0, 2], ["any", "any"]) for p in range(3)]
    assert sorted(Counter(p["replicas"][0] for p in proposed["partitions"]).values()) == [1, 2]
    assert [info.replicas for _, info in sorted(cluster.partitions(topic).items())] == [
        tuple(replicas) for replicas in placed]  # nothing started

    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1,\n "topics": [\n  {"topic": "t"},\n]}')
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"topics": [{"topic": "no-such-topic"}]}))
    for refused, message in [(generate(broken, "0,2"), "is not JSON: Expecting value at line 4, column 1"),
                             (generate(unknown, "0,2"), "Topic no-such-topic not found."),
                             (generate(wanted, "1"), "replication factor 2 larger than available brokers: 1"),
                             (generate(wanted, "0,7"), "--broker-list: 7 not among the live brokers")]:
        assert refused.returncode == 1 and message in refused.stderr, refused
    duplicated = generate(wanted, "0,2,2")
    assert duplicated.returncode == 2, duplicated
    assert "Broker list contains duplicate entries: 2" in duplicated.stderr


def test_sluice_reassign_refuses_moves_the_cluster_cannot_take(cluster):
    """--decommission with fewer brokers left than a replication factor, and --rebalance
    with a broker down that holds replicas, start nothing; a broker holding nothing may
    be stopped at once."""
    topic, stopped = "three-replicas", roles(cluster)[2]
    create_placed(cluster, topic, [[0, 1, 2]])
    bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)
    refused = sluice("reassign", *bootstrap, "--decommission", "0", "--wait")
    assert refused.returncode == 1, refused
    assert "cannot move every replica off broker 0: " in refused.stderr
    assert f"{topic} has 3 replicas per partition" in refused.stderr
    assert "and 2 other broker(s) are live (1, 2)" in refused.stderr
    nowhere = sluice("reassign", *bootstrap, "--decommission", "9")
    assert nowhere.returncode == 0, nowhere
    assert nowhere.stdout == ("Broker 9 is not live and no partition is placed on it.\n"
                              "Broker 9 holds no replica and leads no partition: it can be stopped "
                              "now, and no partition loses a replica.\n")
    as_json = sluice("reassign", *bootstrap, "--decommission", "9", "--output", "json")
    assert json.loads(as_json.stdout) == {
        "broker": 9, "current": {"version": 1, "partitions": []}, "proposed": {"version": 1, "partitions": []},
        "started": [], "failed": [], "can_stop": True, "holds": [], "leads": []}, as_json
    cluster.stop(stopped)
    cluster.wait_for_brokers()
    refused = sluice("reassign", "--bootstrap-server", cluster.bootstrap_servers, "--rebalance")
    assert refused.returncode == 1, refused
    assert f"broker(s) {stopped} hold replicas but are not live" in refused.stderr
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        assert client.admin.list_partition_reassignments() == {}
    assert cluster.partitions(topic)[0].replicas == (0, 1, 2)


def test_kafkas_reassign_partitions_tool(cluster, tmp_path):
    """--generate, --execute (with and without --throttle), --verify and --list (a
    reassignment cancelled is the client's test above: the tool waits on a paused broker),
    with the plans generated crossed over: Kafka's tool executes what `sluice reassign
    --generate` proposes, and `sluice reassign --execute` what Kafka's proposes. --verify,
    once a throttled move is done, deletes the throttles,
    replica.alter.log.dirs.io.max.bytes.per.second with them."""
    topic = "reassigned-by-kafka"
    create_placed(cluster, topic, [[0, 1], [1, 2]])
    bootstrap = ("--bootstrap-server", cluster.bootstrap_servers)
    wanted = tmp_path / "topics.json"
    wanted.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))
    generate = ("--generate", "--topics-to-move-json-file", str(wanted))
    _, by_kafka = generated_plans(tool(REASSIGN, *bootstrap, *generate, "--broker-list", "1,2").stdout)
    assert {(p["partition"], tuple(sorted(p["replicas"]))) for p in by_kafka["partitions"]} == {
        (0, (1, 2)), (1, (1, 2))}
    by_sluice = tmp_path / "by-sluice.json"
    generated = sluice("reassign", *bootstrap, *generate, "--broker-list", "0,2")
    by_sluice.write_text(generated.stdout.split("Proposed partition reassignment configuration\n")[1])
    targets = {p["partition"]: tuple(p["replicas"]) for p in json.loads(by_sluice.read_text())["partitions"]}
    assert {p: tuple(sorted(replicas)) for p, replicas in targets.items()} == {0: (0, 2), 1: (0, 2)}

    executed = tool(REASSIGN, *bootstrap, "--execute", "--reassignment-json-file", str(by_sluice))
    assert f"Successfully started partition reassignments for {topic}-0,{topic}-1" in executed.stdout
    cluster.wait(lambda: tool(REASSIGN, *bootstrap, "--verify", "--reassignment-json-file",
                              str(by_sluice)).stdout.count("is completed.") == 2,
                 60, f"--verify to find {topic} reassigned")
    for partition, replicas in targets.items():
        wait_until_reassigned(cluster, topic, partition, replicas)

    by_kafka_file = tmp_path / "by-kafka.json"
    by_kafka_file.write_text(json.dumps(by_kafka))
    executed = sluice("reassign", *bootstrap, "--execute", "--reassignment-json-file", str(by_kafka_file))
    assert executed.returncode == 0, executed
    cluster.wait(lambda: sluice("reassign", *bootstrap, "--verify", "--reassignment-json-file",
                                str(by_kafka_file)).returncode == 0, 60, f"{topic} to be reassigned again")
    for p in by_kafka["partitions"]:
        wait_until_reassigned(cluster, topic, p["partition"], tuple(p["replicas"]))

    throttled = "throttled-by-kafka"
    create_placed(cluster, throttled, [[0, 1]])
    moved = tmp_path / "moved.json"
    moved.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": throttled, "partition": 0, "replicas": [2, 1], "log_dirs": ["any", "any"]}]}))
    executed = tool(REASSIGN, *bootstrap, "--execute", "--reassignment-json-file", str(moved),
                    "--throttle", "50000000")
    assert f"Successfully started partition reassignment for {throttled}-0" in executed.stdout
    assert "The inter-broker throttle limit was set to 50000000 B/s" in executed.stdout
    wait_until_reassigned(cluster, throttled, 0, (2, 1))
    rates = {"leader.replication.throttled.rate": "50000000", "follower.replication.throttled.rate": "50000000"}
    assert throttle_configs(cluster, throttled) == {throttled: {
        "leader.replication.throttled.replicas": "0:0,0:1", "follower.replication.throttled.replicas": "0:2"},
        "0": rates, "1": rates, "2": rates}
    verified = tool(REASSIGN, *bootstrap, "--verify", "--reassignment-json-file", str(moved))
    assert f"Reassignment of partition {throttled}-0 is completed." in verified.stdout, verified
    assert "Clearing topic-level throttles on topic " + throttled in verified.stdout, verified
    assert throttle_configs(cluster, throttled) == {throttled: {}, "0": {}, "1": {}, "2": {}}
    assert "No partition reassignments found." in tool(REASSIGN, *bootstrap, "--list").stdout


def test_a_new_controller_completes_the_reassignment_of_one_killed_midway(tmp_path, zookeeper,
                                                                            monkeypatch):
    topic, seed = "moved-across-failover", pick_seed()
    cluster = Cluster(tmp_path, zookeeper, brokers=3, properties=FAST_FAILOVER)
    workload = None
    try:
        monkeypatch.setenv("SLUICE_FAILPOINTS", "reassignment-before-completion")
        cluster.processes[0].start()  # alone: it becomes the controller
        monkeypatch.delenv("SLUICE_FAILPOINTS")
        cluster.wait(lambda: getattr(cluster._try_metadata(0, []), "controller_id", None) == 0, 30,
                     "broker 0 to become the controller")
        for broker_id in (1, 2):
            cluster.processes[broker_id].start()
        cluster.wait_for_brokers()
        create_placed(cluster, topic, [[0, 1]], {"min.insync.replicas": "2"})
        workload = Workload(cluster.all_servers, topic, 1, seed=seed, rate=300, count=100_000).start()
        workload.wait_acked(300)
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            assert client.admin.alter_partition_reassignments({(topic, 0): [1, 2]}) == {(topic, 0): None}
        wait_for(lambda: cluster.processes[0].proc.poll() is not None, 60,
                 "the controller to die at its fail point")
        cluster.kill(0)  # reaped: out of bootstrap_servers and the waits
        assert "fail point reassignment-before-completion reached" in cluster.output(0, 200)
        wait_until_reassigned(cluster, topic, 0, (1, 2))
        workload.wait_acked(300)
        workload.finish()

        assert cluster.partition_dirs(0, topic) == [f"{topic}-0"]  # left while it was down
        cluster.restart(0)
        cluster.wait_for_brokers()
        cluster.wait(lambda: cluster.partition_dirs(0, topic) == [], 30,
                     f"broker 0 to delete its replica of {topic}-0 at its start")
        anomalies = verify(cluster, topic, 1, [workload], test="move across a controller failover",
                           seed=seed)
        assert anomalies.clean, anomalies.summary()
    except BaseException:
        if workload is not None:
            workload.abandon()
        raise
    finally:
        cluster.close()
