"""The flush policy, observed from outside: which files the broker process fsyncs.

strace attaches to the real broker process and records its fsync calls with the paths
of their descriptors. The broker runs with `log.flush.interval.messages=1`; one topic
inherits it, one overrides it with `flush.messages` (never), one flushes on time only
(`flush.ms`). Each produce request carries one batch, acknowledged with acks=all.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import signal
import subprocess
import uuid

import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for

LONG_MAX = str((1 << 63) - 1)
BATCHES = 20
_FSYNC = re.compile(r"\bf(?:data)?sync\(\d+<([^>]*)>\)\s+=\s+0")

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")


class FsyncTrace:
    """strace attached to a running process, counting successful fsyncs per path."""

    def __init__(self, pid: int, out_dir):
        self.path = os.path.join(out_dir, f"fsync-{pid}.trace")
        self.stderr_path = self.path + ".stderr"
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen(
                ["strace", "-f", "-y", "-e", "trace=fsync,fdatasync", "-o", self.path,
                 "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=stderr)
        wait_for(lambda: "attached" in self._stderr() or self.proc.poll() is not None,
                 timeout=20, what="strace to attach")
        if self.proc.poll() is not None:
            pytest.skip(f"strace cannot attach here: {self._stderr().strip()[:300]}")

    def _stderr(self) -> str:
        with open(self.stderr_path) as f:
            return f.read()

    def counts(self) -> collections.Counter:
        """Successful fsyncs per path so far."""
        with open(self.path) as f:
            return collections.Counter(m.group(1) for m in _FSYNC.finditer(f.read()))

    def detach(self) -> collections.Counter:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(20)
        return self.counts()


def produce_batches(bootstrap: str, topic: str, count: int) -> None:
    """`count` requests of one batch each, every one acknowledged (acks=all) before the next."""
    from confluent_kafka import Producer

    delivered = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "enable.idempotence": True, "log_level": 3})
    for i in range(count):
        producer.produce(topic, value=b"v" * 300 + str(i).encode(),
                         on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0, f"{topic}: record {i} not delivered"
    assert delivered == [None] * count


def log_paths(counts, directory: str, suffix: str) -> int:
    """fsyncs of files in `directory` ending in `suffix`."""
    return sum(n for path, n in counts.items()
               if os.path.dirname(path) == directory and path.endswith(suffix))


def test_flush_policy_decides_what_is_fsynced(tmp_path):
    from sluice_client import Client, NewTopic

    config = tmp_path / "server.properties"
    config.write_text("log.flush.interval.messages=1\n")
    data = tmp_path / "data"
    names = {kind: f"{kind}-{uuid.uuid4().hex[:6]}" for kind in ("inherits", "never", "timed")}
    with BrokerProcess(data, config_file=str(config)) as broker:
        with Client(broker.bootstrap_servers) as client:
            results = client.admin.create_topics({
                names["inherits"]: NewTopic(1, 1, {"segment.bytes": "2048"}),
                names["never"]: NewTopic(1, 1, {"flush.messages": LONG_MAX}),
                names["timed"]: NewTopic(1, 1, {"flush.messages": LONG_MAX, "flush.ms": "100"}),
            })
            assert all(r.error is None for r in results.values()), results
        trace = FsyncTrace(broker.proc.pid, tmp_path)
        try:
            for name in names.values():
                produce_batches(broker.bootstrap_servers, name, BATCHES)
            timed_dir = str(data / f"{names['timed']}-0")
            wait_for(lambda: log_paths(trace.counts(), timed_dir, ".log"), timeout=10,
                     what="the flush.ms=100 topic to be fsynced")
        finally:
            counts = trace.detach()

    inherits_dir = str(data / f"{names['inherits']}-0")
    segments = [n for n in os.listdir(inherits_dir) if n.endswith(".log")]
    print(f"fsyncs: inherits .log {log_paths(counts, inherits_dir, '.log')}, "
          f".index {log_paths(counts, inherits_dir, '.index')}, dir {counts[inherits_dir]}, "
          f"segments {len(segments)}; never .log "
          f"{log_paths(counts, str(data / (names['never'] + '-0')), '.log')}; timed .log "
          f"{log_paths(counts, str(data / (names['timed'] + '-0')), '.log')}")
    # log.flush.interval.messages=1: every acknowledged batch was fsynced first, its index
    # entries with it, and the directory each time a segment was created in it.
    assert len(segments) >= 3, "the small segment.bytes should have rolled the log"
    assert log_paths(counts, inherits_dir, ".log") >= BATCHES
    assert log_paths(counts, inherits_dir, ".index") >= len(segments) - 1
    assert log_paths(counts, inherits_dir, ".timeindex") >= len(segments) - 1
    assert counts[inherits_dir] >= len(segments) - 1
    # flush.messages overrides the broker default: nothing fsynced while running.
    assert log_paths(counts, str(data / f"{names['never']}-0"), ".log") == 0
