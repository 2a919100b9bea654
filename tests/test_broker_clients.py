"""Standard Kafka clients against the real broker process (`python -m broker`).

The matrix: one 3-partition topic per compression codec (none, gzip, snappy, lz4, zstd).
Into each, every producer client writes its own keyed records with headers, to every
partition: confluent-kafka (idempotent, acks=all), kafka-python (defaults), aiokafka
(defaults) and kcat (`-P`). Producers run one after the other, so each partition's
exact contents are known: offset, key (or null), value (null, empty, text, one of
~150 kB), headers (none, repeated keys, empty values) and CreateTime timestamp (chosen
by the Python clients; within the run for kcat). The offsets the producers were
acknowledged are checked. Then every consumer client (confluent-kafka, kafka-python,
aiokafka by manual assignment, kcat `-C -e`) reads every topic whole, and what it read
must equal that, partition by partition, in order; once more after a clean broker
restart. The stored batches are checked to carry their producer's codec.

Around the matrix: kcat `-L`, confluent-kafka's AdminClient (create/list/describe
configs/create partitions/delete), librdkafka's malformed all-topics Metadata request,
our own `sluice_client.Client` topic administration against a real broker, the Spark
sink's intents topic reported internal in Metadata (kafka-python's consumer lists it no
more than `__consumer_offsets`), and `offsets_for_times` on confluent-kafka, before and
after a restart.

Consumer groups are not served yet: consumers assign partitions themselves and never
commit. Every loop is bounded in rounds and time; every kcat run has a timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import socket
import struct
import subprocess
import time
import uuid
from collections import defaultdict
from typing import NamedTuple

import pytest

from sluice.broker_process import BrokerProcess
from sluice_client import EARLIEST, LATEST, Client, NewTopic, ProducerRecord
from wire.error_codes import ErrorCode
from wire.internal_topics import SINK_INTENTS_TOPIC
from wire.messages import FIND_COORDINATOR, METADATA, REQUEST_HEADER
from wire.protocol import RequestHeader, decode_response
from wire.records import decode_batch, iter_batches

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

pytestmark = pytest.mark.timeout(120)

KCAT = shutil.which("kcat")
needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed")

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PRODUCERS = ("confluent", "kafka-python", "aiokafka", "kcat")
LIBRDKAFKA_PRODUCERS = {"confluent", "kcat"}
CONSUMERS = PRODUCERS
PARTITIONS = 3
PER_PARTITION = 12  # records per producer per partition
READ_TIMEOUT = 30.0  # seconds for one consumer to read the whole matrix
CLIENT_TIMEOUT_MS = 10000


class Row(NamedTuple):
    """A record as read back: everything that must survive the trip. Every record
    read must carry a CreateTime timestamp (each consumer checks the type)."""

    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | tuple[int, int]  # expected rows: (earliest, latest) if not chosen


class Outgoing(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int | None  # None: the producer's clock (kcat cannot set one)


def _headers(headers) -> tuple[tuple[str, bytes], ...]:
    """Headers as every client returns them (None, list or tuple) in one shape."""
    return tuple((k, bytes(v) if v is not None else None) for k, v in (headers or ()))


def _topic(name: str) -> str:
    return f"clients-{name}-{uuid.uuid4().hex[:8]}"


# -- what each producer writes -----------------------------------------------------------

TS_BASE = (int(time.time()) - 3600) * 1000  # explicit timestamps: an hour ago and on
BIG = 6  # the record of this index is ~150 kB (over a fetch's sendfile threshold even compressed)


def _text(client: str, codec: str, partition: int, i: int) -> bytes:
    """Compressible, non-ASCII, with delimiters kcat must keep inside the value."""
    if i == BIG:
        seed = hashlib.sha256(f"{client}/{codec}/{partition}".encode()).digest()
        digests = [seed]
        for _ in range(2400):
            digests.append(hashlib.sha256(digests[-1]).digest())
        return b"".join(d.hex().encode() for d in digests)
    return (f"{client}/{codec}/p{partition}/#{i:02d} héllo wörld 日本語 a:b,c=d " * 6).encode()


def python_records(client: str, codec: str, partition: int) -> list[Outgoing]:
    """What a Python client writes to one partition: keys, null and empty values, null
    keys, no headers, repeated header keys, empty header values, chosen timestamps."""
    out = []
    first_timestamp = TS_BASE + PRODUCERS.index(client) * 100_000 + partition * 10_000
    for i in range(PER_PARTITION):
        key = f"{client}|{codec}|p{partition}|{i:02d}".encode() if i != PER_PARTITION - 1 else None
        value = {3: None, 4: b""}.get(i % 5, _text(client, codec, partition, i))
        if i % 6 == 5:
            headers = ()
        else:
            headers = (("source", client.encode()), ("seq", str(i).encode()),
                       ("dup", b"a"), ("dup", b"b"))
            if i % 4 == 0:
                headers += (("empty", b""),)
        out.append(Outgoing(key, value, headers, first_timestamp + 7 * i))
    return out


def kcat_plan(codec: str, partition: int) -> tuple[list[str], list[Outgoing]]:
    """kcat's headers are per run, and -Z (empty means null) is all or nothing: partition
    0 and 1 write null keys and values (with different headers), partition 2 writes empty
    values and no headers."""
    nulls = partition != 2
    headers = (("source", b"kcat"), ("part", str(partition).encode()), ("dup", b"a"), ("dup", b"b"))
    if partition == 1:
        headers += (("empty", b""),)
    if partition == 2:
        headers = ()
    out = []
    for i in range(PER_PARTITION):
        key = f"kcat|{codec}|p{partition}|{i:02d}".encode()
        value = _text("kcat", codec, partition, i)
        if nulls and i == PER_PARTITION - 1:
            key = None
        if i % 5 == 3:
            value = None if nulls else b""
        out.append(Outgoing(key, value, headers, None))
    args = ["-Z"] if nulls else []
    for k, v in headers:
        args += ["-H", f"{k}={v.decode()}"]
    return args, out


# -- producers -----------------------------------------------------------------------------
# Each takes {partition: [Outgoing]} and returns {partition: [offset of each record]}
# as the broker acknowledged them (kcat reports none: None).

def produce_confluent(bootstrap: str, topic: str, codec: str, plan: dict) -> dict:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
        "compression.type": codec, "linger.ms": 20, "message.timeout.ms": 20000})
    reports: dict[int, list] = defaultdict(list)
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            reports[msg.partition()].append(msg.offset())

    for partition, records in plan.items():
        for record in records:
            producer.produce(topic, value=record.value, key=record.key, partition=partition,
                             headers=list(record.headers), timestamp=record.timestamp,
                             on_delivery=delivered)
    assert producer.flush(20) == 0, "confluent-kafka did not deliver everything in 20 s"
    assert not errors, errors
    return reports


def produce_kafka_python(bootstrap: str, topic: str, codec: str, plan: dict) -> dict:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap,
                                   compression_type=None if codec == "none" else codec,
                                   request_timeout_ms=CLIENT_TIMEOUT_MS, max_block_ms=CLIENT_TIMEOUT_MS)
    try:
        futures = [(partition, producer.send(topic, value=record.value, key=record.key,
                                             headers=list(record.headers), partition=partition,
                                             timestamp_ms=record.timestamp))
                   for partition, records in plan.items() for record in records]
        producer.flush(timeout=20)
        reports: dict[int, list] = defaultdict(list)
        for partition, future in futures:
            metadata = future.get(timeout=10)
            assert metadata.partition == partition
            reports[partition].append(metadata.offset)
        return reports
    finally:
        producer.close(timeout=5)


def produce_aiokafka(bootstrap: str, topic: str, codec: str, plan: dict) -> dict:
    async def main():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap,
                                             compression_type=None if codec == "none" else codec,
                                             request_timeout_ms=CLIENT_TIMEOUT_MS)
        await producer.start()
        try:
            sent = [(partition, await producer.send(topic, value=record.value, key=record.key,
                                                    partition=partition, timestamp_ms=record.timestamp,
                                                    headers=list(record.headers)))
                    for partition, records in plan.items() for record in records]
            reports: dict[int, list] = defaultdict(list)
            for partition, metadata in zip([p for p, _ in sent],
                                           await asyncio.gather(*(f for _, f in sent))):
                assert metadata.partition == partition
                reports[partition].append(metadata.offset)
            return reports
        finally:
            await producer.stop()

    return asyncio.run(asyncio.wait_for(main(), 30))


def produce_kcat(bootstrap: str, topic: str, codec: str, plan: dict, args: dict) -> dict:
    """kcat reports no offsets; returns {partition: (earliest, latest)} of its clock."""
    windows = {}
    for partition, records in plan.items():
        lines = b"".join((r.key or b"") + b":" + (r.value or b"") + b"\n" for r in records)
        command = [KCAT, "-b", bootstrap, "-P", "-t", topic, "-p", str(partition), "-K:",
                   "-z", codec, "-m", "10", *args[partition]]
        started = int(time.time() * 1000)
        done = subprocess.run(command, input=lines, capture_output=True, timeout=30)
        windows[partition] = (started, int(time.time() * 1000))
        assert done.returncode == 0, (command, done.stderr.decode(errors="replace"))
    return windows


# -- consumers -----------------------------------------------------------------------------
# Each reads every partition of `topics` from the start up to `ends` ({(topic, p): end})
# and returns {(topic, partition): [Row]}.

def consume_confluent(bootstrap: str, topics: list[str], ends: dict) -> dict:
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"never-joined-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False, "enable.auto.offset.store": False,
        "auto.offset.reset": "error", "enable.partition.eof": True})
    got: dict = defaultdict(list)
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for topic in topics for p in range(PARTITIONS)])
        at_end: set = set()
        deadline = time.monotonic() + READ_TIMEOUT
        for _ in range(1000):
            if len(at_end) == len(ends) or time.monotonic() > deadline:
                break
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                tp = (msg.topic(), msg.partition())
                if msg.error() is not None:
                    assert msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, msg.error()
                    if msg.offset() >= ends[tp]:
                        at_end.add(tp)
                    continue
                kind, timestamp = msg.timestamp()
                assert kind == confluent_kafka.TIMESTAMP_CREATE_TIME, kind
                got[tp].append(Row(msg.offset(), msg.key(), msg.value(), _headers(msg.headers()),
                                   timestamp))
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, topics: list[str], ends: dict) -> dict:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                   enable_auto_commit=False, auto_offset_reset="none",
                                   request_timeout_ms=CLIENT_TIMEOUT_MS + 1000)
    got: dict = defaultdict(list)
    try:
        partitions = [kafka.TopicPartition(topic, p) for topic in topics for p in range(PARTITIONS)]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + READ_TIMEOUT
        for _ in range(1000):
            if time.monotonic() > deadline or all(
                    consumer.position(tp) >= ends[(tp.topic, tp.partition)] for tp in partitions):
                break
            for tp, records in consumer.poll(timeout_ms=200, max_records=1000).items():
                assert {r.timestamp_type for r in records} == {0}
                got[(tp.topic, tp.partition)] += [
                    Row(r.offset, r.key, r.value, _headers(r.headers), r.timestamp) for r in records]
    finally:
        consumer.close(autocommit=False)
    return got


def consume_aiokafka(bootstrap: str, topics: list[str], ends: dict) -> dict:
    async def main():
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                             enable_auto_commit=False, auto_offset_reset="none",
                                             request_timeout_ms=CLIENT_TIMEOUT_MS)
        await consumer.start()
        got: dict = defaultdict(list)
        try:
            partitions = [aiokafka.TopicPartition(topic, p) for topic in topics for p in range(PARTITIONS)]
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek(tp, 0)
            for _ in range(1000):
                positions = [await consumer.position(tp) for tp in partitions]
                if all(pos >= ends[(tp.topic, tp.partition)] for tp, pos in zip(partitions, positions)):
                    break
                batches = await consumer.getmany(timeout_ms=200, max_records=1000)
                for tp, records in batches.items():
                    assert {r.timestamp_type for r in records} == {0}
                    got[(tp.topic, tp.partition)] += [
                        Row(r.offset, r.key, r.value, _headers(r.headers), r.timestamp) for r in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(asyncio.wait_for(main(), READ_TIMEOUT))


def _utf8(text):
    return None if text is None else text.encode()


def consume_kcat(bootstrap: str, topics: list[str], ends: dict) -> dict:
    got: dict = defaultdict(list)
    for topic in topics:
        command = [KCAT, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-q",
                   "-m", "10"]
        done = subprocess.run(command, capture_output=True, timeout=READ_TIMEOUT)
        assert done.returncode == 0, (command, done.stderr.decode(errors="replace"))
        for line in done.stdout.decode().splitlines():
            msg = json.loads(line)
            pairs = msg.get("headers") or []
            headers = tuple((pairs[i], _utf8(pairs[i + 1])) for i in range(0, len(pairs), 2))
            assert msg["tstype"] == "create", msg["tstype"]
            got[(msg["topic"], msg["partition"])].append(
                Row(msg["offset"], _utf8(msg["key"]), _utf8(msg["payload"]), headers, msg["ts"]))
    return got


CONSUME = {"confluent": consume_confluent, "kafka-python": consume_kafka_python,
           "aiokafka": consume_aiokafka, "kcat": consume_kcat}


# -- the matrix ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One broker for the matrix; restarted (same port and data) by `restarted`."""
    with BrokerProcess(tmp_path_factory.mktemp("clients") / "data") as proc:
        yield proc


