"""Record batches (magic 2) and their compression codecs."""

import resource
import struct
import zlib

import cramjam
import crc32c
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from wire.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD, compress, decompress
from wire.primitives import DecodeError, EncodeError
from wire.records import (
    CONTROL_ABORT, CONTROL_COMMIT, HEADER_SIZE, LOG_APPEND_TIME, BatchHeader, ControlRecord,
    build_batch, build_batch_columns, build_control_batch, decode_batch, decode_batch_in_chunks,
    decode_control_record, encode_record, has_valid_crc,
    iter_batches, parse_header, set_base_offset, set_log_append_time,
    set_partition_leader_epoch,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
CODEC_IDS = ["none", "gzip", "snappy", "lz4", "zstd"]
MiB = 1 << 20

SAMPLE = [
    (b"key-0", b"value " * 40, [], 1_700_000_000_000),
    (None, b"value " * 40, [("trace", b"abc"), ("empty", b""), ("null", None)], 1_700_000_000_500),
    (b"key-2", None, [("\u00fcnicode \u2603", b"\x00\xff")], 1_699_999_999_000),
    (b"", b"", [], 1_700_000_100_000),
]

headers_strategy = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
record_strategy = st.tuples(
    st.none() | st.binary(max_size=32),
    st.none() | st.binary(max_size=200),
    headers_strategy,
    st.integers(-(2 ** 61), 2 ** 61),  # any two differ by less than 2**63
)


def expected(records, base_offset=0):
    return [(base_offset + i, t, k, v, tuple(map(tuple, h)))
            for i, (k, v, h, t) in enumerate(records)]


def observed(decoded):
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded]


def zigzag(n: int) -> bytes:
    """The test's own varint encoder, independent of the module under test."""
    z = (n << 1) ^ (n >> 63)
    z &= (1 << 64) - 1
    out = bytearray()
    while True:
        if z < 0x80:
            out.append(z)
            return bytes(out)
        out.append(z & 0x7F | 0x80)
        z >>= 7


def batch_with_body(body: bytes, count: int, attributes: int) -> bytes:
    """A batch with a consistent header and CRC around `body`, taken as is (already
    compressed, if `attributes` name a codec) as its records section."""
    crc_range = struct.pack(">hiqqqhii", attributes, max(count - 1, 0), 0, 0,
                            -1, -1, -1, count) + body
    return struct.pack(">qiibI", 0, 49 + len(body), -1, 2, crc32c.crc32c(crc_range)) + crc_range


def batch_around(section: bytes, count: int, codec: int = NONE) -> bytes:
    """A batch with a consistent header and CRC around an arbitrary records section."""
    return batch_with_body(compress(codec, section), count, codec)


def record_section(*, length=None, key=b"k", key_length=None, value=b"v", value_length=None,
                   headers=(("h", b"x"),), header_count=None, header_key_length=None,
                   header_value_length=None) -> bytes:
    """One record, hand-encoded, with any of its lengths optionally forged."""
    encoded_headers = b""
    for name, hvalue in headers:
        name = name.encode()
        encoded_headers += zigzag(len(name) if header_key_length is None else header_key_length)
        encoded_headers += name
        encoded_headers += zigzag(len(hvalue) if header_value_length is None else header_value_length)
        encoded_headers += hvalue
    body = (b"\x00" + zigzag(0) + zigzag(0)
            + zigzag(len(key) if key_length is None else key_length) + key
            + zigzag(len(value) if value_length is None else value_length) + value
            + zigzag(len(headers) if header_count is None else header_count) + encoded_headers)
    return zigzag(len(body) if length is None else length) + body


