"""Transactions against the real broker process, with real clients.

- confluent-kafka, kafka-python (and aiokafka) transactional producers commit and
  abort transactions spread over several partitions: read_committed consumers (confluent,
  kafka-python, aiokafka) see exactly the committed records, read_uncommitted ones
  see everything; ListOffsets and Fetch report the last stable offset, and a
  read_committed Fetch lists the aborted transaction.
- Consume-transform-produce (confluent group consumer, send_offsets_to_transaction;
  kafka-python too): the group's offsets move with a commit and stay put after an
  abort; while the transaction is open, OffsetFetch with require_stable answers
  UNSTABLE_OFFSET_COMMIT for its partitions.
- Fencing: a second producer with the same transactional.id aborts the first one's
  open transaction, whose commit then fails fatally.
- transaction.timeout.ms: an abandoned transaction pins the last stable offset until
  the broker aborts it (and fences its epoch).
- Crashes: the broker SIGKILLs itself (fail points, SLUICE_FAILPOINTS) right after logging
  PrepareCommit, before and after answering EndTxn (which is answered before the
  markers, as Kafka answers it), and after writing only some markers; after a restart the whole
  transaction is committed (records and group offsets), never part of it. A SIGKILL
  while confluent producers commit in a loop leaves every transaction whole or absent.
  An Ongoing transaction survives clean and unclean restarts with the last stable
  offset pinned, until its timeout aborts it; the aborted-transaction index is
  persisted (`.txnindex`) and rebuilt.
- `__transaction_state` is compacted by the log cleaner (small segments) and replays to
  the same state; idle transactional ids expire for good.
- Bad input over raw sockets gets Kafka's error codes, version by version; the broker
  keeps serving and logs no traceback.
- The partition log itself (no process): LSO, aborted index across segments, markers
  without an open transaction, stale marker epochs, snapshots and recovery.
Every wait is bounded; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
import time
import uuid

import pytest

from sluice.broker_process import BrokerProcess
from tests.log_files import log_bytes
from tests.replicas import leading
from tests.support.polling import wait_for
from wire.error_codes import ErrorCode
from wire.messages import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, API_VERSIONS, CREATE_TOPICS,
                           DESCRIBE_TRANSACTIONS, END_TXN, FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID,
                           LIST_OFFSETS, LIST_TRANSACTIONS, METADATA, OFFSET_FETCH, PRODUCE,
                           TXN_OFFSET_COMMIT, WRITE_TXN_MARKERS)
from wire.protocol import RequestHeader, decode_response, encode_request
from wire.records import build_batch, decode_batch, iter_batches
from broker.errors import BrokerError

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

pytestmark = pytest.mark.timeout(120)

_SIZE = struct.Struct(">i")
OFFSETS_TOPIC = "__consumer_offsets"
FAST_CHECKS = ("transaction.abort.timed.out.transaction.cleanup.interval.ms=200\n"
               "group.initial.rebalance.delay.ms=0\n")


# -- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker process for the module, checking for timed-out transactions every 200 ms."""
    directory = tmp_path_factory.mktemp("txn-broker")
    config = directory / "server.properties"
    config.write_text(FAST_CHECKS)
    with BrokerProcess(directory / "data", config_file=str(config)) as proc:
        yield proc
    assert "Traceback" not in "".join(proc.output), "".join(proc.output)


def own_broker(tmp_path, extra: str = "") -> BrokerProcess:
    config = tmp_path / "server.properties"
    config.write_text(FAST_CHECKS + extra)
    return BrokerProcess(tmp_path / "data", config_file=str(config))


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


