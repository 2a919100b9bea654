"""The real broker process on a full disk (issue 14, points 1 and 4).

The data directory is on a small tmpfs, filled up by a file the test writes until
ENOSPC.

- Writes: an idempotent acks=all confluent-kafka producer keeps producing while the disk
  fills; a produce that cannot be written is answered KAFKA_STORAGE_ERROR (never a
  closed connection), reads go on, and once the filler is removed writes resume without
  a restart. After a SIGKILL and a restart, then a clean restart, every acknowledged
  record is at its acknowledged offset exactly once.
- DeleteTopics on the full disk succeeds and frees the space (even when the registry
  cannot be written yet); after a restart the topics are gone, the others intact.

Each test skips when a tmpfs cannot be mounted (not root). Everything is bounded in
time and count; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import collections
import errno
import os
import subprocess

import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from broker.errors import BrokerError
from tests.replicas import topic_manager

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

TMPFS_BYTES = 8 << 20
SEGMENT_BYTES = 256 << 10
VALUE_BYTES = 1000
FILLER_CHUNK = 64 << 10


@pytest.fixture
def small_disk(tmp_path):
    """A mounted 8 MiB tmpfs, unmounted afterwards (lazily if still busy)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs",
                              str(mount_point)], capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mount_point)], check=True)


