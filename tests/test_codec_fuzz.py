"""Fuzzing the decoders: whatever the bytes, the only exception is `wire.DecodeError`.

Inputs: random bytes; every truncation of valid encodings; single-byte mutations; and
forged lengths (array, string and bytes lengths replaced by huge or invalid values) at
every length position of valid encodings. Every API version (requests through
`decode_request`, responses through `decode_response`) and every Data schema version is
covered. A frame that claims a 2**31-1 element array in a few bytes must fail at once,
without allocating for the claimed size.
"""

from __future__ import annotations

import struct
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire import (DecodeError, UnsupportedRequest, decode_request, decode_response,
                  encode_request, encode_response)
from wire.messages import APIS, FETCH, METADATA, PRODUCE, REQUEST_HEADER, RESPONSE_HEADER
from wire.primitives import Reader, Writer
from wire.protocol import ResponseHeader, request_header_version, response_header_version

try:
    from test_codec_roundtrip import (API_CASES, DATA_CASES, bodies, request_headers, scalars,
                                      versions_of)
except ImportError:  # collected with an import mode that does not put tests/ on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_codec_roundtrip import (API_CASES, DATA_CASES, bodies, request_headers, scalars,
                                      versions_of)

FUZZ_SETTINGS = settings(
    max_examples=6, derandomize=True, database=None, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.filter_too_much])


# -- a decoder under test: one message kind at one version ----------------------------------

class Target:
    """Encode/decode for a request frame, a response frame or a Data schema at a version."""

    def __init__(self, kind: str, schema_or_api, version: int):
        self.kind, self.version = kind, version
        self.api = schema_or_api if kind != "data" else None
        self.schema = {"request": lambda a: a.request, "response": lambda a: a.response,
                       "data": lambda s: s}[kind](schema_or_api)

    def draw(self, data) -> tuple:
        """A random valid message: (header or None, body)."""
        body = data.draw(bodies(self.schema, self.version, big_records=False), label="body")
        if self.kind == "request":
            return data.draw(request_headers(self.api, self.version), label="header"), body
        if self.kind == "response":
            return data.draw(scalars("int32"), label="correlation_id"), body
        return None, body

    def encode(self, message, writer: Writer | None = None) -> bytes:
        header, body = message
        writer = Writer() if writer is None else writer
        if self.kind == "request":
            REQUEST_HEADER.encode(request_header_version(self.api.key, self.version), header,
                                  writer)
        elif self.kind == "response":
            RESPONSE_HEADER.encode(response_header_version(self.api.key, self.version),
                                   ResponseHeader(correlation_id=header), writer)
        self.schema.encode(self.version, body, writer)
        return writer.getvalue()

    def decode(self, frame):
        """The decoded message, with DecodeError the only exception let through."""
        try:
            if self.kind == "request":
                header, body = decode_request(frame)
                return header, body
            if self.kind == "response":
                header, body = decode_response(self.api.key, self.version, frame)
                return header.correlation_id, body
            return None, self.schema.decode(self.version, frame)
        except DecodeError:
            raise
        except Exception as exc:  # pragma: no cover - the failure being tested for
            raise AssertionError(f"{self} raised {type(exc).__name__}: {exc} "
                                 f"on {bytes(frame)!r}") from exc

    def reencode(self, message) -> bytes:
        if self.kind == "request":
            return encode_request(*message)
        if self.kind == "response":
            return encode_response(self.api.key, self.version, message[0], message[1])
        return self.schema.encode(self.version, message[1]).getvalue()

    def __repr__(self) -> str:
        return f"{self.schema.name} v{self.version}"


TARGETS = (
    [pytest.param(Target("request", *p.values), id="request-" + p.id) for p in API_CASES]
    + [pytest.param(Target("response", *p.values), id="response-" + p.id) for p in API_CASES]
    + [pytest.param(Target("data", *p.values), id=p.id) for p in DATA_CASES]
)


def decodes_or_fails_cleanly(target: Target, frame) -> None:
    """Decode `frame`; if it decodes, re-encoding is consistent with what was decoded."""
    try:
        message = target.decode(frame)
    except DecodeError:
        return
    # whatever decodes re-encodes (no EncodeError), to bytes that decode to the same message
    again = target.reencode(message)
    assert target.decode(again) == message


# -- length forging: a Writer that lies about one length -------------------------------------

def _uvarint(n: int) -> bytes:
    w = Writer()
    w.uvarint(n)
    return w.getvalue()


# (compact, wide) -> forged encodings of a length; each must make decoding fail
FORGED = {
    (True, False): [_uvarint(2**32 - 1), _uvarint(2**31), _uvarint(0x8000),
                    b"\x80\x80\x80\x80\x80\x01"],
    (True, True): [_uvarint(2**32 - 1), _uvarint(2**31), b"\x80\x80\x80\x80\x80\x01"],
    (False, False): [struct.pack(">h", 0x7FFF), struct.pack(">h", -2),
                     struct.pack(">h", -0x8000)],
    (False, True): [struct.pack(">i", 2**31 - 1), struct.pack(">i", -2),
                    struct.pack(">i", -2**31)],
}


