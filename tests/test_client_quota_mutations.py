"""controller_mutation_rate (KIP-599, issue 37) on a real broker process, raw requests.

The broker's buckets hold controller.quota.window.num=2 windows of 1 s: with a quota of
1 partition a second a client may create or delete 2 partitions at once. Each request
names three topics of 2 partitions: the first takes the bucket to 0, the second (admitted
while the bucket is not below 0) to -2, and the third is refused with
THROTTLING_QUOTA_EXCEEDED from CreateTopics v6, CreatePartitions v3 and DeleteTopics v5
(Kafka's strict mode); the response's throttle time is the 2 s until the bucket is back
at 0. At older versions all three are done, throttled all the same, and the connection
answers nothing more for that long. A client without a quota is not throttled.

A client creating one topic at a time in a loop, limited to 5 partitions a second, gets
that rate within 10% once the full bucket's burst is spent, strict or not, while an
unlimited client looping beside it is never throttled.
"""

import threading
import time

import pytest

from sluice.broker_process import BrokerProcess
from tests.test_broker_failures import connect, frame, recv_frame
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from wire.protocol import decode_response
from wire.quota_types import CLIENT_ID

pytestmark = pytest.mark.timeout(120)

REFUSED = (ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("mutation-quotas")
    config = base / "server.properties"
    config.write_text("controller.quota.window.num=2\n")
    with BrokerProcess(base / "data", config_file=str(config)) as proc:
        with Client(proc.bootstrap_servers) as client:
            clients = ("strict-creator", "old-creator", "grower", "deleter")
            assert client.admin.alter_client_quotas({((CLIENT_ID, c),): {"controller_mutation_rate": 1} for c in clients}) \
                == {((CLIENT_ID, c),): None for c in clients}
        yield proc
    output = "".join(proc.output)
    assert "Traceback" not in output, output[-5000:]


def _ask(sock, api, version: int, body, client_id: str):
    sock.sendall(frame(api, version, body, 1, client_id=client_id))
    return decode_response(api.key, version, recv_frame(sock))[1]


def _creation(*names: str):
    return CREATE_TOPICS.request(timeout_ms=10_000, topics=[CREATE_TOPICS.request.CreatableTopic(
        name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[]) for name in names])


def _topics(broker) -> dict[str, int]:
    with Client(broker.bootstrap_servers) as client:
        return {name: len(t.partitions) for name, t in client.metadata().topics.items()}


def test_strict_create_topics_refuses_once_over_the_quota(broker):
    with connect(broker.port) as sock:
        response = _ask(sock, CREATE_TOPICS, 7, _creation("s1", "s2", "s3"), "strict-creator")
    assert [(t.name, t.error_code) for t in response.topics[:2]] == [("s1", 0), ("s2", 0)]
    assert (response.topics[2].error_code, response.topics[2].error_message) == REFUSED
    assert 1500 <= response.throttle_time_ms <= 2000
    assert "s3" not in _topics(broker)


def test_older_create_topics_are_done_and_delayed(broker):
    with connect(broker.port) as sock:
        response = _ask(sock, CREATE_TOPICS, 5, _creation("o1", "o2", "o3"), "old-creator")
        answered = time.monotonic()
        assert [t.error_code for t in response.topics] == [0, 0, 0]
        assert 3500 <= response.throttle_time_ms <= 4000  # the bucket at -4
        _ask(sock, API_VERSIONS, 0, API_VERSIONS.request(), "old-creator")
        assert time.monotonic() - answered >= 3.0  # muted: nothing read meanwhile
    assert {"o1", "o2", "o3"} <= _topics(broker).keys()


def test_strict_create_partitions_and_delete_topics(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({name: NewTopic(1, 1) for name in ("g1", "g2", "g3")})
        client.admin.create_topics({name: NewTopic(2, 1) for name in ("d1", "d2", "d3")})
    growth = CREATE_PARTITIONS.request(timeout_ms=10_000, validate_only=False, topics=[
        CREATE_PARTITIONS.request.CreatePartitionsTopic(name=name, count=3, assignments=None)
        for name in ("g1", "g2", "g3")])
    with connect(broker.port) as sock:
        grown = _ask(sock, CREATE_PARTITIONS, 3, growth, "grower")
    with connect(broker.port) as sock:
        deleted = _ask(sock, DELETE_TOPICS, 5, DELETE_TOPICS.request(topic_names=["d1", "d2", "d3"],
                                                                      timeout_ms=10_000), "deleter")
    assert [r.error_code for r in grown.results[:2]] == [0, 0]
    assert (grown.results[2].error_code, grown.results[2].error_message) == REFUSED
    assert [r.error_code for r in deleted.responses[:2]] == [0, 0]
    assert (deleted.responses[2].error_code, deleted.responses[2].error_message) == REFUSED
    assert grown.throttle_time_ms > 0 and deleted.throttle_time_ms > 0
    topics = _topics(broker)
    assert (topics["g1"], topics["g2"], topics["g3"]) == (3, 3, 1)
    assert "d1" not in topics and "d2" not in topics and topics["d3"] == 2


def test_a_client_without_a_quota_is_not_throttled(broker):
    with connect(broker.port) as sock:
        response = _ask(sock, CREATE_TOPICS, 7, _creation(*(f"free{i}" for i in range(5))), "free")
    assert [t.error_code for t in response.topics] == [0] * 5 and response.throttle_time_ms == 0


LOOP_RATE = 5  # partitions a second
LOOP_WARM_UP_S = 1.0  # the full bucket's 2 windows' worth goes at once
LOOP_MEASURED_S = 6.0


def _create_in_a_loop(port: int, client_id: str, version: int, until: float, created: list, throttles: list):
    """CreateTopics of one 1-partition topic at a time on one connection, each sent as soon
    as the last is answered (throttle_time_ms ignored) until `until`: the time each topic
    was created at into `created`, every response's throttle time into `throttles`."""
    with connect(port) as sock:
        while time.monotonic() < until:
            name = f"{client_id}-{len(throttles)}"
            response = _ask(sock, CREATE_TOPICS, version, CREATE_TOPICS.request(timeout_ms=10_000, topics=[
                CREATE_TOPICS.request.CreatableTopic(name=name, num_partitions=1, replication_factor=1,
                                                     assignments=[], configs=[])]), client_id)
            throttles.append(response.throttle_time_ms)
            if response.topics[0].error_code == ErrorCode.NONE:
                created.append(time.monotonic())
            else:
                assert response.topics[0].error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED, response


@pytest.mark.parametrize("version", [7, 5], ids=["strict", "permissive"])
def test_a_client_creating_topics_in_a_loop_keeps_to_its_rate_beside_an_unlimited_one(broker, version):
    """Kafka's token bucket: after the burst the full bucket allows, a client creating
    topics as fast as it is answered gets LOOP_RATE partitions a second within 10% over
    LOOP_MEASURED_S, refused past it (strict, v6+) or delayed (permissive); an unlimited
    client looping beside it is never throttled."""
    limited_id = f"looping-{version}"
    with Client(broker.bootstrap_servers) as client:
        client.admin.alter_client_quotas({((CLIENT_ID, limited_id),): {"controller_mutation_rate": LOOP_RATE}})
    start = time.monotonic()
    until = start + LOOP_WARM_UP_S + LOOP_MEASURED_S
    (limited, limited_throttles), (free, free_throttles) = ([], []), ([], [])
    threads = [threading.Thread(target=_create_in_a_loop, args=(broker.port, client_id, version, until, *out))
               for client_id, out in ((limited_id, (limited, limited_throttles)),
                                      (f"free-looping-{version}", (free, free_throttles)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(LOOP_WARM_UP_S + LOOP_MEASURED_S + 30)
    measured = [t for t in limited if start + LOOP_WARM_UP_S <= t < until]
    rate = len(measured) / LOOP_MEASURED_S
    assert 0.9 * LOOP_RATE <= rate <= 1.1 * LOOP_RATE, f"{rate:.2f} partitions/s ({len(limited)} in all)"
    assert max(limited_throttles) > 0
    assert free and not any(free_throttles), free_throttles
