"""Apache Kafka's own command-line tools (the classes behind kafka-topics.sh and friends, from
`org.apache.kafka:kafka-tools`) run with `java -cp` against the real broker process.

- kafka-topics: `--create` (then the partitions seen by a Python client), `--describe`
  (partition count, replication factor, each partition's leader, replicas and ISR), `--list`;
  `--describe` in pages of DescribeTopicPartitions, seen on the wire through a capture proxy.
- kafka-consumer-groups: `--list` (with `--state`), `--describe` of a group with a live
  member and of the same group once it left (current offset, log-end offset and lag per
  partition; the member's id, host and client id), `--reset-offsets --to-earliest
  --execute` (then the committed offsets read back by confluent-kafka are 0 and a consumer
  of the group re-reads every record from the start), `--delete-offsets` (then the group
  has no committed offsets). A KIP-848 group (group.protocol=consumer) described too: its
  offsets and lag per partition, its member, its state and the broker's assignor.
- kafka-console-producer with keys (`parse.key`, `key.separator`) from stdin, then
  kafka-console-consumer `--from-beginning --max-messages N` (Fetch v18) printing keys: the same lines;
  the keys and values checked independently with confluent-kafka.
- kafka-producer-perf-test then kafka-consumer-perf-test: the counts each reports, and the
  log-end offsets the broker reports.
- kafka-delete-records: the new low watermarks, as printed and as a client sees them.
- kafka-transactions list (also --transactional-id-pattern), describe and describe-producers
  of an open transaction.
- kafka-log-dirs --describe: the log directory and each partition's size.
- kafka-cluster list-endpoints --include-fenced-brokers: DescribeCluster v2, the broker unfenced.
- kafka-get-offsets --time earliest-pending-upload: ListOffsets v11, no offset (no tiered storage).

One broker for the module (every test uses its own topics and groups), with
`group.initial.rebalance.delay.ms=0` (as Kafka's own test clusters are configured), so that no JVM waits
three seconds for a group's first rebalance. The classpath is resolved once by
`sluice/maven.py`; if it cannot be, every test fails with Maven's reason. The tools log
through slf4j 1.7, which has no binding on this classpath: all they log is slf4j's
three-line notice on stderr, which the tests read separately from stdout.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import uuid

import pytest

from sluice import maven
from sluice.broker_process import BrokerProcess
from tests.kafka_capture import KafkaCaptureProxy
from wire.messages import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS, DESCRIBE_TOPIC_PARTITIONS, FETCH, LIST_OFFSETS
from wire.protocol import decode_request, decode_response

pytestmark = pytest.mark.timeout(180)

TOOL_TIMEOUT_S = 60
TOPICS = "org.apache.kafka.tools.TopicCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
PRODUCER_PERF = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERF = "org.apache.kafka.tools.ConsumerPerformance"
CONFIGS = "org.apache.kafka.tools.ConfigCommand"  # kafka-configs.sh


@functools.lru_cache(maxsize=1)
def _resolve():
    return maven.classpath(["org.apache.kafka:kafka-tools:" + maven.KAFKA_VERSION])


def tool(main_class: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run one of Kafka's tools; fails the test if it cannot be found or does not exit 0."""
    try:
        command = maven.java_command(_resolve(), main_class, *args)
    except maven.MavenUnavailable as exc:
        unavailable = str(exc)
    else:
        unavailable = None
    if unavailable is not None:  # failed outside the except block: no chained traceback
        pytest.fail(unavailable, pytrace=False)
    done = subprocess.run(command, input=stdin, capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S)
    assert done.returncode == 0, (
        f"{main_class.rsplit('.', 1)[-1]} {' '.join(args)} exited {done.returncode}\n"
        f"stdout:\n{done.stdout}\nstderr:\n{_without_slf4j(done.stderr)}")
    return done