class Raw:
    """A plain socket speaking requests built by hand, for exact versions and fields."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.correlation = 0

    def call(self, api, version: int, **fields):
        self.send(api, version, **fields)
        return self.receive(api, version)

    def send(self, api, version: int, **fields) -> None:
        """Send a request without waiting for its answer (`receive`)."""
        self.correlation += 1
        payload = encode_request(RequestHeader(request_api_key=api.key, request_api_version=version,
                                               correlation_id=self.correlation, client_id="txn-test"),
                                 api.request(**fields))
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)

    def receive(self, api, version: int, correlation: int | None = None):
        """The answer to the last request sent (or, requests pipelined, the one sent with
        `correlation`)."""
        data = self._frame()
        assert data is not None, f"{api.name} v{version}: connection closed"
        header, body = decode_response(api.key, version, data)
        assert header.correlation_id == (self.correlation if correlation is None else correlation)
        return body

    def send_expecting_close(self, api, version: int, timeout: float = 20, **fields) -> None:
        self.correlation += 1
        payload = encode_request(RequestHeader(request_api_key=api.key, request_api_version=version,
                                               correlation_id=self.correlation, client_id="txn-test"),
                                 api.request(**fields))
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)
        self.sock.settimeout(timeout)
        assert self._frame() is None, "the broker answered instead of dying"

    def _frame(self) -> bytes | None:
        head = self._exact(4)
        if head is None:
            return None
        return self._exact(_SIZE.unpack(head)[0])

    def _exact(self, n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            try:
                chunk = self.sock.recv(n - len(data))
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    def close(self) -> None:
        self.sock.close()

    # -- conveniences ------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> str:
        body = self.call(CREATE_TOPICS, 5, topics=[CREATE_TOPICS.request.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=10_000, validate_only=False)
        assert body.topics[0].error_code == 0, body.topics[0]
        return name

    def init(self, txn_id: str, timeout_ms: int = 60_000, version: int = 4, pid: int = -1,
             epoch: int = -1):
        body = self.call(INIT_PRODUCER_ID, version, transactional_id=txn_id,
                         transaction_timeout_ms=timeout_ms, producer_id=pid, producer_epoch=epoch)
        return body.error_code, body.producer_id, body.producer_epoch

    def add(self, txn_id: str, pid: int, epoch: int, partitions: dict, version: int = 3) -> dict:
        self.send_add(txn_id, pid, epoch, partitions, version)
        return self.added(version)

    def send_add(self, txn_id: str, pid: int, epoch: int, partitions: dict, version: int = 3) -> None:
        """AddPartitionsToTxn sent; `added` reads its answer."""
        topics = [ADD_PARTITIONS_TO_TXN.request.AddPartitionsToTxnTopic(name=t, partitions=ps)
                  for t, ps in partitions.items()]
        self.send(ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=txn_id,
                  v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics)

    def added(self, version: int = 3) -> dict:
        """The error code per partition of the AddPartitionsToTxn sent last."""
        body = self.receive(ADD_PARTITIONS_TO_TXN, version)
        return {(t.name, r.partition_index): r.partition_error_code
                for t in body.results_by_topic_v3_and_below for r in t.results_by_partition}

    def end(self, txn_id: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
        return self.call(END_TXN, version, transactional_id=txn_id, producer_id=pid,
                         producer_epoch=epoch, committed=commit).error_code

    def produce(self, topic: str, partition: int, batch: bytes, txn_id: str | None,
                version: int = 9):
        body = self.call(PRODUCE, version, transactional_id=txn_id, acks=-1, timeout_ms=10_000,
                         topic_data=[PRODUCE.request.TopicProduceData(name=topic, partition_data=[
                             PRODUCE.request.PartitionProduceData(index=partition, records=batch)])])
        answer = body.responses[0].partition_responses[0]
        return answer.error_code, answer.base_offset

    def offsets(self, topic: str, partitions, committed: bool, timestamp: int = -1) -> dict:
        body = self.call(LIST_OFFSETS, 7, replica_id=-1, isolation_level=1 if committed else 0,
                         topics=[LIST_OFFSETS.request.ListOffsetsTopic(name=topic, partitions=[
                             LIST_OFFSETS.request.ListOffsetsPartition(partition_index=p,
                                                                       timestamp=timestamp)
                             for p in partitions])])
        return {p.partition_index: p.offset for p in body.topics[0].partitions}

    def fetch(self, topic: str, partition: int, offset: int, committed: bool,
              max_bytes: int = 1 << 20):
        body = self.call(FETCH, 11, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes,
                         isolation_level=1 if committed else 0, session_id=0, session_epoch=-1,
                         topics=[FETCH.request.FetchTopic(topic=topic, partitions=[
                             FETCH.request.FetchPartition(partition=partition, fetch_offset=offset,
                                                          partition_max_bytes=max_bytes)])],
                         forgotten_topics_data=[], rack_id="")
        return body.responses[0].partitions[0]

    def describe(self, txn_id: str):
        return self.call(DESCRIBE_TRANSACTIONS, 0, transactional_ids=[txn_id]).transaction_states[0]

    def completed(self, txn_id: str, timeout: float = 10):
        """The id's state once its transaction is CompleteCommit or CompleteAbort: EndTxn
        is answered before the markers are written, as Kafka answers it."""
        def complete():
            state = self.describe(txn_id)
            return state if state.transaction_state in ("CompleteCommit", "CompleteAbort") else None

        return wait_for(complete, timeout, f"the transaction of {txn_id} to complete")

    def group_offsets(self, group: str, topic: str, partitions, require_stable: bool = False,
                      version: int = 7) -> dict:
        if version >= 8:
            body = self.call(OFFSET_FETCH, version, groups=[OFFSET_FETCH.request.OffsetFetchRequestGroup(
                group_id=group, topics=[OFFSET_FETCH.request.OffsetFetchRequestTopics(
                    name=topic, partition_indexes=list(partitions))])], require_stable=require_stable)
            assert body.groups[0].error_code == 0
            topics = body.groups[0].topics
        else:
            body = self.call(OFFSET_FETCH, version, group_id=group, topics=[
                OFFSET_FETCH.request.OffsetFetchRequestTopic(name=topic, partition_indexes=list(partitions))],
                require_stable=require_stable)
            assert body.error_code == 0
            topics = body.topics
        return {p.partition_index: (p.error_code, p.committed_offset)
                for t in topics for p in t.partitions}


def txn_batch(pid: int, epoch: int, seq: int, values, transactional: bool = True) -> bytes:
    return build_batch([(None, v, (), int(time.time() * 1000)) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, transactional=transactional)


def raw(proc: BrokerProcess) -> Raw:
    return Raw(proc.port)


# -- consumers -------------------------------------------------------------------------------

def consume_confluent(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                      quiet: float = 1.0, timeout: float = 20) -> list[bytes]:
    """Every value from the start of each partition: until `expect` arrived and then
    `quiet` seconds passed without more, or `timeout`."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                            "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got, deadline, last = [], time.monotonic() + timeout, time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            now = time.monotonic()
            if msg is None:
                if len(got) >= expect and now - last >= quiet:
                    break
                continue
            assert not msg.error(), msg.error()
            got.append(msg.value())
            last = now
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                         quiet: float = 1.0, timeout: float = 20) -> list[bytes]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, isolation_level=isolation,
                                   enable_auto_commit=False, auto_offset_reset="earliest")
    got, deadline, last = [], time.monotonic() + timeout, time.monotonic()
    try:
        consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        while time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=100)
            now = time.monotonic()
            values = [r.value for records in batch.values() for r in records]
            if not values:
                if len(got) >= expect and now - last >= quiet:
                    break
                continue
            got += values
            last = now
    finally:
        consumer.close(autocommit=False)
    return got


def consume_aiokafka(bootstrap: str, topic: str, partitions: int, isolation: str, expect: int,
                     quiet: float = 1.0, timeout: float = 20) -> list[bytes]:
    async def main():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                             isolation_level=isolation, enable_auto_commit=False,
                                             auto_offset_reset="earliest")
        await consumer.start()
        got, deadline, last = [], time.monotonic() + timeout, time.monotonic()
        try:
            consumer.assign([aiokafka.TopicPartition(topic, p) for p in range(partitions)])
            await consumer.seek_to_beginning()
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=100)
                now = time.monotonic()
                values = [r.value for records in batch.values() for r in records]
                if not values:
                    if len(got) >= expect and now - last >= quiet:
                        break
                    continue
                got += values
                last = now
        finally:
            await consumer.stop()
        return got

    return asyncio.run(main())


def transactional_producer(bootstrap: str, txn_id: str, **extra):
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                            "linger.ms": 5, **extra})
    producer.init_transactions(15)
    return producer


def run_transaction(producer, topic: str, values: list[bytes], partitions: int, commit: bool) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % partitions)
    if commit:
        producer.commit_transaction(15)
    else:
        assert producer.flush(15) == 0
        producer.abort_transaction(15)


# -- commit, abort and isolation -------------------------------------------------------------

