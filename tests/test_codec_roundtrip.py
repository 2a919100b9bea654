"""Property tests: every message, every version, encoded and decoded back.

The bodies are generated from the schemas themselves: `bodies(schema, version)` walks the
`F` tree for that version and draws a value for every field the version carries (ints
over their type's whole range, unicode strings, null where the version allows it, bytes,
records, uuids, arrays, nested structs, tagged fields, plus unknown tagged fields in
flexible versions). For each draw, encode -> decode -> encode must give the same bytes
and decode must give an object equal to the one encoded.

The primitive tests at the end use byte strings written out by hand from the definitions
in Kafka's protocol guide.
"""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wire.messages as messages
from wire import (DecodeError, EncodeError, RequestHeader, ResponseHeader, UnsupportedRequest,
                  decode_request, decode_response, encode_request, encode_response)
from wire.messages import (API_VERSIONS, APIS, CONTROLLED_SHUTDOWN, METADATA, REQUEST_HEADER,
                           RESPONSE_HEADER)
from wire.primitives import ZERO_UUID, Reader, Writer
from wire.protocol import (encode_response_writer, request_header_version,
                           response_header_version)
from wire.schema import Data, F

# -- strategies built from the schema ----------------------------------------------------

INT_RANGES = {
    "int8": (-2**7, 2**7 - 1), "int16": (-2**15, 2**15 - 1), "int32": (-2**31, 2**31 - 1),
    "int64": (-2**63, 2**63 - 1), "uint16": (0, 2**16 - 1), "uint32": (0, 2**32 - 1),
}
MAX_TAG = 2**31 - 1  # tags are unsigned varints that Kafka's clients read into an int


def _large_records(n: int) -> bytes:
    # Above the writer's zero-copy threshold, without drawing thousands of bytes.
    return bytes(i % 251 for i in range(n))


def scalars(kind: str, big_records: bool = True) -> st.SearchStrategy:
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        return st.integers(lo, hi) | st.sampled_from(sorted({lo, hi, 0, max(lo, -1)}))
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return st.uuids() | st.just(ZERO_UUID)
    if kind == "string":
        return st.text(max_size=12)
    if kind == "bytes":
        return st.binary(max_size=16)
    if kind == "records":
        small = st.binary(max_size=24)
        if not big_records:
            return small
        return st.one_of(small, small, small, st.integers(4096, 4300).map(_large_records))
    raise AssertionError(f"unknown primitive {kind}")


_CACHE: dict[tuple, st.SearchStrategy] = {}


def structs(schema, spec: F, version: int, flexible: bool,
            big_records: bool = True) -> st.SearchStrategy:
    """Instances of `spec`'s struct class holding values valid at `version`."""
    key = (id(schema), id(spec), version, flexible, big_records)
    if key in _CACHE:
        return _CACHE[key]
    cls = schema.struct_classes[spec.element_type]
    parts: dict[str, st.SearchStrategy] = {}
    for f in spec.fields:
        if version not in f.versions:
            continue  # absent from this version: keeps its default, as decoding gives
        field_flexible = flexible and (f.flexible is None or version in f.flexible)
        parts[f.name] = fields(schema, f, version, field_flexible, big_records)
    if flexible:
        used = {f.tag for f in spec.fields if f.tag is not None}
        tag = (st.integers(0, 40) | st.integers(0, MAX_TAG)).filter(lambda t: t not in used)
        parts["unknown_tags"] = st.none() | st.dictionaries(tag, st.binary(max_size=6), max_size=3)
    strategy = st.fixed_dictionaries(parts).map(lambda values: cls(**values))
    _CACHE[key] = strategy
    return strategy


def fields(schema, f: F, version: int, flexible: bool, big_records: bool) -> st.SearchStrategy:
    nullable = version in f.nullable
    if f.fields:
        element = structs(schema, f, version, flexible, big_records)
    else:
        element = scalars(f.element_type, big_records)
    strategy = st.lists(element, max_size=3) if f.is_array else element
    if nullable:
        strategy = st.none() | strategy
    return strategy


