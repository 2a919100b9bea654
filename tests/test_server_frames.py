"""The listener's large frames (broker/server.py): a frame larger than a read buffer is read
into a buffer of its own, and that buffer serves again for later frames only once nothing
derived from it remains. A real KafkaServer on a loopback port, fed by a plain socket:

- the handler sees every frame exactly as sent (a checksum per frame, answered in order),
  whatever its size, pipelined or one at a time;
- views of a frame kept by the handler past its answer (as a response being prepared
  keeps decoded fields) still read the frame's own bytes after many later large frames.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import struct
import threading

import pytest

from broker.security.listeners import Endpoint
from broker.server import KafkaServer, Limits
from tests.test_broker_failures import recv_frame

pytestmark = pytest.mark.timeout(60)

_SIZE = struct.Struct(">i")


class FrameServer:
    """A KafkaServer in a thread of its own whose handler answers each frame with its
    SHA-256 and keeps a view of every third frame."""

    def __init__(self):
        self.kept: list[tuple[memoryview, bytes]] = []  # (view kept, the bytes it showed)
        self.loop = asyncio.new_event_loop()
        self.server = KafkaServer(self.handle, [Endpoint("PLAINTEXT", "127.0.0.1", 0)], Limits())
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        self.frames = 0

    def handle(self, frame, session):
        self.frames += 1
        if self.frames % 3 == 0:
            view = memoryview(frame)[7:7 + 4096]
            self.kept.append((view, bytes(view)))
        return [hashlib.sha256(frame).digest()]

    def close(self):
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def frame_server():
    server = FrameServer()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("pipelined", [False, True])
def test_large_frames_arrive_whole_and_kept_views_stay_intact(frame_server, pipelined):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    rng = random.Random(seed)
    frames = [rng.randbytes(rng.choice([100, 70_000, 300_000, 999_000, 1_500_000, 2_500_000]))
              for _ in range(40)]
    with socket.create_connection(("127.0.0.1", frame_server.server.port), timeout=30) as sock:
        answers = []
        if pipelined:  # a few at a time: the server reads on while it answers
            for start in range(0, len(frames), 4):
                sock.sendall(b"".join(_SIZE.pack(len(f)) + f for f in frames[start:start + 4]))
                answers += [recv_frame(sock) for _ in frames[start:start + 4]]
        else:
            for frame in frames:
                sock.sendall(_SIZE.pack(len(frame)) + frame)
                answers.append(recv_frame(sock))
    assert answers == [hashlib.sha256(f).digest() for f in frames]
    assert frame_server.kept
    for view, seen in frame_server.kept:
        assert bytes(view) == seen
