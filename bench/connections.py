"""Idle connections: what each open connection costs the Sluice broker in memory.

Opens N connections to a broker process on 127.0.0.1 (sluice.broker_process), each
doing one ApiVersions and then nothing, and reports the broker's RSS growth (VmRSS
from /proc) per connection. One warm-up connection comes first, so that code and
caches loaded by the first request are not charged to the N.

    python -m bench.connections [--connections N]
"""

from __future__ import annotations

import argparse
import datetime
import os
import resource
import socket
import struct
import tempfile
import time

from bench.common import DEFAULT_OUT, _atomic_write, memory_kib
from bench.machine import describe_machine

_SIZE = struct.Struct(">i")
API_VERSIONS_VERSION = 3


def api_versions_frame(correlation_id: int) -> bytes:
    from wire.messages import API_VERSIONS
    from wire.protocol import RequestHeader, encode_request

    payload = encode_request(
        RequestHeader(request_api_key=API_VERSIONS.key, request_api_version=API_VERSIONS_VERSION,
                      correlation_id=correlation_id, client_id="bench-connections"),
        API_VERSIONS.request(client_software_name="bench", client_software_version="1"))
    return _SIZE.pack(len(payload)) + payload


def recv_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed a connection")
        data += chunk
    return bytes(data)


def read_response(sock: socket.socket) -> None:
    """One whole response frame, discarded."""
    recv_exact(sock, _SIZE.unpack(recv_exact(sock, 4))[0])


def open_idle(port: int, count: int, timeout: float) -> list[socket.socket]:
    """`count` connections, each after one answered ApiVersions."""
    socks = []
    for i in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        socks.append(sock)
        sock.sendall(api_versions_frame(i))
    for sock in socks:
        read_response(sock)
    return socks


def measure(count: int, timeout: float = 30.0) -> dict:
    from sluice.broker_process import BrokerProcess

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < count + 256:  # the broker process inherits the limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(count + 256, hard), hard))
    with tempfile.TemporaryDirectory(prefix="sluice-bench-connections-") as workdir:
        broker = BrokerProcess(workdir).start(timeout=60)
        socks: list[socket.socket] = []
        try:
            pid = broker.proc.pid
            for sock in open_idle(broker.port, 1, timeout):
                sock.close()
            time.sleep(0.5)
            before = memory_kib(pid, "VmRSS")
            started = time.perf_counter()
            socks = open_idle(broker.port, count, timeout)
            seconds = time.perf_counter() - started
            time.sleep(0.5)
            after = memory_kib(pid, "VmRSS")
        finally:
            for sock in socks:
                sock.close()
            broker.stop()
    return {"connections": count, "rss_before_kib": before, "rss_after_kib": after,
            "kib_per_connection": (after - before) / count, "open_seconds": seconds}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for the .md")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    print(f"machine: {describe_machine()}")
    r = measure(args.connections)
    line = (f"idle connections: {r['connections']} (each after one ApiVersions), opened in "
            f"{r['open_seconds']:.2f} s; broker RSS {r['rss_before_kib'] / 1024:.1f} -> "
            f"{r['rss_after_kib'] / 1024:.1f} MiB: {r['kib_per_connection']:.1f} KiB per connection")
    print(line)
    if not args.no_write:
        today = datetime.date.today().isoformat()
        os.makedirs(args.out, exist_ok=True)
        _atomic_write(os.path.join(args.out, f"connections-{today}.md"),
                      f"# Memory per idle connection: {today}\n\n- machine: {describe_machine()}\n"
                      f"- {line}\n")


if __name__ == "__main__":
    main()