def bodies(schema, version: int, big_records: bool = True) -> st.SearchStrategy:
    """Arbitrary valid bodies of `schema` (a request, response or Data schema) at `version`."""
    return structs(schema, schema.root, version, version in schema.flexible, big_records)


def request_headers(api, version: int) -> st.SearchStrategy:
    header_version = request_header_version(api.key, version)

    def fix(header):
        header.request_api_key = api.key
        header.request_api_version = version
        return header
    return bodies(REQUEST_HEADER, header_version).map(fix)


def versions_of(schema):
    return range(schema.versions.lo, schema.versions.hi + 1)


DATA_SCHEMAS = [v for v in vars(messages).values() if isinstance(v, Data)]
API_CASES = [pytest.param(api, version, id=f"{api.name}-v{version}")
             for api in sorted(APIS.values(), key=lambda a: a.key) for version in versions_of(api)]
DATA_CASES = [pytest.param(schema, version, id=f"{schema.name}-v{version}")
              for schema in DATA_SCHEMAS for version in versions_of(schema)]

PROPERTY_SETTINGS = settings(
    max_examples=15, derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])


def roundtrip(schema, version: int, obj) -> bytes:
    first = schema.encode(version, obj).getvalue()
    decoded = schema.decode(version, first)
    assert decoded == obj
    second = schema.encode(version, decoded).getvalue()
    assert second == first
    return first


# -- every message, every version ---------------------------------------------------------

