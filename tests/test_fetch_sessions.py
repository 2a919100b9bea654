"""Incremental fetch sessions (KIP-227) against the real broker process, request by request,
and with kafka-python's consumer, which fetches in sessions.

- Opening (epoch 0) answers in full with a session id; an incremental fetch (epoch 1, 2,
  ...) lists nothing when nothing changed, only the partition that got records or a new
  high watermark otherwise, and waits (long poll) on every partition of the session, the
  ones it does not list included.
- Partitions added by an incremental request join the session; forgotten ones leave it;
  unknown ones stay, answered with their error until they exist.
- Session errors: an unknown id, a wrong epoch, a topic naming that changed between
  versions; epoch -1 closes a session.
- The byte budget rotates: the partition whose records were returned moves to the end.
- `max.incremental.fetch.session.cache.slots` bounds the sessions: a full cache opens no
  session (id 0, a full answer) unless a larger one can take a smaller one's slot.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import threading
import time

import pytest

from sluice.broker_process import BrokerProcess
from tests.test_broker_failures import connect, roundtrip
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import FETCH, METADATA
from wire.primitives import ZERO_UUID

pytestmark = pytest.mark.timeout(120)

Req = FETCH.request
MAX = 1 << 20


class Fetcher:
    """Fetch requests on one connection, counting correlation ids."""

    def __init__(self, port: int):
        self.sock = connect(port)
        self.correlation_id = 0

    def fetch(self, topics, *, session_id=0, epoch=-1, forgotten=(), version=12, max_wait_ms=0,
              min_bytes=0, max_bytes=MAX):
        """`topics`: {topic name (or id from v13): {partition: fetch offset}}."""
        self.correlation_id += 1
        by_id = version >= 13
        body = Req(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                   isolation_level=0, session_id=session_id, session_epoch=epoch,
                   topics=[Req.FetchTopic(topic=None if by_id else ref, topic_id=ref if by_id else ZERO_UUID,
                                          partitions=[Req.FetchPartition(
                                              partition=p, current_leader_epoch=-1, fetch_offset=offset,
                                              last_fetched_epoch=-1, log_start_offset=-1,
                                              partition_max_bytes=MAX)
                                              for p, offset in sorted(parts.items())])
                           for ref, parts in topics.items()],
                   forgotten_topics_data=[Req.ForgottenTopic(topic=None if by_id else ref,
                                                             topic_id=ref if by_id else ZERO_UUID,
                                                             partitions=list(parts))
                                          for ref, parts in dict(forgotten).items()],
                   rack_id="")
        return roundtrip(self.sock, FETCH, version, body, self.correlation_id)

    def close(self):
        self.sock.close()


def listed(response) -> dict:
    """{(topic ref, partition): (high watermark, record bytes, error)} of a response."""
    return {(t.topic or t.topic_id, p.partition_index):
            (p.high_watermark, len(p.records or b""), p.error_code)
            for t in response.responses for p in t.partitions}


@pytest.fixture
def sessions(tmp_path):
    """A broker, a 3-partition topic "s" with one record in partition 0, and a Fetcher."""
    with BrokerProcess(tmp_path / "data") as broker:
        with Client(broker.bootstrap_servers) as client:
            client.admin.create_topics({"s": NewTopic(3, 1, {})})
            client.producer.produce("s", 0, [(b"k", b"v0")])
            fetcher = Fetcher(broker.port)
            try:
                yield broker, client, fetcher
            finally:
                fetcher.close()


def test_incremental_fetches_list_only_what_changed(sessions):
    broker, client, fetcher = sessions
    opened = fetcher.fetch({"s": {0: 0, 1: 0}}, epoch=0)
    assert opened.error_code == 0 and opened.session_id != 0
    assert listed(opened) == {("s", 0): (1, listed(opened)[("s", 0)][1], 0), ("s", 1): (0, 0, 0)}
    assert listed(opened)[("s", 0)][1] > 0
    sid = opened.session_id

    # The fetcher moves partition 0 past its record: nothing else changed.
    quiet = fetcher.fetch({"s": {0: 1}}, session_id=sid, epoch=1)
    assert (quiet.error_code, quiet.session_id, listed(quiet)) == (0, sid, {})
    assert listed(fetcher.fetch({}, session_id=sid, epoch=2)) == {}

    client.producer.produce("s", 1, [(b"k", b"v1"), (b"k", b"v2")])
    moved = fetcher.fetch({}, session_id=sid, epoch=3)
    assert list(listed(moved)) == [("s", 1)]
    assert listed(moved)[("s", 1)][0] == 2 and listed(moved)[("s", 1)][1] > 0
    # Still at offset 0 for partition 1: the records again, the high watermark unchanged.
    again = fetcher.fetch({}, session_id=sid, epoch=4)
    assert list(listed(again)) == [("s", 1)]
    assert listed(fetcher.fetch({"s": {1: 2}}, session_id=sid, epoch=5)) == {}


def test_incremental_long_poll_waits_on_unlisted_partitions(sessions):
    broker, client, fetcher = sessions
    sid = fetcher.fetch({"s": {0: 1, 2: 0}}, epoch=0).session_id
    started = time.monotonic()
    empty = fetcher.fetch({}, session_id=sid, epoch=1, max_wait_ms=300, min_bytes=1)
    assert listed(empty) == {} and time.monotonic() - started >= 0.25

    timer = threading.Timer(0.3, lambda: Client(broker.bootstrap_servers).producer.produce("s", 2, [(None, b"x")]))
    timer.start()
    try:
        started = time.monotonic()
        woken = fetcher.fetch({}, session_id=sid, epoch=2, max_wait_ms=20_000, min_bytes=1)
    finally:
        timer.join()
    assert list(listed(woken)) == [("s", 2)] and listed(woken)[("s", 2)][1] > 0
    assert time.monotonic() - started < 15


def test_added_forgotten_and_unknown_partitions(sessions):
    broker, client, fetcher = sessions
    sid = fetcher.fetch({"s": {1: 0}}, epoch=0).session_id
    added = fetcher.fetch({"s": {0: 0}, "later": {0: 0}}, session_id=sid, epoch=1)
    assert listed(added)[("s", 0)][1] > 0
    assert listed(added)[("later", 0)] == (-1, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    # Partition 0 leaves the session; the unknown one stays, answered with its error.
    assert listed(fetcher.fetch({}, session_id=sid, epoch=2, forgotten={"s": [0]})) == {
        ("later", 0): (-1, 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)}
    client.producer.produce("s", 0, [(None, b"more")])
    client.admin.create_topics({"later": NewTopic(1, 1, {})})
    client.producer.produce("later", 0, [(None, b"now")])
    client.producer.produce("s", 1, [(None, b"p1")])
    # Served once it exists, without being listed again (as a follower that heard of a
    # topic before its leader did fetches it).
    served = listed(fetcher.fetch({}, session_id=sid, epoch=3))
    assert sorted(served) == [("later", 0), ("s", 1)]
    assert served[("later", 0)][0] == 1 and served[("later", 0)][1] > 0 and served[("later", 0)][2] == 0


def test_session_errors_and_closing(sessions):
    broker, client, fetcher = sessions
    sid = fetcher.fetch({"s": {0: 0}}, epoch=0).session_id
    for session_id, epoch, code in ((sid, 2, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                                    (sid, 0x7FFFFFFF, ErrorCode.INVALID_FETCH_SESSION_EPOCH),
                                    (sid ^ 1, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND),
                                    (0, 1, ErrorCode.FETCH_SESSION_ID_NOT_FOUND)):
        answer = fetcher.fetch({"s": {0: 0}}, session_id=session_id, epoch=epoch)
        assert (answer.error_code, answer.session_id, answer.responses) == (code, 0, [])
    # Refused requests do not move the session on.
    assert fetcher.fetch({}, session_id=sid, epoch=1).error_code == 0

    topic_id = _topic_id(broker, "s")
    by_id = fetcher.fetch({topic_id: {0: 0}}, epoch=0, version=13)
    assert listed(by_id)[(topic_id, 0)][1] > 0
    mixed = fetcher.fetch({}, session_id=by_id.session_id, epoch=1, version=12)
    assert mixed.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR

    closed = fetcher.fetch({"s": {0: 0}}, session_id=sid, epoch=-1)
    assert closed.error_code == 0 and closed.session_id == 0 and listed(closed)[("s", 0)][1] > 0
    assert fetcher.fetch({}, session_id=sid, epoch=2).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # Epoch 0 naming a session closes it and opens another.
    reopened = fetcher.fetch({"s": {0: 0}}, session_id=by_id.session_id, epoch=0)
    assert reopened.session_id not in (0, by_id.session_id)
    assert fetcher.fetch({}, session_id=by_id.session_id, epoch=2, version=13).error_code \
        == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def _topic_id(broker, topic: str):
    with connect(broker.port) as sock:
        response = roundtrip(sock, METADATA, 12, METADATA.request(
            topics=[METADATA.request.MetadataRequestTopic(name=topic)],
            allow_auto_topic_creation=False), 7)
    return response.topics[0].topic_id


def test_byte_budget_rotates_between_partitions(sessions):
    broker, client, fetcher = sessions
    client.producer.produce("s", 1, [(None, b"x" * 1000)])
    sid = fetcher.fetch({"s": {0: 1, 1: 0, 2: 0}}, epoch=0).session_id
    client.producer.produce("s", 2, [(None, b"y" * 1000)])
    client.producer.produce("s", 0, [(None, b"z" * 1000)])
    # max_bytes 1: only the first partition with records is answered (its batch whole).
    first = fetcher.fetch({}, session_id=sid, epoch=1, max_bytes=1)
    assert [key for key, (_, size, _) in listed(first).items() if size] == [("s", 0)]
    # Partition 0 went to the end: the next fetch starts with 2 (1 is at its end already).
    second = fetcher.fetch({"s": {0: 2}}, session_id=sid, epoch=2, max_bytes=1)
    assert [key for key, (_, size, _) in listed(second).items() if size] == [("s", 2)]


def test_cache_slots_bound_the_sessions(tmp_path):
    config = tmp_path / "server.properties"
    config.write_text("max.incremental.fetch.session.cache.slots=1\n")
    with BrokerProcess(tmp_path / "data", config_file=str(config)) as broker:
        with Client(broker.bootstrap_servers) as client:
            client.admin.create_topics({"s": NewTopic(3, 1, {})})
        one, two = Fetcher(broker.port), Fetcher(broker.port)
        try:
            small = one.fetch({"s": {0: 0}}, epoch=0)
            assert small.session_id != 0
            refused = two.fetch({"s": {0: 0}}, epoch=0)  # not larger: no session, a full answer
            assert refused.session_id == 0 and list(listed(refused)) == [("s", 0)]
            larger = two.fetch({"s": {0: 0, 1: 0}}, epoch=0)
            assert larger.session_id not in (0, small.session_id)
            assert one.fetch({}, session_id=small.session_id, epoch=1).error_code \
                == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
            assert two.fetch({}, session_id=larger.session_id, epoch=1).error_code == 0
        finally:
            one.close()
            two.close()


def test_kafka_python_consumer_reads_everything_through_sessions(sessions):
    """kafka-python fetches in sessions (FetchSessionHandler): every record of three
    partitions, produced while it reads, arrives once."""
    kafka = pytest.importorskip("kafka")
    broker, client, fetcher = sessions
    consumer = kafka.KafkaConsumer("s", bootstrap_servers=broker.bootstrap_servers,
                                   auto_offset_reset="earliest", enable_auto_commit=False,
                                   fetch_max_wait_ms=100, consumer_timeout_ms=500)
    try:
        expected = {b"v0"}
        seen = []
        deadline = time.monotonic() + 60
        for batch in range(5):
            values = [b"r%d-%d" % (batch, i) for i in range(30)]
            for i, value in enumerate(values):
                client.producer.produce("s", i % 3, [(None, value)])
            expected.update(values)
            while set(seen) != expected and time.monotonic() < deadline:
                seen.extend(record.value for record in consumer)
        assert sorted(seen) == sorted(expected)
        assert len(seen) == len(set(seen))
    finally:
        consumer.close()
