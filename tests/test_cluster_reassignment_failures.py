"""Partition reassignments through failures (issue 32), in a cluster of its own per test
(tests/cluster.py: real ZooKeeper, real broker processes, FAST_FAILOVER's 6 s sessions).
An idempotent confluent-kafka producer writes at acks=all throughout (min.insync.replicas=2
where the replication factor allows it); the topic is read back whole at the end and the
counts (lost, duplicated, out of order, offsets going backwards, moved) are printed with the
seed (SLUICE_SEED replays it) and must all be 0. Once the reassignment is over, no broker
keeps a directory (or what is left of one) of a partition it is not a replica of.

- A new replica's broker SIGKILLed while it catches up on a partition holding PRELOAD_MB:
  restarted, it catches up and the reassignment completes; or the reassignment is
  cancelled while it is down, the original replicas are restored, and the broker deletes
  the part it had copied when it starts again.
- The old leader SIGKILLed right after the controller moved the leadership into the target
  and told it to delete its replica (fail point replica-stop-before-delete), the old
  leader being another broker or the controller itself: the reassignment completes
  without it, and it deletes its replica when it starts again.
- The replication factor of a loaded topic (three partitions) raised from 1 to 3, then,
  with min.insync.replicas=2, lowered to 2 by removing each partition's leader.
- Chaos (`make chaos`): SLUICE_CHAOS_ROUNDS (default 8) rounds on four brokers, each
  reassigning some of six partitions (5 MB each to start with) to three brokers drawn at
  random, then SIGKILLing a broker adding a replica, an old leader, or the controller, or
  none, at a random moment (restarted once ZooKeeper dropped it, or at once: it then waits
  for that itself), and in some rounds cancelling what is still in progress; each round
  ends once nothing is being reassigned, every partition on its target (or, cancelled,
  its original replicas) and no directory left over.
- Scale-out and back: every partition (RF=3, `__consumer_offsets` too) moves from brokers
  {0, 1, 2} to {1, 2, 3}, the fourth broker started while the producer writes and a group
  of a confluent-kafka, a kafka-python and an aiokafka member reads (test_cluster_groups'
  MixedGroup); then back to {0, 1, 2}. The members are never restarted; they read every
  acknowledged record, each partition in order, and the committed offsets never go back.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Acked, Cluster, Workload, verify
from tests.log_files import log_bytes
from tests.test_cluster_failures import seed  # noqa: F401 (the fixture)
from tests.test_cluster_groups import OFFSETS_TOPIC, PROPERTIES as GROUP_PROPERTIES, MixedGroup
from tests.test_cluster_reassignment import create_placed, roles, wait_until_reassigned
from sluice_client import SET_CONFIG, TOPIC_RESOURCE, Client

pytestmark = pytest.mark.timeout(240)

PROPERTIES = {**FAST_FAILOVER, "auto.leader.rebalance.enable": "false"}
PRELOAD_MB = 30  # what a new replica copies: several seconds of catch-up
RATE = 200  # the producer's values a second


def preload(cluster: Cluster, topic: str, partition: int, megabytes: int) -> list[Acked]:
    """`megabytes` MB of 1 KB records (a filler key, values load<partition>-<n>) produced to
    the partition at acks=all, 500 a batch: what was acknowledged where."""
    filler, acked = b"f" * 1000, []
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        for start in range(0, megabytes * 1000, 500):
            values = [b"load%d-%d" % (partition, n) for n in range(start, start + 500)]
            written = client.producer.produce(topic, partition, [(filler, value) for value in values])
            acked += [Acked(partition, written.base_offset + i, v) for i, v in enumerate(values)]
    return acked


def orphans(cluster: Cluster, topic: str) -> dict[int, list[str]]:
    """Per broker, the directories of `topic` it holds (or is deleting) that are not of a
    partition it is a replica of, by a live broker's Metadata."""
    partitions = cluster.partitions(topic)
    found = {}
    for broker_id in cluster.ids:
        own = {f"{topic}-{p}" for p, info in partitions.items() if broker_id in info.replicas}
        extra = [d for d in cluster.partition_dirs(broker_id, topic) if d not in own]
        if extra:
            found[broker_id] = extra
    return found