class Matrix(NamedTuple):
    topics: dict[str, str]  # codec -> topic
    expected: dict[tuple[str, int], list[Row]]  # (topic, partition) -> rows in order
    writers: dict[tuple[str, int, int], str]  # (topic, partition, offset) -> producer


@pytest.fixture(scope="module")
def matrix(cluster) -> Matrix:
    if KCAT is None:
        pytest.skip("kcat is not installed")
    bootstrap = cluster.bootstrap_servers
    topics = {codec: _topic(codec) for codec in CODECS}
    with Client(bootstrap, call_timeout=30) as client:
        created = client.admin.create_topics({t: NewTopic(PARTITIONS, 1) for t in topics.values()})
    assert all(c.error is None and c.partitions == PARTITIONS for c in created.values()), created

    expected: dict = defaultdict(list)
    writers = {}
    for codec, topic in topics.items():
        for producer in PRODUCERS:
            if producer == "kcat":
                plans = {p: kcat_plan(codec, p) for p in range(PARTITIONS)}
                plan = {p: records for p, (_, records) in plans.items()}
                reported = produce_kcat(bootstrap, topic, codec, plan,
                                        {p: args for p, (args, _) in plans.items()})
            else:
                plan = {p: python_records(producer, codec, p) for p in range(PARTITIONS)}
                produce = {"confluent": produce_confluent, "kafka-python": produce_kafka_python,
                           "aiokafka": produce_aiokafka}[producer]
                reported = produce(bootstrap, topic, codec, plan)
            for p, records in plan.items():
                rows = expected[(topic, p)]
                first = len(rows)
                offsets = list(range(first, first + len(records)))
                if producer == "kcat":
                    records = [r._replace(timestamp=reported[p]) for r in records]
                else:
                    assert reported[p] == offsets, (producer, codec, p, reported[p])
                rows += [Row(o, *r) for o, r in zip(offsets, records)]
                writers.update({(topic, p, o): producer for o in offsets})
    return Matrix(topics, dict(expected), writers)


