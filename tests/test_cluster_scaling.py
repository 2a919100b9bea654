"""Retiring a broker of a real 4-broker cluster (tests/cluster.py) with `sluice reassign
--decommission BROKER --wait` while clients run, then stopping it.

The broker retired leads a partition of the topic being written and read, and partitions
of `__consumer_offsets` and `__transaction_state` (it is the coordinator of the consumer
group and of the transactional copier). The brokers sit on two racks: every partition
keeps a replica on each, also those of two replicas whose replica moves to the busiest
broker for that. Meanwhile an idempotent producer writes at acks=all
(min.insync.replicas=2), a group of a confluent-kafka and a kafka-python member consumes
and commits, and a consume-transform-produce copier commits transactions with its
offsets (tests/test_cluster_transactions.py's Copier). The command moves every replica
off the broker, elects the preferred leaders and says it can be stopped; the broker keeps
no partition directory; run again, the command finds nothing left to move. Then the
broker is stopped (SIGTERM) and the clients go on. Counted and printed, all 0: records
lost, duplicated, reordered or moved (the producer's acknowledgements against the topic
read back), acknowledged records no member processed, commits lost or going backwards,
and the copy's lost, duplicated and aborted reads. The group stays stable: no member
sees its partitions revoked or assigned again.
"""

from __future__ import annotations

import pytest

from broker.cluster.metadata import COORDINATOR_TOPICS
from tests.support.polling import wait_for
from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed, verify
from tests.test_cluster_admin import sluice
from tests.test_cluster_groups import OffsetSampler, acknowledged_commits, close_member, lost_commits
from tests.test_cluster_reassignment import create_placed
from tests.test_cluster_transactions import (COPY_CLEAN, COPY_PARTITIONS, GROUP_KEY, TXN_KEY, Copier,
                                             coordinated_by, coordinator_of, unique)
from tests.test_groups import Worker, wait_stable
from sluice_client import Client

pytestmark = pytest.mark.timeout(400)

