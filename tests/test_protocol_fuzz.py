"""Mutated real-client requests against the broker process, over raw sockets.

The seeds are request frames captured from confluent-kafka, kafka-python and aiokafka
(tests/fuzz_corpus.json, written by tools/capture_fuzz_corpus.py). Each case sends one
frame, unmutated or mutated with a seeded RNG: bit flips, interesting bytes, int16 /
int32 / varint boundary values written anywhere or over what looks like a string's
length prefix, truncation, extension, duplicated sections, frames cut short, and one
decoded field set to an odd value of its type (well-formed requests with values
clients never send). Each case has a connection of its own and must end, within a
bounded wait, in a response with the frame's correlation id (decodable at the
request's version when the request parses) or a closed connection; only requests that
may legitimately wait (Fetch, JoinGroup, SyncGroup, acks=0 Produce) may stay silent.
Throughout, the broker stays up, logs no internal error or traceback, and a canary
topic the corpus never names keeps its records.

SLUICE_FUZZ_SEED replays a run (the seed is printed); SLUICE_FUZZ_CASES sets the count.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import struct
import time
import uuid
from pathlib import Path

import pytest

from sluice.broker_process import BrokerProcess
from sluice_client import Client, NewTopic
from wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, FETCH, JOIN_GROUP, PRODUCE, SYNC_GROUP
from wire.primitives import ZERO_UUID, DecodeError
from wire.protocol import decode_request, decode_response, encode_request
from wire.schema import Struct

pytestmark = pytest.mark.timeout(120)

CORPUS = json.loads((Path(__file__).parent / "fuzz_corpus.json").read_text())
CASES = int(os.environ.get("SLUICE_FUZZ_CASES", "3000"))
TIME_LIMIT = 60.0
CONCURRENCY = 16
ANSWER_TIMEOUT = 10.0  # a request that must be answered, under a loaded machine
WAIT_TIMEOUT = 1.0     # a request that may wait (long poll, rebalance) is abandoned after it
CHECK_EVERY = 250      # cases between liveness checks
CANARY = "canary"
MANY_PARTITIONS = 100
_SIZE = struct.Struct(">i")
_INT32 = [-1, 0, 1, 0x7FFFFFFF, -0x80000000, 0xFFFF]
_INT16 = [-1, 0, 1, 0x7FFF, -0x8000]
_VARINTS = [b"\x00", b"\x01", b"\x7f", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff"]
_BYTES = [0x00, 0x01, 0x7F, 0x80, 0xFF]
_MUTATIONS = ["bitflip", "byte", "int32", "int16", "varint", "length", "truncate", "extend",
              "duplicate", "short", "field", "field"]
_FIELD_INTS = [-1, 0, 1, -2, 0x7F, 0x7FFF, 0xFFFF, 0x7FFFFFFF, -0x80000000, (1 << 63) - 1,
               -(1 << 63)]
_FIELD_STRINGS = ["", None, "x" * 300, "fuzz", "\x00", "__consumer_offsets"]


def field_values(value) -> list:
    """Odd but well-typed replacements for a decoded field's value."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return _FIELD_INTS
    if isinstance(value, str) or value is None:
        return _FIELD_STRINGS
    if isinstance(value, list):
        return [[], None, value * 2, value[:1] * 3]
    if isinstance(value, (bytes, memoryview)):
        return [b"", None, bytes(value)[:len(value) // 2]]
    if isinstance(value, uuid.UUID):
        return [ZERO_UUID, uuid.UUID(int=1)]
    return []


def mutate_field(frame: bytes, rng: random.Random) -> bytes | None:
    """The frame decoded, one field set to an odd value of its type, encoded again:
    well-formed requests with values clients never send (None: no value encodes)."""
    try:
        header, body = decode_request(frame)
    except DecodeError:
        return None
    fields = []

    def walk(struct_value: Struct) -> None:
        for name in struct_value._fields:
            fields.append((struct_value, name))
            value = getattr(struct_value, name)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, Struct):
                    walk(item)

    walk(body)
    for _ in range(10):
        holder, name = rng.choice(fields)
        old = getattr(holder, name)
        choices = field_values(old)
        if not choices:
            continue
        setattr(holder, name, rng.choice(choices))
        try:
            return encode_request(header, body)
        except Exception:  # the value does not fit this field's type or version
            setattr(holder, name, old)
    return None


def string_lengths(frame: bytes) -> list[tuple[int, int]]:
    """(position, width) of what looks like a string's length: an int16 (width 2) or an
    unsigned varint of length + 1 (width 1) followed by that many printable bytes."""
    found = []
    for at in range(len(frame) - 2):
        size = struct.unpack_from(">h", frame, at)[0]
        if 0 < size <= len(frame) - at - 2 and frame[at + 2:at + 2 + size].isascii() \
                and frame[at + 2:at + 2 + size].decode().isprintable():
            found.append((at, 2))
        size = frame[at] - 1
        if 0 < size < 127 and size <= len(frame) - at - 1 \
                and frame[at + 1:at + 1 + size].isascii() \
                and frame[at + 1:at + 1 + size].decode().isprintable():
            found.append((at, 1))
    return found


def mutate(frame: bytes, rng: random.Random) -> tuple[bytes, str, bool]:
    """(payload, what was done, whether the payload is sent whole). The request header's
    API key, version and correlation id (8 bytes) are mutated less often than the rest."""
    data = bytearray(frame)
    start = 0 if rng.random() < 0.1 else min(8, len(data))

    def position() -> int:
        return rng.randrange(start, len(data)) if len(data) > start else len(data)

    kind = rng.choice(_MUTATIONS)
    if kind == "length" and not string_lengths(frame):
        kind = "int16"
    if kind == "field":
        mutated = mutate_field(frame, rng)
        if mutated is not None:
            return mutated, kind, True
        kind = "bitflip"
    if kind == "bitflip":
        for _ in range(rng.randint(1, 4)):
            data[min(position(), len(data) - 1)] ^= 1 << rng.randrange(8)
    elif kind == "byte":
        for _ in range(rng.randint(1, 3)):
            at = position()
            data[at:at + 1] = bytes([rng.choice(_BYTES)])
    elif kind in ("int32", "int16"):
        value = (struct.pack(">i", rng.choice(_INT32)) if kind == "int32" else
                 struct.pack(">h", rng.choice(_INT16)))
        at = position()
        data[at:at + len(value)] = value
    elif kind == "varint":
        at = position()
        data[at:at + 1] = rng.choice(_VARINTS)
    elif kind == "length":
        at, width = rng.choice(string_lengths(frame))
        value = struct.pack(">h", rng.choice(_INT16)) if width == 2 else rng.choice(_VARINTS)
        data[at:at + width] = value
    elif kind == "truncate":
        del data[rng.randrange(0, max(1, len(data))):]
    elif kind == "extend":
        data += rng.randbytes(rng.randint(1, 64)) if rng.random() < 0.5 else data[position():]
    elif kind == "duplicate":
        first = position()
        last = rng.randint(first, len(data))
        data[last:last] = data[first:last]
    return bytes(data), kind, kind != "short"


def correlation_id(payload: bytes) -> int | None:
    return struct.unpack_from(">i", payload, 4)[0] if len(payload) >= 8 else None


def may_stay_silent(payload: bytes) -> bool:
    """Kafka may hold these requests (long polls, rebalances) or never answer (acks=0)."""
    if len(payload) < 2:
        return False
    api_key = struct.unpack_from(">h", payload)[0]
    if api_key in (FETCH.key, JOIN_GROUP.key, SYNC_GROUP.key):
        return True
    if api_key != PRODUCE.key:
        return False
    try:
        _, body = decode_request(payload, allow_trailing_bytes=True)
    except DecodeError:
        return False
    return body.acks == 0


def asks_for_many_partitions(payload: bytes) -> bool:
    """A valid CreateTopics or CreatePartitions for more than a hundred partitions is a
    cost, not malformed input: the broker makes them all (tens of seconds of disk work
    for 0xFFFF of them), so such mutants are left out rather than stall the run."""
    try:
        header, body = decode_request(payload, allow_trailing_bytes=True)
    except DecodeError:
        return False
    if header.request_api_key == CREATE_TOPICS.key:
        return any(t.num_partitions > MANY_PARTITIONS for t in body.topics)
    if header.request_api_key == CREATE_PARTITIONS.key:
        return any(t.count > MANY_PARTITIONS for t in body.topics)
    return False


def assert_decodable(payload: bytes, response: bytes) -> None:
    """The answer to a request that parses is a valid response of its API and version."""
    try:
        header, _ = decode_request(payload, allow_trailing_bytes=True)
    except DecodeError:
        return
    try:
        decode_response(header.request_api_key, header.request_api_version, response)
    except DecodeError as exc:
        raise AssertionError(f"undecodable response {response.hex()}: {exc}") from None


async def send_case(port: int, payload: bytes, whole: bool) -> str:
    """Send one frame; 'answered', 'closed' or 'silent' (no answer within the wait)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if whole:
            writer.write(_SIZE.pack(len(payload)) + payload)
        else:  # the size of the whole frame, part of its bytes, then end of input
            writer.write(_SIZE.pack(len(payload)) + payload[:len(payload) // 2])
            writer.write_eof()
        timeout = WAIT_TIMEOUT if whole and may_stay_silent(payload) else ANSWER_TIMEOUT
        try:
            size = await asyncio.wait_for(reader.readexactly(4), timeout)
            response = await asyncio.wait_for(reader.readexactly(_SIZE.unpack(size)[0]), timeout)
        except (asyncio.IncompleteReadError, ConnectionError):
            return "closed"
        except asyncio.TimeoutError:
            if timeout == WAIT_TIMEOUT:
                return "silent"
            raise AssertionError(f"no answer and no close within {timeout} s") from None
        expected = correlation_id(payload)
        assert struct.unpack_from(">i", response)[0] == expected, "wrong correlation id"
        assert_decodable(payload, response)
        return "answered"
    finally:
        writer.close()


def canary_records(client: Client) -> list[tuple]:
    fetched = client.consumer.fetch_records(CANARY, 0, 0, max_wait_ms=0)
    return [(r.offset, r.key, r.value) for r in fetched.records]


def assert_serving(proc: BrokerProcess) -> None:
    assert proc.proc.poll() is None, "the broker died:\n" + "".join(proc.output[-40:])
    with Client(proc.bootstrap_servers, call_timeout=20) as fresh:
        assert fresh.negotiated_versions()
        assert CANARY in fresh.metadata([CANARY]).topics


def internal_errors(proc: BrokerProcess) -> str:
    """The broker's log from its first internal error or traceback on ('' if none)."""
    lines = list(proc.output)
    for number, line in enumerate(lines):
        if "internal error" in line or "Traceback" in line:
            return "".join(lines[number:number + 60])
    return ""


def test_mutated_client_requests(tmp_path):
    seed = int(os.environ.get("SLUICE_FUZZ_SEED", random.randrange(1 << 32)))
    print(f"protocol fuzz: SLUICE_FUZZ_SEED={seed} SLUICE_FUZZ_CASES={CASES}")
    config = tmp_path / "server.properties"
    config.write_text("group.initial.rebalance.delay.ms=0\n")
    with BrokerProcess(tmp_path / "data", config_file=str(config)) as proc, \
            Client(proc.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({"fuzz": NewTopic(partitions=2),
                                        "fuzz-scratch": NewTopic(partitions=1),
                                        CANARY: NewTopic(partitions=1)})
        assert all(c.error is None for c in created.values()), created
        client.producer.produce(CANARY, 0, [(f"k{n}".encode(), f"v{n}".encode()) for n in range(20)])
        canary = canary_records(client)
        outcomes = asyncio.run(run_cases(proc, seed))
        assert_serving(proc)
        assert not internal_errors(proc), internal_errors(proc)
        assert canary_records(client) == canary
    print(f"protocol fuzz outcomes: {outcomes}")


async def run_cases(proc: BrokerProcess, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    cases, left_out = [], 0
    for index in range(CASES):
        seed_frame = CORPUS[index % len(CORPUS)]
        frame = bytes.fromhex(seed_frame["frame"])
        if index < len(CORPUS):
            payload, kind, whole = frame, "unmutated", True
        else:
            payload, kind, whole = mutate(frame, rng)
            if asks_for_many_partitions(payload):
                left_out += 1
                continue
        cases.append((index, f"{seed_frame['client']} {seed_frame['api']} "
                             f"v{seed_frame['version']} {kind}", payload, whole))
    outcomes = {"left out": left_out}
    started = time.monotonic()
    for first in range(0, len(cases), CHECK_EVERY):
        batch = cases[first:first + CHECK_EVERY]
        limit = asyncio.Semaphore(CONCURRENCY)

        async def one(case):
            index, what, payload, whole = case
            async with limit:
                try:
                    outcome = await send_case(proc.port, payload, whole)
                except AssertionError as exc:
                    raise AssertionError(f"case {index} ({what}, {payload.hex()}): {exc}") from None
            outcomes[outcome] = outcomes.get(outcome, 0) + 1

        await asyncio.gather(*(one(case) for case in batch))
        errors = internal_errors(proc)
        assert not errors, (f"cases {batch[0][0]}-{batch[-1][0]} "
                            f"({[c[1] for c in batch]}):\n" + errors)
        await asyncio.to_thread(assert_serving, proc)
        assert time.monotonic() - started < TIME_LIMIT, f"over {TIME_LIMIT} s at case {first}"
    return outcomes
