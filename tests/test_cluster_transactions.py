"""Transactions on three brokers (real ZooKeeper, real broker processes, real clients).

- A confluent-kafka transactional producer commits and aborts transactions over an
  RF=3 topic whose partitions are led by all three brokers: the coordinator writes its
  markers locally and with WriteTxnMarkers to the other leaders. A read_committed
  reader (kafka-python) sees exactly the committed records: the anomalies lost,
  duplicated and aborted read are counted, printed, and 0. Only the coordinator
  answers for the transactional id (DescribeTransactions, ListTransactions); the others
  say NOT_COORDINATOR.
- Fencing without the coordinator on the produce path (the leaders do not ask it,
  Kafka's behaviour without KIP-890): a second producer with the same transactional.id
  aborts the first one's open transaction; the first one's records are never read.
- EndTxn is answered before the markers, as Kafka answers it: commit_transaction()
  returns while a partition's leader is paused (SIGSTOP) and its marker waits; until it
  is written the id's requests get CONCURRENT_TRANSACTIONS, and confluent-kafka's next
  transaction retries through that and commits once the leader resumes. The markers of
  transactions ending meanwhile go to the paused broker together, in one request. With
  add.partitions.to.txn.retry.backoff.max.ms longer than the pause, the next
  AddPartitionsToTxn is held until the marker is written, and succeeds.
- Consume -> transform -> produce with send_offsets_to_transaction, copying a topic
  while the transaction coordinator's broker dies (SIGKILL, by the fail point right
  after PrepareCommit is committed): the new coordinator completes the prepared
  transaction, and output == input exactly once as two independent read_committed
  consumers (confluent-kafka, kafka-python) read it: lost, duplicated, aborted reads,
  non-monotonic offsets and inconsistent offsets between consumers all 0. A marker with the old coordinator epoch is then refused
  (TRANSACTION_COORDINATOR_FENCED). The same copy by Kafka's Java client 4.4, which uses
  transactions v2 (its produces and offset commits add their partitions through the
  leaders and the group coordinator, its EndTxn bumps the epoch): exactly once too.
- `chaos`: the same copy under random SIGKILLs of the coordinator, of a partition
  leader and of the controller (seed printed; SLUICE_SEED replays it); rounds in which
  the coordinator dies right after answering EndTxn, before any marker (fail point
  txn-after-prepare-before-markers), its successor completing the transaction: lost,
  duplicated, aborted reads and partial transactions all 0; and across the
  SIGKILL of the group's coordinator, left down, which makes librdkafka's
  send_offsets_to_transaction hang (#5511): the copier replaces that producer.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import queue
import random
import subprocess
import threading
import time
import uuid

import pytest

from broker.cluster.metadata import COORDINATOR_TOPICS
from broker.coordinator_runtime import partition_for
from sluice import maven
from tests.anomalies import INCONSISTENT, NON_MONOTONIC, offset_anomalies, read_by_two
from tests.cluster import FAST_FAILOVER, Cluster, pick_seed
from tests.support.polling import wait_for
from tests.test_java_clients import PROJECT as JAVA_PROJECT
from tests.test_metrics import requests_answered
from tests.test_transactions import Raw
from sluice_client import PREFERRED_ELECTION, Client
from wire.error_codes import ErrorCode
from wire.messages import (ADD_OFFSETS_TO_TXN, DESCRIBE_TRANSACTIONS, FIND_COORDINATOR,
                           LIST_TRANSACTIONS, WRITE_TXN_MARKERS)

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.timeout(240)

GROUP_KEY, TXN_KEY = 0, 1  # FindCoordinator's key types
TXN_STATE = COORDINATOR_TOPICS[TXN_KEY]
PROPERTIES = {**FAST_FAILOVER,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
              "group.initial.rebalance.delay.ms": "0"}


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    with Cluster(tmp_path_factory.mktemp("txn-cluster"), zookeeper, brokers=3,
                 properties=PROPERTIES) as running:
        yield running


def raw(cluster: Cluster, broker_id: int) -> Raw:
    return Raw(int(cluster.address(broker_id).rsplit(":", 1)[1]))


def coordinator_of(cluster: Cluster, key: str, timeout: float = 60.0, key_type: int = TXN_KEY) -> int:
    """The broker FindCoordinator names for the transactional id (or group id, key type
    GROUP_KEY), creating `__transaction_state` (`__consumer_offsets`) on the first lookup."""
    def found():
        conn = raw(cluster, cluster.live[0])
        try:
            answer = conn.call(FIND_COORDINATOR, 3, key=key, key_type=key_type)
        finally:
            conn.close()
        return [answer.node_id] if answer.error_code == 0 and answer.node_id in cluster.live else None

    return cluster.wait(found, timeout, f"a live coordinator for {key!r}")[0]


def read_committed(cluster: Cluster, topic: str, partitions: int, expect: int,
                   timeout: float = 60.0) -> list[bytes]:
    """Every value of the topic a read_committed reader (kafka-python, no group) gets:
    until each partition's last stable offset is reached and `expect` values arrived."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=cluster.bootstrap_servers.split(","),
                                   group_id=None, isolation_level="read_committed",
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    got: list[bytes] = []
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200)
            got += [r.value for records in batch.values() for r in records]
            ends = consumer.end_offsets(tps)  # the last stable offsets (read_committed)
            if len(got) >= expect and all(consumer.position(tp) >= ends[tp] for tp in tps):
                break
    finally:
        consumer.close(autocommit=False)
    return got


def count_anomalies(test: str, expected: list[bytes], aborted: set[bytes], read: list[bytes],
                    seed: int | None = None) -> dict:
    counts = collections.Counter(read)
    anomalies = {"lost": sum(1 for v in set(expected) if counts[v] == 0),
                 "duplicated": sum(n - 1 for v, n in counts.items() if n > 1),
                 "aborted reads": sum(counts[v] for v in aborted),
                 "unexpected": sum(n for v, n in counts.items() if v not in set(expected) | aborted)}
    print(f"{test}{'' if seed is None else f' seed={seed}'}: read {len(read)} of {len(expected)}; "
          + ", ".join(f"{name} {n}" for name, n in anomalies.items()))
    return anomalies


# -- commit and abort across three leaders ---------------------------------------------

