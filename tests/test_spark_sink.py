"""The `sluice` sink in real Spark against the real broker process.

Streaming, Kafka -> Spark -> Kafka: the Spark driver runs as a process of its own
(tests/spark_sink_job.py) so that it can be killed. The job's fault injection
(SLUICE_TEST_SINK_CRASH, around the real sink writer) SIGKILLs the whole driver at one
exact point of a chosen micro-batch: during the task writes, after the task writes
(before the sink commit), after the intent record, in the middle of the EndTxns, after
the sink commit (before Spark's commit log). Each kill is followed by a restart from the
same checkpoint, which first replays the killed batch. The last run goes to the end
(availableNow). The output is then read record by record from the raw log: every data
batch is classified by the marker that ended its transaction (committed, aborted, still
open) or as non-transactional. The claims:
- exactly_once: what read_committed consumers see (our Sluice client, confluent-kafka)
  holds every input record exactly once, with key, value and headers; read_uncommitted
  shows more, and every extra record is in an aborted transaction, exactly the data the
  killed attempts had written before the intent (none after it);
- at_least_once: nothing is lost; the duplicates are counted;
- task failures (master local[2,3]; every write task's first attempt fails after
  producing): exactly once again; the failed attempts' data is aborted and their
  producer epoch is fenced.
Batch writes (`df.write`: contents, partitioning against confluent-kafka's murmur2, topic
column and option, compression), a failing micro-batch and its restart, option and
column mistakes, and the decisions of every query in one shared topic (found past
another query's intent left open) run in the shared Spark session. Two drivers of one
query are also stepped through by hand: the sink's driver side (commit, abort) called
in a chosen order on write tasks' open transactions, written by the sink's task code.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("pyspark")
confluent_kafka = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

import pyarrow as pa  # noqa: E402

from spark_connector.options import EXACTLY_ONCE, SinkOptions  # noqa: E402
from spark_connector.sink import (Intent, SluiceSinkError, SluiceStreamWriter, TaskCommit, _task_txn_id,  # noqa: E402
                                  _write_slot, last_intent as sink_last_intent)
from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.test_metrics import BROKER_PROPERTIES, requests_answered, start_broker  # noqa: E402
from sluice_client import LATEST, READ_COMMITTED, TOPIC_RESOURCE, Client, NewTopic  # noqa: E402
from wire.errors import ErrorCode, KafkaError  # noqa: E402
from wire.internal_topics import SINK_INTENTS_TOPIC  # noqa: E402
from wire.records import CONTROL_COMMIT, build_batch, decode_batch, decode_control_record, iter_batches  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER_TIMEOUT = 150  # seconds one driver process may take (start, replay, crash or finish)
MAX_DECOMPRESSED = 64 * 1024 * 1024
EOS_POINTS = ("during-task-writes", "after-task-writes", "after-intent", "mid-commit", "after-commit")
# at_least_once has no sink commit: after-task-writes and after-commit are the same moment
# (all rows written, Spark's commit log not), and there is no intent.
ALO_POINTS = ("during-task-writes", "after-commit")


# -- fixtures and helpers ------------------------------------------------------------------

@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("sink-broker") / "data") as proc:
        yield proc.bootstrap_servers


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    with Client(bootstrap) as client:
        created = client.admin.create_topics({n: NewTopic(partitions=partitions, replication_factor=1)
                                        for n in names})
    for name in names:
        assert created[name].error is None, created[name]


def produce_input(bootstrap: str, topic: str, partitions: int, count: int) -> dict[str, tuple]:
    """Records with unique ids 0..count-1; id i goes to partition i % partitions, at offset
    i // partitions. Returns {id: (key, value, headers)}."""
    records = {}
    with Client(bootstrap) as client:
        for p in range(partitions):
            rows = []
            for i in range(p, count, partitions):
                rid = f"{i:06d}"
                key = None if i % 10 == 7 else f"key-{i}".encode()
                value = f"id={rid};".encode() + bytes([i % 256]) * (i % 50)
                headers = (("id", rid.encode()), ("n", None)) if i % 2 else (("id", rid.encode()),)
                rows.append((key, value, list(headers), None))
                records[rid] = (key, value, headers)
            for start in range(0, len(rows), 500):
                client.producer.produce(topic, p, rows[start:start + 500])
    return records


def record_id(value: bytes) -> str:
    assert value.startswith(b"id="), value
    return value[3:9].decode()


