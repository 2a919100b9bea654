"""Kafka record batches (magic 2): parse, walk, patch in place, decode and build.

A records field on the wire is a concatenation of batches. Each batch is a 61-byte
header followed by its records, which are compressed as one block when the
attributes name a codec:

    baseOffset int64, batchLength int32 (bytes after this field),
    partitionLeaderEpoch int32, magic int8, crc uint32,
    attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64,
    producerId int64, producerEpoch int16, baseSequence int32, recordCount int32

The CRC (CRC-32C) covers everything from the attributes to the end of the batch, so
the broker can assign offsets and leader epochs without recomputing it.

Only magic 2 is supported here: legacy message sets (magic 0 and 1) are refused with
`DecodeError`, as is anything malformed (wire.message_sets decodes them for the broker,
which converts them to batches). Record decoding and building
are the hot path for bulk consumers and producers, so they work on plain bytes with
inlined varint handling instead of going through `wire.primitives.Reader`/`Writer`.
"""

from __future__ import annotations

import struct
from typing import Iterator, NamedTuple, Sequence

from crc32c import crc32c

from wire._columns import encode_records
from wire.compression import NONE, compress, decompress
from wire.primitives import DecodeError, EncodeError

__all__ = [
    "HEADER_SIZE", "LOG_OVERHEAD", "MAGIC",
    "COMPRESSION_MASK", "LOG_APPEND_TIME_BIT", "TRANSACTIONAL_BIT", "CONTROL_BIT",
    "DELETE_HORIZON_BIT", "CREATE_TIME", "LOG_APPEND_TIME", "CONTROL_ABORT",
    "CONTROL_COMMIT", "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "NO_SEQUENCE",
    "NO_PARTITION_LEADER_EPOCH",
    "BatchHeader", "BatchIterator", "Record", "ControlRecord",
    "parse_header", "iter_batches", "has_valid_crc", "set_base_offset",
    "set_partition_leader_epoch", "set_log_append_time", "decode_batch", "decode_batch_in_chunks",
    "decode_control_record", "encode_record", "assemble_batch", "recompress_batch", "build_batch",
    "build_batch_columns", "build_control_batch",
]

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset and batchLength: the bytes batchLength does not count
MAGIC = 2

# Attribute bits.
COMPRESSION_MASK = 0x07  # a codec id from wire.compression
LOG_APPEND_TIME_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # baseTimestamp holds the log cleaner's delete horizon

# Timestamp types (attribute bit 3).
CREATE_TIME = 0
LOG_APPEND_TIME = 1

# Control record types.
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BEFORE_CRC_RANGE = struct.Struct(">qiibI")  # baseOffset .. crc
_CRC_RANGE_HEADER = struct.Struct(">hiqqqhii")  # attributes .. recordCount
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch

_BASE_OFFSET_AT = 0
_BATCH_LENGTH_AT = 8
_PARTITION_LEADER_EPOCH_AT = 12
_MAGIC_AT = 16
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD

# Smallest record: length, attributes, timestamp delta, offset delta, null key,
# null value and header count, one byte each.
_MIN_RECORD_SIZE = 7


class BatchHeader(NamedTuple):
    """The 61-byte batch header, field by field, in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & LOG_APPEND_TIME_BIT else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def size(self) -> int:
        """The whole batch's size in bytes, header included."""
        return self.batch_length + LOG_OVERHEAD


