"""Transactions v2 (KIP-890 part 2) and the feature levels from which clients choose it.

- ApiVersions v3+ lists `transaction.version`: supported 0-2 (left out below v4, whose
  clients cannot read a minimum of 0, as Kafka leaves it out), finalized at the broker's
  `transaction.version` (default the newest; level 0 not listed), epoch 0.
- Over raw sockets, a producer of transactions v2: Produce v12 with no AddPartitionsToTxn
  (the leader adds the partition), TxnOffsetCommit v5 with no AddOffsetsToTxn (the group
  coordinator adds the offsets partition), EndTxn v5 bumping the epoch per transaction
  and answering the producer id and epoch to go on with; a read_committed Fetch and the
  group's offsets see exactly the committed transaction. Bad input gets Kafka's codes:
  a retried EndTxn v5 (the epoch before the bump) NONE, the current or an older epoch
  PRODUCER_FENCED, another producer id INVALID_PRODUCER_ID_MAPPING; a Produce v12 with the
  epoch before the bump INVALID_PRODUCER_EPOCH. Produce v11 still needs
  AddPartitionsToTxn (transactions v1).
- Epoch overflow: EndTxn v5 at the exhausted epoch (32766, reached through InitProducerId)
  answers a new producer id at epoch 0, which takes over once the markers (the old id
  at 32767) are written; a retry with the old id and epoch gets the new ones, and the
  next transaction runs under the new id.
- Kafka's Java clients through the capturing proxy (tests/kafka_capture.py), both against
  one broker, in the consume-transform-produce scenario of tests/java (one transaction
  committed, one aborted, with sendOffsetsToTransaction; the read_committed consumer
  sees exactly the committed one, the group's offset is the committed one's):
  kafka-clients 4.4 negotiates transactions v2 on the wire (Produce v12, TxnOffsetCommit
  v5, EndTxn v5, no AddPartitionsToTxn or AddOffsetsToTxn), kafka-clients 3.9 stays on v1
  (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn below v5, Produce below v12).
  librdkafka (confluent-kafka 2.16) has no transactions v2 either: it stays on v1 too.
  A broker pinned at `transaction.version=1` keeps kafka-clients 4.4 on v1.
Every wait is bounded; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from sluice import maven
from tests.kafka_capture import KafkaCaptureProxy
from tests.test_java_clients import PROJECT, SUITE_TIMEOUT_S
from tests.test_transactions import Raw, broker, own_broker, txn_batch, unique  # noqa: F401 (fixture)
from wire.error_codes import ErrorCode
from wire.messages import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, API_VERSIONS, END_TXN, INIT_PRODUCER_ID,
                           PRODUCE, TXN_OFFSET_COMMIT)

pytestmark = pytest.mark.timeout(120)


def feature_levels(proc, version: int):
    """(supported {name: (min, max)}, finalized {name: level}, epoch) of an ApiVersions answer."""
    raw = Raw(proc.port)
    try:
        body = raw.call(API_VERSIONS, version, client_software_name="txn-v2-test",
                        client_software_version="1")
    finally:
        raw.close()
    assert body.error_code == 0
    supported = {f.name: (f.min_version, f.max_version) for f in body.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in body.finalized_features}
    assert all(lo == hi for lo, hi in finalized.values()), finalized
    return supported, {name: hi for name, (_, hi) in finalized.items()}, body.finalized_features_epoch


def test_api_versions_lists_the_transaction_version_feature(tmp_path):
    for name in ("default", "pinned"):
        (tmp_path / name).mkdir()
    with own_broker(tmp_path / "default") as proc:
        assert feature_levels(proc, 4) == ({"transaction.version": (0, 2)}, {"transaction.version": 2}, 0)
        assert feature_levels(proc, 3) == ({}, {"transaction.version": 2}, 0)
    with own_broker(tmp_path / "pinned", "transaction.version=0\n") as proc:
        assert feature_levels(proc, 4) == ({"transaction.version": (0, 2)}, {}, 0)


def end_v5(conn: Raw, txn_id: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
    """EndTxn v5: (error code, producer id, epoch) of the answer."""
    body = conn.call(END_TXN, 5, transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                     committed=commit)
    return body.error_code, body.producer_id, body.producer_epoch


def txn_offset_commit(conn: Raw, version: int, txn_id: str, group: str, pid: int, epoch: int,
                      topic: str, offset: int) -> int:
    Req = TXN_OFFSET_COMMIT.request
    body = conn.call(TXN_OFFSET_COMMIT, version, transactional_id=txn_id, group_id=group, producer_id=pid,
                     producer_epoch=epoch, generation_id_or_member_epoch=-1, member_id="",
                     group_instance_id=None, topics=[Req.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                         Req.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                             committed_metadata="")])])
    return body.topics[0].partitions[0].error_code


def test_transactions_v2_over_raw_requests(broker):
    E = ErrorCode
    conn = Raw(broker.port)
    topic = conn.create_topic(unique("v2"), 1)
    group, txn_id = unique("v2-group"), unique("v2-txn")
    code, pid, epoch = conn.init(txn_id)
    assert (code, epoch) == (0, 0)
    # The first transaction, committed: no AddPartitionsToTxn nor AddOffsetsToTxn.
    assert conn.produce(topic, 0, txn_batch(pid, 0, 0, [b"a", b"b"]), txn_id, version=12) == (0, 0)
    assert txn_offset_commit(conn, 5, txn_id, group, pid, 0, topic, 2) == 0
    assert conn.describe(txn_id).transaction_state == "Ongoing"
    assert end_v5(conn, txn_id, pid, 0, True) == (0, pid, 1)
    assert conn.completed(txn_id).transaction_state == "CompleteCommit"
    assert end_v5(conn, txn_id, pid, 0, True) == (0, pid, 1)  # a retry: the epoch before the bump
    assert end_v5(conn, txn_id, pid, 1, True) == (E.PRODUCER_FENCED, -1, -1)  # no transaction at epoch 1
    # The second one, aborted, at the epoch EndTxn answered; the previous epoch is fenced.
    assert conn.produce(topic, 0, txn_batch(pid, 0, 2, [b"zombie"]), txn_id, version=12)[0] == \
        E.INVALID_PRODUCER_EPOCH
    assert conn.produce(topic, 0, txn_batch(pid, 1, 0, [b"c"]), txn_id, version=12)[0] == 0
    assert txn_offset_commit(conn, 5, txn_id, group, pid, 1, topic, 3) == 0
    assert end_v5(conn, txn_id, pid + 1000, 1, False) == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert end_v5(conn, txn_id, pid, 0, False) == (E.PRODUCER_FENCED, -1, -1)
    assert end_v5(conn, txn_id, pid, 1, False) == (0, pid, 2)
    assert conn.completed(txn_id).transaction_state == "CompleteAbort"
    # read_committed: the committed records only, after the aborted ones' marker.
    fetched = conn.fetch(topic, 0, 0, committed=True)
    assert fetched.last_stable_offset == fetched.high_watermark == 5  # 3 records, 2 markers
    assert [a.producer_id for a in fetched.aborted_transactions] == [pid]
    assert conn.group_offsets(group, topic, [0]) == {0: (0, 2)}
    # Transactions v1 beside it: Produce v11 needs AddPartitionsToTxn.
    assert conn.produce(topic, 0, txn_batch(pid, 2, 0, [b"d"]), txn_id, version=11)[0] == \
        E.TRANSACTION_ABORTABLE
    assert conn.add(txn_id, pid, 2, {topic: [0]}) == {(topic, 0): 0}
    assert conn.produce(topic, 0, txn_batch(pid, 2, 0, [b"d"]), txn_id, version=11)[0] == 0
    assert conn.end(txn_id, pid, 2, True) == 0
    conn.close()


EXHAUSTED_EPOCH = 32766  # Short.MaxValue - 1: the last epoch a producer gets


def test_an_exhausted_epoch_moves_to_a_new_producer_id(broker):
    E = ErrorCode
    conn = Raw(broker.port)
    topic = conn.create_topic(unique("v2-overflow"), 1)
    txn_id = unique("v2-overflow")
    code, pid, epoch = conn.init(txn_id)
    assert (code, epoch) == (0, 0)
    while epoch < EXHAUSTED_EPOCH:  # InitProducerId bumps the epoch by one, pipelined in rounds
        rounds = min(1000, EXHAUSTED_EPOCH - epoch)
        first = conn.correlation + 1
        for _ in range(rounds):
            conn.send(INIT_PRODUCER_ID, 4, transactional_id=txn_id, transaction_timeout_ms=60_000,
                      producer_id=-1, producer_epoch=-1)
        for correlation in range(first, first + rounds):
            body = conn.receive(INIT_PRODUCER_ID, 4, correlation)
        assert (body.error_code, body.producer_id, body.producer_epoch) == (0, pid, epoch + rounds)
        epoch = body.producer_epoch
    assert conn.produce(topic, 0, txn_batch(pid, epoch, 0, [b"last-of-the-old-id"]), txn_id, version=12)[0] == 0
    code, new_pid, new_epoch = end_v5(conn, txn_id, pid, epoch, True)
    assert code == 0 and new_pid != pid and new_epoch == 0
    state = conn.completed(txn_id)
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("CompleteCommit", new_pid, 0)
    assert end_v5(conn, txn_id, pid, epoch, True) == (0, new_pid, 0)  # a retry of the overflowing EndTxn
    assert end_v5(conn, txn_id, pid, epoch + 1, True) == (E.INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert conn.produce(topic, 0, txn_batch(new_pid, 0, 0, [b"first-of-the-new-id"]), txn_id, version=12)[0] == 0
    assert end_v5(conn, txn_id, new_pid, 0, True) == (0, new_pid, 1)
    conn.completed(txn_id)
    fetched = conn.fetch(topic, 0, 0, committed=True)
    assert fetched.last_stable_offset == 4 and not fetched.aborted_transactions  # 2 records, 2 markers
    conn.close()


def versions_sent(proxy: KafkaCaptureProxy) -> dict[str, set[int]]:
    """The versions of the transaction APIs the client sent, by API name."""
    sent = proxy.api_versions_seen()
    return {api.name: {version for key, version in sent if key == api.key}
            for api in (PRODUCE, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT, END_TXN)}




# Each at the newest version of its transactions version.
TRANSACTIONS_V2 = {"Produce": {12}, "AddPartitionsToTxn": set(), "AddOffsetsToTxn": set(),
                   "TxnOffsetCommit": {5}, "EndTxn": {5}}
TRANSACTIONS_V1 = {"Produce": {11}, "AddPartitionsToTxn": {3}, "AddOffsetsToTxn": {4},
                   "TxnOffsetCommit": {4}, "EndTxn": {4}}


def java_transactions(proc, version: str) -> dict[str, set[int]]:
    """Run tests/java's consume-transform-produce scenario with kafka-clients `version`
    through the capturing proxy, check what it read, and return the transaction APIs'
    versions it sent."""
    try:
        classpath = maven.build_project(PROJECT, {"kafka.version": version})
        with KafkaCaptureProxy(proc.bootstrap_servers) as proxy:
            command = maven.java_command(classpath, "sluice.compat.CompatSuite", proxy.bootstrap, "transactions")
            done = subprocess.run(command, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
            seen = versions_sent(proxy)
    except maven.MavenUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(lines) == 1 and "error" not in lines[0], (done.stdout, done.stderr)
    result = lines[0]
    assert result["read_committed"] == [f"out-in-{i}" for i in range(5)] + ["from-the-successor"]
    assert result["group_committed_offset"] == 5
    return seen


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
@pytest.mark.parametrize("version", [maven.KAFKA_VERSION, maven.KAFKA_3_VERSION])
def test_java_clients_choose_their_transactions_version(broker, version):
    assert java_transactions(broker, version) == (TRANSACTIONS_V2 if version == maven.KAFKA_VERSION
                                                  else TRANSACTIONS_V1)


@pytest.mark.timeout(SUITE_TIMEOUT_S + 60)
def test_a_broker_pinned_at_transaction_version_1_keeps_kafka_4_clients_on_v1(tmp_path):
    with own_broker(tmp_path, "transaction.version=1\n") as proc:
        # The scenario's input producer (not transactional) still sends Produce v12; the
        # transactional one stays below it.
        assert java_transactions(proc, maven.KAFKA_VERSION) == {**TRANSACTIONS_V1, "Produce": {11, 12}}


def test_librdkafka_stays_on_transactions_v1(broker):
    ck = pytest.importorskip("confluent_kafka")
    topic = Raw(broker.port).create_topic(unique("rdkafka-v1"), 1)
    with KafkaCaptureProxy(broker.bootstrap_servers) as proxy:
        producer = ck.Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": unique("rdkafka"),
                                "linger.ms": 5})
        producer.init_transactions(15)
        for commit in (True, False):
            producer.begin_transaction()
            producer.produce(topic, value=b"committed" if commit else b"aborted", partition=0)
            if commit:
                producer.commit_transaction(15)
            else:
                assert producer.flush(15) == 0
                producer.abort_transaction(15)
        seen = versions_sent(proxy)
    assert seen["AddPartitionsToTxn"] and max(seen["EndTxn"]) < 5 and max(seen["Produce"]) < 12, seen
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": unique("rdkafka-reader"),
                            "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                            "enable.partition.eof": True})
    consumer.assign([ck.TopicPartition(topic, 0, 0)])
    values = []
    for _ in range(50):
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            assert message.error().code() == ck.KafkaError._PARTITION_EOF, message.error()
            break
        values.append(message.value())
    consumer.close()
    assert values == [b"committed"]