class Output:
    """A topic's records, from the raw log, by fate: committed, aborted, open (no marker
    yet) or plain (non-transactional). Each record is (id, partition, key, value, headers,
    producer id, producer epoch, offset). `bootstrap` may list several brokers."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self.committed, self.aborted, self.open, self.plain = [], [], [], []
        # (partition, producer id, epoch, committed?, seconds from the transaction's last
        # write in the partition to its marker)
        self.markers = []
        with Client(bootstrap) as client:
            for p in range(partitions):
                end = client.consumer.list_offsets(topic, [p], LATEST)[p].offset
                offset, pending, last_write = 0, {}, {}
                for _ in range(100_000):
                    if offset >= end:
                        break
                    fetched = client.consumer.fetch(topic, p, offset, max_wait_ms=0, max_bytes=4 << 20)
                    for header, batch in iter_batches(fetched.records):
                        if header.last_offset < offset:
                            continue
                        offset = header.last_offset + 1
                        records = decode_batch(batch, MAX_DECOMPRESSED)
                        pid = header.producer_id
                        if header.is_control:
                            committed = decode_control_record(records[0]).type == CONTROL_COMMIT
                            held = (header.max_timestamp - last_write.pop(pid, header.max_timestamp)) / 1000
                            self.markers.append((p, pid, header.producer_epoch, committed, held))
                            (self.committed if committed else self.aborted).extend(pending.pop(pid, []))
                            continue
                        rows = [(record_id(r.value), p, r.key, r.value, tuple(r.headers), pid,
                                 header.producer_epoch, r.offset) for r in records]
                        if header.is_transactional:
                            pending.setdefault(pid, []).extend(rows)
                            last_write[pid] = header.max_timestamp
                        else:
                            self.plain.extend(rows)
                else:
                    raise AssertionError(f"{topic}-{p}: no end in sight at offset {offset}")
                for rows in pending.values():
                    self.open.extend(rows)

    @staticmethod
    def ids(rows) -> collections.Counter:
        return collections.Counter(r[0] for r in rows)


def read_committed_wire(bootstrap: str, topic: str, partitions: int) -> collections.Counter:
    """Ids as our Sluice client's read_committed fetch returns them."""
    ids = collections.Counter()
    with Client(bootstrap) as client:
        for p in range(partitions):
            end = client.consumer.list_offsets(topic, [p], LATEST, isolation_level=READ_COMMITTED)[p].offset
            offset = 0
            for _ in range(100_000):
                if offset >= end:
                    break
                fetched = client.consumer.fetch_records(topic, p, offset, max_wait_ms=0,
                                               isolation_level=READ_COMMITTED)
                ids.update(record_id(r.value) for r in fetched.records if r.offset < end)
                offset = fetched.next_offset
    return ids


def consume_to_end(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(partition, offset, key, value, headers) of every record confluent-kafka's consumer
    reads from the beginning to the end of each partition, in the order it reads them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("check"),
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation})
    consumer.assign([TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in range(partitions)])
    rows, done = [], set()
    deadline = time.monotonic() + 60
    try:
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"consuming {topic} ({isolation}) did not reach the end"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, message.error()
                done.add(message.partition())
                continue
            rows.append((message.partition(), message.offset(), message.key(), message.value(),
                         tuple(message.headers() or ())))
    finally:
        consumer.close()
    return rows