class Record(NamedTuple):
    """One decoded record, with absolute offset and timestamp.

    Headers are a tuple of (name, value) pairs; records without headers share one
    empty tuple. `attributes` is the record's own attribute byte, unused by Kafka so far.
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    attributes: int


class ControlRecord(NamedTuple):
    """A control record's key and, for transaction markers, its coordinator epoch.

    `coordinator_epoch` is None for control types other than ABORT and COMMIT (KRaft
    uses further types whose values this module does not interpret).
    """

    type: int
    version: int
    coordinator_epoch: int | None


def _byte_view(buf) -> memoryview:
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    return view if view.format == "B" else view.cast("B")


def parse_header(buf, pos: int = 0) -> BatchHeader:
    """The header of the batch at `pos`, without looking at its records."""
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise DecodeError(f"record batch header needs {HEADER_SIZE} bytes at offset {pos}")
    magic = buf[pos + _MAGIC_AT]
    if magic != MAGIC:
        raise DecodeError(f"record batch magic {magic} is not supported (only {MAGIC})")
    header = tuple.__new__(BatchHeader, _HEADER.unpack_from(buf, pos))
    if header.batch_length < _MIN_BATCH_LENGTH:
        raise DecodeError(f"batch length {header.batch_length} is shorter than its header")
    if header.record_count < 0:
        raise DecodeError(f"negative record count {header.record_count}")
    return header


class BatchIterator:
    """Walks a records field, yielding (header, view of the whole batch) per batch.

    A fetch response may end with a partial batch (the broker cuts at the size limit).
    That is not an error: the iteration stops before it, and `remaining` then tells
    how many bytes were left over (0 when the field ended on a batch boundary). A
    complete batch with a bad header raises DecodeError.
    """

    __slots__ = ("_buf", "_pos")

    def __init__(self, buf):
        self._buf = _byte_view(buf)
        self._pos = 0

    @property
    def remaining(self) -> int:
        """Bytes not yet yielded; once exhausted, the size of a trailing partial batch."""
        return len(self._buf) - self._pos

    def __iter__(self) -> BatchIterator:
        return self

    def __next__(self) -> tuple[BatchHeader, memoryview]:
        buf, pos = self._buf, self._pos
        left = len(buf) - pos
        if left < LOG_OVERHEAD:
            raise StopIteration
        batch_length = _I32.unpack_from(buf, pos + _BATCH_LENGTH_AT)[0]
        if batch_length < _MIN_BATCH_LENGTH:
            raise DecodeError(f"batch length {batch_length} at offset {pos} is shorter than its header")
        size = batch_length + LOG_OVERHEAD
        if size > left:
            raise StopIteration
        header = parse_header(buf, pos)
        self._pos = pos + size
        return header, buf[pos:pos + size]


def iter_batches(buf) -> BatchIterator:
    """Iterate over the batches of a records field; see `BatchIterator` for partial tails."""
    return BatchIterator(buf)


def _whole_batch(batch) -> tuple[memoryview, BatchHeader]:
    view = _byte_view(batch)
    header = parse_header(view)
    if len(view) != header.size:
        raise DecodeError(f"buffer holds {len(view)} bytes, its batch header says {header.size}")
    return view, header


def has_valid_crc(batch) -> bool:
    """Whether the CRC stored in one whole batch matches its contents."""
    view, header = _whole_batch(batch)
    return crc32c(view[_ATTRIBUTES_AT:]) == header.crc


def _patch(field: struct.Struct, batch, at: int, value: int) -> None:
    try:
        field.pack_into(batch, at, value)
    except struct.error as exc:
        raise EncodeError(f"{value!r} does not fit {field.format[1:]}: {exc}") from None


def set_base_offset(batch, base_offset: int) -> None:
    """Patch a writable batch's base offset; it lies outside the CRC range."""
    _patch(_I64, batch, _BASE_OFFSET_AT, base_offset)


def set_partition_leader_epoch(batch, epoch: int) -> None:
    """Patch a writable batch's partition leader epoch; it lies outside the CRC range."""
    _patch(_I32, batch, _PARTITION_LEADER_EPOCH_AT, epoch)


def set_log_append_time(batch, timestamp: int) -> None:
    """Mark a writable batch as LogAppendTime with `timestamp` as its max timestamp.

    Both fields lie inside the CRC range, so the CRC is recomputed over the whole
    batch: verify the old one first, or corruption gets a valid CRC.
    """
    view, header = _whole_batch(batch)
    _patch(_I16, view, _ATTRIBUTES_AT, header.attributes | LOG_APPEND_TIME_BIT)
    _patch(_I64, view, _MAX_TIMESTAMP_AT, timestamp)
    _U32.pack_into(view, _CRC_AT, crc32c(view[_ATTRIBUTES_AT:]))


def decode_batch(batch, max_decompressed_size: int) -> list[Record]:
    """Every record of one whole batch, after checking its CRC.

    `max_decompressed_size` bounds the records section of a compressed batch. With
    LogAppendTime every record carries the batch's max timestamp, as in Kafka.
    """
    header, data = records_section(batch, max_decompressed_size)
    log_append_time = header.max_timestamp if header.attributes & LOG_APPEND_TIME_BIT else None
    return _decode_records(data, header.record_count, header.base_offset,
                           header.base_timestamp, log_append_time)