def test_confluent_commit_abort_and_isolation(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("ck-txn"), 3)
    committed1 = [f"c1-{i}".encode() for i in range(30)]
    aborted = [f"a-{i}".encode() for i in range(30)]
    committed2 = [f"c2-{i}".encode() for i in range(7)]
    producer = transactional_producer(bs, unique("ck"))
    run_transaction(producer, topic, committed1, 3, commit=True)
    run_transaction(producer, topic, aborted, 3, commit=False)
    run_transaction(producer, topic, committed2, 3, commit=True)
    plain = ck.Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    plain.produce(topic, value=b"plain", partition=1)
    assert plain.flush(15) == 0

    committed = sorted(committed1 + committed2 + [b"plain"])
    everything = sorted(committed + aborted)
    # Nothing is open: the last stable offset is the high watermark everywhere.
    assert conn.offsets(topic, range(3), committed=True) == conn.offsets(topic, range(3), committed=False)
    # A read_committed fetch of partition 0 lists the aborted transaction; read_uncommitted lists none.
    answer = conn.fetch(topic, 0, 0, committed=True)
    assert answer.last_stable_offset == answer.high_watermark
    assert len(answer.aborted_transactions) == 1
    first = answer.aborted_transactions[0].first_offset
    assert first == 11  # 10 committed records, then the COMMIT marker
    assert conn.fetch(topic, 0, 0, committed=False).aborted_transactions is None
    # A fetch that ends before the aborted transaction lists nothing.
    batches = list(iter_batches(conn.fetch(topic, 0, 0, committed=True).records))
    first_batch_size = batches[0][0].size
    assert conn.fetch(topic, 0, 0, committed=True, max_bytes=first_batch_size).aborted_transactions == []
    conn.close()

    assert sorted(consume_confluent(bs, topic, 3, "read_committed", len(committed))) == committed
    assert sorted(consume_kafka_python(bs, topic, 3, "read_committed", len(committed))) == committed
    assert sorted(consume_aiokafka(bs, topic, 3, "read_committed", len(committed))) == committed
    assert sorted(consume_confluent(bs, topic, 3, "read_uncommitted", len(everything))) == everything
    assert sorted(consume_kafka_python(bs, topic, 3, "read_uncommitted", len(everything))) == everything


def test_kafka_python_transactions(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("kp-txn"), 2)
    conn.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bs, transactional_id=unique("kp"),
                                   enable_idempotence=True)
    values = {}
    try:
        producer.init_transactions()
        for n, commit in enumerate((True, False, True, False)):
            values[n] = [f"kp{n}-{i}".encode() for i in range(8)]
            producer.begin_transaction()
            for i, value in enumerate(values[n]):
                producer.send(topic, value=value, partition=i % 2)
            producer.flush(timeout=15)
            (producer.commit_transaction if commit else producer.abort_transaction)()
    finally:
        producer.close(timeout=5)
    committed = sorted(values[0] + values[2])
    everything = sorted(v for vs in values.values() for v in vs)
    assert sorted(consume_confluent(bs, topic, 2, "read_committed", len(committed))) == committed
    assert sorted(consume_aiokafka(bs, topic, 2, "read_committed", len(committed))) == committed
    assert sorted(consume_kafka_python(bs, topic, 2, "read_uncommitted", len(everything))) == everything


def test_aiokafka_transactions(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("aio-txn"), 2)
    group = unique("aio-group")

    async def main():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bs, transactional_id=unique("aio"))
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(6):
                    await producer.send(topic, b"aio-c%d" % i, partition=i % 2)
                await producer.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 3}, group)
            await producer.begin_transaction()
            for i in range(6):
                await producer.send(topic, b"aio-a%d" % i, partition=i % 2)
            await producer.send_offsets_to_transaction({aiokafka.TopicPartition(topic, 0): 9}, group)
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(main())
    assert conn.group_offsets(group, topic, [0], require_stable=True) == {0: (0, 3)}
    conn.close()
    committed = sorted(b"aio-c%d" % i for i in range(6))
    assert sorted(consume_aiokafka(bs, topic, 2, "read_committed", 6)) == committed
    assert sorted(consume_confluent(bs, topic, 2, "read_committed", 6)) == committed


# -- consume-transform-produce -------------------------------------------------------------

def test_consume_transform_produce_commits_offsets_atomically(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    source = conn.create_topic(unique("ctp-in"), 2)
    sink = conn.create_topic(unique("ctp-out"), 2)
    group = unique("ctp-group")
    feeder = ck.Producer({"bootstrap.servers": bs})
    for i in range(40):
        feeder.produce(source, value=str(i).encode(), partition=i % 2)
    assert feeder.flush(15) == 0
    consumer = ck.Consumer({"bootstrap.servers": bs, "group.id": group, "isolation.level": "read_committed",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    producer = transactional_producer(bs, unique("ctp"))
    outputs = {}
    try:
        for round_, commit in enumerate((True, False)):
            producer.begin_transaction()
            taken, deadline = [], time.monotonic() + 20
            while len(taken) < 10 and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert not msg.error(), msg.error()
                taken.append(msg)
            assert len(taken) == 10, "the group consumer got too few records"
            outputs[round_] = [b"x" + m.value() for m in taken]
            for m, out in zip(taken, outputs[round_]):
                producer.produce(sink, value=out, partition=m.partition())
            ends = {m.partition(): m.offset() + 1 for m in taken}
            positions = [ck.TopicPartition(source, p, o) for p, o in sorted(ends.items())]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 15)
            assert producer.flush(15) == 0
            # Open transaction: require_stable sees the pending offsets, plain fetch does not.
            pending = {tp.partition for tp in positions}
            stable = conn.group_offsets(group, source, [0, 1], require_stable=True)
            assert {p for p, (code, _) in stable.items() if code == ErrorCode.UNSTABLE_OFFSET_COMMIT} == pending
            assert all(offset == -1 for code, offset in stable.values() if code)
            v8 = conn.group_offsets(group, source, [0, 1], require_stable=True, version=8)
            assert {p for p, (code, _) in v8.items() if code == ErrorCode.UNSTABLE_OFFSET_COMMIT} == pending
            before = conn.group_offsets(group, source, [0, 1])
            if commit:
                producer.commit_transaction(15)
                expected = {tp.partition: tp.offset for tp in positions}
                after = conn.group_offsets(group, source, [0, 1], require_stable=True)
                assert {p: o for p, (_, o) in after.items() if p in expected} == expected
                assert all(code == 0 for code, _ in after.values())
                committed_at_end = after
            else:
                producer.abort_transaction(15)
                after = conn.group_offsets(group, source, [0, 1], require_stable=True)
                assert after == before == committed_at_end, "an aborted transaction moved the offsets"
                # the consumer's own committed() agrees
                got = consumer.committed([ck.TopicPartition(source, p) for p in (0, 1)], timeout=10)
                assert {tp.partition: max(tp.offset, -1) for tp in got} == {p: o for p, (_, o) in after.items()}
    finally:
        consumer.close()
    conn.close()
    assert sorted(consume_confluent(bs, sink, 2, "read_committed", 10)) == sorted(outputs[0])
    assert sorted(consume_confluent(bs, sink, 2, "read_uncommitted", 20)) == sorted(outputs[0] + outputs[1])


def test_kafka_python_send_offsets_to_transaction(broker):
    from kafka.structs import OffsetAndMetadata

    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("kp-offsets"), 2)
    group = unique("kp-group")
    producer = kafka.KafkaProducer(bootstrap_servers=bs, transactional_id=unique("kp-ctp"),
                                   enable_idempotence=True)
    try:
        producer.init_transactions()
        for offset, commit in ((5, True), (9, False)):
            producer.begin_transaction()
            producer.send(topic, value=b"out", partition=0)
            producer.send_offsets_to_transaction(
                {kafka.TopicPartition(topic, p): OffsetAndMetadata(offset + p, "", -1)
                 for p in (0, 1)}, group)
            producer.flush(timeout=15)
            (producer.commit_transaction if commit else producer.abort_transaction)()
            assert conn.group_offsets(group, topic, [0, 1], require_stable=True) == {0: (0, 5), 1: (0, 6)}
    finally:
        producer.close(timeout=5)
        conn.close()


# -- fencing and timeouts --------------------------------------------------------------------

def test_second_producer_fences_the_first(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("fence"), 2)
    txn_id = unique("fenced")
    first = transactional_producer(bs, txn_id)
    first.begin_transaction()
    for i in range(6):
        first.produce(topic, value=b"zombie-%d" % i, partition=i % 2)
    assert first.flush(15) == 0
    assert conn.offsets(topic, [0, 1], committed=True) == {0: 0, 1: 0}  # pinned by the open txn
    second = transactional_producer(bs, txn_id)  # aborts the first one's transaction
    state = conn.describe(txn_id)
    assert state.transaction_state == "Empty" and state.producer_epoch == 2  # fenced at 1, then 2
    with pytest.raises(ck.KafkaException) as info:
        first.produce(topic, value=b"zombie-late", partition=0)
        first.commit_transaction(15)
    error = info.value.args[0]
    assert error.fatal() or error.code() in (ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED,
                                             ck.KafkaError.INVALID_PRODUCER_EPOCH), error
    run_transaction(second, topic, [b"second-%d" % i for i in range(4)], 2, commit=True)
    assert conn.offsets(topic, [0, 1], committed=True) == conn.offsets(topic, [0, 1], committed=False)
    conn.close()
    got = consume_confluent(bs, topic, 2, "read_committed", 4)
    assert sorted(got) == [b"second-%d" % i for i in range(4)]

    # kafka-python: the same, and its commit raises
    txn_id = unique("kp-fenced")
    old = kafka.KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id, enable_idempotence=True)
    new = kafka.KafkaProducer(bootstrap_servers=bs, transactional_id=txn_id, enable_idempotence=True)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, value=b"kp-zombie", partition=0).get(timeout=15)
        new.init_transactions()
        with pytest.raises(kafka.errors.KafkaError) as kp_info:
            old.commit_transaction()
        assert type(kp_info.value).__name__ in ("ProducerFencedError", "InvalidProducerEpochError"), kp_info.value
    finally:
        old.close(timeout=5)
        new.close(timeout=5)


