"""Kafka's primitive types, read from and written to in-memory buffers.

`Reader` checks every length against the bytes actually present before it slices or
allocates, so a forged length raises `DecodeError` instead of reading past the end or
allocating memory the input does not back. `Writer` collects output as a list of
chunks so that large byte ranges (record batches) are passed along without copying.
"""

from __future__ import annotations

import struct
import uuid

__all__ = ["DecodeError", "EncodeError", "Reader", "Writer", "ZERO_UUID"]

ZERO_UUID = uuid.UUID(int=0)

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_F64 = struct.Struct(">d")

# Below this size a byte range is copied into the current chunk; at or above it the
# caller's buffer becomes a chunk of its own, uncopied.
_ZERO_COPY_MIN = 4096


class DecodeError(ValueError):
    """The bytes are not a valid encoding: truncated, overlong or out of range."""


class EncodeError(ValueError):
    """A value cannot be encoded at the requested version or type."""


class Reader:
    """A cursor over an immutable buffer; every read is bounds-checked."""

    __slots__ = ("buf", "pos", "end")

    def __init__(self, data, pos: int = 0, end: int | None = None):
        self.buf = data if isinstance(data, memoryview) else memoryview(data)
        if self.buf.ndim != 1 or self.buf.itemsize != 1:
            self.buf = self.buf.cast("B")
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _advance(self, n: int) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise DecodeError(f"need {n} bytes at offset {pos}, only {self.end - pos} left")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return _I8.unpack_from(self.buf, self._advance(1))[0]

    def int16(self) -> int:
        return _I16.unpack_from(self.buf, self._advance(2))[0]

    def int32(self) -> int:
        return _I32.unpack_from(self.buf, self._advance(4))[0]

    def int64(self) -> int:
        return _I64.unpack_from(self.buf, self._advance(8))[0]

    def uint16(self) -> int:
        return _U16.unpack_from(self.buf, self._advance(2))[0]

    def uint32(self) -> int:
        return _U32.unpack_from(self.buf, self._advance(4))[0]

    def float64(self) -> float:
        return _F64.unpack_from(self.buf, self._advance(8))[0]

    def bool(self) -> bool:
        value = self.buf[self._advance(1)]
        if value > 1:
            raise DecodeError(f"boolean byte {value} is neither 0 nor 1")
        return value == 1

    def uuid(self) -> uuid.UUID:
        pos = self._advance(16)
        return uuid.UUID(bytes=bytes(self.buf[pos:pos + 16]))

    def uvarint(self, max_bytes: int = 5) -> int:
        """Unsigned LEB128; 5 bytes at most for 32-bit values, 10 for 64-bit."""
        buf, pos, end = self.buf, self.pos, self.end
        if pos < end and buf[pos] < 0x80:  # one byte: most lengths, counts and tag sections
            self.pos = pos + 1
            return buf[pos]
        result = shift = 0
        for i in range(max_bytes):
            if pos >= end:
                raise DecodeError(f"truncated varint at offset {self.pos}")
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                self.pos = pos
                if max_bytes == 5 and result > 0xFFFFFFFF:
                    raise DecodeError("varint exceeds 32 bits")
                return result
            shift += 7
        raise DecodeError(f"varint longer than {max_bytes} bytes at offset {self.pos}")

    def varint(self) -> int:
        """Zigzag-encoded signed 32-bit integer."""
        n = self.uvarint(5)
        return (n >> 1) ^ -(n & 1)

    def varlong(self) -> int:
        """Zigzag-encoded signed 64-bit integer."""
        n = self.uvarint(10)
        if n >> 64:
            raise DecodeError("varlong exceeds 64 bits")
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> memoryview:
        """The next `n` bytes as a view into the buffer (no copy)."""
        pos = self._advance(n)
        return self.buf[pos:pos + n]

    def _text(self, n: int) -> str:
        try:
            return str(self.take(n), "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"string is not valid UTF-8: {exc.reason}") from None

    # Lengths: classic encodings use a signed int16/int32 with -1 for null; compact ones
    # an unsigned varint holding length + 1, with 0 for null.
    def _length(self, compact: bool, wide: bool) -> int:
        if compact:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self, compact: bool = False, nullable: bool = False) -> str | None:
        n = self._length(compact, False)
        if n < 0:
            if nullable and n == -1:
                return None
            raise DecodeError(f"invalid string length {n}")
        if n > 0x7FFF:  # compact lengths can claim more; Kafka refuses those too
            raise DecodeError(f"string length {n} exceeds 32767")
        return self._text(n)

    def bytes(self, compact: bool = False, nullable: bool = False) -> memoryview | None:
        n = self._length(compact, True)
        if n < 0:
            if nullable and n == -1:
                return None
            raise DecodeError(f"invalid bytes length {n}")
        return self.take(n)

    def array_length(self, compact: bool = False, nullable: bool = False) -> int | None:
        """An array's element count, refused when it exceeds the bytes left.

        Every element of every array in the protocol occupies at least one byte, so a
        count larger than the remaining input is a forged length.
        """
        n = self._length(compact, True)
        if n < 0:
            if nullable and n == -1:
                return None
            raise DecodeError(f"invalid array length {n}")
        if n > self.end - self.pos:
            raise DecodeError(f"array of {n} elements in {self.end - self.pos} bytes")
        return n