def records_section(batch, max_decompressed_size: int) -> tuple[BatchHeader, bytes]:
    """The header and the (decompressed) records section of one whole batch, after
    checking its CRC; `max_decompressed_size` bounds decompression."""
    view, header = _whole_batch(batch)
    if crc32c(view[_ATTRIBUTES_AT:]) != header.crc:
        raise DecodeError(f"record batch at offset {header.base_offset} fails its CRC check")
    codec = header.attributes & COMPRESSION_MASK
    if codec == NONE:
        return header, bytes(view[HEADER_SIZE:])  # slices of bytes are bytes: keys and values
    return header, decompress(codec, view[HEADER_SIZE:], max_decompressed_size)


def _read_uvarint(data: bytes, pos: int, bits: int) -> tuple[int, int]:
    """The unsigned varint at `pos` and the position after it.

    The record decoder inlines the one- and two-byte cases and calls this for longer
    ones. Reading past the end raises IndexError, which the decoder turns into
    DecodeError.
    """
    result = 0
    for shift in range(0, bits, 7):
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> bits:
                raise DecodeError(f"varint exceeds {bits} bits")
            return result, pos
    raise DecodeError(f"varint longer than {(bits + 6) // 7} bytes")


def decode_batch_in_chunks(batch, max_decompressed_size: int, chunk: int) -> Iterator[list[Record]]:
    """`decode_batch` a `chunk` of records at a time, for a caller that must not hold
    the event loop for a whole large batch (the log cleaner). The checks are the same;
    one failing raises when its chunk is reached (bytes left after the last record: at
    the end of the iteration)."""
    header, data = records_section(batch, max_decompressed_size)
    log_append_time = header.max_timestamp if header.attributes & LOG_APPEND_TIME_BIT else None
    count = header.record_count
    _check_record_count(data, count)
    pos = 0
    for first in range(0, count, chunk):
        records, pos = _decode_some(data, pos, min(chunk, count - first), header.base_offset,
                                    header.base_timestamp, log_append_time)
        yield records
    _check_records_end(data, pos, count)


def _decode_records(data: bytes, count: int, base_offset: int, base_timestamp: int,
                    log_append_time: int | None) -> list[Record]:
    _check_record_count(data, count)
    records, pos = _decode_some(data, 0, count, base_offset, base_timestamp, log_append_time)
    _check_records_end(data, pos, count)
    return records


def _check_record_count(data: bytes, count: int) -> None:
    if count > len(data) // _MIN_RECORD_SIZE:
        raise DecodeError(f"{count} records cannot fit in {len(data)} bytes")


def _check_records_end(data: bytes, pos: int, count: int) -> None:
    if pos != len(data):
        raise DecodeError(f"{len(data) - pos} bytes after the last of {count} records")


def _decode_some(data: bytes, pos: int, count: int, base_offset: int, base_timestamp: int,
                 log_append_time: int | None) -> tuple[list[Record], int]:
    """`count` records from byte `pos` of a records section, and the position after them."""
    end = len(data)
    read_uvarint = _read_uvarint
    new = tuple.__new__
    no_headers = ()
    records = []
    append = records.append
    # Every varint below is read inline when it takes one or two bytes, then
    # zigzag-decoded as (z >> 1) ^ -(z & 1); lengths test z directly (z == 1 is -1).
    try:
        for _ in range(count):
            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 32)
            record_end = pos + ((z >> 1) ^ -(z & 1))
            if record_end > end or record_end < pos:
                raise DecodeError(f"record length {record_end - pos} at offset {pos} does not fit the records")
            attributes = data[pos]
            pos += 1

            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 64)
            timestamp_delta = (z >> 1) ^ -(z & 1)

            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 32)
            offset_delta = (z >> 1) ^ -(z & 1)

            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 32)
            if z == 1:
                key = None
            elif z & 1:
                raise DecodeError(f"invalid key length {(z >> 1) ^ -1}")
            else:
                key = data[pos:pos + (z >> 1)]
                pos += z >> 1
                if pos > record_end:
                    raise DecodeError(f"key of {z >> 1} bytes overruns its record")

            z = data[pos]
            if z < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                z = (z & 0x7F) | data[pos + 1] << 7
                pos += 2
            else:
                z, pos = read_uvarint(data, pos, 32)
            if z == 1:
                value = None
            elif z & 1:
                raise DecodeError(f"invalid value length {(z >> 1) ^ -1}")
            else:
                value = data[pos:pos + (z >> 1)]
                pos += z >> 1
                if pos > record_end:
                    raise DecodeError(f"value of {z >> 1} bytes overruns its record")

            z = data[pos]
            if z == 0:
                pos += 1
                headers = no_headers
            else:
                z, pos = read_uvarint(data, pos, 32)
                headers, pos = _decode_headers(data, pos, record_end, (z >> 1) ^ -(z & 1))
            if pos != record_end:
                raise DecodeError(f"record ends at offset {pos}, its length says {record_end}")
            append(new(Record, (
                base_offset + offset_delta,
                base_timestamp + timestamp_delta if log_append_time is None else log_append_time,
                key, value, headers, attributes,
            )))
    except IndexError:
        raise DecodeError("records section ends inside a record") from None
    return records, pos


