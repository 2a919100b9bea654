"""Produce v0–v2 with legacy message sets (message formats v0 and v1), which the broker
converts to record batches as Kafka 3.x does (wire/message_sets.py, broker/handlers/produce.py).

- confluent-kafka forced to old versions (`api.version.request=false` with
  `broker.version.fallback` 0.8.2.2: Produce v0, or 0.9.0.0: Produce v1; magic 0 both;
  librdkafka 2.x takes any fallback from 0.10 on as a reason to ask ApiVersions, and then
  writes record batches), uncompressed and with gzip, snappy and lz4 (librdkafka writes
  magic 0's LZ4 frames with the header checksum of KAFKA-3160), and kafka-python with
  `api_version` (0, 9): Produce v1, magic 0, and (0, 10, 1): Produce v2, magic 1, with
  every codec it has for them: the produce succeeds, and a current consumer reads every
  record back with its key, its value (tombstones included), no headers, and the
  timestamp Kafka gives it: the producer's with magic 1, -1 (none) with magic 0.
- Malformed message sets, sent raw (Produce v1 and v2), get Kafka's codes: a CRC mismatch (outer or inner),
  a truncated or undecompressable set CORRUPT_MESSAGE; mixed magics, two compressed
  messages, zstd with magic 1, a message set in Produce v3 INVALID_RECORD; a message over
  max.message.bytes MESSAGE_TOO_LARGE; a message marked LogAppendTime, timestamps too far
  apart for one batch INVALID_TIMESTAMP. Nothing of them is stored, and the connection goes
  on serving. The well-formed sets they are made from are stored; magic 0 messages on a
  LogAppendTime topic get the append time, and a compacted topic refuses a keyless message
  (INVALID_RECORD), as Kafka's LogValidator does.
- The decoder alone: bounded decompression, a LogAppendTime wrapper's timestamp given to
  its messages, and nothing but DecodeError from mutated or forged sets.
"""

from __future__ import annotations

import struct
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.broker_process import BrokerProcess
from tests.test_broker_clients import PARTITIONS, Row, consume_confluent
from tests.test_broker_failures import connect, produce_body, roundtrip
from tests.test_compression_type import create
from sluice_client import Client
from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress
from wire.error_codes import ErrorCode
from wire.message_sets import MessageSet, decode_message_set, split_message_set
from wire.messages import PRODUCE
from wire.primitives import DecodeError

confluent_kafka = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.timeout(120)

COUNT = 12
MAX_MESSAGE_BYTES = 4096


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("legacy-produce") / "data") as proc:
        yield proc


def outgoing(i: int) -> tuple[bytes | None, bytes | None]:
    """Record i's key and value: a null key and a tombstone among them."""
    key = None if i == 4 else f"key-{i}".encode()
    value = None if i == 7 else f"value {i} ".encode() * (i + 1)
    return key, value


def read_back(broker, topic: str) -> list[Row]:
    """Partition 0, where every record goes (consume_confluent reads PARTITIONS of a topic)."""
    got = consume_confluent(broker.bootstrap_servers, [topic],
                            {(topic, p): COUNT if p == 0 else 0 for p in range(PARTITIONS)})
    return got[(topic, 0)]


def expected(timestamps: list[int]) -> list[Row]:
    return [Row(i, *outgoing(i), (), timestamps[i]) for i in range(COUNT)]


@pytest.mark.parametrize("fallback,codec", [("0.8.2.2", "gzip"), ("0.9.0.0", "none"), ("0.9.0.0", "gzip"),
                                            ("0.9.0.0", "snappy"), ("0.9.0.0", "lz4")])
def test_confluent_forced_to_old_versions_produces(broker, fallback, codec):
    topic = create(broker, {}, PARTITIONS)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap_servers, "api.version.request": False,
        "broker.version.fallback": fallback, "compression.codec": codec, "linger.ms": 50,
        "message.timeout.ms": 20000})
    offsets, errors = [], []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(COUNT):
        key, value = outgoing(i)
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=delivered)
    assert producer.flush(30) == 0, "confluent-kafka did not deliver everything in 30 s"
    assert not errors, errors
    assert sorted(offsets) == list(range(COUNT))
    assert read_back(broker, topic) == expected([-1] * COUNT)


# kafka-python writes magic 0's LZ4 frames only with the xxhash package, which is not installed.
@pytest.mark.parametrize("api_version,magic,codec", [
    ((0, 9), 0, None), ((0, 9), 0, "gzip"), ((0, 9), 0, "snappy"),
    ((0, 10, 1), 1, None), ((0, 10, 1), 1, "gzip"), ((0, 10, 1), 1, "snappy"), ((0, 10, 1), 1, "lz4")])
