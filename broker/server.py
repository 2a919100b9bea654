"""The network layer: moves frames between sockets and the broker; no protocol logic.

Reading: bytes arrive in a read buffer of the connection's own, from which every
complete small frame is cut (several per read when a client pipelines). A frame too
large for that buffer is read straight into a buffer of its own (so the broker may
patch record batches in place): an anonymous private mapping of the frame's size, whose
pages the kernel provides as bytes actually arrive, so a forged size prefix costs
nothing until the bytes exist and a large frame is never copied or regrown. A prefix
above `socket.request.max.bytes` closes the connection.

Answering: requests on one connection are answered one at a time, in order, as Kafka
does. A request the handler answers at once is answered inside the read callback, and
the responses to all requests of one read leave in one write. A request that must wait
(a long-poll Fetch, a JoinGroup) is awaited in a task, after what is ready has been
written; requests behind it queue, and reading pauses while a few are queued or while
the client is not reading its responses. A request waiting in a long poll is cancelled
when its client leaves or ends its input, freeing the connection at once.
Response chunks that are file regions go out with sendfile (zero copy) when large,
with pread when small.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import mmap
import socket
import struct
from typing import Awaitable, Callable, Union

from broker.storage.segment import FileRegion

log = logging.getLogger("sluice.broker")

_SIZE = struct.Struct(">i")
_SENDFILE_MIN = 64 * 1024
_READ_BUFFER = 64 * 1024
_MAX_QUEUED = 8

Chunks = Union[list, None]  # response chunks (bytes-like or FileRegion), or None: no response
# handler(frame, client_host) -> chunks, or an awaitable of them when the request must wait
Handler = Callable[[bytearray, str], Union[Chunks, Awaitable[Chunks]]]


class CloseConnection(Exception):
    """Raised by a handler: the request cannot be answered, so the connection closes."""


class _FdFile:
    """What loop.sendfile needs of a file: its descriptor."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def _size_of(chunks: list) -> int:
    return sum(c.nbytes if isinstance(c, memoryview) else len(c) for c in chunks)


