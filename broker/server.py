"""The network layer: moves frames between sockets and the broker; no protocol logic.

Listeners: one or more endpoints (Kafka's `listeners`), each with its name and security
protocol, which every connection's Session carries to the handlers; SSL and SASL_SSL
endpoints speak TLS (asyncio's, the handshake bounded by _AUTHENTICATION_TIMEOUT_S). A
connection that must authenticate with SASL reads frames of at most
`sasl.server.max.receive.size` until it has, and closes if it has not within that same
bound. Zero-copy sends (sendfile) go straight to the socket, so only without TLS; a TLS
connection's file regions are read in 1 MiB pieces and written through the transport.

Reading: each connection's wire.frames.FrameReader cuts its frames (the client's
connections use the same reader). Bytes arrive in a read buffer, from which every
complete small frame is cut (several per read when a client pipelines). The server lends
read buffers from a small pool and a connection gives its own back once it holds no
partial frame, so an idle connection holds none. A frame too large for that buffer is read straight into a buffer of its own (so the broker may
patch record batches in place): an anonymous private mapping of the frame's size, whose
pages the kernel provides as bytes actually arrive, so a forged size prefix costs
nothing until the bytes exist and a large frame is never copied or regrown. A prefix
above `socket.request.max.bytes` closes the connection.

Answering: requests on one connection are handled one at a time, in order, and their
responses leave in that order. A request the handler answers at once is answered inside
the read callback, and the responses to all requests of one read leave in one write. A
request that must wait (a long-poll Fetch, a JoinGroup) is awaited by a writer task,
after what is ready has been written, and the requests behind it queue. A request that
has taken effect and only waits to be acknowledged (`ResponseLater`: an acks=all
produce waiting for the followers) does not hold back the requests behind it: a client
with several produce requests in flight has them all appended and replicated together,
where Kafka, which reads a connection's next request only once it answered the last,
has them wait for replication one after another. Reading pauses while a few requests
are queued or awaiting their response, or while the client is not reading its responses. A request waiting in a long poll is cancelled
when its client leaves or ends its input, freeing the connection at once.
Response chunks that are file regions go out with sendfile (zero copy) when large,
with pread when small.

Throttling (KIP-219): a handler's answer to a client over its quota (`Throttled`) is
sent, then the connection reads and answers nothing more for the throttle time, so that
a client ignoring the response's throttle_time_ms is held back all the same.

Limits (Kafka's config names and defaults):
- max.connections (2147483647): at the limit the server stops accepting; new clients
  wait in the listen backlog until a connection closes, as Kafka's acceptor waits.
- max.connections.per.ip (2147483647), max.connections.per.ip.overrides ("host:count,
  ..."): a connection over its host's limit is closed as soon as it is accepted.
- connections.max.idle.ms (600000): a connection that for that long has read nothing,
  had no response taken by its client and no request waiting in a long poll is closed
  without flushing (so also one whose client stopped reading, or stopped mid-request);
  a sweep runs every quarter of it (at most every 30 s).
- queued.max.requests (500): Kafka bounds the requests waiting for a handler thread;
  here the handler runs at once unless a connection is blocked (a request waiting, or
  its client not reading), so the bound is on requests read but not yet answered across
  all connections. At the bound, connections holding such requests stop reading until
  half are answered; the others read on, as what they send is answered at once (so a
  few clients that never read cannot stall the rest).
- Per connection: reading pauses at 8 requests queued or awaiting their response, or
  1 MiB of queued ones; responses are written every 64 KiB, and the transport's write
  buffer pauses answering above asyncio's high-water mark (64 KiB) until the client
  reads. A connection thus holds at most a 64 KiB read buffer, about 1 MiB of requests
  plus one request of up to socket.request.max.bytes (100 MiB; pages exist only as bytes
  arrive), and its write buffer plus the responses of those 8 requests.
- Accepting: out of descriptors (EMFILE and the like), accepting stops for 50 ms,
  doubling to 1 s while it lasts; that, refused connections and connection-closing
  warnings are logged at most 5 times per 10 s each, with a count of the rest.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import errno
import inspect
import logging
import os
import socket
import ssl
import struct
import time
from typing import Awaitable, Callable, Union

from wire.frames import FrameBuffers, FrameReader, FrameSizeError, ReadBuffers

from broker.handler_results import CloseConnection, ResponseLater, Throttled
from broker.security.listeners import Endpoint
from broker.security.session import Session
from broker.storage.segment import FileRegion
from broker.throttled_log import ThrottledLog

log = logging.getLogger("sluice.broker")

_SIZE = struct.Struct(">i")
_SENDFILE_MIN = 64 * 1024
_COPY_PIECE = 1 << 20  # a TLS connection's file region is written in pieces of this size
_READ_BUFFER = 64 * 1024
_POOLED_READ_BUFFERS = 16
_KEPT_FRAMES = 4                   # large frame buffers kept for reuse (wire.frames),
_KEPT_FRAME_MAX = 2 << 20          # each of at most this size
_MAX_QUEUED = 8                    # frames read but not yet answered, per connection
_MAX_QUEUED_BYTES = 1 << 20        # and their bytes: reading pauses at either
_MAX_OUT_BYTES = 64 * 1024         # responses gathered before a write (which may pause writing)
_BACKLOG = 1024
_ACCEPTS_PER_WAKE = 64
_ACCEPT_RETRY_MIN, _ACCEPT_RETRY_MAX = 0.05, 1.0  # seconds: back-off while descriptors run out
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_AUTHENTICATION_TIMEOUT_S = 10.0  # TLS handshake, then SASL: a connection that takes longer closes

Chunks = Union[list, None]  # response chunks (bytes-like or FileRegion), or None: no response
# handler(frame, session) -> chunks, or an awaitable of them when the request must wait
Handler = Callable[[bytearray, Session], Union[Chunks, Awaitable[Chunks]]]


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one listener, under Kafka's names (see the module docstring)."""

    max_request_bytes: int = 100 * 1024 * 1024        # socket.request.max.bytes
    max_connections: int = (1 << 31) - 1               # max.connections
    max_connections_per_ip: int = (1 << 31) - 1        # max.connections.per.ip
    per_ip_overrides: dict = dataclasses.field(default_factory=dict)  # host -> count
    idle_ms: int = 600_000                              # connections.max.idle.ms
    queued_max_requests: int = 500                      # queued.max.requests
    sasl_max_receive_bytes: int = 524288                # sasl.server.max.receive.size: frames before
                                                        # a SASL connection has authenticated