class ForgingWriter(Writer):
    """Writes like `Writer`, except that the `target`-th length (string, bytes, records or
    array, in writing order) is replaced by `forge(compact, wide)`."""

    def __init__(self, target: int, forge):
        super().__init__()
        self.count, self.target, self.forge, self.forged = 0, target, forge, None

    def _forged(self, compact: bool, wide: bool) -> bool:
        index, self.count = self.count, self.count + 1
        if index != self.target:
            return False
        self.forged = self.forge(compact, wide)
        self.buf += self.forged
        return True

    def string(self, v, compact=False, nullable=False):
        if not self._forged(compact, False):
            super().string(v, compact, nullable)

    def bytes(self, v, compact=False, nullable=False):
        if not self._forged(compact, True):
            super().bytes(v, compact, nullable)

    def array_length(self, n, compact=False, nullable=False):
        if not self._forged(compact, True):  # the elements follow as usual
            super().array_length(n, compact, nullable)


def check_forged_lengths(target: Target, message) -> int:
    """Forge each length of `message` in turn; return how many positions there were."""
    counter = ForgingWriter(-1, None)
    target.encode(message, counter)
    for position in range(counter.count):
        for choice in range(max(map(len, FORGED.values()))):
            def forge(compact, wide, choice=choice):
                options = FORGED[(compact, wide)]
                return options[min(choice, len(options) - 1)]
            writer = ForgingWriter(position, forge)
            frame = target.encode(message, writer)
            assert writer.forged is not None
            with pytest.raises(DecodeError):
                target.decode(frame)
    return counter.count


# -- per message and version -------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_fuzz_valid_encodings(target: Target, data):
    message = target.draw(data)
    frame = target.encode(message)
    assert target.decode(frame) == message

    # every truncation fails: the decoder needs every byte of the full encoding
    for size in range(len(frame)):
        with pytest.raises(DecodeError):
            target.decode(frame[:size])

    # so do trailing bytes
    with pytest.raises(DecodeError):
        target.decode(frame + data.draw(st.binary(min_size=1, max_size=8), label="tail"))

    # single-byte mutations decode cleanly or fail with DecodeError
    mutations = data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                                   min_size=1, max_size=12), label="mutations")
    for position, value in mutations:
        mutated = bytearray(frame)
        mutated[position] = value
        decodes_or_fails_cleanly(target, mutated)

    # random bytes after a valid prefix (the header, or part of the body)
    cut = data.draw(st.integers(0, len(frame)), label="cut")
    decodes_or_fails_cleanly(target, frame[:cut] + data.draw(st.binary(max_size=40), label="junk"))

    check_forged_lengths(target, message)


@pytest.mark.parametrize("target", TARGETS)
@settings(FUZZ_SETTINGS, max_examples=10)
@given(junk=st.binary(max_size=64))
def test_fuzz_random_bytes(target: Target, junk: bytes):
    """Random bytes, and random bytes behind the right API key and version."""
    decodes_or_fails_cleanly(target, junk)
    if target.kind == "request":
        prefix = struct.pack(">hh", target.api.key, target.version)
        decodes_or_fails_cleanly(target, prefix + junk)


def test_every_target_is_fuzzed():
    kinds = {(p.values[0].kind, p.values[0].schema.name, p.values[0].version) for p in TARGETS}
    for api in APIS.values():
        for version in versions_of(api):
            assert ("request", api.request.name, version) in kinds
            assert ("response", api.response.name, version) in kinds


def test_forging_reaches_every_length_kind():
    """The forging writer sees classic and compact strings, bytes, records and arrays."""
    seen = set()

    def remember(compact, wide):
        seen.add((compact, wide))
        return b""

    for version in (4, 12):
        body = FETCH.response(responses=[FETCH.response.FetchableTopicResponse(
            topic="t", partitions=[FETCH.response.PartitionData(records=b"x")])])
        for position in range(8):
            FETCH.response.encode(version, body, ForgingWriter(position, remember))
    assert seen == set(FORGED)


# -- decoders that see any bytes at all --------------------------------------------------------

BROAD_SETTINGS = settings(FUZZ_SETTINGS, max_examples=300)
KNOWN_KEYS = sorted(APIS)


@BROAD_SETTINGS
@given(frame=st.binary(max_size=128))
def test_decode_request_random_frames(frame):
    try:
        decode_request(frame)
    except DecodeError:
        pass


@BROAD_SETTINGS
@given(key=st.sampled_from(KNOWN_KEYS) | st.integers(-2**15, 2**15 - 1),
       version=st.integers(-1, 20) | st.integers(-2**15, 2**15 - 1),
       correlation_id=st.integers(-2**31, 2**31 - 1), rest=st.binary(max_size=96))