def test_commits_and_aborts_over_partitions_led_by_every_broker(cluster):
    topic = unique("txn-spread")
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_leaders(topic, full_isr=True)
    leaders = {p: info.leader_id for p, info in cluster.partitions(topic).items()}
    assert set(leaders.values()) == set(cluster.ids), leaders
    txn_id = unique("spread")
    coordinator = coordinator_of(cluster, txn_id)
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                            "linger.ms": 5})
    producer.init_transactions(60)
    committed, aborted = [], set()
    for n in range(8):
        values = [f"{n}-{i}".encode() for i in range(18)]
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % 6)
        if n % 3 == 2:
            assert producer.flush(30) == 0
            producer.abort_transaction(30)
            aborted.update(values)
        else:
            producer.commit_transaction(30)
            committed += values
    producer.flush(10)
    anomalies = count_anomalies("commit/abort over 3 leaders", committed, aborted,
                                read_committed(cluster, topic, 6, len(committed)))
    assert anomalies == {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0}

    # Only the coordinator answers for the id (once it has logged CompleteCommit, after the markers).
    conn = raw(cluster, coordinator)
    conn.completed(txn_id)
    conn.close()
    for broker_id in cluster.ids:
        conn = raw(cluster, broker_id)
        try:
            state = conn.call(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[txn_id]).transaction_states[0]
            listed = conn.call(LIST_TRANSACTIONS, 1, state_filters=[], producer_id_filters=[],
                               duration_filter=-1)
        finally:
            conn.close()
        ids = {t.transactional_id for t in listed.transaction_states}
        if broker_id == coordinator:
            assert (state.error_code, state.transaction_state) == (0, "CompleteCommit")
            assert txn_id in ids
        else:
            assert state.error_code == ErrorCode.NOT_COORDINATOR
            assert txn_id not in ids


def test_a_second_producer_fences_the_first_without_coordinator_checks_on_produce(cluster):
    topic = unique("txn-fence")
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    txn_id = unique("fenced")
    first = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                         "linger.ms": 5})
    first.init_transactions(60)
    first.begin_transaction()
    for i in range(9):
        first.produce(topic, value=b"zombie-%d" % i, partition=i % 3)
    assert first.flush(30) == 0
    second = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                          "linger.ms": 5})
    second.init_transactions(60)  # aborts the first one's transaction with a bumped epoch
    second.begin_transaction()
    for i in range(9):
        second.produce(topic, value=b"live-%d" % i, partition=i % 3)
    second.commit_transaction(30)
    # The zombie's next write and its commit are refused: by the leaders (the abort
    # markers carry the bumped epoch) and by the coordinator.
    with pytest.raises(ck.KafkaException) as failure:
        first.produce(topic, value=b"zombie-late", partition=0)
        first.flush(30)
        first.commit_transaction(30)
    assert failure.value.args[0].fatal() or failure.value.args[0].txn_requires_abort(), failure.value
    read = read_committed(cluster, topic, 3, 9)
    anomalies = count_anomalies("fencing", [b"live-%d" % i for i in range(9)],
                                {b"zombie-%d" % i for i in range(9)} | {b"zombie-late"}, read)
    assert anomalies == {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0}


# -- EndTxn answered before the markers ------------------------------------------------------

class RdkafkaLog(logging.Handler):
    """librdkafka's log lines (a client's `logger`), kept to wait for one."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def refused(self, producer) -> bool:
        """Whether the producer has logged an AddPartitionsToTxn answered
        CONCURRENT_TRANSACTIONS (librdkafka's words for it); its log comes through poll()."""
        producer.poll(0)
        return any("AddPartitionsToTxn response" in line and "another concurrent operation" in line
                   for line in self.lines)

    def logger(self, name: str) -> logging.Logger:
        logger = logging.getLogger(name)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(self)
        return logger


def held_markers_cluster(directory, zookeeper, **properties) -> Cluster:
    """Two brokers, `__transaction_state` one partition on one of them (the coordinator
    of every transactional id), the other to pause while it leads a partition whose
    marker must wait; sessions long enough to outlast the pauses; `properties` added."""
    return Cluster(directory, zookeeper, brokers=2, properties={
        **PROPERTIES, "zookeeper.session.timeout.ms": "60000", "metrics.port": "0",
        "transaction.state.log.num.partitions": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", **properties})


@pytest.fixture(scope="module")
def two_brokers(tmp_path_factory, zookeeper):
    with held_markers_cluster(tmp_path_factory.mktemp("held-markers"), zookeeper) as running:
        yield running


@pytest.fixture(scope="module")
def patient_brokers(tmp_path_factory, zookeeper):
    """held_markers_cluster whose coordinator holds an AddPartitionsToTxn for the markers
    of the id's previous transaction for up to a minute, longer than any pause here."""
    with held_markers_cluster(tmp_path_factory.mktemp("patient"), zookeeper,
                              **{"add.partitions.to.txn.retry.backoff.max.ms": "60000"}) as running:
        yield running


def split_topic(cluster: Cluster, coordinator: int) -> tuple[str, int]:
    """A new topic of two partitions, one led by each broker, and the partition led by
    the coordinator."""
    topic = unique("held-markers")
    cluster.create_topic(topic, 2, 1)
    leaders = {p: info.leader_id for p, info in cluster.partitions(topic).items()}
    assert sorted(leaders.values()) == [0, 1], leaders
    return topic, next(p for p, leader in leaders.items() if leader == coordinator)


def held_marker_scene(cluster: Cluster, prefix: str) -> tuple[str, int, int, str, int]:
    """(transactional id, its coordinator, the other broker, a split_topic, its partition
    led by the coordinator): pausing the other broker holds the marker of the partition it
    leads, and it holds no __transaction_state partition of the id."""
    txn_id = unique(prefix)
    coordinator = coordinator_of(cluster, txn_id)
    held = 1 - coordinator
    topic, local = split_topic(cluster, coordinator)
    return txn_id, coordinator, held, topic, local


def test_end_txn_is_answered_before_the_markers_and_the_next_transaction_waits_for_them(two_brokers):
    """EndTxn is answered once PrepareCommit is committed, as Kafka answers it: with the
    leader of one of the transaction's partitions paused (SIGSTOP), so that its marker
    cannot be written, commit_transaction() returns. Until that marker is written the
    coordinator answers the id's AddPartitionsToTxn, AddOffsetsToTxn, EndTxn (the commit
    retried, or an abort) and InitProducerId with CONCURRENT_TRANSACTIONS; confluent-kafka's
    next transaction retries through it, writes nothing meanwhile and commits once the
    leader resumes; a read_committed reader sees both transactions whole."""
    cluster = two_brokers
    txn_id, coordinator, held, topic, local = held_marker_scene(cluster, "held")
    log = RdkafkaLog()
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                            "linger.ms": 5, "debug": "eos", "logger": log.logger(f"rdkafka-{txn_id}")})
    producer.init_transactions(60)
    first = [b"first-%d" % i for i in range(6)]
    producer.begin_transaction()
    for i, value in enumerate(first):
        producer.produce(topic, value=value, partition=i % 2)
    assert producer.flush(30) == 0
    second = [b"second-%d" % i for i in range(3)]
    outcome: queue.Queue = queue.Queue()

    def next_transaction() -> None:
        try:
            producer.begin_transaction()
            for value in second:
                producer.produce(topic, value=value, partition=local)
            producer.commit_transaction(60)
            outcome.put(None)
        except BaseException as exc:  # raised in the test's thread
            outcome.put(exc)

    conn = raw(cluster, coordinator)
    cluster.pause(held)
    try:
        producer.commit_transaction(20)  # answered with the held marker not written
        state = conn.describe(txn_id)
        assert state.transaction_state == "PrepareCommit", state
        pid, epoch = state.producer_id, state.producer_epoch
        busy = ErrorCode.CONCURRENT_TRANSACTIONS
        assert conn.add(txn_id, pid, epoch, {topic: [local]}) == {(topic, local): busy}
        assert conn.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=pid,
                         producer_epoch=epoch, group_id=unique("group")).error_code == busy
        assert conn.end(txn_id, pid, epoch, True) == busy
        assert conn.end(txn_id, pid, epoch, False) == busy
        assert conn.init(txn_id)[0] == busy
        written = conn.offsets(topic, [local], committed=False)
        threading.Thread(target=next_transaction, name="next-transaction", daemon=True).start()
        wait_for(lambda: log.refused(producer), 30,
                 "the producer's AddPartitionsToTxn to get CONCURRENT_TRANSACTIONS")
        assert outcome.empty(), "the next transaction committed before the markers of the first"
        assert conn.offsets(topic, [local], committed=False) == written, \
            "the next transaction wrote before the markers of the first"
        assert conn.describe(txn_id).transaction_state == "PrepareCommit"
    finally:
        cluster.resume(held)
    error = outcome.get(timeout=90)
    assert error is None, error
    assert conn.completed(txn_id).transaction_state == "CompleteCommit"
    conn.close()
    producer.flush(10)
    anomalies = count_anomalies("commit answered before its markers", first + second, set(),
                                read_committed(cluster, topic, 2, len(first) + len(second)))
    assert anomalies == {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0}