def wait_for_no_orphans(cluster: Cluster, topic: str) -> None:
    cluster.wait(lambda: not orphans(cluster, topic), 30,
                 f"no broker to keep a directory of {topic} it is not a replica of")


def move_replicas(cluster: Cluster, topics, leaving: int, joining: int) -> None:
    """Every replica of the topics' partitions on broker `leaving` moves to `joining`, in
    its place in the replica list (a reassignment of them all at once); returns once done."""
    moves = {(topic, p): [joining if r == leaving else r for r in info.replicas]
             for topic in topics for p, info in cluster.partitions(topic).items()}
    with Client(cluster.bootstrap_servers, call_timeout=60) as client:
        assert client.admin.alter_partition_reassignments(moves) == dict.fromkeys(moves)
    for (topic, p), replicas in moves.items():
        wait_until_reassigned(cluster, topic, p, tuple(replicas), timeout=120)
    print(f"{', '.join(topics)}: moved from broker {leaving} to broker {joining}")


def finish_and_verify(cluster: Cluster, topic: str, partitions: int, workload: Workload,
                      name: str, seed: int, preloaded: list[Acked] = ()) -> None:
    workload.finish()
    anomalies = verify(cluster, topic, partitions, [workload], test=name, seed=seed,
                       preloaded=preloaded)
    assert anomalies.clean, f"seed={seed}: {anomalies.summary()}: {anomalies.examples}"


@pytest.mark.parametrize("outcome", ["completed", "cancelled"])
def test_a_new_replica_killed_while_catching_up(tmp_path, zookeeper, seed, outcome, request):  # noqa: F811
    topic = f"caught-up-{outcome}"
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        kept, removed, added = roles(cluster)  # `added` is not the controller
        create_placed(cluster, topic, [[kept, removed]], {"min.insync.replicas": "2"})
        loaded = preload(cluster, topic, 0, PRELOAD_MB)
        size, _ = log_bytes(cluster.processes[kept].data_dir, topic, 0)
        workload = Workload(cluster.all_servers, topic, 1, seed=seed, rate=RATE, count=100_000).start()
        try:
            workload.wait_acked(100)
            with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                assert client.admin.alter_partition_reassignments({(topic, 0): [kept, added]}) == {
                    (topic, 0): None}
            new_replica = cluster.processes[added].data_dir

            def copying() -> bool:
                try:
                    return log_bytes(new_replica, topic, 0)[0] > 0
                except FileNotFoundError:
                    return False

            wait_for(copying, 60, f"broker {added} to start copying {topic}-0", interval=0.01)
            cluster.kill(added)
            copied, _ = log_bytes(new_replica, topic, 0)
            print(f"broker {added} killed with {copied} of {size} bytes copied")
            assert copied < size, "the new replica had caught up before it was killed"
            workload.wait_acked(100)  # min.insync.replicas=2 still met by the original replicas
            if outcome == "completed":
                cluster.restart(added)
                wait_until_reassigned(cluster, topic, 0, (kept, added), timeout=120)
            else:
                with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                    assert client.admin.alter_partition_reassignments({(topic, 0): None}) == {
                        (topic, 0): None}
                wait_until_reassigned(cluster, topic, 0, (kept, removed))
                assert cluster.partition_dirs(added, topic) == [f"{topic}-0"]  # left while down
                cluster.restart(added)
            cluster.wait_for_brokers()
            workload.wait_acked(100)
            wait_for_no_orphans(cluster, topic)
            finish_and_verify(cluster, topic, 1, workload, request.node.name, seed, loaded)
        finally:
            workload.abandon()