# --- round trips -----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(record_strategy, min_size=1, max_size=12),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2 ** 62),
    producer=st.tuples(st.integers(-1, 2 ** 63 - 1), st.integers(-1, 2 ** 15 - 1),
                       st.integers(-1, 2 ** 31 - 1)),
    transactional=st.booleans(),
    leader_epoch=st.integers(-1, 2 ** 31 - 1),
)
def test_round_trip(records, codec, base_offset, producer, transactional, leader_epoch):
    producer_id, producer_epoch, base_sequence = producer
    batch = build_batch(records, base_offset=base_offset, compression=codec,
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        base_sequence=base_sequence, transactional=transactional,
                        partition_leader_epoch=leader_epoch)
    header = parse_header(batch)
    assert header.size == len(batch)
    assert header.magic == 2
    assert header.compression == codec
    assert header.is_transactional == transactional
    assert not header.is_control
    assert header.timestamp_type == 0
    assert header.record_count == len(records)
    assert header.last_offset == base_offset + len(records) - 1
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(r[3] for r in records)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.partition_leader_epoch == leader_epoch
    assert has_valid_crc(batch)
    assert observed(decode_batch(batch, MiB)) == expected(records, base_offset)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_round_trip_beyond_small_varints(codec):
    """Lengths, offset deltas and timestamp deltas past the two-byte varint range."""
    records = [(b"k" * 10_000, bytes(range(256)) * 400, [("h" * 9000, b"v" * 9000)], 5_000_000_000)]
    records += [(None, b"%d" % i, [], -i * 1_000_003) for i in range(20_000)]
    batch = build_batch(records, compression=codec, base_offset=7)
    assert parse_header(batch).last_offset_delta == len(records) - 1
    assert observed(decode_batch(batch, 4 * MiB)) == expected(records, 7)


def test_bytes_like_keys_and_values_are_accepted():
    view = memoryview(b"\x00\x01\x02\x03").cast("H")  # two 2-byte items: four bytes
    batch = build_batch([(bytearray(b"key"), view, [("h", bytearray(b"x"))], 1)])
    [record] = decode_batch(batch, MiB)
    assert (record.key, record.value, record.headers) == (b"key", b"\x00\x01\x02\x03", (("h", b"x"),))


@pytest.mark.parametrize("bad_records", [
    [],
    [("key", b"v", [], 0)],
    [(b"k", 5, [], 0)],
    [(b"k", b"v", [(b"name", b"v")], 0)],
    [(b"k", b"v", [("name", "v")], 0)],
    [(b"k", b"v", [], 1.5)],
    [(b"k", b"v", [], 2 ** 63)],
    [(b"k", b"v", [], -(2 ** 62)), (b"k", b"v", [], 2 ** 62)],  # delta beyond a varlong
    [(b"k", b"v")],
])
def test_build_rejects_bad_records(bad_records):
    with pytest.raises(EncodeError):
        build_batch(bad_records)


def test_columns_build_the_same_batch_as_tuples():
    """build_batch_columns (what the sink writes with) encodes exactly what build_batch
    does; headers may be None for the whole batch or for one record; bytes-like keys,
    values and header values are accepted."""
    keys = [b"k", None, bytearray(b"kk"), memoryview(b"k3")]
    values = [b"v" * 300, b"", None, bytearray(b"v4")]
    headers = [[("a", b"1"), ("b", None)], None, [], [("c", memoryview(b"3"))]]
    timestamps = [5, 2**40, 5 - 2**40, 7]
    records = [(k, v, h or (), t) for k, v, h, t in zip(keys, values, headers, timestamps)]
    options = {"producer_id": 9, "producer_epoch": 2, "base_sequence": 40, "transactional": True}
    assert build_batch_columns(keys, values, headers, timestamps, **options) == build_batch(records, **options)
    assert (build_batch_columns(keys, values, None, timestamps) ==
            build_batch([(k, v, (), t) for k, v, t in zip(keys, values, timestamps)]))
    decoded = decode_batch(build_batch_columns(keys, values, headers, timestamps), MiB)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (None if k is None else bytes(k), None if v is None else bytes(v),
         tuple((n, None if x is None else bytes(x)) for n, x in h or ()), t)
        for k, v, h, t in zip(keys, values, headers, timestamps)]
    with pytest.raises(EncodeError):
        build_batch_columns([b"k"], [b"v", b"w"], None, [1])  # columns of different lengths
    with pytest.raises(EncodeError):
        build_batch_columns([b"k"], [b"v"], [[("h", "str")]], [1])


