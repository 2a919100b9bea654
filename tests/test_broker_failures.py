"""The real broker process under failure: crashes, hostile input, many connections.

- SIGKILL while an idempotent confluent-kafka producer sends, restart on the same port
  and data directory: every acknowledged record is stored exactly once, in order; a
  retried batch whose answer was lost in the crash is recognised as a duplicate.
- Bad input over raw sockets (garbage, truncated frames, forged sizes, unknown APIs
  and versions, invalid batches, out-of-range fetches, abandoned long polls, a client
  that never reads): each gets Kafka's answer (an error code, or a closed connection),
  and afterwards the broker still serves other clients (a raw connection, the wire
  client, a confluent producer running throughout), its memory stays bounded, it
  holds no connection of the finished case, and no stored data has changed.
- Hundreds of concurrent connections pipelining requests: all answered, in order.
- acks=0 produce of a bad batch closes the connection, as in Kafka.
- A checkpoint write that does not return (its file a named pipe nobody reads) leaves
  the broker answering, and the next one is written once it fails.

Everything is bounded in time and count; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import resource
import socket
import struct
import threading
import time

import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import API_VERSIONS, DESCRIBE_TOPIC_PARTITIONS, FETCH, METADATA, PRODUCE, REQUEST_HEADER
from wire.protocol import RequestHeader, decode_response, encode_request
from wire.records import CONTROL_COMMIT, build_batch, build_control_batch, parse_header

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

_SIZE = struct.Struct(">i")
_CLIENT_ID = "failure-test"
PRODUCE_VERSION = 9  # flexible; v8+ carries error_message
FETCH_VERSION = 11  # topics by name, leader epochs
MAX_RSS_GROWTH_KB = 100 * 1024


# -- raw frames ----------------------------------------------------------------------

def frame(api, version: int, body, correlation_id: int, client_id: str = _CLIENT_ID) -> bytes:
    payload = encode_request(RequestHeader(request_api_key=api.key, request_api_version=version,
                                           correlation_id=correlation_id, client_id=client_id), body)
    return _SIZE.pack(len(payload)) + payload


def raw_frame(api_key: int, version: int, correlation_id: int, body: bytes,
              header_version: int = 2) -> bytes:
    """A frame with a hand-made body, for versions the codec cannot encode."""
    header = REQUEST_HEADER.encode(header_version, RequestHeader(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
        client_id=_CLIENT_ID)).getvalue()
    return _SIZE.pack(len(header) + len(body)) + header + body


def connect(port: int, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes | None:
    """n bytes, or None when the peer closes first."""
    data = bytearray()
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def recv_frame(sock: socket.socket) -> bytes | None:
    size = recv_exact(sock, 4)
    if size is None:
        return None
    (n,) = _SIZE.unpack(size)
    assert 0 <= n < 64 << 20, f"response size {n}"
    return recv_exact(sock, n)


def roundtrip(sock: socket.socket, api, version: int, body, correlation_id: int):
    sock.sendall(frame(api, version, body, correlation_id))
    data = recv_frame(sock)
    assert data is not None, f"{api.name} v{version}: connection closed instead of a response"
    header, response = decode_response(api.key, version, data)
    assert header.correlation_id == correlation_id
    return response


def send_quietly(sock: socket.socket, data: bytes) -> None:
    """Send what the broker will take; it may close the connection half way."""
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def assert_closed_by_broker(sock: socket.socket, timeout: float = 10.0) -> None:
    """The broker closes the connection without answering (anything it sends fails)."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except socket.timeout:
        pytest.fail(f"the broker kept the connection open for {timeout} s")
    assert data == b"", f"expected the connection to be closed, got {data[:64]!r}"


