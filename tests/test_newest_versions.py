"""Kafka 4.4's newest version of the APIs served, as real clients ask them (seen on the wire
through tests/kafka_capture.py's proxy) or, where no client here asks one, as raw frames.

- Metadata v13 (librdkafka): the top-level error code, 0 as Kafka's brokers answer it.
- ListTransactions v2 (kafka-transactions.sh list --transactional-id-pattern is in
  tests/test_kafka_tools.py): a pattern that does not compile, INVALID_REGULAR_EXPRESSION.
"""

from __future__ import annotations

import uuid

import pytest

from tests.kafka_capture import KafkaCaptureProxy
from tests.test_broker_failures import connect, roundtrip
from wire.error_codes import ErrorCode
from wire.messages import LIST_TRANSACTIONS, METADATA
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