@pytest.mark.parametrize("options", [
    {"producer_id": 2 ** 63}, {"producer_epoch": 2 ** 15}, {"base_sequence": -(2 ** 31) - 1},
    {"base_offset": -(2 ** 63) - 1}, {"partition_leader_epoch": 2 ** 31}, {"compression": 5},
])
def test_build_rejects_out_of_range_header_fields(options):
    with pytest.raises(EncodeError):
        build_batch([(b"k", b"v", [], 0)], **options)


# --- the header, by hand ---------------------------------------------------------


def test_crc32c_is_castagnoli():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


def test_header_matches_hand_computed_bytes():
    # One record: null key, value b"v", no headers; its body is 7 bytes, so its
    # length varint is zigzag(7) = 14.
    record = bytes([
        0x0E,  # length 7
        0x00,  # attributes
        0x00,  # timestampDelta 0
        0x00,  # offsetDelta 0
        0x01,  # keyLength -1: null
        0x02, 0x76,  # valueLength 1, "v"
        0x00,  # headerCount 0
    ])
    crc_range = bytes.fromhex(
        "0010"  # attributes: transactional, no compression, CreateTime
        "00000000"  # lastOffsetDelta 0
        "00000000000003e8"  # baseTimestamp 1000
        "00000000000003e8"  # maxTimestamp 1000
        "0000000000000007"  # producerId 7
        "0003"  # producerEpoch 3
        "00000005"  # baseSequence 5
        "00000001"  # recordCount 1
    ) + record
    crc = crc32c.crc32c(crc_range)
    expected_bytes = bytes.fromhex(
        "000000000000002a"  # baseOffset 42
        "00000039"  # batchLength 57 = 49 header bytes after it + 8 record bytes
        "00000009"  # partitionLeaderEpoch 9
        "02"  # magic
    ) + crc.to_bytes(4, "big") + crc_range
    assert len(expected_bytes) == HEADER_SIZE + len(record)

    built = build_batch([(None, b"v", [], 1000)], base_offset=42, producer_id=7,
                        producer_epoch=3, base_sequence=5, transactional=True,
                        partition_leader_epoch=9)
    assert built == expected_bytes

    header = parse_header(b"junk" + expected_bytes, 4)
    assert header == BatchHeader(
        base_offset=42, batch_length=57, partition_leader_epoch=9, magic=2, crc=crc,
        attributes=0x10, last_offset_delta=0, base_timestamp=1000, max_timestamp=1000,
        producer_id=7, producer_epoch=3, base_sequence=5, record_count=1)
    assert header.is_transactional and not header.is_control
    assert header.compression == NONE and header.timestamp_type == 0
    assert not header.has_delete_horizon
    assert header.last_offset == 42 and header.size == len(expected_bytes)


def test_parse_header_refuses_short_buffers_bad_magic_and_bad_fields():
    batch = bytearray(build_batch(SAMPLE))
    with pytest.raises(DecodeError):
        parse_header(batch[:HEADER_SIZE - 1])
    with pytest.raises(DecodeError):
        parse_header(batch, len(batch) - HEADER_SIZE + 1)
    with pytest.raises(DecodeError):
        parse_header(batch, -1)
    for magic in (0, 1, 3, 0xFF):
        legacy = bytearray(batch)
        legacy[16] = magic
        with pytest.raises(DecodeError, match="magic"):
            parse_header(legacy)
    short = bytearray(batch)
    short[8:12] = (48).to_bytes(4, "big")
    with pytest.raises(DecodeError):
        parse_header(short)
    negative_count = bytearray(batch)
    negative_count[57:61] = (-1).to_bytes(4, "big", signed=True)
    with pytest.raises(DecodeError):
        parse_header(negative_count)


# --- walking a records field -------------------------------------------------------