def test_timeout_aborts_an_abandoned_transaction(broker):
    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("abandoned"), 2)
    txn_id = unique("abandoned")
    producer = transactional_producer(bs, txn_id, **{"transaction.timeout.ms": 2000})
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"left-%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    hw = conn.offsets(topic, [0, 1], committed=False)
    assert hw == {0: 3, 1: 3}
    assert conn.offsets(topic, [0, 1], committed=True) == {0: 0, 1: 0}
    assert conn.describe(txn_id).transaction_state == "Ongoing"
    started = time.monotonic()
    wait_for(lambda: conn.offsets(topic, [0, 1], committed=True) == {0: 4, 1: 4}, 10,
             "the broker to abort the timed-out transaction")
    assert time.monotonic() - started < 8
    # The markers come before the CompleteAbort record: PrepareAbort until it is written.
    state = wait_for(lambda: (lambda s: s if s.transaction_state != "PrepareAbort" else None)(
        conn.describe(txn_id)), 10, "the CompleteAbort record after the markers")
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 1)  # fenced
    aborted = conn.fetch(topic, 0, 0, committed=True).aborted_transactions
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(state.producer_id, 0)]
    with pytest.raises(ck.KafkaException):
        producer.commit_transaction(10)
    conn.close()
    assert consume_confluent(bs, topic, 2, "read_committed", 0, quiet=0.5) == []
    assert len(consume_confluent(bs, topic, 2, "read_uncommitted", 6)) == 6


# -- bad input -------------------------------------------------------------------------------

