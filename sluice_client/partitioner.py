"""Kafka's default partitioner, for records produced without a partition.

A keyed record goes to murmur2(key) made positive, modulo the topic's partition count:
Java's `BuiltInPartitioner.partitionForKey` (Utils.toPositive(Utils.murmur2(key))) and
librdkafka's `murmur2` partitioners, so the same key lands in the same partition
whichever client wrote it. Keyless records are spread round-robin per topic. The hash is
C (wire/_columns.c), for producers that place many records at once (the Spark sink).
"""

from __future__ import annotations

from wire._columns import murmur2_positive

__all__ = ["DefaultPartitioner", "partition_for_key"]


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives `key` among `partitions`."""
    return murmur2_positive(key) % partitions


class DefaultPartitioner:
    """Partitions for records without one: by key, keyless ones round-robin per topic."""

    def __init__(self):
        self._next_keyless: dict[str, int] = {}  # topic -> the next keyless record's turn

    def partitions(self, topic: str, keys: list, partitions: int) -> list[int]:
        """The partition of each record with these keys (None: no key), in order."""
        if None not in keys:
            return [murmur2_positive(key) % partitions for key in keys]
        start = self._next_keyless.get(topic, 0)
        self._next_keyless[topic] = start + keys.count(None)
        turn = iter(range(start, start + len(keys)))
        return [next(turn) % partitions if key is None else murmur2_positive(key) % partitions
                for key in keys]