def test_iter_batches_yields_each_batch_and_reports_a_partial_tail():
    batches = [build_batch(SAMPLE, compression=codec, base_offset=10 * codec) for codec in CODECS]
    whole = b"".join(batches)
    walker = iter_batches(whole)
    seen = list(walker)
    assert [bytes(view) for _, view in seen] == batches
    assert [header.base_offset for header, _ in seen] == [0, 10, 20, 30, 40]
    assert walker.remaining == 0

    tail = batches[0]
    for cut in range(len(tail)):
        walker = iter_batches(whole + tail[:cut])
        assert len(list(walker)) == len(batches)
        assert walker.remaining == cut


def test_iter_batches_refuses_a_complete_legacy_or_undersized_batch():
    legacy = bytearray(build_batch(SAMPLE))
    legacy[16] = 1
    with pytest.raises(DecodeError, match="magic"):
        list(iter_batches(build_batch(SAMPLE) + bytes(legacy)))
    undersized = bytearray(build_batch(SAMPLE))
    undersized[8:12] = (10).to_bytes(4, "big")
    with pytest.raises(DecodeError):
        list(iter_batches(bytes(undersized[:20])))


# --- CRC and in-place patching -------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_every_corruption_in_the_crc_range_is_detected(codec):
    batch = build_batch(SAMPLE, compression=codec)
    for at in range(17, len(batch)):  # the CRC itself, then everything it covers
        corrupt = bytearray(batch)
        corrupt[at] ^= 0x04
        assert not has_valid_crc(corrupt)
        with pytest.raises(DecodeError):
            decode_batch(corrupt, MiB)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_patching_base_offset_and_leader_epoch_keeps_the_crc_valid(codec):
    batch = bytearray(build_batch(SAMPLE, compression=codec))
    set_base_offset(batch, 1_000_000)
    set_partition_leader_epoch(batch, 77)
    assert has_valid_crc(batch)
    header = parse_header(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 77)
    assert observed(decode_batch(batch, MiB)) == expected(SAMPLE, 1_000_000)

    # In place inside a larger buffer, as a broker patches a produce request.
    request = bytearray(b"prefix") + batch
    view = memoryview(request)[6:]
    set_base_offset(view, 5)
    assert has_valid_crc(view)
    assert parse_header(request, 6).base_offset == 5


def test_patching_rejects_out_of_range_values():
    batch = bytearray(build_batch(SAMPLE))
    with pytest.raises(EncodeError):
        set_base_offset(batch, 2 ** 63)
    with pytest.raises(EncodeError):
        set_partition_leader_epoch(batch, 2 ** 31)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_log_append_time_overrides_record_timestamps(codec):
    batch = bytearray(build_batch(SAMPLE, compression=codec))
    set_log_append_time(batch, 1_800_000_000_000)
    assert has_valid_crc(batch)
    header = parse_header(batch)
    assert header.timestamp_type == LOG_APPEND_TIME
    assert header.max_timestamp == 1_800_000_000_000
    assert header.compression == codec
    assert {r.timestamp for r in decode_batch(batch, MiB)} == {1_800_000_000_000}

    built = build_batch(SAMPLE, compression=codec, log_append_time=1_800_000_000_000)
    assert built == bytes(batch)


# --- control batches -------------------------------------------------------------------


@pytest.mark.parametrize("kind", [CONTROL_ABORT, CONTROL_COMMIT])
def test_control_batch_round_trip(kind):
    batch = build_control_batch(kind, producer_id=4242, producer_epoch=3, coordinator_epoch=17,
                                timestamp=1234, base_offset=99, partition_leader_epoch=5)
    header = parse_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, -1)
    assert (header.base_offset, header.partition_leader_epoch) == (99, 5)
    [record] = decode_batch(batch, MiB)
    assert (record.offset, record.timestamp) == (99, 1234)
    assert decode_control_record(record) == ControlRecord(type=kind, version=0, coordinator_epoch=17)