def drain_until_closed(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Whatever the broker answers until it closes the connection (bounded)."""
    sock.settimeout(timeout)
    received = bytearray()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        except socket.timeout:
            pytest.fail(f"the broker kept the connection open for {timeout} s")
        if not chunk:
            break
        received += chunk
        assert len(received) < 16 << 20
    return bytes(received)


def records_of(n: int, tag: str, value_size: int = 0) -> list[tuple]:
    now = int(time.time() * 1000)
    return [(f"{tag}-{i}".encode(), os.urandom(value_size) if value_size else f"{tag}-{i}".encode(),
             (), now) for i in range(n)]


def produce_body(topic: str, partition: int, records, acks: int = -1):
    return PRODUCE.request(acks=acks, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=partition, records=records)])])


def fetch_body(wanted: list[tuple[str, int, int]], max_wait_ms: int = 0):
    by_topic: dict[str, list] = {}
    for topic, partition, offset in wanted:
        by_topic.setdefault(topic, []).append(FETCH.request.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20))
    return FETCH.request(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=4 << 20,
                         isolation_level=0, session_id=0, session_epoch=-1,
                         topics=[FETCH.request.FetchTopic(topic=t, partitions=ps)
                                 for t, ps in by_topic.items()],
                         forgotten_topics_data=[], rack_id="")


def api_versions_body():
    return API_VERSIONS.request(client_software_name="failure-test", client_software_version="1")


def metadata_body():
    return METADATA.request(topics=None, allow_auto_topic_creation=False,
                            include_cluster_authorized_operations=False,
                            include_topic_authorized_operations=False)


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def raise_fd_limit(wanted: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


# -- a broker with data to protect -----------------------------------------------------

VICTIM = "victim"  # the topic whose data must never change
VICTIM_PARTITIONS = 2
VICTIM_MAX_MESSAGE_BYTES = 64 * 1024
CANARY = "canary"  # written by the clients that must keep working
BULK = "bulk"  # about 1 MB, for large fetch responses
SPLIT = "split"  # written only by the split-frames case


class BackgroundProducer:
    """A confluent-kafka producer writing to the canary topic the whole time."""

    def __init__(self, bootstrap: str):
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                     "linger.ms": 0, "message.timeout.ms": 30_000})
        self.ok = 0
        self.errors: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="canary-producer")

    def _report(self, err, msg) -> None:
        if err is None:
            self.ok += 1
        else:
            self.errors.append(err)

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            if len(self.producer) < 50:
                self.producer.produce(CANARY, b"bg-%d" % i, partition=0, on_delivery=self._report)
                i += 1
            self.producer.poll(0.02)

    def start(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def wait_for_more(self, than: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.ok <= than + 2:
            assert not self.errors, f"background producer failed: {self.errors[:3]}"
            assert time.monotonic() < deadline, "the background producer stopped getting acks"
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.producer.flush(10)


class Target:
    def __init__(self, proc: BrokerProcess, client: Client, background: BackgroundProducer):
        self.proc = proc
        self.client = client
        self.background = background

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def pid(self) -> int:
        return self.proc.proc.pid

    def alive(self) -> bool:
        return self.proc.proc is not None and self.proc.proc.poll() is None

    def victim_records(self) -> dict[int, list[tuple]]:
        out = {}
        for p in range(VICTIM_PARTITIONS):
            rows, offset = [], 0
            for _ in range(1000):
                fetched = self.client.consumer.fetch_records(VICTIM, p, offset, max_wait_ms=0)
                rows += [(r.offset, r.key, r.value) for r in fetched.records]
                offset = fetched.next_offset
                if offset >= fetched.result.high_watermark:
                    break
            out[p] = rows
        return out

    def victim_files(self) -> dict[str, int]:
        sizes = {}
        for p in range(VICTIM_PARTITIONS):
            directory = os.path.join(self.proc.data_dir, f"{VICTIM}-{p}")
            for name in os.listdir(directory):
                sizes[f"{p}/{name}"] = os.path.getsize(os.path.join(directory, name))
        return sizes

    def open_sockets(self) -> int:
        """The broker's open sockets (its files come and go with the segment read cache)."""
        fds = f"/proc/{self.pid}/fd"
        count = 0
        for name in os.listdir(fds):
            try:
                count += os.readlink(os.path.join(fds, name)).startswith("socket:")
            except FileNotFoundError:
                continue
        return count

    def internal_errors(self) -> list[str]:
        return [line for line in self.proc.output if "internal error" in line or "Traceback" in line]

    def assert_serving(self) -> None:
        """A fresh raw connection, our Sluice client and a confluent producer all work."""
        assert self.alive(), "the broker process died:\n" + "".join(self.proc.output[-30:])
        with connect(self.port) as sock:
            response = roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 7)
            assert response.error_code == 0
        result = self.client.producer.produce(CANARY, 0, [(b"wire", b"canary")])
        fetched = self.client.consumer.fetch_records(CANARY, 0, result.base_offset, max_wait_ms=0)
        assert [r.value for r in fetched.records[:1]] == [b"canary"]
        self.background.wait_for_more(self.background.ok)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("failures") / "data").start()
    client = background = None
    try:
        client = Client(proc.bootstrap_servers, call_timeout=60)
        created = client.admin.create_topics({
            VICTIM: NewTopic(partitions=VICTIM_PARTITIONS,
                             configs={"max.message.bytes": str(VICTIM_MAX_MESSAGE_BYTES)}),
            CANARY: NewTopic(partitions=1), BULK: NewTopic(partitions=1),
            SPLIT: NewTopic(partitions=1)})
        assert all(c.error is None for c in created.values()), created
        for p in range(VICTIM_PARTITIONS):
            for n in range(5):
                client.producer.produce(VICTIM, p, records_of(20, f"v{p}-{n}", 100))
        for n in range(8):  # enough for fetch responses sent with sendfile
            client.producer.produce(BULK, 0, records_of(16, f"bulk{n}", 8000))
        background = BackgroundProducer(proc.bootstrap_servers).start()
        yield Target(proc, client, background)
        assert not background.errors, background.errors[:3]
    finally:
        if background is not None:
            background.stop()
        if client is not None:
            client.close()
        alive = proc.proc is not None and proc.proc.poll() is None
        proc.stop() if alive else proc.kill()


@pytest.fixture
def guarded(target):
    """Around each bad-input case: the broker serves before and after, its memory
    stays bounded, and the victim topic's records and files are unchanged."""
    target.assert_serving()
    records, files = target.victim_records(), target.victim_files()
    rss_before, sockets_before = rss_kb(target.pid), target.open_sockets()
    yield target
    target.assert_serving()
    assert rss_kb(target.pid) - rss_before < MAX_RSS_GROWTH_KB
    assert target.victim_files() == files
    assert target.victim_records() == records
    deadline = time.monotonic() + 10  # every connection the case opened is closed again
    while target.open_sockets() > sockets_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert target.open_sockets() <= sockets_before, "the broker kept connections of a finished case"
    assert not target.internal_errors(), "".join(target.internal_errors())


# -- bad bytes on the wire ------------------------------------------------------------

