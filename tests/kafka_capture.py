"""A recording TCP proxy in front of a Kafka broker, for capturing real client traffic.

    with KafkaCaptureProxy("127.0.0.1:9092") as proxy:
        run_client(bootstrap_servers=proxy.bootstrap)
    for frame in proxy.frames(): ...

The proxy listens on 127.0.0.1 only. It forwards bytes both ways, cut into frames (the
bytes after each 4-byte big-endian size prefix), and records every request frame and
every response frame together with the (api_key, api_version) of the request that a
response answers (matched by correlation id, per connection, so pipelined requests
are fine; acks=0 Produce requests are known to get no response).

Clients learn broker addresses from responses and would then bypass the proxy, so the
responses that carry addresses — Metadata, FindCoordinator, DescribeCluster, and the
`node_endpoints` of Produce (v10+) / Fetch (v16+) — are decoded with
`wire.protocol.decode_response`, their host/port rewritten to a proxy listener (one
listener per upstream address, opened on first sight) and re-encoded with
`encode_response`. A captured frame keeps the bytes as the broker sent them (`data`);
`forwarded` holds what the client received when the proxy rewrote it. Everything else
is forwarded byte for byte.

By default the proxy also narrows the broker's ApiVersions response to what the
`wire` codec knows (`clamp_to_codec`): versions above the codec's newest are clamped and
APIs it does not know are dropped, so clients only send what can be decoded; each
change is listed in `version_clamps`. Pass `clamp_to_codec=False` to see raw traffic;
`max_versions={api_key: version}` caps chosen APIs further.

Two broker quirks are repaired (`repair_quirks`, default on). librdkafka's mock cluster
answers an ApiVersions request newer than it supports with a hand-made body (int8
array count, no tagged fields) that is neither the v0 error format Apache Kafka sends
nor the request's version; clients that follow the spec (kafka-python) cannot read it.
The proxy forwards the Apache Kafka form instead (v0 body: error code and the
ApiVersions range) and marks the frame rewritten; see `parse_mock_api_versions_error`.
Likewise a response to an acks=0 Produce request (which Kafka never sends, and the mock
does) is recorded with `unsolicited=True` but not forwarded.

Everything runs on one asyncio loop in a daemon thread; `close()` shuts listeners and
connections down and joins the thread within a bounded time.
"""

from __future__ import annotations

import asyncio
import itertools
import struct
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from wire.primitives import DecodeError, Reader
from wire.messages import API_VERSIONS, APIS, RESPONSE_HEADER
from wire.protocol import api_for, encode_response, response_header_version

__all__ = ["CapturedFrame", "KafkaCaptureProxy", "decode_response_lenient",
           "parse_mock_api_versions_error"]

_SIZE = struct.Struct(">i")
_REQ_PREFIX = struct.Struct(">hhi")

API_PRODUCE, API_FETCH, API_METADATA, API_FIND_COORDINATOR, API_DESCRIBE_CLUSTER = 0, 1, 3, 10, 60
API_API_VERSIONS = 18
_ACKS0_REMEMBERED = 1024  # per connection


@dataclass
class CapturedFrame:
    """One frame seen by the proxy, in arrival order."""

    seq: int
    conn_id: int
    direction: str                 # "request" or "response"
    api_key: int | None            # for a response: of the request it answers (None: unmatched)
    api_version: int | None
    correlation_id: int | None
    data: bytes                    # the frame as received from its sender
    forwarded: bytes | None = None  # what was sent on instead, when the proxy rewrote it
    unsolicited: bool = False      # a response to an acks=0 Produce (not forwarded)
    upstream: str = ""             # "host:port" of the broker this connection goes to
    timestamp: float = field(default_factory=time.monotonic)

    @property
    def rewritten(self) -> bool:
        return self.forwarded is not None


class _Listener:
    __slots__ = ("upstream", "server", "port")

    def __init__(self, upstream: tuple[str, int], server: asyncio.AbstractServer, port: int):
        self.upstream, self.server, self.port = upstream, server, port