def _without_slf4j(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("SLF4J:"))


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def table(stdout: str, first_column: str = "GROUP") -> list[dict[str, str]]:
    """The rows of the whitespace-aligned table that consumer-groups prints."""
    rows, header = [], None
    for line in stdout.splitlines():
        cells = line.split()
        if not cells:
            continue
        if cells[0] == first_column:
            header = cells
        elif header is not None and len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("kafka-tools")
    config = base / "server.properties"
    config.write_text("group.initial.rebalance.delay.ms=0\n")
    with BrokerProcess(base / "data", config_file=str(config)) as proc:
        yield proc
    output = "".join(proc.output)
    assert "Traceback" not in output, output[-5000:]


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(bootstrap)  # kept alive until the result is in: its handle owns the future
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=15)


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("watermarks")})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def test_topics_create_describe_list(kafka_broker):
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-topic")

    created = tool(TOPICS, "--bootstrap-server", bootstrap, "--create", "--topic", topic,
                   "--partitions", "3", "--replication-factor", "1")
    assert f"Created topic {topic}." in created.stdout

    metadata = _admin(bootstrap).list_topics(topic, timeout=10).topics[topic]
    assert metadata.error is None
    assert sorted(metadata.partitions) == [0, 1, 2]

    described = tool(TOPICS, "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    lines = [line.strip() for line in described.stdout.splitlines() if line.strip()]
    summary = dict(re.findall(r"(\w+): (\S*)", lines[0]))
    assert summary["Topic"] == topic
    assert summary["PartitionCount"] == "3"
    assert summary["ReplicationFactor"] == "1"
    partitions = [dict(re.findall(r"(\w+): (\S+)", line)) for line in lines[1:]]
    assert [p["Partition"] for p in partitions] == ["0", "1", "2"]
    for p in partitions:
        assert p["Topic"] == topic
        assert (p["Leader"], p["Replicas"], p["Isr"]) == ("0", "0", "0"), p

    listed = tool(TOPICS, "--bootstrap-server", bootstrap, "--list")
    assert topic in listed.stdout.split()


def test_topics_describe_pages_through_describe_topic_partitions(kafka_broker):
    """kafka-topics 4.4 --describe asks DescribeTopicPartitions, here two partitions a page:
    five partitions take three requests, each after the first at the cursor the answer
    before named, and every partition is printed once."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("paged-topic")
    _create_topic(bootstrap, topic, 5)
    with KafkaCaptureProxy(bootstrap) as proxy:
        described = tool(TOPICS, "--bootstrap-server", proxy.bootstrap, "--describe", "--topic", topic,
                         "--partition-size-limit-per-response", "2")
        pages = [decode_request(f.data)[1] for f in proxy.requests()
                 if f.api_key == DESCRIBE_TOPIC_PARTITIONS.key]
    assert [(p.cursor.topic_name, p.cursor.partition_index) if p.cursor else None for p in pages] == [
        None, (topic, 2), (topic, 4)]
    assert {p.response_partition_limit for p in pages} == {2}
    lines = [line.strip() for line in described.stdout.splitlines() if line.strip()]
    assert dict(re.findall(r"(\w+): (\S*)", lines[0]))["PartitionCount"] == "5"
    partitions = [dict(re.findall(r"(\w+): (\S+)", line)) for line in lines[1:]]
    assert [p["Partition"] for p in partitions] == ["0", "1", "2", "3", "4"]


def test_consumer_groups_list_describe_reset_delete_offsets(kafka_broker):
    from confluent_kafka import OFFSET_INVALID, Consumer, Producer, TopicPartition

    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("tools-groups"), unique("tools-group")
    _create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, f"a{i}".encode(), partition=0)
    for i in range(3):
        producer.produce(topic, f"b{i}".encode(), partition=1)
    assert producer.flush(15) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "client.id": "tools-test-client", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumed = 0
    try:
        consumer.subscribe([topic])
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                consumed += 1
            if consumed == 8:
                break
        assert consumed == 8
        consumer.commit(asynchronous=False)
        # Two more records on partition 1, not consumed: a lag of 2 there.
        producer.produce(topic, b"b3", partition=1)
        producer.produce(topic, b"b4", partition=1)
        assert producer.flush(15) == 0

        listed = tool(GROUPS, "--bootstrap-server", bootstrap, "--list")
        assert group in listed.stdout.split()

        live = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--describe",
                          "--group", group).stdout)
        assert [(r["TOPIC"], r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"])
                for r in sorted(live, key=lambda r: r["PARTITION"])] == [
            (topic, "0", "5", "5", "0"), (topic, "1", "3", "5", "2")]
        for row in live:
            assert row["GROUP"] == group
            assert row["CLIENT-ID"] == "tools-test-client"
            assert row["CONSUMER-ID"].startswith("tools-test-client-")
            assert row["HOST"] == "/127.0.0.1"
    finally:
        consumer.close()

    states = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--list", "--state").stdout)
    assert {"GROUP": group, "STATE": "Empty"} in states

    left = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--describe",
                      "--group", group).stdout)
    assert sorted((r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"],
                   r["CONSUMER-ID"]) for r in left) == [("0", "5", "5", "0", "-"),
                                                        ("1", "3", "5", "2", "-")]

    reset = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--reset-offsets",
                       "--to-earliest", "--execute", "--group", group, "--topic", topic).stdout)
    assert sorted((r["TOPIC"], r["PARTITION"], r["NEW-OFFSET"]) for r in reset) == [
        (topic, "0", "0"), (topic, "1", "0")]

    rereader = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "latest", "enable.auto.commit": False})
    try:
        committed = rereader.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                       timeout=10)
        assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [
            (0, 0, None), (1, 0, None)]
        # auto.offset.reset=latest: only the committed offsets make it read from the start.
        rereader.subscribe([topic])
        reread = []
        for _ in range(100):
            message = rereader.poll(0.2)
            if message is not None and message.error() is None:
                reread.append((message.partition(), message.offset(), message.value()))
            if len(reread) == 10:
                break
    finally:
        rereader.close()
    assert sorted(reread) == ([(0, i, f"a{i}".encode()) for i in range(5)]
                              + [(1, i, f"b{i}".encode()) for i in range(5)])

    deleted = tool(GROUPS, "--bootstrap-server", bootstrap, "--delete-offsets",
                   "--group", group, "--topic", topic)
    assert f"Request succeeded for deleting offsets from group {group}." in deleted.stdout
    assert sorted((r["TOPIC"], r["PARTITION"], r["STATUS"])
                  for r in table(deleted.stdout, first_column="TOPIC")) == [
        (topic, "0", "Successful"), (topic, "1", "Successful")]
    checker = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = checker.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                      timeout=10)
    finally:
        checker.close()
    assert [tp.offset for tp in committed] == [OFFSET_INVALID, OFFSET_INVALID]


def test_consumer_groups_describe_a_kip848_group(kafka_broker):
    """kafka-consumer-groups describes a group of the consumer group protocol (KIP-848)
    through ConsumerGroupDescribe: offsets and lag, the member, and the group's state with
    the broker's assignor."""
    from confluent_kafka import Consumer, Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic, group = unique("tools-kip848"), unique("tools-kip848-group")
    _create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        producer.produce(topic, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(15) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "client.id": "tools-kip848-client", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        consumed = 0
        for _ in range(150):
            message = consumer.poll(0.2)
            consumed += message is not None and message.error() is None
            if consumed == 6:
                break
        assert consumed == 6
        consumer.commit(asynchronous=False)
        producer.produce(topic, b"v6", partition=0)
        assert producer.flush(15) == 0

        rows = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group).stdout)
        assert [(r["PARTITION"], r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"], r["CLIENT-ID"])
                for r in sorted(rows, key=lambda r: r["PARTITION"])] == [
            ("0", "3", "4", "1", "tools-kip848-client"), ("1", "3", "3", "0", "tools-kip848-client")]
        state = table(tool(GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group,
                           "--state").stdout)
        assert [(r["ASSIGNMENT-STRATEGY"], r["STATE"], r["#MEMBERS"]) for r in state] == [("uniform", "Stable", "1")]
    finally:
        consumer.close()


def test_console_producer_then_console_consumer(kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-console")
    _create_topic(bootstrap, topic, 2)
    lines = [f"key-{i % 4}:value {i} with spaces" for i in range(12)]

    tool(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic,
         "--reader-property", "parse.key=true", "--reader-property", "key.separator=:",
         stdin="\n".join(lines) + "\n")

    # What the broker stored, read without the console consumer: keys split from values.
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("tools-check")})
    stored = []
    try:
        reader.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        for _ in range(100):
            message = reader.poll(0.2)
            if message is not None and message.error() is None:
                stored.append(f"{message.key().decode()}:{message.value().decode()}")
            if len(stored) == len(lines):
                break
    finally:
        reader.close()
    assert sorted(stored) == sorted(lines)

    with KafkaCaptureProxy(bootstrap) as proxy:  # Kafka 4.4's consumer fetches at v18, by topic id
        consumed = tool(CONSOLE_CONSUMER, "--bootstrap-server", proxy.bootstrap, "--topic", topic,
                        "--from-beginning", "--max-messages", str(len(lines)),
                        "--timeout-ms", "30000",
                        "--formatter-property", "print.key=true",
                        "--formatter-property", "key.separator=:")
        fetched = {(f.api_version, error_code) for f in proxy.responses() if f.api_key == FETCH.key
                   for t in decode_response(FETCH.key, f.api_version, f.data)[1].responses
                   for error_code in {p.error_code for p in t.partitions}}
    assert fetched == {(18, 0)}
    output = [line for line in consumed.stdout.splitlines() if line]
    assert sorted(output) == sorted(lines)
    # Records with one key share a partition, which the consumer reads in order.
    for key in {line.split(":")[0] for line in lines}:
        assert ([line for line in output if line.startswith(key + ":")]
                == [line for line in lines if line.startswith(key + ":")])
    assert f"Processed a total of {len(lines)} messages" in consumed.stderr