def test_kafka_python_with_an_old_api_version_produces(broker, api_version, magic, codec):
    topic = create(broker, {}, PARTITIONS)
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, api_version=api_version,
                                   compression_type=codec, linger_ms=50, request_timeout_ms=10000,
                                   max_block_ms=10000)
    first = int(time.time() * 1000) - 60_000
    try:
        futures = [producer.send(topic, key=outgoing(i)[0], value=outgoing(i)[1], partition=0,
                                 timestamp_ms=first + i) for i in range(COUNT)]
        producer.flush(timeout=30)
        assert sorted(future.get(timeout=10).offset for future in futures) == list(range(COUNT))
    finally:
        producer.close(timeout=5)
    assert read_back(broker, topic) == expected([first + i if magic else -1 for i in range(COUNT)])


# -- malformed message sets, sent raw ------------------------------------------------------

def _sized(data: bytes | None) -> bytes:
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


def message(magic: int, key: bytes | None, value: bytes | None, *, attributes: int = 0,
            timestamp: int = 0, offset: int = 0) -> bytes:
    """One message-set entry: offset, size, CRC-32, magic, attributes, (timestamp,) key, value."""
    body = (struct.pack(">bb", magic, attributes) + (struct.pack(">q", timestamp) if magic else b"")
            + _sized(key) + _sized(value))
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def plain(magic: int, count: int = 3) -> bytes:
    now = int(time.time() * 1000)
    return b"".join(message(magic, b"k%d" % i, b"v%d" % i, timestamp=now, offset=i) for i in range(count))


def wrapper(magic: int, codec: int, inner: bytes) -> bytes:
    return message(magic, None, compress(codec, inner), attributes=codec,
                   timestamp=int(time.time() * 1000))


def corrupted(entry: bytes, at: int) -> bytes:
    """`entry` with one byte flipped at `at` (from the end when negative): its CRC fails."""
    damaged = bytearray(entry)
    damaged[at] ^= 0x20
    return bytes(damaged)


MALFORMED = {
    # name: (Produce version, records, expected error)
    "crc_mismatch": (2, lambda: corrupted(plain(1), -2), ErrorCode.CORRUPT_MESSAGE),
    "inner_crc_mismatch": (2, lambda: wrapper(1, GZIP, corrupted(plain(1), -2)), ErrorCode.CORRUPT_MESSAGE),
    "truncated": (2, lambda: plain(0)[:-5], ErrorCode.CORRUPT_MESSAGE),
    "undecompressable": (1, lambda: message(0, None, b"not gzip at all", attributes=GZIP),
                         ErrorCode.CORRUPT_MESSAGE),
    "zstd_with_magic_1": (2, lambda: wrapper(1, ZSTD, plain(1)), ErrorCode.INVALID_RECORD),
    "mixed_magics": (2, lambda: plain(0, 1) + plain(1, 1), ErrorCode.INVALID_RECORD),
    "two_compressed_messages": (2, lambda: wrapper(1, GZIP, plain(1)) * 2, ErrorCode.INVALID_RECORD),
    "message_set_in_produce_v3": (3, lambda: plain(1), ErrorCode.INVALID_RECORD),
    "too_large": (2, lambda: message(1, None, b"x" * MAX_MESSAGE_BYTES), ErrorCode.MESSAGE_TOO_LARGE),
    "log_append_time": (2, lambda: message(1, b"k", b"v", attributes=0x08, timestamp=-1),
                        ErrorCode.INVALID_TIMESTAMP),
    "timestamps_too_far_apart": (2, lambda: message(1, b"k", b"v", timestamp=-1)
                                 + message(1, b"k", b"v", timestamp=2**63 - 1), ErrorCode.INVALID_TIMESTAMP),
}


@pytest.fixture(scope="module")
def victim(broker):
    """A topic every malformed set is sent to, which must stay empty, and one to which a
    good set is sent after each (the connection serves on)."""
    return (create(broker, {"max.message.bytes": str(MAX_MESSAGE_BYTES)}, 1), create(broker, {}, 1))


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_message_set_gets_its_error_code(broker, victim, case):
    version, make, code = MALFORMED[case]
    refusing, accepting = victim
    with connect(broker.port) as sock:
        response = roundtrip(sock, PRODUCE, version, produce_body(refusing, 0, make()), 1)
        [answer] = response.responses[0].partition_responses
        assert (answer.error_code, answer.base_offset) == (code, -1)
        response = roundtrip(sock, PRODUCE, 2, produce_body(accepting, 0, plain(1)), 2)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    with Client(broker.bootstrap_servers) as client:
        assert client.consumer.list_offsets(refusing, [0], -1)[0].offset == 0