def test_add_partitions_waits_for_the_markers_of_the_previous_transaction(patient_brokers):
    """The coordinator holds the next transaction's AddPartitionsToTxn while the previous
    one's marker waits for a paused leader (add.partitions.to.txn.retry.backoff.max.ms),
    and adds the partition once the marker and CompleteCommit are written, rather than
    answering CONCURRENT_TRANSACTIONS at once: a client retries that 20 ms later, where
    markers take a few milliseconds."""
    cluster = patient_brokers
    txn_id, coordinator, held, topic, local = held_marker_scene(cluster, "patient")
    producer = transaction_on_both_partitions(cluster, txn_id, topic, b"first")
    adder, observer = raw(cluster, coordinator), raw(cluster, coordinator)
    cluster.pause(held)
    try:
        producer.commit_transaction(20)  # answered with the held marker not written
        state = observer.describe(txn_id)
        assert state.transaction_state == "PrepareCommit", state
        adder.send_add(txn_id, state.producer_id, state.producer_epoch, {topic: [local]})
        # answered after the coordinator read the AddPartitionsToTxn sent before it
        assert observer.describe(txn_id).transaction_state == "PrepareCommit"
    finally:
        cluster.resume(held)
    assert adder.added() == {(topic, local): ErrorCode.NONE}
    after = observer.describe(txn_id)
    assert after.transaction_state == "Ongoing" and [(t.topic, t.partitions) for t in after.topics] == [
        (topic, [local])], after
    assert observer.end(txn_id, state.producer_id, state.producer_epoch, False) == ErrorCode.NONE
    adder.close()
    observer.close()


def transaction_on_both_partitions(cluster: Cluster, txn_id: str, topic: str, value: bytes):
    """A confluent-kafka transactional producer with a transaction open and `value`
    written (flushed) to partitions 0 and 1 of `topic`."""
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                            "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(topic, value=value, partition=partition)
    assert producer.flush(30) == 0
    return producer


def answered(cluster: Cluster, broker_id: int, request: str) -> int:
    """How many requests of an API (Kafka's name) the broker has answered, all versions
    (its metrics endpoint)."""
    return requests_answered(cluster.processes[broker_id], request)


def test_markers_of_transactions_ending_together_go_to_a_broker_in_one_request(two_brokers):
    """Five producers commit while the leader of one partition of each transaction is
    paused: the coordinator's WriteTxnMarkers with the first one's marker waits there,
    and the markers of the four committed meanwhile queue up for that broker. Once it
    resumes it gets them all in one more request (two answered in all, not five), and a
    read_committed reader sees every transaction whole."""
    cluster = two_brokers
    txn_ids = [unique("batched") for _ in range(5)]
    coordinator = coordinator_of(cluster, txn_ids[0])
    assert {coordinator_of(cluster, txn_id) for txn_id in txn_ids} == {coordinator}
    held = 1 - coordinator
    topic, _ = split_topic(cluster, coordinator)
    producers, committed = [], []
    for txn_id in txn_ids:
        producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": txn_id,
                                "linger.ms": 5})
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=f"{txn_id}-{i}".encode(), partition=i % 2)
            committed.append(f"{txn_id}-{i}".encode())
        assert producer.flush(30) == 0
        producers.append(producer)
    before = answered(cluster, held, "WriteTxnMarkers")
    cluster.pause(held)
    try:
        for producer in producers:
            producer.commit_transaction(20)
    finally:
        cluster.resume(held)
    conn = raw(cluster, coordinator)
    for txn_id in txn_ids:
        assert conn.completed(txn_id).transaction_state == "CompleteCommit"
    conn.close()
    assert answered(cluster, held, "WriteTxnMarkers") - before == 2
    anomalies = count_anomalies("markers sent together", committed, set(),
                                read_committed(cluster, topic, 2, len(committed)))
    assert anomalies == {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0}


