"""The network layer: moves frames between sockets and the broker; no protocol logic.

Each connection reads size-prefixed frames straight into a buffer of their own (so the
broker may patch record batches in place), grown as bytes actually arrive: a forged
size prefix costs nothing until the bytes exist, and a prefix above
`socket.request.max.bytes` closes the connection. Requests on one connection are
handled one at a time, in order, as Kafka does, so responses keep request order;
reading pauses while a few requests are queued. A request waiting in a long poll is
cancelled when its client leaves or ends its input, freeing the connection at once.
Response chunks that are file regions go out with sendfile (zero copy) when large,
with pread when small.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Awaitable, Callable

from broker.storage.segment import FileRegion

log = logging.getLogger("sluice.broker")

_SIZE = struct.Struct(">i")
_SENDFILE_MIN = 64 * 1024
_FIRST_ALLOCATION = 64 * 1024
_MAX_QUEUED = 8

# handler(frame: bytearray, client_host: str) -> response chunks (bytes-like or FileRegion) or None
Handler = Callable[[bytearray, str], Awaitable["list | None"]]


class CloseConnection(Exception):
    """Raised by a handler: the request cannot be answered, so the connection closes."""


class _FdFile:
    """What loop.sendfile needs of a file: its descriptor."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


class Connection(asyncio.BufferedProtocol):
    def __init__(self, handler: Handler, max_request_bytes: int, connections: set):
        self.handler = handler
        self.max_request_bytes = max_request_bytes
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self._size_buf = bytearray(4)
        self._frame: bytearray | None = None
        self._expected = 0
        self._filled = 0
        self._queue: asyncio.Queue[bytearray | None] = asyncio.Queue()
        self._reading_paused = False
        self._writable = asyncio.Event()
        self._writable.set()
        self._worker: asyncio.Task | None = None
        self._in_handler = False
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
        self._worker = asyncio.get_running_loop().create_task(self._serve())

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._size_buf)[self._filled:]
        if self._filled == len(self._frame):  # grow only as bytes arrive
            self._frame.extend(bytes(min(len(self._frame), self._expected - len(self._frame))))
        return memoryview(self._frame)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._frame is None:
            if self._filled < 4:
                return
            size = _SIZE.unpack(self._size_buf)[0]
            if size < 4 or size > self.max_request_bytes:
                log.warning("closing %s: request size %d outside [4, %d]", self.peer, size,
                            self.max_request_bytes)
                self.close()
                return
            self._expected = size
            self._frame = bytearray(min(size, _FIRST_ALLOCATION))
            self._filled = 0
            return
        if self._filled == self._expected:
            self._queue.put_nowait(self._frame)
            self._frame = None
            self._filled = 0
            if self._queue.qsize() >= _MAX_QUEUED and not self._reading_paused:
                self._reading_paused = True
                self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._queue.put_nowait(None)
        self._stop_waiting()
        return True  # keep the transport open until queued responses are written

    def connection_lost(self, exc) -> None:
        self._closed = True
        self.connections.discard(self)
        self._writable.set()
        self._queue.put_nowait(None)
        self._stop_waiting()

    def _stop_waiting(self) -> None:
        """The client is gone or has sent its last byte: a request parked in a long
        poll (a Fetch waiting up to its max_wait_ms, which may be days) would hold this
        connection open and its task alive that long, so it is cancelled and the
        connection closes, as Kafka closes on end of input. Only a handler suspended
        at an await is seen here: one that never waits (Produce) runs to completion."""
        if self._in_handler and self._worker is not None:
            self._worker.cancel()

    # -- writing ---------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                frame = await self._queue.get()
                if frame is None or self._closed:
                    break
                if self._reading_paused and self._queue.qsize() < _MAX_QUEUED // 2:
                    self._reading_paused = False
                    self.transport.resume_reading()
                self._in_handler = True
                try:
                    chunks = await self.handler(frame, self.client_host)
                finally:
                    self._in_handler = False
                if chunks is None:
                    continue
                if self._closed:
                    break
                await self._send(loop, chunks)
        except ConnectionError:
            pass
        except CloseConnection as exc:
            log.warning("closing %s: %s", self.peer, exc)
        except Exception:
            log.exception("closing %s after an internal error", self.peer)
        finally:
            self.close()

    async def _send(self, loop, chunks: list) -> None:
        size = sum(len(c) if not isinstance(c, memoryview) else c.nbytes for c in chunks)
        pending = [_SIZE.pack(size)]
        for chunk in chunks:
            if not isinstance(chunk, FileRegion):
                pending.append(chunk)
                continue
            if chunk.length < _SENDFILE_MIN:
                data = chunk.read()
                if len(data) != chunk.length:
                    raise ConnectionError("log segment shrank while being read")
                pending.append(data)
                continue
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
        for conn in list(self.connections):
            conn._queue.put_nowait(None)
        workers = [c._worker for c in self.connections if c._worker is not None]
        if workers:
            await asyncio.wait(workers, timeout=grace_seconds)
        for conn in list(self.connections):
            conn.close()
        await self._server.wait_closed()