def test_well_formed_hand_made_message_sets_are_stored(broker):
    """The sets the malformed cases are made from, unharmed, are stored whole."""
    topic = create(broker, {}, 1)
    with connect(broker.port) as sock:
        for version, records in ((1, plain(0)), (2, plain(1)), (2, wrapper(1, GZIP, plain(1)))):
            response = roundtrip(sock, PRODUCE, version, produce_body(topic, 0, records), 3)
            assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    with Client(broker.bootstrap_servers) as client:
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
    assert [(r.offset, r.key, r.value) for r in fetched.records] == [
        (offset, b"k%d" % (offset % 3), b"v%d" % (offset % 3)) for offset in range(9)]



def test_log_append_time_topic_stamps_converted_messages_with_the_append_time(broker):
    """Magic 0 messages have no timestamp; on a LogAppendTime topic they get the append's,
    as every batch there does."""
    topic = create(broker, {"message.timestamp.type": "LogAppendTime"}, 1)
    with connect(broker.port) as sock:
        response = roundtrip(sock, PRODUCE, 2, produce_body(topic, 0, plain(0)), 4)
    [answer] = response.responses[0].partition_responses
    assert answer.error_code == ErrorCode.NONE and answer.log_append_time_ms > 0
    with Client(broker.bootstrap_servers) as client:
        fetched = client.consumer.fetch_records(topic, 0, 0, max_wait_ms=0)
    assert [r.timestamp for r in fetched.records] == [answer.log_append_time_ms] * 3


def test_compacted_topic_refuses_a_keyless_message(broker):
    topic = create(broker, {"cleanup.policy": "compact"}, 1)
    with connect(broker.port) as sock:
        keyless = message(1, b"k", b"v") + message(1, None, b"v")
        response = roundtrip(sock, PRODUCE, 2, produce_body(topic, 0, keyless), 5)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD
        response = roundtrip(sock, PRODUCE, 2, produce_body(topic, 0, plain(1)), 6)
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE

# -- the decoder alone: bounded, and nothing but DecodeError whatever the bytes -----------------

def decode(records: bytes, max_decompressed_size: int = 1 << 20) -> MessageSet:
    return decode_message_set(split_message_set(records), max_decompressed_size)


def test_a_wrapper_inflating_past_the_bound_is_refused():
    inner = plain(1, 200)
    assert len(decode(wrapper(1, GZIP, inner), len(inner)).keys) == 200
    with pytest.raises(DecodeError, match="exceeds"):
        decode(wrapper(1, GZIP, inner), len(inner) - 1)


def test_a_wrapper_marked_log_append_time_gives_its_timestamp_to_its_messages():
    inner = plain(1, 2)
    marked = message(1, None, compress(GZIP, inner), attributes=GZIP | 0x08, timestamp=777)
    decoded = decode(marked)
    assert (decoded.timestamps, decoded.log_append_time) == ([777, 777], [0, 1])


def _mutations(records: bytes):
    """Every truncation and every single byte flipped of `records`."""
    for end in range(len(records)):
        yield records[:end]
    for at in range(len(records)):
        yield corrupted(records, at)


@pytest.mark.parametrize("magic,codec", [(0, NONE), (1, NONE), (0, GZIP), (1, SNAPPY), (1, LZ4)])
def test_mutated_message_sets_raise_only_decode_error(magic, codec):
    valid = plain(magic, 3) if codec == NONE else wrapper(magic, codec, plain(magic, 3))
    for records in _mutations(valid):
        try:
            decode(records)
        except DecodeError:
            pass


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(magic=st.integers(0, 255), attributes=st.integers(0, 255), timestamp=st.integers(-2**63, 2**63 - 1),
       key_length=st.integers(-2**31, 2**31 - 1), key=st.binary(max_size=8),
       value_length=st.integers(-2**31, 2**31 - 1), value=st.binary(max_size=40), wrapped=st.booleans())
def test_messages_with_forged_lengths_and_a_valid_crc_raise_only_decode_error(
        magic, attributes, timestamp, key_length, key, value_length, value, wrapped):
    body = (struct.pack(">BBq", magic, attributes, timestamp)[:2 if magic == 0 else 10]
            + struct.pack(">i", key_length) + key + struct.pack(">i", value_length) + value)
    forged = struct.pack(">qiI", 0, 4 + len(body), zlib.crc32(body)) + body
    if wrapped:
        forged = wrapper(1, GZIP, forged)
    try:
        decode(forged)
    except DecodeError:
        pass