def test_the_sluice_client_waits_for_the_markers_whatever_its_retry_count(two_brokers):
    """sluice_client waits for a transaction coordinator that answers CONCURRENT_TRANSACTIONS
    (writing the markers of the id's last transaction) until its retry_timeout, as for a
    coordinator moving, not `retries` times: its InitProducerId for an id whose commit
    has a marker held by a paused leader is refused more times than `retries` allows,
    and gets the next epoch once the leader resumes. The coordinator that answers so is
    the right one: the client does not look it up again between the retries."""
    cluster = two_brokers
    txn_id, coordinator, held, topic, _ = held_marker_scene(cluster, "waited")
    producer = transaction_on_both_partitions(cluster, txn_id, topic, b"held")
    outcome: queue.Queue = queue.Queue()
    retries = 2
    # Bootstrapped on the coordinator alone: the paused broker accepts connections and answers nothing.
    with Client(cluster.address(coordinator), retries=retries) as client:
        def init() -> None:
            try:
                outcome.put(client.producer.init_transactions(txn_id))
            except BaseException as exc:  # raised in the test's thread
                outcome.put(exc)

        before = answered(cluster, coordinator, "InitProducerId")
        found_before = answered(cluster, coordinator, "FindCoordinator")
        cluster.pause(held)
        try:
            producer.commit_transaction(20)
            conn = raw(cluster, coordinator)
            state = conn.describe(txn_id)
            conn.close()
            assert state.transaction_state == "PrepareCommit", state
            threading.Thread(target=init, name="init", daemon=True).start()
            wait_for(lambda: answered(cluster, coordinator, "InitProducerId") - before > retries + 1,
                     30, f"more than {retries + 1} InitProducerId answers")
            assert outcome.empty(), outcome.get()
            assert answered(cluster, coordinator, "FindCoordinator") - found_before == 1
        finally:
            cluster.resume(held)
        assert outcome.get(timeout=60) == (state.producer_id, state.producer_epoch + 1)


# -- consume -> transform -> produce across a coordinator failover ------------------------

def reported(anomalies, reads: dict, headline: str):
    """`anomalies` with the offset anomalies of `reads` added, printed after `headline`
    with an example of each offset anomaly."""
    examples: list[str] = []
    anomalies.update(offset_anomalies(reads, examples))
    print(headline + ", ".join(f"{name} {n}" for name, n in anomalies.items()))
    for example in examples:
        print(f"  {example}")
    return anomalies



COPY_PARTITIONS = 3
COPY_CLEAN = {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0, NON_MONOTONIC: 0, INCONSISTENT: 0}
SEND_OFFSETS_TIMEOUT_S = 60
# How long the copier waits for send_offsets_to_transaction before it gives the producer
# up: librdkafka (2.16) can block in it past its timeout. While the group coordinator is
# down the call asks FindCoordinator at most once a second, when that broker's
# connection attempts fail; FindCoordinator names the dead broker until the controller
# sees its session end. Once the metadata drops it, librdkafka decommissions it: if that
# comes less than a second after the last question, the call does not ask again, and
# nothing wakes it until another broker's connection comes up or goes down
# (confluentinc/librdkafka#5511; #5456: the call's timeout is never checked).
SEND_OFFSETS_HUNG_S = SEND_OFFSETS_TIMEOUT_S + 30
HUNG = "send_offsets_to_transaction hung (librdkafka #5511)"