def free_bytes(path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize


def fill(path) -> None:
    """Write `path` until the disk is full (bounded by the disk's size)."""
    with open(path, "ab", buffering=0) as f:
        for _ in range(TMPFS_BYTES // FILLER_CHUNK + 2):
            try:
                f.write(b"\0" * FILLER_CHUNK)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        else:
            pytest.fail("the disk never filled up")
    # A last partial page may still take a few bytes: take them too.
    with open(path, "ab", buffering=0) as f:
        for size in (4096, 512, 64, 1):
            try:
                for _ in range(FILLER_CHUNK // size):
                    f.write(b"\0" * size)
            except OSError:
                continue
    assert free_bytes(path.parent) == 0


def storage_error_of(client: Client, topic: str, partition: int, value: bytes) -> ErrorCode | None:
    """The error code of one un-retried produce (None when it is written)."""
    try:
        client.producer.produce(topic, partition, [(b"raw", value)])
    except KafkaError as exc:
        return exc.code
    return None


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list]:
    """Every record of each partition, from offset 0 to the end (bounded)."""
    found = {}
    with Client(bootstrap, call_timeout=30) as client:
        for p in range(partitions):
            end = client.consumer.list_offsets(topic, [p], -1)[p].offset
            records, offset = [], 0
            for _ in range(10_000):
                if offset >= end:
                    break
                fetched = client.consumer.fetch_records(topic, p, offset, max_wait_ms=0)
                records += fetched.records
                offset = fetched.next_offset
            assert offset >= end, f"{topic}-{p}: read stopped at {offset} of {end}"
            found[p] = records
    return found


def test_produce_on_a_full_disk_answers_storage_errors_and_loses_nothing(small_disk):
    data_dir = small_disk / "data"
    filler = small_disk / "filler"
    broker = BrokerProcess(data_dir)
    broker.start()
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[str] = []

    def delivered(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(str(err))

    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers,
                            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                            "message.timeout.ms": 60000})
    sent = 0

    def send(count: int) -> None:
        nonlocal sent
        for _ in range(count):
            value = f"{sent:08d}".encode() + b"v" * (VALUE_BYTES - 8)
            producer.produce("full", value=value, partition=sent % 2, on_delivery=delivered)
            sent += 1
            producer.poll(0)

    try:
        with Client(broker.bootstrap_servers, retries=0, call_timeout=30) as client:
            client.admin.create_topics({"full": NewTopic(partitions=2,
                                                   configs={"segment.bytes": str(SEGMENT_BYTES)}),
                                  "spare": NewTopic(partitions=1)})
            client.producer.produce("spare", 0, [(b"k", b"before")])
            spare_log = data_dir / "spare-0" / f"{0:020d}.log"
            send(1500)  # several segments per partition
            assert producer.flush(30) == 0
            assert len(acked) == 1500 and not failed

            fill(filler)
            send(1500)  # these wait in the producer, retried, while the disk is full
            codes = {storage_error_of(client, "full", p, b"x" * 50_000) for p in (0, 1)}
            assert codes == {ErrorCode.KAFKA_STORAGE_ERROR}, codes
            # No roll here: the write itself fails, part way through a page.
            spare_size = spare_log.stat().st_size
            assert storage_error_of(client, "spare", 0, b"y" * 20_000) == ErrorCode.KAFKA_STORAGE_ERROR
            assert spare_log.stat().st_size == spare_size, "a torn batch was left in the log"
            assert broker.proc.poll() is None, "the broker died"
            fetched = client.consumer.fetch_records("full", 1, 0, max_wait_ms=0)
            assert fetched.records and fetched.records[0].value == acked[(1, 0)]
            producer.poll(1)
            held_back = sent - len(acked)
            assert held_back > 1000, f"only {held_back} records waited for space"
            assert any("cannot " in line and "full-" in line for line in broker.output), \
                "no warning in the broker's log:\n" + "".join(broker.output)

            filler.unlink()  # space returns: writes resume without a restart
            assert producer.flush(45) == 0
            assert not failed, failed[:5]
            assert len(acked) == sent
            assert storage_error_of(client, "full", 0, b"after") is None
            assert storage_error_of(client, "spare", 0, b"after") is None
            assert [r.value for r in client.consumer.fetch_records("spare", 0, 0, max_wait_ms=0).records] == \
                [b"before", b"after"]
    finally:
        producer.flush(0)
        broker.kill()

    warnings = sum("cannot " in line and "full-" in line for line in broker.output)
    assert warnings <= 10, f"{warnings} storage warnings: not rate-limited"
    for restart in ("after SIGKILL", "after a clean stop"):
        broker.start()
        try:
            stored = read_all(broker.bootstrap_servers, "full", 2)
        finally:
            if restart == "after SIGKILL":
                broker.stop()
            else:
                broker.kill()
        by_position = {(p, r.offset): r.value for p, records in stored.items() for r in records}
        copies = collections.Counter(r.value for records in stored.values() for r in records)
        lost = [key for key, value in acked.items() if by_position.get(key) != value]
        duplicated = [value[:8] for value in acked.values() if copies[value] > 1]
        print(f"{restart}: {len(acked)} acknowledged ({held_back} of them after the disk "
              f"was full), {len(lost)} lost or moved, {len(duplicated)} duplicated")
        assert not lost and not duplicated, (restart, lost[:5], duplicated[:5])


def test_delete_topics_on_a_full_disk_frees_the_space(small_disk):
    data_dir = small_disk / "data"
    filler = small_disk / "filler"
    broker = BrokerProcess(data_dir)
    broker.start()
    try:
        with Client(broker.bootstrap_servers, call_timeout=30) as client:
            client.admin.create_topics({"doomed": NewTopic(partitions=2), "empty": NewTopic(partitions=1),
                                  "kept": NewTopic(partitions=1)})
            for n in range(12):
                client.producer.produce("doomed", n % 2, [(b"k", bytes([n]) * 250_000)])
            kept = [client.producer.produce("kept", 0, [(b"k", f"kept{n}".encode())]).base_offset
                    for n in range(5)]
            fill(filler)

            # Creating a topic needs space: it is refused, leaving nothing behind.
            error = client.admin.create_topics({"unborn": NewTopic(partitions=2)})["unborn"].error
            assert error is not None and error.code == ErrorCode.KAFKA_STORAGE_ERROR, error
            assert not [name for name in os.listdir(data_dir) if name.startswith("unborn")]

            # Deleting nothing but an empty log frees no space: the registry cannot be
            # written yet, and the deletion still holds.
            assert client.admin.delete_topics(["empty"]) == {"empty": None}
            leftovers = [name for name in os.listdir(data_dir) if name.endswith("-delete")]
            assert [name.split(".")[0] for name in leftovers] == ["empty-0"], leftovers

            before = free_bytes(small_disk)
            assert client.admin.delete_topics(["doomed"]) == {"doomed": None}
            # freed in the background, by the broker's thread that removes deleted logs
            wait_for(lambda: free_bytes(small_disk) - before >= 2_500_000, timeout=10,
                     what="the deleted topic's 3 MB to be freed")
            assert broker.proc.poll() is None
            wait_for(lambda: not any(name.endswith("-delete") for name in os.listdir(data_dir)),
                     timeout=10, what="the deleted topics' directories to go")
            assert "doomed" not in client.metadata().topics
            client.producer.produce("kept", 0, [(b"k", b"after the delete")])
    finally:
        broker.kill()

    filler.unlink()
    broker.start()
    try:
        with Client(broker.bootstrap_servers, call_timeout=30) as client:
            topics = client.metadata().topics
            assert "doomed" not in topics and "empty" not in topics, sorted(topics)
            values = [r.value for r in client.consumer.fetch_records("kept", 0, 0, max_wait_ms=0).records]
            assert values == [f"kept{n}".encode() for n in range(5)] + [b"after the delete"]
            assert kept == list(range(5))
    finally:
        broker.stop()


def test_a_start_finishes_a_deletion_the_registry_did_not_record(tmp_path):
    """A crash between the rename and the registry write: the topic stays deleted."""
    from broker.config import BrokerConfig

    config = BrokerConfig(data_dir=str(tmp_path))
    topics = topic_manager(config)
    topics.load()
    gone = topics.create("gone", 2, {})
    topics.create("stays", 1, {})
    # What a crash right after renaming partition 0 leaves (the object is abandoned,
    # as by a SIGKILL): the registry still lists the topic, partition 1 is untouched.
    os.rename(gone.partitions[0].log.directory, f"{gone.partitions[0].log.directory}.{gone.topic_id.hex}-delete")

    restarted = topic_manager(config)
    restarted.load()
    assert sorted(restarted.topics) == ["stays"]
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["stays-0", "topics.json", "recovery-point-offset-checkpoint", "log-start-offset-checkpoint",
         "replication-offset-checkpoint"])
    restarted.close()