def test_bad_input_gets_kafkas_error_codes(broker):
    conn = raw(broker)
    topic = conn.create_topic(unique("bad"), 2)
    E = ErrorCode
    # InitProducerId
    assert conn.init(unique("t"), timeout_ms=0)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert conn.init(unique("t"), timeout_ms=900_001)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert conn.init("", timeout_ms=1000)[0] == E.INVALID_REQUEST
    assert conn.init(unique("t"), pid=5, epoch=-1)[0] == E.INVALID_REQUEST
    # Unknown transactional ids
    unknown = unique("nobody")
    assert conn.end(unknown, 1, 0, True) == E.INVALID_PRODUCER_ID_MAPPING
    assert set(conn.add(unknown, 1, 0, {topic: [0]}).values()) == {E.INVALID_PRODUCER_ID_MAPPING}
    assert conn.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=unknown, producer_id=1, producer_epoch=0,
                     group_id="g").error_code == E.INVALID_PRODUCER_ID_MAPPING
    described = conn.describe(unknown)
    assert described.error_code == E.TRANSACTIONAL_ID_NOT_FOUND

    txn_id = unique("t")
    code, pid, epoch = conn.init(txn_id)
    assert (code, epoch) == (0, 0) and pid >= 0
    code, pid1, epoch1 = conn.init(txn_id)  # bumps the epoch: epoch 0 is now fenced
    assert (code, pid1, epoch1) == (0, pid, 1)
    # Ending a transaction that was never begun
    assert conn.end(txn_id, pid, 1, True) == E.INVALID_TXN_STATE
    # Wrong producer id, stale epoch (PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before)
    assert set(conn.add(txn_id, pid + 1000, 1, {topic: [0]}).values()) == {E.INVALID_PRODUCER_ID_MAPPING}
    assert set(conn.add(txn_id, pid, 0, {topic: [0]}).values()) == {E.PRODUCER_FENCED}
    assert set(conn.add(txn_id, pid, 0, {topic: [0]}, version=1).values()) == {E.INVALID_PRODUCER_EPOCH}
    assert conn.end(txn_id, pid, 0, True) == E.PRODUCER_FENCED
    assert conn.end(txn_id, pid, 0, True, version=1) == E.INVALID_PRODUCER_EPOCH
    assert conn.end(txn_id, pid + 1000, 1, True) == E.INVALID_PRODUCER_ID_MAPPING
    # A partition that does not exist fails the whole request
    assert conn.add(txn_id, pid, 1, {topic: [0, 7]}) == {(topic, 0): E.OPERATION_NOT_ATTEMPTED,
                                                        (topic, 7): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert conn.describe(txn_id).transaction_state == "Empty"
    # Produce: transactional batches need the transaction to hold the partition
    batch = txn_batch(pid, 1, 0, [b"x"])
    assert conn.produce(topic, 0, batch, txn_id)[0] == E.INVALID_TXN_STATE
    assert conn.produce(topic, 0, batch, None)[0] == E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert conn.produce(topic, 0, txn_batch(pid, 1, 0, [b"x"], transactional=False), txn_id)[0] == E.INVALID_RECORD
    assert conn.produce(topic, 0, txn_batch(pid, 1, -1, [b"x"]), txn_id)[0] == E.INVALID_RECORD
    assert conn.add(txn_id, pid, 1, {topic: [0]}) == {(topic, 0): 0}
    assert conn.produce(topic, 0, txn_batch(pid, 0, 0, [b"x"]), txn_id)[0] == E.INVALID_PRODUCER_EPOCH
    assert conn.produce(topic, 0, txn_batch(pid + 1000, 1, 0, [b"x"]), txn_id)[0] == E.INVALID_PRODUCER_ID_MAPPING
    assert conn.produce(topic, 1, batch, txn_id)[0] == E.INVALID_TXN_STATE  # partition 1 not added
    assert conn.produce(topic, 0, batch, txn_id) == (0, 0)
    # TxnOffsetCommit needs AddOffsetsToTxn first
    commit_body = dict(transactional_id=txn_id, group_id="bad-group", producer_id=pid, producer_epoch=1,
                       generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                       topics=[TXN_OFFSET_COMMIT.request.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                           TXN_OFFSET_COMMIT.request.TxnOffsetCommitRequestPartition(
                               partition_index=0, committed_offset=1, committed_metadata=None)])])
    answer = conn.call(TXN_OFFSET_COMMIT, 3, **commit_body)
    assert answer.topics[0].partitions[0].error_code == E.INVALID_TXN_STATE
    answer = conn.call(TXN_OFFSET_COMMIT, 3, **{**commit_body, "generation_id_or_member_epoch": 4, "member_id": "m"})
    assert answer.topics[0].partitions[0].error_code == E.UNKNOWN_MEMBER_ID
    assert conn.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=0,
                     group_id="bad-group").error_code == E.PRODUCER_FENCED
    assert conn.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=pid, producer_epoch=1,
                     group_id="bad-group").error_code == 0
    answer = conn.call(TXN_OFFSET_COMMIT, 3, **{**commit_body, "producer_epoch": 0})
    assert answer.topics[0].partitions[0].error_code == E.INVALID_PRODUCER_EPOCH
    answer = conn.call(TXN_OFFSET_COMMIT, 3, **commit_body)
    assert answer.topics[0].partitions[0].error_code == 0
    state = conn.describe(txn_id)
    assert state.transaction_state == "Ongoing"
    assert {(t.topic, tuple(t.partitions)) for t in state.topics} >= {(topic, (0,))}
    listed = conn.call(LIST_TRANSACTIONS, 1, state_filters=["Ongoing", "Bogus"], producer_id_filters=[pid],
                       duration_filter=-1)
    assert listed.unknown_state_filters == ["Bogus"]
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(txn_id, "Ongoing")]
    # InitProducerId while Ongoing: aborts it (fencing epoch 1) and asks to retry
    # ... but first EndTxn: commit, retry commit (fine), abort (wrong)
    assert conn.end(txn_id, pid, 1, True) == 0
    conn.completed(txn_id)
    assert conn.end(txn_id, pid, 1, True) == 0
    assert conn.end(txn_id, pid, 1, False) == E.INVALID_TXN_STATE
    assert conn.group_offsets("bad-group", topic, [0]) == {0: (0, 1)}
    # KIP-360 resume: the current epoch is bumped, an older one is fenced (v3: INVALID_PRODUCER_EPOCH)
    assert conn.init(txn_id, pid=pid, epoch=1) == (0, pid, 2)
    assert conn.init(txn_id, pid=pid, epoch=1) == (0, pid, 2)  # a retry of that call
    assert conn.init(txn_id, pid=pid, epoch=0)[0] == E.PRODUCER_FENCED
    assert conn.init(txn_id, pid=pid, epoch=0, version=3)[0] == E.INVALID_PRODUCER_EPOCH
    assert conn.add(txn_id, pid, 2, {topic: [1]}) == {(topic, 1): 0}
    code, _ = conn.produce(topic, 1, txn_batch(pid, 2, 0, [b"y"]), txn_id)
    assert code == 0
    assert conn.init(txn_id)[0] == E.CONCURRENT_TRANSACTIONS  # aborted the open one first
    state = conn.completed(txn_id)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteAbort", 3)
    assert conn.init(txn_id) == (0, pid, 4)
    # WriteTxnMarkers to a partition that does not exist
    markers = conn.call(WRITE_TXN_MARKERS, 1, markers=[WRITE_TXN_MARKERS.request.WritableTxnMarker(
        producer_id=pid, producer_epoch=4, transaction_result=False, coordinator_epoch=0,
        topics=[WRITE_TXN_MARKERS.request.WritableTxnMarkerTopic(name=unique("none"), partition_indexes=[0])])])
    assert markers.markers[0].topics[0].partitions[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
    # The broker kept serving and advertises the transaction APIs
    versions = {a.api_key: (a.min_version, a.max_version)
                for a in conn.call(API_VERSIONS, 3, client_software_name="t",
                                   client_software_version="1").api_keys}
    assert {k: versions[k] for k in (22, 24, 25, 26, 27, 28, 65, 66)} == {
        22: (0, 5), 24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (1, 2), 28: (0, 5), 65: (0, 0), 66: (0, 2)}
    assert conn.call(FIND_COORDINATOR, 3, key=txn_id, key_type=1).error_code == 0
    assert conn.call(METADATA, 9, topics=None, allow_auto_topic_creation=False,
                     include_cluster_authorized_operations=False,
                     include_topic_authorized_operations=False).brokers
    conn.close()
    assert "Traceback" not in "".join(broker.output)


# -- crashes and restarts ------------------------------------------------------------------

@pytest.mark.parametrize("point", ["txn-after-prepare-commit", "txn-after-prepare-before-markers",
                                   "txn-mid-commit-markers"])
def test_crash_in_the_middle_of_a_commit_completes_it_on_restart(tmp_path, monkeypatch, point):
    """The broker dies once PrepareCommit is committed: before answering EndTxn, after
    answering it (no marker written yet), or after the first of its markers; the restart
    writes them all."""
    proc = own_broker(tmp_path, "offsets.topic.num.partitions=3\ntransaction.state.log.num.partitions=3\n")
    monkeypatch.setenv("SLUICE_FAILPOINTS", point)
    proc.start()
    monkeypatch.delenv("SLUICE_FAILPOINTS")
    try:
        conn = raw(proc)
        topic = conn.create_topic("Crash", 3)  # sorts before __consumer_offsets: marked first
        txn_id, group = "crasher", "crash-group"
        code, pid, epoch = conn.init(txn_id)
        assert code == 0
        assert set(conn.add(txn_id, pid, epoch, {topic: [0, 1, 2]}).values()) == {0}
        for p in range(3):
            assert conn.produce(topic, p, txn_batch(pid, epoch, 0, [b"%d-%d" % (p, i) for i in range(5)]),
                                txn_id)[0] == 0
        assert conn.call(ADD_OFFSETS_TO_TXN, 3, transactional_id=txn_id, producer_id=pid,
                         producer_epoch=epoch, group_id=group).error_code == 0
        answer = conn.call(TXN_OFFSET_COMMIT, 3, transactional_id=txn_id, group_id=group, producer_id=pid,
                           producer_epoch=epoch, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                           topics=[TXN_OFFSET_COMMIT.request.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                               TXN_OFFSET_COMMIT.request.TxnOffsetCommitRequestPartition(
                                   partition_index=p, committed_offset=40 + p, committed_metadata="m")
                               for p in range(3)])])
        assert {p.error_code for p in answer.topics[0].partitions} == {0}
        if point == "txn-after-prepare-commit":
            conn.send_expecting_close(END_TXN, 3, transactional_id=txn_id, producer_id=pid,
                                      producer_epoch=epoch, committed=True)
        else:  # answered, then the markers
            assert conn.end(txn_id, pid, epoch, True) == 0
        assert proc.proc.wait(20) == -signal.SIGKILL
        wait_for(lambda: f"fail point {point} reached" in "".join(proc.output), 5, "the crash notice")
        conn.close()
        proc.start()  # recovers; the coordinator finishes the commit before serving
        conn = raw(proc)
        assert conn.describe(txn_id).transaction_state == "CompleteCommit"
        # Partition 0 got its marker before the crash, and a second one after it.
        ends = {0: 7 if point == "txn-mid-commit-markers" else 6, 1: 6, 2: 6}
        assert conn.offsets(topic, range(3), committed=True) == ends
        assert conn.offsets(topic, range(3), committed=False) == ends
        assert conn.group_offsets(group, topic, range(3), require_stable=True) == {0: (0, 40), 1: (0, 41), 2: (0, 42)}
        for p in range(3):
            assert conn.fetch(topic, p, 0, committed=True).aborted_transactions == []
        conn.close()
        got = consume_confluent(proc.bootstrap_servers, topic, 3, "read_committed", 15)
        assert sorted(got) == sorted(b"%d-%d" % (p, i) for p in range(3) for i in range(5))
    finally:
        proc.kill()