PROPERTIES = {**FAST_FAILOVER, "auto.leader.rebalance.enable": "false",
              "group.initial.rebalance.delay.ms": "0",
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
SESSION_MS = 10_000
RACKS = {0: "rack-a", 1: "rack-a", 2: "rack-b", 3: "rack-b"}  # broker.rack of each broker


def test_a_broker_retired_while_groups_commit_and_transactions_run_stops_with_nothing_lost(
        tmp_path, zookeeper):
    seed = pick_seed()
    cluster = Cluster(tmp_path, zookeeper, brokers=4, properties=PROPERTIES)
    for broker_id, process in cluster.processes.items():
        with open(process.config_file, "a") as config:
            config.write(f"broker.rack={RACKS[broker_id]}\n")
    with cluster:
        for key_type, topic in COORDINATOR_TOPICS.items():
            coordinator_of(cluster, "probe", key_type=key_type)  # creates the topic
            cluster.wait_for_leaders(topic, full_isr=True)
        # A broker leading partitions of both coordinator topics; not the controller if one
        # such is not (stopping the controller would test a failover besides).
        leading = set.intersection(*({info.leader_id for info in cluster.partitions(topic).values()}
                                     for topic in COORDINATOR_TOPICS.values()))
        retired = min(leading - {cluster.controller_id()}, default=min(leading))
        first, second, third = (b for b in cluster.ids if b != retired)
        group, copier_group = (coordinated_by(cluster, retired, GROUP_KEY) for _ in range(2))
        txn_id = coordinated_by(cluster, retired, TXN_KEY)
        source, sink = unique("retire-in"), unique("retire-out")
        create_placed(cluster, source, [[retired, first, second], [first, retired, third],
                                        [second, third, retired]], {"min.insync.replicas": "2"})
        cluster.create_topic(sink, COPY_PARTITIONS, 3, {"min.insync.replicas": "2"})
        # Pairs across the racks, whose replica on the retired broker can stay on a rack of
        # its own only by going to its rack partner, the broker holding the most replicas.
        partner = next(b for b in cluster.ids if b != retired and RACKS[b] == RACKS[retired])
        across = [b for b in cluster.ids if RACKS[b] != RACKS[retired]]
        pairs, ballast = unique("pairs"), unique("ballast")
        create_placed(cluster, pairs, [[retired, across[0]], [across[1], retired]])
        create_placed(cluster, ballast, [[partner]] * 8)

        bootstrap = cluster.all_servers
        workload = Workload(bootstrap, source, COPY_PARTITIONS, seed=seed, rate=100, count=100_000)
        workers = [Worker(kind, bootstrap, group, source, kind, SESSION_MS)
                   for kind in ("confluent", "kafka-python")]
        copier = Copier(cluster, source, sink, txn_id, expected=10**9, group=copier_group, timeout=300)
        sampler = OffsetSampler(bootstrap, group)
        watcher = Client(bootstrap, retries=200, retry_timeout=90, request_timeout=5)
        try:
            workload.start()
            copier.start()
            wait_stable(watcher, group, source, COPY_PARTITIONS, workers, timeout=60)
            sampler.start()
            workload.wait_acked(200, timeout=60)
            copier.wait_copied(100, 120)
            callbacks = {w.name: list(w.callbacks) for w in workers}
            copied = copier.copied

            done = sluice("reassign", "--bootstrap-server", cluster.bootstrap_servers,
                          "--decommission", str(retired), "--wait", timeout=300)
            print(done.stdout)
            assert done.returncode == 0, done
            assert (f"Broker {retired} holds no replica and leads no partition: it can be stopped "
                    "now") in done.stdout
            for topic in (source, sink, pairs, *COORDINATOR_TOPICS.values()):
                for partition, info in cluster.partitions(topic).items():
                    assert retired not in info.replicas, (topic, partition, info)
                    assert len(info.replicas) == (2 if topic == pairs else 3), (topic, partition, info)
                    assert {RACKS[b] for b in info.replicas} == set(RACKS.values()), (topic, partition, info)
                    assert info.leader_id == info.replicas[0], (topic, partition, info)  # elected
                cluster.wait(lambda: cluster.partition_dirs(retired, topic) == [], 30,
                             f"broker {retired} to delete its replicas of {topic}")
            copier.wait_copied(copied + 100, 120)  # transactions went on across the moves
            again = sluice("reassign", "--bootstrap-server", cluster.bootstrap_servers,
                           "--decommission", str(retired), "--wait", timeout=120)
            assert again.returncode == 0, again
            assert again.stdout.startswith(f"No partition is to be moved off broker {retired} any more.\n")
            assert "it can be stopped now" in again.stdout and "Successfully started" not in again.stdout

            assert cluster.stop(retired) == 0
            cluster.wait_for_brokers()
            workload.wait_acked(200, timeout=60)
            copier.wait_copied(copier.copied + 100, 120)
            wait_stable(watcher, group, source, COPY_PARTITIONS, workers, timeout=60)
            assert {w.name: w.callbacks for w in workers} == callbacks, "the group rebalanced"

            workload.finish(60)
            inputs = [a.value for a in workload.acked]
            copier.expected = len(inputs)
            copier.finish()
            acked = {value.decode() for value in inputs}
            wait_for(lambda: acked <= {i for w in workers for i in w.ids()}, 60,
                     "every acknowledged record to be processed by the group", interval=0.5)
            for w in workers:
                close_member(w)
            sampler.stop()
            lost = lost_commits(acknowledged_commits(workers), sampler.record(watcher.consumer.fetch_offsets(group)),
                                source)
            anomalies = verify(cluster, source, COPY_PARTITIONS, [workload], test="broker retired", seed=seed)
            copy = copier.anomalies("copy across a broker retired", inputs, seed)
            processed = {i for w in workers for i in w.ids()}
            print(f"broker {retired} retired: not processed={len(acked - processed)} "
                  f"lost_commits={len(lost)} commits_backwards={len(sampler.backwards)}")
            assert anomalies.clean, anomalies.summary()
            assert copy == COPY_CLEAN
            assert (acked - processed, lost, sampler.backwards) == (set(), [], [])
        finally:
            workload.abandon()
            sampler.stop()
            watcher.close()
            for w in workers:
                w.kill()