@pytest.mark.parametrize("api,version", API_CASES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_request_roundtrip(api, version, data):
    body = data.draw(bodies(api.request, version), label="body")
    body_bytes = roundtrip(api.request, version, body)

    header = data.draw(request_headers(api, version), label="header")
    frame = encode_request(header, body)
    header_version = expected_request_header_version(api, version)
    assert frame == REQUEST_HEADER.encode(header_version, header).getvalue() + body_bytes
    decoded_header, decoded_body = decode_request(frame)
    assert decoded_header == header
    assert decoded_body == body
    assert encode_request(decoded_header, decoded_body) == frame
    assert decode_request(bytearray(frame)) == (header, body)  # any buffer type


@pytest.mark.parametrize("api,version", API_CASES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_response_roundtrip(api, version, data):
    body = data.draw(bodies(api.response, version), label="body")
    body_bytes = roundtrip(api.response, version, body)

    correlation_id = data.draw(scalars("int32"), label="correlation_id")
    frame = encode_response(api.key, version, correlation_id, body)
    header_version = 0 if api is API_VERSIONS else (1 if version in api.flexible else 0)
    header = ResponseHeader(correlation_id=correlation_id)
    assert frame == RESPONSE_HEADER.encode(header_version, header).getvalue() + body_bytes
    chunks = encode_response_writer(api.key, version, correlation_id, body).getchunks()
    assert b"".join(bytes(chunk) for chunk in chunks) == frame
    decoded_header, decoded_body = decode_response(api.key, version, frame)
    assert decoded_header == header
    assert decoded_body == body
    assert encode_response(api.key, version, correlation_id, decoded_body) == frame


@pytest.mark.parametrize("schema,version", DATA_CASES)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_data_roundtrip(schema, version, data):
    roundtrip(schema, version, data.draw(bodies(schema, version), label="body"))


def test_every_message_version_is_covered():
    assert len(API_CASES) == sum(len(versions_of(api)) for api in APIS.values())
    assert {p.values[0].name for p in API_CASES} == {api.name for api in APIS.values()}
    assert {p.values[0].name for p in DATA_CASES} == {schema.name for schema in DATA_SCHEMAS}
    assert len(API_CASES) > 200


def test_tagged_fields_written_in_tag_order_with_unknown_tags_kept():
    """Known and unknown tags are merged in ascending order; defaults are not written."""
    schema = messages.TRANSACTION_LOG_VALUE
    value = schema(producer_id=1, previous_producer_id=7, client_transaction_version=2,
                   unknown_tags={1000: b"\x01\x02", 3: b""})
    data = roundtrip(schema, 1, value)
    #  count  tag 0: int64 7  tag 2: int16 2  tag 3: unknown, empty  tag 1000: unknown
    tags = (b"\x04" + b"\x00\x08" + struct.pack(">q", 7) + b"\x02\x02" + struct.pack(">h", 2)
            + b"\x03\x00" + b"\xe8\x07\x02\x01\x02")
    assert data.endswith(tags)
    # at their defaults tagged fields are left out: an empty tag section
    assert schema.encode(1, schema(producer_id=1)).getvalue().endswith(b"\x00\x00\x00\x00\x00")
    plain = schema.encode(1, schema(producer_id=1, previous_producer_id=-1)).getvalue()
    assert plain == schema.encode(1, schema(producer_id=1)).getvalue()
    # in v0 (not flexible) the same fields do not exist and no tag section is written
    v0 = schema.encode(0, schema(producer_id=1)).getvalue()
    assert len(v0) == len(plain) - 1 + 3  # classic INT32 array length vs compact, no tags


def test_unknown_tag_colliding_with_a_known_tag_is_refused():
    """An unknown tag that the schema knows at this version (say, kept from decoding another
    version) would be read back as the known field: silently different data. Refused."""
    schema = messages.TRANSACTION_LOG_VALUE
    clash = schema(producer_id=1, unknown_tags={0: struct.pack(">q", 5)})
    with pytest.raises(EncodeError):
        schema.encode(1, clash)
    with pytest.raises(EncodeError):
        schema.encode(1, schema(producer_id=1, previous_producer_id=3, unknown_tags={0: b""}))
    # tag 0 is unknown to the nested FetchPartition before v17 and known from v17 on
    part = messages.FETCH.request.FetchPartition(unknown_tags={0: b"\x01" * 16})
    body = messages.FETCH.request(topics=[messages.FETCH.request.FetchTopic(partitions=[part])])
    roundtrip(messages.FETCH.request, 16, body)
    with pytest.raises(EncodeError):
        messages.FETCH.request.encode(17, body)


# -- the request/response facade -------------------------------------------------------------

def expected_request_header_version(api, version: int) -> int:
    """v2 for flexible versions, v1 otherwise; ControlledShutdown v0 alone uses v0 (Kafka's
    RequestHeader.json: "Version 0 of the RequestHeader is only used by v0 of
    ControlledShutdownRequest")."""
    if api is CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 2 if version in api.flexible else 1


@pytest.mark.parametrize("api", sorted(APIS.values(), key=lambda a: a.key), ids=lambda a: a.name)
def test_header_versions(api):
    for version in versions_of(api):
        flexible = version in api.flexible
        assert request_header_version(api.key, version) == expected_request_header_version(api, version)
        expected = 0 if api is API_VERSIONS else (1 if flexible else 0)
        assert response_header_version(api.key, version) == expected


def test_api_versions_response_always_uses_header_v0():
    api = API_VERSIONS
    body = api.response(error_code=0, throttle_time_ms=0, api_keys=[
        api.response.ApiVersion(api_key=18, min_version=0, max_version=4)])
    for version in versions_of(api):
        assert response_header_version(api.key, version) == 0
        frame = encode_response(api.key, version, 7, body)
        # correlation id, then straight into the body: no tagged-field byte after it
        assert frame[:6] == b"\x00\x00\x00\x07\x00\x00"
        assert decode_response(api.key, version, frame)[1] == body
    # v3 in full: compact array of one entry, each struct and the body end in tag sections
    assert encode_response(api.key, 3, 7, body) == (
        b"\x00\x00\x00\x07" b"\x00\x00" b"\x02" b"\x00\x12\x00\x00\x00\x04\x00"
        b"\x00\x00\x00\x00" b"\x00")
    # a version newer than the codec knows still gets header v0
    assert response_header_version(api.key, api.versions.hi + 1) == 0
    # while other flexible responses get header v1: correlation id + empty tag section
    assert encode_response(METADATA.key, 9, 7, METADATA.response()).startswith(
        b"\x00\x00\x00\x07\x00")


def test_flexible_request_header_v2_keeps_client_id_a_classic_string():
    body = API_VERSIONS.request(client_software_name="py", client_software_version="1")
    header = RequestHeader(request_api_key=18, request_api_version=3, correlation_id=5,
                           client_id="ab")
    frame = encode_request(header, body)
    assert frame == (b"\x00\x12\x00\x03\x00\x00\x00\x05"
                     b"\x00\x02ab"      # INT16-length string, not compact, even in v2
                     b"\x00"            # header v2 tag section
                     b"\x03py\x021\x00")  # body: compact strings, tag section
    assert decode_request(frame) == (header, body)
    header.client_id = None
    assert encode_request(header, body)[8:11] == b"\xff\xff\x00"
    assert decode_request(encode_request(header, body))[0].client_id is None
    # non-flexible request: header v1, no tag section
    old = API_VERSIONS.request()
    header = RequestHeader(request_api_key=18, request_api_version=2, correlation_id=5,
                           client_id="")
    assert encode_request(header, old) == b"\x00\x12\x00\x02\x00\x00\x00\x05\x00\x00"


def test_unknown_api_or_version_is_unsupported_with_header():
    frame = b"\x7f\x00\x00\x01\x00\x00\x00\x09\x00\x01x"
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 9 and info.value.header.client_id == "x"
    newest = METADATA.versions.hi + 1
    frame = struct.pack(">hhi", METADATA.key, newest, 11) + b"\xff\xff\x00" + b"\x01\x00"
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 11
    assert isinstance(info.value, DecodeError)


# -- primitives, known bytes from the protocol guide -------------------------------------------

def written(method: str, *args, **kwargs) -> bytes:
    w = Writer()
    getattr(w, method)(*args, **kwargs)
    return w.getvalue()


VARINTS = [  # value, zigzag encoding as an unsigned varint
    (0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (2, b"\x04"),
    (63, b"\x7e"), (-64, b"\x7f"), (64, b"\x80\x01"), (-65, b"\x81\x01"), (300, b"\xd8\x04"),
    (2**31 - 1, b"\xfe\xff\xff\xff\x0f"), (-2**31, b"\xff\xff\xff\xff\x0f"),
]
VARLONGS = VARINTS + [
    (2**31, b"\x80\x80\x80\x80\x10"), (-2**31 - 1, b"\x81\x80\x80\x80\x10"),
    (2**63 - 1, b"\xfe" + b"\xff" * 8 + b"\x01"), (-2**63, b"\xff" * 9 + b"\x01"),
]


@pytest.mark.parametrize("value,encoded", VARINTS)
def test_varint_known_bytes(value, encoded):
    assert written("varint", value) == encoded
    r = Reader(encoded)
    assert r.varint() == value and r.remaining == 0


@pytest.mark.parametrize("value,encoded", VARLONGS)
def test_varlong_known_bytes(value, encoded):
    assert written("varlong", value) == encoded
    r = Reader(encoded)
    assert r.varlong() == value and r.remaining == 0


def test_varint_out_of_range():
    for value in (2**31, -2**31 - 1):
        with pytest.raises(EncodeError):
            written("varint", value)
    for value in (2**63, -2**63 - 1):
        with pytest.raises(EncodeError):
            written("varlong", value)
    with pytest.raises(EncodeError):
        written("uvarint", -1)


def test_unsigned_varint_known_bytes_and_overlong_rejected():
    for value, encoded in [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"),
                           (300, b"\xac\x02"), (2**32 - 1, b"\xff\xff\xff\xff\x0f")]:
        assert written("uvarint", value) == encoded
        assert Reader(encoded).uvarint() == value
    bad = [
        b"\x80\x80\x80\x80\x80\x00",   # six bytes: longer than any 32-bit value needs
        b"\xff\xff\xff\xff\x1f",       # five bytes, but 33 bits
        b"\xff\xff\xff\xff\xff\x01",   # six bytes
        b"\x80", b"",                  # truncated
    ]
    for data in bad:
        with pytest.raises(DecodeError):
            Reader(data).uvarint()
        with pytest.raises(DecodeError):
            Reader(data).varint()
    with pytest.raises(DecodeError):
        Reader(b"\x80" * 10 + b"\x00").varlong()   # eleven bytes
    with pytest.raises(DecodeError):
        Reader(b"\xff" * 9 + b"\x03").varlong()    # ten bytes, 65 bits
    assert Reader(b"\xff" * 9 + b"\x01").varlong() == -2**63


def test_strings_known_bytes():
    # STRING: INT16 length; NULLABLE_STRING: -1 for null
    assert written("string", "") == b"\x00\x00"
    assert written("string", "abc") == b"\x00\x03abc"
    assert written("string", None, nullable=True) == b"\xff\xff"
    assert written("string", "\u00e9") == b"\x00\x02\xc3\xa9"  # length in UTF-8 bytes
    # COMPACT_STRING: UNSIGNED_VARINT length + 1; COMPACT_NULLABLE_STRING: 0 for null
    assert written("string", "", compact=True) == b"\x01"
    assert written("string", "abc", compact=True) == b"\x04abc"
    assert written("string", None, compact=True, nullable=True) == b"\x00"
    assert Reader(b"\x00").string(compact=True, nullable=True) is None
    assert Reader(b"\x01").string(compact=True, nullable=True) == ""
    assert Reader(b"\x01").string(compact=True) == ""
    assert Reader(b"\xff\xff").string(nullable=True) is None
    assert Reader(b"\x00\x00").string(nullable=True) == ""
    with pytest.raises(DecodeError):
        Reader(b"\x00").string(compact=True)        # null where null is not allowed
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff").string()
    with pytest.raises(DecodeError):
        Reader(b"\xff\xfe").string(nullable=True)   # -2 is no valid length
    with pytest.raises(DecodeError):
        Reader(b"\x00\x01\xff").string()            # not UTF-8
    with pytest.raises(EncodeError):
        written("string", None)
    with pytest.raises(EncodeError):
        written("string", "x" * 0x8000)
    # STRING lengths are INT16, so no string exceeds 32767 bytes; a compact length can
    # claim more, and is refused like Kafka's generated readers do
    assert Reader(written("string", "x" * 0x7FFF, compact=True)).string(compact=True) == "x" * 0x7FFF
    for claimed in (0x8000, 0x10000):
        data = written("uvarint", claimed + 1) + b"x" * claimed
        with pytest.raises(DecodeError):
            Reader(data).string(compact=True)
        with pytest.raises(DecodeError):
            Reader(data).string(compact=True, nullable=True)


def test_bytes_and_arrays_known_bytes():
    assert written("bytes", b"") == b"\x00\x00\x00\x00"
    assert written("bytes", b"\x01\x02") == b"\x00\x00\x00\x02\x01\x02"
    assert written("bytes", None, nullable=True) == b"\xff\xff\xff\xff"
    assert written("bytes", b"", compact=True) == b"\x01"
    assert written("bytes", None, compact=True, nullable=True) == b"\x00"
    assert bytes(Reader(b"\x03ab").bytes(compact=True)) == b"ab"
    assert Reader(b"\x00").bytes(compact=True, nullable=True) is None
    assert written("array_length", 0) == b"\x00\x00\x00\x00"
    assert written("array_length", None, nullable=True) == b"\xff\xff\xff\xff"
    assert written("array_length", 0, compact=True) == b"\x01"
    assert written("array_length", None, compact=True, nullable=True) == b"\x00"
    assert Reader(b"\x00").array_length(compact=True, nullable=True) is None
    assert Reader(b"\x01").array_length(compact=True) == 0
    with pytest.raises(DecodeError):
        Reader(b"\x00").array_length(compact=True)
    with pytest.raises(DecodeError):
        Reader(b"\xff\xff\xff\xff").bytes()


def test_fixed_width_known_bytes():
    assert written("int8", -1) == b"\xff"
    assert written("int16", 0x1234) == b"\x12\x34"
    assert written("int32", -2) == b"\xff\xff\xff\xfe"
    assert written("int64", 1) == b"\x00" * 7 + b"\x01"
    assert written("uint16", 65535) == b"\xff\xff"
    assert written("uint32", 2**32 - 1) == b"\xff\xff\xff\xff"
    assert written("float64", 1.0) == b"\x3f\xf0" + b"\x00" * 6
    assert written("bool", True) == b"\x01" and written("bool", False) == b"\x00"
    u = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
    assert written("uuid", u) == bytes.fromhex("00112233445566778899aabbccddeeff")
    assert Reader(bytes.fromhex("00112233445566778899aabbccddeeff")).uuid() == u
    with pytest.raises(DecodeError):
        Reader(b"\x02").bool()
    for method, value in [("int8", 128), ("int16", -2**15 - 1), ("int32", 2**31),
                          ("uint16", -1), ("uint32", 2**32)]:
        with pytest.raises(EncodeError):
            written(method, value)


def test_values_that_do_not_fit_packed_fields_are_refused_by_name():
    """Consecutive fixed-width fields are packed by one struct call; a value that does
    not fit still gets the EncodeError of its own type, never a struct.error, and so
    does an item of an array of numbers."""
    Partition = messages.METADATA.response.MetadataResponsePartition

    def body(**overrides):
        fields = dict(error_code=0, partition_index=0, leader_id=1, leader_epoch=0,
                      replica_nodes=[1], isr_nodes=[1], offline_replicas=[])
        fields.update(overrides)
        topic = messages.METADATA.response.MetadataResponseTopic(name="t", partitions=[Partition(**fields)])
        return messages.METADATA.response(topics=[topic])

    roundtrip(messages.METADATA.response, 12, body())
    for bad in (dict(partition_index=2**31), dict(leader_id=None), dict(error_code=-2**15 - 1),
                dict(leader_epoch="0"), dict(replica_nodes=[1, 2**31]), dict(isr_nodes=[None])):
        with pytest.raises(EncodeError, match="fit|int|not"):
            messages.METADATA.response.encode(12, body(**bad))
    with pytest.raises(TypeError, match="leader"):
        Partition(leaderid=1)


def test_encoded_part_is_written_verbatim_only_where_it_fits():
    """A nested struct encoded once (`encode_part`) stands in for the struct in later
    messages of the same version, giving the same bytes; at another version (or as another
    struct) it is refused, never written in the wrong layout."""
    resp = messages.METADATA.response
    topic = resp.MetadataResponseTopic(name="t", topic_id=uuid.uuid4(), partitions=[
        resp.MetadataResponsePartition(partition_index=p, leader_id=1, replica_nodes=[1],
                                       isr_nodes=[1]) for p in range(3)])
    for version in (0, 1, 9, 12):
        direct = resp.encode(version, resp(topics=[topic])).getvalue()
        encoded = resp.encode_part(version, topic)
        assert resp.encode(version, resp(topics=[encoded, encoded])).getvalue() == \
            resp.encode(version, resp(topics=[topic, topic])).getvalue()
        assert resp.encode(version, resp(topics=[encoded])).getvalue() == direct
        assert resp.decode(version, direct).topics[0].name == "t"
    early = resp.encode_part(8, topic)
    for refused in (resp(topics=[early]), resp(brokers=[resp.encode_part(12, topic)])):
        with pytest.raises(EncodeError, match="expected"):
            resp.encode(12, refused)
    with pytest.raises(EncodeError, match="no nested struct"):
        resp.encode_part(12, messages.PRODUCE.request.TopicProduceData(name="t"))