def test_random_bytes_are_refused(guarded):
    rng = random.Random(1234)
    for i in range(60):
        with connect(guarded.port) as sock:
            if i % 3 == 0:  # anything at all, size prefix included
                data = rng.randbytes(rng.randint(1, 20_000))
            elif i % 3 == 1:  # a plausible size prefix over random bytes
                body = rng.randbytes(rng.randint(0, 4_000))
                data = _SIZE.pack(len(body)) + body
            else:  # a real header (a served API) over a random body
                api = rng.choice([PRODUCE, FETCH, METADATA, API_VERSIONS])
                header = REQUEST_HEADER.encode(2, RequestHeader(
                    request_api_key=api.key, request_api_version=api.versions.hi,
                    correlation_id=i, client_id=_CLIENT_ID)).getvalue()
                body = header + rng.randbytes(rng.randint(0, 2_000))
                data = _SIZE.pack(len(body)) + body
            send_quietly(sock, data)
            try:
                sock.shutdown(socket.SHUT_WR)  # end of input: the broker must close too
            except OSError:
                pass
            drain_until_closed(sock)


def test_truncated_frames_then_close(guarded):
    victim_batch = build_batch(records_of(5, "truncated"))
    frames = [frame(API_VERSIONS, 3, api_versions_body(), 1),
              frame(METADATA, 12, metadata_body(), 2),
              frame(PRODUCE, PRODUCE_VERSION, produce_body(VICTIM, 0, victim_batch), 3),
              frame(FETCH, FETCH_VERSION, fetch_body([(VICTIM, 0, 0)]), 4)]
    rng = random.Random(99)
    for data in frames:
        cuts = {1, 3, 4, 5, 10, len(data) // 2, len(data) - 1} | {rng.randrange(1, len(data))
                                                                 for _ in range(4)}
        for cut in sorted(cuts):
            with connect(guarded.port) as sock:  # abrupt close mid-frame
                sock.sendall(data[:cut])
            with connect(guarded.port) as sock:  # half close: the broker closes, no answer
                sock.sendall(data[:cut])
                sock.shutdown(socket.SHUT_WR)
                assert drain_until_closed(sock) == b""
    # A whole request whose client leaves before the answer: a long-polling fetch.
    end = guarded.client.consumer.list_offsets(VICTIM, [0], -1)[0].offset
    for _ in range(5):
        with connect(guarded.port) as sock:
            sock.sendall(frame(FETCH, FETCH_VERSION,
                               fetch_body([(VICTIM, 0, end)], max_wait_ms=3_000), 5))


@pytest.mark.parametrize("size", [0x7FFFFFFF, -1, -0x80000000, 0, 3, 100 * 1024 * 1024 + 1])
def test_forged_size_prefix_closes_the_connection(guarded, size):
    """Sizes outside [4, socket.request.max.bytes] close the connection at once, and
    the megabytes that follow are never buffered."""
    with connect(guarded.port) as sock:
        send_quietly(sock, _SIZE.pack(size))
        chunk = os.urandom(1 << 20)
        for _ in range(4):
            send_quietly(sock, chunk)
        assert_closed_by_broker(sock)


def test_memory_stays_bounded(guarded):
    """A 2 GiB size prefix followed by data, a frame just under the request limit that
    never completes, and 200 garbage connections: the broker's RSS barely moves."""
    rss_before = rss_kb(guarded.pid)
    chunk = os.urandom(1 << 20)
    with connect(guarded.port) as sock:
        send_quietly(sock, _SIZE.pack(0x7FFFFFFF))
        for _ in range(8):
            send_quietly(sock, chunk)
        assert_closed_by_broker(sock)
    # Allowed size, but only a few MB of it ever arrive: buffers grow with the bytes.
    socks = [connect(guarded.port) for _ in range(3)]
    try:
        for sock in socks:
            sock.sendall(_SIZE.pack(100 * 1024 * 1024 - 1))
            for _ in range(4):
                sock.sendall(chunk)
        time.sleep(0.3)
        assert rss_kb(guarded.pid) - rss_before < MAX_RSS_GROWTH_KB
    finally:
        for sock in socks:
            sock.close()
    rng = random.Random(200)
    for i in range(200):
        with connect(guarded.port) as sock:
            send_quietly(sock, rng.randbytes(rng.randint(1, 8_000)))
            if i % 2:
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                drain_until_closed(sock)
    time.sleep(0.3)
    growth = rss_kb(guarded.pid) - rss_before
    assert growth < MAX_RSS_GROWTH_KB, f"RSS grew by {growth} kB"


def test_abandoned_long_polls_release_their_connections(guarded):
    """Fetches that may wait for days (max_wait_ms 2**31-1, min_bytes out of reach)
    whose clients leave, by FIN or by RST: the broker lets go of the connections at
    once rather than when the wait would end."""
    end = guarded.client.consumer.list_offsets(VICTIM, [0], -1)[0].offset
    sockets_before = guarded.open_sockets()
    body = fetch_body([(VICTIM, 0, end)], max_wait_ms=0x7FFFFFFF)
    body.min_bytes = 0x7FFFFFFF
    for i in range(40):
        sock = connect(guarded.port)
        sock.sendall(frame(FETCH, FETCH_VERSION, body, i))
        if i % 2:  # abortive close: RST
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        time.sleep(0.005)
        sock.close()
    deadline = time.monotonic() + 5
    while guarded.open_sockets() > sockets_before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert guarded.open_sockets() <= sockets_before, f"{guarded.open_sockets() - sockets_before} connections held"
    # A long poll on a live connection still waits, and is answered when data arrives.
    with connect(guarded.port) as sock:
        body = fetch_body([(CANARY, 0, guarded.client.consumer.list_offsets(CANARY, [0], -1)[0].offset)],
                          max_wait_ms=10_000)
        sock.sendall(frame(FETCH, FETCH_VERSION, body, 77))
        time.sleep(0.2)
        guarded.client.producer.produce(CANARY, 0, [(b"k", b"wake up")])
        data = recv_frame(sock)
        header, response = decode_response(FETCH.key, FETCH_VERSION, data)
        assert header.correlation_id == 77
        assert response.responses[0].partitions[0].records