_log_closing = ThrottledLog(log, logging.WARNING)
_log_internal_error = ThrottledLog(log, logging.ERROR)
_log_refused = ThrottledLog(log, logging.WARNING)
_log_accept_error = ThrottledLog(log, logging.ERROR)


def _loop_exception(loop, context) -> None:
    """asyncio's handler, but for one CPython 3.11 slip: a peer resetting a connection
    while loop.sendfile sends on it makes the transport tell sendfile's waiter, done
    already (the write buffer had drained), that the connection closed, which raises
    InvalidStateError after everything else is done; sendfile then fails on the closed
    socket as it should. Logged at debug level instead of as an error."""
    if isinstance(context.get("exception"), asyncio.InvalidStateError) \
            and "_call_connection_lost" in repr(context.get("handle")):
        log.debug("asyncio: %s (the peer closed during a sendfile)", context.get("message"))
        return
    loop.default_exception_handler(context)


class _FdFile:
    """What loop.sendfile needs of a file: its descriptor, and for asyncio's fallback (when
    os.sendfile fails before sending anything) positioned reads."""

    __slots__ = ("_fd", "_position")

    def __init__(self, fd: int):
        self._fd = fd
        self._position = 0

    def fileno(self) -> int:
        return self._fd

    def seek(self, position: int) -> None:
        self._position = position

    def readinto(self, buffer) -> int:
        n = os.preadv(self._fd, [buffer], self._position)
        self._position += n
        return n


def _size_of(chunks: list) -> int:
    return sum(c.nbytes if isinstance(c, memoryview) else len(c) for c in chunks)