@pytest.fixture(scope="module")
def restarted(cluster, matrix) -> Matrix:
    """The matrix after a clean restart of its broker (SIGTERM, same port and data)."""
    cluster.restart()
    return matrix


def _ends(matrix: Matrix) -> dict:
    return {tp: len(rows) for tp, rows in matrix.expected.items()}


def _check_read(consumer: str, matrix: Matrix, got: dict) -> None:
    for codec, topic in matrix.topics.items():
        for p in range(PARTITIONS):
            want, have = matrix.expected[(topic, p)], got.get((topic, p), [])
            assert len(have) == len(want), (consumer, codec, p, len(have), len(want))
            for w, h in zip(want, have):
                if isinstance(w.timestamp, tuple):  # kcat's clock: within its run
                    assert w.timestamp[0] <= h.timestamp <= w.timestamp[1], (consumer, w, h)
                    w = w._replace(timestamp=h.timestamp)
                assert h == w, (f"{consumer} read {codec} partition {p} offset {w.offset} "
                                f"written by {matrix.writers[(topic, p, w.offset)]}")
    assert set(got) <= set(matrix.expected), set(got) - set(matrix.expected)


def _check_high_watermarks(bootstrap: str, matrix: Matrix) -> None:
    with Client(bootstrap, call_timeout=30) as client:
        for topic in matrix.topics.values():
            latest = client.consumer.list_offsets(topic, range(PARTITIONS), LATEST)
            earliest = client.consumer.list_offsets(topic, range(PARTITIONS), EARLIEST)
            for p in range(PARTITIONS):
                assert (earliest[p].offset, latest[p].offset) == (0, len(matrix.expected[(topic, p)]))