def test_sigkill_while_transactions_commit_leaves_each_whole_or_absent(tmp_path):
    """Two confluent producers commit 3-partition transactions in a loop; the broker is
    SIGKILLed mid-stream. After a restart every transaction is all there or not at all."""
    proc = own_broker(tmp_path, "offsets.topic.num.partitions=2\ntransaction.state.log.num.partitions=2\n")
    proc.start()
    try:
        conn = raw(proc)
        topic = conn.create_topic("loop", 3)
        conn.close()
        stop = threading.Event()
        committed: list[str] = []

        def run(name):
            producer = ck.Producer({"bootstrap.servers": proc.bootstrap_servers, "transactional.id": name,
                                    "linger.ms": 1, "transaction.timeout.ms": 4000,
                                    "message.timeout.ms": 3000, "socket.timeout.ms": 2000})
            try:
                producer.init_transactions(10)
                for n in range(10_000):
                    if stop.is_set():
                        break
                    tag = f"{name}/{n}"
                    producer.begin_transaction()
                    for p in range(3):
                        for i in range(3):
                            producer.produce(topic, value=f"{tag}/{i}".encode(), partition=p)
                    producer.commit_transaction(5)
                    committed.append(tag)
            except ck.KafkaException:
                pass  # the broker died under us

        threads = [threading.Thread(target=run, args=(f"loop-{k}",), daemon=True) for k in range(2)]
        for t in threads:
            t.start()
        wait_for(lambda: len(committed) >= 15, 30, "transactions to commit")
        proc.kill()
        stop.set()
        for t in threads:
            t.join(30)
            assert not t.is_alive(), "a producer thread did not give up"
        proc.start()
        conn = raw(proc)
        wait_for(lambda: conn.offsets(topic, range(3), committed=True) ==
                 conn.offsets(topic, range(3), committed=False), 15, "no transaction left open")
        conn.close()
        got = consume_confluent(proc.bootstrap_servers, topic, 3, "read_committed", len(committed) * 9)
        by_txn: dict[str, list] = {}
        for value in got:
            tag, _, i = value.decode().rpartition("/")
            by_txn.setdefault(tag, []).append(i)
        assert set(committed) <= set(by_txn), "an acknowledged commit was lost"
        partial = {tag: n for tag, n in by_txn.items() if len(n) != 9}
        assert not partial, f"transactions seen in part: {partial}"
    finally:
        proc.kill()