class Connection(asyncio.BufferedProtocol):
    def __init__(self, handler: Handler, max_request_bytes: int, connections: set):
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self._buf = bytearray(_READ_BUFFER)
        self._start = self._end = 0       # bytes of frames not yet cut: _buf[_start:_end]
        self._frame: mmap.mmap | None = None  # a large frame being read in place
        self._expected = self._filled = 0
        self._frames: collections.deque = collections.deque()  # bytearray or mmap
        self._out: list = []              # response bytes for the next write
        self._task: asyncio.Task | None = None  # awaits a waiting request or a sendfile
        self._waiting = False             # the task is inside a handler's wait
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False
        self._eof = False
        self._closed = False

    # -- reading ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_host = peer[0] if peer else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        if self._end == len(self._buf):  # a partial frame at the end: move it to the front
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start:self._end]
            self._start, self._end = 0, rest
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < self._expected:
                return
            self._frames.append(self._frame)
            self._frame = None
        else:
            self._end += nbytes
            if not self._cut_frames():
                return
        self._answer()

    def _cut_frames(self) -> bool:
        """Move every complete frame out of the read buffer; a frame larger than the
        buffer continues in a buffer of its own. False when the connection closed."""
        buf, start, end = self._buf, self._start, self._end
        while end - start >= 4:
            size = _SIZE.unpack_from(buf, start)[0]
            if size < 4 or size > self.max_request_bytes:
                log.warning("closing %s: request size %d outside [4, %d]", self.peer, size,
                            self.max_request_bytes)
                self.close()
                return False
            if end - start - 4 >= size:
                self._frames.append(buf[start + 4:start + 4 + size])
                start += 4 + size
                continue
            if 4 + size > len(buf):
                have = end - start - 4
                self._frame = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)
                self._frame[:have] = buf[start + 4:end]
                self._expected, self._filled = size, have
                start = end
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return True

    def eof_received(self) -> bool:
        self._eof = True
        self._stop_waiting()
        self._answer()
        return True  # keep the transport open until queued responses are written

    def connection_lost(self, exc) -> None:
        self._closed = True
        self.connections.discard(self)
        self._frames.clear()
        self._writable.set()
        self._stop_waiting()

    def _stop_waiting(self) -> None:
        """The client is gone or has sent its last byte: a request parked in a long
        poll (a Fetch waiting up to its max_wait_ms, which may be days) would hold this
        connection open and its task alive that long, so it is cancelled and the
        connection closes, as Kafka closes on end of input."""
        if self._waiting and self._task is not None:
            self._task.cancel()

    # -- answering -------------------------------------------------------------------
    def _answer(self) -> None:
        """Answer queued requests in order until one must wait, then write."""
        while self._frames and self._task is None and not self._closed and self._writable.is_set():
            try:
                result = self.handler(self._frames.popleft(), self.client_host)
                if inspect.isawaitable(result):
                    self._start_task(result, None)
                elif result is not None:
                    self._add_response(result)
            except Exception as exc:
                self._close_after(exc)
                return
        self._flush()
        if self._closed:
            return
        if self._eof and not self._frames and self._task is None:
            self.close()
            return
        queued = len(self._frames)
        if queued >= _MAX_QUEUED and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif self._reading_paused and queued < _MAX_QUEUED // 2:
            self._reading_paused = False
            self.transport.resume_reading()

    def _add_response(self, chunks: list) -> None:
        """Queue a response for the next write; one holding a large file region is
        sent by a task, with sendfile."""
        if any(isinstance(c, FileRegion) and c.length >= _SENDFILE_MIN for c in chunks):
            self._start_task(None, chunks)
            return
        self._out.append(_SIZE.pack(_size_of(chunks)))
        for chunk in chunks:
            self._out.append(self._file_bytes(chunk) if isinstance(chunk, FileRegion) else chunk)

    @staticmethod
    def _file_bytes(region: FileRegion) -> bytes:
        data = region.read()
        if len(data) != region.length:
            raise ConnectionError("log segment shrank while being read")
        return data

    def _flush(self) -> None:
        if self._out and not self._closed:
            self.transport.writelines(self._out)
        self._out = []

    def _close_after(self, exc: Exception) -> None:
        """A request could not be answered: write what is ready, then close."""
        if isinstance(exc, CloseConnection):
            log.warning("closing %s: %s", self.peer, exc)
        elif not isinstance(exc, (ConnectionError, asyncio.CancelledError)):
            log.error("closing %s after an internal error", self.peer, exc_info=exc)
        self._flush()
        self.close()

    def _start_task(self, awaitable, chunks: Chunks) -> None:
        self._flush()  # what is ready goes out before the wait
        self._task = asyncio.get_running_loop().create_task(self._finish(awaitable, chunks))

    async def _finish(self, awaitable, chunks: Chunks) -> None:
        """Await a waiting request's response (when `awaitable`), send it, go on answering."""
        try:
            if awaitable is not None:
                if self._closed:
                    if inspect.iscoroutine(awaitable):
                        awaitable.close()
                    return
                self._waiting = True
                try:
                    chunks = await awaitable
                finally:
                    self._waiting = False
            if chunks is not None and not self._closed:
                await self._send(chunks)
        except (Exception, asyncio.CancelledError) as exc:
            self._close_after(exc)
            return
        finally:
            self._task = None
        self._answer()

    async def _send(self, chunks: list) -> None:
        loop = asyncio.get_running_loop()
        pending = [_SIZE.pack(_size_of(chunks))]
        for chunk in chunks:
            if not isinstance(chunk, FileRegion):
                pending.append(chunk)
            elif chunk.length < _SENDFILE_MIN:
                pending.append(self._file_bytes(chunk))
            else:
                self.transport.writelines(pending)
                pending = []
                await self._writable.wait()
                sent = await loop.sendfile(self.transport, _FdFile(chunk.fd), chunk.position,
                                           chunk.length, fallback=True)
                if sent != chunk.length:
                    raise ConnectionError("log segment shrank while being sent")
        if pending:
            self.transport.writelines(pending)
        await self._writable.wait()

    # -- writing ---------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        if self._task is None:
            self._answer()

    def shutdown(self) -> asyncio.Task | None:
        """Answer what has arrived, then close; the task of a request still being
        answered, if any."""
        self._eof = True
        if self._task is None:
            self._answer()
        return self._task

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self._closed = True


class KafkaServer:
    """Accepts connections on host:port and feeds their frames to `handler`."""

    def __init__(self, handler: Handler, host: str, port: int, max_request_bytes: int):
        self.handler = handler
        self.host, self.port = host, port
        self.max_request_bytes = max_request_bytes
        self.connections: set[Connection] = set()
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self.handler, self.max_request_bytes, self.connections),
            self.host, self.port, reuse_address=True, backlog=1024)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (bounded), close connections."""
        if self._server is None:
            return
        self._server.close()
        tasks = [task for conn in list(self.connections) if (task := conn.shutdown()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_seconds)
        for conn in list(self.connections):
            conn.close()
        await self._server.wait_closed()
