"""Kafka's record-batch compression codecs, keyed by the id in the batch attributes.

Decompression is always bounded: the caller states the largest output it accepts, and
no codec is allowed to allocate much beyond that, whatever sizes the input claims, so a
decompression bomb or a forged size header costs at most `max_size` bytes of memory.
Every failure of a codec surfaces as `DecodeError`.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

from wire.primitives import DecodeError, EncodeError

__all__ = ["NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD", "CODEC_NAMES", "compress", "decompress"]

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

# Kafka's Java producer defaults. Its default lz4 level uses the fast compressor (LZ4F
# level 0); cramjam's default lz4 level compresses about ten times slower.
_GZIP_LEVEL = 6
_LZ4_LEVEL = 0
_ZSTD_LEVEL = 3

# Xerial snappy framing, written by Kafka's Java clients: magic, int32 version and
# int32 minimum compatible version, then blocks of [int32 length][raw snappy block].
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK_SIZE = 32 * 1024  # uncompressed bytes per block, as xerial's default
_I32 = struct.Struct(">i")

# cramjam's `decompress_into` stops with this error (Rust's io::ErrorKind::WriteZero)
# as soon as the output buffer is full, before decompressing any further.
_OUTPUT_FULL = "failed to write whole buffer"
# First output buffer for lz4/zstd, whose frames need not state their size.
_FIRST_GUESS_MIN = 16 * 1024
_FIRST_GUESS_RATIO = 8
_GROWTH = 4


def compress(codec: int, data) -> bytes:
    """Compress `data` in the stream format Kafka's clients expect for `codec`."""
    try:
        if codec == NONE:
            return bytes(data)
        if codec == GZIP:
            compressor = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: gzip wrapper
            return compressor.compress(data) + compressor.flush()
        if codec == SNAPPY:
            return _xerial_compress(memoryview(data).cast("B"))
        if codec == LZ4:
            # Kafka's Java reader refuses linked blocks, and older ones a content checksum.
            compressor = cramjam.lz4.Compressor(_LZ4_LEVEL, content_checksum=False,
                                                block_linked=False)
            compressor.compress(data if type(data) is bytes else bytes(data))  # bytes only
            return bytes(compressor.finish())
        if codec == ZSTD:
            return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL))
    except cramjam.CompressionError as exc:
        raise EncodeError(f"{CODEC_NAMES[codec]} compression failed: {exc}") from None
    raise EncodeError(f"unknown compression codec {codec}")


def decompress(codec: int, data, max_size: int) -> bytes:
    """Decompress `data`; output larger than `max_size` bytes raises DecodeError."""
    if max_size < 0:
        raise ValueError(f"max_size {max_size} is negative")
    if codec == NONE:
        if len(data) > max_size:
            raise DecodeError(f"decompressed size exceeds {max_size} bytes")
        return bytes(data)
    try:
        if codec == GZIP:
            return _gunzip(data, max_size)
        if codec == SNAPPY:
            return _snappy_decompress(memoryview(data).cast("B"), max_size)
        if codec == LZ4:
            return _decompress_growing(cramjam.lz4.decompress_into, data, max_size)
        if codec == ZSTD:
            return _decompress_growing(cramjam.zstd.decompress_into, data, max_size)
    except (cramjam.DecompressionError, zlib.error) as exc:
        raise DecodeError(f"corrupt {CODEC_NAMES[codec]} data: {exc}") from None
    raise DecodeError(f"unknown compression codec {codec}")


def _exceeds(max_size: int) -> DecodeError:
    return DecodeError(f"decompressed size exceeds {max_size} bytes")


def _gunzip(data, max_size: int) -> bytes:
    """Every gzip member in turn (a gzip stream may hold several), each bounded by what
    is left of `max_size` through zlib's `max_length`."""
    out = []
    budget = max_size + 1  # one byte over the limit proves the limit exceeded
    rest = data
    while True:
        member = zlib.decompressobj(31)
        chunk = member.decompress(rest, budget)
        budget -= len(chunk)
        if budget == 0:
            raise _exceeds(max_size)
        if not member.eof:
            raise DecodeError("truncated gzip data")
        out.append(chunk)
        rest = member.unused_data
        if not rest:
            return b"".join(out)


def _xerial_compress(data: memoryview) -> bytes:
    out = [_XERIAL_HEADER]
    for start in range(0, len(data), _XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(data[start:start + _XERIAL_BLOCK_SIZE])
        out.append(_I32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: memoryview, max_size: int) -> bytes:
    """Xerial-framed (Java clients) or raw (librdkafka) snappy, told apart by the magic.

    Raw snappy states its uncompressed length up front; it is checked against what is
    left of `max_size` before anything is allocated.
    """
    if data[:len(_XERIAL_MAGIC)] != _XERIAL_MAGIC:
        if cramjam.snappy.decompress_raw_len(data) > max_size:
            raise _exceeds(max_size)
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < len(_XERIAL_HEADER):
        raise DecodeError("truncated xerial snappy header")
    blocks = []
    budget = max_size
    pos = len(_XERIAL_HEADER)
    end = len(data)
    while pos < end:
        if end - pos < 4:
            raise DecodeError("truncated xerial snappy block length")
        size = _I32.unpack_from(data, pos)[0]
        pos += 4
        if size < 0 or size > end - pos:
            raise DecodeError(f"xerial snappy block of {size} bytes, {end - pos} present")
        block = data[pos:pos + size]
        pos += size
        budget -= cramjam.snappy.decompress_raw_len(block)
        if budget < 0:
            raise _exceeds(max_size)
        blocks.append(cramjam.snappy.decompress_raw(block))
    return b"".join(blocks)


def _decompress_growing(decompress_into, data, max_size: int) -> bytes:
    """Decompress into a fixed buffer, retrying with a larger one while it overflows.

    cramjam gives lz4 and zstd no output limit except the size of the buffer it writes
    into, and frames need not state (or may lie about) their content size. The buffer
    starts at a guess from the input size and grows by `_GROWTH` up to `max_size + 1`.
    """
    limit = max_size + 1
    capacity = min(limit, max(_FIRST_GUESS_MIN, len(data) * _FIRST_GUESS_RATIO))
    while True:
        out = bytearray(capacity)
        try:
            size = decompress_into(data, out)
        except cramjam.DecompressionError as exc:
            if _OUTPUT_FULL not in str(exc):
                raise
            if capacity == limit:
                raise _exceeds(max_size) from None
            capacity = min(limit, capacity * _GROWTH)
            continue
        if size > max_size:
            raise _exceeds(max_size)
        return bytes(memoryview(out)[:size])
