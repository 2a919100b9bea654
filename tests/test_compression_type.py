"""The `compression.type` topic config against the real broker process.

One broker whose server.properties sets `compression.type=gzip` (the default for topics
without an override). Topics with zstd, gzip, uncompressed, producer and the broker
default are written by confluent-kafka (idempotent, lz4) and kafka-python (gzip or
none); the stored batches must carry the topic's codec (the producer's for
`producer`) and every consumer client must read exactly what was written. Around it:
idempotent retries of a recompressed batch, a transaction recompressed and read
read_committed, a batch over max.message.bytes once recompressed, refused values,
DescribeConfigs, and `wire.records.recompress_batch` on its own.
"""

from __future__ import annotations

import glob
import os
import time
import uuid

import pytest

from tests import test_broker_clients as clients
from tests import test_transactions as txn
from sluice.broker_process import BrokerProcess
from sluice_client import Client, NewTopic
from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.records import (COMPRESSION_MASK, build_batch, decode_batch, has_valid_crc,
                          iter_batches, parse_header, recompress_batch)

admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.timeout(60)

# Topic's compression.type (None: the broker default) -> codec of the stored batches
# (None: each producer's own).
TOPICS = {"zstd": ZSTD, "gzip": GZIP, "uncompressed": NONE, "producer": None, None: GZIP}
PRODUCER_CODECS = {"confluent": ("lz4", LZ4), "kafka-python": ("gzip", GZIP)}
PRODUCE = {"confluent": clients.produce_confluent, "kafka-python": clients.produce_kafka_python}
CONSUME = {"confluent": clients.consume_confluent, "kafka-python": clients.consume_kafka_python,
           "aiokafka": clients.consume_aiokafka}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    directory = tmp_path_factory.mktemp("compression-broker")
    config = directory / "server.properties"
    config.write_text("compression.type=gzip\n" + txn.FAST_CHECKS)
    with BrokerProcess(directory / "data", config_file=str(config)) as proc:
        yield proc


def create(broker, configs: dict, partitions: int = clients.PARTITIONS) -> str:
    topic = f"compress-{uuid.uuid4().hex[:8]}"
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({topic: NewTopic(partitions, 1, configs)})
    assert created[topic].error is None, created[topic].error
    return topic


def stored_batches(broker, topic: str, partition: int) -> list:
    """(header, record count) of every batch in the partition's segment files."""
    batches = []
    for path in sorted(glob.glob(os.path.join(broker.data_dir, f"{topic}-{partition}", "*.log"))):
        with open(path, "rb") as f:
            batches += [header for header, _ in iter_batches(f.read())]
    return batches


@pytest.fixture(scope="module")
def written(broker):
    """{compression.type: (topic, expected rows by (topic, partition))}, every topic
    written by both producers, one after the other."""
    out = {}
    for compression_type in TOPICS:
        topic = create(broker, {} if compression_type is None else {"compression.type": compression_type})
        expected = {(topic, p): [] for p in range(clients.PARTITIONS)}
        for producer, (codec, _) in PRODUCER_CODECS.items():
            plan = {p: clients.python_records(producer, codec, p) for p in range(clients.PARTITIONS)}
            offsets = PRODUCE[producer](broker.bootstrap_servers, topic, codec, plan)
            for p, records in plan.items():
                rows = expected[(topic, p)]
                assert offsets[p] == list(range(len(rows), len(rows) + len(records)))
                rows += [clients.Row(len(rows) + i, r.key, r.value, r.headers, r.timestamp)
                         for i, r in enumerate(records)]
        out[compression_type] = (topic, expected)
    return out


def test_stored_batches_carry_the_topics_codec(broker, written):
    for compression_type, codec in TOPICS.items():
        topic, expected = written[compression_type]
        for p in range(clients.PARTITIONS):
            headers = stored_batches(broker, topic, p)
            assert sum(h.record_count for h in headers) == len(expected[(topic, p)])
            if codec is None:  # confluent's records (lz4) come first
                codecs = [LZ4 if h.base_offset < clients.PER_PARTITION else GZIP for h in headers]
            else:
                codecs = [codec] * len(headers)
            assert [h.compression for h in headers] == codecs, (compression_type, p)
            assert any(h.producer_id >= 0 and h.base_sequence == 0 for h in headers)