@needs_kcat
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_every_client_reads_what_every_client_wrote(cluster, matrix, consumer):
    got = CONSUME[consumer](cluster.bootstrap_servers, list(matrix.topics.values()), _ends(matrix))
    _check_read(consumer, matrix, got)


@needs_kcat
def test_stored_batches_carry_each_producers_codec(cluster, matrix):
    """Every batch in a codec's topic is compressed with that codec or not at all (the
    broker stores batches as produced, never mixing producers), and every producer's
    records went out compressed — except LZ4 from librdkafka (confluent-kafka, kcat)
    while this broker does not serve FindCoordinator: librdkafka takes that API as the
    sign of a Kafka new enough (0.9) for LZ4 and otherwise sends LZ4 batches
    uncompressed ("Broker does not support compression type lz4: not compressing
    batch"). Consumers still read them, as the matrix shows."""
    compressed_by: dict = defaultdict(set)
    with Client(cluster.bootstrap_servers, call_timeout=30) as client:
        serves_find_coordinator = FIND_COORDINATOR.key in client.negotiated_versions()
        for codec, topic in matrix.topics.items():
            for p in range(PARTITIONS):
                offset, end = 0, len(matrix.expected[(topic, p)])
                for _ in range(50):
                    if offset >= end:
                        break
                    fetched = client.consumer.fetch(topic, p, offset, max_wait_ms=0)
                    for header, view in iter_batches(fetched.records):
                        if header.base_offset + header.last_offset_delta < offset:
                            continue
                        assert header.compression in (0, CODEC_IDS[codec]), (codec, p, header)
                        writers = {matrix.writers[(topic, p, r.offset)]
                                   for r in decode_batch(view, 1 << 24)}
                        assert len(writers) == 1, writers  # no batch mixes producers
                        if header.compression != 0:
                            compressed_by[codec] |= writers
                        offset = header.base_offset + header.last_offset_delta + 1
                assert offset == end, (codec, p, offset, end)
    for codec in CODECS[1:]:
        expected = set(PRODUCERS)
        if codec == "lz4" and not serves_find_coordinator:
            expected -= LIBRDKAFKA_PRODUCERS
        assert compressed_by[codec] == expected, (codec, compressed_by[codec])
    assert not compressed_by["none"]


