"""Cluster mode's basics with real processes: three brokers on the module's ZooKeeper
(tests/cluster.py, a chroot per test).

- The brokers register (/brokers/ids), elect one controller (/controller), and every
  broker's Metadata lists all three and that controller.
- A broker in controlled shutdown, though it still fetches the partitions whose
  leadership it handed over, is taken back into no ISR until it has restarted (KIP-841).
- Replicas are placed as Kafka places them (broker/cluster/placement.py, for some start
  index and shift: Kafka draws them at random), preferred leaders lead, the ISR fills,
  and ZooKeeper holds the same assignment.
- Produce at acks=all through each broker and read everything back through each broker.
- Partitions added to followers' fetchers while their fetches wait at the leader in fetch
  sessions are fetched at once (acks=all waits out neither replica.fetch.wait.max.ms nor
  replica.lag.time.max.ms).
- kcat, kafka-python, aiokafka and confluent-kafka, with their default settings, follow a
  leader change (SIGKILL of the leader): producers and consumers created before it carry
  on after it.

Plus the verifier of the failure tests (tests/cluster.py's count_anomalies) on made-up
histories, so that a clean report means something.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import aiokafka
import confluent_kafka
import kafka
import pytest
from kazoo.protocol.states import EventType

from broker.cluster.placement import assign_rack_unaware
from broker.zookeeper.layout import BrokerRegistration, ControllerRegistration, Listener
from tests.cluster import (FAST_FAILOVER, Acked, Cluster, Read, Workload, count_anomalies,
                           pick_seed, read_all, verify)
from tests.log_files import log_bytes
from tests.test_broker_failures import (PRODUCE_VERSION, assert_closed_by_broker, connect, frame,
                                        produce_body, records_of)
from sluice_client import BrokerConnection
from wire.messages import CONTROLLED_SHUTDOWN, PRODUCE
from wire.records import build_batch

pytestmark = pytest.mark.timeout(180)

KCAT = shutil.which("kcat")
MIN_ISR = {"min.insync.replicas": "2"}


@pytest.fixture
def cluster(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper, brokers=3, properties=FAST_FAILOVER) as running:
        yield running


# -- the verifier ---------------------------------------------------------------------------

def test_the_verifier_counts_each_anomaly_by_name():
    acked = [Acked(0, 0, b"p-0"), Acked(0, 1, b"p-1"), Acked(1, 0, b"p-2"), Acked(0, 2, b"p-3")]
    clean = count_anomalies(acked, [Read(0, 0, b"p-0"), Read(0, 1, b"p-1"), Read(0, 2, b"p-3"),
                                    Read(1, 0, b"p-2")])
    assert clean.clean and clean.summary().endswith(
        "lost=0 duplicated=0 out_of_order=0 offsets_backwards=0 moved=0")

    lost = count_anomalies(acked, [Read(0, 0, b"p-0"), Read(0, 1, b"p-1"), Read(1, 0, b"p-2")])
    assert (lost.lost, lost.duplicated, lost.moved) == (1, 0, 0) and not lost.clean

    duplicated = count_anomalies(acked, [Read(0, 0, b"p-0"), Read(0, 1, b"p-1"), Read(0, 2, b"p-3"),
                                         Read(0, 3, b"p-3"), Read(1, 0, b"p-2")])
    assert (duplicated.duplicated, duplicated.lost) == (1, 0)

    reordered = count_anomalies(acked[:2], [Read(0, 0, b"p-1"), Read(0, 1, b"p-0")])
    assert reordered.out_of_order == 1 and reordered.moved == 2

    backwards_read = count_anomalies([], [Read(0, 5, b"p-0"), Read(0, 5, b"p-1")])
    assert backwards_read.offsets_backwards == 1
    two_producers = count_anomalies([Acked(0, 1, b"p-0"), Acked(0, 2, b"p-1"), Acked(0, 0, b"q-0")],
                                    [Read(0, 0, b"q-0"), Read(0, 1, b"p-0"), Read(0, 2, b"p-1")])
    assert two_producers.clean, two_producers.summary()
    backwards_acked = count_anomalies([Acked(0, 7, b"p-0"), Acked(0, 3, b"p-1")],
                                      [Read(0, 3, b"p-1"), Read(0, 7, b"p-0")])
    assert backwards_acked.offsets_backwards == 1 and backwards_acked.out_of_order == 1


# -- registration and the controller --------------------------------------------------------

def test_three_brokers_register_and_every_broker_names_the_controller(cluster, zk):
    controllers = set()
    for broker_id in cluster.ids:
        metadata = cluster.metadata(broker_id)
        assert sorted(metadata.brokers) == [0, 1, 2]
        for listed in metadata.brokers.values():
            assert (listed.host, listed.port) == ("127.0.0.1", cluster.processes[listed.node_id].port)
        controllers.add(metadata.controller_id)
    assert len(controllers) == 1 and controllers <= {0, 1, 2}, controllers
    (controller,) = controllers

    assert sorted(zk.get_children(f"{cluster.chroot}/brokers/ids"), key=int) == ["0", "1", "2"]
    for broker_id in cluster.ids:
        data, stat = zk.get(f"{cluster.chroot}/brokers/ids/{broker_id}")
        registration = json.loads(data)
        assert registration["endpoints"] == [
            f"PLAINTEXT://127.0.0.1:{cluster.processes[broker_id].port}"]
        assert stat.ephemeralOwner != 0
    data, _ = zk.get(f"{cluster.chroot}/controller")
    assert json.loads(data)["brokerid"] == controller
    data, _ = zk.get(f"{cluster.chroot}/controller_epoch")
    assert int(data) >= 1


def test_registrations_just_before_during_and_after_an_election_are_all_known(tmp_path, zookeeper, zk):
    """Every broker registered when or after a controller takes office is in every broker's
    Metadata, with a controller. The test holds /controller, so that no broker wins before
    it lets go; registrations land:
    - before: brokers 0 and 1, and stand-in broker 10 (a znode of the test's session, at a
      port refusing connections);
    - as the election starts: stand-in 11, in the ZooKeeper transaction that frees
      /controller, and broker 2, started at that moment;
    - during it: stand-in 12, as soon as the winner has written /controller, while it takes
      office (reads /brokers/ids and watches it);
    - after it: stand-in 13, once the brokers name the controller."""
    refusing = socket.socket()  # bound, never listening: the stand-ins' port refuses
    refusing.bind(("127.0.0.1", 0))
    stand_in = BrokerRegistration((Listener("PLAINTEXT", *refusing.getsockname()),), int(time.time() * 1000))
    cluster = Cluster(tmp_path, zookeeper, brokers=3, properties=FAST_FAILOVER)
    ids, controller = f"{cluster.chroot}/brokers/ids", f"{cluster.chroot}/controller"
    try:
        zk.ensure_path(ids)
        zk.create(controller, ControllerRegistration(99, 0).to_json(), ephemeral=True)
        cluster.processes[0].start()
        cluster.processes[1].start()
        zk.create(f"{ids}/10", stand_in.to_json(), ephemeral=True)
        election = zk.transaction()
        election.delete(controller)
        election.create(f"{ids}/11", stand_in.to_json(), ephemeral=True)
        assert election.commit() == [True, f"{ids}/11"]

        def register_at_the_win(event) -> None:
            if event.type == EventType.CREATED:
                zk.create_async(f"{ids}/12", stand_in.to_json(), ephemeral=True)

        if zk.exists(controller, watch=register_at_the_win) is not None:  # the winner was quicker
            zk.create(f"{ids}/12", stand_in.to_json(), ephemeral=True)
        cluster.processes[2].start()
        cluster.controller_id()
        zk.create(f"{ids}/13", stand_in.to_json(), ephemeral=True)
        cluster.wait_for_brokers(30, stand_ins=(10, 11, 12, 13))
    finally:
        cluster.close()
        refusing.close()


def test_a_broker_lists_brokers_before_the_controller_tells_it_of_any(tmp_path, zookeeper, zk):
    """Before the controller's first UpdateMetadata reaches it, a broker's Metadata lists
    itself (listening, its registration held up by a stand-in znode of the test's) and then
    the brokers registered in ZooKeeper; never no broker. The controller is paused
    meanwhile, so that no UpdateMetadata comes."""
    cluster = Cluster(tmp_path, zookeeper, brokers=3,
                      properties={**FAST_FAILOVER, "zookeeper.session.timeout.ms": "20000"})
    newcomer = cluster.processes[2]
    stand_in = f"{cluster.chroot}/brokers/ids/2"
    try:
        for broker_id in (0, 1):
            cluster.processes[broker_id].start()
        controller = cluster.controller_id()
        cluster.pause(controller)
        zk.create(stand_in, BrokerRegistration((Listener("PLAINTEXT", "127.0.0.1", newcomer.port),),
                                               int(time.time() * 1000)).to_json(), ephemeral=True)
        with ThreadPoolExecutor(1) as pool:
            started = pool.submit(newcomer.start, 60)
            first = cluster.wait(lambda: cluster._try_metadata(2, []), 30, "broker 2 to answer Metadata")
            assert (sorted(first.brokers), first.controller_id) == ([2], -1)
            assert (first.brokers[2].host, first.brokers[2].port) == ("127.0.0.1", newcomer.port)
            zk.delete(stand_in)
            started.result(60)  # registered
        registered = cluster.metadata(2, [])
        assert (sorted(registered.brokers), registered.controller_id) == ([0, 1, 2], -1)
        cluster.resume(controller)
        cluster.wait_for_brokers()
    finally:
        cluster.close()


def test_a_stopped_broker_leaves_metadata_and_comes_back(cluster):
    controller = cluster.controller_id()
    other = next(b for b in cluster.ids if b != controller)
    assert cluster.stop(other) == 0
    cluster.wait_for_brokers()
    assert sorted(cluster.metadata(controller).brokers) == sorted(set(cluster.ids) - {other})
    cluster.restart(other)
    cluster.wait_for_brokers()
    assert cluster.controller_id() == controller


async def ask_controlled_shutdown(cluster: Cluster, controller: int, broker_id: int, broker_epoch: int):
    connection = BrokerConnection("127.0.0.1", cluster.processes[controller].port,
                                  client_id=f"broker-{broker_id}-shutdown", request_timeout=30)
    try:
        return await connection.request(CONTROLLED_SHUTDOWN, 3, CONTROLLED_SHUTDOWN.request(
            broker_id=broker_id, broker_epoch=broker_epoch), negotiated=False)
    finally:
        await connection.close()


def test_a_broker_in_controlled_shutdown_is_not_taken_back_into_an_isr(cluster, zk):
    """Kafka's rule (KIP-841): a broker the controller took out of the ISRs for its
    controlled shutdown is let back into none, though it goes on fetching (as the
    follower of the partitions whose leadership it handed over) until it stops, and
    joins them again once it has restarted and caught up. Its ControlledShutdown is sent
    here on its behalf, as its SIGTERM sends it first, so that it fetches as long as the
    test needs; its SIGTERM then finishes the shutdown."""
    topic = "draining"
    cluster.create_topic(topic, 3, 3)
    cluster.wait_for_leaders(topic, full_isr=True)
    controller = cluster.controller_id()
    leaving = next(b for b in cluster.ids if b != controller)
    handed_over = [p for p, info in cluster.partitions(topic).items() if info.leader_id == leaving]
    assert handed_over, "each broker leads one partition of three"
    seen: list[tuple[int, tuple[int, ...]]] = []  # (partition, ISR) of each state the watches saw

    def watch(partition: int):
        def record(data, stat):
            if data:
                seen.append((partition, tuple(sorted(json.loads(data)["isr"]))))
        return record

    state = f"{cluster.chroot}/brokers/topics/{topic}/partitions/{{}}/state"
    for partition in range(3):
        zk.DataWatch(state.format(partition), watch(partition))
    epoch = zk.exists(f"{cluster.chroot}/brokers/ids/{leaving}").czxid
    answer = asyncio.run(ask_controlled_shutdown(cluster, controller, leaving, epoch))
    assert answer.error_code == 0 and answer.remaining_partitions == [], answer
    shrunk = len(seen)
    cluster.wait(lambda: all(leaving not in json.loads(zk.get(state.format(p))[0])["isr"]
                             for p in range(3)), 30, f"broker {leaving} to leave every ISR")

    # Records for the partitions it handed over reach its log: it fetches them from
    # their new leaders, up to their log end.
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                         "acks": "all", "message.timeout.ms": 60_000})
    errors = []
    for partition in handed_over:
        for i in range(20):
            producer.produce(topic, f"v{i}".encode(), partition=partition,
                             on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(60) == 0 and not errors, errors
    for partition in handed_over:
        leader = json.loads(zk.get(state.format(partition))[0])["leader"]
        cluster.wait(lambda: log_bytes(cluster.processes[leaving].data_dir, topic, partition)
                     == log_bytes(cluster.processes[leader].data_dir, topic, partition), 30,
                     f"broker {leaving} to fetch {topic}-{partition} up to its leader's end")

    assert cluster.stop(leaving) == 0
    restarting = len(seen)
    assert [isr for _, isr in seen[shrunk:restarting] if leaving in isr] == [], seen
    cluster.restart(leaving)
    cluster.wait_for_leaders(topic, full_isr=True)


# -- placement ------------------------------------------------------------------------------

@pytest.mark.parametrize("partitions, replication_factor", [(7, 3), (4, 2)])
def test_replicas_are_placed_as_kafka_places_them(cluster, zk, partitions, replication_factor):
    topic = f"placed-{partitions}-{replication_factor}"
    cluster.create_topic(topic, partitions, replication_factor)
    cluster.wait_for_leaders(topic, full_isr=True)
    replicas = {p: info.replicas for p, info in cluster.partitions(topic).items()}
    # Kafka draws the start index and the follower shift at random: one of the n * n
    # placements they give must be this one.
    candidates = [(start, shift) for start in range(3) for shift in range(3)
                  if assign_rack_unaware([0, 1, 2], partitions, replication_factor,
                                         start, shift) == replicas]
    assert candidates, f"no (start, shift) places {replicas}"
    for p, info in cluster.partitions(topic).items():
        assert info.leader_id == info.replicas[0], f"partition {p} not led by its preferred replica"
        assert sorted(info.isr) == sorted(info.replicas)
    # Each broker leads as many partitions as any other, give or take one.
    led = [sum(1 for r in replicas.values() if r[0] == b) for b in cluster.ids]
    assert max(led) - min(led) <= 1, led

    data, _ = zk.get(f"{cluster.chroot}/brokers/topics/{topic}")
    stored = json.loads(data)["partitions"]
    assert {int(p): tuple(r) for p, r in stored.items()} == replicas
    state, _ = zk.get(f"{cluster.chroot}/brokers/topics/{topic}/partitions/0/state")
    assert json.loads(state)["leader"] == replicas[0][0]


# -- produce and consume through every broker -----------------------------------------------

def test_produce_at_acks_all_and_consume_through_each_broker(cluster, request):
    seed = pick_seed()
    topic = "through-each"
    cluster.create_topic(topic, 3, 3, MIN_ISR)
    cluster.wait_for_leaders(topic, full_isr=True)
    workloads = [Workload(cluster.address(b), topic, 3, seed=seed, name=f"via{b}", rate=500,
                          count=60).start() for b in cluster.ids]
    for workload in workloads:
        workload.complete(60)
        assert workload.acked_count() == 60 and not workload.failed, workload.failed
    anomalies = verify(cluster, topic, 3, workloads, test=request.node.name, seed=seed)
    assert anomalies.clean and anomalies.read == 180, anomalies.summary()
    acked = [a for w in workloads for a in w.acked]
    for broker_id in cluster.ids:
        through = count_anomalies(acked, read_all(cluster.address(broker_id), topic, 3))
        assert through.clean and through.read == 180, (broker_id, through.summary())


def test_a_client_gone_while_acks_all_produces_wait_leaves_no_work_behind(cluster):
    """Two acks=all produces wait for a paused follower when the client sends its last byte:
    the broker drops both waits and closes, and no coroutine is left unawaited (the second
    one, never started, was once dropped without being closed)."""
    topic = "acks-all-abandoned"
    cluster.create_topic(topic, 1, 2)
    cluster.wait_for_leaders(topic, full_isr=True)
    leader = cluster.leader_of(topic)
    follower = next(b for b in cluster.isr_of(topic) if b != leader)
    cluster.pause(follower)
    try:
        sock = connect(cluster.processes[leader].port)
        for correlation_id in (1, 2):
            records = build_batch(records_of(1, f"waiting-{correlation_id}"))
            sock.sendall(frame(PRODUCE, PRODUCE_VERSION, produce_body(topic, 0, records), correlation_id))
        sock.shutdown(socket.SHUT_WR)
        assert_closed_by_broker(sock)
    finally:
        cluster.resume(follower)
    assert cluster.stop(leader) == 0
    output = "".join(cluster.processes[leader].output)
    assert "never awaited" not in output, output[-3000:]


def test_new_partitions_replicate_at_once_into_open_fetch_sessions(tmp_path, zookeeper):
    """Followers long-poll their leaders for 30 s in fetch sessions, and stay in the ISR for
    30 s behind: partitions created meanwhile (a follower may hear of them before their
    leader does, and be told they are unknown) still replicate at once, so acks=all
    answers long before either."""
    with Cluster(tmp_path, zookeeper, brokers=3,
                 properties={**FAST_FAILOVER, "replica.fetch.wait.max.ms": "30000",
                             "replica.lag.time.max.ms": "30000"}) as cluster:
        cluster.create_topic("waiting", 3, 3)  # every broker leads one: every fetcher waits
        cluster.wait_for_leaders("waiting", full_isr=True)
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                             "acks": "all", "message.timeout.ms": 60_000})
        for round_ in range(3):
            topic = f"added-{round_}"
            cluster.create_topic(topic, 8, 3, {"min.insync.replicas": "3"})
            cluster.wait_for_leaders(topic)
            errors = []
            started = time.monotonic()
            for partition in range(8):
                producer.produce(topic, b"v", partition=partition,
                                 on_delivery=lambda err, msg: err and errors.append(err))
            assert producer.flush(60) == 0 and not errors, errors
            assert time.monotonic() - started < 15, f"{topic}: acks=all waited for a follower"


# -- clients follow a leader change ---------------------------------------------------------

def kcat_produce(servers: str, topic: str, value: str) -> None:
    done = subprocess.run([KCAT, "-b", servers, "-P", "-t", topic, "-p", "0", "-X", "acks=all"],
                          input=value.encode() + b"\n", capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def kcat_read(servers: str, topic: str) -> list[bytes]:
    done = subprocess.run([KCAT, "-b", servers, "-C", "-t", topic, "-p", "0", "-o", "beginning",
                           "-e", "-q", "-f", "%s\n"], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.splitlines()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_every_client_follows_a_leader_change(cluster):
    topic = "follow"
    cluster.create_topic(topic, 1, 3, MIN_ISR)
    cluster.wait_for_leaders(topic, full_isr=True)
    servers = cluster.all_servers
    loop = asyncio.new_event_loop()
    confluent_producer = confluent_kafka.Producer({"bootstrap.servers": servers, "acks": "all"})
    kp_producer = kafka.KafkaProducer(bootstrap_servers=servers, acks="all")
    confluent_consumer = confluent_kafka.Consumer({"bootstrap.servers": servers,
                                                   "group.id": "unused", "enable.auto.commit": False})
    kp_consumer = kafka.KafkaConsumer(bootstrap_servers=servers, group_id=None,
                                      enable_auto_commit=False)

    async def aiokafka_clients():  # made on the loop they run on
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=servers, acks="all")
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=servers, group_id=None,
                                             enable_auto_commit=False)
        await producer.start()
        await consumer.start()
        consumer.assign([aiokafka.TopicPartition(topic, 0)])
        await consumer.seek_to_beginning()
        return producer, consumer

    aio_producer, aio_consumer = loop.run_until_complete(aiokafka_clients())
    read: dict[str, list[bytes]] = {"confluent": [], "kafka-python": [], "aiokafka": []}

    def produce_all(phase: str) -> None:
        errors = []
        confluent_producer.produce(topic, f"confluent-{phase}".encode(), partition=0,
                                   on_delivery=lambda err, msg: err and errors.append(err))
        assert confluent_producer.flush(60) == 0 and not errors, errors
        kp_producer.send(topic, f"kafka-python-{phase}".encode(), partition=0).get(timeout=60)
        loop.run_until_complete(asyncio.wait_for(
            aio_producer.send_and_wait(topic, f"aiokafka-{phase}".encode(), partition=0), 60))
        kcat_produce(servers, topic, f"kcat-{phase}")

    def consume_until(count: int) -> None:
        deadline = time.monotonic() + 60
        while any(len(values) < count for values in read.values()):
            assert time.monotonic() < deadline, {k: len(v) for k, v in read.items()}
            for message in confluent_consumer.consume(100, 0.2):
                if message.error() is None:
                    read["confluent"].append(message.value())
            for records in kp_consumer.poll(timeout_ms=200).values():
                read["kafka-python"] += [r.value for r in records]
            batches = loop.run_until_complete(aio_consumer.getmany(timeout_ms=200))
            for records in batches.values():
                read["aiokafka"] += [r.value for r in records]

    try:
        confluent_consumer.assign([confluent_kafka.TopicPartition(topic, 0,
                                                                  confluent_kafka.OFFSET_BEGINNING)])
        kp_consumer.assign([kafka.TopicPartition(topic, 0)])
        kp_consumer.seek_to_beginning()

        produce_all("before")
        consume_until(4)
        leader = cluster.leader_of(topic)
        cluster.kill(leader)
        cluster.wait_for_leaders(topic)
        assert cluster.leader_of(topic) != leader
        produce_all("after")
        consume_until(8)
    finally:
        confluent_producer.flush(5)
        kp_producer.close(timeout=5)
        confluent_consumer.close()
        kp_consumer.close(autocommit=False)
        loop.run_until_complete(aio_producer.stop())
        loop.run_until_complete(aio_consumer.stop())
        loop.close()

    expected = [f"{client}-{phase}".encode() for phase in ("before", "after")
                for client in ("confluent", "kafka-python", "aiokafka", "kcat")]
    for client, values in read.items():
        assert values == expected, client
    assert kcat_read(cluster.bootstrap_servers, topic) == expected