class Connection(asyncio.BufferedProtocol):
    def __init__(self, server: "KafkaServer", endpoint: Endpoint, session: Session):
        self.server = server
        self.endpoint = endpoint
        self.handler = server.handler
        self.max_request_bytes = server.limits.max_request_bytes
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.session = session
        self.last_active = time.monotonic()  # of the last bytes read or response finished
        self._reader = FrameReader(self._queue, server.read_buffers, server.frame_buffers,
                                   self._max_frame_bytes())
        self._fd = -1  # the socket's, for sendfile straight to it
        self._frames: collections.deque = collections.deque()  # bytearray, or a view of a large frame
        self._queued_bytes = 0            # of _frames
        self._out: list = []              # response bytes for the next write
        self._out_bytes = 0
        self._replies: collections.deque = collections.deque()  # (awaitable or chunks, blocking)
        self._blocking = 0                # of _replies: answering waits while any
        self._task: asyncio.Task | None = None  # sends _replies in order
        self._waiting = False             # the task is awaiting a response
        self._writable = asyncio.Event()
        self._writable.set()
        self._reading_paused = False
        self._muted_until = 0.0          # the event loop's time the throttle time ends (Throttled)
        self._unmute: asyncio.TimerHandle | None = None
        self._eof = False
        self._closed = False

    # -- reading ---------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        """Called once TLS, if any, has shaken hands. Zero-copy sends go straight to the
        socket, so only on connections without TLS."""
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        sock = transport.get_extra_info("socket")
        tls = transport.get_extra_info("ssl_object") is not None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not tls:
                self._fd = sock.fileno()
        certificate = transport.get_extra_info("peercert") if tls else None
        if certificate and self.endpoint.principal_of_certificate is not None:
            self.session.principal = self.endpoint.principal_of_certificate(certificate)
        if not self.session.authenticated:
            asyncio.get_running_loop().call_later(_AUTHENTICATION_TIMEOUT_S, self._authentication_due)
        self.server.connections.add(self)

    def _authentication_due(self) -> None:
        if not self.session.authenticated and not self._closed:
            _log_closing("closing %s: not authenticated within %g s", self.peer, _AUTHENTICATION_TIMEOUT_S)
            self.abort()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        reader = self._reader
        reader.max_size = self._max_frame_bytes()
        try:
            if not reader.buffer_updated(nbytes):
                return
        except FrameSizeError as exc:
            _log_closing("closing %s: request size %d outside [4, %d]", self.peer, exc.size, exc.max_size)
            self.close()
            return
        self._answer()

    def _max_frame_bytes(self) -> int:
        """socket.request.max.bytes, and sasl.server.max.receive.size until authenticated."""
        if self.session.authenticated:
            return self.max_request_bytes
        return min(self.max_request_bytes, self.server.limits.sasl_max_receive_bytes)

    def _queue(self, frame) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        self.server.requests_queued(1)

    def _take(self):
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        self.server.requests_queued(-1)
        return frame

    def eof_received(self) -> bool:
        self._eof = True
        self._stop_waiting()
        self._answer()
        # Keep the transport open until queued responses are written; TLS has no half
        # close: asyncio closes a TLS transport at the end of input whatever we return.
        return self._fd >= 0 or self.transport.get_extra_info("ssl_object") is None

    def connection_lost(self, exc) -> None:
        self._closed = True
        self._reader.close()
        self.server.connection_closed(self)
        self.server.requests_queued(-len(self._frames))
        self._frames.clear()
        self._queued_bytes = 0
        self._writable.set()
        self._stop_waiting()
        if self._unmute is not None:
            self._unmute.cancel()
        if self._task is None:  # else the task drops them as it ends
            self._drop_replies()

    def _stop_waiting(self) -> None:
        """The client is gone or has sent its last byte: a request parked in a long
        poll (a Fetch waiting up to its max_wait_ms, which may be days) would hold this
        connection open and its task alive that long, so it is cancelled and the
        connection closes, as Kafka closes on end of input."""
        if self._waiting and self._task is not None:
            self._task.cancel()

    def update_reading(self) -> None:
        """Pause reading while this connection holds a few unanswered frames or a
        megabyte of them, or holds any while the broker holds queued.max.requests;
        resume at half of each. A muted connection (Throttled) reads nothing."""
        if self._closed:
            return
        queued = len(self._frames) + len(self._replies)
        if not self._reading_paused:
            if (queued >= _MAX_QUEUED or self._queued_bytes >= _MAX_QUEUED_BYTES
                    or (queued and self.server.intake_full) or self._unmute is not None):
                self._reading_paused = True
                self.transport.pause_reading()
        elif (queued < _MAX_QUEUED // 2 and self._queued_bytes < _MAX_QUEUED_BYTES // 2
              and not (queued and self.server.intake_full) and self._unmute is None):
            self._reading_paused = False
            self.transport.resume_reading()

    def _mute(self, seconds: float) -> None:
        """Read and answer nothing for `seconds` (or until an earlier mute ends, if later)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + seconds
        if seconds <= 0 or self._closed or until <= self._muted_until:
            return
        if self._unmute is not None:
            self._unmute.cancel()
        self._muted_until = until
        self._unmute = loop.call_at(until, self._unmuted)
        self.update_reading()

    def _unmuted(self) -> None:
        self._unmute = None
        self.last_active = time.monotonic()
        self.update_reading()
        if not self._blocking:
            self._answer()

    def idle(self, now: float, idle_seconds: float) -> bool:
        """For idle_seconds nothing read, no response finished or taken by the client,
        and no request being answered by a task (a long poll, a sendfile). Requests
        queued without a task wait for a client that does not read: they do not count."""
        return now - self.last_active >= idle_seconds and self._task is None

    # -- answering -------------------------------------------------------------------
    def _answer(self) -> None:
        """Answer queued requests in order until one blocks the rest or the connection
        is muted, then write."""
        while (self._frames and not self._blocking and not self._closed
               and self._writable.is_set() and self._unmute is None):
            try:
                result = self.handler(self._take(), self.session)
                if isinstance(result, Throttled):
                    self._mute(result.seconds)
                    result = result.answer
                if isinstance(result, ResponseLater):
                    self._reply_later(result.awaitable, blocking=False)
                elif inspect.isawaitable(result):
                    self._reply_later(result, blocking=True)
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
        self.update_reading()

    def _add_response(self, chunks: list) -> None:
        """Queue a response for the next write; behind a response still awaited, or when
        it holds a large file region (sent with sendfile), the writer task sends it.
        Gathered responses are written once they reach _MAX_OUT_BYTES, so that a client
        not reading pauses writing (and answering) before many responses pile up in memory."""
        if self._task is not None:
            self._replies.append((chunks, False))
            return
        if any(isinstance(c, FileRegion) and c.length >= _SENDFILE_MIN for c in chunks):
            self._reply_later(None, blocking=True, chunks=chunks)
            return
        size = _size_of(chunks)
        self._out.append(_SIZE.pack(size))
        for chunk in chunks:
            self._out.append(self._file_bytes(chunk) if isinstance(chunk, FileRegion) else chunk)
        self._out_bytes += size
        if self._out_bytes >= _MAX_OUT_BYTES:
            self._flush()

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
        self._out_bytes = 0

    def _close_after(self, exc: Exception) -> None:
        """A request could not be answered: write what is ready, then close."""
        if isinstance(exc, CloseConnection):
            _log_closing("closing %s: %s", self.peer, exc)
            if exc.last_response is not None and self._task is None:
                self._add_response(exc.last_response)
        elif not isinstance(exc, (ConnectionError, asyncio.CancelledError)):
            _log_internal_error("closing %s after an internal error", self.peer, exc_info=exc)
        self._flush()
        self.close()

    def _reply_later(self, awaitable, blocking: bool, chunks: Chunks = None) -> None:
        """Hand a response (an awaitable of it, or chunks to sendfile) to the writer task,
        starting it if need be; a blocking one stops answering until it is sent."""
        self._replies.append((awaitable if awaitable is not None else chunks, blocking))
        self._blocking += blocking
        if self._task is None:
            self._flush()  # what is ready goes out before the wait
            self._task = asyncio.get_running_loop().create_task(self._write_replies())

    async def _write_replies(self) -> None:
        """Send the handed-over responses in order, awaiting each that is not ready; when
        the last blocking one is sent, answering goes on."""
        try:
            while self._replies and not self._closed:
                entry, blocking = self._replies[0]
                if not inspect.isawaitable(entry):
                    chunks = entry
                else:
                    self._waiting = True
                    try:
                        chunks = await entry
                    finally:
                        self._waiting = False
                    if isinstance(chunks, Throttled):
                        self._mute(chunks.seconds)
                        chunks = chunks.answer
                if chunks is not None and not self._closed:
                    await self._send(chunks)
                self._replies.popleft()
                self._blocking -= blocking
                if blocking and not self._blocking:
                    self._answer()
                else:
                    self.update_reading()
        except (Exception, asyncio.CancelledError) as exc:
            self._close_after(exc)
            return
        finally:
            self._task = None
            self.last_active = time.monotonic()
            if self._closed:
                self._drop_replies()
        self._answer()

    def _drop_replies(self) -> None:
        """The connection closed: responses not yet sent are dropped, and the awaitables
        of those not yet ready closed (never started, they would warn as never awaited)."""
        for entry, _ in self._replies:
            if inspect.isawaitable(entry) and hasattr(entry, "close"):
                entry.close()
        self._replies.clear()
        self._blocking = 0

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
                if self.transport.is_closing():  # reset by the client: asyncio closes it
                    raise ConnectionError("the connection closed")
                if self._fd < 0:
                    await self._copy_region(chunk)
                    continue
                sent = self._sendfile_now(chunk)
                if sent < chunk.length:
                    sent += await loop.sendfile(self.transport, _FdFile(chunk.fd), chunk.position + sent,
                                                chunk.length - sent, fallback=True)
                if sent != chunk.length:
                    raise ConnectionError("log segment shrank while being sent")
        if pending:
            self.transport.writelines(pending)
        await self._writable.wait()

    async def _copy_region(self, region: FileRegion) -> None:
        """A large region on a TLS connection, which sendfile cannot serve: read in pieces
        and written through the transport, each once the client has taken the last (the
        transport's flow control), so at most one piece waits in memory. asyncio's own
        fallback reads 256 KiB at a time on an executor thread and waits for the buffer to
        drain completely after each."""
        position, end = region.position, region.position + region.length
        while position < end:
            data = os.pread(region.fd, min(_COPY_PIECE, end - position), position)
            if not data:
                raise ConnectionError("log segment shrank while being sent")
            self.transport.write(data)
            position += len(data)
            await self._writable.wait()
            if self.transport.is_closing():
                raise ConnectionError("the connection closed")

    def _sendfile_now(self, region: FileRegion) -> int:
        """Send what the socket takes of `region` at once, with sendfile straight to the
        socket when the transport holds nothing unsent (so the bytes keep their order); the
        bytes sent. loop.sendfile sends the rest: its set-up (pausing reading, waiting for
        the socket) costs more than a large region's copy on a fast link, once per region."""
        if self._fd < 0 or self.transport.get_write_buffer_size():
            return 0
        sent = 0
        try:
            while sent < region.length:
                n = os.sendfile(self._fd, region.fd, region.position + sent, region.length - sent)
                if n == 0:
                    break  # the file ends early: answered as a shrunk segment
                sent += n
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as exc:  # reset by the client
            raise ConnectionError(f"sending to {self.peer}: {exc}") from None
        return sent

    # -- writing ---------------------------------------------------------------------
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self.last_active = time.monotonic()  # the client has read
        self._writable.set()
        if not self._blocking:
            self._answer()

    def shutdown(self) -> asyncio.Task | None:
        """Answer what has arrived, then close; the task of a request still being
        answered, if any."""
        self._eof = True
        if not self._blocking:
            self._answer()
        return self._task

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        self._closed = True

    def abort(self) -> None:
        """Close without waiting for unsent responses (a client not reading them would
        keep the connection open)."""
        if self.transport is not None:
            self.transport.abort()
        self._closed = True




