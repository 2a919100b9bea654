"""The real broker process under its connection limits (Kafka's config names).

- max.connections.per.ip(.overrides): a client host over its limit is closed at once.
- max.connections: a new connection waits (unanswered) until another one closes.
- connections.max.idle.ms: an idle connection is closed (also one stopped mid-request
  or not reading its responses); one in a long poll is not.
- Memory: a client that never reads its responses, pipelines large requests behind a
  waiting one, or (with queued.max.requests) many clients doing the latter cannot grow
  the broker's RSS past a bound.
- Out of descriptors: the log stays small, and the broker serves again once some free.

Everything is bounded in time and count; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import time

import pytest

from sluice.broker_process import BrokerProcess
from tests.test_broker_failures import (API_VERSIONS, FETCH, FETCH_VERSION, api_versions_body,
                                        connect, drain_until_closed, fetch_body, frame,
                                        records_of, recv_frame, roundtrip, rss_kb)
from sluice_client import Client, NewTopic

pytestmark = pytest.mark.timeout(60)

TOPIC = "limits"
MIB = 1 << 20


def start_broker(tmp_path, **settings) -> BrokerProcess:
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    return BrokerProcess(tmp_path / "data", config_file=str(config))


def api_versions(sock: socket.socket, correlation_id: int = 1) -> None:
    response = roundtrip(sock, API_VERSIONS, 3, api_versions_body(), correlation_id)
    assert response.error_code == 0


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the broker closes `sock` (EOF or reset) within `seconds`, unanswered."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def create_topic_with_records(port: int, value_size: int = 2000, count: int = 25) -> None:
    client = Client(f"127.0.0.1:{port}", call_timeout=30)
    try:
        created = client.admin.create_topics({TOPIC: NewTopic(partitions=1)})
        assert all(c.error is None for c in created.values()), created
        client.producer.produce(TOPIC, 0, records_of(count, "r", value_size))
    finally:
        client.close()


def broker_connections(port: int) -> set[int]:
    """The client ports of the connections the broker on `port` holds open (ESTABLISHED in
    the kernel's table: a socket the broker closed is no longer, whatever its peer does)."""
    ports = set()
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            local, remote, state = line.split()[1:4]
            if state == "01" and int(local.split(":")[1], 16) == port:
                ports.add(int(remote.split(":")[1], 16))
    return ports


def send_for(sock: socket.socket, data: bytes, seconds: float) -> int:
    """Send what the broker takes within `seconds`; the bytes sent."""
    sock.settimeout(seconds)
    sent = 0
    deadline = time.monotonic() + seconds
    view = memoryview(data)
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += sock.send(view[sent:sent + MIB])
        except (socket.timeout, BlockingIOError):
            break
    return sent


def garbage_frame(size: int) -> bytes:
    return struct.pack(">i", size) + bytes(size)


def test_connections_per_ip_over_the_limit_are_closed(tmp_path):
    with start_broker(tmp_path, **{"max.connections.per.ip": 100,
                                   "max.connections.per.ip.overrides": "127.0.0.1:2"}) as broker:
        first, second = connect(broker.port), connect(broker.port)
        api_versions(first)
        api_versions(second)
        third = connect(broker.port)
        assert closed_within(third, 5), "a third connection from 127.0.0.1 was kept"
        first.close()
        deadline = time.monotonic() + 5
        while True:  # the broker sees the close a moment later
            sock = connect(broker.port)
            sock.sendall(frame(API_VERSIONS, 3, api_versions_body(), 2))
            if recv_frame(sock) is not None or time.monotonic() > deadline:
                break
            sock.close()
        assert time.monotonic() <= deadline, "a freed slot was not reusable"
        api_versions(second, 3)


def test_max_connections_makes_new_connections_wait(tmp_path):
    with start_broker(tmp_path, **{"max.connections": 3}) as broker:
        held = [connect(broker.port) for _ in range(3)]
        for sock in held:
            api_versions(sock)
        waiting = connect(broker.port)  # completes in the kernel's backlog
        waiting.sendall(frame(API_VERSIONS, 3, api_versions_body(), 7))
        waiting.settimeout(1.5)
        with pytest.raises(socket.timeout):
            waiting.recv(1)
        held.pop().close()
        waiting.settimeout(10)
        assert recv_frame(waiting) is not None, "the waiting connection was not served"
        for sock in held:
            api_versions(sock, 2)


def test_idle_connections_are_closed_but_not_long_polls(tmp_path):
    with start_broker(tmp_path, **{"connections.max.idle.ms": 1000}) as broker:
        create_topic_with_records(broker.port)  # ~50 KB: the answers to `stuck` pile up
        silent, used, polling = connect(broker.port), connect(broker.port), connect(broker.port)
        stuck, partial = connect(broker.port), connect(broker.port)
        api_versions(used)
        send_for(stuck, frame(FETCH, FETCH_VERSION, fetch_body([(TOPIC, 0, 0)]), 1) * 3000, 0.5)
        partial.sendall(garbage_frame(200_000)[:100_000])
        polling.sendall(frame(FETCH, FETCH_VERSION, fetch_body([(TOPIC, 0, 25)], max_wait_ms=2500), 9))
        started = time.monotonic()
        assert closed_within(silent, 5) and closed_within(used, 5) and closed_within(partial, 5)
        assert time.monotonic() - started >= 0.9
        # `stuck` never read: closed too, its unsent answers dropped, while `polling` waits
        stuck_port, polling_port = stuck.getsockname()[1], polling.getsockname()[1]
        deadline = time.monotonic() + 10
        while (open_connections := broker_connections(broker.port)) - {polling_port} \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert open_connections <= {polling_port}, f"stuck is {stuck_port}: {open_connections}"
        drain_until_closed(stuck)
        polling.settimeout(5)
        assert recv_frame(polling) is not None, "a long poll was closed as idle"
        assert time.monotonic() - started >= 2.4
        assert closed_within(polling, 5)


def test_a_client_that_never_reads_cannot_grow_memory(tmp_path):
    with start_broker(tmp_path, **{"socket.request.max.bytes": 8 * MIB}) as broker:
        create_topic_with_records(broker.port)  # ~50 KB: each fetch answer is read into memory
        before = rss_kb(broker.proc.pid)
        # 1. Thousands of pipelined fetches (one read holds hundreds), never reading.
        reader = connect(broker.port)
        fetch = frame(FETCH, FETCH_VERSION, fetch_body([(TOPIC, 0, 0)]), 1)
        send_for(reader, fetch * 3000, 3)
        # 2. Large requests pipelined behind a long poll (they queue until it ends).
        piper = connect(broker.port)
        piper.sendall(frame(FETCH, FETCH_VERSION, fetch_body([(TOPIC, 0, 25)], max_wait_ms=20_000), 1))
        send_for(piper, garbage_frame(6 * MIB) * 7, 3)
        time.sleep(0.5)
        grown_mib = (rss_kb(broker.proc.pid) - before) / 1024
        assert grown_mib < 24, f"RSS grew {grown_mib:.0f} MiB"
        reader.close()
        piper.close()


def test_queued_max_requests_bounds_what_all_connections_queue(tmp_path):
    with start_broker(tmp_path, **{"queued.max.requests": 4}) as broker:
        create_topic_with_records(broker.port, count=1)
        before = rss_kb(broker.proc.pid)
        clients = []
        for _ in range(20):  # each: a long poll, then 7 frames of 120 KiB queued behind it
            sock = connect(broker.port)
            sock.sendall(frame(FETCH, FETCH_VERSION, fetch_body([(TOPIC, 0, 1)], max_wait_ms=20_000), 1))
            send_for(sock, garbage_frame(120 * 1024) * 7, 0.2)
            clients.append(sock)
        time.sleep(0.5)
        grown_mib = (rss_kb(broker.proc.pid) - before) / 1024
        assert grown_mib < 8, f"RSS grew {grown_mib:.1f} MiB"
        for sock in clients:
            sock.close()
        with connect(broker.port) as sock:
            api_versions(sock)


def test_out_of_descriptors_logs_little_and_recovers(tmp_path):
    with start_broker(tmp_path) as broker:
        pid = broker.proc.pid
        open_fds = len(os.listdir(f"/proc/{pid}/fd"))
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds + 16, open_fds + 16))
        clients = [connect(broker.port) for _ in range(40)]  # the rest wait in the backlog
        time.sleep(1)
        mark = sum(map(len, broker.output))
        time.sleep(5)
        logged = sum(map(len, broker.output)) - mark
        assert logged < 4096, f"{logged} bytes logged in 5 s:\n{''.join(broker.output[-5:])}"
        for sock in clients:
            sock.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                with connect(broker.port, timeout=3) as sock:
                    api_versions(sock)
                break
            except (AssertionError, OSError):
                assert time.monotonic() < deadline, "the broker did not serve again"
                time.sleep(0.2)
