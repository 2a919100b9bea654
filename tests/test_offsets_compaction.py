"""`__consumer_offsets` compacted by the log cleaner, and the coordinator replaying what is left.

One broker process with a small `offsets.topic.segment.bytes` takes 20,000 offset commits
(OffsetCommit over the wire, many partitions each) over a few keys, and transactional
offset commits from confluent-kafka's transactional producer: one committed (one of its
records outlives compaction, so its COMMIT marker must too), one aborted, one whose
records a later plain commit of the same partitions makes obsolete
(so the cleaner drops them and then their COMMIT marker), and one whose
COMMIT comes after a plain commit of the same partition was written (the plain one,
later in the log, stays: Kafka's rule, and what compaction keeps); a deleted group's
tombstones. With `log.cleaner.delete.retention.ms=0` tombstones and markers go at the
cleaning after the one that first keeps them. Then:
- the cleaner compacts the topic: its segments on disk hold a few KiB instead of the
  ~1.5 MB written, its log start offset stays 0 (compaction, not retention), and a
  reader of the topic sees about one record per key;
- the coordinator serves the latest committed offsets before and after a clean restart
  and after SIGKILL, replaying the compacted log (offset gaps, aborted records gone,
  markers with and without their records, tombstones gone with what they deleted).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.groups.offsets_log import decode_record
from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.log_files import log_bytes
from sluice_client import EARLIEST, LATEST, AsyncClient, Client, NewTopic

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

OFFSETS_TOPIC = "__consumer_offsets"
TOPIC = "compacted-in"
PARTITIONS = 4
GROUPS = [f"plain-{n}" for n in range(5)]
ROUNDS = 1_000  # commits per group, each of every partition: 5 x 1,000 x 4 = 20,000 records
TXN_GROUP = "txn-group"
GONE_GROUP = "deleted-group"
SEGMENT_BYTES = 16_384
CONFIG = {
    "offsets.topic.num.partitions": "1",
    "offsets.topic.segment.bytes": str(SEGMENT_BYTES),
    "transaction.state.log.num.partitions": "1",
    "log.cleaner.backoff.ms": "100",
    # Tombstones and transaction markers go at the cleaning after the one that keeps them.
    "log.cleaner.delete.retention.ms": "0",
    "auto.create.topics.enable": "false",
}


async def commit_rounds(bootstrap: str) -> None:
    """ROUNDS commits per group, the groups in parallel, each commit naming every partition."""
    async with AsyncClient(bootstrap) as client:
        async def group_rounds(group: str) -> None:
            for r in range(ROUNDS):
                await client.consumer.commit_offsets(group, {(TOPIC, p): (r * 10 + p, f"r{r}")
                                                    for p in range(PARTITIONS)})
        await asyncio.gather(*(group_rounds(g) for g in GROUPS))


class Transactions:
    """confluent-kafka's transactional producer committing offsets of TXN_GROUP (no
    membership: generation -1, as a producer outside the group sends them)."""

    def __init__(self, bootstrap: str):
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": "compaction-txn",
                                     "transaction.timeout.ms": 60_000})
        self.producer.init_transactions(30)
        metadata_source = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": TXN_GROUP})
        self.group = metadata_source.consumer_group_metadata()
        metadata_source.close()

    def offsets(self, offsets: dict[int, int]) -> None:
        """Begin a transaction and send its offsets (TxnOffsetCommit is answered then)."""
        self.producer.begin_transaction()
        self.producer.send_offsets_to_transaction(
            [ck.TopicPartition(TOPIC, p, o) for p, o in offsets.items()], self.group, 30)

    def end(self, commit: bool) -> None:
        (self.producer.commit_transaction if commit else self.producer.abort_transaction)(30)


def test_compacted_offsets_topic_replays_latest_offsets(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in CONFIG.items()))
    proc = BrokerProcess(tmp_path / "data", config_file=str(config)).start()
    try:
        bootstrap = proc.bootstrap_servers
        with Client(bootstrap) as client:
            client.admin.create_topics({TOPIC: NewTopic(partitions=PARTITIONS, replication_factor=1)})
            txn = Transactions(bootstrap)
            txn.offsets({0: 100, 1: 101, 2: 102})
            txn.end(commit=True)   # 2's record stays (and so its marker); later commits replace 0's, 1's
            txn.offsets({0: 999, 2: 999})
            txn.end(commit=False)  # the cleaner removes these records
            txn.offsets({3: 5})
            txn.end(commit=True)   # made obsolete by the plain commit of partition 3 below
            client.consumer.commit_offsets(TXN_GROUP, {(TOPIC, 0): 200, (TOPIC, 3): 6})
            txn.offsets({1: 300})
            client.consumer.commit_offsets(TXN_GROUP, {(TOPIC, 1): 250})  # written after the pending 300
            txn.end(commit=True)
            expected_txn = {(TOPIC, 0): 200, (TOPIC, 1): 250, (TOPIC, 2): 102, (TOPIC, 3): 6}
            assert {tp: c.offset for tp, c in client.consumer.fetch_offsets(TXN_GROUP).items()} == expected_txn
            client.consumer.commit_offsets(GONE_GROUP, {(TOPIC, p): 1 for p in range(PARTITIONS)})
            assert client.admin.delete_groups([GONE_GROUP]) == {GONE_GROUP: None}  # tombstones
            txn = None  # the producer goes (it would reconnect to the broker restarted below)

            started = time.monotonic()
            asyncio.run(commit_rounds(bootstrap))
            commit_seconds = time.monotonic() - started
            log_end = client.consumer.list_offsets(OFFSETS_TOPIC, [0], LATEST)[0].offset
            expected = {(TOPIC, p): ((ROUNDS - 1) * 10 + p, f"r{ROUNDS - 1}") for p in range(PARTITIONS)}

            def compacted():
                """(bytes, segments, records) once the topic is small, the aborted
                transaction's records gone and the deleted group's tombstones too."""
                size, segments = log_bytes(proc.data_dir, OFFSETS_TOPIC, 0)
                if size >= 4 * SEGMENT_BYTES:
                    return None
                records = read_offsets_topic(bootstrap)
                offsets = [d for d in (decode_record(k, v) for k, v in records) if d and d[0] == "offset"]
                if [1 for _, (g, _, _), c in offsets if g == GONE_GROUP or c and c.offset == 999]:
                    return None
                return size, segments, records
            size, segments, records = wait_for(compacted, 30, f"the cleaner to compact {OFFSETS_TOPIC}",
                                               interval=0.5)
            assert client.consumer.list_offsets(OFFSETS_TOPIC, [0], EARLIEST)[0].offset == 0
            print(f"{len(GROUPS) * ROUNDS} commits in {commit_seconds:.1f} s; {log_end:,} offsets written, "
                  f"{len(records)} records in {size:,} bytes in {segments} segment(s) after compaction")
            assert log_end > len(GROUPS) * ROUNDS * PARTITIONS and len(records) < log_end // 20

        def check():
            with Client(bootstrap, retries=20) as client:
                for group in GROUPS:
                    committed = client.consumer.fetch_offsets(group)
                    assert {tp: (c.offset, c.metadata) for tp, c in committed.items()} == expected, group
                committed = client.consumer.fetch_offsets(TXN_GROUP)
                assert {tp: c.offset for tp, c in committed.items()} == expected_txn
                assert client.consumer.fetch_offsets(GONE_GROUP) == {}
                assert GONE_GROUP not in {g.group_id for g in client.admin.list_groups()}
        check()
        proc.restart()
        check()
        proc.kill()
        proc.start()
        check()
        assert log_bytes(proc.data_dir, OFFSETS_TOPIC, 0)[0] < 4 * SEGMENT_BYTES
    finally:
        if proc.proc is not None:
            proc.stop()
    output = "".join(proc.output)
    assert "Traceback" not in output, output[-5000:]


def read_offsets_topic(bootstrap: str) -> list[tuple[bytes, bytes | None]]:
    """Every record of __consumer_offsets-0 from its start (gaps and all) up to its end."""
    reader = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "compaction-reader",
                          "enable.auto.commit": False})
    try:
        end = reader.get_watermark_offsets(ck.TopicPartition(OFFSETS_TOPIC, 0), timeout=10)[1]
        reader.assign([ck.TopicPartition(OFFSETS_TOPIC, 0, ck.OFFSET_BEGINNING)])
        records, next_offset = [], 0
        deadline = time.monotonic() + 20
        while next_offset < end and time.monotonic() < deadline:
            for msg in reader.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                records.append((msg.key(), msg.value()))
                next_offset = msg.offset() + 1
        assert next_offset >= end, (next_offset, end)
        return records
    finally:
        reader.close()