def test_control_record_decoding_refuses_short_keys_and_values():
    def record(key, value):
        return decode_batch(build_batch([(key, value, [], 0)]), MiB)[0]

    assert decode_control_record(record(b"\x00\x00\x00\x02", None)) == ControlRecord(2, 0, None)
    assert decode_control_record(record(b"\x00\x01\x00\x01", b"\x00\x01\x00\x00\x00\x09\xff")) \
        == ControlRecord(CONTROL_COMMIT, 1, 9)
    for key, value in [(None, None), (b"\x00\x00\x00", None), (b"\xff\xff\x00\x01", b"\x00" * 6),
                       (b"\x00\x00\x00\x01", None), (b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x01")]:
        with pytest.raises(DecodeError):
            decode_control_record(record(key, value))


def test_build_control_batch_refuses_other_kinds():
    with pytest.raises(EncodeError):
        build_control_batch(2, 1, 0, 0, 0)
    with pytest.raises(EncodeError):
        build_control_batch(CONTROL_COMMIT, 1, 0, 2 ** 31, 0)


# --- interoperability with kafka-python --------------------------------------------------


def kafka_python_records():
    default_records = pytest.importorskip("kafka.record.default_records")
    return default_records


def require_kafka_python_codec(codec):
    kafka_codec = pytest.importorskip("kafka.codec")
    available = {NONE: True, GZIP: kafka_codec.has_gzip(), SNAPPY: kafka_codec.has_snappy(),
                 LZ4: kafka_codec.has_lz4(), ZSTD: kafka_codec.has_zstd()}
    if not available[codec]:
        needs = {SNAPPY: "python-snappy", LZ4: "lz4", ZSTD: "zstandard"}[codec]
        pytest.skip(f"kafka-python needs the {needs} package for this codec; it is not installed")


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_decodes_batches_built_by_kafka_python(codec):
    default_records = kafka_python_records()
    require_kafka_python_codec(codec)
    builder = default_records.DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=MiB)
    for offset, (key, value, headers, timestamp) in enumerate(SAMPLE):
        builder.append(offset, timestamp=timestamp, key=key, value=value, headers=headers)
    batch = bytes(builder.build())
    assert parse_header(batch).compression == codec  # SAMPLE compresses well, so it was
    assert has_valid_crc(batch)
    assert observed(decode_batch(batch, MiB)) == expected(SAMPLE)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_decodes_our_batches(codec):
    default_records = kafka_python_records()
    require_kafka_python_codec(codec)
    batch = default_records.DefaultRecordBatch(build_batch(SAMPLE, compression=codec, base_offset=3))
    assert batch.validate_crc()
    assert batch.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(map(tuple, r.headers))) for r in batch]
    assert got == expected(SAMPLE, 3)


def test_kafka_python_decodes_our_control_batch():
    default_records = kafka_python_records()
    batch = default_records.DefaultRecordBatch(
        build_control_batch(CONTROL_COMMIT, 11, 2, 5, 1000, base_offset=8))
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    [record] = list(batch)
    assert (record.offset, record.type, record.version) == (8, CONTROL_COMMIT, 0)


# --- compression formats --------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_decompress_enforces_max_size_exactly(codec):
    data = b"records " * 40_000  # compresses far beyond the first output guess
    packed = compress(codec, data)
    assert decompress(codec, packed, len(data)) == data
    assert decompress(codec, memoryview(b"xx" + packed)[2:], len(data)) == data
    with pytest.raises(DecodeError, match="exceeds"):
        decompress(codec, packed, len(data) - 1)
    assert decompress(codec, compress(codec, b""), 0) == b""


def test_unknown_codecs_are_refused():
    for codec in (5, 6, 7, -1, 256):
        with pytest.raises(DecodeError):
            decompress(codec, b"data", MiB)
        with pytest.raises(EncodeError):
            compress(codec, b"data")
    for codec in (5, 6, 7):
        with pytest.raises(DecodeError):
            decode_batch(batch_with_body(record_section(), 1, codec), MiB)