def consume(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[tuple]:
    """(id, partition, key, value, headers) as confluent-kafka's consumer sees them."""
    return [(record_id(value), partition, key, value, headers)
            for partition, _, key, value, headers in consume_to_end(bootstrap, topic, partitions, isolation)]


def numbered(directory: str) -> list[int]:
    if not os.path.isdir(directory):
        return []
    return sorted(int(n) for n in os.listdir(directory) if n.isdigit())


def batch_end_offsets(checkpoint: str, batch: int) -> dict[int, int]:
    """The end offsets (per input partition) of micro-batch `batch`, from Spark's offset log."""
    if batch < 0:
        return collections.defaultdict(int)
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        [source] = json.loads(f.read().splitlines()[-1]).values()
    return collections.defaultdict(int, {int(p): o for p, o in source.items()})


def ids_before(checkpoint: str, batch: int, partitions: int) -> set[str]:
    """Ids of the input records of micro-batches 0..batch."""
    ends = batch_end_offsets(checkpoint, batch)
    return {f"{o * partitions + p:06d}" for p in range(partitions) for o in range(ends[p])}


def query_id(checkpoint: str) -> str:
    with open(os.path.join(checkpoint, "metadata")) as f:
        return json.load(f)["id"]


def last_intent(bootstrap: str, checkpoint: str) -> Intent | None:
    with Client(bootstrap) as client:
        return sink_last_intent(client, query_id(checkpoint))


class Driver:
    """tests/spark_sink_job.py in a session of its own, its output in `log`."""

    def __init__(self, tmp_path, bootstrap, source, output, checkpoint, guarantee):
        self.args = [bootstrap, source, output, checkpoint]
        self.guarantee = guarantee
        self.timeout = DRIVER_TIMEOUT
        self.log_path = tmp_path / "driver.log"
        self.crash_log = tmp_path / "crash.log"

    def run(self, mode: str, max_offsets: int, **env) -> int:
        started = time.monotonic()
        with open(self.log_path, "a") as log:
            log.write(f"\n==== {mode} {env}\n")
            log.flush()
            proc = subprocess.Popen(
                [sys.executable, os.path.join(ROOT, "tests", "spark_sink_job.py"), *self.args, mode,
                 str(max_offsets), self.guarantee],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                env={**os.environ, "SLUICE_TEST_SINK_CRASH_LOG": str(self.crash_log),
                     "SLUICE_TEST_LIFETIME": str(self.timeout - 30), **env})
            try:
                code = proc.wait(self.timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(30)
        print(f"driver {mode} {env.get('SLUICE_TEST_SINK_CRASH', '')}: exit {code} "
              f"after {time.monotonic() - started:.1f} s")
        assert code is not None, f"driver still running after {self.timeout} s:\n{self.log()}"
        return code

    def crash(self, point: str, batch: int, max_offsets: int = 150, **env) -> None:
        """Run until the job's fault injection kills the driver at `point` of micro-batch
        `batch`."""
        code = self.run("processing", max_offsets, SLUICE_TEST_SINK_CRASH=point,
                        SLUICE_TEST_SINK_CRASH_BATCH=str(batch), **env)
        assert code == -signal.SIGKILL, f"driver exited with {code}, not by the hook:\n{self.log()}"
        point_reached, batch_reached, _ = self.crash_log.read_text().splitlines()[-1].split()
        assert (point_reached, int(batch_reached)) == (point, batch)
        time.sleep(0.5)  # let requests the kill left in flight land before looking

    def log(self) -> str:
        return self.log_path.read_text()[-6000:]


def stream_case(kafka: str, tmp_path, name: str, partitions: int, count: int,
                guarantee: str = "exactly_once") -> tuple[Driver, str, dict, str]:
    """Input topic NAME-in holding `count` records (see produce_input), an empty output
    topic NAME-out, and a driver for the stream between them: (driver, output topic,
    expected records, checkpoint)."""
    source, output = unique(f"{name}-in"), unique(f"{name}-out")
    create_topics(kafka, partitions, source, output)
    expected = produce_input(kafka, source, partitions, count)
    checkpoint = str(tmp_path / "checkpoint")
    return Driver(tmp_path, kafka, source, output, checkpoint, guarantee), output, expected, checkpoint


def next_batch(checkpoint: str) -> int:
    commits = numbered(os.path.join(checkpoint, "commits"))
    return commits[-1] + 1 if commits else 0


# -- 1: exactly once through SIGKILLs at every point ---------------------------------------

@pytest.mark.long  # minutes of SIGKILLed drivers: `make test-long`
@pytest.mark.timeout((len(EOS_POINTS) + 1) * DRIVER_TIMEOUT)  # each driver run bounded on its own
def test_exactly_once_survives_driver_kills_at_every_point(kafka, tmp_path):
    partitions, count = 3, 3000
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "eos", partitions, count)

    left_open = 0  # records the killed attempts left in open transactions before any intent
    for n, point in enumerate(EOS_POINTS):
        # Each later run first finishes the batch the previous kill interrupted (a replay),
        # then is killed in the next one.
        batch = next_batch(checkpoint) + (1 if n else 0)
        driver.crash(point, batch)
        assert numbered(os.path.join(checkpoint, "offsets"))[-1] == batch
        assert next_batch(checkpoint) == batch  # Spark's commit log does not have the batch
        done = ids_before(checkpoint, batch - 1, partitions)
        in_batch = ids_before(checkpoint, batch, partitions) - done
        intent = last_intent(kafka, checkpoint)
        out = Output(kafka, output, partitions)
        committed, still_open = Output.ids(out.committed), Output.ids(out.open)
        assert not out.plain
        assert max(committed.values(), default=1) == 1 and max(still_open.values(), default=1) == 1
        assert set(still_open) <= in_batch and not set(committed) & set(still_open)
        if point in ("during-task-writes", "after-task-writes"):
            assert intent is None or intent.batch == batch - 1
            assert set(committed) == done
            if point == "after-task-writes":
                assert set(still_open) == in_batch
            assert still_open, "the killed tasks left no open transaction"
            left_open += len(still_open)
        else:
            assert intent.batch == batch and len(intent.txns()) == partitions
            if point == "after-intent":
                assert set(committed) == done and set(still_open) == in_batch
            elif point == "mid-commit":
                assert done < set(committed) < done | in_batch
                assert set(committed) | set(still_open) == done | in_batch
            else:
                assert set(committed) == done | in_batch and not still_open
        print(f"killed {point} in batch {batch}: {len(committed)} committed, {len(still_open)} open, "
              f"{len(out.aborted)} aborted")

    assert driver.run("available-now", 1000) == 0, driver.log()

    out = Output(kafka, output, partitions)
    assert not out.open and not out.plain
    committed = sorted((r[0], r[2], r[3], r[4]) for r in out.committed)
    assert committed == sorted((rid, *record) for rid, record in expected.items())  # each id once
    # The duplicates are exactly what the killed attempts wrote before an intent existed;
    # replays after the intent wrote nothing.
    assert len(out.aborted) == left_open
    assert set(Output.ids(out.aborted)) <= set(expected)

    assert read_committed_wire(kafka, output, partitions) == collections.Counter(list(expected))
    seen = consume(kafka, output, partitions, "read_committed")
    assert sorted(seen) == sorted((r[0], r[1], r[2], r[3], r[4]) for r in out.committed)
    everything = consume(kafka, output, partitions, "read_uncommitted")
    assert len(everything) == count + len(out.aborted)
    print(f"exactly_once: {count} records once under read_committed; read_uncommitted shows "
          f"{len(out.aborted)} more, all in aborted transactions")


# -- 3: at least once through the same kills -----------------------------------------------

@pytest.mark.long  # minutes of SIGKILLed drivers: `make test-long`
@pytest.mark.timeout((len(ALO_POINTS) + 1) * DRIVER_TIMEOUT)  # each driver run bounded on its own
def test_at_least_once_survives_driver_kills_without_loss(kafka, tmp_path):
    partitions, count = 3, 2000
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "alo", partitions, count, "at_least_once")

    replayed_whole = 0  # rows of batches killed after all their writes: written twice
    for n, point in enumerate(ALO_POINTS):
        batch = next_batch(checkpoint) + (1 if n else 0)
        driver.crash(point, batch)
        assert next_batch(checkpoint) == batch
        in_batch = ids_before(checkpoint, batch, partitions) - ids_before(checkpoint, batch - 1, partitions)
        written = Output.ids(Output(kafka, output, partitions).plain)
        assert set(written) >= ids_before(checkpoint, batch - 1, partitions)
        if point != "during-task-writes":
            assert set(written) >= in_batch
            replayed_whole += len(in_batch)
        print(f"killed {point} in batch {batch}: {sum(written.values())} records written so far")
    assert driver.run("available-now", 1000) == 0, driver.log()

    out = Output(kafka, output, partitions)
    assert not out.committed and not out.aborted and not out.open
    ids = Output.ids(out.plain)
    assert set(ids) == set(expected)  # nothing lost
    duplicates = sum(ids.values()) - count
    assert duplicates >= replayed_whole + 1, (duplicates, replayed_whole)
    contents = {(r[0], r[2], r[3], r[4]) for r in out.plain}
    assert contents == {(rid, *record) for rid, record in expected.items()}  # duplicates are exact copies
    assert len(consume(kafka, output, partitions, "read_committed")) == count + duplicates
    print(f"at_least_once: {count} records, none lost, {duplicates} duplicates "
          f"({len([i for i, n in ids.items() if n > 1])} ids written more than once)")


