"""wire.frames.FrameReader, the one frame reader of the broker's listener and the client,
without a socket: bytes in, frames out, however the bytes are split across reads."""

from __future__ import annotations

import mmap
import struct

import pytest

from wire.frames import FrameBuffers, FrameReader, FrameSizeError, ReadBuffers

_SIZE = struct.Struct(">i")
READ_BUFFER = 64


def framed(*payloads: bytes) -> bytes:
    return b"".join(_SIZE.pack(len(p)) + p for p in payloads)


class Stream:
    """A FrameReader fed as a BufferedProtocol's transport feeds it, at most `chunk`
    bytes a read."""

    def __init__(self, max_size: int = 1 << 20):
        self.frames: list = []
        self.read_buffers = ReadBuffers(READ_BUFFER, 1)
        self.frame_buffers = FrameBuffers(2, 1 << 20)
        self.reader = FrameReader(self.frames.append, self.read_buffers, self.frame_buffers, max_size)

    def feed(self, data: bytes, chunk: int) -> None:
        while data:
            buf = self.reader.get_buffer()
            n = min(len(buf), chunk, len(data))
            buf[:n] = data[:n]
            self.reader.buffer_updated(n)
            data = data[n:]


@pytest.mark.parametrize("chunk", [1, 3, 5, 64, 1000])
def test_frames_split_across_reads_come_out_whole_and_in_order(chunk):
    payloads = [bytes([i]) * (4 + i * 7) for i in range(12)]
    stream = Stream()
    stream.feed(framed(*payloads), chunk)
    assert [bytes(f) for f in stream.frames] == payloads


def test_many_frames_in_one_read_are_all_delivered_and_the_read_buffer_given_back():
    stream = Stream()
    data = framed(b"abcd", b"efghij", b"klmnopq")
    buf = stream.reader.get_buffer()
    buf[:len(data)] = data
    assert stream.reader.buffer_updated(len(data))
    assert [bytes(f) for f in stream.frames] == [b"abcd", b"efghij", b"klmnopq"]
    assert all(isinstance(f, bytearray) for f in stream.frames), "small frames are copies"
    assert stream.read_buffers.lend() is buf.obj, "the read buffer went back to its pool once it held no partial frame"


@pytest.mark.parametrize("size", [0, 3, -1])
def test_a_size_below_four_is_refused(size):
    stream = Stream()
    with pytest.raises(FrameSizeError, match=rf"frame size {size} outside \[4, ") as caught:
        stream.feed(_SIZE.pack(size) + b"xxxx", 64)
    assert caught.value.size == size
    assert stream.frames == []


def test_a_size_over_the_limit_is_refused_before_its_bytes_arrive():
    stream = Stream(max_size=100)
    stream.feed(framed(b"x" * 100), 1000)
    with pytest.raises(FrameSizeError, match=r"frame size 101 outside \[4, 100\]") as caught:
        stream.feed(_SIZE.pack(101), 4)
    assert (caught.value.size, caught.value.max_size) == (101, 100)
    assert [len(f) for f in stream.frames] == [100]


def test_the_limit_may_change_between_reads():
    stream = Stream(max_size=10)
    stream.reader.max_size = 1000
    stream.feed(framed(b"y" * 500), 64)
    assert [len(f) for f in stream.frames] == [500]


@pytest.mark.parametrize("chunk", [7, 4096])
def test_a_large_frame_is_read_in_place_and_handed_over_as_a_view(chunk):
    large = bytes(range(256)) * 40  # far above the 64-byte read buffer
    stream = Stream()
    stream.feed(framed(b"head", large, b"tail"), chunk)
    assert [bytes(f) for f in stream.frames] == [b"head", large, b"tail"]
    view = stream.frames[1]
    assert isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap)


def test_a_large_frame_is_delivered_only_once_complete():
    large = b"z" * 1000
    stream = Stream()
    data = framed(large)
    stream.feed(data[:500], 500)
    assert stream.frames == []
    buf = stream.reader.get_buffer()
    assert len(buf) == len(data) - 500, "the rest is read straight into the frame's buffer"
    buf[:] = data[500:]
    assert stream.reader.buffer_updated(len(buf))
    assert [bytes(f) for f in stream.frames] == [large]


def test_a_large_frame_buffer_serves_again_once_no_view_of_it_remains():
    stream = Stream()
    stream.feed(framed(b"a" * 1000), 4096)
    first = stream.frames.pop()
    buffer = first.obj
    stream.feed(framed(b"b" * 1000), 4096)
    assert stream.frames[-1].obj is not buffer, "a buffer still viewed is not lent again"
    assert bytes(first) == b"a" * 1000
    first.release()
    second = stream.frames.pop()
    buffers = (buffer, second.obj)
    second.release()
    stream.feed(framed(b"c" * 900), 4096)
    assert stream.frames[-1].obj in buffers
    assert bytes(stream.frames[-1]) == b"c" * 900