def test_snappy_writes_xerial_framing_and_reads_both_framings():
    data = bytes(range(256)) * 400  # 102400 bytes: four 32 KiB xerial blocks
    packed = compress(SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + b"\x00\x00\x00\x01" + b"\x00\x00\x00\x01"
    pos, blocks = 16, []
    while pos < len(packed):
        size = int.from_bytes(packed[pos:pos + 4], "big")
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 4096]
    assert b"".join(blocks) == data
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka's framing
    assert decompress(SNAPPY, raw, len(data)) == data
    with pytest.raises(DecodeError, match="exceeds"):
        decompress(SNAPPY, raw, len(data) - 1)


def test_lz4_writes_frames_kafkas_java_reader_accepts():
    packed = compress(LZ4, b"abc" * 100_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"
    flags = packed[4]
    assert flags >> 6 == 1  # frame format version
    assert flags & 0x20  # independent blocks: Java refuses linked ones
    assert not flags & 0x04  # no content checksum, which old Java readers lack
    assert decompress(LZ4, packed, 300_000) == b"abc" * 100_000


def test_gzip_accepts_several_members_and_refuses_truncation_and_trailing_garbage():
    packed = compress(GZIP, b"first ") + compress(GZIP, b"second")
    assert decompress(GZIP, packed, 100) == b"first second"
    with pytest.raises(DecodeError, match="exceeds"):
        decompress(GZIP, packed, 11)
    with pytest.raises(DecodeError):
        decompress(GZIP, packed[:-1], 100)
    with pytest.raises(DecodeError):
        decompress(GZIP, packed + b"garbage!", 100)


def test_decompress_refuses_a_negative_limit():
    with pytest.raises(ValueError):
        decompress(GZIP, compress(GZIP, b"x"), -1)


# --- malformed input only ever raises DecodeError ------------------------------------------------


MAGIC_PREFIXES = [b"", b"\x1f\x8b\x08\x00", b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
                  b"\x04\x22\x4d\x18", b"\x28\xb5\x2f\xfd"]


def decodes_or_refuses(call, *args):
    try:
        call(*args)
    except DecodeError:
        pass


@settings(max_examples=1000, deadline=None)
@given(data=st.binary(max_size=200), prefix=st.sampled_from(MAGIC_PREFIXES),
       codec=st.sampled_from(CODECS + [5]))
def test_random_bytes_to_decompress(data, prefix, codec):
    decodes_or_refuses(decompress, codec, prefix + data, 4096)


@settings(max_examples=1000, deadline=None)
@given(data=st.binary(max_size=300))
def test_random_bytes_as_batches(data):
    decodes_or_refuses(lambda: list(iter_batches(data)))
    decodes_or_refuses(parse_header, data)
    decodes_or_refuses(has_valid_crc, data)
    decodes_or_refuses(decode_batch, data, 4096)
    # Past the magic and length checks, so the CRC and record decoding get exercised.
    forged = struct.pack(">qiib", 0, len(data) + 4, 0, 2) + data
    decodes_or_refuses(decode_batch, forged, 4096)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_every_truncation_of_a_batch(codec):
    batch = build_batch(SAMPLE, compression=codec)
    for cut in range(len(batch)):
        prefix = batch[:cut]
        walker = iter_batches(prefix)
        assert list(walker) == [] and walker.remaining == cut
        with pytest.raises(DecodeError):
            decode_batch(prefix, MiB)
        with pytest.raises(DecodeError):
            has_valid_crc(prefix)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_every_truncation_of_a_records_section_behind_a_valid_crc(codec):
    section = build_batch(SAMPLE)[HEADER_SIZE:]
    for cut in range(len(section)):
        with pytest.raises(DecodeError):
            decode_batch(batch_around(section[:cut], len(SAMPLE), codec), MiB)
    with pytest.raises(DecodeError, match="after the last"):
        decode_batch(batch_around(section + b"\x00", len(SAMPLE), codec), MiB)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 100])