@pytest.mark.parametrize("consumer", sorted(CONSUME))
def test_every_client_reads_what_was_written(broker, written, consumer):
    for compression_type, (topic, expected) in written.items():
        got = CONSUME[consumer](broker.bootstrap_servers, [topic],
                                {tp: len(rows) for tp, rows in expected.items()})
        assert {tp: got.get(tp, []) for tp in expected} == expected, compression_type


def test_idempotent_retry_of_a_recompressed_batch_is_answered_not_stored(broker):
    topic = create(broker, {"compression.type": "zstd"}, partitions=1)
    now = int(time.time() * 1000)
    batches = [build_batch([(b"k%d" % i, b"v" * 500, [("h", b"x")], now + i) for i in range(3)],
                           compression=LZ4, producer_id=4242, producer_epoch=0, base_sequence=seq)
               for seq in (0, 3)]
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        first = client.producer.produce_batch(topic, 0, batches[0])
        retry = client.producer.produce_batch(topic, 0, batches[0])
        second = client.producer.produce_batch(topic, 0, batches[1])
    assert (first.base_offset, retry.base_offset, second.base_offset) == (0, 0, 3)
    stored = stored_batches(broker, topic, 0)
    assert [(h.compression, h.base_offset, h.base_sequence, h.producer_id) for h in stored] == \
        [(ZSTD, 0, 0, 4242), (ZSTD, 3, 3, 4242)]


def test_recompressed_transaction_keeps_its_flag(broker):
    topic = create(broker, {"compression.type": "zstd"}, partitions=2)
    producer = txn.transactional_producer(broker.bootstrap_servers, txn.unique("compress"),
                                          **{"compression.type": "lz4"})
    txn.run_transaction(producer, topic, [b"committed-%d" % i for i in range(6)], 2, commit=True)
    txn.run_transaction(producer, topic, [b"aborted-%d" % i for i in range(4)], 2, commit=False)
    data = [h for p in range(2) for h in stored_batches(broker, topic, p) if not h.is_control]
    assert data and all(h.is_transactional and h.compression == ZSTD for h in data)
    got = txn.consume_confluent(broker.bootstrap_servers, topic, 2, "read_committed", 6)
    assert sorted(got) == [b"committed-%d" % i for i in range(6)]


def test_batch_too_large_once_recompressed_is_refused(broker):
    topic = create(broker, {"compression.type": "uncompressed", "max.message.bytes": "2000"},
                   partitions=1)
    batch = build_batch([(None, b"a" * 5000, (), int(time.time() * 1000))], compression=GZIP)
    assert len(batch) < 2000
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        with pytest.raises(KafkaError) as refused:
            client.producer.produce_batch(topic, 0, batch)
    assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE


@pytest.mark.parametrize("key, value", [("compression.type", "brotli"),
                                        ("compression.type", "none"),
                                        ("compression.zstd.level", "3")])
def test_refused_configs_are_invalid_config_naming_the_key(broker, key, value):
    with Client(broker.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({"refused-" + uuid.uuid4().hex[:8]: NewTopic(1, 1, {key: value})})
    (error,) = [c.error for c in created.values()]
    assert error is not None and error.code == ErrorCode.INVALID_CONFIG
    assert key in str(error)


def test_describe_configs_reports_compression_type(broker, written):
    client = admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    resources = [admin.ConfigResource("topic", written[t][0]) for t in ("zstd", None)]
    described = {r.name: f.result(15) for r, f in client.describe_configs(resources).items()}
    override, default = (described[written[t][0]]["compression.type"] for t in ("zstd", None))
    assert (override.value, override.source) == ("zstd", admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert (default.value, default.source) == ("gzip", admin.ConfigSource.STATIC_BROKER_CONFIG.value)


@pytest.mark.parametrize("codec", [NONE, GZIP, SNAPPY, LZ4, ZSTD])
def test_recompress_batch_keeps_records_and_header_fields(codec):
    now = int(time.time() * 1000)
    batch = build_batch([(b"k", b"v" * 300, [("h", b"x"), ("h", b"")], now), (None, None, (), now - 5)],
                        compression=GZIP if codec != GZIP else LZ4, producer_id=7, producer_epoch=2,
                        base_sequence=11, transactional=True)
    again = recompress_batch(batch, codec, 1 << 20)
    before, after = parse_header(batch), parse_header(again)
    assert after.compression == codec and has_valid_crc(again)
    unchanged = dict(batch_length=0, crc=0, attributes=before.attributes & ~COMPRESSION_MASK)
    assert after._replace(**unchanged) == before._replace(**unchanged)
    assert decode_batch(again, 1 << 20) == decode_batch(batch, 1 << 20)
