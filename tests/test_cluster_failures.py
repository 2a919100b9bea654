"""Three brokers under failure (tests/cluster.py): a topic of 3 partitions, replication
factor 3, min.insync.replicas=2, written by two idempotent confluent-kafka producers at
acks=all throughout the fault and read back whole at the end by a fresh consumer. Every
case must count 0 lost, 0 duplicated, 0 out of order, 0 offsets going backwards (and 0
acknowledged at one offset but read at another); the counts are printed with the test's
name and the seed of its random choices (SLUICE_SEED=<seed> replays them).

- SIGKILL the leader of the busiest partition; SIGKILL the controller.
- SIGKILL a follower: the ISR shrinks (replica.lag.time.max.ms), and grows back once the
  restarted follower has caught up.
- SIGSTOP the leader past its ZooKeeper session: others take over; after SIGCONT the
  zombie is fenced (its ISR writes fail on the znode's version, its followers are gone)
  and rejoins as a follower, truncating what it never had acknowledged.
- A rolling restart with controlled shutdown (SIGTERM): each broker hands its
  leaderships over before it exits.
- ZooKeeper stopped for 10 s: the brokers keep serving the leaders they have, nothing
  exits, and all resumes (new topics, leader changes) once it is back.
- Unclean election off: with every ISR member dead the partition stays offline, even
  with the other replicas up, and comes back with all acknowledged data when an ISR
  member returns.

The sessions are short (tests/cluster.py's FAST_FAILOVER: 6 s ZooKeeper session, 3 s
replica lag), so each case takes 10-25 s. Marked `chaos`, left to `make chaos` to keep
`make test` within its time: the rolling restart, the ZooKeeper outage and the offline
partition (the longest cases), and rounds of faults drawn at random from all of the above
(SLUICE_CHAOS_ROUNDS, default 12), minutes long.
"""

from __future__ import annotations

import collections
import os
import random
import time

import pytest

from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed, verify
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(240)

TOPIC = "events"
PARTITIONS = 3
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
RATE = 150  # values a second per producer
PROGRESS = 100  # acknowledgements that show the producers moving


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper, brokers=3, properties={
            **FAST_FAILOVER, "unclean.leader.election.enable": "false"}) as running:
        yield running


@pytest.fixture
def seed(request):
    value = pick_seed()
    print(f"{request.node.name} seed={value}")
    return value


@pytest.fixture
def start_run(cluster, seed, request):
    """Run(...) for this test's cluster and seed; its producers stop at teardown whatever
    happened."""
    runs = []

    def start(**options) -> Run:
        runs.append(Run(cluster, seed, request.node.name, **options))
        return runs[-1]

    yield start
    for run in runs:
        for workload in run.workloads:
            workload.abandon()


class Run:
    """The topic and its two producers, started; `check()` finishes them and asserts a
    clean read-back."""

    def __init__(self, cluster: Cluster, seed: int, name: str, topic: str = TOPIC,
                 partitions: int = PARTITIONS):
        self.cluster, self.seed, self.name = cluster, seed, name
        self.topic, self.partitions = topic, partitions
        self.rng = random.Random(seed)
        cluster.create_topic(topic, partitions, 3, TOPIC_CONFIGS)
        cluster.wait_for_leaders(topic, full_isr=True)
        self.workloads = [Workload(cluster.all_servers, topic, partitions, seed=seed,
                                   name=f"p{i}", rate=RATE, count=RATE * 1800).start()
                          for i in range(2)]
        self.progress()

    def progress(self, count: int = PROGRESS, timeout: float = 60.0) -> None:
        for workload in self.workloads:
            workload.wait_acked(count, timeout)

    def acked_count(self) -> int:
        return sum(w.acked_count() for w in self.workloads)

    def busiest_partition(self) -> int:
        counts = collections.Counter(a.partition for w in self.workloads for a in list(w.acked))
        return max(range(self.partitions), key=lambda p: (counts[p], -p))

    def check(self) -> None:
        for workload in self.workloads:
            workload.finish()
        anomalies = verify(self.cluster, self.topic, self.partitions, self.workloads,
                           test=self.name, seed=self.seed)
        assert anomalies.clean, f"seed={self.seed}: {anomalies.summary()}: {anomalies.examples}"
        assert anomalies.acknowledged >= 2 * PROGRESS