def test_client_that_never_reads_its_responses(guarded):
    """A client pipelining thousands of requests without reading an answer: the broker
    stops reading from it (bounded queue, bounded write buffer) and serves the others."""
    rss_before = rss_kb(guarded.pid)
    fetches = [fetch_body([(VICTIM, 0, 0), (VICTIM, 1, 0)]), fetch_body([(BULK, 0, 0)])]
    requests = b"".join(frame(FETCH, FETCH_VERSION, fetches[i % 4 == 1], i) if i % 2
                        else frame(METADATA, 12, metadata_body(), i) for i in range(400))
    with connect(guarded.port) as sock:
        sock.settimeout(0.5)
        sent = 0
        deadline = time.monotonic() + 5
        try:
            while time.monotonic() < deadline:
                sock.sendall(requests)
                sent += len(requests)
        except socket.timeout:
            pass  # the broker stopped reading: its queue and the socket buffers are full
        assert time.monotonic() < deadline, f"the broker read {sent} bytes without bound"
        guarded.assert_serving()
        assert rss_kb(guarded.pid) - rss_before < MAX_RSS_GROWTH_KB


# -- unknown APIs and versions -------------------------------------------------------

@pytest.mark.parametrize("api_key,version", [(999, 0), (-1, 0), (8, 8), (10, 4), (0, 99), (1, 99),
                                             (1, 3), (3, 99)])
def test_unserved_api_or_version_closes_the_connection(guarded, api_key, version):
    """Unknown API keys, APIs this broker does not serve (OffsetCommit, FindCoordinator),
    versions above the newest (Produce v99) or below the oldest served (Fetch v3)."""
    with connect(guarded.port) as sock:
        sock.sendall(raw_frame(api_key, version, 11, b"\x00" * 16))
        assert_closed_by_broker(sock)


@pytest.mark.parametrize("body", [b"\x0dfailure-test\x021\x00", b"", b"\xff" * 40],
                         ids=["v3-body", "empty-body", "garbage-body"])
def test_api_versions_at_unknown_version_lists_ours(guarded, body):
    """ApiVersions v99 (request header v2, as for the newest known version; the body is
    not read): UNSUPPORTED_VERSION in the v0 layout, with the served ranges; the
    connection stays open for the client's retry at a version it then picks."""
    with connect(guarded.port) as sock:
        sock.sendall(raw_frame(API_VERSIONS.key, 99, 42, body))
        data = recv_frame(sock)
        assert data is not None, "closed instead of answering UNSUPPORTED_VERSION"
        header, response = decode_response(API_VERSIONS.key, 0, data)
        assert header.correlation_id == 42
        assert response.error_code == ErrorCode.UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[API_VERSIONS.key] == (0, 5)
        assert ranges[PRODUCE.key][0] == 0 and ranges[PRODUCE.key][1] >= PRODUCE_VERSION
        assert ranges[FETCH.key][0] == 4
        retry = roundtrip(sock, API_VERSIONS, ranges[API_VERSIONS.key][1], api_versions_body(), 43)
        assert retry.error_code == 0
        assert {k.api_key: (k.min_version, k.max_version) for k in retry.api_keys} == ranges


# -- bad produce requests get Kafka's error codes -------------------------------------

def corrupt_crc() -> bytes:
    batch = bytearray(build_batch(records_of(10, "crc")))
    batch[-3] ^= 0x40  # inside the last record: the CRC-32C no longer matches
    return bytes(batch)


def truncated_batch() -> bytes:
    batch = build_batch(records_of(10, "cut"))
    return batch[:-7]  # batchLength promises more than the records field holds


def too_large() -> bytes:
    return build_batch(records_of(2, "big", VICTIM_MAX_MESSAGE_BYTES))


def control_batch() -> bytes:
    return build_control_batch(CONTROL_COMMIT, producer_id=4242, producer_epoch=0,
                               coordinator_epoch=0, timestamp=int(time.time() * 1000))


def two_batches() -> bytes:
    return build_batch(records_of(3, "first")) + build_batch(records_of(3, "second"))


BAD_PRODUCES = {
    # name: (topic, partition, records, acks, expected error)
    "corrupt_crc": (VICTIM, 0, corrupt_crc, -1, ErrorCode.CORRUPT_MESSAGE),
    "two_batches": (VICTIM, 1, two_batches, 1, ErrorCode.INVALID_RECORD),
    "truncated_batch": (VICTIM, 0, truncated_batch, -1, ErrorCode.CORRUPT_MESSAGE),
    "too_large": (VICTIM, 1, too_large, -1, ErrorCode.MESSAGE_TOO_LARGE),
    "control_batch": (VICTIM, 0, control_batch, -1, ErrorCode.INVALID_RECORD),
    "acks_5": (VICTIM, 0, lambda: build_batch(records_of(3, "acks")), 5,
               ErrorCode.INVALID_REQUIRED_ACKS),
    "unknown_topic": ("no-such-topic", 0, lambda: build_batch(records_of(3, "nt")), -1,
                      ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    "unknown_partition": (VICTIM, 99, lambda: build_batch(records_of(3, "np")), -1,
                          ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
}


@pytest.mark.parametrize("case", sorted(BAD_PRODUCES))
def test_bad_produce_gets_its_error_code(guarded, case):
    topic, partition, make, acks, expected = BAD_PRODUCES[case]
    with connect(guarded.port) as sock:
        response = roundtrip(sock, PRODUCE, PRODUCE_VERSION,
                             produce_body(topic, partition, make(), acks), 21)
        [topic_response] = response.responses
        [answer] = topic_response.partition_responses
        assert (topic_response.name, answer.index) == (topic, partition)
        assert answer.error_code == expected, answer.error_message
        assert answer.base_offset == -1
        assert answer.error_message
        # The connection stays usable after an error code.
        assert roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 22).error_code == 0
    assert not os.path.exists(os.path.join(guarded.proc.data_dir, "no-such-topic-0"))


def test_bad_partition_does_not_spoil_the_others(target):
    """One request, a good and a bad partition: the good one is stored, the bad one
    gets its error code (outside the `guarded` fixture: the canary topic changes)."""
    good = build_batch(records_of(4, "mixed"))
    body = PRODUCE.request(acks=-1, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=CANARY, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=good)]),
        PRODUCE.request.TopicProduceData(name=VICTIM, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=corrupt_crc())])])
    before = target.victim_records()
    with connect(target.port) as sock:
        response = roundtrip(sock, PRODUCE, PRODUCE_VERSION, body, 31)
    answers = {(t.name, p.index): p for t in response.responses for p in t.partition_responses}
    assert answers[(CANARY, 0)].error_code == 0 and answers[(CANARY, 0)].base_offset >= 0
    assert answers[(VICTIM, 0)].error_code == ErrorCode.CORRUPT_MESSAGE
    fetched = target.client.consumer.fetch_records(CANARY, 0, answers[(CANARY, 0)].base_offset, max_wait_ms=0)
    assert [r.value for r in fetched.records[:4]] == [b"mixed-%d" % i for i in range(4)]
    assert target.victim_records() == before