class Copier:
    """Copies `source` to `sink` (same partition), `<input>#<attempt>` for each record,
    in transactions of up to 50 records with the consumer's positions sent along
    (send_offsets_to_transaction), from a thread. A transaction that fails is aborted
    (or its producer replaced when the error is fatal), and the consumer is replaced
    too, so that it resumes from the group's committed offsets. A producer whose
    send_offsets_to_transaction hangs (HUNG, counted with the client errors) is replaced
    the same way: the new one's init_transactions aborts that transaction, whose commit
    was never asked. Attempts whose commit returned are `committed`, whose abort
    returned or whose producer was replaced before its commit `aborted`; the others'
    outcome is unknown (either is fine, but only once). `producer_config` adds to the
    producer's settings; the copy gives up `timeout` seconds after it started."""

    def __init__(self, cluster: Cluster, source: str, sink: str, txn_id: str, expected: int,
                 group: str | None = None, producer_config: dict | None = None,
                 timeout: float = 180.0):
        self.cluster, self.source, self.sink, self.txn_id = cluster, source, sink, txn_id
        self.group = group or unique("copier-group")
        self.expected = expected
        self.producer_config = dict(producer_config or {})
        self.timeout = timeout
        self.committed: set[int] = set()
        self.aborted: set[int] = set()
        self.copied = 0  # input records in committed attempts
        self.failures: collections.Counter[str] = collections.Counter()
        self.error: BaseException | None = None
        self.step = "starting"  # what the copier does now: named when it stalls
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="copier", daemon=True)

    def _producer(self):
        producer = ck.Producer({"bootstrap.servers": self.cluster.all_servers,
                                "transactional.id": self.txn_id, "linger.ms": 5,
                                "transaction.timeout.ms": 30_000,
                                "topic.metadata.refresh.interval.ms": 1000, **self.producer_config})
        producer.init_transactions(120)
        return producer

    def _consumer(self):
        consumer = ck.Consumer({"bootstrap.servers": self.cluster.all_servers, "group.id": self.group,
                                "isolation.level": "read_committed", "enable.auto.commit": False,
                                "auto.offset.reset": "earliest", "session.timeout.ms": 10_000,
                                "topic.metadata.refresh.interval.ms": 1000})
        consumer.subscribe([self.source])
        return consumer

    def start(self) -> "Copier":
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._copy()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def _copy(self) -> None:
        producer, consumer = self._producer(), self._consumer()
        attempt = 0
        deadline = time.monotonic() + self.timeout
        try:
            while self.copied < self.expected and not self._stop and time.monotonic() < deadline:
                self.step = "consuming"
                messages = [m for m in consumer.consume(50, 0.5) if not m.error()]
                if not messages:
                    continue
                attempt += 1
                outcome = self._transaction(producer, consumer, messages, attempt)
                if outcome == "committed":
                    self.committed.add(attempt)
                    self.copied += len(messages)
                    continue
                if outcome in ("aborted", HUNG):
                    self.aborted.add(attempt)
                if outcome in ("fatal", HUNG):
                    self.step = "replacing the producer"
                    producer = self._producer()  # fences the old one, aborts its transaction
                self.step = "replacing the consumer"
                consumer.close()
                consumer = self._consumer()
        finally:
            consumer.close()

    def _transaction(self, producer, consumer, messages, attempt: int) -> str:
        try:
            self.step = f"producing transaction {attempt}"
            producer.begin_transaction()
            for m in messages:
                producer.produce(self.sink, value=m.value() + b"#%d" % attempt, partition=m.partition())
            ends = {}
            for m in messages:
                ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
            self.step = f"sending the offsets of transaction {attempt}"
            if not self._send_offsets(producer, [ck.TopicPartition(self.source, p, o)
                                                 for p, o in sorted(ends.items())],
                                      consumer.consumer_group_metadata()):
                self.failures[HUNG] += 1
                return HUNG
            self.step = f"committing transaction {attempt}"
            for _ in range(10):
                try:
                    producer.commit_transaction(60)
                    return "committed"
                except ck.KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
                    self.failures[f"commit {exc.args[0].name()}"] += 1
            return "fatal"
        except ck.KafkaException as exc:
            error = exc.args[0]
            self.failures[error.name()] += 1
            if error.txn_requires_abort():
                self.step = f"aborting transaction {attempt}"
                try:
                    producer.abort_transaction(60)
                    return "aborted"
                except ck.KafkaException as abort_failure:
                    self.failures[f"abort {abort_failure.args[0].name()}"] += 1
            return "fatal"

    @staticmethod
    def _send_offsets(producer, offsets, group_metadata) -> bool:
        """send_offsets_to_transaction from a thread of its own, waited for at most
        SEND_OFFSETS_HUNG_S: False when it is still blocked then (the producer must not
        be used again), its error raised when it failed."""
        outcome: queue.Queue = queue.Queue()

        def send() -> None:
            try:
                producer.send_offsets_to_transaction(offsets, group_metadata, SEND_OFFSETS_TIMEOUT_S)
                outcome.put(None)
            except BaseException as exc:  # raised in the copier's thread
                outcome.put(exc)

        threading.Thread(target=send, name="send-offsets", daemon=True).start()
        try:
            error = outcome.get(timeout=SEND_OFFSETS_HUNG_S)
        except queue.Empty:
            return False
        if error is not None:
            raise error
        return True

    def wait_copied(self, count: int, timeout: float) -> None:
        """Until `count` records are copied; on a stall, every broker's whole output is
        kept in the test's directory (named in the failure) for a post mortem."""
        try:
            wait_for(lambda: self.copied >= count or self.error is not None, timeout,
                     f"{count} records copied")
        except AssertionError as exc:
            kept = []
            for broker_id, process in self.cluster.processes.items():
                path = self.cluster.directory / f"broker-{broker_id}.output"
                path.write_text("".join(process.output))
                kept.append(str(path))
            raise AssertionError(f"{exc}: {self.copied} copied, the copier is {self.step}, "
                                 f"client errors {dict(self.failures)}; outputs in {kept}") from None
        assert self.error is None, self.error

    def finish(self) -> None:
        """Until the copy ended (it gives up at its timeout)."""
        timeout = self.timeout + 20
        self._thread.join(timeout)
        alive = self._thread.is_alive()
        self._stop = True
        assert not alive, (f"the copy did not finish in {timeout:g} s ({self.copied} of {self.expected}; "
                           f"the copier is {self.step})")
        assert self.error is None, self.error
        assert self.copied >= self.expected, f"copied {self.copied} of {self.expected}"

    def anomalies(self, test: str, inputs: list[bytes], seed: int | None = None) -> dict:
        """The sink as two independent read_committed consumers (confluent-kafka,
        kafka-python) read it: each one's lost, duplicated, aborted reads and unexpected
        summed over both, and the offset anomalies between them."""
        reads = read_by_two(self.cluster.bootstrap_servers, self.sink, COPY_PARTITIONS, "read_committed",
                            len(inputs))
        anomalies = {"lost": 0, "duplicated": 0, "aborted reads": 0, "unexpected": 0}
        for records in reads.values():
            read = [value for _, _, value in records]
            stripped = [value.rsplit(b"#", 1)[0] for value in read]
            counts = collections.Counter(stripped)
            anomalies["lost"] += sum(1 for v in inputs if counts[v] == 0)
            anomalies["duplicated"] += sum(n - 1 for n in counts.values() if n > 1)
            anomalies["aborted reads"] += sum(1 for value in read if int(value.rsplit(b"#", 1)[1]) in self.aborted)
            anomalies["unexpected"] += sum(n for v, n in counts.items() if v not in set(inputs))
        return reported(anomalies, reads,
                        f"{test}{'' if seed is None else f' seed={seed}'}: {len(inputs)} in, "
                        f"{'/'.join(str(len(r)) for r in reads.values())} out ({', '.join(reads)}), "
                        f"{len(self.committed)} transactions committed, {len(self.aborted)} aborted, "
                        f"client errors {dict(self.failures)}; ")


def feed(cluster: Cluster, topic: str, count: int) -> list[bytes]:
    inputs = [b"in-%d" % i for i in range(count)]
    producer = ck.Producer({"bootstrap.servers": cluster.bootstrap_servers, "enable.idempotence": True,
                            "acks": "all", "linger.ms": 5})
    for i, value in enumerate(inputs):
        producer.produce(topic, value=value, partition=i % COPY_PARTITIONS)
    assert producer.flush(60) == 0
    return inputs