def test_decode_request_random_bodies_behind_plausible_headers(key, version, correlation_id,
                                                              rest):
    frame = struct.pack(">hhi", key, version, correlation_id) + rest
    try:
        header, _ = decode_request(frame)
    except UnsupportedRequest as exc:
        assert key not in APIS or version not in APIS[key].versions
        assert exc.header.correlation_id == correlation_id
        return
    except DecodeError:
        return
    assert (header.request_api_key, header.request_api_version) == (key, version)


@BROAD_SETTINGS
@given(key=st.sampled_from(KNOWN_KEYS), data=st.data(), frame=st.binary(max_size=128))
def test_decode_response_random_frames(key, data, frame):
    version = data.draw(st.sampled_from(list(versions_of(APIS[key]))), label="version")
    try:
        decode_response(key, version, frame)
    except DecodeError:
        pass


def test_compact_string_longer_than_int16_is_refused():
    """Decodable means encodable: a compact string over 32767 bytes is a DecodeError, not
    an EncodeError when the decoded request is echoed back."""
    body = APIS[18].request(client_software_name="x" * 0x7FFF, client_software_version="1")
    header = REQUEST_HEADER.cls(request_api_key=18, request_api_version=3, correlation_id=1)
    frame = encode_request(header, body)
    assert decode_request(frame)[1] == body
    longer = frame.replace(b"\x80\x80\x02" + b"x" * 0x7FFF, b"\x81\x80\x02" + b"x" * 0x8000)
    assert len(longer) == len(frame) + 1
    with pytest.raises(DecodeError):
        decode_request(longer)


# -- forged huge lengths fail fast and small ----------------------------------------------------

def _request_frame(api, version: int, body: bytes) -> bytes:
    header = struct.pack(">hhi", api.key, version, 1) + b"\xff\xff"  # null client id
    if request_header_version(api.key, version) == 2:
        header += b"\x00"
    return header + body


HUGE_FRAMES = [
    # Metadata v0: topics, a classic array claiming 2**31-1 elements
    ("request", METADATA, 0, _request_frame(METADATA, 0, b"\x7f\xff\xff\xff" + b"\x00" * 8)),
    # Metadata v12: topics, a compact array claiming 2**31-1 elements (uvarint 2**31)
    ("request", METADATA, 12, _request_frame(METADATA, 12, _uvarint(2**31) + b"\x00" * 8)),
    # ... and compact length 2**32-2 (uvarint 2**32-1), the largest there is
    ("request", METADATA, 12, _request_frame(METADATA, 12, _uvarint(2**32 - 1) + b"\x00" * 8)),
    # Produce v3: transactional id null, acks, timeout, topic_data of 2**31-1
    ("request", PRODUCE, 3, _request_frame(PRODUCE, 3, b"\xff\xff\x00\x01\x00\x00\x00\x10"
                                           + b"\x7f\xff\xff\xff" + b"\x00" * 8)),
    # Produce v3: one topic "t", one partition, records claiming 2**31-1 bytes
    ("request", PRODUCE, 3, _request_frame(PRODUCE, 3, b"\xff\xff\x00\x01\x00\x00\x00\x10"
                                           b"\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01"
                                           b"\x00\x00\x00\x00\x7f\xff\xff\xff" + b"\x00" * 8)),
    # Fetch v12 response: throttle, error, session, responses compact array of 2**31-1
    ("response", FETCH, 12, b"\x00\x00\x00\x01\x00" + b"\x00" * 10 + _uvarint(2**31) + b"\x00" * 4),
    # a tag section claiming 2**32-1 tagged fields, and one claiming a 2**32-1 byte field
    ("response", METADATA, 12, b"\x00\x00\x00\x01" + _uvarint(2**32 - 1) + b"\x00" * 8),
    ("response", METADATA, 12, b"\x00\x00\x00\x01\x01\x05" + _uvarint(2**32 - 1) + b"\x00" * 8),
]


@pytest.mark.parametrize("kind,api,version,frame", HUGE_FRAMES)
def test_huge_claimed_lengths_fail_fast_without_allocating(kind, api, version, frame):
    decode = (decode_request if kind == "request"
              else lambda f: decode_response(api.key, version, f))
    with pytest.raises(DecodeError):  # warm up: compile the codecs outside the measurement
        decode(frame)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        started = time.perf_counter()
        with pytest.raises(DecodeError):
            decode(frame)
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"decoding a {len(frame)}-byte frame allocated {peak} bytes"
    assert elapsed < 0.5


def test_reader_refuses_huge_counts_before_allocating():
    for data, compact in [(b"\x7f\xff\xff\xff\x00", False), (_uvarint(2**32 - 1) + b"\x00", True)]:
        with pytest.raises(DecodeError):
            Reader(data).array_length(compact)
        with pytest.raises(DecodeError):
            Reader(data).bytes(compact)