# -- 2: task failures, retried ---------------------------------------------------------------

def test_failed_first_attempts_are_fenced_and_aborted(kafka, tmp_path):
    partitions, count = 3, 900
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "retry", partitions, count)
    create_topics(kafka, partitions, output + "-batch")
    assert driver.run("fail-first-attempt", 450) == 0, driver.log()  # two micro-batches

    for topic in (output, output + "-batch"):
        out = Output(kafka, topic, partitions)
        assert not out.open and not out.plain
        assert Output.ids(out.committed) == collections.Counter(list(expected))  # exactly once
        # Every task's first attempt produced all its rows, then failed: all aborted.
        assert Output.ids(out.aborted) == collections.Counter(list(expected))
        assert read_committed_wire(kafka, topic, partitions) == collections.Counter(list(expected))
        # Each attempt writes under a transactional id of its own, so a retry (or a
        # speculative copy) never fences another attempt: no producer id both aborted
        # and committed rows.
        assert not {r[5] for r in out.aborted} & {r[5] for r in out.committed}
        # The failed attempts' transactions were aborted when the batch committed, not
        # left to transaction.timeout.ms (15 minutes): how long each held
        # read_committed readers back, from its last write to its ABORT marker.
        stalls = [held for *_, committed, held in out.markers if not committed]
        print(f"{topic}: {len(stalls)} aborted attempts held the stable offset for "
              f"{min(stalls):.1f}-{max(stalls):.1f} s")
        assert stalls and max(stalls) < 60

    # A zombie of a failed attempt (its old epoch) can neither write nor commit: the
    # abort fenced its transactional id.
    with Client(kafka) as client:
        ids = {t.producer_id: t.transactional_id for t in client.admin.list_transactions()
               if t.transactional_id.startswith(f"sluice-{query_id(checkpoint)}-")}
        out = Output(kafka, output, partitions)
        zombies = {(r[5], r[6]) for r in out.aborted}
        assert len({pid for pid, _ in zombies}) == partitions  # one id per slot, both batches
        for pid, old in zombies:
            txn_id = ids[pid]
            assert txn_id.endswith("-0")  # the first attempt's id; retries wrote under "-1"
            with pytest.raises(KafkaError) as fenced:
                client.producer.end_txn(txn_id, pid, old, commit=True)
            assert fenced.value.code == ErrorCode.PRODUCER_FENCED
            with pytest.raises(KafkaError) as fenced:
                client.producer.add_partitions_to_txn(txn_id, pid, old, {output: [0]})
            assert fenced.value.code == ErrorCode.PRODUCER_FENCED
            batch = build_batch([(None, b"id=zombie", (), int(time.time() * 1000))], producer_id=pid,
                                producer_epoch=old, base_sequence=0, transactional=True)
            with pytest.raises(KafkaError) as fenced:
                client.producer.produce_batch(output, 0, batch, transactional_id=txn_id)
            assert fenced.value.code in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED)
    assert read_committed_wire(kafka, output, partitions) == collections.Counter(list(expected))


# -- 4: batch writes -------------------------------------------------------------------------

HEADERS_TYPE = "array<struct<key:string,value:binary>>"


