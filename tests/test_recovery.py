"""Start-up recovery and descriptor bounds of the real broker process (issue 14, points 2 and 6).

Recovery: each partition of one topic gets a different damage (bad CRC, bad magic, a torn
batch, a garbage `.index` pointing mid-batch, a garbage `.timeindex`, corrupt producer
snapshots), as do the tails of `__consumer_offsets` and `__transaction_state`, after a
clean (SIGTERM) and an unclean (SIGKILL) shutdown. The broker must start, log what it
dropped, keep everything before the damage readable, and take writes.

Descriptors: topics and partitions beyond what RLIMIT_NOFILE allows are refused before any
directory is made; sealed segments read by consumers do not each keep a descriptor.
"""

from __future__ import annotations

import os
import resource
import struct
import time

import pytest

from sluice.broker_process import BrokerProcess
from tests.test_broker_failures import connect, roundtrip
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import INIT_PRODUCER_ID
from wire.records import iter_batches

TOPIC = "rec"
DAMAGES = ["bad-crc", "bad-magic", "torn", "garbage-index", "garbage-timeindex", "bad-snapshot"]
TRUNCATING = {"bad-crc", "bad-magic", "torn"}  # these lose the damaged (last) batch
BATCHES = 8
SEGMENT_BYTES = 400  # a few batches per segment
INTERNAL_CONFIG = "offsets.topic.num.partitions=1\ntransaction.state.log.num.partitions=1\n"
_MAGIC_AT = 16


def config_file(tmp_path) -> str:
    path = tmp_path / "server.properties"
    path.write_text(INTERNAL_CONFIG)
    return str(path)


def partition_dir(proc: BrokerProcess, topic: str, partition: int) -> str:
    return os.path.join(proc.data_dir, f"{topic}-{partition}")


def segment_files(directory: str, suffix: str) -> list[str]:
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(suffix))


def last_batch(path: str) -> tuple[int, int]:
    """(position, size) of the last whole batch of a `.log` file."""
    with open(path, "rb") as f:
        data = f.read()
    position = last = 0
    for header, _ in iter_batches(data):
        last = position
        position += header.size
    return last, position - last