def coordinated_by(cluster: Cluster, broker_id: int, key_type: int = TXN_KEY, prefix: str = "copier-") -> str:
    """A transactional id (or group id, key type GROUP_KEY) starting with `prefix`
    whose partition of `__transaction_state` (`__consumer_offsets`) `broker_id` leads."""
    topic = COORDINATOR_TOPICS[key_type]
    coordinator_of(cluster, "probe", key_type=key_type)  # creates the topic
    cluster.wait_for_leaders(topic, full_isr=True)
    partitions = cluster.partitions(topic)
    led = {p for p, info in partitions.items() if info.leader_id == broker_id}
    assert led, f"broker {broker_id} leads no partition of {topic}: {partitions}"
    return next(t for t in (f"{prefix}{uuid.uuid4().hex[:6]}-{i}" for i in range(10_000))
                if partition_for(t, len(partitions)) in led)


@contextlib.contextmanager
def _copied_across_a_coordinator_killed_after_prepare_commit(tmp_path, zookeeper, monkeypatch, copier_class,
                                                              prefix: str, what: str):
    """A copy between two topics of a 3-broker cluster whose transaction coordinator (broker 2)
    dies at the fail point txn-after-prepare-commit, once its first PrepareCommit is
    replicated: yields (cluster, new coordinator, copier, transactional id, sink topic) once
    the copy is done, the new coordinator completed the prepared transaction on load, and
    the copy is exactly once."""
    victim = 2
    cluster = Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES)
    try:
        for broker_id in cluster.ids:
            if broker_id == victim:
                monkeypatch.setenv("SLUICE_FAILPOINTS", "txn-after-prepare-commit")
            cluster.processes[broker_id].start()
            monkeypatch.delenv("SLUICE_FAILPOINTS", raising=False)
        cluster.wait_for_brokers()
        source, sink = unique(f"{prefix}-in"), unique(f"{prefix}-out")
        for topic in (source, sink):
            cluster.create_topic(topic, COPY_PARTITIONS, 3, {"min.insync.replicas": "2"})
        inputs = feed(cluster, source, 600)
        txn_id = coordinated_by(cluster, victim)
        copier = copier_class(cluster, source, sink, txn_id, len(inputs)).start()
        # The first commit kills the coordinator once PrepareCommit is replicated.
        wait_for(lambda: cluster.processes[victim].proc.poll() is not None, 120,
                 "the coordinator to die at its fail point")
        cluster.kill(victim)  # reaped: out of bootstrap_servers and the waits
        assert "fail point txn-after-prepare-commit reached" in cluster.output(victim, 200)
        copier.finish()
        successor = coordinator_of(cluster, txn_id)
        assert successor != victim
        assert "(1 to complete)" in "".join(cluster.processes[successor].output), \
            "the new coordinator did not complete the prepared transaction on load"
        assert copier.anomalies(what, inputs) == COPY_CLEAN
        yield cluster, successor, copier, txn_id, sink
    finally:
        cluster.close()


def test_copy_is_exactly_once_across_a_coordinator_killed_after_prepare_commit(tmp_path, zookeeper,
                                                                               monkeypatch):
    with _copied_across_a_coordinator_killed_after_prepare_commit(
            tmp_path, zookeeper, monkeypatch, Copier, "copy",
            "copy across a coordinator killed after PrepareCommit") as (cluster, successor, copier, txn_id, sink):
        # The markers written since carry the new coordinator epoch: one of the old epoch
        # (0) is refused by every partition of the sink.
        conn = raw(cluster, successor)
        state = conn.completed(txn_id)
        conn.close()
        assert state.error_code == 0 and state.transaction_state == "CompleteCommit", state
        Req = WRITE_TXN_MARKERS.request
        for partition, info in sorted(cluster.partitions(sink).items()):
            conn = raw(cluster, info.leader_id)
            answer = conn.call(WRITE_TXN_MARKERS, 1, markers=[Req.WritableTxnMarker(
                producer_id=state.producer_id, producer_epoch=state.producer_epoch,
                transaction_result=False, coordinator_epoch=0,
                topics=[Req.WritableTxnMarkerTopic(name=sink, partition_indexes=[partition])])])
            conn.close()
            code = answer.markers[0].topics[0].partitions[0].error_code
            assert code == ErrorCode.TRANSACTION_COORDINATOR_FENCED, (partition, code)


class JavaCopier(Copier):
    """The same copy by Kafka's Java client 4.4 (tests/java's TxnCopy), which uses
    transactions v2: no AddPartitionsToTxn nor AddOffsetsToTxn, the epoch bumped by every
    EndTxn. Its attempts are read from the JVM's output as they end."""

    def _copy(self) -> None:
        classpath = maven.build_project(JAVA_PROJECT, {"kafka.version": maven.KAFKA_VERSION})
        command = maven.java_command(classpath, "sluice.compat.TxnCopy", self.cluster.all_servers, self.source,
                                     self.sink, self.txn_id, self.group, str(self.expected), str(int(self.timeout)))
        self.step = "copying"
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as java:
            try:
                for line in java.stdout:
                    if not line.startswith("{"):
                        continue
                    attempt = json.loads(line)
                    if "error" in attempt:
                        self.failures[attempt["error"].split(":")[0]] += 1
                    if attempt["outcome"] == "committed":
                        self.committed.add(attempt["attempt"])
                        self.copied += attempt["records"]
                    elif attempt["outcome"] == "aborted":
                        self.aborted.add(attempt["attempt"])
            finally:
                if java.poll() is None:
                    java.kill()


def test_java_copy_with_transactions_v2_is_exactly_once_across_a_coordinator_killed_after_prepare_commit(
        tmp_path, zookeeper, monkeypatch):
    """Kafka's Java client 4.4 (transactions v2): the coordinator dies once PrepareCommit,
    with the bumped epoch, is replicated; the new one loads the transaction as one of
    version 2 and completes it, the producer's retried EndTxn (the epoch before the bump)
    is answered as a retry, and the copy goes on at the bumped epoch, exactly once."""
    with _copied_across_a_coordinator_killed_after_prepare_commit(
            tmp_path, zookeeper, monkeypatch, JavaCopier, "java-copy",
            "Java copy (transactions v2) across a coordinator killed after PrepareCommit") as (
            cluster, successor, copier, txn_id, sink):
        # Every EndTxn bumped the epoch: one per committed or aborted transaction at least.
        conn = raw(cluster, successor)
        state = conn.completed(txn_id)
        conn.close()
        assert state.transaction_state == "CompleteCommit"
        assert state.producer_epoch >= len(copier.committed) + len(copier.aborted), state