def confluent_partitions(bootstrap: str, topic: str, keys: list[bytes]) -> dict[bytes, int]:
    """Where confluent-kafka's murmur2 partitioner (Java's default for keyed records) puts
    each key, produced into `topic`."""
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    placed = {}

    def report(err, msg):
        assert err is None, err
        placed[msg.key()] = msg.partition()

    for key in keys:
        producer.produce(topic, key=key, value=b"x", on_delivery=report)
        producer.poll(0)
    assert producer.flush(30) == 0
    return placed


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_batch_write_exact_contents(spark, kafka, guarantee):
    partitions = 4
    first, second, reference = unique("batch-a"), unique("batch-b"), unique("batch-ref")
    create_topics(kafka, partitions, first, second, reference)
    rows = []
    for i in range(300):
        rid = f"{i:06d}"
        topic = first if i % 3 else second
        key = None if i % 10 == 9 else f"key-{i}"           # some keyless rows
        partition = i % partitions if i % 5 == 0 else None  # some explicit partitions
        value = f"id={rid};".encode() + bytes([i % 256, 0, 255]) * (i % 7)
        headers = ([("id", rid.encode()), ("empty", b""), ("null", None), ("id", b"again")] if i % 4 == 0
                   else [("id", rid.encode())] if i % 4 == 1 else [] if i % 4 == 2 else None)
        rows.append((key, bytearray(value), topic, partition, headers))
    df = spark.createDataFrame(rows, f"key string, value binary, topic string, partition int, headers {HEADERS_TYPE}")
    (df.write.mode("append").format("sluice").option("kafka.bootstrap.servers", kafka)
     .option("deliveryGuarantee", guarantee).save())

    murmur = confluent_partitions(kafka, reference, [k.encode() for k, _, _, p, _ in rows
                                                     if k is not None and p is None])
    for topic in (first, second):
        out = Output(kafka, topic, partitions)
        written = out.committed if guarantee == "exactly_once" else out.plain
        assert not out.aborted and not out.open
        assert len(written) == len(out.committed) + len(out.plain)
        assert read_committed_wire(kafka, topic, partitions) == Output.ids(written)
        got = {r[0]: (r[1], r[2], r[3], r[4]) for r in written}
        assert len(got) == len(written)
        mine = [r for r in rows if r[2] == topic]
        assert set(got) == {record_id(bytes(r[1])) for r in mine}
        for key, value, _, partition, headers in mine:
            p, k, v, h = got[record_id(bytes(value))]
            assert (k, v, h) == (None if key is None else key.encode(), bytes(value), tuple(headers or ()))
            if partition is not None:
                assert p == partition
            elif key is not None:
                assert p == murmur[key.encode()], key
        # Keyless rows without a partition are spread, not piled on one partition.
        assert len({got[record_id(bytes(r[1]))][0] for r in mine if r[0] is None and r[3] is None}) > 1


def test_batch_write_string_value_binary_key_and_topic_option(spark, kafka):
    partitions = 2
    target, other = unique("batch-opt"), unique("batch-other")
    create_topics(kafka, partitions, target, other)
    rows = [(bytearray(f"k{i}".encode()), f"id={i:06d};text ü", other if i % 2 else None, i % 2)
            for i in range(50)]
    df = spark.createDataFrame(rows, "key binary, value string, topic string, partition int")
    # The topic option overrides the topic column, as in Spark's Kafka sink.
    (df.write.mode("append").format("sluice").option("kafka.bootstrap.servers", kafka)
     .option("topic", target).save())
    out = Output(kafka, target, partitions)
    assert sorted((r[1], r[2], r[3]) for r in out.committed) == sorted(
        (i % 2, f"k{i}".encode(), f"id={i:06d};text ü".encode()) for i in range(50))
    assert not Output(kafka, other, partitions).committed

    # Without the option, the topic column decides.
    rows = [(None, f"id={i:06d};", other) for i in range(10)]
    (spark.createDataFrame(rows, "key string, value string, topic string")
     .write.mode("append").format("sluice").option("kafka.bootstrap.servers", kafka).save())
    assert Output.ids(Output(kafka, other, partitions).committed) == collections.Counter(
        f"{i:06d}" for i in range(10))


@pytest.mark.parametrize("guarantee, codec", [("exactly_once", "lz4"), ("at_least_once", "zstd")])
def test_batch_write_many_rows_per_partition_compressed(spark, kafka, guarantee, codec):
    """More rows for one partition than one produce request carries (5000): several
    compressed batches, inside one transaction (consecutive sequence numbers)."""
    topic = unique("batch-big")
    create_topics(kafka, 2, topic)
    df = spark.range(12_000).selectExpr("format_string('id=%06d;', id) AS value", "0 AS partition").coalesce(1)
    (df.write.mode("append").format("sluice").option("kafka.bootstrap.servers", kafka)
     .option("topic", topic).option("deliveryGuarantee", guarantee)
     .option("kafka.compression.type", codec).save())
    out = Output(kafka, topic, 2)
    written = out.committed if guarantee == "exactly_once" else out.plain
    assert len(written) == len(out.committed) + len(out.plain) + len(out.aborted) + len(out.open)
    assert sorted(r[0] for r in written) == [f"{i:06d}" for i in range(12_000)]
    assert {r[1] for r in written} == {0}
    assert len({r[5] for r in written}) == 1  # one producer (one task)
    with Client(kafka) as client:
        fetched = client.consumer.fetch(topic, 0, 0, max_wait_ms=0, max_bytes=8 << 20)
    batches = [h for h, _ in iter_batches(fetched.records) if not h.is_control]
    assert len(batches) >= 3 and all(h.compression == {"lz4": 3, "zstd": 4}[codec] for h in batches)
    assert [h.base_sequence for h in batches] == [sum(b.record_count for b in batches[:i])
                                                  for i in range(len(batches))]