def test_open_transaction_survives_restarts_until_its_timeout(tmp_path):
    proc = own_broker(tmp_path, "transaction.state.log.num.partitions=2\n")
    proc.start()
    try:
        conn = raw(proc)
        topic = conn.create_topic("pinned", 2)
        assert conn.produce(topic, 0, build_batch([(None, b"before", (), 1)]), None)[0] == 0
        txn_id = "slow"
        code, pid, epoch = conn.init(txn_id, timeout_ms=8000)
        assert set(conn.add(txn_id, pid, epoch, {topic: [0, 1]}).values()) == {0}
        for p in range(2):
            assert conn.produce(topic, p, txn_batch(pid, epoch, 0, [b"open-a", b"open-b"]), txn_id)[0] == 0
        assert conn.produce(topic, 0, build_batch([(None, b"after", (), 1)]), None)[0] == 0
        pinned = {0: 1, 1: 0}
        assert conn.offsets(topic, [0, 1], committed=True) == pinned
        conn.close()
        proc.stop()  # clean: the open transaction is in the producer-state snapshot
        proc.start()
        conn = raw(proc)
        assert conn.offsets(topic, [0, 1], committed=True) == pinned
        assert conn.describe(txn_id).transaction_state == "Ongoing"
        conn.close()
        proc.kill()  # unclean: rebuilt by replaying the batch headers
        for name in os.listdir(proc.data_dir + f"/{topic}-0"):
            if name.endswith(".snapshot"):
                os.unlink(os.path.join(proc.data_dir, f"{topic}-0", name))
        proc.start()
        conn = raw(proc)
        assert conn.offsets(topic, [0, 1], committed=True) == pinned
        assert conn.offsets(topic, [0, 1], committed=False) == {0: 4, 1: 2}
        wait_for(lambda: conn.offsets(topic, [0, 1], committed=True) == {0: 5, 1: 3}, 15,
                 "the timeout to abort the transaction")
        assert (conn.describe(txn_id).transaction_state, conn.describe(txn_id).producer_epoch) == ("CompleteAbort", 1)
        # the fenced producer cannot write any more
        assert conn.produce(topic, 0, txn_batch(pid, epoch, 1, [b"late"]), txn_id)[0] == ErrorCode.INVALID_PRODUCER_EPOCH
        aborted = [(a.producer_id, a.first_offset) for a in conn.fetch(topic, 0, 0, committed=True).aborted_transactions]
        assert aborted == [(pid, 1)]
        conn.close()
        assert sorted(consume_confluent(proc.bootstrap_servers, topic, 2, "read_committed", 2)) == [b"after", b"before"]
        assert any(name.endswith(".txnindex") for name in os.listdir(proc.data_dir + f"/{topic}-0"))
        for restart in (proc.restart, lambda: (proc.kill(), proc.start())):
            restart()  # the aborted index is read back (clean) or rebuilt (unclean)
            conn = raw(proc)
            aborted = [(a.producer_id, a.first_offset)
                       for a in conn.fetch(topic, 0, 0, committed=True).aborted_transactions]
            assert aborted == [(pid, 1)]
            assert conn.offsets(topic, [0, 1], committed=True) == {0: 5, 1: 3}
            conn.close()
    finally:
        proc.kill()
    assert "Traceback" not in "".join(proc.output)


def test_transaction_state_log_is_compacted_and_replayed(tmp_path):
    proc = own_broker(tmp_path, "transaction.state.log.num.partitions=1\n"
                                "transaction.state.log.segment.bytes=1024\n"
                                "log.cleaner.backoff.ms=100\n"
                                "transaction.remove.expired.transaction.cleanup.interval.ms=300\n")
    proc.start()
    try:
        conn = raw(proc)
        topic = conn.create_topic("cleaned", 1)
        ids = {}
        for k in range(3):
            code, pid, epoch = conn.init(f"id-{k}")
            ids[f"id-{k}"] = (pid, epoch)
        for n in range(25):
            for txn_id, (pid, epoch) in ids.items():
                assert conn.add(txn_id, pid, epoch, {topic: [0]}) == {(topic, 0): 0}
                assert conn.end(txn_id, pid, epoch, n % 2 == 1) == 0  # the last one aborts
        state_dir = os.path.join(proc.data_dir, "__transaction_state-0")

        def compacted():  # 450 state changes of 3 ids: ~50 segments before compaction
            logs = [n for n in os.listdir(state_dir) if n.endswith(".log")]
            return log_bytes(proc.data_dir, "__transaction_state", 0)[0] <= 4096 \
                and min(int(n[:-4]) for n in logs) == 0  # compacted, not deleted

        wait_for(compacted, 20, "the cleaner to compact __transaction_state")
        before = {txn_id: conn.describe(txn_id) for txn_id in ids}
        assert {s.transaction_state for s in before.values()} == {"CompleteAbort"}
        conn.close()
        proc.kill()
        proc.start()
        conn = raw(proc)
        for txn_id, (pid, epoch) in ids.items():
            state = conn.describe(txn_id)
            assert (state.transaction_state, state.producer_id, state.producer_epoch) == ("CompleteAbort", pid, epoch)
            assert conn.end(txn_id, pid, epoch, False) == 0  # a retry of the last abort
            assert conn.init(txn_id) == (0, pid, epoch + 1)
        conn.close()
        # Idle transactional ids expire (tombstones), for good.
        config = tmp_path / "server.properties"
        config.write_text(config.read_text() + "transactional.id.expiration.ms=1000\n")
        proc.restart()
        conn = raw(proc)
        wait_for(lambda: all(conn.describe(txn_id).error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                             for txn_id in ids), 10, "the transactional ids to expire")
        conn.close()
        proc.kill()
        proc.start()
        conn = raw(proc)
        assert {conn.describe(txn_id).error_code for txn_id in ids} == {ErrorCode.TRANSACTIONAL_ID_NOT_FOUND}
        code, pid, epoch = conn.init("id-0")
        assert code == 0 and epoch == 0 and pid not in {p for p, _ in ids.values()}
        conn.close()
    finally:
        proc.kill()
    assert "Traceback" not in "".join(proc.output)


# -- the partition log, in process -------------------------------------------------------------

def test_partition_log_transactions(tmp_path):
    from broker.config import LogConfig
    from broker.storage.log import PartitionLog

    def append(partition, pid, epoch, seq, n, transactional):
        batch = bytearray(txn_batch(pid, epoch, seq, [b"v%d" % i for i in range(n)], transactional))
        view = memoryview(batch)
        return partition.append_as_leader(next(iter(iter_batches(view)))[0], view, required_acks=1)

    config = LogConfig(segment_bytes=400)
    log = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=0)
    partition = leading(log)
    append(partition, -1, -1, -1, 2, False)           # 0-1
    append(partition, 7, 0, 0, 3, True)               # 2-4: producer 7 opens
    append(partition, 8, 0, 0, 1, True)               # 5: producer 8 opens
    assert (log.last_stable_offset, log.high_watermark) == (2, 6)
    assert partition.append_marker_as_leader(7, 0, 0, commit=False) == 6
    assert log.last_stable_offset == 5
    assert partition.append_marker_as_leader(8, 0, 0, commit=True) == 7
    assert log.last_stable_offset == 8
    assert [tuple(a) for a in log.aborted_transactions(0, 100)] == [(7, 2, 6, 5)]
    assert partition.append_marker_as_leader(8, 0, 0, commit=True) == 8  # no open transaction: closes nothing
    with pytest.raises(BrokerError) as info:
        partition.append_marker_as_leader(7, 0, -1, commit=False)  # an older coordinator epoch
    assert info.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    seq = 3
    for n in range(12):  # across several segments
        append(partition, 7, 0, seq, 2, True)
        seq += 2
        partition.append_marker_as_leader(7, 0, 0, commit=n % 3 == 0)
    assert len(log.segments) > 3
    expected = log.aborted_transactions(0, log.log_end_offset)
    assert len(expected) == 1 + 8
    # A read_committed read lists only the aborted transactions within what it returns.
    region, aborted = log.read_committed(0, 10, min_one_batch=True)
    assert region is not None and aborted == []  # the first batch only: offsets 0-1
    region, aborted = log.read_committed(2, 1 << 20, min_one_batch=True)
    assert [a.first_offset for a in aborted] == [2]
    # A stale epoch marker is refused
    append(partition, 9, 3, 0, 1, True)
    with pytest.raises(BrokerError) as info:
        partition.append_marker_as_leader(9, 2, 0, commit=False)
    assert info.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    open_at = log.log_end_offset - 1
    assert log.last_stable_offset == open_at
    log.close()
    names = os.listdir(tmp_path)
    assert sum(n.endswith(".txnindex") for n in names) >= 3

    clean = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=None)
    leading(clean)
    assert clean.aborted_transactions(0, clean.log_end_offset) == expected
    assert clean.last_stable_offset == open_at
    clean.close()
    # Unclean: no snapshots, no transaction indexes: everything is rebuilt from the log.
    for name in os.listdir(tmp_path):
        if name.endswith((".snapshot", ".txnindex")):
            os.unlink(tmp_path / name)
    recovered = PartitionLog(str(tmp_path), "t", 0, config, recovery_point=0)
    assert recovered.aborted_transactions(0, recovered.log_end_offset) == expected
    reopened = leading(recovered)  # leads from here: the high watermark is the log end
    assert recovered.last_stable_offset == open_at
    assert reopened.append_marker_as_leader(9, 3, 0, commit=False) == open_at + 1
    assert recovered.last_stable_offset == recovered.high_watermark
    # Deleting segments deletes their transaction indexes (renamed to be removed later).
    txn_index = recovered.segments[0].txn_index.path
    assert os.path.exists(txn_index)
    recovered.delete_records_before(recovered.segments[2].base_offset)
    assert not os.path.exists(txn_index) and os.path.exists(txn_index + ".deleted")
    # Markers are control records read_committed clients skip.
    values = []
    for segment in recovered.segments:
        for header, batch in iter_batches(segment.region(0, segment.size).read()):
            if not header.is_control:
                values += [r.value for r in decode_batch(batch, 1 << 20)]
    assert values
    recovered.close()


