"""Kafka's framing without I/O: a frame is a 4-byte big-endian size and that many bytes.
One `FrameReader` per connection turns the bytes a socket delivers into frames, for the
broker's listener and the client alike (both asyncio BufferedProtocols, which ask for a
buffer to read into, `get_buffer`, then say how much arrived, `buffer_updated`).

Frames up to a read buffer's size are copied out of it as a bytearray; the read buffer
goes back to its pool once it holds no partial frame. A larger frame is read in place
into a buffer of its own from `FrameBuffers` and handed over as a view of it: a fresh
anonymous mapping faults in every page as a frame is read into it (about half of the
broker's CPU on 1 MB produce requests), so a few buffers are kept and lent again. A kept
buffer is lent again only once no view of it remains: its holders (handlers, decoded
responses) are only ever given views, and `mmap.resize` refuses while one exists.
"""

from __future__ import annotations

import collections
import mmap
import struct
from typing import Callable, Union

__all__ = ["FrameBuffers", "FrameReader", "FrameSizeError", "ReadBuffers"]

_SIZE = struct.Struct(">i")

Frame = Union[bytearray, memoryview]  # a small frame's copy, or a view of a large frame's buffer


class FrameSizeError(ValueError):
    """A frame announced a size outside [4, max_size]: the stream cannot be read on.
    `size` is the announced size; its four bytes (`_SIZE.pack(size)`) are what arrived."""

    def __init__(self, size: int, max_size: int):
        super().__init__(f"frame size {size} outside [4, {max_size}]")
        self.size = size
        self.max_size = max_size


class ReadBuffers:
    """Read buffers of `size` bytes, a few of them (`keep`) kept for reuse: a connection
    holds one only while a partial frame is in it."""

    def __init__(self, size: int, keep: int):
        self.size = size
        self._keep = keep
        self._kept: list[bytearray] = []

    def lend(self) -> bytearray:
        return self._kept.pop() if self._kept else bytearray(self.size)

    def give_back(self, buf: bytearray) -> None:
        if len(self._kept) < self._keep:
            self._kept.append(buf)


class FrameBuffers:
    """Buffers for frames larger than a read buffer, lent to read a frame into in place."""

    def __init__(self, keep: int, max_kept_bytes: int):
        self._keep = keep
        self._max_kept_bytes = max_kept_bytes
        self._kept: collections.deque[mmap.mmap] = collections.deque()  # oldest first

    def lend(self, size: int) -> mmap.mmap:
        """A buffer of exactly `size` bytes, to read a frame into: a kept one no view
        refers to any more, else a new mapping. It is not lent again until `keep`."""
        for frame in self._kept:
            try:
                frame.resize(size)
            except BufferError:
                continue
            self._kept.remove(frame)
            return frame
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)

    def keep(self, frame: mmap.mmap) -> memoryview:
        """The filled `frame` as the view to hand over; the buffer is kept for a later
        `lend` (the oldest let go past `keep` buffers; large ones are not kept)."""
        if len(frame) <= self._max_kept_bytes:
            self._kept.append(frame)
            if len(self._kept) > self._keep:
                self._kept.popleft()
        return memoryview(frame)


class FrameReader:
    """The frames of one connection's byte stream, each passed to `deliver` in order.
    `max_size` may change between reads (the broker's limit before and after SASL)."""

    __slots__ = ("max_size", "_deliver", "_read_buffers", "_frame_buffers", "_buf", "_start", "_end",
                 "_frame", "_filled")

    def __init__(self, deliver: Callable[[Frame], None], read_buffers: ReadBuffers,
                 frame_buffers: FrameBuffers, max_size: int):
        self.max_size = max_size
        self._deliver = deliver
        self._read_buffers = read_buffers
        self._frame_buffers = frame_buffers
        self._buf: bytearray | None = None  # lent while it holds bytes not yet cut
        self._start = self._end = 0         # those bytes: _buf[_start:_end]
        self._frame: mmap.mmap | None = None  # a large frame being read in place
        self._filled = 0                    # of _frame

    def get_buffer(self) -> memoryview:
        """Where the next bytes are to be read into."""
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        if self._buf is None:
            self._buf = self._read_buffers.lend()
        elif self._end == len(self._buf):  # a partial frame at the end: move it to the front
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start:self._end]
            self._start, self._end = 0, rest
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> bool:
        """`nbytes` more were read into the last buffer: deliver every frame they
        complete. False while a large frame is still being filled (nothing delivered).
        Raises FrameSizeError at a size outside [4, max_size], and whatever `deliver`
        raises (the frames before it delivered, the rest of the stream not read on)."""
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            if self._filled < len(frame):
                return False
            self._frame = None
            self._deliver(self._frame_buffers.keep(frame))
            return True
        self._end += nbytes
        self._cut_frames()
        return True

    def _cut_frames(self) -> None:
        """Deliver every complete frame in the read buffer; a frame larger than the
        buffer continues in a buffer of its own."""
        buf, start, end = self._buf, self._start, self._end
        deliver, max_size = self._deliver, self.max_size
        while end - start >= 4:
            size = _SIZE.unpack_from(buf, start)[0]
            if size < 4 or size > max_size:
                raise FrameSizeError(size, max_size)
            if end - start - 4 >= size:
                self._start = start = start + 4 + size
                deliver(buf[start - size:start])
                continue
            if 4 + size > len(buf):
                have = end - start - 4
                self._frame = self._frame_buffers.lend(size)
                self._frame[:have] = buf[start + 4:end]
                self._filled = have
                start = end
            break
        if start == end:
            self._read_buffers.give_back(buf)
            self._buf = None
            start = end = 0
        self._start, self._end = start, end

    def close(self) -> None:
        """The connection is gone: its read buffer goes back to the pool."""
        if self._buf is not None:
            self._read_buffers.give_back(self._buf)
            self._buf = None
        self._frame = None