@pytest.mark.parametrize("version", [10, 11, 12])
def test_metadata_for_an_unknown_topic_id(guarded, version):
    """A topic asked for by an id the broker does not know (name null, v10+) gets
    UNKNOWN_TOPIC_ID; below v12 the response cannot carry a null name, so it is ""."""
    import uuid

    unknown = uuid.uuid4()
    body = METADATA.request(topics=[METADATA.request.MetadataRequestTopic(name=None, topic_id=unknown)],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with connect(guarded.port) as sock:
        response = roundtrip(sock, METADATA, version, body, 7)
        [topic] = response.topics
        assert (topic.error_code, topic.topic_id, topic.name) == (
            ErrorCode.UNKNOWN_TOPIC_ID, unknown, None if version >= 12 else "")
        assert roundtrip(sock, METADATA, version, metadata_body(), 8).brokers  # still served


@pytest.mark.parametrize("version", [10, 12])
def test_metadata_by_topic_id_with_an_empty_name(guarded, version):
    """The Java client asks for topics by id with the name left at its default, "" (not
    null): as in Kafka, a non-zero id is looked up by id, known or not."""
    import uuid

    known = guarded.client.metadata([VICTIM], allow_auto_topic_creation=False).topics[VICTIM].topic_id
    unknown = uuid.uuid4()
    body = METADATA.request(topics=[METADATA.request.MetadataRequestTopic(name="", topic_id=known),
                                    METADATA.request.MetadataRequestTopic(name="", topic_id=unknown)],
                            allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    with connect(guarded.port) as sock:
        response = roundtrip(sock, METADATA, version, body, 9)
    found, missing = response.topics
    assert (found.error_code, found.topic_id, found.name, len(found.partitions)) == (0, known, VICTIM, 2)
    assert (missing.error_code, missing.topic_id, missing.name) == (
        ErrorCode.UNKNOWN_TOPIC_ID, unknown, None if version >= 12 else "")


def test_describe_topic_partitions_pages_with_a_cursor(guarded):
    """DescribeTopicPartitions as Kafka answers it: topics in name order, at most
    `response_partition_limit` partitions, `next_cursor` where they run out (at partition 0
    of the next topic when the limit ends with one); unknown and invalid names get their
    errors; a cursor outside the topics named, or at a negative partition, INVALID_REQUEST."""
    Req = DESCRIBE_TOPIC_PARTITIONS.request

    def describe(names, limit, cursor=None, correlation_id=1):
        body = Req(topics=[Req.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                   cursor=None if cursor is None else Req.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
        response = roundtrip(sock, DESCRIBE_TOPIC_PARTITIONS, 0, body, correlation_id)
        pages = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in response.topics]
        after = response.next_cursor
        return pages, None if after is None else (after.topic_name, after.partition_index)

    with connect(guarded.port) as sock:
        assert describe([VICTIM, CANARY], 2) == ([(CANARY, 0, [0]), (VICTIM, 0, [0])], (VICTIM, 1))
        assert describe([VICTIM, CANARY], 2, (VICTIM, 1)) == ([(VICTIM, 0, [1])], None)
        assert describe([VICTIM, CANARY], 1) == ([(CANARY, 0, [0])], (VICTIM, 0))
        assert describe(["no-such-topic", "bad/name"], 10) == (
            [("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, []),
             ("no-such-topic", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])], None)
        assert describe([CANARY], 10, (VICTIM, 0)) == ([(CANARY, ErrorCode.INVALID_REQUEST, [])], None)
        assert describe([VICTIM], 10, (VICTIM, -1)) == ([(VICTIM, ErrorCode.INVALID_REQUEST, [])], None)
        every, _ = describe([], 1000, (VICTIM, 1))  # all topics from the cursor on
        assert every[0] == (VICTIM, 0, [1]) and all(name > VICTIM for name, _, _ in every[1:])
        body = Req(topics=[Req.TopicRequest(name=VICTIM)])
        [victim] = roundtrip(sock, DESCRIBE_TOPIC_PARTITIONS, 0, body, 2).topics
    assert victim.topic_id == guarded.client.metadata([VICTIM]).topics[VICTIM].topic_id
    assert not victim.is_internal and victim.topic_authorized_operations > 0
    assert [(p.leader_id, p.replica_nodes, p.isr_nodes, p.eligible_leader_replicas, p.last_known_elr)
            for p in victim.partitions] == [(0, [0], [0], [], [])] * VICTIM_PARTITIONS


def test_fetch_out_of_range_offset(guarded):
    end = guarded.client.consumer.list_offsets(VICTIM, [1], -1)[1].offset
    with connect(guarded.port) as sock:
        for bad in (end + 1, end + 10**9, -5):
            response = roundtrip(sock, FETCH, FETCH_VERSION,
                                 fetch_body([(VICTIM, 0, 0), (VICTIM, 1, bad)]), 50)
            assert response.error_code == 0
            [topic] = response.responses
            parts = {p.partition_index: p for p in topic.partitions}
            assert parts[1].error_code == ErrorCode.OFFSET_OUT_OF_RANGE, bad
            assert not parts[1].records
            assert parts[1].high_watermark == end
            # The good partition in the same request is served.
            assert parts[0].error_code == 0
            assert parse_header(bytes(parts[0].records)).base_offset == 0
        # At the end exactly: no error, no records.
        response = roundtrip(sock, FETCH, FETCH_VERSION, fetch_body([(VICTIM, 1, end)]), 51)
        [part] = response.responses[0].partitions
        assert part.error_code == 0 and not part.records


# -- acks=0 --------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["corrupt_crc", "too_large", "control_batch", "unknown_topic"])
def test_acks0_bad_produce_closes_the_connection(guarded, case):
    topic, partition, make, _, _ = BAD_PRODUCES[case]
    with connect(guarded.port) as sock:
        # A good acks=0 produce gets no response: the next answer is the ApiVersions one.
        sock.sendall(frame(PRODUCE, PRODUCE_VERSION,
                           produce_body(CANARY, 0, build_batch(records_of(2, "acks0")), acks=0), 60))
        assert roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 61).error_code == 0
        bad = produce_body(topic, partition, make(), acks=0)
        sock.sendall(frame(PRODUCE, PRODUCE_VERSION, bad, 62))
        assert_closed_by_broker(sock)


def test_pipelined_frames_split_anywhere(guarded):
    """A pipelined stream of requests, one of them larger than the broker's read buffer,
    delivered in pieces of random size (frames split anywhere, several frames per
    read): every request is answered, in order, and the large batch is stored whole."""
    rng = random.Random(99)
    topic = SPLIT
    large = build_batch(records_of(40, "split-large", 5000))  # ~200 KB
    plan = [(API_VERSIONS, 3, api_versions_body()),
            (PRODUCE, PRODUCE_VERSION, produce_body(topic, 0, build_batch(records_of(3, "split-a")))),
            (METADATA, 12, metadata_body()),
            (PRODUCE, PRODUCE_VERSION, produce_body(topic, 0, large)),
            (API_VERSIONS, 0, API_VERSIONS.request()),
            (PRODUCE, PRODUCE_VERSION, produce_body(topic, 0, build_batch(records_of(2, "split-b"))))]
    stream = b"".join(frame(api, version, body, 500 + i) for i, (api, version, body) in enumerate(plan))
    with connect(guarded.port) as sock:
        position = 0
        while position < len(stream):
            step = rng.choice((1, 3, 4, 5, 17, 700, 4096, 70_000))
            sock.sendall(stream[position:position + step])
            position += step
            if rng.random() < 0.3:
                time.sleep(0.002)
        offsets = []
        for i, (api, version, _) in enumerate(plan):
            data = recv_frame(sock)
            assert data is not None, f"closed before the response to request {i}"
            header, response = decode_response(api.key, version, data)
            assert header.correlation_id == 500 + i
            if api is PRODUCE:
                answer = response.responses[0].partition_responses[0]
                assert answer.error_code == 0, answer.error_message
                offsets.append(answer.base_offset)
    assert offsets[1] == offsets[0] + 3 and offsets[2] == offsets[1] + 40
    fetched = guarded.client.consumer.fetch_records(topic, 0, offsets[1], max_wait_ms=0)
    assert [r.key for r in fetched.records[:40]] == [f"split-large-{i}".encode() for i in range(40)]


# -- many connections ----------------------------------------------------------------

CONNECTIONS = 300
PIPELINED = 12  # more than the broker queues per connection before it pauses reading


def test_hundreds_of_pipelining_connections(tmp_path):
    raise_fd_limit(CONNECTIONS * 2 + 256)  # before the broker starts: it inherits the limit
    with BrokerProcess(tmp_path / "data") as proc:
        with Client(proc.bootstrap_servers) as client:
            client.admin.create_topics({"many": NewTopic(partitions=3)})
        started = time.monotonic()
        asyncio.run(asyncio.wait_for(_pipeline_everywhere(proc.port, proc.proc.pid), 90))
        elapsed = time.monotonic() - started
        assert proc.proc.poll() is None
        print(f"{CONNECTIONS} connections x {PIPELINED} pipelined requests in {elapsed:.2f} s")


async def _pipeline_everywhere(port: int, pid: int) -> None:
    async def open_one():
        for attempt in range(20):
            try:
                return await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05 * (attempt + 1))
        return await asyncio.open_connection("127.0.0.1", port)

    streams = await asyncio.gather(*(open_one() for _ in range(CONNECTIONS)))
    try:
        deadline = time.monotonic() + 10  # the broker holds all of them at once
        while len(os.listdir(f"/proc/{pid}/fd")) < CONNECTIONS:
            assert time.monotonic() < deadline, "the broker did not accept every connection"
            await asyncio.sleep(0.05)
        kinds = {}  # correlation id -> (api, version)
        # A long poll (the empty topic's fetch waits its max_wait_ms) in the middle:
        # the quick requests behind it must still be answered after it.
        slow_fetch = fetch_body([("many", 0, 0)], max_wait_ms=100)

        async def exchange(index: int, reader, writer) -> None:
            plan = []
            for j in range(PIPELINED):
                cid = index * 1000 + j
                api, version, body = ((API_VERSIONS, 3, api_versions_body()) if j % 2 == 0
                                      else (METADATA, 12, metadata_body()))
                if j % 4 == 3:
                    api, version, body = API_VERSIONS, 0, API_VERSIONS.request()
                if j == PIPELINED // 2 and index % 3 == 0:
                    api, version, body = FETCH, FETCH_VERSION, slow_fetch
                kinds[cid] = (api, version)
                plan.append(cid)
                writer.write(frame(api, version, body, cid))
            await writer.drain()
            for cid in plan:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                data = await reader.readexactly(size)
                api, version = kinds[cid]
                header, response = decode_response(api.key, version, data)
                assert header.correlation_id == cid, \
                    f"connection {index}: got {header.correlation_id}, expected {cid}"
                if api is METADATA:
                    assert "many" in {t.name for t in response.topics}
                else:
                    assert response.error_code == 0

        await asyncio.gather(*(exchange(i, r, w) for i, (r, w) in enumerate(streams)))
    finally:
        for _, writer in streams:
            writer.close()


# -- idempotent retries across a restart ---------------------------------------------

@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_idempotent_retry_after_restart_is_deduplicated(tmp_path, how):
    """A batch written just before the broker died, whose answer the producer never got,
    is retried after the restart: the broker rebuilds the producer state (from the log
    after SIGKILL, from its snapshot after SIGTERM) and answers with the original offset."""
    from wire.messages import INIT_PRODUCER_ID

    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(proc.bootstrap_servers) as client:
            client.admin.create_topics({"dedup": NewTopic(partitions=1)})
        init_body = INIT_PRODUCER_ID.request(transactional_id=None, transaction_timeout_ms=60_000)
        with connect(proc.port) as sock:
            init = roundtrip(sock, INIT_PRODUCER_ID, 4, init_body, 1)
            pid, epoch = init.producer_id, init.producer_epoch
            batches = [build_batch(records_of(5, f"b{n}"), producer_id=pid, producer_epoch=epoch,
                                   base_sequence=5 * n) for n in range(8)]

            def send(sock, n, cid):
                response = roundtrip(sock, PRODUCE, PRODUCE_VERSION,
                                     produce_body("dedup", 0, batches[n]), cid)
                return response.responses[0].partition_responses[0]

            offsets = [send(sock, n, 10 + n).base_offset for n in range(6)]
        assert offsets == [0, 5, 10, 15, 20, 25]
        if how == "sigkill":
            proc.kill()
        else:
            proc.stop()
        proc.start()
        with connect(proc.port) as sock:
            for n in (5, 1):  # the lost answer, and an older batch still remembered
                answer = send(sock, n, 20 + n)
                assert (answer.error_code, answer.base_offset) == (0, offsets[n])
            assert send(sock, 0, 30).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert send(sock, 7, 31).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # a gap
            answer = send(sock, 6, 32)
            assert (answer.error_code, answer.base_offset) == (0, 30)
            again = roundtrip(sock, INIT_PRODUCER_ID, 4, init_body, 33)
            assert again.producer_id != pid, "a producer id was handed out twice"
        with Client(proc.bootstrap_servers) as client:
            fetched = client.consumer.fetch_records("dedup", 0, 0, max_wait_ms=0)
        assert [r.key for r in fetched.records] == [f"b{n}-{i}".encode()
                                                     for n in range(7) for i in range(5)]
    finally:
        if proc.proc is not None:
            proc.kill()


# -- SIGKILL under an idempotent producer ------------------------------------------

KILL_TOPIC = "crash"
KILL_PARTITIONS = 4
PACE = 0.01  # CHUNK records produced every PACE seconds: requests are always in flight
# total records, value size, records per batch, records per chunk, kills as
# (acknowledged so far, seconds to wait before the kill, seconds the broker stays down)
KILL_PROFILES = {
    "small-batches": (9000, 0, 40, 60, [(1500, 0.0, 0.5), (3500, 0.003, 1.5), (5500, 0.02, 0.0)]),
    # ~1 MB batches: a kill may land inside a write, leaving a torn batch to recover from.
    "large-batches": (2400, 8000, 120, 40, [(400, 0.0, 0.3), (1000, 0.005, 1.0), (1600, 0.0, 0.0)]),
}


@pytest.mark.parametrize("profile", sorted(KILL_PROFILES))
def test_sigkill_during_idempotent_produce_loses_and_duplicates_nothing(tmp_path, profile):
    total, value_size, batch_records, chunk, kill_plan = KILL_PROFILES[profile]
    padding = os.urandom(value_size)
    started = time.monotonic()
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(proc.bootstrap_servers) as client:
            client.admin.create_topics({KILL_TOPIC: NewTopic(partitions=KILL_PARTITIONS)})
        reports: dict[int, tuple] = {}
        acked_count = 0

        def on_delivery(err, msg):
            nonlocal acked_count
            reports[int(msg.value()[3:9])] = (err, msg.partition(), msg.offset())
            acked_count += err is None

        producer = ck.Producer({
            "bootstrap.servers": proc.bootstrap_servers, "enable.idempotence": True,
            "acks": "all", "message.timeout.ms": 60_000, "request.timeout.ms": 10_000,
            "linger.ms": 2, "batch.num.messages": batch_records, "batch.size": 4 << 20,
            "retry.backoff.ms": 50, "retry.backoff.max.ms": 300,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300,
        })
        produced = 0

        def produce(n: int) -> None:
            nonlocal produced
            for _ in range(min(n, total - produced)):
                key = b"id-%06d" % produced
                producer.produce(KILL_TOPIC, key + padding, key=key,
                                 partition=produced % KILL_PARTITIONS, on_delivery=on_delivery)
                produced += 1

        kills = list(kill_plan)
        outstanding_at_kill = []  # messages produced but not yet acknowledged, per kill
        deadline = time.monotonic() + 90
        while produced < total or kills:
            assert time.monotonic() < deadline, \
                f"stuck: {produced} produced, {acked_count} acknowledged, kills left {kills}"
            if len(producer) < 4 * chunk:  # not far ahead: records are left for each kill
                produce(chunk)
            producer.poll(PACE)
            if kills and acked_count >= kills[0][0]:
                _, before_kill, down = kills.pop(0)
                produce(chunk)  # fresh requests on their way while the broker dies
                waited_until = time.monotonic() + before_kill
                while time.monotonic() < waited_until:  # and still coming while it waits
                    produce(chunk // 4)
                    producer.poll(0.002)
                # A slow poll can let every request finish; the kill must not find
                # the producer idle, so the last records are queued just before it.
                produce(chunk // 4)
                outstanding_at_kill.append(len(producer))
                proc.kill()
                for _ in range(2):  # keep producing while the broker is down
                    produce(chunk // 2)
                    producer.poll(down / 2)
                proc.start()
        remaining = producer.flush(75)
        assert remaining == 0, f"{remaining} messages undelivered after flush"
        assert len(reports) == produced == total
        # The kills hit a busy producer, not an idle one.
        assert all(n > 0 for n in outstanding_at_kill), outstanding_at_kill

        acked = {i for i, (err, _, _) in reports.items() if err is None}
        failed = {i: err for i, (err, _, _) in reports.items() if err is not None}
        assert not failed, f"{len(failed)} deliveries failed, e.g. {list(failed.items())[:3]}"

        stored = _read_back(proc.bootstrap_servers, KILL_TOPIC, KILL_PARTITIONS)
        ids = [i for p in stored for i, _ in stored[p]]
        duplicates = {i for i, n in collections.Counter(ids).items() if n > 1}
        assert not duplicates, f"{len(duplicates)} records stored twice, e.g. {sorted(duplicates)[:5]}"
        missing = acked - set(ids)
        assert not missing, f"{len(missing)} acknowledged records missing, e.g. {sorted(missing)[:5]}"
        assert set(ids) <= set(reports), "records nobody produced"
        for p, rows in stored.items():
            assert all(i % KILL_PARTITIONS == p for i, _ in rows)
            # Idempotence keeps order within a partition, and offsets match the reports.
            assert [i for i, _ in rows] == sorted(i for i, _ in rows), f"partition {p} out of order"
            for i, offset in rows:
                if i in acked:
                    assert reports[i][1:] == (p, offset)
        print(f"{profile}: {produced} records, {len(kill_plan)} kills with "
              f"{outstanding_at_kill} unacknowledged, "
              f"{time.monotonic() - started:.1f} s")
    finally:
        if proc.proc is not None:
            proc.kill()


def _read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 60.0):
    """{partition: [(id, offset)]} of everything stored, read from the beginning."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "failure-test-reader",
                            "enable.auto.commit": False, "enable.partition.eof": True,
                            "auto.offset.reset": "error"})
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        stored: dict[int, list] = {p: [] for p in range(partitions)}
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, "reading back took too long"
            for msg in consumer.consume(1000, 0.5):
                if msg.error():
                    if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise AssertionError(f"consumer error: {msg.error()}")
                at_end.discard(msg.partition())
                stored[msg.partition()].append((int(msg.value()[3:9]), msg.offset()))
        return stored
    finally:
        consumer.close()


def waiting_for_a_reader(pid: int) -> bool:
    """Whether a thread of the process waits in open() for a named pipe's reader."""
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/wchan") as wchan:
                if wchan.read() == "wait_for_partner":
                    return True
        except FileNotFoundError:
            pass  # the thread ended meanwhile
    return False


def test_a_checkpoint_write_that_does_not_return_leaves_the_broker_answering(tmp_path):
    """The broker writes its checkpoint files every few seconds, each fsynced: on a busy
    disk (the gigabyte a moved replica just wrote going out) an fsync takes hundreds of
    milliseconds, and the event loop stood still for them (bench.reassignment). A
    named pipe in place of the recovery points' temporary file holds the write until
    the test reads it."""
    data = tmp_path / "data"
    checkpoint = data / "recovery-point-offset-checkpoint"
    pipe = data / "recovery-point-offset-checkpoint.tmp"
    with BrokerProcess(data) as broker:
        os.mkfifo(pipe)
        try:
            wait_for(lambda: waiting_for_a_reader(broker.proc.pid), 30,
                     "the checkpoint job to open the named pipe")
            with Client(broker.bootstrap_servers, call_timeout=10) as client:
                assert client.admin.create_topics({"answered": NewTopic(partitions=1)})["answered"].error is None
        finally:
            reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)  # the write goes on, and fails
        try:
            wait_for(lambda: not pipe.exists(), 30, "the failed write to remove the named pipe")
            written = checkpoint.stat().st_mtime_ns
            wait_for(lambda: checkpoint.stat().st_mtime_ns > written, 30, "the next checkpoint")
        finally:
            os.close(reader)