def test_producer_perf_then_consumer_perf(kafka_broker):
    bootstrap = kafka_broker.bootstrap_servers
    topic, records, size = unique("tools-perf"), 20_000, 100
    _create_topic(bootstrap, topic, 2)

    produced = tool(PRODUCER_PERF, "--topic", topic, "--num-records", str(records),
                    "--record-size", str(size), "--throughput", "-1",
                    "--command-property", "acks=all", f"bootstrap.servers={bootstrap}")
    final = [line for line in produced.stdout.splitlines() if "records sent" in line][-1]
    assert re.match(rf"{records} records sent, [\d.]+ records/sec", final), final
    assert sum(_end_offsets(bootstrap, topic, 2)) == records

    consumed = tool(CONSUMER_PERF, "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(records), "--timeout", "30000")
    header, values = [line for line in consumed.stdout.splitlines() if line][-2:]
    report = dict(zip([h.strip() for h in header.split(",")],
                      [v.strip() for v in values.split(",")]))
    assert int(report["data.consumed.in.nMsg"]) == records
    assert float(report["data.consumed.in.MB"]) == pytest.approx(records * size / 2**20,
                                                                 abs=0.0001)


def test_delete_records(kafka_broker, tmp_path):
    """kafka-delete-records --offset-json-file: the log start offset moves up, reads below it
    are out of range, and ListOffsets earliest reports it."""
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-delete")
    _create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(topic, b"%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    offsets = tmp_path / "offsets.json"
    offsets.write_text('{"version": 1, "partitions": [{"topic": "%s", "partition": 0, "offset": 3},'
                       ' {"topic": "%s", "partition": 1, "offset": -1}]}' % (topic, topic))
    done = tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", bootstrap,
                "--offset-json-file", str(offsets))
    assert re.search(rf"partition: {topic}-0\s+low_watermark: 3", done.stdout), done.stdout
    assert re.search(rf"partition: {topic}-1\s+low_watermark: 5", done.stdout), done.stdout
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("low")})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (3, 5)
        assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (5, 5)
    finally:
        consumer.close()