@pytest.mark.parametrize("codec", [NONE, ZSTD], ids=["none", "zstd"])
def test_decoding_in_chunks_is_decoding_whole(codec, chunk):
    section = build_batch(SAMPLE)[HEADER_SIZE:]
    batch = batch_around(section, len(SAMPLE), codec)
    chunks = list(decode_batch_in_chunks(batch, MiB, chunk))
    assert [len(c) for c in chunks] == [min(chunk, len(SAMPLE) - i) for i in range(0, len(SAMPLE), chunk)]
    assert [r for c in chunks for r in c] == decode_batch(batch, MiB)
    with pytest.raises(DecodeError, match="after the last"):
        list(decode_batch_in_chunks(batch_around(section + b"\x00", len(SAMPLE), codec), MiB, chunk))
    with pytest.raises(DecodeError):
        list(decode_batch_in_chunks(batch_around(section[:-3], len(SAMPLE), codec), MiB, chunk))
    assert list(decode_batch_in_chunks(batch_around(b"", 0, codec), MiB, chunk)) == []


def test_encode_record_is_the_c_encoders_format_and_keeps_offset_gaps():
    batch = build_batch(SAMPLE)
    records = decode_batch(batch, MiB)
    base_timestamp = SAMPLE[0][3]
    consecutive = b"".join(encode_record(r, i, r.timestamp - base_timestamp) for i, r in enumerate(records))
    assert consecutive == batch[HEADER_SIZE:]
    deltas = [0, 7, 8, 2 ** 31 - 1]  # a cleaned batch's records: offsets with gaps
    gapped = b"".join(encode_record(r, delta, r.timestamp) for r, delta in zip(records, deltas))
    decoded = decode_batch(batch_around(gapped, len(records)), MiB)  # base offset and timestamp 0
    assert [r.offset for r in decoded] == deltas
    assert [r._replace(offset=0) for r in decoded] == [r._replace(offset=0) for r in records]


HUGE = [2 ** 31 - 1, 2 ** 20, 100, -2, -(2 ** 31)]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
@pytest.mark.parametrize("forged", HUGE)
@pytest.mark.parametrize("field", ["length", "key_length", "value_length", "header_count",
                                   "header_key_length", "header_value_length"])
def test_forged_record_lengths(codec, forged, field):
    [record] = decode_batch(batch_around(record_section(), 1, codec), MiB)
    assert (record.key, record.value, record.headers) == (b"k", b"v", (("h", b"x"),))
    section = record_section(**{field: forged})
    with pytest.raises(DecodeError):
        decode_batch(batch_around(section, 1, codec), MiB)


@pytest.mark.parametrize("count", [0, 1, 3, 2 ** 31 - 1])
def test_forged_record_count(count):
    with pytest.raises(DecodeError):
        decode_batch(batch_around(record_section() * 2, count), MiB)


def test_forged_batch_length():
    batch = bytearray(build_batch(SAMPLE))
    batch[8:12] = (2 ** 31 - 1).to_bytes(4, "big")
    walker = iter_batches(batch)
    assert list(walker) == [] and walker.remaining == len(batch)
    with pytest.raises(DecodeError):
        decode_batch(batch, MiB)
    with pytest.raises(DecodeError):
        has_valid_crc(batch)


def test_overlong_varints_and_bad_utf8_are_refused():
    too_long_length = b"\x80\x80\x80\x80\x80\x01" + record_section()[1:]
    header_key = record_section(headers=[("\u00e9", b"")])
    bad_utf8 = header_key.replace("\u00e9".encode(), b"\xff\xfe")
    for section in (too_long_length, bad_utf8):
        with pytest.raises(DecodeError):
            decode_batch(batch_around(section, 1), MiB)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4),
    deletions=st.lists(st.integers(0, 10_000), max_size=2),
    count_delta=st.integers(-1, 1),
    codec=st.sampled_from(CODECS),
    mangle_compressed=st.booleans(),
)
def test_mutated_records_behind_a_valid_crc(edits, deletions, count_delta, codec, mangle_compressed):
    section = bytearray(build_batch(SAMPLE)[HEADER_SIZE:])
    if mangle_compressed:  # the compressed stream itself rather than the records inside
        section = bytearray(compress(codec, bytes(section)))
    for at, byte in edits:
        section[at % len(section)] = byte
    for at in deletions:
        del section[at % len(section)]
    count = len(SAMPLE) + count_delta
    if mangle_compressed:
        batch = batch_with_body(bytes(section), count, codec)
    else:
        batch = batch_around(bytes(section), count, codec)
    decodes_or_refuses(decode_batch, batch, MiB)


