"""Kafka 4.4's newest version of the APIs served, as real clients ask them (seen on the wire
through tests/kafka_capture.py's proxy) or, where no client here asks one, as raw frames.

- ApiVersions v5 (KIP-1242): Kafka 4.4's admin client asks it and is answered at once; a
  client naming another cluster or node than the broker's, REBOOTSTRAP_REQUIRED.
- Metadata v13 (librdkafka): the top-level error code, 0 as Kafka's brokers answer it.
- Fetch v18 (KIP-1166), a follower's raw fetch: telling a high watermark behind the
  leader's, it is answered at once whatever min_bytes; telling the current one, it waits
  its max_wait_ms out.
- WriteTxnMarkers v2, raw (a coordinator's request): a transactions-v2 marker must carry an
  epoch newer than the open transaction's, then repeating it is a harmless retry.
- ListTransactions v2 (kafka-transactions.sh list --transactional-id-pattern is in
  tests/test_kafka_tools.py): a pattern that does not compile, INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.kafka_capture import KafkaCaptureProxy
from tests.test_broker_failures import connect, roundtrip
from wire.error_codes import ErrorCode
from sluice_client import Client, NewTopic
from wire.messages import API_VERSIONS, DESCRIBE_PRODUCERS, FETCH, LIST_TRANSACTIONS, METADATA, WRITE_TXN_MARKERS
from wire.protocol import decode_response

pytestmark = pytest.mark.timeout(120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def answered(proxy: KafkaCaptureProxy, api) -> list[tuple[int, object]]:
    """(version, decoded body) of every response to `api` the proxy saw."""
    return [(f.api_version, decode_response(api.key, f.api_version, f.data)[1])
            for f in proxy.responses() if f.api_key == api.key]


def test_librdkafka_asks_metadata_v13(broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique("metadata-v13")
    with KafkaCaptureProxy(broker.bootstrap_servers) as proxy:
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=15)
        assert sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions) == [0, 1]
        answers = answered(proxy, METADATA)
    assert answers and {version for version, _ in answers} == {13}
    assert {body.error_code for _, body in answers} == {0}


def test_list_transactions_v2_refuses_a_pattern_that_does_not_compile(broker):
    with connect(broker.port) as sock:
        for correlation_id, (pattern, code) in enumerate(
                [("tx-[", ErrorCode.INVALID_REGULAR_EXPRESSION), ("", ErrorCode.NONE), (None, ErrorCode.NONE)]):
            body = LIST_TRANSACTIONS.request(transactional_id_pattern=pattern)
            assert roundtrip(sock, LIST_TRANSACTIONS, 2, body, correlation_id).error_code == code, pattern


def test_fetch_v18_answers_a_follower_behind_on_the_high_watermark_at_once(broker):
    topic = unique("fetch-v18")
    with Client(broker.bootstrap_servers) as client:
        assert client.admin.create_topics({topic: NewTopic(partitions=1)})[topic].error is None
        client.producer.produce(topic, 0, [(b"k", b"v")] * 3)
        topic_id = client.metadata([topic]).topics[topic].topic_id
    Req = FETCH.request

    def follower_fetch(known_high_watermark, max_wait_ms, correlation_id):
        body = Req(replica_state=Req.ReplicaState(replica_id=1, replica_epoch=-1), max_wait_ms=max_wait_ms,
                   min_bytes=1 << 20, max_bytes=1 << 20, session_epoch=-1, topics=[Req.FetchTopic(
                       topic_id=topic_id, partitions=[Req.FetchPartition(
                           partition=0, fetch_offset=3, partition_max_bytes=1 << 20,
                           high_watermark=known_high_watermark)])])
        started = time.monotonic()
        response = roundtrip(sock, FETCH, 18, body, correlation_id)
        [answer] = response.responses[0].partitions
        return answer.error_code, answer.high_watermark, time.monotonic() - started

    with connect(broker.port) as sock:
        code, high_watermark, took = follower_fetch(-1, 30_000, 1)
        assert (code, high_watermark) == (0, 3) and took < 10, took
        code, high_watermark, took = follower_fetch(0, 30_000, 2)
        assert (code, high_watermark) == (0, 3) and took < 10, took
        code, high_watermark, took = follower_fetch(3, 1_000, 3)  # nothing new to tell: the long poll
        assert (code, high_watermark) == (0, 3) and took >= 0.9, took


def test_api_versions_v5_checks_the_cluster_and_node_a_client_means(broker):
    from tests.test_kafka_tools import TOPICS, tool

    with Client(broker.bootstrap_servers) as client:
        cluster_id = client.metadata([]).cluster_id
    with KafkaCaptureProxy(broker.bootstrap_servers) as proxy:
        tool(TOPICS, "--bootstrap-server", proxy.bootstrap, "--list")
        answers = [(version, body.error_code) for version, body in answered(proxy, API_VERSIONS)]
    assert answers and set(answers) == {(5, 0)}
    with connect(broker.port) as sock:
        for correlation_id, (meant, node_id, code) in enumerate([
                (cluster_id, 0, ErrorCode.NONE), (None, -1, ErrorCode.NONE), (None, 7, ErrorCode.NONE),
                ("another-cluster", 0, ErrorCode.REBOOTSTRAP_REQUIRED),
                (cluster_id, 7, ErrorCode.REBOOTSTRAP_REQUIRED)]):
            response = roundtrip(sock, API_VERSIONS, 5, API_VERSIONS.request(
                client_software_name="test", client_software_version="1", cluster_id=meant, node_id=node_id),
                correlation_id)
            assert (response.error_code, bool(response.api_keys)) == (code, code == ErrorCode.NONE), meant


def test_write_txn_markers_v2_needs_the_bumped_epoch_of_transactions_v2(broker):
    from confluent_kafka import Producer

    topic = unique("markers-v2")
    with Client(broker.bootstrap_servers) as client:
        assert client.admin.create_topics({topic: NewTopic(partitions=1)})[topic].error is None
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": unique("tv2"),
                         "transaction.timeout.ms": 60_000})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(15) == 0

    with connect(broker.port) as sock:
        def producer_here(correlation_id):
            body = DESCRIBE_PRODUCERS.request(topics=[DESCRIBE_PRODUCERS.request.TopicRequest(
                name=topic, partition_indexes=[0])])
            [state] = roundtrip(sock, DESCRIBE_PRODUCERS, 0, body, correlation_id).topics[0] \
                .partitions[0].active_producers
            return state

        def marker(epoch, correlation_id):
            Req = WRITE_TXN_MARKERS.request
            body = Req(markers=[Req.WritableTxnMarker(
                producer_id=opened.producer_id, producer_epoch=epoch, transaction_result=True,
                coordinator_epoch=opened.coordinator_epoch, transaction_version=2,
                topics=[Req.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
            response = roundtrip(sock, WRITE_TXN_MARKERS, 2, body, correlation_id)
            return response.markers[0].topics[0].partitions[0].error_code

        opened = producer_here(1)
        assert opened.current_txn_start_offset == 0
        assert marker(opened.producer_epoch, 2) == ErrorCode.INVALID_PRODUCER_EPOCH  # the epoch not bumped
        assert producer_here(3).current_txn_start_offset == 0  # still open
        assert marker(opened.producer_epoch + 1, 4) == ErrorCode.NONE
        ended = producer_here(5)
        assert (ended.producer_epoch, ended.current_txn_start_offset) == (opened.producer_epoch + 1, -1)
        assert marker(opened.producer_epoch + 1, 6) == ErrorCode.NONE  # a retry of the marker written