def test_transactions_tool(kafka_broker):
    """kafka-transactions: list (also by a transactional id pattern), describe and
    describe-producers of an open transaction."""
    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-txn")
    transactional_id = unique("tools-txn-id")
    _create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(15) == 0
    try:
        command = "org.apache.kafka.tools.TransactionsCommand"
        listed = table(tool(command, "--bootstrap-server", bootstrap, "list").stdout, "TransactionalId")
        mine = [row for row in listed if row["TransactionalId"] == transactional_id]
        assert len(mine) == 1 and mine[0]["TransactionState"] == "Ongoing", listed
        matching = table(tool(command, "--bootstrap-server", bootstrap, "list", "--transactional-id-pattern",
                              "tools-txn-id-[0-9a-f]+").stdout, "TransactionalId")  # ListTransactions v2
        assert mine[0] in matching and {row["TransactionalId"][:13] for row in matching} == {"tools-txn-id-"}
        assert not table(tool(command, "--bootstrap-server", bootstrap, "list", "--transactional-id-pattern",
                              "tools-txn-id").stdout, "TransactionalId")  # the whole id must match
        described = table(tool(command, "--bootstrap-server", bootstrap, "describe", "--transactional-id",
                               transactional_id).stdout, "CoordinatorId")
        assert described and described[0]["TransactionState"] == "Ongoing", described
        producers = table(tool(command, "--bootstrap-server", bootstrap, "describe-producers", "--topic", topic,
                               "--partition", "0").stdout, "ProducerId")
        assert len(producers) == 1, producers
        assert producers[0]["ProducerId"] == mine[0]["ProducerId"]
        assert producers[0]["CurrentTransactionStartOffset"] == "0"
        assert producers[0]["LastSequence"] == "0"
    finally:
        producer.abort_transaction(15)