def _split_hostport(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def decode_response_lenient(api_key: int, api_version: int, frame: bytes):
    """(header, body, trailing bytes): like `decode_response`, but bytes left over after
    the body are returned instead of refused (librdkafka's mock appends a second empty
    tag section to flexible Metadata responses). Used for rewriting, which keeps such
    bytes; round-trip checks stay strict."""
    api = api_for(api_key)
    reader = Reader(frame)
    header = RESPONSE_HEADER.decode(response_header_version(api_key, api_version), reader)
    body = api.response.decode(api_version, reader)
    return header, body, bytes(reader.buf[reader.pos:reader.end])


UNSUPPORTED_VERSION = 35


def parse_mock_api_versions_error(frame: bytes) -> tuple[int, list[tuple[int, int, int]], int] | None:
    """(correlation_id, [(api_key, min, max)], throttle_ms) if `frame` is exactly the
    librdkafka mock's hand-made UNSUPPORTED_VERSION answer to a flexible (v3+)
    ApiVersions request — int32 correlation id, int16 error 35, int8 count, count
    (int16 key, int16 min, int16 max) entries, int32 throttle, nothing else — or None.
    (rd_kafka_mock_handle_ApiVersion: "FIXME: FLEXVER: This is a uvarint".)"""
    if len(frame) < 11:
        return None
    corr, err, count = struct.unpack_from(">ihb", frame)
    if err != UNSUPPORTED_VERSION or count < 0 or len(frame) != 7 + 6 * count + 4:
        return None
    entries = [struct.unpack_from(">hhh", frame, 7 + 6 * i) for i in range(count)]
    throttle = struct.unpack_from(">i", frame, 7 + 6 * count)[0]
    return corr, entries, throttle


def _produce_acks(frame: bytes) -> int | None:
    """The `acks` of a Produce request frame, parsed just far enough; None if unreadable."""
    try:
        r = Reader(frame)
        _, version, _ = r.int16(), r.int16(), r.int32()
        r.string(False, True)                   # client_id: classic nullable string in every header
        flexible = version >= 9
        if flexible:                            # request header v2: tagged fields
            for _ in range(r.uvarint()):
                r.uvarint()
                r.take(r.uvarint())
        if version >= 3:
            r.string(flexible, True)            # transactional_id
        return r.int16()
    except (DecodeError, ValueError):
        return None


class KafkaCaptureProxy:
    """Recording proxy; see the module docstring."""

    def __init__(self, upstream: str, *, host: str = "127.0.0.1",
                 max_frame_bytes: int = 64 * 1024 * 1024,
                 max_capture_bytes: int = 256 * 1024 * 1024, connect_timeout: float = 5.0,
                 rewrite_addresses: bool = True, clamp_to_codec: bool = True,
                 repair_quirks: bool = True, max_versions: dict[int, int] | None = None):
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise ValueError("the capture proxy listens on loopback only")
        self.host = host
        self.bootstrap_upstream = _split_hostport(upstream)
        self.max_frame_bytes = max_frame_bytes
        self.max_capture_bytes = max_capture_bytes  # beyond it frames pass unrecorded
        self._captured_bytes = 0
        self.connect_timeout = connect_timeout
        self.rewrite_addresses = rewrite_addresses
        self.clamp_to_codec = clamp_to_codec
        self.repair_quirks = repair_quirks
        # Extra per-API caps on advertised versions (e.g. to avoid a broker's buggy handler).
        self.max_versions = dict(max_versions or {})
        # (api_key, broker_min, broker_max, advertised_max or None if dropped), deduplicated
        self.version_clamps: set[tuple[int, int, int, int | None]] = set()
        self.errors: list[str] = []           # problems met while proxying (never raised)
        self._frames: list[CapturedFrame] = []
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self._conn_ids = itertools.count(1)
        self._listeners: dict[tuple[str, int], _Listener] = {}
        self._listener_lock: asyncio.Lock | None = None
        self._conn_tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self.bootstrap: str | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self, timeout: float = 5.0) -> "KafkaCaptureProxy":
        if self._thread is not None:
            return self  # already started (e.g. start() then `with`)
        ready = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                self._listener_lock = asyncio.Lock()
                port = loop.run_until_complete(self._listener_for(self.bootstrap_upstream))
                self.bootstrap = f"{self.host}:{port}"
            except BaseException as exc:  # pragma: no cover - reported to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._shutdown())
                loop.close()

        self._thread = threading.Thread(target=run, name="kafka-capture-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise TimeoutError("capture proxy did not start")
        if failure:
            raise failure[0]
        return self

    def close(self, timeout: float = 5.0) -> None:
        if self._closed or self._loop is None or self._thread is None:
            return
        self._closed = True
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.errors.append("proxy thread did not stop in time")

    def __enter__(self) -> "KafkaCaptureProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    async def _shutdown(self) -> None:
        for listener in self._listeners.values():
            listener.server.close()
        for writer in list(self._writers):
            writer.close()
        tasks = [t for t in self._conn_tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2)
        for listener in self._listeners.values():
            try:
                await asyncio.wait_for(listener.server.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass

    # -- results -----------------------------------------------------------------------
    def frames(self) -> list[CapturedFrame]:
        with self._lock:
            return list(self._frames)

    def requests(self) -> list[CapturedFrame]:
        return [f for f in self.frames() if f.direction == "request"]

    def responses(self) -> list[CapturedFrame]:
        return [f for f in self.frames() if f.direction == "response"]

    def api_versions_seen(self) -> Counter:
        """Counter of (api_key, api_version) over captured requests."""
        return Counter((f.api_key, f.api_version) for f in self.requests())

    @property
    def listener_ports(self) -> dict[str, int]:
        return {f"{h}:{p}": lst.port for (h, p), lst in self._listeners.items()}

    def _record(self, frame: CapturedFrame) -> None:
        with self._lock:
            self._captured_bytes += len(frame.data)
            if self._captured_bytes > self.max_capture_bytes:
                if not any(e.startswith("capture limit") for e in self.errors):
                    self.errors.append(f"capture limit of {self.max_capture_bytes} bytes reached; "
                                       "later frames were forwarded but not recorded")
                return
            self._frames.append(frame)

    # -- listeners ---------------------------------------------------------------------
    async def _listener_for(self, upstream: tuple[str, int]) -> int:
        async with self._listener_lock:
            listener = self._listeners.get(upstream)
            if listener is None:
                server = await asyncio.start_server(
                    lambda r, w, up=upstream: self._serve(r, w, up), self.host, 0)
                port = server.sockets[0].getsockname()[1]
                listener = self._listeners[upstream] = _Listener(upstream, server, port)
            return listener.port

    # -- connections -------------------------------------------------------------------
    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter,
                     upstream: tuple[str, int]) -> None:
        task = asyncio.current_task()
        self._conn_tasks.add(task)
        self._writers.add(client_w)
        conn_id = next(self._conn_ids)
        upstream_name = f"{upstream[0]}:{upstream[1]}"
        server_w = None
        try:
            try:
                server_r, server_w = await asyncio.wait_for(
                    asyncio.open_connection(*upstream), self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                self.errors.append(f"conn {conn_id}: cannot reach {upstream_name}: {exc!r}")
                return
            self._writers.add(server_w)
            # correlation id -> (api_key, api_version): requests awaiting an answer, and
            # acks=0 Produce requests (no answer due; only the latest few are kept).
            pending: dict[int, tuple[int, int]] = {}
            acks0: OrderedDict[int, tuple[int, int]] = OrderedDict()
            pumps = [
                asyncio.ensure_future(self._pump_requests(conn_id, upstream_name, client_r,
                                                          server_w, pending, acks0)),
                asyncio.ensure_future(self._pump_responses(conn_id, upstream_name, server_r,
                                                           client_w, pending, acks0)),
            ]
            try:
                # Either side closing ends the connection as a whole.
                await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                pass  # proxy shutdown: end quietly (asyncio's server callback would log it)
            finally:
                for pump in pumps:
                    pump.cancel()
                await asyncio.gather(*pumps, return_exceptions=True)
        finally:
            for w in (client_w, server_w):
                if w is not None:
                    self._writers.discard(w)
                    w.close()
            self._conn_tasks.discard(task)

    async def _read_frame(self, reader: asyncio.StreamReader, conn_id: int) -> bytes | None:
        try:
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            if not 0 <= size <= self.max_frame_bytes:
                self.errors.append(f"conn {conn_id}: frame size {size} out of bounds")
                return None
            return await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            return None

    async def _pump_requests(self, conn_id, upstream_name, client_r, server_w, pending,
                             acks0) -> None:
        while True:
            frame = await self._read_frame(client_r, conn_id)
            if frame is None:
                return
            key = version = corr = None
            if len(frame) >= _REQ_PREFIX.size:
                key, version, corr = _REQ_PREFIX.unpack_from(frame)
                # Registered before forwarding: the answer cannot overtake it. An acks=0
                # Produce gets no answer; it is remembered only to spot brokers that answer.
                if key == API_PRODUCE and _produce_acks(frame) == 0:
                    acks0[corr] = (key, version)
                    if len(acks0) > _ACKS0_REMEMBERED:
                        acks0.popitem(last=False)
                else:
                    pending[corr] = (key, version)
            self._record(CapturedFrame(next(self._seq), conn_id, "request", key, version, corr,
                                       frame, upstream=upstream_name))
            try:
                server_w.write(_SIZE.pack(len(frame)) + frame)
                await server_w.drain()
            except (ConnectionError, OSError):
                return

    async def _pump_responses(self, conn_id, upstream_name, server_r, client_w, pending,
                              acks0) -> None:
        while True:
            frame = await self._read_frame(server_r, conn_id)
            if frame is None:
                return
            corr = _SIZE.unpack_from(frame)[0] if len(frame) >= 4 else None
            key, version = pending.pop(corr, (None, None))
            expected = key is not None or corr not in acks0
            if not expected:
                key, version = acks0.pop(corr)
            if key is None:
                self.errors.append(f"conn {conn_id}: response with unknown correlation id {corr}")
            captured = CapturedFrame(next(self._seq), conn_id, "response", key, version, corr,
                                     frame, upstream=upstream_name)
            if not expected:
                # An answer to an acks=0 Produce: clients do not expect one (kafka-python
                # drops the connection on it), so it is recorded but not forwarded.
                captured.unsolicited = True
                if self.repair_quirks:
                    self._record(captured)
                    continue
            out = frame
            if key is not None:
                rewritten = await self._rewrite(key, version, corr, frame, conn_id)
                if rewritten is not None and rewritten != frame:
                    captured.forwarded = out = rewritten
            self._record(captured)
            try:
                client_w.write(_SIZE.pack(len(out)) + out)
                await client_w.drain()
            except (ConnectionError, OSError):
                return

    # -- address rewriting -------------------------------------------------------------
    async def _rewrite(self, key: int, version: int, corr: int, frame: bytes,
                       conn_id: int) -> bytes | None:
        """The frame with broker addresses pointed at proxy listeners (and ApiVersions
        narrowed to the codec), or None to forward it unchanged."""
        if key == API_API_VERSIONS:
            return self._clamp_api_versions(version, corr, frame, conn_id)
        if not self.rewrite_addresses:
            return None
        if key == API_PRODUCE and version < 10 or key == API_FETCH and version < 16:
            return None
        if key not in (API_PRODUCE, API_FETCH, API_METADATA, API_FIND_COORDINATOR,
                       API_DESCRIBE_CLUSTER):
            return None
        try:
            _, body, trailing = decode_response_lenient(key, version, frame)
        except Exception as exc:  # a codec problem: report it, forward the original bytes
            self.errors.append(f"conn {conn_id}: cannot decode api {key} v{version} "
                               f"response (corr {corr}) for rewriting: {exc!r}")
            return None
        if key in (API_METADATA, API_DESCRIBE_CLUSTER):
            endpoints = list(body.brokers)
        elif key == API_FIND_COORDINATOR:
            endpoints = list(body.coordinators) if version >= 4 else [body]
        else:
            endpoints = list(body.node_endpoints or ())
        changed = False
        for ep in endpoints:
            if not ep.host or ep.port is None or ep.port < 0:
                continue  # e.g. FindCoordinator error: no coordinator address
            port = await self._listener_for((ep.host, ep.port))
            if (ep.host, ep.port) != (self.host, port):
                ep.host, ep.port = self.host, port
                changed = True
        if not changed:
            return None
        try:
            # Trailing bytes the broker appended are kept: only addresses change.
            return encode_response(key, version, corr, body) + trailing
        except Exception as exc:
            self.errors.append(f"conn {conn_id}: cannot re-encode api {key} v{version} "
                               f"response (corr {corr}): {exc!r}")
            return None

    def _clamp_api_versions(self, version: int, corr: int, frame: bytes,
                            conn_id: int) -> bytes | None:
        if frame[4:6] != b"\0\0":
            quirk = parse_mock_api_versions_error(frame) if version >= 3 else None
            if quirk is None or not self.repair_quirks:
                return None  # other error responses go through untouched
            corr, entries, _ = quirk
            body = API_VERSIONS.response(error_code=UNSUPPORTED_VERSION, api_keys=[
                API_VERSIONS.response.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, lo, hi in entries])
            return encode_response(API_API_VERSIONS, 0, corr, body)
        if not self.clamp_to_codec and not self.max_versions:
            return None
        try:
            _, body, trailing = decode_response_lenient(API_API_VERSIONS, version, frame)
        except Exception as exc:
            self.errors.append(f"conn {conn_id}: cannot decode ApiVersions v{version} "
                               f"response (corr {corr}) for clamping: {exc!r}")
            return None
        kept, changed = [], False
        for entry in body.api_keys:
            api = APIS.get(entry.api_key) if self.clamp_to_codec else None
            if self.clamp_to_codec and api is None:
                hi = lo = None
            else:
                hi = entry.max_version if api is None else min(entry.max_version, api.versions.hi)
                lo = entry.min_version if api is None else max(entry.min_version, api.versions.lo)
                hi = min(hi, self.max_versions.get(entry.api_key, hi))
            if hi is None or hi < lo:
                self.version_clamps.add((entry.api_key, entry.min_version, entry.max_version, None))
                changed = True
                continue
            if (lo, hi) != (entry.min_version, entry.max_version):
                self.version_clamps.add((entry.api_key, entry.min_version, entry.max_version, hi))
                entry.min_version, entry.max_version = lo, hi
                changed = True
            kept.append(entry)
        if not changed:
            return None
        body.api_keys = kept
        try:
            return encode_response(API_API_VERSIONS, version, corr, body) + trailing
        except Exception as exc:
            self.errors.append(f"conn {conn_id}: cannot re-encode ApiVersions v{version} "
                               f"response (corr {corr}): {exc!r}")
            return None
