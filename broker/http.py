"""A small HTTP/1.1 server over asyncio: the broker's metrics endpoint and the web console.

h11 holds the protocol state (framing, keep-alive, chunked bodies); this module only
moves bytes and hands each complete request to one async handler. Limits keep a bad or
slow client from costing more than a bounded amount: request heads over 16 KiB and
bodies over `max_body` bytes are refused (431, 413), a connection idle for
`idle_timeout` seconds is closed, and at most `max_connections` are served at once
(others are closed on accept). A handler that raises answers 500; the error is logged,
never sent to the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

import h11

log = logging.getLogger("sluice.http")

_MAX_HEAD = 16 * 1024
_READ_SIZE = 64 * 1024
_REASONS = {200: b"OK", 204: b"No Content", 303: b"See Other", 400: b"Bad Request", 404: b"Not Found",
            405: b"Method Not Allowed", 408: b"Request Timeout", 409: b"Conflict",
            413: b"Content Too Large", 431: b"Request Header Fields Too Large",
            500: b"Internal Server Error", 502: b"Bad Gateway", 503: b"Service Unavailable"}


@dataclass
class HttpRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case; a repeated header keeps its last value
    body: bytes


@dataclass
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _Refused(Exception):
    """A request answered with an error status without reaching the handler."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class HttpServer:
    def __init__(self, handler: Handler, host: str, port: int, *, max_body: int = 1 << 20,
                 idle_timeout: float = 30.0, max_connections: int = 64):
        self._handler = handler
        self._host = host
        self._requested_port = port
        self._max_body = max_body
        self._idle_timeout = idle_timeout
        self._max_connections = max_connections
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task] = set()

    @property
    def port(self) -> int:
        """The bound port (the one the OS chose when asked for port 0)."""
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, self._host, self._requested_port,
                                                  reuse_address=True)

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self._max_connections:
            writer.close()
            return
        task = asyncio.current_task()
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # stop(); ends the task quietly: asyncio 3.11 logs a cancelled connection task as an error
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        while True:
            try:
                request = await self._read_request(conn, reader)
            except _Refused as refused:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self._send(conn, writer, HttpResponse(refused.status, f"{refused}\n".encode()),
                                     close=True)
                return
            if request is None:
                return
            try:
                response = await self._handler(request)
            except Exception:
                log.exception("HTTP %s %s failed", request.method, request.path)
                response = HttpResponse(500, b"internal error; see the server's log\n")
            await self._send(conn, writer, response, close=False)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(self, conn: h11.Connection, reader: asyncio.StreamReader) -> HttpRequest | None:
        """The next complete request, or None when the client closed between requests."""
        head = None
        body = bytearray()
        head_bytes = 0  # received before the head was complete: h11 alone bounds only a head split across reads
        while True:
            try:
                event = conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise _Refused(exc.error_status_hint, f"bad request: {exc}") from None
            if event is h11.NEED_DATA:
                if head is None and head_bytes >= _MAX_HEAD:
                    raise _Refused(431, f"request head over {_MAX_HEAD} bytes")
                data = await _within(reader.read(_MAX_HEAD if head is None else _READ_SIZE),
                                     self._idle_timeout)
                if head is None:
                    head_bytes += len(data)
                conn.receive_data(data)
                if not data and head is None and conn.their_state is h11.IDLE:
                    return None
                continue
            if isinstance(event, h11.Request):
                head = event
                length = dict(event.headers).get(b"content-length")
                if length is not None and length.isdigit() and int(length) > self._max_body:
                    raise _Refused(413, f"request body over {self._max_body} bytes")
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > self._max_body:
                    raise _Refused(413, f"request body over {self._max_body} bytes")
            elif isinstance(event, h11.EndOfMessage):
                return _request(head, bytes(body))
            elif isinstance(event, h11.ConnectionClosed):
                return None

    async def _send(self, conn: h11.Connection, writer: asyncio.StreamWriter, response: HttpResponse,
                    *, close: bool) -> None:
        headers = [("content-type", response.content_type), ("content-length", str(len(response.body))),
                   *response.headers]
        if close:
            headers.append(("connection", "close"))
        reason = _REASONS.get(response.status, b"")
        writer.write(conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason)))
        writer.write(conn.send(h11.Data(data=response.body)))
        writer.write(conn.send(h11.EndOfMessage()))
        await _within(writer.drain(), self._idle_timeout)


async def _within(awaitable, timeout: float):
    """`awaitable`'s result, or asyncio.TimeoutError after `timeout` seconds. asyncio.wait,
    not wait_for: on Python 3.11 wait_for loses a cancellation that arrives as the awaited
    completes, and a connection stopped as its next request arrived would serve on until
    its idle timeout, holding up stop()."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    finally:
        if not task.done():
            task.cancel()
    if not done:
        raise asyncio.TimeoutError
    return task.result()


def _request(head: h11.Request, body: bytes) -> HttpRequest:
    target = urlsplit(head.target.decode("ascii", "replace"))
    headers = {name.decode("ascii", "replace"): value.decode("latin-1") for name, value in head.headers}
    return HttpRequest(method=head.method.decode("ascii", "replace"), path=target.path or "/",
                       query=dict(parse_qsl(target.query)), headers=headers, body=body)