def test_log_dirs(kafka_broker):
    """kafka-log-dirs --describe (DescribeLogDirs v5, no directory cordoned): the broker's log
    directory with each partition's size."""
    import json

    from confluent_kafka import Producer

    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-dirs")
    _create_topic(bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"x" * 1000, partition=1)
    assert producer.flush(15) == 0
    with KafkaCaptureProxy(bootstrap) as proxy:
        done = tool("org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", proxy.bootstrap, "--describe",
                    "--topic-list", topic)
        answers = [(f.api_version, decode_response(f.api_key, f.api_version, f.data)[1])
                   for f in proxy.responses() if f.api_key == DESCRIBE_LOG_DIRS.key]
    assert [(version, [d.is_cordoned for d in body.results]) for version, body in answers] == [(5, [False])]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (only_broker,) = report["brokers"]
    (log_dir,) = only_broker["logDirs"]
    assert log_dir["logDir"] == os.path.abspath(kafka_broker.data_dir) and log_dir["error"] is None
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert sizes[f"{topic}-0"] == 0 and 1000 < sizes[f"{topic}-1"] < 1200, sizes
    assert set(sizes) == {f"{topic}-0", f"{topic}-1"}


def test_cluster_list_endpoints_with_fenced_brokers(kafka_broker):
    """kafka-cluster list-endpoints --include-fenced-brokers sends DescribeCluster v2: the
    broker is listed with its endpoint, not fenced."""
    with KafkaCaptureProxy(kafka_broker.bootstrap_servers) as proxy:
        done = tool("org.apache.kafka.tools.ClusterTool", "list-endpoints", "--bootstrap-server",
                    proxy.bootstrap, "--include-fenced-brokers")
        answers = [(f.api_version, decode_response(f.api_key, f.api_version, f.data)[1])
                   for f in proxy.responses() if f.api_key == DESCRIBE_CLUSTER.key]
        advertised = proxy.listener_ports[kafka_broker.bootstrap_servers]  # the proxy's stand-in
    assert [(version, [(b.broker_id, b.is_fenced) for b in body.brokers]) for version, body in answers] == [
        (2, [(0, False)])]
    header, row = (line.split() for line in done.stdout.splitlines()[:2])
    assert dict(zip(header, row)) == {"ID": "0", "HOST": "127.0.0.1", "PORT": str(advertised),
                                      "RACK": "null", "STATE": "unfenced", "ENDPOINT_TYPE": "broker"}


def test_get_offsets_earliest_pending_upload(kafka_broker):
    """kafka-get-offsets asks ListOffsets v11: the earliest offset pending upload to tiered
    storage (-6) is answered offset -1, as Kafka's broker without tiered storage, and the
    tool prints none; the earliest offsets (-2) are printed."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = unique("tools-offsets")
    _create_topic(bootstrap, topic, 2)
    with KafkaCaptureProxy(bootstrap) as proxy:
        pending = tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", proxy.bootstrap,
                       "--topic", topic, "--time", "earliest-pending-upload")
        answers = [(f.api_version, decode_response(f.api_key, f.api_version, f.data)[1])
                   for f in proxy.responses() if f.api_key == LIST_OFFSETS.key]
    assert [(version, sorted((p.partition_index, p.error_code, p.offset, p.timestamp)
                             for t in body.topics for p in t.partitions)) for version, body in answers] == [
        (11, [(0, 0, -1, -1), (1, 0, -1, -1)])]
    assert pending.stdout.strip() == ""
    earliest = tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--time", "earliest")
    assert sorted(earliest.stdout.split()) == [f"{topic}:0:0", f"{topic}:1:0"]