class Writer:
    """Accumulates an encoding; large byte ranges are kept as separate, uncopied chunks."""

    __slots__ = ("buf", "chunks", "size")

    def __init__(self):
        self.buf = bytearray()
        self.chunks: list = []
        self.size = 0  # bytes in completed chunks

    def __len__(self) -> int:
        return self.size + len(self.buf)

    def int8(self, v: int) -> None:
        self._pack(_I8, v)

    def int16(self, v: int) -> None:
        self._pack(_I16, v)

    def int32(self, v: int) -> None:
        self._pack(_I32, v)

    def int64(self, v: int) -> None:
        self._pack(_I64, v)

    def uint16(self, v: int) -> None:
        self._pack(_U16, v)

    def uint32(self, v: int) -> None:
        self._pack(_U32, v)

    def float64(self, v: float) -> None:
        self._pack(_F64, v)

    def _pack(self, fmt: struct.Struct, v) -> None:
        try:
            self.buf += fmt.pack(v)
        except (struct.error, TypeError) as exc:
            raise EncodeError(f"{v!r} does not fit {fmt.format[1:]}: {exc}") from None

    def bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uuid(self, v: uuid.UUID) -> None:
        if not isinstance(v, uuid.UUID):
            raise EncodeError(f"{v!r} is not a uuid.UUID")
        self.buf += v.bytes

    def uvarint(self, n: int) -> None:
        if n < 0:
            raise EncodeError(f"unsigned varint cannot hold {n}")
        buf = self.buf
        while n > 0x7F:
            buf.append((n & 0x7F) | 0x80)
            n >>= 7
        buf.append(n)

    def varint(self, n: int) -> None:
        if not -0x80000000 <= n <= 0x7FFFFFFF:
            raise EncodeError(f"{n} does not fit a varint")
        self.uvarint(((n << 1) ^ (n >> 31)) & 0xFFFFFFFF)

    def varlong(self, n: int) -> None:
        if not -0x8000000000000000 <= n <= 0x7FFFFFFFFFFFFFFF:
            raise EncodeError(f"{n} does not fit a varlong")
        self.uvarint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def raw(self, data) -> None:
        """Append bytes; large buffers become their own chunk instead of being copied.

        Objects that are not byte buffers but have a length (a region of a file, to be
        sent with sendfile) always become a chunk of their own.
        """
        n = len(data) if not isinstance(data, memoryview) else data.nbytes
        if n >= _ZERO_COPY_MIN or not isinstance(data, (bytes, bytearray, memoryview)):
            if self.buf:
                self.chunks.append(self.buf)
                self.size += len(self.buf)
                self.buf = bytearray()
            self.chunks.append(data)
            self.size += n
        else:
            self.buf += data

    def _length(self, n: int, compact: bool, wide: bool) -> None:
        if compact:
            self.uvarint(n + 1)
        elif wide:
            self.int32(n)
        else:
            self.int16(n)

    def string(self, v: str | None, compact: bool = False, nullable: bool = False) -> None:
        if v is None:
            if not nullable:
                raise EncodeError("null given for a non-nullable string")
            self._length(-1, compact, False)
            return
        if not isinstance(v, str):
            raise EncodeError(f"{v!r} is not a str")
        data = v.encode("utf-8")
        if len(data) > 0x7FFF:
            raise EncodeError(f"string of {len(data)} bytes exceeds 32767")
        self._length(len(data), compact, False)
        self.buf += data

    def bytes(self, v, compact: bool = False, nullable: bool = False) -> None:
        if v is None:
            if not nullable:
                raise EncodeError("null given for non-nullable bytes")
            self._length(-1, compact, True)
            return
        if isinstance(v, str):
            raise EncodeError("bytes field given a str")
        n = len(v) if not isinstance(v, memoryview) else v.nbytes
        self._length(n, compact, True)
        self.raw(v)

    def array_length(self, n: int | None, compact: bool = False, nullable: bool = False) -> None:
        if n is None:
            if not nullable:
                raise EncodeError("null given for a non-nullable array")
            n = -1
        self._length(n, compact, True)

    def getchunks(self) -> list:
        """The encoding as a list of buffers, for `writelines`/`sendmsg`."""
        if self.buf:
            return self.chunks + [self.buf]
        return list(self.chunks)

    def getvalue(self) -> bytes:
        if not self.chunks:
            return bytes(self.buf)
        return b"".join(self.getchunks())