@pytest.mark.parametrize("old", ["another broker", "the controller"])
def test_the_old_leader_killed_once_the_leadership_moved(tmp_path, zookeeper, seed, monkeypatch,  # noqa: F811
                                                        old, request):
    topic = "old-leader-killed"
    leader = 0 if old == "the controller" else 2  # broker 0 is the controller
    kept, added = [b for b in (1, 2, 0) if b != leader][:2]
    cluster = Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES)
    workload = None
    try:
        for broker_id in (0, 1, 2):
            if broker_id == leader:  # it dies when told to delete its replica
                monkeypatch.setenv("SLUICE_FAILPOINTS", "replica-stop-before-delete")
            cluster.processes[broker_id].start()
            monkeypatch.delenv("SLUICE_FAILPOINTS", raising=False)
            if broker_id == 0:  # alone: it becomes the controller
                cluster.wait(lambda: getattr(cluster._try_metadata(0, []), "controller_id", None) == 0,
                             30, "broker 0 to become the controller")
        cluster.wait_for_brokers()
        create_placed(cluster, topic, [[leader, kept]], {"min.insync.replicas": "2"})
        assert cluster.leader_of(topic) == leader
        workload = Workload(cluster.all_servers, topic, 1, seed=seed, rate=RATE, count=100_000).start()
        workload.wait_acked(300)
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            assert client.admin.alter_partition_reassignments({(topic, 0): [kept, added]}) == {
                (topic, 0): None}
        wait_for(lambda: cluster.processes[leader].proc.poll() is not None, 60,
                 "the old leader to die at its fail point")
        cluster.kill(leader)  # reaped: out of bootstrap_servers and the waits
        assert "fail point replica-stop-before-delete reached" in cluster.output(leader, 200)
        wait_until_reassigned(cluster, topic, 0, (kept, added))
        assert cluster.leader_of(topic) == kept
        workload.wait_acked(300)
        assert cluster.partition_dirs(leader, topic) == [f"{topic}-0"]  # left as it died
        cluster.restart(leader)
        cluster.wait_for_brokers()
        wait_for_no_orphans(cluster, topic)
        finish_and_verify(cluster, topic, 1, workload, request.node.name, seed)
    finally:
        if workload is not None:
            workload.abandon()
        cluster.close()


def test_replication_factor_of_a_loaded_topic_grows_from_1_to_3_and_shrinks_to_2(
        tmp_path, zookeeper, seed, request):  # noqa: F811
    topic, partitions = "refactored-under-load", 3
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        create_placed(cluster, topic, [[p] for p in range(partitions)])
        loaded = preload(cluster, topic, 0, 5)
        workload = Workload(cluster.all_servers, topic, partitions, seed=seed, rate=RATE,
                            count=100_000).start()
        try:
            workload.wait_acked(200)
            grown = {(topic, p): [p, (p + 1) % 3, (p + 2) % 3] for p in range(partitions)}
            with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                assert client.admin.alter_partition_reassignments(grown) == dict.fromkeys(grown)
                for (_, p), replicas in grown.items():
                    wait_until_reassigned(cluster, topic, p, tuple(replicas), timeout=120)
                assert client.admin.incremental_alter_configs({(TOPIC_RESOURCE, topic): [
                    ("min.insync.replicas", SET_CONFIG, "2")]}) == {(TOPIC_RESOURCE, topic): None}
            workload.wait_acked(200)
            shrunk = {(topic, p): [(p + 1) % 3, (p + 2) % 3] for p in range(partitions)}
            with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                assert client.admin.alter_partition_reassignments(shrunk) == dict.fromkeys(shrunk)
                for (_, p), replicas in shrunk.items():
                    wait_until_reassigned(cluster, topic, p, tuple(replicas))
            assert all(cluster.leader_of(topic, p) == (p + 1) % 3 for p in range(partitions))
            workload.wait_acked(200)
            wait_for_no_orphans(cluster, topic)
            finish_and_verify(cluster, topic, partitions, workload, request.node.name, seed, loaded)
        finally:
            workload.abandon()