@needs_kcat
@pytest.mark.parametrize("consumer", CONSUMERS)
def test_every_client_reads_what_every_client_wrote_after_restart(cluster, restarted, consumer):
    _check_high_watermarks(cluster.bootstrap_servers, restarted)
    got = CONSUME[consumer](cluster.bootstrap_servers, list(restarted.topics.values()),
                            _ends(restarted))
    _check_read(consumer, restarted, got)


# -- metadata and administration ------------------------------------------------------------

@needs_kcat
def test_kcat_lists_topics_and_partitions(cluster):
    bootstrap = cluster.bootstrap_servers
    topic = _topic("kcat-list")
    with Client(bootstrap, call_timeout=30) as client:
        assert client.admin.create_topics({topic: NewTopic(4, 1)})[topic].error is None
    done = subprocess.run([KCAT, "-b", bootstrap, "-L", "-J", "-m", "10"], capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    listing = json.loads(done.stdout)
    assert [b["name"] for b in listing["brokers"]] == [bootstrap]
    assert listing["controllerid"] == 0
    [entry] = [t for t in listing["topics"] if t["topic"] == topic]
    assert "error" not in entry, entry
    assert [p["partition"] for p in entry["partitions"]] == [0, 1, 2, 3]
    for p in entry["partitions"]:
        assert p["leader"] == 0 and p["replicas"] == [{"id": 0}] and p["isrs"] == [{"id": 0}]

    text = subprocess.run([KCAT, "-b", bootstrap, "-L", "-t", topic, "-m", "10"],
                          capture_output=True, timeout=30)
    assert text.returncode == 0, text.stderr
    out = text.stdout.decode()
    assert f'topic "{topic}" with 4 partitions:' in out, out
    assert "partition 3, leader 0, replicas: 0, isrs: 0" in out, out


def test_confluent_admin_client(cluster):
    from confluent_kafka.admin import (AdminClient, ConfigResource, ConfigSource, NewPartitions,
                                       NewTopic as AdminNewTopic)

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic, other = _topic("admin"), _topic("admin-other")
    futures = admin.create_topics([
        AdminNewTopic(topic, num_partitions=3, replication_factor=1,
                      config={"retention.ms": "3600000", "cleanup.policy": "delete"}),
        AdminNewTopic(other, num_partitions=1)], operation_timeout=10, request_timeout=15)
    for future in futures.values():
        assert future.result(timeout=15) is None

    again = admin.create_topics([AdminNewTopic(topic, num_partitions=1)], request_timeout=15)
    with pytest.raises(confluent_kafka.KafkaException) as failed:
        again[topic].result(timeout=15)
    assert failed.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS

    metadata = admin.list_topics(timeout=10)
    assert {topic, other} <= set(metadata.topics)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert metadata.topics[topic].error is None
    assert list(metadata.brokers) == [0] and metadata.controller_id == 0
    assert list(admin.list_topics(topic=other, timeout=10).topics) == [other]

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=15)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert int(configs["segment.bytes"].value) > 0

    broker_resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    broker_configs = admin.describe_configs([broker_resource],
                                            request_timeout=15)[broker_resource].result(timeout=15)
    assert "log.retention.ms" in broker_configs and "num.partitions" in broker_configs

    grown = admin.create_partitions([NewPartitions(topic, 5)], request_timeout=15)
    assert grown[topic].result(timeout=15) is None
    assert sorted(admin.list_topics(topic=topic, timeout=10).topics[topic].partitions) == [0, 1, 2, 3, 4]

    deleted = admin.delete_topics([other], operation_timeout=10, request_timeout=15)
    assert deleted[other].result(timeout=15) is None
    assert other not in admin.list_topics(timeout=10).topics