def test_transaction_config_keys():
    from broker.config import BrokerConfig, ConfigError, build_config

    defaults = BrokerConfig()
    assert (defaults.transaction_max_timeout_ms, defaults.transaction_state_log_num_partitions,
            defaults.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            defaults.transactional_id_expiration_ms) == (900_000, 50, 10_000, 604_800_000)
    config, warnings = build_config({
        "transaction.max.timeout.ms": "60000",
        "transaction.state.log.num.partitions": "7",
        "transaction.state.log.segment.bytes": "4096",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "250",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
        "transactional.id.expiration.ms": "5000"}, {"data_dir": "/tmp/unused"})
    assert warnings == []
    assert (config.transaction_max_timeout_ms, config.transaction_state_log_num_partitions,
            config.transaction_state_log_segment_bytes,
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            config.transaction_remove_expired_transaction_cleanup_interval_ms,
            config.transactional_id_expiration_ms) == (60_000, 7, 4096, 250, 1000, 5000)
    with pytest.raises(ConfigError, match="transaction.state.log.num.partitions"):
        build_config({"transaction.state.log.num.partitions": "0"}, {"data_dir": "/tmp/unused"})


def test_sluice_client_describes_and_lists_transactions(broker):
    """Sluice's client's DescribeTransactions and ListTransactions (the exactly-once
    sink settles and sweeps transactions with them)."""
    from sluice_client import Client
    from wire.errors import KafkaError

    bs = broker.bootstrap_servers
    conn = raw(broker)
    topic = conn.create_topic(unique("described"), 2)
    conn.close()
    txn_id = unique("described")
    with Client(bs) as client:
        pid, epoch = client.producer.init_transactions(txn_id, 30_000)
        state = client.admin.describe_transaction(txn_id)
        assert (state.state, state.producer_id, state.producer_epoch, state.timeout_ms,
                state.start_ms, state.partitions) == ("Empty", pid, epoch, 30_000, -1, ())
        client.producer.add_partitions_to_txn(txn_id, pid, epoch, {topic: [1, 0]})
        state = client.admin.describe_transaction(txn_id)
        assert state.state == "Ongoing" and state.start_ms > 0
        assert sorted(state.partitions) == [(topic, 0), (topic, 1)]
        ongoing = [t for t in client.admin.list_transactions(["Ongoing"]) if t.transactional_id == txn_id]
        assert [(t.producer_id, t.state) for t in ongoing] == [(pid, "Ongoing")]
        client.producer.end_txn(txn_id, pid, epoch, commit=False)
        # EndTxn is answered once PrepareAbort is written; the markers and CompleteAbort follow.
        wait_for(lambda: client.admin.describe_transaction(txn_id).state == "CompleteAbort", 30,
                 "the abort to complete")
        assert txn_id not in {t.transactional_id for t in client.admin.list_transactions(["Ongoing"])}
        assert txn_id in {t.transactional_id for t in client.admin.list_transactions()}
        with pytest.raises(KafkaError) as missing:
            client.admin.describe_transaction(unique("never-used"))
        assert missing.value.code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


def test_internal_topics_belong_to_the_broker(broker):
    """Clients can neither produce to, delete nor add partitions to __consumer_offsets
    and __transaction_state (INVALID_TOPIC_EXCEPTION); nothing changes on disk, and
    Metadata still lists them as internal."""
    from sluice_client import Client, NewTopic
    from wire.errors import KafkaError

    data = broker.data_dir
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"plain": NewTopic(1)})
        client.consumer.commit_offsets("internal-check", {("plain", 0): 0})  # creates __consumer_offsets
        client.producer.init_transactions(unique("internal"), 10_000)  # creates __transaction_state
        internal = ("__consumer_offsets", "__transaction_state")

        def listing():  # a checkpoint's temporary file, there while it is written, left out
            return sorted(name for name in os.listdir(data) if not name.endswith(".tmp"))

        before = listing()
        for name in internal:
            with pytest.raises(KafkaError) as refused:
                client.producer.produce(name, 0, [(b"k", b"forged", (), None)])
            assert refused.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
            assert "internal" in str(refused.value)
        deleted = client.admin.delete_topics(internal)
        assert {n: e.code for n, e in deleted.items()} == dict.fromkeys(internal, ErrorCode.INVALID_TOPIC_EXCEPTION)
        grown = client.admin.create_partitions({name: 80 for name in internal})
        assert {n: e.code for n, e in grown.items()} == dict.fromkeys(internal, ErrorCode.INVALID_TOPIC_EXCEPTION)
        metadata = client.metadata(list(internal))
        assert all(metadata.topics[name].is_internal and metadata.topics[name].error_code == 0
                   for name in internal)
        assert listing() == before
        client.consumer.commit_offsets("internal-check", {("plain", 0): 1})  # the broker's own writes go on
        assert client.consumer.fetch_offsets("internal-check", [("plain", 0)])[("plain", 0)].offset == 1