def test_batch_write_timestamp_column_sets_record_timestamps(spark, kafka):
    import datetime

    topic = unique("batch-ts")
    create_topics(kafka, 1, topic)
    base = datetime.datetime(2024, 2, 29, 12, 30, 15, 123000, tzinfo=datetime.timezone.utc)
    rows = [(f"id={i:06d};", base + datetime.timedelta(seconds=i) if i % 3 else None) for i in range(9)]
    started = int(time.time() * 1000)
    (spark.createDataFrame(rows, "value string, timestamp timestamp")
     .write.mode("append").format("sluice").option("kafka.bootstrap.servers", kafka)
     .option("topic", topic).save())
    with Client(kafka) as client:
        records = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0, isolation_level=READ_COMMITTED).records
    got = {record_id(r.value): r.timestamp for r in records}
    assert len(got) == 9
    for i in range(9):
        if i % 3:
            assert got[f"{i:06d}"] == int((base.timestamp() + i) * 1000)
        else:  # a null timestamp: the time of writing, as Kafka's producer does
            assert started <= got[f"{i:06d}"] <= int(time.time() * 1000)


def test_failed_stream_batch_commits_nothing_and_the_restart_recovers(spark, kafka, tmp_path):
    """A micro-batch whose task fails (a row with a null topic and no topic option; local[2]
    retries nothing) fails the query and commits nothing. Spark calls abort() as soon as
    the job fails, without the commit messages of tasks still finishing, so their
    transactions can stay open; the restart's replay of the batch (same transactional
    ids) aborts them and writes the batch once."""
    source, output = unique("fail-in"), unique("fail-out")
    create_topics(kafka, 2, source, output)
    expected = produce_input(kafka, source, 2, 40)
    checkpoint = str(tmp_path / "cp")

    def start(**options):
        writer = (spark.readStream.format("sluice").option("kafka.bootstrap.servers", kafka)
                  .option("subscribe", source).option("startingOffsets", "earliest").load()
                  .selectExpr("key", "value", "CASE WHEN partition = 1 AND offset = 19 THEN NULL "
                                              f"ELSE '{output}' END AS topic")
                  .writeStream.format("sluice").option("kafka.bootstrap.servers", kafka)
                  .option("checkpointLocation", checkpoint).trigger(availableNow=True))
        for name, value in options.items():
            writer = writer.option(name, value)
        return writer.start()

    query = start()
    with pytest.raises(Exception) as info:
        query.awaitTermination(120)
    query.stop()
    assert "null topic" in str(info.value)
    out = Output(kafka, output, 2)
    assert not out.committed and not out.plain
    assert read_committed_wire(kafka, output, 2) == collections.Counter()
    failed_run = len(out.aborted) + len(out.open)
    print(f"failed batch: {len(out.aborted)} records aborted, {len(out.open)} left open")

    query = start(topic=output)  # the option overrides the topic column
    assert query.awaitTermination(120) and query.exception() is None
    out = Output(kafka, output, 2)
    assert not out.open and not out.plain
    assert Output.ids(out.committed) == collections.Counter(list(expected))
    assert len(out.aborted) == failed_run


# -- 5: mistakes ----------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("schema, rows, options, named", [
    ("key string", [("k",)], {"topic": "t"}, "'value' column"),
    ("value int", [(1,)], {"topic": "t"}, "column 'value' must be binary or string, not int"),
    ("key int, value string", [(1, "v")], {"topic": "t"}, "column 'key' must be binary or string, not int"),
    ("value string, topic int", [("v", 1)], {}, "column 'topic' must be string, not int"),
    ("value string, partition bigint", [("v", 1)], {"topic": "t"}, "column 'partition' must be int, not bigint"),
    ("value string, headers array<string>", [("v", ["h"])], {"topic": "t"}, "column 'headers' must be"),
    ("value string", [("v",)], {}, "option 'topic'"),
    ("value string", [("v",)], {"topic": "t", "deliveryGuarantee": "twice"}, "option 'deliveryGuarantee'"),
    ("value string", [("v",)], {"topic": "t", "kafka.bootstrap.servers": ""}, "option 'kafka.bootstrap.servers'"),
    ("value string", [("v",)], {"topic": "t", "kafka.compression.type": "brotli"}, "option 'kafka.compression.type'"),
    ("value string", [("v",)], {"topic": "t", "kafka.transaction.timeout.ms": "soon"},
     "option 'kafka.transaction.timeout.ms'"),
    ("value string, topic string", [("v", None)], {}, "null topic"),
    ("value string, partition int", [("v", 0), ("v", 2)], {"topic": "two-partitions"},
     "partition 2 of topic 'two-partitions', which has partitions 0 to 1"),
])
def test_batch_write_mistakes_are_named(spark, kafka, schema, rows, options, named):
    with Client(kafka) as client:
        client.admin.create_topics({"two-partitions": NewTopic(2, 1)})  # or it exists already
    writer = spark.createDataFrame(rows, schema).write.mode("append").format("sluice")
    for name, value in {"kafka.bootstrap.servers": kafka, **options}.items():
        writer = writer.option(name, value)
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        writer.save()
    assert named in str(info.value)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("select, options, named", [
    ("CAST(value AS STRING) AS key", {"topic": "t"}, "'value' column"),
    ("value", {"topic": "t"}, "column 'value' must be binary or string, not bigint"),
    ("CAST(value AS STRING) AS value", {}, "option 'topic'"),
    ("CAST(value AS STRING) AS value", {"topic": "t", "deliveryGuarantee": "exactly-once"},
     "option 'deliveryGuarantee'"),
])
def test_stream_write_mistakes_are_named(spark, kafka, tmp_path, select, options, named):
    writer = (spark.readStream.format("rate").option("rowsPerSecond", "10").load().selectExpr(select)
              .writeStream.format("sluice").option("kafka.bootstrap.servers", kafka)
              .option("checkpointLocation", str(tmp_path / "cp")))
    for name, value in options.items():
        writer = writer.option(name, value)
    with pytest.raises(Exception) as info:
        query = writer.start()
        try:
            query.awaitTermination(30)
        finally:
            query.stop()
    assert named in str(info.value)


