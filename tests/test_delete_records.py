"""DeleteRecords against the real broker process, from confluent-kafka's AdminClient
(Kafka's own kafka-delete-records runs in tests/test_kafka_tools.py).

- The log start offset moves up (never back), -1 meaning the high watermark; reads below
  it are out of range; whole segments below it are deleted from disk.
- Per-partition errors as Kafka answers: beyond the high watermark OFFSET_OUT_OF_RANGE,
  an internal topic
  INVALID_TOPIC_EXCEPTION, a compact-only topic POLICY_VIOLATION.
- Errors librdkafka does not let through (unknown partitions, internal topics) are
  checked with raw requests at every version.
- The new log start offset survives a SIGKILL of the broker right after the answer.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(60)


def delete(admin: AdminClient, topic: str, partition: int, offset: int):
    """The new low watermark, or the KafkaError code."""
    future = admin.delete_records([TopicPartition(topic, partition, offset)])
    try:
        return next(iter(future.values())).result(15).low_watermark
    except KafkaException as exc:
        return exc.args[0].code()


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def test_delete_records_moves_the_log_start_and_survives_sigkill(broker):
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("t", 1, 1, config={"segment.bytes": "200"}),
                         NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})])["t"].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce("t", b"record-%02d" % i, key=b"k")
        producer.flush(10)  # one batch each: many small segments
    producer.produce("compacted", b"v", key=b"k")
    assert producer.flush(10) == 0
    directory = os.path.join(broker.data_dir, "t-0")
    segments_before = sum(name.endswith(".log") for name in os.listdir(directory))

    assert delete(admin, "t", 0, 12) == 12
    assert delete(admin, "t", 0, 5) == 12  # never back
    assert watermarks(bootstrap, "t", 0) == (12, 20)
    assert sum(name.endswith(".log") for name in os.listdir(directory)) < segments_before
    assert delete(admin, "t", 0, 21) == KafkaError.OFFSET_OUT_OF_RANGE
    assert delete(admin, "compacted", 0, 1) == KafkaError.POLICY_VIOLATION

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "below", "auto.offset.reset": "error",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("t", 0, 3)])
        message = consumer.poll(10)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        consumer.close()

    assert delete(admin, "t", 0, -1) == 20  # -1: the high watermark
    broker.kill()
    broker.start()
    assert watermarks(bootstrap, "t", 0) == (20, 20)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_delete_records_errors_per_partition(broker, version):
    from tests.test_broker_failures import connect, roundtrip
    from wire.error_codes import ErrorCode
    from wire.messages import DELETE_RECORDS

    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    admin.create_topics([NewTopic("t", 1, 1)])["t"].result(15)
    group = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "g"})
    group.commit(offsets=[TopicPartition("t", 0, 0)], asynchronous=False)  # creates __consumer_offsets
    group.close()
    Req = DELETE_RECORDS.request
    body = Req(timeout_ms=1000, topics=[
        Req.DeleteRecordsTopic(name="t", partitions=[Req.DeleteRecordsPartition(partition_index=0, offset=-1),
                                                     Req.DeleteRecordsPartition(partition_index=1, offset=0),
                                                     Req.DeleteRecordsPartition(partition_index=0, offset=-2)]),
        Req.DeleteRecordsTopic(name="__consumer_offsets",
                               partitions=[Req.DeleteRecordsPartition(partition_index=0, offset=0)]),
        Req.DeleteRecordsTopic(name="missing", partitions=[Req.DeleteRecordsPartition(partition_index=0,
                                                                                      offset=0)])])
    with connect(broker.port) as sock:
        response = roundtrip(sock, DELETE_RECORDS, version, body, 7)
    answers = [(t.name, p.partition_index, p.error_code, p.low_watermark)
               for t in response.topics for p in t.partitions]
    assert answers == [("t", 0, ErrorCode.NONE, 0),
                       ("t", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
                       ("t", 0, ErrorCode.OFFSET_OUT_OF_RANGE, -1),
                       ("__consumer_offsets", 0, ErrorCode.INVALID_TOPIC_EXCEPTION, -1),
                       ("missing", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)]