def test_metadata_request_with_librdkafkas_stray_bytes_is_answered(cluster):
    """librdkafka 2.x (confluent-kafka's list_topics(), AdminClient included) sends this
    Metadata v12 body for all topics: the null topic array written as 4 bytes where the
    compact form takes 1 (librdkafka issue #5049). Kafka reads the fields it knows and
    ignores the 3 bytes left over; so must we, rather than close the connection."""
    topic = _topic("stray")
    with Client(cluster.bootstrap_servers, call_timeout=30) as client:
        assert client.admin.create_topics({topic: NewTopic(2, 1)})[topic].error is None
    header = REQUEST_HEADER.encode(2, RequestHeader(
        request_api_key=METADATA.key, request_api_version=12, correlation_id=7,
        client_id="rdkafka")).getvalue()
    body = bytes.fromhex("00000000010000")  # exactly as captured from confluent-kafka 2.16
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, "the broker closed the connection instead of answering"
            data += chunk
    response_header, response = decode_response(METADATA.key, 12, data[4:])
    assert response_header.correlation_id == 7
    listed = {t.name: sorted(p.partition_index for p in t.partitions) for t in response.topics}
    assert listed[topic] == [0, 1]  # the null array: every topic


def test_create_topics_validate_only_answers_the_would_be_configs(cluster):
    """CreateTopics v5+ with validate_only: as Kafka, the answer carries the partition count
    and the configs the topic would have (the Java Admin reads them when no topic config
    error is given, and failed with a NullPointerException on a null array); nothing is
    created."""
    from wire.messages import CREATE_TOPICS
    from wire.protocol import encode_request

    topic = _topic("validate-configs")
    request = CREATE_TOPICS.request(timeout_ms=10_000, validate_only=True, topics=[
        CREATE_TOPICS.request.CreatableTopic(
            name=topic, num_partitions=3, replication_factor=1, assignments=[],
            configs=[CREATE_TOPICS.request.CreatableTopicConfig(name="retention.ms", value="60000")])])
    payload = encode_request(RequestHeader(request_api_key=CREATE_TOPICS.key, request_api_version=7,
                                           correlation_id=3, client_id="validate"), request)
    with socket.create_connection(("127.0.0.1", cluster.port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
            chunk = sock.recv(1 << 16)
            assert chunk, "the broker closed the connection instead of answering"
            data += chunk
    _, response = decode_response(CREATE_TOPICS.key, 7, data[4:])
    [answer] = response.topics
    assert (answer.error_code, answer.num_partitions, answer.replication_factor) == (0, 3, 1)
    assert answer.topic_id.int == 0  # no topic exists to name
    configs = {c.name: (c.value, c.config_source) for c in answer.configs}
    assert configs["retention.ms"] == ("60000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert configs["max.message.bytes"] == ("1048588", 5)  # DEFAULT_CONFIG
    with Client(cluster.bootstrap_servers, call_timeout=30) as client:
        assert client.metadata([topic], allow_auto_topic_creation=False).topics[topic].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION



def test_create_topics_takes_either_a_manual_assignment_or_a_count_and_factor(cluster):
    """As Kafka: a manual assignment with num_partitions or replication_factor set too is
    INVALID_REQUEST (the single node took one with a replication factor); with both at -1
    the assignment gives the partitions."""
    from tests.test_broker_failures import connect, roundtrip
    from wire.messages import CREATE_TOPICS

    with Client(cluster.bootstrap_servers, call_timeout=30) as client:
        [node] = client.admin.describe_cluster().brokers
    Topic, Assignment = CREATE_TOPICS.request.CreatableTopic, CREATE_TOPICS.request.CreatableReplicaAssignment
    names = {given: _topic(f"assigned-{given}") for given in ("factor", "count", "neither")}
    counts = {"factor": (-1, 1), "count": (1, -1), "neither": (-1, -1)}
    request = CREATE_TOPICS.request(timeout_ms=10_000, validate_only=False, topics=[
        Topic(name=names[given], num_partitions=partitions, replication_factor=factor, configs=[],
              assignments=[Assignment(partition_index=0, broker_ids=[node])])
        for given, (partitions, factor) in counts.items()])
    with connect(cluster.port) as sock:
        response = roundtrip(sock, CREATE_TOPICS, 5, request, 1)
    answers = {t.name: (t.error_code, t.num_partitions) for t in response.topics}
    assert answers[names["factor"]][0] == ErrorCode.INVALID_REQUEST
    assert answers[names["count"]][0] == ErrorCode.INVALID_REQUEST
    assert answers[names["neither"]] == (ErrorCode.NONE, 1)

INVALID_NAME = "bad$#!"


def producing_to_an_invalid_name_fails_with_its_error(bootstrap: str) -> None:
    """confluent-kafka producing to an invalid topic name is told so by Metadata
    (TOPIC_EXCEPTION), long before its message.timeout.ms."""
    import confluent_kafka

    failures = []
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 300_000,
                                         "log_level": 3})
    producer.produce(INVALID_NAME, b"v", on_delivery=lambda error, _: failures.append(error))
    assert producer.flush(30) == 0, "the record is still waiting for its topic"
    assert [e.code() for e in failures] == [confluent_kafka.KafkaError.TOPIC_EXCEPTION], failures


def test_metadata_auto_creation_of_an_invalid_name_answers_its_error(broker):
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        answer = client.metadata([INVALID_NAME], allow_auto_topic_creation=True).topics[INVALID_NAME]
    assert answer.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    producing_to_an_invalid_name_fails_with_its_error(broker.bootstrap_servers)


def test_sluice_client_creates_and_deletes_topics(broker):
    """Our own client's topic administration against the real broker, across a restart."""
    topic = _topic("wire-admin")
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({topic: NewTopic(2, 1, {"retention.ms": "60000"})})[topic]
        assert created.error is None and (created.partitions, created.replication_factor) == (2, 1)
        first_id = created.topic_id
        assert first_id.int != 0

        dup = client.admin.create_topics({topic: NewTopic(2, 1)})[topic]
        assert dup.error is not None and dup.error.code == ErrorCode.TOPIC_ALREADY_EXISTS
        bad = client.admin.create_topics({_topic("bad-rf"): NewTopic(1, 3)})
        assert [c.error.code for c in bad.values()] == [ErrorCode.INVALID_REPLICATION_FACTOR]
        checked = client.admin.create_topics({_topic("validate"): NewTopic(1, 1)}, validate_only=True)
        [name] = checked
        assert checked[name].error is None
        assert client.metadata([name], allow_auto_topic_creation=False).topics[name].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        info = client.metadata([topic], allow_auto_topic_creation=False).topics[topic]
        assert sorted(info.partitions) == [0, 1] and info.topic_id == first_id
        client.producer.produce(topic, 1, [ProducerRecord(b"k", b"v", (("h", b"1"),))])
        assert client.consumer.list_offsets(topic, [1], LATEST)[1].offset == 1

        assert client.admin.delete_topics([topic]) == {topic: None}
        gone = client.metadata([topic], allow_auto_topic_creation=False).topics[topic]
        assert gone.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        again = client.admin.delete_topics([topic])[topic]
        assert again is not None and again.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

        recreated = client.admin.create_topics({topic: NewTopic(1, 1)})[topic]
        assert recreated.error is None and recreated.topic_id not in (first_id,)
        assert client.consumer.list_offsets(topic, [0], LATEST)[0].offset == 0

    broker.restart()
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        info = client.metadata([topic], allow_auto_topic_creation=False).topics[topic]
        assert info.error_code == 0 and sorted(info.partitions) == [0]
        assert info.topic_id == recreated.topic_id
        assert client.consumer.list_offsets(topic, [0], LATEST)[0].offset == 0
        assert client.admin.delete_topics([topic]) == {topic: None}
    broker.restart()
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        assert client.metadata([topic], allow_auto_topic_creation=False).topics[topic].error_code == \
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_the_spark_sinks_intents_topic_is_internal_in_metadata(broker):
    """Clients create and write __sluice_sink_intents like any topic, and Metadata reports
    it internal as it reports __consumer_offsets, so that consumers leave it out of
    pattern subscriptions: kafka-python's consumer lists neither. Another topic whose name
    starts with __ is not internal."""
    intents, other = SINK_INTENTS_TOPIC, f"__user-{uuid.uuid4().hex[:8]}"
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({intents: NewTopic(1, 1, {"cleanup.policy": "compact"}),
                                        other: NewTopic(1, 1)})
        assert [c.error for c in created.values()] == [None, None]
        client.consumer.commit_offsets(_topic("group"), {(other, 0): 0})  # creates __consumer_offsets
        client.producer.produce(intents, 0, [ProducerRecord(b"query", b"decision", ())])
        assert client.consumer.list_offsets(intents, [0], LATEST)[0].offset == 1
        metadata = client.metadata([intents, other, "__consumer_offsets"])
        assert {name: t.is_internal for name, t in metadata.topics.items()} == {
            intents: True, other: False, "__consumer_offsets": True}
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=CLIENT_TIMEOUT_MS)
    try:
        listed = consumer.topics()
    finally:
        consumer.close()
    assert other in listed and not {intents, "__consumer_offsets"} & listed