@pytest.mark.chaos
@pytest.mark.timeout(400)
def test_copy_outlives_send_offsets_hanging_on_a_group_coordinator_gone_from_metadata(tmp_path, zookeeper):
    """librdkafka's hang in send_offsets_to_transaction (#5511) made likely: the group's
    coordinator is killed and left down during the copy. The producer's settings here
    close librdkafka's ways out: reconnecting every 100 ms, a call waiting for the dead
    coordinator asks FindCoordinator about once a second, so the broker is most likely
    decommissioned (the metadata, refreshed every 100 ms, drops it once the controller
    saw its session end) less than a second after the call's last question; and a call
    made after that finds it still cached (metadata.max.age.ms, the cache's lifetime).
    Either way the call waits for good. The copier gives that producer up after
    SEND_OFFSETS_HUNG_S (the hang is counted in the client errors printed), and the copy
    is exactly once all the same."""
    victim = 2
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        source, sink = unique("gone-in"), unique("gone-out")
        for topic in (source, sink):
            cluster.create_topic(topic, COPY_PARTITIONS, 3, {"min.insync.replicas": "2"})
        inputs = feed(cluster, source, 3000)
        copier = Copier(cluster, source, sink, coordinated_by(cluster, 1), len(inputs),
                        group=coordinated_by(cluster, victim, GROUP_KEY),
                        producer_config={"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 100,
                                         "topic.metadata.refresh.interval.ms": 100,
                                         "metadata.max.age.ms": 900_000}).start()
        copier.wait_copied(len(inputs) // 10, 120)
        cluster.kill(victim)
        copier.finish()
        anomalies = copier.anomalies("copy across a group coordinator gone from the metadata", inputs)
        assert anomalies == COPY_CLEAN


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_copy_is_exactly_once_under_random_kills(tmp_path, zookeeper):
    """Rounds of SIGKILL (the transaction coordinator, a leader of the sink, the
    controller: drawn with the printed seed), each broker restarted before the next."""
    seed = pick_seed()
    rng = random.Random(seed)
    print(f"test_copy_is_exactly_once_under_random_kills seed={seed}")
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        source, sink = unique("chaos-in"), unique("chaos-out")
        for topic in (source, sink):
            cluster.create_topic(topic, COPY_PARTITIONS, 3, {"min.insync.replicas": "2"})
        inputs = feed(cluster, source, 6000)
        txn_id = unique("chaos-copier")
        copier = Copier(cluster, source, sink, txn_id, len(inputs), timeout=400).start()
        kinds = ["coordinator", "leader", "controller"]
        rng.shuffle(kinds)
        kinds += [rng.choice(kinds) for _ in range(2)]  # each kind once, then any
        for round_, kind in enumerate(kinds):
            copier.wait_copied((round_ + 1) * len(inputs) // (len(kinds) + 1), 180)
            if kind == "coordinator":
                target = coordinator_of(cluster, txn_id)
            elif kind == "leader":
                target = cluster.leader_of(sink, rng.randrange(COPY_PARTITIONS))
            else:
                target = cluster.controller_id()
            print(f"round {round_}: SIGKILL broker {target} ({kind}) at {copier.copied} copied")
            cluster.kill(target)
            cluster.restart(target)  # once ZooKeeper has ended its session
            cluster.wait_for_brokers()
        copier.finish()
        anomalies = copier.anomalies("copy under random kills", inputs, seed)
        assert anomalies == COPY_CLEAN, f"seed={seed}"


# -- the coordinator killed between EndTxn's answer and the markers (chaos) ---------------

class TxnRound:
    """One transactional producer's transactions over an RF=3 topic, each committed or
    aborted (once its records are written) as drawn, its values `<name>-<i>` spread over
    the partitions. A
    transaction whose commit (abort) returned is `committed` (`aborted`); one that failed
    otherwise is `unknown` (whole or absent, never part of it, either is fine). A
    producer failing fatally is replaced (its successor's init_transactions aborts what
    was open)."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int, txn_id: str):
        self.cluster, self.topic, self.partitions, self.txn_id = cluster, topic, partitions, txn_id
        self.values: dict[str, list[bytes]] = {}
        self.outcomes: dict[str, str] = {}
        self.failures: collections.Counter[str] = collections.Counter()
        self._producer = self._new_producer()

    def _new_producer(self):
        producer = ck.Producer({"bootstrap.servers": self.cluster.all_servers, "transactional.id": self.txn_id,
                                "linger.ms": 5, "transaction.timeout.ms": 30_000,
                                "topic.metadata.refresh.interval.ms": 1000})
        producer.init_transactions(120)
        return producer

    def transaction(self, name: str, size: int, commit: bool) -> str:
        values = self.values[name] = [f"{name}-{i}".encode() for i in range(size)]
        self.outcomes[name] = outcome = self._run(values, commit)
        return outcome

    def _run(self, values: list[bytes], commit: bool) -> str:
        producer = self._producer
        try:
            producer.begin_transaction()
            for i, value in enumerate(values):
                producer.produce(self.topic, value=value, partition=i % self.partitions)
            for _ in range(10):
                try:
                    if commit:
                        producer.commit_transaction(60)
                        return "committed"
                    if producer.flush(60):  # records still queued
                        self.failures["flush timed out"] += 1
                        continue
                    producer.abort_transaction(60)  # its records written: the abort goes to the coordinator
                    return "aborted"
                except ck.KafkaException as exc:
                    if not exc.args[0].retriable():
                        raise
                    self.failures[f"{'commit' if commit else 'abort'} {exc.args[0].name()}"] += 1
        except ck.KafkaException as exc:
            error = exc.args[0]
            self.failures[error.name()] += 1
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(60)
                    return "aborted"
                except ck.KafkaException as abort_failure:
                    self.failures[f"abort {abort_failure.args[0].name()}"] += 1
        self._producer = self._new_producer()
        return "unknown"


def transaction_anomalies(test: str, rounds: list[TxnRound], reads: dict, seed: int) -> dict:
    """What each read_committed consumer got against what the producers were told,
    summed over the consumers: committed values lost, values read twice, values of
    aborted transactions read, transactions read in part, values never produced; and
    the offset anomalies between the consumers."""
    values = {name: vs for r in rounds for name, vs in r.values.items()}
    outcomes = {name: outcome for r in rounds for name, outcome in r.outcomes.items()}
    owner = {value: name for name, vs in values.items() for value in vs}
    anomalies = {"lost": 0, "duplicated": 0, "aborted reads": 0, "partial transactions": 0, "unexpected": 0}
    for records in reads.values():
        counts = collections.Counter(value for _, _, value in records)
        seen = collections.Counter(owner[value] for value in counts if value in owner)
        anomalies["lost"] += sum(1 for name, vs in values.items() if outcomes[name] == "committed"
                                 for value in vs if counts[value] == 0)
        anomalies["duplicated"] += sum(n - 1 for n in counts.values() if n > 1)
        anomalies["aborted reads"] += sum(counts[value] for name, vs in values.items()
                                          if outcomes[name] == "aborted" for value in vs)
        anomalies["partial transactions"] += sum(1 for name, n in seen.items() if n < len(values[name]))
        anomalies["unexpected"] += sum(n for value, n in counts.items() if value not in owner)
    return reported(anomalies, reads,
                    f"{test} seed={seed}: {len(values)} transactions "
                    f"({', '.join(f'{n} {o}' for o, n in sorted(collections.Counter(outcomes.values()).items()))}), "
                    f"read {'/'.join(str(len(r)) for r in reads.values())} ({', '.join(reads)}), client errors "
                    f"{dict(sum((r.failures for r in rounds), collections.Counter()))}; ")


def restart_as_coordinator(cluster: Cluster, broker_id: int, monkeypatch, fail_point: str) -> None:
    """SIGKILL the broker and start it again with `fail_point` enabled, then give it back
    the leadership of the partitions of `__transaction_state` it is the preferred
    replica of (a preferred election), so that it coordinates their ids again
    (`coordinated_by`). Its partitions must hold no transaction to complete: loading
    one would reach the fail point."""
    cluster.kill(broker_id)
    monkeypatch.setenv("SLUICE_FAILPOINTS", fail_point)
    try:
        cluster.restart(broker_id)
    finally:
        monkeypatch.delenv("SLUICE_FAILPOINTS")
    cluster.wait_for_brokers()
    cluster.wait_for_leaders(TXN_STATE, full_isr=True)
    with Client(cluster.bootstrap_servers) as client:
        client.admin.elect_leaders(PREFERRED_ELECTION, [(TXN_STATE, p) for p in cluster.partitions(TXN_STATE)])


def prepared_loads(cluster: Cluster) -> int:
    """How many times the brokers loaded a partition of `__transaction_state` holding a
    transaction to complete (their logs, every start)."""
    return sum(1 for process in cluster.processes.values() for line in process.output
               if "from __transaction_state-" in line and "(1 to complete)" in line)


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_transactions_stay_whole_when_the_coordinator_dies_between_answering_end_txn_and_the_markers(
        tmp_path, zookeeper, monkeypatch):
    """Rounds: a broker drawn with the printed seed is restarted with the fail point
    txn-after-prepare-before-markers and made the coordinator of a new transactional id
    (a preferred election gives it its partition of `__transaction_state` back); the
    id's first transaction (committed or aborted, as drawn) is answered, then the
    coordinator dies before writing any marker, and the producer goes on through its
    successor, which completes that transaction on load. read_committed consumers
    (confluent-kafka, kafka-python) see every transaction whole and exactly once."""
    seed = pick_seed()
    rng = random.Random(seed)
    test = "test_transactions_stay_whole_when_the_coordinator_dies_between_answering_end_txn_and_the_markers"
    print(f"{test} seed={seed}")
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        topic = unique("prepared")
        cluster.create_topic(topic, COPY_PARTITIONS, 3, {"min.insync.replicas": "2"})
        coordinator_of(cluster, "probe")  # creates __transaction_state
        rounds: list[TxnRound] = []
        for round_ in range(3):
            victim = rng.choice(cluster.ids)
            restart_as_coordinator(cluster, victim, monkeypatch, "txn-after-prepare-before-markers")
            txn_id = coordinated_by(cluster, victim)
            loads = prepared_loads(cluster)
            current = TxnRound(cluster, topic, COPY_PARTITIONS, txn_id)
            rounds.append(current)
            first = f"r{round_}-t0"
            commit = rng.random() < 0.7
            print(f"round {round_}: broker {victim} coordinates {txn_id} and dies after answering "
                  f"its first EndTxn ({'commit' if commit else 'abort'})")
            assert current.transaction(first, rng.randrange(3, 30), commit) == (
                "committed" if commit else "aborted"), current.failures
            wait_for(lambda: cluster.processes[victim].proc.poll() is not None, 60,
                     f"broker {victim} to die at its fail point")
            cluster.kill(victim)  # reaped: out of bootstrap_servers and the waits
            assert "fail point txn-after-prepare-before-markers reached" in cluster.output(victim, 200)
            for n in range(1, 6):
                current.transaction(f"r{round_}-t{n}", rng.randrange(1, 30), rng.random() < 0.7)
            conn = raw(cluster, coordinator_of(cluster, txn_id))
            conn.completed(txn_id, timeout=60)  # nothing left to complete when a broker loads again
            conn.close()
            assert prepared_loads(cluster) > loads, "no successor found the transaction prepared"
            cluster.restart(victim)
            cluster.wait_for_brokers()
        expected = sum(len(vs) for r in rounds for name, vs in r.values.items()
                       if r.outcomes[name] == "committed")
        reads = read_by_two(cluster.bootstrap_servers, topic, COPY_PARTITIONS, "read_committed", expected)
        anomalies = transaction_anomalies("transactions across coordinators killed after answering EndTxn",
                                          rounds, reads, seed)
        assert anomalies == {"lost": 0, "duplicated": 0, "aborted reads": 0, "partial transactions": 0,
                             "unexpected": 0, NON_MONOTONIC: 0, INCONSISTENT: 0}, f"seed={seed}"