class FailingDisk:
    """`os.write` for files under `root` as when the disk fills up part way through a
    write: half of what is given is written, the next call fails with ENOSPC."""

    def __init__(self, root: str, real_write):
        self.root = root
        self.real_write = real_write
        self.partly_written: set[int] = set()
        self.failures = 0

    def write(self, fd: int, data) -> int:
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            path = ""
        if not path.startswith(self.root):
            return self.real_write(fd, data)
        if fd in self.partly_written or len(data) < 2:
            self.partly_written.discard(fd)
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        self.partly_written.add(fd)
        return self.real_write(fd, memoryview(data)[:len(data) // 2])


def test_a_write_failing_part_way_leaves_whole_batches_and_index_entries(tmp_path, monkeypatch):
    """Without a tmpfs: the failure injected at the OS-call boundary."""
    from broker.config import LogConfig
    from broker.storage.log import PartitionLog
    from wire.records import build_batch, parse_header

    def append(log, n: int):
        batch = bytearray(build_batch([(b"k", b"%d" % n * 300, [], 1_700_000_000_000 + n)]))
        return log.append(parse_header(batch), memoryview(batch), 0)

    directory = tmp_path / "t-0"
    config = LogConfig(index_interval_bytes=1)  # an index entry for every batch
    log = PartitionLog(str(directory), "t", 0, config, recovery_point=0)
    for n in range(3):
        append(log, n)
    disk = FailingDisk(str(tmp_path), os.write)
    monkeypatch.setattr(os, "write", disk.write)
    with pytest.raises(BrokerError) as refused:
        append(log, 3)
    assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    with pytest.raises(BrokerError) as refused:
        log.flush()  # the indexes' pending entries
    assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert disk.failures == 2
    assert log.log_end_offset == 3
    monkeypatch.undo()

    assert [append(log, n).first_offset for n in (3, 4)] == [3, 4]
    log.close()
    index_size = os.path.getsize(directory / f"{0:020d}.index")
    assert index_size == 5 * 8, f"{index_size} bytes of offset index for 5 batches"
    reopened = PartitionLog(str(directory), "t", 0, config, recovery_point=0)  # re-validates all
    assert reopened.log_end_offset == 5
    assert reopened.segments[0].size == log.segments[0].size
    reopened.close()