def test_sigkill_the_leader_of_the_busiest_partition(cluster, start_run):
    run = start_run()
    partition = run.busiest_partition()
    leader = cluster.leader_of(TOPIC, partition)
    cluster.kill(leader)
    cluster.wait_for_leaders(TOPIC)
    assert cluster.leader_of(TOPIC, partition) != leader
    run.progress()
    cluster.restart(leader)
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.progress()
    run.check()


def test_sigkill_the_controller(cluster, start_run):
    run = start_run()
    controller = cluster.controller_id()
    cluster.kill(controller)
    successor = cluster.controller_id()
    assert successor != controller
    cluster.wait_for_leaders(TOPIC)
    run.progress()
    # The new controller acts: it places and leads a new topic.
    cluster.create_topic("after-failover", 2, 2)
    cluster.restart(controller)
    cluster.wait_for_brokers()
    assert cluster.controller_id() == successor, "a returning broker took the controller back"
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.progress()
    run.check()


def test_sigkill_a_follower_then_restart_it(cluster, start_run):
    run = start_run()
    partition = run.busiest_partition()
    info = cluster.partitions(TOPIC)[partition]
    follower = run.rng.choice(sorted(set(info.replicas) - {info.leader_id}))
    cluster.kill(follower)
    cluster.wait_for_isr(TOPIC, partition, set(info.replicas) - {follower}, timeout=30)
    run.progress()  # two of three in the ISR: min.insync.replicas=2 still met
    cluster.restart(follower)
    cluster.wait_for_isr(TOPIC, partition, info.replicas, timeout=60)
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.progress()
    run.check()


def test_sigstop_the_leader_past_its_session_then_sigcont(cluster, start_run):
    run = start_run()
    partition = run.busiest_partition()
    leader = cluster.leader_of(TOPIC, partition)
    cluster.pause(leader)
    try:
        cluster.wait_for_brokers(timeout=60)  # its session expired: the others dropped it
        cluster.wait_for_leaders(TOPIC)
        assert cluster.leader_of(TOPIC, partition) != leader
        run.progress()
    finally:
        cluster.resume(leader)
    # The zombie wakes with requests in flight; it must acknowledge none of them alone.
    cluster.wait_for_brokers(timeout=60)
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.progress()
    run.check()


