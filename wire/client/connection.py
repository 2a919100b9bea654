"""One TCP connection to one broker: framing, correlation ids, pipelining, timeouts and
ApiVersions negotiation.

Many requests may be in flight at once. The socket's protocol (`_Wire`) cuts responses
off the socket as they arrive and hands each to the request with the same correlation
id; decoding happens in the requesting task. A large response (a Fetch's records) is
read in place into a buffer of its own, which serves again for a later response once
nothing refers to the earlier one. Kafka answers a connection's requests in order, so
when one times out every later one is stuck behind it: the connection is then closed,
its pending requests fail, and the next request opens a fresh connection.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import mmap
import os
import socket
import struct

from wire.client.errors import (ClientError, ConnectionFailed, ProtocolViolation, RequestTimedOut,
                                ResponseTooLarge, UnsupportedVersion)
from wire.client.versions import CLIENT_VERSIONS, choose_version
from wire.error_codes import ErrorCode
from wire.frame_buffers import FrameBuffers
from wire.errors import KafkaError
from wire.messages import API_VERSIONS, RESPONSE_HEADER
from wire.primitives import DecodeError, EncodeError, Reader
from wire.protocol import RequestHeader, encode_request, response_header_version
from wire.schema import Api, Struct

__all__ = ["BrokerConnection", "DEFAULT_MAX_RESPONSE_BYTES"]

DEFAULT_MAX_RESPONSE_BYTES = 100 * 1024 * 1024

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
# How many correlation ids of unanswered requests (acks=0 Produce) are remembered.
_MAX_UNANSWERED = 1024
_READ_BUFFER = 64 * 1024  # responses up to this size are copied out of one read buffer
_KEPT_FRAMES = 4          # buffers of larger responses kept for reuse (wire.frame_buffers),
_KEPT_FRAME_MAX = 2 << 20  # each of at most this size, per connection


class BrokerConnection:
    """A reconnecting connection to the broker at `host:port`."""

    def __init__(self, host: str, port: int, *, client_id: str = "sluice-client",
                 software_version: str = "0.1.0", connect_timeout: float = 10.0,
                 request_timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.software_version = software_version
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self.broker_versions: dict[int, tuple[int, int]] = {}  # api key -> (min, max)
        self._wire: _Wire | None = None  # the open socket's protocol
        self._pending: dict[int, asyncio.Future] = {}  # by correlation id
        # Requests sent expecting no response, oldest first. Kafka never answers them;
        # some brokers do (librdkafka's mock cluster answers acks=0 Produce), and
        # librdkafka ignores such answers: this tells them from unknown ids.
        self._unanswered: collections.deque[int] = collections.deque(maxlen=_MAX_UNANSWERED)
        self._correlation_ids = itertools.count()
        self._open_lock = asyncio.Lock()
        self.frame_buffers = FrameBuffers(_KEPT_FRAMES, _KEPT_FRAME_MAX)  # this connection's, across reconnects
        self._closed = False  # by close(): no reconnecting

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._wire is not None

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, {'open' if self.connected else 'closed'})"

    def version(self, api: Api, max_version: int | None = None) -> int:
        """The version to use for `api` on this (open) connection."""
        return choose_version(api, self.broker_versions.get(api.key), self.address, max_version)

    async def open(self) -> None:
        """Connect and negotiate versions, unless already connected."""
        if self._wire is not None:
            return
        async with self._open_lock:
            if self._wire is not None:
                return
            if self._closed:
                raise ConnectionFailed(f"connection to {self.address} was closed by the client")
            loop = asyncio.get_running_loop()
            # asyncio.wait, not wait_for: on Python 3.11 wait_for loses a cancellation that
            # arrives as the connection is made, and a task being stopped would go on running.
            connecting = loop.create_task(loop.create_connection(lambda: _Wire(self), self.host, self.port))
            try:
                done, _ = await asyncio.wait((connecting,), timeout=self.connect_timeout)
            except asyncio.CancelledError:
                connecting.cancel()
                connecting.add_done_callback(_close_if_connected)
                raise
            if not done:
                connecting.cancel()
                connecting.add_done_callback(_close_if_connected)
                raise ConnectionFailed(f"cannot connect to {self.address}: no answer within "
                                       f"{self.connect_timeout:g} s")
            try:
                _, wire = connecting.result()
            except OSError as exc:  # asyncio's message hides the reason behind errno
                if isinstance(exc, socket.gaierror):  # negative EAI_* codes: not errnos
                    reason = exc.strerror or str(exc)
                else:
                    reason = os.strerror(exc.errno) if exc.errno else str(exc)
                raise ConnectionFailed(f"cannot connect to {self.address}: {reason}") from exc
            if wire.lost.done():  # closed by the broker at once
                raise ConnectionFailed(f"connection to {self.address} closed by the broker")
            self._wire = wire
            try:
                self.broker_versions = await self._negotiate()
            except BaseException as exc:
                self._drop(exc if isinstance(exc, ConnectionFailed) else
                           ConnectionFailed(f"version negotiation with {self.address} failed"))
                raise

    async def request(self, api: Api, version: int, body: Struct, *,
                      timeout: float | None = None, negotiated: bool = True) -> Struct:
        """Send a request and return the decoded response body. `negotiated=False` sends
        at `version` whatever ApiVersions listed: the inter-broker requests, whose versions
        the cluster fixes rather than the client's range."""
        await self.open()
        if negotiated and version != self.version(api, version):  # e.g. a downgraded broker
            raise UnsupportedVersion(f"{self.address} no longer speaks {api.name} v{version}")
        frame = await self._roundtrip(api, version, body, timeout)
        try:
            return _decode_body(api, version, frame)
        except DecodeError as exc:
            raise ProtocolViolation(f"cannot parse {api.name} v{version} response from "
                                    f"{self.address}: {exc}") from None

    async def send(self, api: Api, version: int, body: Struct) -> None:
        """Send a request the broker does not answer (Produce with acks=0)."""
        await self.open()
        await self._write(api, version, body)

    async def close(self) -> None:
        """Close for good: pending requests fail, and no reconnection follows."""
        self._closed = True
        wire = self._wire
        self._drop(ConnectionFailed(f"connection to {self.address} closed by the client"))
        if wire is not None:
            await asyncio.shield(wire.lost)

    # -- internals -----------------------------------------------------------------
    async def _negotiate(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at the newest version we know, then at the broker's newest.

        A broker that does not know our version answers UNSUPPORTED_VERSION and lists
        the ApiVersions versions it does support; without that list, fall back to v0,
        as Kafka's Java client does. The version strictly decreases on every retry.
        """
        version = CLIENT_VERSIONS[API_VERSIONS.key][1]
        while True:
            body = API_VERSIONS.request(client_software_name=self.client_id,
                                        client_software_version=self.software_version)
            frame = await self._roundtrip(API_VERSIONS, version, body, None)
            response = self._read_api_versions(frame, version)
            ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if response.error_code == ErrorCode.UNSUPPORTED_VERSION and version > 0:
                version = min(ranges.get(API_VERSIONS.key, (0, 0))[1], version - 1)
                continue
            if response.error_code:
                raise KafkaError(response.error_code, f"ApiVersions v{version} to {self.address}")
            return ranges

    def _read_api_versions(self, frame: memoryview, version: int) -> Struct:
        """The ApiVersions body; an UNSUPPORTED_VERSION answer is read leniently.

        Kafka writes that answer in the v0 layout whatever version was asked; other
        brokers keep the version asked. If neither layout parses, the answer still says
        UNSUPPORTED_VERSION, only without the broker's range.
        """
        if version > 0 and _error_code_of(frame) == ErrorCode.UNSUPPORTED_VERSION:
            for layout in (0, version):
                try:
                    return _decode_body(API_VERSIONS, layout, frame)
                except DecodeError:
                    pass
            return API_VERSIONS.response(error_code=ErrorCode.UNSUPPORTED_VERSION)
        try:
            return _decode_body(API_VERSIONS, version, frame)
        except DecodeError as exc:
            raise ProtocolViolation(f"cannot parse ApiVersions v{version} response from "
                                    f"{self.address}: {exc}") from None

    async def _roundtrip(self, api: Api, version: int, body: Struct,
                         timeout: float | None) -> memoryview:
        future = await self._write(api, version, body, expect_response=True)
        timeout = self.request_timeout if timeout is None else timeout
        # asyncio.wait, not wait_for: on Python 3.11 wait_for loses a cancellation that
        # arrives as the response does, and a task being stopped would go on running.
        done, _ = await asyncio.wait((future,), timeout=timeout)
        if done:
            return future.result()
        error = RequestTimedOut(f"{api.name} v{version} to {self.address}: no response "
                                f"within {timeout:g} s")
        self._drop(ConnectionFailed(f"connection to {self.address} closed after a "
                                    f"request timed out"))
        raise error

    async def _write(self, api: Api, version: int, body: Struct,
                     expect_response: bool = False) -> asyncio.Future | None:
        wire = self._wire
        if wire is None:
            raise ConnectionFailed(f"connection to {self.address} is closed")
        correlation_id = next(self._correlation_ids) & 0x7FFFFFFF
        header = RequestHeader(request_api_key=api.key, request_api_version=version,
                               correlation_id=correlation_id, client_id=self.client_id)
        try:
            frame = encode_request(header, body)
        except EncodeError as exc:
            raise EncodeError(f"{api.name} v{version} request: {exc}") from None
        future = None
        if expect_response:
            future = self._pending[correlation_id] = asyncio.get_running_loop().create_future()
        else:
            self._unanswered.append(correlation_id)
        wire.transport.writelines((_SIZE.pack(len(frame)), frame))
        await wire.drained()
        if future is None and wire is not self._wire:
            raise ConnectionFailed(f"connection to {self.address} lost while sending {api.name}")
        return future

    def _on_frame(self, wire: "_Wire", frame) -> None:
        """A response off the socket: to the request with its correlation id."""
        if wire is not self._wire:
            return
        if len(frame) < 4:
            raise ProtocolViolation(f"{self.address} sent a response frame of {len(frame)} bytes")
        correlation_id = _CORRELATION_ID.unpack_from(frame)[0]
        future = self._pending.pop(correlation_id, None)
        if future is None:
            if correlation_id not in self._unanswered:
                raise ProtocolViolation(f"{self.address} answered unknown correlation "
                                        f"id {correlation_id}")
            while self._unanswered.popleft() != correlation_id:
                pass  # answers come in order: earlier ones will not come any more
            return
        if not future.done():  # not cancelled by its caller
            future.set_result(frame)

    def _drop(self, error: Exception, wire: "_Wire | None" = None) -> None:
        """Close the socket and fail every pending request with `error`."""
        if wire is not None and wire is not self._wire:
            return  # a newer connection has replaced this one
        wire, self._wire = self._wire, None
        if wire is not None:
            wire.transport.close()
        pending, self._pending = self._pending, {}
        self._unanswered.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: no "never retrieved" warnings


def _close_if_connected(connecting: asyncio.Task) -> None:
    """A connection attempt given up on: its socket, if it was made after all, is closed."""
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result()[0].close()


class _Wire(asyncio.BufferedProtocol):
    """The socket of one BrokerConnection: cuts response frames out of what arrives and
    passes each to the connection, in order. Frames up to _READ_BUFFER bytes are copied
    out of one read buffer; a larger one is read in place into a buffer from the
    connection's `frame_buffers` and passed as a view (wire.frame_buffers)."""

    def __init__(self, connection: BrokerConnection):
        self.connection = connection
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()  # done when the socket closes
        self._buf = bytearray(_READ_BUFFER)
        self._start = self._end = 0
        self._frame: mmap.mmap | None = None  # a large frame being read
        self._filled = 0
        self._writable: asyncio.Future | None = None  # while writing is paused

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        if self._end == len(self._buf):  # a partial frame at the end: move it to the front
            rest = self._end - self._start
            self._buf[:rest] = self._buf[self._start:self._end]
            self._start, self._end = 0, rest
        return memoryview(self._buf)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        try:
            if self._frame is not None:
                self._filled += nbytes
                if self._filled < len(self._frame):
                    return
                frame, self._frame = self._frame, None
                self.connection._on_frame(self, self.connection.frame_buffers.keep(frame))
                return
            self._end += nbytes
            self._cut_frames()
        except ClientError as exc:
            self.connection._drop(exc, self)

    def _cut_frames(self) -> None:
        buf = self._buf
        while self._end - self._start >= 4:
            size = _SIZE.unpack_from(buf, self._start)[0]
            if size > self.connection.max_response_bytes:
                raise ResponseTooLarge(f"{self.connection.address} announced a {size}-byte "
                                       f"response, above max_response_bytes="
                                       f"{self.connection.max_response_bytes}")
            if size < 4:
                raise ProtocolViolation(f"{self.connection.address} sent a response frame of "
                                        f"{size} bytes")
            start = self._start + 4
            have = self._end - start
            if have >= size:
                self._start = start + size
                self.connection._on_frame(self, memoryview(bytes(memoryview(buf)[start:start + size])))
                continue
            if 4 + size > len(buf):
                self._frame = self.connection.frame_buffers.lend(size)
                self._frame[:have] = buf[start:self._end]
                self._filled = have
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0

    def eof_received(self) -> bool:
        return False  # the transport closes: connection_lost follows

    def connection_lost(self, exc) -> None:
        if exc is None:
            error = ConnectionFailed(f"connection to {self.connection.address} closed by the broker")
        else:
            error = ConnectionFailed(f"connection to {self.connection.address} lost: {exc}")
        self.connection._drop(error, self)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    async def drained(self) -> None:
        """Until the socket takes more: writing waits while the transport's buffer is full."""
        if self._writable is not None and not self._writable.done():
            await asyncio.shield(self._writable)


def _decode_body(api: Api, version: int, frame: memoryview) -> Struct:
    """The response body in `frame`, ignoring bytes after it.

    Kafka's Java client and librdkafka both ignore trailing bytes, and some brokers
    need that: librdkafka's mock cluster ends flexible Metadata responses with an extra
    byte.
    """
    reader = Reader(frame)
    RESPONSE_HEADER.decode(response_header_version(api.key, version), reader)
    return api.response.decode(version, reader)


def _error_code_of(frame: memoryview) -> int | None:
    """The first int16 of an ApiVersions body (after the 4-byte v0 response header):
    its error code in every version."""
    if len(frame) < 6:
        return None
    return _ERROR_CODE.unpack_from(frame, 4)[0]
