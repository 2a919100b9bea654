"""The offset anomalies of Jepsen's Kafka tests, counted from what independent consumers
read back at the end of a failure test:

- "non-monotonic offsets": in one consumer's read of a partition, an offset that is not
  above the one read before it (read again, or gone back);
- "inconsistent offsets between consumers": two consumers read a different record at
  the same offset of a partition.

Plus the readers that give each consumer's list: a real client (confluent-kafka or
kafka-python), assigned every partition from its beginning (no group), reading until it
has reached each partition's end (the last stable offset under read_committed) and has
at least `expect` records: a transaction's markers may still be on their way when the
read begins. A reader that gets fewer by its timeout returns what it read (the counts
then show the loss).
"""

from __future__ import annotations

import collections
import time
import uuid
from typing import Mapping, Sequence

Read = tuple[int, int, bytes]  # (partition, offset, value), in the order a consumer read them

NON_MONOTONIC = "non-monotonic offsets"
INCONSISTENT = "inconsistent offsets between consumers"


def offset_anomalies(reads: Mapping[str, Sequence[Read]], examples: list[str] | None = None) -> dict[str, int]:
    """Counts of both anomalies over the consumers' reads ({consumer name: reads});
    up to ten descriptions are appended to `examples` when given."""
    def note(text: str) -> None:
        if examples is not None and len(examples) < 10:
            examples.append(text)

    non_monotonic = 0
    seen: dict[tuple[int, int], dict[str, bytes]] = collections.defaultdict(dict)
    for consumer, records in reads.items():
        last: dict[int, int] = {}
        for partition, offset, value in records:
            if offset <= last.get(partition, -1):
                non_monotonic += 1
                note(f"{consumer} read offset {offset} of partition {partition} after {last[partition]}")
            last[partition] = offset
            seen[(partition, offset)].setdefault(consumer, value)
    inconsistent = 0
    for (partition, offset), values in sorted(seen.items()):
        if len(set(values.values())) > 1:
            inconsistent += 1
            note(f"partition {partition} offset {offset}: {values}")
    return {NON_MONOTONIC: non_monotonic, INCONSISTENT: inconsistent}


def read_with(client: str, bootstrap_servers: str, topic: str, partitions: int,
              isolation: str = "read_uncommitted", expect: int = 0, timeout: float = 60.0) -> list[Read]:
    """Every record `client` ("confluent" or "kafka-python") reads from the topic."""
    reader = {"confluent": _read_confluent, "kafka-python": _read_kafka_python}[client]
    return reader(bootstrap_servers, topic, partitions, isolation, expect, timeout)


def _read_confluent(bootstrap_servers, topic, partitions, isolation, expect, timeout) -> list[Read]:
    import confluent_kafka as ck

    consumer = ck.Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, "isolation.level": isolation,
                            "enable.partition.eof": True, "topic.metadata.refresh.interval.ms": 1000})
    try:
        consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        got: list[Read] = []
        ended: set[int] = set()  # partitions read up to their end (the last stable offset)
        deadline = time.monotonic() + timeout
        while len(ended) < partitions or len(got) < expect:
            if time.monotonic() > deadline:
                assert len(ended) == partitions, \
                    f"confluent-kafka read {topic} to the end of only {sorted(ended)} in {timeout:g} s"
                break
            for message in consumer.consume(500, 0.5):
                error = message.error()
                if error is None:
                    got.append((message.partition(), message.offset(), message.value()))
                elif error.code() == ck.KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
        return got
    finally:
        consumer.close()


def _read_kafka_python(bootstrap_servers, topic, partitions, isolation, expect, timeout) -> list[Read]:
    import kafka

    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap_servers.split(","), group_id=None,
                                   isolation_level=isolation, enable_auto_commit=False,
                                   auto_offset_reset="earliest")
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got: list[Read] = []
        deadline = time.monotonic() + timeout
        for _ in range(100_000):
            ends = consumer.end_offsets(tps)  # under read_committed, the last stable offsets
            at_end = all(consumer.position(tp) >= ends[tp] for tp in tps)
            if at_end and len(got) >= expect:
                break
            if time.monotonic() > deadline:
                assert at_end, f"kafka-python read {topic} only up to {ends} in {timeout:g} s"
                break
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, r.value) for r in records]
        return got
    finally:
        consumer.close(autocommit=False)


def read_by_two(bootstrap_servers: str, topic: str, partitions: int, isolation: str = "read_uncommitted",
                expect: int = 0, timeout: float = 60.0) -> dict[str, list[Read]]:
    """The topic as read by confluent-kafka and by kafka-python, independently."""
    return {client: read_with(client, bootstrap_servers, topic, partitions, isolation, expect, timeout)
            for client in ("confluent", "kafka-python")}
