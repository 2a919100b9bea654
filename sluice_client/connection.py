"""One TCP connection to one broker: framing, correlation ids, pipelining, timeouts,
ApiVersions negotiation, and TLS and SASL authentication (sluice_client.security).

Opening a connection: TCP, the TLS handshake (SSL, SASL_SSL; the broker's certificate
checked against the host connected to unless `ssl.endpoint.identification.algorithm` is
off), ApiVersions, then for SASL_* a SaslHandshake v1 naming the mechanism and
SaslAuthenticate rounds (v0-2, as ApiVersions allows) until the mechanism is satisfied, as
Kafka's clients do (KIP-152). Requests wait until all of that is done. The TCP connect
with the TLS handshake, and each SASL request, are bounded by `connect_timeout`. A
refused TLS handshake or SASL authentication raises AuthenticationFailed (fatal, not
retried) and closes the connection. When the broker gives the session a lifetime
(KIP-368, `connections.max.reauth.ms`), the connection authenticates again at 85-95% of
it, before its next request, which waits; a refusal then closes it the same way.

Many requests may be in flight at once. The socket's protocol (`_Wire`) cuts responses
off the socket as they arrive (wire.frames.FrameReader, as the broker's listener does) and hands each to the request with the same correlation
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
import os
import random
import socket
import ssl
import struct

from sluice_client.errors import (AuthenticationFailed, ClientError, ConnectionFailed, ProtocolViolation,
                                  RequestTimedOut, ResponseTooLarge, TlsHandshakeFailed, UnsupportedVersion)
from sluice_client.security import ClientSecurity
from sluice_client.versions import CLIENT_VERSIONS, choose_version
from wire.error_codes import ErrorCode
from wire.frames import FrameBuffers, FrameReader, FrameSizeError, ReadBuffers
from wire.errors import KafkaError
from wire.messages import API_VERSIONS, RESPONSE_HEADER, SASL_AUTHENTICATE, SASL_HANDSHAKE
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
_KEPT_FRAMES = 4          # buffers of larger responses kept for reuse (wire.frames),
_KEPT_FRAME_MAX = 2 << 20  # each of at most this size, per connection
_MAX_SASL_ROUNDS = 8  # more than any supported mechanism needs (SCRAM: 2)


class BrokerConnection:
    """A reconnecting connection to the broker at `host:port`."""

    def __init__(self, host: str, port: int, *, client_id: str = "sluice-client",
                 software_version: str = "0.1.0", connect_timeout: float = 10.0,
                 request_timeout: float = 30.0,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 security: ClientSecurity | None = None):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.software_version = software_version
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.max_response_bytes = max_response_bytes
        self.security = security  # None: PLAINTEXT
        self.broker_versions: dict[int, tuple[int, int]] = {}  # api key -> (min, max)
        self._wire: _Wire | None = None  # the open socket's protocol
        self._ready = False  # versions negotiated and, with SASL, authenticated on self._wire
        self._pending: dict[int, asyncio.Future] = {}  # by correlation id
        # Requests sent expecting no response, oldest first. Kafka never answers them;
        # some brokers do (librdkafka's mock cluster answers acks=0 Produce), and
        # librdkafka ignores such answers: this tells them from unknown ids.
        self._unanswered: collections.deque[int] = collections.deque(maxlen=_MAX_UNANSWERED)
        self._correlation_ids = itertools.count()
        self._open_lock = asyncio.Lock()
        # This connection's, across reconnects:
        self.read_buffers = ReadBuffers(_READ_BUFFER, 1)
        self.frame_buffers = FrameBuffers(_KEPT_FRAMES, _KEPT_FRAME_MAX)
        self._closed = False  # by close(): no reconnecting
        self._reauthenticate_at: float | None = None  # the loop's time, when the broker gave a session lifetime

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def connected(self) -> bool:
        return self._ready

    @property
    def tls(self) -> bool:
        return self.security is not None and self.security.tls

    def __repr__(self) -> str:
        return f"BrokerConnection({self.address}, {'open' if self.connected else 'closed'})"

    def version(self, api: Api, max_version: int | None = None) -> int:
        """The version to use for `api` on this (open) connection."""
        return choose_version(api, self.broker_versions.get(api.key), self.address, max_version)

    async def open(self) -> None:
        """Connect, negotiate versions and authenticate, unless already done."""
        if self._ready:
            return
        async with self._open_lock:
            if self._ready:
                return
            if self._closed:
                raise ConnectionFailed(f"connection to {self.address} was closed by the client")
            loop = asyncio.get_running_loop()
            # asyncio.wait, not wait_for: on Python 3.11 wait_for loses a cancellation that
            # arrives as the connection is made, and a task being stopped would go on running.
            tls_options = {}
            if self.tls:
                # SNI names the host whether or not the certificate must (as Kafka's Java client).
                tls_options = {"ssl": self.security.ssl_context, "server_hostname": self.host,
                               "ssl_handshake_timeout": self.connect_timeout}
            connecting = loop.create_task(loop.create_connection(lambda: _Wire(self), self.host, self.port,
                                                                 **tls_options))
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
            except ssl.SSLError as exc:
                raise _tls_failure(self.address, exc) from None
            except OSError as exc:  # asyncio's message hides the reason behind errno
                if isinstance(exc, socket.gaierror):  # negative EAI_* codes: not errnos
                    reason = exc.strerror or str(exc)
                elif exc.errno:
                    reason = os.strerror(exc.errno)
                elif self.tls:  # asyncio's bare ConnectionResetError(): the broker closed mid-handshake
                    reason = "closed by the broker during the TLS handshake (is it a TLS listener?)"
                else:
                    reason = str(exc) or type(exc).__name__
                raise ConnectionFailed(f"cannot connect to {self.address}: {reason}") from exc
            if wire.lost.done():  # closed by the broker at once
                raise ConnectionFailed(f"connection to {self.address} closed by the broker")
            self._wire = wire
            try:
                self.broker_versions = await self._negotiate()
                if self.security is not None and self.security.sasl:
                    await self._authenticate()
            except BaseException as exc:
                self._drop(exc if isinstance(exc, ConnectionFailed) else
                           ConnectionFailed(f"connection setup with {self.address} failed"))
                if isinstance(exc, ClientError) and isinstance(wire.lost_with, ssl.SSLError):
                    # the TLS handshake failing after all (TLS 1.3: a client certificate refused)
                    raise _tls_failure(self.address, wire.lost_with) from None
                raise
            self._ready = True

    async def request(self, api: Api, version: int, body: Struct, *,
                      timeout: float | None = None, negotiated: bool = True) -> Struct:
        """Send a request and return the decoded response body. `negotiated=False` sends
        at `version` whatever ApiVersions listed: the inter-broker requests, whose versions
        the cluster fixes rather than the client's range."""
        await self.open()
        await self._reauthenticate_if_due()
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
        await self._reauthenticate_if_due()
        await self._write(api, version, body)

    async def close(self) -> None:
        """Close for good: pending requests fail, and no reconnection follows."""
        self._closed = True
        wire = self._wire
        self._drop(ConnectionFailed(f"connection to {self.address} closed by the client"))
        if wire is not None:
            await asyncio.shield(wire.lost)

    # -- internals -----------------------------------------------------------------
    async def _reauthenticate_if_due(self) -> None:
        """Authenticate again on this connection once its session is near its end (KIP-368:
        at 85-95% of the lifetime the broker gave, as Kafka's clients do); requests wait
        for it, and a refusal closes the connection and raises AuthenticationFailed. No
        await between this check and a request's write: nothing is sent in the middle."""
        loop = asyncio.get_running_loop()
        if self._reauthenticate_at is None or loop.time() < self._reauthenticate_at:
            return
        async with self._open_lock:
            if not self._ready or self._reauthenticate_at is None or loop.time() < self._reauthenticate_at:
                return
            try:
                await self._authenticate()
            except BaseException as exc:
                self._drop(exc if isinstance(exc, ClientError) else
                           ConnectionFailed(f"re-authentication with {self.address} failed"))
                raise

    async def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate rounds until the mechanism is done."""
        self._reauthenticate_at = None
        mechanism = self.security.mechanism
        handshake = await self._setup_request(SASL_HANDSHAKE, self.version(SASL_HANDSHAKE),
                                              SASL_HANDSHAKE.request(mechanism=mechanism))
        if handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM:
            raise AuthenticationFailed(
                f"{self.address} does not enable SASL mechanism {mechanism}; it enables "
                f"{', '.join(handshake.mechanisms) or 'none'}", handshake.error_code)
        if handshake.error_code:
            refusal = KafkaError(handshake.error_code, f"SaslHandshake with {self.address}")
            raise AuthenticationFailed(str(refusal), handshake.error_code)
        version = self.version(SASL_AUTHENTICATE)
        exchange = self.security.sasl_exchange()
        token = exchange.start()
        for _ in range(_MAX_SASL_ROUNDS):
            answer = await self._setup_request(SASL_AUTHENTICATE, version,
                                               SASL_AUTHENTICATE.request(auth_bytes=token))
            if answer.error_code:
                raise AuthenticationFailed(str(KafkaError(
                    answer.error_code, f"SASL {mechanism} authentication with {self.address}",
                    answer.error_message)), answer.error_code)
            token = exchange.step(answer.auth_bytes)
            if token is None:
                lifetime = (answer.session_lifetime_ms or 0) / 1000  # v0 answers carry none
                if lifetime > 0:
                    self._reauthenticate_at = (asyncio.get_running_loop().time()
                                               + lifetime * random.uniform(0.85, 0.95))
                return
        raise ProtocolViolation(f"SASL {mechanism} with {self.address}: not done after "
                                f"{_MAX_SASL_ROUNDS} rounds")

    async def _setup_request(self, api: Api, version: int, body: Struct) -> Struct:
        """A request of connection setup, bounded by the connect timeout."""
        frame = await self._roundtrip(api, version, body, self.connect_timeout)
        try:
            return _decode_body(api, version, frame)
        except DecodeError as exc:
            raise ProtocolViolation(f"cannot parse {api.name} v{version} response from "
                                    f"{self.address}: {exc}") from None

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
        self._ready = False
        if wire is not None:
            wire.transport.close()
        pending, self._pending = self._pending, {}
        self._unanswered.clear()
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved: no "never retrieved" warnings


def _tls_failure(address: str, exc: ssl.SSLError) -> ClientError:
    """What a failed TLS handshake means: an EOF is a connection lost (perhaps not a TLS
    listener, or a broker going down: worth a retry); anything else is a refusal."""
    if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
        return ConnectionFailed(f"TLS handshake with {address}: closed by the broker (is it a TLS "
                                f"listener?)")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsHandshakeFailed(f"TLS handshake with {address}: the broker's certificate is not "
                                  f"accepted: {exc.verify_message}")
    reason = exc.reason or str(exc)
    if "ALERT" in reason and "CERTIFICATE" in reason:  # the broker's alert about the client's certificate
        reason += (" (the broker did not accept the client's certificate, or wants one: set "
                   "ssl.keystore.location, or ssl.certificate.location and ssl.key.location)")
    return TlsHandshakeFailed(f"TLS handshake with {address} failed: {reason}")


def _close_if_connected(connecting: asyncio.Task) -> None:
    """A connection attempt given up on: its socket, if it was made after all, is closed."""
    if not connecting.cancelled() and connecting.exception() is None:
        connecting.result()[0].close()


class _Wire(asyncio.BufferedProtocol):
    """The socket of one BrokerConnection: its FrameReader (wire.frames) cuts response
    frames out of what arrives and passes each to the connection, in order."""

    def __init__(self, connection: BrokerConnection):
        self.connection = connection
        self.transport: asyncio.Transport | None = None
        self.lost = asyncio.get_running_loop().create_future()  # done when the socket closes
        self.lost_with: Exception | None = None  # the error that closed it, if any
        self._reader = FrameReader(self._on_frame, connection.read_buffers, connection.frame_buffers,
                                   connection.max_response_bytes)
        self._writable: asyncio.Future | None = None  # while writing is paused

    def connection_made(self, transport) -> None:
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self._reader.buffer_updated(nbytes)
        except FrameSizeError as exc:
            self.connection._drop(self._frame_size_error(exc), self)
        except ClientError as exc:
            self.connection._drop(exc, self)

    def _on_frame(self, frame) -> None:
        self.connection._on_frame(self, frame)

    def _frame_size_error(self, exc: FrameSizeError) -> ClientError:
        connection = self.connection
        if exc.size < 4:
            return ProtocolViolation(f"{connection.address} sent a response frame of {exc.size} bytes")
        if _looks_like_tls(_SIZE.pack(exc.size)) and not connection.tls:
            return ProtocolViolation(f"{connection.address} answered with TLS: it is a TLS "
                                     f"listener (set security.protocol to SSL or SASL_SSL)")
        return ResponseTooLarge(f"{connection.address} announced a {exc.size}-byte response, above "
                                f"max_response_bytes={connection.max_response_bytes}")

    def eof_received(self) -> bool:
        return False  # the transport closes: connection_lost follows

    def connection_lost(self, exc) -> None:
        self.lost_with = exc
        self._reader.close()
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


def _looks_like_tls(size: bytes) -> bool:
    """Whether the bytes read as a frame size are a TLS record header instead: an alert
    (21) or handshake (22) record of TLS 1.0-1.3 (version 3.1-3.4)."""
    return size[0] in (21, 22) and size[1] == 3 and size[2] <= 4


def _error_code_of(frame: memoryview) -> int | None:
    """The first int16 of an ApiVersions body (after the 4-byte v0 response header):
    its error code in every version."""
    if len(frame) < 6:
        return None
    return _ERROR_CODE.unpack_from(frame, 4)[0]