def _decode_headers(data: bytes, pos: int, record_end: int,
                    count: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    # A header takes at least two bytes (key length and value length).
    if count < 0 or count > (record_end - pos) // 2:
        raise DecodeError(f"header count {count} does not fit its record")
    headers = []
    for _ in range(count):
        z, pos = _read_uvarint(data, pos, 32)
        if z & 1:
            raise DecodeError(f"invalid header key length {(z >> 1) ^ -1}")
        name_end = pos + (z >> 1)
        if name_end > record_end:
            raise DecodeError("header key overruns its record")
        try:
            name = str(data[pos:name_end], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"header key is not valid UTF-8: {exc.reason}") from None
        pos = name_end
        z, pos = _read_uvarint(data, pos, 32)
        if z == 1:
            value = None
        else:
            if z & 1:
                raise DecodeError(f"invalid header value length {(z >> 1) ^ -1}")
            value_end = pos + (z >> 1)
            if value_end > record_end:
                raise DecodeError("header value overruns its record")
            value = data[pos:value_end]
            pos = value_end
        headers.append((name, value))
    return tuple(headers), pos


def decode_control_record(record: Record) -> ControlRecord:
    """Interpret the record of a control batch (one whose header `is_control`)."""
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise DecodeError("control record key is shorter than version and type")
    version, kind = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise DecodeError(f"invalid control record version {version}")
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        return ControlRecord(kind, version, None)
    if value is None or len(value) < _TXN_MARKER_VALUE.size:
        raise DecodeError("transaction marker value is shorter than version and coordinator epoch")
    return ControlRecord(kind, version, _TXN_MARKER_VALUE.unpack_from(value)[1])


def _build(keys, values, headers, timestamps, attributes: int, codec: int, base_offset: int,
           partition_leader_epoch: int, producer_id: int, producer_epoch: int, base_sequence: int,
           log_append_time: int | None) -> bytes:
    if not keys:
        raise EncodeError("a record batch needs at least one record")
    base_timestamp = timestamps[0]
    if base_timestamp.__class__ is not int:
        raise EncodeError("record 0: the timestamp is not an int")
    try:
        section, max_timestamp = encode_records(keys, values, headers, timestamps, base_timestamp)
    except (TypeError, ValueError, OverflowError) as exc:
        raise EncodeError(str(exc)) from None
    if log_append_time is not None:
        attributes |= LOG_APPEND_TIME_BIT
        max_timestamp = log_append_time
    return assemble_batch(BatchHeader(base_offset, 0, partition_leader_epoch, MAGIC, 0, attributes | codec,
                                      len(keys) - 1, base_timestamp, max_timestamp, producer_id,
                                      producer_epoch, base_sequence, len(keys)),
                          section)


def encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """One record of a records section, its length first, from a decoded `Record` and
    its deltas from the batch's base offset and base timestamp: for a broker rewriting a
    batch whose offsets keep gaps (the log cleaner). Records with consecutive offsets are
    encoded in C by `build_batch_columns`."""
    parts = [bytes((record.attributes,)), _varlong(timestamp_delta), _varlong(offset_delta)]
    for blob in (record.key, record.value):
        parts += (_NULL_LENGTH,) if blob is None else (_varlong(len(blob)), blob)
    parts.append(_varlong(len(record.headers)))
    for name, value in record.headers:
        raw = name.encode()
        parts += (_varlong(len(raw)), raw)
        parts += (_NULL_LENGTH,) if value is None else (_varlong(len(value)), value)
    body = b"".join(parts)
    return _varlong(len(body)) + body


def _varlong(value: int) -> bytes:
    """A zigzag varint of up to 64 bits (a record's varints, which all fit one)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


_NULL_LENGTH = _varlong(-1)


def assemble_batch(header: BatchHeader, section: bytes) -> bytes:
    """A batch from its header fields (batchLength and CRC are computed, magic is 2) and
    its uncompressed records section, compressed with the codec the attributes name (the
    log cleaner rebuilds batches with it)."""
    codec = header.attributes & COMPRESSION_MASK
    if codec != NONE:
        section = compress(codec, section)
    try:
        crc_range_header = _CRC_RANGE_HEADER.pack(*header[5:])
        crc = crc32c(section, crc32c(crc_range_header))
        before_crc_range = _BEFORE_CRC_RANGE.pack(
            header.base_offset, _MIN_BATCH_LENGTH + len(section), header.partition_leader_epoch,
            MAGIC, crc)
    except struct.error as exc:
        raise EncodeError(f"batch header field out of range: {exc}") from None
    return b"".join((before_crc_range, crc_range_header, section))


def recompress_batch(batch, codec: int, max_decompressed_size: int) -> bytes:
    """One whole batch with its records section in `codec` instead, after checking its
    CRC and that the records parse; every header field but the codec bits, batchLength
    and CRC is kept, and the records themselves (offset and timestamp deltas, keys,
    values, headers) byte for byte, as a broker recompressing to a topic's codec must.
    `max_decompressed_size` bounds decompression."""
    header, section = records_section(batch, max_decompressed_size)
    if header.is_control:
        raise EncodeError("control batches are never recompressed")
    _decode_records(section, header.record_count, 0, 0, None)
    return assemble_batch(header._replace(attributes=header.attributes & ~COMPRESSION_MASK | codec),
                          section)


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]], int]],
    **options,
) -> bytes:
    """A complete batch, CRC set, from (key, value, headers, timestamp) tuples; the
    options are those of `build_batch_columns`."""
    try:
        keys, values, headers, timestamps = zip(*records) if records else ((),) * 4
    except (TypeError, ValueError):
        raise EncodeError("records are (key, value, headers, timestamp) tuples") from None
    return build_batch_columns(keys, values, headers, timestamps, **options)


def build_batch_columns(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None,
    timestamps: Sequence[int],
    *,
    base_offset: int = 0,
    compression: int = NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    log_append_time: int | None = None,
) -> bytes:
    """A complete batch, CRC set, from equal-length columns (`headers` None when no
    record has any), encoded in C without a Python object per record.

    Records get consecutive offsets from `base_offset`; the first record's timestamp
    becomes the base timestamp, as Kafka's producers do. Giving `log_append_time`
    marks the batch LogAppendTime with that max timestamp, as a broker would.
    """
    attributes = TRANSACTIONAL_BIT if transactional else 0
    return _build(keys, values, headers, timestamps, attributes, compression, base_offset,
                  partition_leader_epoch, producer_id, producer_epoch, base_sequence, log_append_time)


def build_control_batch(kind: int, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                        timestamp: int, base_offset: int = 0,
                        partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH) -> bytes:
    """A transaction marker batch: one ABORT or COMMIT control record."""
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise EncodeError(f"control type {kind} is not a transaction marker")
    try:
        key = _CONTROL_KEY.pack(0, kind)
        value = _TXN_MARKER_VALUE.pack(0, coordinator_epoch)
    except struct.error as exc:
        raise EncodeError(f"coordinator epoch {coordinator_epoch!r}: {exc}") from None
    return _build((key,), (value,), None, (timestamp,), TRANSACTIONAL_BIT | CONTROL_BIT, NONE,
                  base_offset, partition_leader_epoch, producer_id, producer_epoch, NO_SEQUENCE,
                  None)
