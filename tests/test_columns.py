"""The C columnar decoder agrees with the record-by-record decoder, and fails safely."""

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.columns import decode_batch_columns
from wire.primitives import DecodeError
from wire.records import build_batch, decode_batch

blobs = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
records = st.lists(st.tuples(blobs, blobs, headers, st.integers(0, 2**41)), min_size=1, max_size=40)


def column(offsets: bytes, data: bytes, validity: bytes, n: int) -> list:
    ends = array("i", offsets)
    return [data[ends[i]:ends[i + 1]] if validity[i >> 3] >> (i & 7) & 1 else None for i in range(n)]


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(records, st.integers(0, 2**40), st.sampled_from([0, 1, 2, 3, 4]), st.booleans())
def test_columns_match_records(rows, base_offset, codec, log_append_time):
    batch = build_batch(rows, base_offset=base_offset, compression=codec,
                        log_append_time=1_700_000_000_000 if log_append_time else None)
    expected = decode_batch(batch, 1 << 24)
    got = decode_batch_columns(batch, 1 << 24, with_headers=True)
    n = got.count
    assert n == len(expected)
    assert list(array("q", got.offsets)) == [r.offset for r in expected]
    assert list(array("q", got.timestamps_us)) == [r.timestamp * 1000 for r in expected]
    assert column(got.key_offsets, got.key_data, got.key_validity, n) == [r.key for r in expected]
    assert column(got.value_offsets, got.value_data, got.value_validity, n) == [r.value for r in expected]
    h = got.header_count
    keys = column(got.header_key_offsets, got.header_key_data, b"\xff" * (h // 8 + 1), h)
    values = column(got.header_value_offsets, got.header_value_data, got.header_value_validity, h)
    ends = array("i", got.header_offsets)
    flat = list(zip([k.decode() for k in keys], values))
    assert [tuple(flat[ends[i]:ends[i + 1]]) for i in range(n)] == [tuple(r.headers) for r in expected]


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(records, st.data())
def test_corrupted_records_raise_decode_error_only(rows, data):
    batch = bytearray(build_batch(rows))
    body = bytes(batch[61:])
    cut = data.draw(st.integers(0, len(body)))
    flip = data.draw(st.integers(0, max(len(body) - 1, 0)))
    mutated = bytearray(body[:cut])
    if mutated:
        mutated[min(flip, len(mutated) - 1)] ^= data.draw(st.integers(1, 255))
    count = data.draw(st.sampled_from([len(rows), len(rows) + 1, 2**31 - 1, 0]))
    from wire._columns import decode_columns
    try:
        decode_columns(bytes(mutated), count, 0, 0, True)
    except ValueError:
        pass


def test_forged_count_is_refused_without_allocating():
    from wire._columns import decode_columns
    with pytest.raises(ValueError):
        decode_columns(b"\x00" * 16, 2**40, 0, 0, False)


def test_bad_crc_is_a_decode_error():
    batch = bytearray(build_batch([(b"k", b"v", [], 1)]))
    batch[-1] ^= 1
    with pytest.raises(DecodeError):
        decode_batch_columns(batch, 1 << 20, False)