# -- seeking by timestamp ---------------------------------------------------------------------

def test_confluent_offsets_for_times(broker):
    """offsets_for_times finds the first record at or after a timestamp, inside compressed
    multi-record batches and across batches; a consumer assigned there starts at that
    record. The same after a restart (the time index is rebuilt or reloaded)."""
    from confluent_kafka import OFFSET_END, TIMESTAMP_CREATE_TIME, Consumer, Producer, TopicPartition

    topic = _topic("times")
    base = int(time.time() * 1000) - 3_600_000
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        assert client.admin.create_topics({topic: NewTopic(2, 1)})[topic].error is None

    # Partition 0: one zstd batch of 20 records 10 ms apart. Partition 1: five zstd
    # batches (flushed separately) of 4 records each, 100 ms apart.
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
                         "acks": "all", "compression.type": "zstd", "linger.ms": 200})
    timestamps = {0: [base + 10 * i for i in range(20)], 1: [base + 100 * i for i in range(20)]}
    for i, ts in enumerate(timestamps[0]):
        producer.produce(topic, value=f"zero-{i}".encode() * 10, key=b"k%d" % i, partition=0,
                         timestamp=ts)
    for i, ts in enumerate(timestamps[1]):
        producer.produce(topic, value=f"one-{i}".encode() * 10, key=b"k%d" % i, partition=1,
                         timestamp=ts)
        if i % 4 == 3:
            assert producer.flush(10) == 0
    assert producer.flush(10) == 0
    del producer  # no reconnecting across the restart below
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        layout = {p: [(h.base_offset, h.record_count, h.compression)
                      for h, _ in iter_batches(client.consumer.fetch(topic, p, 0, max_wait_ms=0).records)]
                  for p in (0, 1)}
    assert layout == {0: [(0, 20, CODEC_IDS["zstd"])],
                      1: [(o, 4, CODEC_IDS["zstd"]) for o in range(0, 20, 4)]}

    queries = [  # (partition, timestamp, expected offset)
        (0, base - 5000, 0), (0, base, 0), (0, base + 50, 5), (0, base + 55, 6),
        (0, base + 190, 19), (0, base + 191, OFFSET_END),
        (1, base + 350, 4), (1, base + 400, 4), (1, base + 1250, 13), (1, base + 1900, 19),
        (1, base + 10_000, OFFSET_END),
    ]

    def check():
        consumer = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "never-joined",
                             "enable.auto.commit": False, "enable.auto.offset.store": False})
        try:
            # One partition per request: a partition listed twice is not a valid request.
            found = [consumer.offsets_for_times([TopicPartition(topic, p, ts)], timeout=10)[0]
                     for p, ts, _ in queries]
            assert [(tp.partition, tp.offset) for tp in found] == [(p, o) for p, _, o in queries]
            assert all(tp.error is None for tp in found)

            # Seek there: assign at the offsets found and read the first record of each.
            starts = {1: consumer.offsets_for_times([TopicPartition(topic, 1, base + 1250)], timeout=10)[0],
                      0: consumer.offsets_for_times([TopicPartition(topic, 0, base + 55)], timeout=10)[0]}
            consumer.assign(list(starts.values()))
            first = {}
            deadline = time.monotonic() + 15
            for _ in range(100):
                if len(first) == 2 or time.monotonic() > deadline:
                    break
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                first.setdefault(msg.partition(), (msg.offset(), msg.timestamp(), msg.key()))
            assert first == {0: (6, (TIMESTAMP_CREATE_TIME, base + 60), b"k6"),
                             1: (13, (TIMESTAMP_CREATE_TIME, base + 1300), b"k13")}
        finally:
            consumer.close()

    check()
    broker.restart()
    check()