@pytest.mark.parametrize("guarantee", ["exactly_once", "at_least_once"])
def test_unreachable_broker_fails_in_bounded_time_naming_it(spark, guarantee):
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        (spark.createDataFrame([("v",)], "value string").write.mode("append").format("sluice")
         .option("kafka.bootstrap.servers", address).option("topic", "t")
         .option("deliveryGuarantee", guarantee).save())
    assert "kafka.bootstrap.servers" in str(info.value) and address in str(info.value)
    assert time.monotonic() - started < 60


# -- 6: the decisions of every query in one topic -----------------------------------------

def test_every_querys_decisions_share_one_internal_compacted_topic(spark, kafka, tmp_path):
    """The sink records each query's decisions (intents) in __sluice_sink_intents, keyed by
    query id: compacted, reported internal, and no topic of the query's own. The topic is
    shared, so the transaction another query's driver left open there (killed in the middle
    of appending its intent) must not hide the intents this query records after it."""
    source, output = unique("shared-in"), unique("shared-out")
    create_topics(kafka, 2, source, output)
    checkpoint = str(tmp_path / "cp")

    def run_batch() -> None:
        produce_input(kafka, source, 2, 20)
        query = (spark.readStream.format("sluice").option("kafka.bootstrap.servers", kafka)
                 .option("subscribe", source).option("startingOffsets", "earliest").load()
                 .select("key", "value").writeStream.format("sluice")
                 .option("kafka.bootstrap.servers", kafka).option("topic", output)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        assert query.awaitTermination(120) and query.exception() is None

    run_batch()
    assert last_intent(kafka, checkpoint).batch == 0
    killed = f"sluice-{uuid.uuid4()}"  # the driver's transactional id of another query
    with Client(kafka) as client:
        pid, epoch = client.producer.init_transactions(killed, 600_000)
        client.producer.add_partitions_to_txn(killed, pid, epoch, {SINK_INTENTS_TOPIC: [0]})
        left = build_batch([(killed.encode(), b'{"batch": 0, "slots": {}}', (), int(time.time() * 1000))],
                           producer_id=pid, producer_epoch=epoch, base_sequence=0, transactional=True)
        client.producer.produce_batch(SINK_INTENTS_TOPIC, 0, left, transactional_id=killed)
        try:
            run_batch()
            assert last_intent(kafka, checkpoint).batch == 1
        finally:
            client.producer.end_txn(killed, pid, epoch, commit=False)

        topics = client.metadata().topics
        assert [t for t in topics if t.startswith("__sluice")] == [SINK_INTENTS_TOPIC]
        assert topics[SINK_INTENTS_TOPIC].is_internal
        config = client.admin.describe_configs([(TOPIC_RESOURCE, SINK_INTENTS_TOPIC)])[(TOPIC_RESOURCE, SINK_INTENTS_TOPIC)]
        assert (config["cleanup.policy"].value, config["retention.ms"].value) == ("compact,delete", "-1")


# -- 7: two drivers of one query, step by step ----------------------------------------------

def sink_options(kafka: str, output: str) -> SinkOptions:
    return SinkOptions(kafka, output, EXACTLY_ONCE, "none", 60_000, ())


def task_commits(kafka: str, output: str, query: str, run: str, first_id: int, slots: int = 2) -> list:
    """What the write tasks of one micro-batch of `run` hand its driver: each slot's row
    (ids from `first_id`) in an open transaction of the slot's id, written by the sink's
    task code."""
    commits = []
    with Client(kafka) as client:
        for slot in range(slots):
            rows = pa.record_batch({"value": [f"id={first_id + slot:06d};".encode()]})
            writer = _write_slot(sink_options(kafka, output), client, iter([rows]),
                                 _task_txn_id(f"{query}-{run}", slot, 0))
            commits.append(TaskCommit(query, run, slot, writer.written(), writer.rows))
    return commits


def two_drivers(kafka: str) -> tuple[str, str]:
    """An output topic and a query id for two drivers to run."""
    output = unique("two-by-hand-out")
    create_topics(kafka, 2, output)
    return output, str(uuid.uuid4())


def test_a_driver_behind_does_not_fence_the_driver_ahead_in_the_middle_of_its_append(kafka):
    """Driver `ahead` decided batch 6 and commits batch 7; driver `behind`, whose tasks
    wrote batch 6 too, commits it after ahead's InitProducerId and before ahead's intent
    append. Behind's InitProducerId fences ahead's append; behind then reads intent 6 of
    ahead's run and stops, fenced. Ahead, fenced by a driver that got no further, reads
    again and records its intent: exactly one driver goes on, as Spark keeps exactly one
    of two runs sharing a checkpoint."""
    output, query = two_drivers(kafka)
    ahead_6 = task_commits(kafka, output, query, "run-ahead", 0)
    behind_6 = task_commits(kafka, output, query, "run-behind", 100)
    behind = SluiceStreamWriter(sink_options(kafka, output))
    interrupted = []

    class Ahead(SluiceStreamWriter):
        def _check_open(self, client, query, batch_id, txns):
            if batch_id == 7 and not interrupted:  # after the InitProducerId and the lookup
                with pytest.raises(SluiceSinkError, match="is fenced: batch 6 was decided by run run-ahead"):
                    behind.commit(behind_6, 6)
                behind.abort(behind_6, 6)  # as Spark does after a failed commit
                interrupted.append(batch_id)
            super()._check_open(client, query, batch_id, txns)

    ahead = Ahead(sink_options(kafka, output))
    ahead.commit(ahead_6, 6)
    ahead.commit(task_commits(kafka, output, query, "run-ahead", 2), 7)
    assert interrupted == [7]
    assert_ahead_decided(kafka, output, query, 7, 4)


def assert_ahead_decided(kafka: str, output: str, query: str, batch: int, rows: int) -> None:
    """Driver `run-ahead` decided `batch` last, its first `rows` rows are committed, and
    `run-behind`'s rows 100 and 101 were aborted, with no transaction left open."""
    with Client(kafka) as client:
        recorded = sink_last_intent(client, query)
    assert (recorded.batch, recorded.run) == (batch, "run-ahead")
    out = Output(kafka, output, 2)
    assert Output.ids(out.committed) == collections.Counter(f"{i:06d}" for i in range(rows))
    assert (len(out.open), sorted(r[0] for r in out.aborted)) == (0, ["000100", "000101"])


def test_a_driver_behind_aborting_its_batch_leaves_the_open_transactions_of_the_driver_ahead(kafka):
    """Driver `behind` commits batch 6 when `ahead` has decided batches 6 and 7 and its
    tasks have written batch 8: behind is fenced, and Spark calls its abort(). The abort
    sweeps the leftovers of behind's own run only; sweeping every open transaction of the
    query would fence ahead's undecided batch 8, and both drivers would stop."""
    output, query = two_drivers(kafka)
    behind_6 = task_commits(kafka, output, query, "run-behind", 100)
    ahead = SluiceStreamWriter(sink_options(kafka, output))
    behind = SluiceStreamWriter(sink_options(kafka, output))
    ahead.commit(task_commits(kafka, output, query, "run-ahead", 0), 6)
    ahead.commit(task_commits(kafka, output, query, "run-ahead", 2), 7)
    ahead_8 = task_commits(kafka, output, query, "run-ahead", 4)
    with pytest.raises(SluiceSinkError, match="is fenced: batch 7 was decided by run run-ahead"):
        behind.commit(behind_6, 6)
    behind.abort(behind_6, 6)
    ahead.commit(ahead_8, 8)
    assert_ahead_decided(kafka, output, query, 8, 6)


def test_a_write_task_adds_an_arrow_batchs_partitions_to_its_transaction_in_one_request(tmp_path):
    """As a Kafka producer: the 8 partitions the first Arrow batch's rows go to join the
    task's transaction in one AddPartitionsToTxn, and a second batch to the same
    partitions sends none (one per partition was 8 round trips to the coordinator per
    task). Each partition gets two record batches, produced one in flight per partition:
    every row lands once, in each partition in the order written."""
    broker = start_broker(tmp_path / "broker", BROKER_PROPERTIES)
    try:
        bootstrap = broker.bootstrap_servers
        output = unique("one-add-partitions-out")
        create_topics(bootstrap, 8, output)
        ids = [f"{i:06d}" for i in range(48_000)]  # about 6,000 rows, two record batches, per partition
        halves = [pa.record_batch({"key": [f"key-{i}".encode() for i in half],
                                   "value": [f"id={i};".encode() for i in half]})
                  for half in (ids[:24_000], ids[24_000:])]
        before = requests_answered(broker, "AddPartitionsToTxn")
        with Client(bootstrap) as client:
            writer = _write_slot(sink_options(bootstrap, output), client, iter(halves), "sluice-one-add-0")
            assert requests_answered(broker, "AddPartitionsToTxn") - before == 1
            txn = writer.written()
            client.producer.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit=True)
        out = Output(bootstrap, output, 8)
        assert Output.ids(out.committed) == collections.Counter(ids) and not out.open and not out.aborted
        for partition in range(8):
            written = [r[0] for r in sorted((r for r in out.committed if r[1] == partition), key=lambda r: r[7])]
            assert written == sorted(written) and len(written) > 5000, (partition, len(written))
    finally:
        broker.stop()