def test_partitions_move_onto_a_fourth_broker_and_back_under_a_mixed_group(tmp_path, zookeeper,  # noqa: F811
                                                                           seed, request):
    cluster = Cluster(tmp_path, zookeeper, brokers=4, properties=GROUP_PROPERTIES)
    run = None
    try:
        for broker_id in (0, 1, 2):
            cluster.processes[broker_id].start()
        cluster.wait_for_brokers()
        run = MixedGroup(cluster, seed, "scaled-out", members_in_order=True).start()
        run.workload.wait_acked(200)
        cluster.processes[3].start()
        cluster.wait_for_brokers()
        for leaving, joining in ((0, 3), (3, 0)):
            move_replicas(cluster, (run.topic, OFFSETS_TOPIC), leaving, joining)
            run.workload.wait_acked(200, timeout=60)
        run.check()
        for topic in (run.topic, OFFSETS_TOPIC):
            wait_for_no_orphans(cluster, topic)
    except AssertionError:
        for broker_id in cluster.ids:
            print(f"---- broker {broker_id}\n{cluster.output(broker_id, 80)}")
        raise
    finally:
        if run is not None:
            run.close()
        cluster.close()


# What a chaos round kills once its reassignments are under way.
KILLS = ("a broker adding a replica", "an old leader", "the controller", "nobody")


@pytest.mark.chaos
@pytest.mark.timeout(1800)
def test_reassignments_under_random_kills(tmp_path, zookeeper, seed, request):  # noqa: F811
    topic, partitions = "moved-by-chaos", 6
    rng = random.Random(seed)
    rounds = int(os.environ.get("SLUICE_CHAOS_ROUNDS") or 8)
    with Cluster(tmp_path, zookeeper, brokers=4, properties=PROPERTIES) as cluster:
        cluster.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_leaders(topic, full_isr=True)
        loaded = [a for p in range(partitions) for a in preload(cluster, topic, p, 5)]
        workload = Workload(cluster.all_servers, topic, partitions, seed=seed, rate=RATE,
                            count=1_000_000).start()
        try:
            for round_ in range(rounds):
                before = {p: info for p, info in cluster.partitions(topic).items()}
                targets = {p: rng.sample(cluster.ids, 3)
                           for p in rng.sample(range(partitions), rng.randint(1, partitions))}
                kill, cancel = rng.choice(KILLS), rng.random() < 0.3
                adding = sorted({b for p, t in targets.items() for b in t if b not in before[p].replicas})
                leaving = sorted({before[p].leader_id for p, t in targets.items()
                                  if before[p].leader_id not in t})
                victims = {"a broker adding a replica": adding, "an old leader": leaving,
                           "the controller": [cluster.controller_id()], "nobody": []}[kill]
                victim = rng.choice(victims) if victims else None
                at_once = victim is not None and rng.random() < 0.5
                print(f"round {round_}: {({p: t for p, t in sorted(targets.items())})}, kill {kill} "
                      f"({victim}{', restarted at once' if at_once else ''}){', cancel' if cancel else ''}")
                with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                    assert client.admin.alter_partition_reassignments(
                        {(topic, p): t for p, t in targets.items()}) == {(topic, p): None for p in targets}
                workload.wait_acked(rng.randrange(1, 150), timeout=60)
                if victim is not None:
                    cluster.kill(victim)
                cancelled = set()
                if cancel:
                    with Client(cluster.bootstrap_servers, call_timeout=60, retries=20) as client:
                        results = client.admin.alter_partition_reassignments({(topic, p): None for p in targets})
                    cancelled = {p for (_, p), error in results.items() if error is None}
                if at_once:  # it waits for ZooKeeper to drop its session itself
                    cluster.processes[victim].start(timeout=60)
                elif victim is not None:
                    cluster.restart(victim)
                cluster.wait_for_brokers()
                for p in range(partitions):
                    wanted = tuple(targets[p]) if p in targets and p not in cancelled else None
                    if wanted is not None:
                        wait_until_reassigned(cluster, topic, p, wanted, timeout=180)
                with Client(cluster.bootstrap_servers, call_timeout=60) as client:
                    cluster.wait(lambda: not client.admin.list_partition_reassignments(), 180,
                                 "every reassignment to be over")
                after = cluster.partitions(topic)
                for p in cancelled:
                    assert sorted(after[p].replicas) == sorted(before[p].replicas), (p, after[p])
                wait_for_no_orphans(cluster, topic)
                cluster.wait_for_leaders(topic, full_isr=True, timeout=120)
                workload.wait_acked(100, timeout=60)
            finish_and_verify(cluster, topic, partitions, workload, request.node.name, seed, loaded)
        finally:
            workload.abandon()