class KafkaServer:
    """Accepts connections on host:port within `limits` and feeds their frames to `handler`.

    Its own accept loop (not asyncio's create_server) so that limits apply before a
    connection costs anything, and so that running out of descriptors backs off quietly:
    asyncio 3.11's loop retries accept up to `backlog` times per wake-up on EMFILE,
    logging a traceback and scheduling a restart each time."""

    def __init__(self, handler: Handler, endpoints: list[Endpoint], limits: Limits):
        self.handler = handler
        self.endpoints = endpoints
        self.ports: dict[str, int] = {e.name: e.port for e in endpoints}  # the bound ones once started
        self.limits = limits
        self.connections: set[Connection] = set()
        self.queued_requests = 0      # frames read and not yet answered, all connections
        self.intake_full = False      # queued.max.requests reached: see Connection.update_reading
        self._open = 0                # accepted, not yet closed
        self._per_host: collections.Counter = collections.Counter()  # of those, per client host
        self._per_ip_limits: dict[str, int] = {}
        self._sockets: list[tuple[socket.socket, Endpoint]] = []
        self._accepting = False
        self._retry: asyncio.TimerHandle | None = None
        self._retry_delay = _ACCEPT_RETRY_MIN
        self._sweeper: asyncio.Task | None = None
        self._closing = False
        # All connections' (one connection is read at a time, so few read buffers are lent at once).
        self.read_buffers = ReadBuffers(_READ_BUFFER, _POOLED_READ_BUFFERS)
        self.frame_buffers = FrameBuffers(_KEPT_FRAMES, _KEPT_FRAME_MAX)  # for large frames

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.get_exception_handler() is None:
            loop.set_exception_handler(_loop_exception)
        for host, count in self.limits.per_ip_overrides.items():
            for info in await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM):
                self._per_ip_limits[info[4][0]] = count
        try:
            for endpoint in self.endpoints:
                await self._bind(endpoint)
        except OSError:
            for sock, _ in self._sockets:
                sock.close()
            self._sockets = []
            raise
        self._start_accepting()
        self._sweeper = loop.create_task(self._close_idle())

    async def _bind(self, endpoint: Endpoint) -> None:
        """Listen on every address of the endpoint's host (all of them for an empty host);
        port 0 takes a free port, the same one for each address."""
        infos = await asyncio.get_running_loop().getaddrinfo(
            endpoint.host or None, self.ports[endpoint.name], type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        bound = 0
        for family, kind, proto, _, address in dict.fromkeys(infos):
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # a family this host lacks (IPv6): skipped, as asyncio does
                continue
            self._sockets.append((sock, endpoint))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if bound:
                address = (address[0], self.ports[endpoint.name], *address[2:])
            sock.bind(address)
            sock.listen(_BACKLOG)
            sock.setblocking(False)
            self.ports[endpoint.name] = sock.getsockname()[1]
            bound += 1
        if not bound:
            raise OSError(f"no address to listen on for {endpoint.host!r} (listener {endpoint.name})")

    @property
    def port(self) -> int:
        """The first listener's port."""
        return self.ports[self.endpoints[0].name]

    # -- accepting -------------------------------------------------------------------
    def _start_accepting(self) -> None:
        loop = asyncio.get_running_loop()
        self._retry = None
        if not self._accepting and not self._closing:
            self._accepting = True
            for sock, endpoint in self._sockets:
                loop.add_reader(sock.fileno(), self._accept, sock, endpoint)

    def _stop_accepting(self) -> None:
        if self._accepting:
            self._accepting = False
            loop = asyncio.get_running_loop()
            for sock, _ in self._sockets:
                loop.remove_reader(sock.fileno())

    def _accept(self, listener: socket.socket, endpoint: Endpoint) -> None:
        """Accept what is waiting. At max.connections, stop accepting until one closes
        (new clients wait in the backlog, as Kafka's acceptor waits for a slot); out of
        descriptors, stop for a growing while (logged at a bounded rate)."""
        for _ in range(_ACCEPTS_PER_WAKE):
            if self._open >= self.limits.max_connections:
                _log_refused("max.connections (%d) reached: new connections wait",
                             self.limits.max_connections)
                self._stop_accepting()
                return
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                self._stop_accepting()
                self._retry = asyncio.get_running_loop().call_later(self._retry_delay,
                                                                    self._start_accepting)
                _log_accept_error("cannot accept connections (%s): retrying in %.2f s",
                                  exc.strerror, self._retry_delay)
                if exc.errno in _OUT_OF_RESOURCES:
                    self._retry_delay = min(2 * self._retry_delay, _ACCEPT_RETRY_MAX)
                return
            self._retry_delay = _ACCEPT_RETRY_MIN
            self._admit(sock, address[0], endpoint)

    def _admit(self, sock: socket.socket, host: str, endpoint: Endpoint) -> None:
        limit = self._per_ip_limits.get(host, self.limits.max_connections_per_ip)
        if self._per_host[host] >= limit:
            _log_refused("refusing a connection from %s: it has max.connections.per.ip (%d)",
                         host, limit)
            sock.close()
            return
        self._per_host[host] += 1
        self._open += 1
        asyncio.get_running_loop().create_task(self._connect(sock, host, endpoint))

    async def _connect(self, sock: socket.socket, host: str, endpoint: Endpoint) -> None:
        """Set the connection up; on a TLS listener that includes the handshake, bounded."""
        session = Session(host, endpoint.name, endpoint.security_protocol)
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: Connection(self, endpoint, session), sock, ssl=endpoint.ssl_context,
                ssl_handshake_timeout=_AUTHENTICATION_TIMEOUT_S if endpoint.ssl_context else None)
        except Exception as exc:
            sock.close()
            self._release(host)
            if endpoint.ssl_context is not None and isinstance(exc, (ssl.SSLError, OSError, TimeoutError)):
                _log_closing("closing %s: no TLS handshake on listener %s (%s)", host, endpoint.name,
                             exc or type(exc).__name__)
            else:
                _log_accept_error("cannot set up a connection from %s: %s", host, exc)

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self._release(conn.session.client_host)

    def _release(self, host: str) -> None:
        self._open -= 1
        self._per_host[host] -= 1
        if not self._per_host[host]:
            del self._per_host[host]
        if not self._accepting and self._retry is None:
            self._start_accepting()

    # -- limits on open connections --------------------------------------------------
    def requests_queued(self, change: int) -> None:
        """Count frames read but not answered; at queued.max.requests, connections
        holding any stop reading until the count is down to half."""
        self.queued_requests += change
        limit = self.limits.queued_max_requests
        if self.intake_full != (self.queued_requests >= limit):
            if not self.intake_full or self.queued_requests <= limit // 2:
                self.intake_full = not self.intake_full
                for conn in list(self.connections):
                    conn.update_reading()

    async def _close_idle(self) -> None:
        """Close connections idle for connections.max.idle.ms, sweeping every quarter
        of that, or every 30 s when longer."""
        idle_seconds = self.limits.idle_ms / 1000
        while True:
            await asyncio.sleep(min(idle_seconds / 4, 30.0))
            now = time.monotonic()
            for conn in [c for c in self.connections if c.idle(now, idle_seconds)]:
                log.debug("closing %s: idle for %.0f s", conn.peer, now - conn.last_active)
                conn.abort()

    async def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish (bounded), close connections."""
        if not self._sockets:
            return
        self._closing = True
        self._stop_accepting()
        if self._retry is not None:
            self._retry.cancel()
        for sock, _ in self._sockets:
            sock.close()
        self._sockets = []
        if self._sweeper is not None:
            self._sweeper.cancel()
        tasks = [task for conn in list(self.connections) if (task := conn.shutdown()) is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=grace_seconds)
        for conn in list(self.connections):
            conn.close()