def patch(path: str, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def flip_last_byte(path: str, end: int) -> None:
    """Invert the byte before `end`: a record's bytes, covered by the batch's CRC."""
    with open(path, "rb") as f:
        f.seek(end - 1)
        byte = f.read(1)[0]
    patch(path, end - 1, bytes([byte ^ 0xFF]))


def damage(directory: str, kind: str) -> None:
    logs = [p for p in segment_files(directory, ".log") if os.path.getsize(p)]
    active = logs[-1]
    position, size = last_batch(active)
    if kind == "bad-crc":
        flip_last_byte(active, position + size)
    elif kind == "bad-magic":
        patch(active, position + _MAGIC_AT, b"\x07")
    elif kind == "torn":
        os.truncate(active, position + size // 2)
    elif kind == "garbage-index":  # ascending, inside the file, but in the middle of a batch
        with open(logs[0][:-len(".log")] + ".index", "wb") as f:
            f.write(struct.pack(">ii", 0, 0) + struct.pack(">ii", 1, 7))
    elif kind == "garbage-timeindex":
        with open(active[:-len(".log")] + ".timeindex", "wb") as f:
            f.write(struct.pack(">qi", 2_000_000_000_000, 0) + struct.pack(">qi", 5, 1))
    elif kind == "bad-snapshot":
        snapshots = segment_files(directory, ".snapshot")
        assert snapshots, "a roll or a clean shutdown writes producer snapshots"
        for path in snapshots:
            with open(path, "wb") as f:
                f.write(b'[{"producer_id": ')


def keys(client: Client, topic: str, partition: int) -> list[bytes]:
    found: list[bytes] = []
    offset = 0
    for _ in range(100):
        fetched = client.consumer.fetch_records(topic, partition, offset, max_wait_ms=0)
        if not fetched.records:
            return found
        found += [r.key for r in fetched.records]
        offset = fetched.next_offset
    raise AssertionError(f"{topic}-{partition} did not end within 100 fetches")


def init_producer(port: int, transactional_id: str, correlation_id: int):
    body = INIT_PRODUCER_ID.request(transactional_id=transactional_id, transaction_timeout_ms=60_000)
    with connect(port) as sock:
        return roundtrip(sock, INIT_PRODUCER_ID, 4, body, correlation_id)


def damage_internal_tail(proc: BrokerProcess, topic: str, how: str) -> None:
    active = segment_files(partition_dir(proc, topic, 0), ".log")[-1]
    position, size = last_batch(active)
    assert size, f"{topic} has data"
    if how == "torn":
        os.truncate(active, position + size - 3)
    else:
        flip_last_byte(active, position + size)


@pytest.mark.parametrize("shutdown", ["clean", "sigkill"])
def test_damaged_tails_are_truncated_at_start(tmp_path, shutdown):
    proc = BrokerProcess(tmp_path / "data", config_file=config_file(tmp_path)).start()
    try:
        with Client(proc.bootstrap_servers) as client:
            created = client.admin.create_topics({TOPIC: NewTopic(len(DAMAGES), configs={
                "segment.bytes": str(SEGMENT_BYTES), "index.interval.bytes": "1"})})
            assert created[TOPIC].error is None
            for p in range(len(DAMAGES)):
                for n in range(BATCHES):
                    client.producer.produce(TOPIC, p, [(b"%d-%d" % (p, n), b"v" * 40)])
            client.consumer.commit_offsets("g", {(TOPIC, 0): 3})
            client.consumer.commit_offsets("g", {(TOPIC, 0): 5})  # the last batch, damaged below
        assert init_producer(proc.port, "tx", 1).error_code == 0
        assert init_producer(proc.port, "tx", 2).error_code == 0
        proc.stop() if shutdown == "clean" else proc.kill()

        for p, kind in enumerate(DAMAGES):
            damage(partition_dir(proc, TOPIC, p), kind)
        damage_internal_tail(proc, "__consumer_offsets", "crc")
        damage_internal_tail(proc, "__transaction_state", "torn")
        del proc.output[:]
        proc.start()
        output = "".join(proc.output)
        snapshots = segment_files(partition_dir(proc, TOPIC, DAMAGES.index("bad-snapshot")), ".snapshot")

        with Client(proc.bootstrap_servers) as client:
            for p, kind in enumerate(DAMAGES):
                kept = BATCHES - 1 if kind in TRUNCATING else BATCHES
                assert keys(client, TOPIC, p) == [b"%d-%d" % (p, n) for n in range(kept)], kind
                if kind in TRUNCATING:
                    assert f"{TOPIC}-{p}: segment" in output and "truncated at byte" in output, kind
                written = client.producer.produce(TOPIC, p, [(b"after", b"x")])
                assert written.base_offset == kept, kind
                assert keys(client, TOPIC, p)[-1] == b"after"
            committed = client.consumer.fetch_offsets("g", [(TOPIC, 0)])
            assert committed[(TOPIC, 0)].offset == 3  # the damaged commit is gone, the first kept
            client.consumer.commit_offsets("g", {(TOPIC, 0): 6})
            assert client.consumer.fetch_offsets("g", [(TOPIC, 0)])[(TOPIC, 0)].offset == 6
        assert "__consumer_offsets-0: segment" in output and "bad CRC" in output
        assert "__transaction_state-0: segment" in output and "torn batch" in output
        assert "bad batch header" in output  # the bad magic
        if shutdown == "clean":  # after SIGKILL, recovery from the start needs no snapshot
            assert "re-validated and its indexes rebuilt" in output
            assert "producer-state snapshot" in output and "unreadable" in output
            assert snapshots == [], "corrupt snapshots are removed"
        assert init_producer(proc.port, "tx", 3).error_code == 0
    finally:
        proc.kill()


def batch_ends(path: str) -> list[int]:
    """The end position of each whole batch of a `.log` file."""
    with open(path, "rb") as f:
        data = f.read()
    ends, position = [], 0
    for header, _ in iter_batches(data):
        position += header.size
        ends.append(position)
    return ends


def test_damage_inside_an_internal_segment_truncates_it_at_start(tmp_path):
    """A bad CRC before a sealed segment's last index entry, after a clean shutdown, in
    __consumer_offsets: the start-up checks do not read there, the group loader does. It
    has the log truncated at the bad batch, as recovery would, and the broker starts."""
    commits, damaged = 80, 10  # ~100-byte batches: index entries every 4096 bytes lie beyond
    proc = BrokerProcess(tmp_path / "data", config_file=config_file(tmp_path)).start()
    try:
        with Client(proc.bootstrap_servers) as client:
            assert client.admin.create_topics({TOPIC: NewTopic(1)})[TOPIC].error is None
            for n in range(commits):
                client.consumer.commit_offsets("g", {(TOPIC, 0): n})
        proc.stop()
        log_file = segment_files(partition_dir(proc, "__consumer_offsets", 0), ".log")[0]
        ends = batch_ends(log_file)
        with open(log_file[:-len(".log")] + ".index", "rb") as f:
            last_indexed = struct.unpack(">ii", f.read()[-8:])[1]
        assert ends[damaged] < last_indexed, "the damage must lie before the last index entry"
        flip_last_byte(log_file, ends[damaged])
        del proc.output[:]
        proc.start()
        with Client(proc.bootstrap_servers) as client:
            assert client.consumer.fetch_offsets("g", [(TOPIC, 0)])[(TOPIC, 0)].offset == damaged - 1
            client.consumer.commit_offsets("g", {(TOPIC, 0): 1000})
            assert client.consumer.fetch_offsets("g", [(TOPIC, 0)])[(TOPIC, 0)].offset == 1000
        output = "".join(proc.output)
        assert "__consumer_offsets-0: segment" in output and "bad CRC" in output, output[-2000:]
    finally:
        proc.kill()


# -- descriptors -------------------------------------------------------------------------

FD_LIMIT = 512


def start_with_fd_limit(proc: BrokerProcess) -> None:
    """Start the broker, then lower its RLIMIT_NOFILE (soft and hard: at start-up it
    lifts the soft limit to the hard one)."""
    proc.start()
    resource.prlimit(proc.proc.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


def test_the_broker_lifts_its_soft_open_files_limit(tmp_path):
    """Started with a soft limit of 512 (the hard one unchanged), the broker runs with
    soft = hard, as Kafka's JVM does."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        pytest.skip("no hard RLIMIT_NOFILE to lift the soft one to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(FD_LIMIT, hard), hard))
    try:
        proc = BrokerProcess(tmp_path / "data").start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        assert resource.prlimit(proc.proc.pid, resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        proc.kill()


def open_fds(proc: BrokerProcess) -> int:
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def topic_dirs(proc: BrokerProcess, topic: str) -> list[str]:
    return [n for n in os.listdir(proc.data_dir) if n.rsplit("-", 1)[0] == topic]


def test_partitions_beyond_the_descriptor_budget_are_refused(tmp_path):
    proc = BrokerProcess(tmp_path / "data", config_file=config_file(tmp_path))
    start_with_fd_limit(proc)
    try:
        with Client(proc.bootstrap_servers) as client:
            for validate_only in (True, False):
                answer = client.admin.create_topics({"huge": NewTopic(5000)}, validate_only=validate_only)
                error = answer["huge"].error
                assert error is not None and error.code == ErrorCode.INVALID_PARTITIONS
                assert "RLIMIT_NOFILE 512" in str(error), error
            assert topic_dirs(proc, "huge") == []

            started = time.monotonic()
            assert client.admin.create_topics({"many": NewTopic(120)})["many"].error is None
            assert time.monotonic() - started < 10, "creating partitions within budget stalls"
            for p in range(120):
                client.producer.produce("many", p, [(b"k", b"v")])
            assert open_fds(proc) < FD_LIMIT - 64

            for validate_only in (True, False):
                error = client.admin.create_partitions({"many": 400}, validate_only=validate_only)["many"]
                assert error is not None and error.code == ErrorCode.INVALID_PARTITIONS, error
            assert len(topic_dirs(proc, "many")) == 120
            assert client.admin.create_partitions({"many": 130})["many"] is None
            assert len(topic_dirs(proc, "many")) == 130
    finally:
        proc.kill()


def test_sealed_segments_read_by_consumers_hold_no_descriptor_each(tmp_path):
    proc = BrokerProcess(tmp_path / "data", config_file=config_file(tmp_path))
    start_with_fd_limit(proc)
    segments = 200
    try:
        with Client(proc.bootstrap_servers) as client:
            client.admin.create_topics({"old": NewTopic(1, configs={"segment.bytes": "100"})})
            before = open_fds(proc)
            for n in range(segments):  # each batch is larger than a segment: one segment each
                client.producer.produce("old", 0, [(b"%d" % n, b"v" * 100)])
            assert len(segment_files(partition_dir(proc, "old", 0), ".log")) >= segments
            for n in range(segments):  # a consumer reading every old segment, one by one
                fetched = client.consumer.fetch_records("old", 0, n, max_wait_ms=0, max_bytes=1)
                assert [r.key for r in fetched.records] == [b"%d" % n]
            grown = open_fds(proc) - before
        assert grown <= 64 + 8, f"{grown} more descriptors after reading {segments} segments"
    finally:
        proc.kill()
