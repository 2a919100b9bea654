"""Legacy message sets (message formats v0 and v1, magic 0 and 1), decoded for a broker
that converts them to a record batch (magic 2), as Kafka 3.x's brokers do for Produce v0–v2.

A message set is a sequence of entries:

    offset int64, message_size int32 (bytes after this field), then the message:
    crc uint32 (CRC-32 of everything after it), magic int8, attributes int8,
    timestamp int64 (magic 1 only), key (int32 length, -1 null, bytes), value (likewise)

The attributes' low three bits name a codec (wire.compression; zstd came with magic 2 and
is refused with magic 0 and 1, as Kafka's reader refuses it), bit 3 the timestamp type
(magic 1). A compressed message (a wrapper) is alone in its set and holds a whole message
set in its value: uncompressed messages of the wrapper's magic, whose offsets count from 0
with magic 1. Offsets are not kept, the broker assigns them; a wrapper marked
LogAppendTime gives its inner messages its own timestamp, as in Kafka.

Corrupt bytes (truncated entries, a CRC mismatch, lengths that do not fit, data that does
not decompress) raise DecodeError; well-formed sets that break the format's rules raise
`InvalidMessageSet`: Kafka answers the first CORRUPT_MESSAGE, the second INVALID_RECORD.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

from wire.compression import LZ4, NONE, ZSTD, decompress
from wire.primitives import DecodeError
from wire.records import LOG_OVERHEAD  # a batch's base offset and length: a message's offset and size

__all__ = ["InvalidMessageSet", "MessageSet", "split_message_set", "decode_message_set"]

_MAGIC_AT = 16
_COMPRESSION_MASK = 0x07
_LOG_APPEND_TIME_BIT = 0x08
_MIN_MESSAGE_SIZE = {0: 14, 1: 22}  # crc, magic, attributes, (timestamp,) two lengths
_NO_TIMESTAMP = -1

_ENTRY = struct.Struct(">qi")  # offset, message_size
_MESSAGE_HEAD = struct.Struct(">IBB")  # crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class InvalidMessageSet(DecodeError):
    """A well-formed message set that breaks a rule of the format (INVALID_RECORD)."""


class MessageSet(NamedTuple):
    """A decoded message set, its messages in columns as `wire.records.build_batch_columns`
    takes them (no object per message): its magic, its wrapper's codec (NONE when
    uncompressed), each message's timestamp (-1 with magic 0), key and value, and the
    indexes of the messages marked LogAppendTime (by their own attribute or their
    wrapper's), which producers may not set."""

    magic: int
    compression: int
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    log_append_time: list[int]


class _Message(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def split_message_set(buf) -> list[memoryview]:
    """Every entry of a message set, whole (offset and size included), after checking
    only that each size is plausible and fits: a truncated entry raises DecodeError."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    view = view if view.format == "B" else view.cast("B")
    entries = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise DecodeError(f"{end - pos} bytes of a truncated message at byte {pos}")
        offset, size = _ENTRY.unpack_from(view, pos)
        if size < _MIN_MESSAGE_SIZE[0]:
            raise DecodeError(f"message size {size} at offset {offset} is below the smallest "
                              f"message's {_MIN_MESSAGE_SIZE[0]}")
        if size > end - pos - LOG_OVERHEAD:
            raise DecodeError(f"message at offset {offset} is truncated: {size} bytes announced, "
                              f"{end - pos - LOG_OVERHEAD} present")
        entries.append(view[pos:pos + LOG_OVERHEAD + size])
        pos += LOG_OVERHEAD + size
    return entries


def decode_message_set(entries: list[memoryview], max_decompressed_size: int) -> MessageSet:
    """The messages of a message set split by `split_message_set`, all of magic 0 or all
    of magic 1; `max_decompressed_size` bounds a wrapper's decompressed value."""
    if not entries:
        raise DecodeError("an empty message set")
    magic = entries[0][_MAGIC_AT]
    if magic not in _MIN_MESSAGE_SIZE:
        raise DecodeError(f"magic {magic} is not a legacy message format")
    for entry in entries:
        if entry[_MAGIC_AT] != magic:
            raise InvalidMessageSet(f"a message of magic {entry[_MAGIC_AT]} in a message set "
                                    f"of magic {magic}")
    messages = [_parse(entry) for entry in entries]
    if not any(message.attributes & _COMPRESSION_MASK for message in messages):
        marked = [index for index, message in enumerate(messages) if _log_append_time(message)]
        return MessageSet(magic, NONE, [message.timestamp for message in messages],
                          [message.key for message in messages], [message.value for message in messages],
                          marked)
    if len(messages) > 1:
        raise InvalidMessageSet(f"a compressed message must be alone in its message set, "
                                f"not one of {len(messages)}")
    wrapper = messages[0]
    codec = wrapper.attributes & _COMPRESSION_MASK
    if codec == ZSTD:
        raise InvalidMessageSet(f"zstd compression needs record batches (magic 2), not magic {magic}")
    if wrapper.value is None:
        raise InvalidMessageSet("a compressed message without a value")
    data = wrapper.value
    if codec == LZ4 and magic == 0:
        data = _with_proper_lz4_header_checksum(data)
    inner = split_message_set(decompress(codec, data, max_decompressed_size))
    if not inner:
        raise InvalidMessageSet("a compressed message holding no messages")
    stamped = _log_append_time(wrapper)
    timestamps, keys, values = [], [], []
    last_offset = 0
    for entry in inner:
        if entry[_MAGIC_AT] != magic:
            raise InvalidMessageSet(f"a message of magic {entry[_MAGIC_AT]} inside a compressed message "
                                    f"of magic {magic}")
        message = _parse(entry)
        if message.attributes & _COMPRESSION_MASK:
            raise InvalidMessageSet("a compressed message inside a compressed message")
        timestamps.append(wrapper.timestamp if stamped else message.timestamp)
        keys.append(message.key)
        values.append(message.value)
        last_offset = message.offset
    if magic == 1 and wrapper.offset != 0 and wrapper.offset < last_offset:
        raise InvalidMessageSet(f"wrapper offset {wrapper.offset} is below its last inner offset "
                                f"{last_offset}")
    return MessageSet(magic, codec, timestamps, keys, values, list(range(len(keys))) if stamped else [])


def _log_append_time(message: _Message) -> bool:
    """Whether a message is marked LogAppendTime (only magic 1 has the bit)."""
    return message.magic == 1 and bool(message.attributes & _LOG_APPEND_TIME_BIT)


def _parse(entry: memoryview) -> _Message:
    """One message, its CRC checked first; its key and value must fill it exactly."""
    offset, size = _ENTRY.unpack_from(entry)
    crc, magic, attributes = _MESSAGE_HEAD.unpack_from(entry, LOG_OVERHEAD)
    if zlib.crc32(entry[_MAGIC_AT:]) != crc:
        raise DecodeError(f"message at offset {offset} fails its CRC check")
    if size < _MIN_MESSAGE_SIZE[magic]:
        raise DecodeError(f"message size {size} at offset {offset} is below magic {magic}'s "
                          f"{_MIN_MESSAGE_SIZE[magic]}")
    pos = _MAGIC_AT + 2
    timestamp = _NO_TIMESTAMP
    if magic == 1:
        timestamp = _I64.unpack_from(entry, pos)[0]
        pos += 8
    key, pos = _sized(entry, pos, offset, "key")
    value, pos = _sized(entry, pos, offset, "value")
    if pos != len(entry):
        raise DecodeError(f"{len(entry) - pos} bytes after the value of the message at offset {offset}")
    return _Message(offset, magic, attributes, timestamp, key, value)


def _sized(entry: memoryview, pos: int, offset: int, what: str) -> tuple[bytes | None, int]:
    if len(entry) - pos < 4:
        raise DecodeError(f"the {what} length of the message at offset {offset} is truncated")
    length = _I32.unpack_from(entry, pos)[0]
    pos += 4
    if length == -1:
        return None, pos
    if length < -1 or length > len(entry) - pos:
        raise DecodeError(f"{what} length {length} does not fit the message at offset {offset}")
    return bytes(entry[pos:pos + length]), pos + length


# An LZ4 frame: magic number, then the descriptor (FLG, BD, an optional 8-byte content
# size and 4-byte dictionary id), then HC, the second byte of the descriptor's xxHash32.
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_CONTENT_SIZE_FLAG = 0x08
_LZ4_DICTIONARY_ID_FLAG = 0x01


def _with_proper_lz4_header_checksum(data: bytes) -> bytes:
    """The frame with its header checksum recomputed. Kafka's clients wrote it over the
    wrong bytes (the magic number included) with magic 0, and Kafka's reader skips it for
    magic 0 (KAFKA-3160); a frame too short for a descriptor is left to fail decompression."""
    if len(data) < 7 or data[:4] != _LZ4_FRAME_MAGIC:
        return data
    flags = data[4]
    checksum_at = 6  # after the magic number, FLG and BD
    if flags & _LZ4_CONTENT_SIZE_FLAG:
        checksum_at += 8
    if flags & _LZ4_DICTIONARY_ID_FLAG:
        checksum_at += 4
    if len(data) <= checksum_at:
        return data
    checksum = (_xxh32_short(data[4:checksum_at]) >> 8) & 0xFF
    return data[:checksum_at] + bytes((checksum,)) + data[checksum_at + 1:]


_PRIME32 = (2654435761, 2246822519, 3266489917, 668265263, 374761393)
_U32_MASK = 0xFFFFFFFF


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _U32_MASK


def _xxh32_short(data: bytes) -> int:
    """xxHash32 with seed 0 of fewer than 16 bytes (an LZ4 frame descriptor: at most 14)."""
    p1, p2, p3, p4, p5 = _PRIME32
    h = (p5 + len(data)) & _U32_MASK
    pos = 0
    while pos + 4 <= len(data):
        word = int.from_bytes(data[pos:pos + 4], "little")
        h = _rotate_left((h + word * p3) & _U32_MASK, 17) * p4 & _U32_MASK
        pos += 4
    for byte in data[pos:]:
        h = _rotate_left((h + byte * p5) & _U32_MASK, 11) * p1 & _U32_MASK
    h ^= h >> 15
    h = h * p2 & _U32_MASK
    h ^= h >> 13
    h = h * p3 & _U32_MASK
    return h ^ (h >> 16)
