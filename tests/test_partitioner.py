"""The client's public partitioner: Kafka's default partitioner for records without a
partition. The sink's placement against confluent-kafka's murmur2 partitioner on a real
broker is tests/test_spark_sink.py's."""

from __future__ import annotations

from sluice_client.partitioner import DefaultPartitioner, partition_for_key

# Kafka's UtilsTest.testMurmur2: Utils.murmur2 of each key, before Utils.toPositive.
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_a_key_goes_where_kafkas_default_partitioner_puts_it():
    for key, murmur2 in KAFKA_MURMUR2.items():
        for partitions in (1, 7, 1000):
            assert partition_for_key(key, partitions) == (murmur2 & 0x7FFFFFFF) % partitions, key


def test_keyless_records_go_round_robin_per_topic_and_keyed_ones_by_key():
    partitioner = DefaultPartitioner()
    assert partitioner.partitions("a", [None, b"abc", None, None], 3) == [0, partition_for_key(b"abc", 3), 1, 2]
    assert partitioner.partitions("a", [None, None], 3) == [0, 1]
    assert partitioner.partitions("b", [None], 3) == [0]
    assert partitioner.partitions("b", [b"21", b"foobar"], 5) == [partition_for_key(b"21", 5),
                                                                  partition_for_key(b"foobar", 5)]
