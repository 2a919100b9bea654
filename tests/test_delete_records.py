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
- The segments it lets go of stay renamed `.deleted` for `file.delete.delay.ms`.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic)

from tests.support.polling import wait_for

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


def deleted_files(directory: str) -> set[str]:
    return {name for name in os.listdir(directory) if name.endswith(".deleted")}


def test_segments_let_go_of_stay_for_file_delete_delay_ms(broker):
    """file.delete.delay.ms as Kafka honours it: the segments DeleteRecords lets go of are
    renamed `.deleted` at once and removed after the delay their topic had then; it is set
    through CreateTopics, AlterConfigs and IncrementalAlterConfigs (deleted: the broker's
    `log.segment.delete.delay.ms`, 60 s); what a stop leaves, the next start removes."""
    bootstrap = broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    key, hour = "file.delete.delay.ms", "3600000"
    admin.create_topics([NewTopic("delayed", 1, 1, config={"segment.bytes": "200", key: hour})])["delayed"].result(15)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(20):
        producer.produce("delayed", b"record-%02d" % i, key=b"k")
        producer.flush(10)  # one batch each: many small segments
    directory = os.path.join(broker.data_dir, "delayed-0")
    bases_before = {name[:-4] for name in os.listdir(directory) if name.endswith(".log")}

    assert delete(admin, "delayed", 0, 8) == 8
    waiting = deleted_files(directory)
    let_go = {name[:-len(".log.deleted")] for name in waiting if name.endswith(".log.deleted")}
    assert let_go and let_go < bases_before
    assert not any(os.path.exists(os.path.join(directory, base + ".log")) for base in let_go)
    assert {name.split(".", 1)[1] for name in waiting} >= {"log.deleted", "index.deleted", "timeindex.deleted"}

    resource = ConfigResource("topic", "delayed", set_config={"segment.bytes": "200", key: "0"})
    admin.alter_configs([resource])[resource].result(15)
    assert delete(admin, "delayed", 0, 14) == 14
    # The later segments go at once; the earlier ones keep the hour they were given.
    wait_for(lambda: deleted_files(directory) == waiting, 15, "only the hour's .deleted files left")
    assert len({name[:-4] for name in os.listdir(directory) if name.endswith(".log")}) < len(bases_before - let_go)

    resource = ConfigResource("topic", "delayed", incremental_configs=[
        ConfigEntry(key, None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(15)
    described = admin.describe_configs([ConfigResource("topic", "delayed")])
    entry = next(iter(described.values())).result(15)[key]
    assert (entry.value, entry.source) == ("60000", ConfigSource.DEFAULT_CONFIG.value)

    broker.stop()
    assert deleted_files(directory) == waiting
    broker.start()
    assert deleted_files(directory) == set()
    assert watermarks(bootstrap, "delayed", 0) == (14, 20)