@pytest.mark.chaos
def test_a_rolling_restart_with_controlled_shutdown(cluster, start_run):
    run = start_run()
    for broker_id in run.rng.sample(cluster.ids, len(cluster.ids)):
        started = time.monotonic()
        assert cluster.stop(broker_id) == 0, cluster.output(broker_id)
        # Controlled shutdown moved the leaderships before the exit: they are live already.
        cluster.wait_for_leaders(TOPIC, timeout=10)
        print(f"broker {broker_id} stopped and its leaderships moved in "
              f"{time.monotonic() - started:.1f} s")
        run.progress(PROGRESS // 2)
        cluster.restart(broker_id)
        cluster.wait_for_brokers()
        cluster.wait_for_leaders(TOPIC, full_isr=True)
        run.progress(PROGRESS // 2)
    run.check()


@pytest.mark.chaos
def test_zookeeper_stopped_for_ten_seconds(cluster, zookeeper, start_run):
    run = start_run()
    leaders = {p: info.leader_id for p, info in cluster.partitions(TOPIC).items()}
    zookeeper.stop()
    outage_end = time.monotonic() + 10
    try:
        acked_before = run.acked_count()
        # The leaders keep serving without ZooKeeper: the ISR is full, nothing to change.
        cluster.wait(lambda: time.monotonic() >= outage_end
                     and run.acked_count() > acked_before + PROGRESS, 20,
                     f"the outage to last 10 s with over {PROGRESS} acknowledgements "
                     f"(from {acked_before})")
        for broker_id in cluster.ids:
            assert cluster.processes[broker_id].proc.poll() is None, cluster.output(broker_id)
        during = {p: i.leader_id for p, i in cluster.partitions(TOPIC).items()}
        assert during == leaders, f"leaders moved without ZooKeeper: {leaders} -> {during}"
    finally:
        zookeeper.start()
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.progress()
    cluster.create_topic("after-outage", 1, 3)
    # And the controller still moves leaders: kill one.
    cluster.kill(leaders[0])
    cluster.wait_for_leaders(TOPIC)
    run.progress()
    cluster.restart(leaders[0])
    cluster.wait_for_leaders(TOPIC, full_isr=True)
    run.check()


@pytest.mark.chaos
def test_with_unclean_election_off_a_partition_without_isr_stays_offline(cluster, start_run):
    topic = "fragile"
    run = start_run(topic=topic, partitions=1)
    info = cluster.partitions(topic)[0]
    leader = info.leader_id
    followers = sorted(set(info.replicas) - {leader})
    for follower in followers:
        cluster.kill(follower)
    cluster.wait_for_isr(topic, 0, [leader], timeout=60)
    acked = run.acked_count()
    cluster.kill(leader)  # every ISR member is gone now
    for follower in followers:
        cluster.restart(follower)
    cluster.wait_for_brokers()

    def offline() -> bool:
        try:
            return cluster.partitions(topic)[0].leader_id == -1
        except (AssertionError, OSError, TimeoutError):
            return False
    wait_for(offline, 30, f"{topic}-0 to be reported without a leader")
    # Observed for a while: neither out-of-sync replica is elected, whatever the time.
    observe_until = time.monotonic() + 8
    while time.monotonic() < observe_until:
        for broker_id in cluster.live:
            partition = cluster.partitions(topic, via=broker_id)[0]
            assert partition.leader_id == -1, (broker_id, partition)
        time.sleep(0.5)
    assert run.acked_count() == acked, "acknowledged while no ISR member was up"

    cluster.restart(leader)
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(topic, full_isr=True)
    assert cluster.leader_of(topic) == leader
    run.progress()
    run.check()


FAULTS = ("kill the leader", "kill a follower", "kill the controller", "stop a broker",
          "pause the leader past its session", "restart ZooKeeper")


@pytest.mark.chaos
@pytest.mark.timeout(1800)
def test_random_faults(cluster, zookeeper, start_run):
    """Rounds of one fault each, drawn with the seed, each undone before the next: the
    broker brought back, the ISR full again, the producers moving."""
    run = start_run()
    rounds = int(os.environ.get("SLUICE_CHAOS_ROUNDS", "12"))
    for round_number in range(rounds):
        fault = run.rng.choice(FAULTS)
        partition = run.rng.randrange(PARTITIONS)
        info = cluster.partitions(TOPIC)[partition]
        print(f"round {round_number}: {fault} (partition {partition}: leader {info.leader_id}, "
              f"isr {sorted(info.isr)})")
        if fault == "kill the leader":
            cluster.kill(info.leader_id)
            cluster.wait_for_leaders(TOPIC)
            run.progress(PROGRESS // 2)
            cluster.restart(info.leader_id)
        elif fault == "kill a follower":
            follower = run.rng.choice(sorted(set(info.replicas) - {info.leader_id}))
            cluster.kill(follower)
            cluster.wait_for_isr(TOPIC, partition, set(info.replicas) - {follower})
            run.progress(PROGRESS // 2)
            cluster.restart(follower)
        elif fault == "kill the controller":
            controller = cluster.controller_id()
            cluster.kill(controller)
            assert cluster.controller_id() != controller
            cluster.wait_for_leaders(TOPIC)
            run.progress(PROGRESS // 2)
            cluster.restart(controller)
        elif fault == "stop a broker":
            broker_id = run.rng.choice(cluster.ids)
            assert cluster.stop(broker_id) == 0, cluster.output(broker_id)
            cluster.wait_for_leaders(TOPIC, timeout=10)
            run.progress(PROGRESS // 2)
            cluster.restart(broker_id)
        elif fault == "pause the leader past its session":
            cluster.pause(info.leader_id)
            try:
                cluster.wait_for_brokers()
                cluster.wait_for_leaders(TOPIC)
                run.progress(PROGRESS // 2)
            finally:
                cluster.resume(info.leader_id)
        else:
            zookeeper.stop()
            try:
                run.progress(PROGRESS // 2)
            finally:
                zookeeper.start()
        cluster.wait_for_brokers()
        cluster.wait_for_leaders(TOPIC, full_isr=True)
        run.progress(PROGRESS // 2)
    run.check()