# --- decompression bombs and forged sizes -------------------------------------------------------


def peak_rss_growth(call) -> int:
    """How much the process's peak resident size grew during `call`, in bytes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    call()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024


def streamed_bomb(codec, total):
    """`total` zero bytes compressed chunk by chunk, so the zeros never sit in memory."""
    chunk = bytes(MiB)
    if codec == GZIP:
        compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
        parts = [compressor.compress(chunk) for _ in range(total // MiB)]
        return b"".join(parts) + compressor.flush()
    if codec == LZ4:
        compressor = cramjam.lz4.Compressor(content_checksum=False, block_linked=False)
    else:
        compressor = cramjam.zstd.Compressor(level=1)
    for _ in range(total // MiB):
        compressor.compress(chunk)
    return bytes(compressor.finish())


@pytest.mark.parametrize("codec,total", [(ZSTD, 1 << 30), (LZ4, 1 << 30), (GZIP, 1 << 28)],
                         ids=["zstd-1GiB", "lz4-1GiB", "gzip-256MiB"])
def test_decompression_bombs_are_refused_without_inflating(codec, total):
    bomb = streamed_bomb(codec, total)
    assert len(bomb) < 8 * MiB

    def refuse():
        with pytest.raises(DecodeError, match="exceeds"):
            decompress(codec, bomb, MiB)
        with pytest.raises(DecodeError, match="exceeds"):
            decode_batch(batch_with_body(bomb, 1, codec), MiB)

    assert peak_rss_growth(refuse) < 64 * MiB


def test_snappy_bombs_and_forged_lengths_are_refused():
    # Raw snappy states its length up front: 2**32 - 1 here, over a tiny body.
    forged_raw = b"\xff\xff\xff\xff\x0f" + b"\x00\x61"
    with pytest.raises(DecodeError, match="exceeds"):
        decompress(SNAPPY, forged_raw, MiB)
    # Xerial framing: many blocks of zeros, together far beyond the limit.
    block = bytes(cramjam.snappy.compress_raw(bytes(32 * 1024)))
    xerial = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01" + (
        len(block).to_bytes(4, "big") + block) * 4096  # 128 MiB described
    growth = peak_rss_growth(lambda: pytest.raises(DecodeError, decompress, SNAPPY, xerial, MiB))
    assert growth < 32 * MiB
    # A xerial block length pointing past the end.
    with pytest.raises(DecodeError):
        decompress(SNAPPY, xerial[:16] + (2 ** 31 - 1).to_bytes(4, "big") + block, MiB)


def test_forged_zstd_content_size_is_refused():
    # A single-segment frame claiming 2**40 bytes of content, holding one raw block of 3.
    frame = (b"\x28\xb5\x2f\xfd" + b"\xe0" + (1 << 40).to_bytes(8, "little")
             + b"\x19\x00\x00" + b"abc")
    growth = peak_rss_growth(lambda: pytest.raises(DecodeError, decompress, ZSTD, frame, MiB))
    assert growth < 32 * MiB
    # A plausible 16 MiB claim over the same 3 bytes is refused the same way.
    frame = (b"\x28\xb5\x2f\xfd" + b"\xa0" + (1 << 24).to_bytes(4, "little")
             + b"\x19\x00\x00" + b"abc")
    with pytest.raises(DecodeError):
        decompress(ZSTD, frame, 1024)
