"""Client quotas enforced (issue 37): producer_byte_rate, consumer_byte_rate and
request_percentage on a real broker process, with real clients.

- A confluent-kafka producer limited to 1 MiB/s (its client id's quota) acknowledged
  within 10% below that over 8 s (20 s under `make test-long`) and 10% plus the one
  window's worth Kafka's Rate lets through at once (an eighth, a twentieth) above it, told
  of throttling through its throttle_cb, while an unlimited producer on the same broker
  gets throttle time 0 throughout; over 20 s, the unlimited one's throughput and p99
  latency are within 10% of its own running alone (unless the machine was saturated:
  then the numbers are in the skip's reason). Each client runs in a process of its own.
- A raw-protocol producer that ignores throttle_time_ms, pipelining its requests, is
  held back the same: the broker reads nothing from it while it is throttled.
- A confluent-kafka consumer limited to 1 MiB/s fetches within the same bounds, its
  throttle_cb told; an unlimited consumer is not throttled, and compared the same.
- A client sending many tiny requests keeps to its request_percentage within the same
  bounds (as the broker measures its request time, sampled throughout), throttled for a
  window at most; an unlimited client asking beside it is not throttled, and compared
  the same.
- kafka-python reports the throttle time it is given (its throttle-time-avg/max), for
  produce and fetch; aiokafka, which reports none, is held back all the same (the
  broker's throttle-time metrics); neither fails a request or reconnects.
  (confluent-kafka's throttle_cb: the tests above; Java's: tests/test_java_clients.py.)
- The quota that applies follows Kafka's precedence: one case per row of its table, with
  the rate each shares, at the resolution level; on the broker, a user's quota over a
  client id's for the same connection.
- The clients of an entity share its rate (Kafka's metric tags): a user quota is one
  rate for the user's client ids, a (user, default client) quota one per client id; a
  throttled fetch's bytes are taken back; a consumer's fetch is capped at what its quota
  allows at once.
- The user is the authenticated principal: alice over SASL PLAIN is throttled by her
  quota (confluent-kafka's throttle_cb says so), the same client id as ANONYMOUS is not.

The broker measures over quota.window.num=2 windows of 1 s. Over Kafka's default 11,
a client new to its quota may send 10 windows' worth at once and is then held back
until they are forgotten (Kafka's Rate: tests/test_quota.py), so its rate is only
within ±10% over much more than 10 s; with 2 it is over 8 s, but for the one
window's worth (an eighth) it may take at once after being held back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import multiprocessing
import os
import select
import socket
import threading
import time
import uuid

import pytest

from broker.client_quotas import ClientQuotas
from sluice.broker_process import BrokerProcess
from tests.test_broker_failures import connect, frame, recv_frame
from tests.test_broker_limits import broker_connections
from sluice_client import Client
from wire.messages import API_VERSIONS, PRODUCE
from wire.protocol import decode_response
from wire.quota_types import CLIENT_ID, USER
from wire.records import build_batch

pytestmark = pytest.mark.timeout(180)

MIB = 1 << 20
QUOTA = MIB  # bytes a second
WARM_UP_S = 1.5  # the first window's burst: what an idle quota allows at once
WINDOWS, WINDOW_S = 2, 1.0  # the broker's quota.window.num and quota.window.size.seconds
# How long the byte-rate runs are measured: 8 s in `make test`, and the 20 s
# (`make test-long`) where the unlimited client is also compared with itself running alone.
LONG_S = 20.0
DURATIONS = [pytest.param(8.0, id="8s"), pytest.param(LONG_S, id="20s", marks=pytest.mark.long)]
ALONE_WITHIN = 0.1  # the unlimited client beside the limited one: its throughput and p99 latency
SATURATED = 0.9  # the share of the machine's CPU time in use past which the two are not compared


def _most(measured_s: float) -> float:
    """The most of the quota a client may get over `measured_s`: Kafka's Rate measures over
    the windows, so a client held back until its rate is within the quota again may take
    the windows' worth but one at once, (WINDOWS - 1) * WINDOW_S seconds' worth more than
    the quota over the span at most."""
    return 1.1 + (WINDOWS - 1) * WINDOW_S / measured_s


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("quota-enforcement")
    config = base / "server.properties"
    config.write_text(f"quota.window.num={WINDOWS}\nquota.window.size.seconds={WINDOW_S:g}\n"
                      "group.initial.rebalance.delay.ms=0\nmetrics.port=0\n")
    with BrokerProcess(base / "data", config_file=str(config)) as proc:
        yield proc
    output = "".join(proc.output)
    assert "Traceback" not in output, output[-5000:]


@pytest.fixture
def admin(quota_broker):
    """The client's admin role, every quota removed afterwards."""
    with Client(quota_broker.bootstrap_servers) as client:
        yield client.admin
        everything = client.admin.describe_client_quotas()
        client.admin.alter_client_quotas({entity: {key: None for key in quotas} for entity, quotas in everything.items()})


def _topic(admin) -> str:
    from sluice_client import NewTopic

    name = f"quota-{uuid.uuid4().hex[:8]}"
    admin.create_topics({name: NewTopic(1, 1)})
    return name


def _rate_over(events: list[tuple], start: float, seconds: float) -> float:
    """Bytes a second of the (time, bytes, ...) events within [start, start + seconds)."""
    return sum(event[1] for event in events if start <= event[0] < start + seconds) / seconds


def _p99_latency(events: list[tuple[float, int, float]], start: float, seconds: float) -> float:
    """The 99th percentile of the latencies of the (time, bytes, latency) events within
    [start, start + seconds)."""
    latencies = sorted(latency for t, _, latency in events if start <= t < start + seconds)
    return latencies[int(0.99 * (len(latencies) - 1))]


def _produce_flat_out(bootstrap: str, topic: str, client_id: str, until: float, acked: list, throttles: list):
    """A confluent-kafka producer sending 10 KiB values as fast as it is let until
    `until`: (time, bytes, seconds since it was produced) of each acknowledged value into
    `acked`, each throttle_cb's time in `throttles`."""
    from confluent_kafka import Producer

    def delivered(err, msg, produced: float):
        if err is None:
            now = time.monotonic()
            acked.append((now, len(msg.value()), now - produced))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                         "batch.size": 65536, "queue.buffering.max.kbytes": 512, "acks": 1,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    value = os.urandom(10 * 1024)
    while time.monotonic() < until:
        try:
            producer.produce(topic, value, on_delivery=functools.partial(delivered, produced=time.monotonic()))
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge()
    producer.flush(10)


def _client_process(work, bootstrap: str, topic: str, client_id: str, ready, go, until, results) -> None:
    """One client of `_flat_out`, in a process of its own: ready, then from `go` until `until`;
    (client id, events, throttle times), or (client id, the error, None) if it failed."""
    ready.set()
    go.wait(60)
    events, throttles = [], []
    try:
        work(bootstrap, topic, client_id, until.value, events, throttles)
    except Exception as exc:  # told to the test, which fails with it
        results.put((client_id, f"{type(exc).__name__}: {exc}", None))
    else:
        results.put((client_id, events, throttles))


def _flat_out(work, broker, clients: list[tuple[str, str]], measured_s: float) -> tuple[float, list[tuple]]:
    """`work(bootstrap, topic, client id, until, [(time, bytes, latency)], [throttle ms])` for
    each (client id, topic) at once, for the warm-up and `measured_s`: the time the
    measured span starts at, and each client's (events, throttle times). Each client runs
    in a process of its own: one flat out in this process's threads would take the
    interpreter from the other (a limited consumer beside a free one read 0.87 of its
    quota so, 0.97 in a process of its own)."""
    context = multiprocessing.get_context("spawn")
    go, until, results = context.Event(), context.Value("d", 0.0), context.Queue()
    readies = [context.Event() for _ in clients]
    processes = [context.Process(target=_client_process, args=(
        work, broker.bootstrap_servers, topic, client_id, ready, go, until, results), daemon=True)
        for (client_id, topic), ready in zip(clients, readies)]
    for process in processes:
        process.start()
    try:
        assert all(ready.wait(60) for ready in readies), "a client process did not start"
        start = time.monotonic()  # CLOCK_MONOTONIC: the same in every process
        until.value = start + WARM_UP_S + measured_s
        go.set()
        done = dict((client_id, (events, throttles)) for client_id, events, throttles in
                    (results.get(timeout=measured_s + 60) for _ in clients))
        failed = {client_id: events for client_id, (events, throttles) in done.items() if throttles is None}
        assert not failed, failed
    finally:
        for process in processes:
            process.join(10)
            if process.is_alive():
                process.kill()
    return start + WARM_UP_S, [done[client_id] for client_id, _ in clients]


def _cpu_times() -> tuple[int, int]:
    """(all, idle) CPU time of the machine so far, in ticks (/proc/stat)."""
    with open("/proc/stat") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # idle and iowait


def _busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of the machine's CPU time in use between two `_cpu_times`."""
    return 1 - (after[1] - before[1]) / max(after[0] - before[0], 1)


def _byte_share(events: list[tuple], start: float, seconds: float) -> float:
    """The bytes of the events over the span, as a share of QUOTA."""
    return _rate_over(events, start, seconds) / QUOTA


def _limited_beside_free(work, broker, limited_client: tuple[str, str], free_client: tuple[str, str],
                         measured_s: float, share=_byte_share, longest_throttle_ms: float = math.inf) -> None:
    """Two clients flat out at once (`_flat_out`): the limited one keeps to its quota over
    `measured_s` after the warm-up (`share(its events, start, span)`: what it used as a share
    of it), throttled for `longest_throttle_ms` at most; the free one is never throttled and, over
    LONG_S (8 s runs under `make test`'s load are too noisy for it), gets within
    ALONE_WITHIN of the throughput and p99 latency it gets running alone just before.

    That comparison is skipped, with its numbers, when the machine had no CPU time left
    (SATURATED) during either run: the free client then gets what the machine's other work
    leaves it, which two runs alone one after the other on the shared 2-core test machine
    found to vary 2.6 times (a free producer at 352 then 135 MiB/s, the broker at 56-63%
    of a core, the machine at 199% of 200%), not what the broker gives it."""
    beside_alone = measured_s >= LONG_S
    if beside_alone:
        before = _cpu_times()
        start, [(alone, _)] = _flat_out(work, broker, [free_client], measured_s)
        alone_rate, alone_p99 = _rate_over(alone, start, measured_s), _p99_latency(alone, start, measured_s)
        between = _cpu_times()
    start, [(limited, limited_throttles), (free, free_throttles)] = _flat_out(
        work, broker, [limited_client, free_client], measured_s)
    used = share(limited, start, measured_s)
    assert 0.9 <= used <= _most(measured_s), f"{used:.3f} of the quota"
    assert limited_throttles and 0 < max(limited_throttles) <= longest_throttle_ms
    assert free and not any(free_throttles), free_throttles
    if beside_alone:
        busy = max(_busy(before, between), _busy(between, _cpu_times()))
        free_rate, free_p99 = _rate_over(free, start, measured_s), _p99_latency(free, start, measured_s)
        numbers = (f"the unlimited client alone: {alone_rate:,.0f} B or requests/s, p99 {alone_p99 * 1000:.2f} ms; "
                   f"beside the limited one: {free_rate:,.0f}/s, p99 {free_p99 * 1000:.2f} ms; the machine's CPU "
                   f"{busy:.0%} busy at most")
        if busy > SATURATED:
            pytest.skip(f"not compared with running alone, the machine saturated: {numbers}")
        assert free_rate >= (1 - ALONE_WITHIN) * alone_rate, numbers
        assert free_p99 <= (1 + ALONE_WITHIN) * alone_p99, numbers


@pytest.mark.parametrize("measured_s", DURATIONS)
def test_a_limited_producer_keeps_to_its_quota_and_an_unlimited_one_is_not_throttled(quota_broker, admin, measured_s):
    assert admin.alter_client_quotas({((CLIENT_ID, "limited-producer"),): {"producer_byte_rate": QUOTA}}) == {
        ((CLIENT_ID, "limited-producer"),): None}
    _limited_beside_free(_produce_flat_out, quota_broker, ("limited-producer", _topic(admin)),
                         ("free-producer", _topic(admin)), measured_s)


def _quota_series(broker, name: str) -> dict[tuple[str, str], float]:
    """The broker's Prometheus series `name`, by (user, client_id) label."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.labels["user"], sample.labels["client_id"]): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples
            if sample.name == name}


def test_the_quota_metrics_show_the_throttled_client_and_not_the_free_one(quota_broker, admin):
    """Kafka's Produce byte-rate and throttle-time per quota entity, as Prometheus series
    with the JMX exporter's names: the limited producer's rate near its quota and its
    clients' average throttle time above 0; the free producer, under no quota, is not
    measured."""
    admin.alter_client_quotas({((CLIENT_ID, "metered-producer"),): {"producer_byte_rate": QUOTA}})
    from confluent_kafka import Producer

    topic, throttles = _topic(admin), []
    unmetered = Producer({"bootstrap.servers": quota_broker.bootstrap_servers, "client.id": "unmetered-producer"})
    for _ in range(10):
        unmetered.produce(topic, b"x" * 1024)
    assert unmetered.flush(10) == 0
    # Destroyed now: a librdkafka handle destroyed later, by the garbage collector in the
    # middle of another test, holds that test's threads up while it shuts down.
    del unmetered
    until = time.monotonic() + 3 * WINDOWS * WINDOW_S
    producing = threading.Thread(target=_produce_flat_out, args=(
        quota_broker.bootstrap_servers, topic, "metered-producer", until, [], throttles))
    producing.start()
    # Scraped while the producer runs: the throttle times are averaged over the last
    # WINDOWS windows, and a producer told to wait a second may give the broker none
    # to record for longer than the windows hold one (scraped after the run, it was NaN).
    throttle_ms = {}
    while time.monotonic() < until and not throttle_ms.get(("", "metered-producer"), 0) > 0:
        throttle_ms = _quota_series(quota_broker, "kafka_server_produce_throttle_time")
        rates = _quota_series(quota_broker, "kafka_server_produce_byte_rate")
        time.sleep(0.1)
    producing.join(30)
    assert throttles and max(throttles) > 0
    assert throttle_ms["", "metered-producer"] > 0, throttle_ms
    assert 0 < rates["", "metered-producer"] <= 2 * QUOTA, rates
    assert not any(client == "unmetered-producer" for _, client in rates), rates


# -- each client reports the throttle time it is given and keeps its connection -----------------

REPORTED_S = 3.0  # a window's worth at once, then throttled a few times
SMALL_QUOTA = 100_000


def _throttled_run(broker, step) -> int:
    """`step()` (a request waited for) again and again for REPORTED_S after a first one:
    how many; fails if the client opened a connection to the broker meanwhile (it
    reconnected), closing one (a bootstrap connection) being its own business."""
    step()
    connected = broker_connections(broker.port)
    until, done = time.monotonic() + REPORTED_S, 0
    while time.monotonic() < until:
        step()
        done += 1
    assert not broker_connections(broker.port) - connected, "the client reconnected"
    return done


def test_kafka_python_reports_its_throttle_time_and_keeps_its_connection(quota_broker, admin):
    """kafka-python's throttle-time-avg/max (its producer-metrics and consumer-metrics
    carry Kafka's produce- and fetch-throttle-time as one): above 0 for a producer and a
    consumer held to 100 kB/s, every request answered."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic(admin)
    admin.alter_client_quotas({((CLIENT_ID, "kafka-python"),): {"producer_byte_rate": SMALL_QUOTA,
                                                                "consumer_byte_rate": SMALL_QUOTA}})
    producer = KafkaProducer(bootstrap_servers=quota_broker.bootstrap_servers, client_id="kafka-python",
                             linger_ms=5)
    try:
        assert _throttled_run(quota_broker, lambda: producer.send(topic, os.urandom(10_240)).get(10)) > 0
        produced = producer.metrics()["producer-metrics"]
    finally:
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=quota_broker.bootstrap_servers, client_id="kafka-python",
                             fetch_max_bytes=65536, max_partition_fetch_bytes=65536)
    partition = TopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    consumed = []
    try:
        _throttled_run(quota_broker, lambda: consumed.extend(consumer.poll(200).get(partition, [])))
        fetched = consumer.metrics()["consumer-metrics"]
    finally:
        consumer.close()
    assert consumed
    assert produced["throttle-time-avg"] > 0 and produced["throttle-time-max"] > 0, produced
    assert fetched["throttle-time-avg"] > 0 and fetched["throttle-time-max"] > 0, fetched


def test_aiokafka_is_throttled_without_errors_or_reconnecting(quota_broker, admin):
    """aiokafka reports no throttle time (it has no metrics) and ignores it, so the broker
    holds it back by muting: its throttle-time metrics show its clients throttled, every
    request answered."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    topic = _topic(admin)
    admin.alter_client_quotas({((CLIENT_ID, "aiokafka"),): {"producer_byte_rate": SMALL_QUOTA,
                                                            "consumer_byte_rate": SMALL_QUOTA}})
    async def started(client_class, **settings):  # aiokafka's clients are made in their loop
        client = client_class(bootstrap_servers=quota_broker.bootstrap_servers, client_id="aiokafka", **settings)
        await client.start()
        return client

    loop = asyncio.new_event_loop()
    try:
        producer = loop.run_until_complete(started(AIOKafkaProducer, linger_ms=5))
        try:
            assert _throttled_run(quota_broker, lambda: loop.run_until_complete(
                producer.send_and_wait(topic, os.urandom(10_240)))) > 0
            produce_throttle_ms = _quota_series(quota_broker, "kafka_server_produce_throttle_time")
        finally:
            loop.run_until_complete(producer.stop())
        consumer = loop.run_until_complete(started(AIOKafkaConsumer, fetch_max_bytes=65536,
                                                   max_partition_fetch_bytes=65536))
        partition, consumed = TopicPartition(topic, 0), []

        async def from_the_beginning():
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)

        try:
            loop.run_until_complete(from_the_beginning())
            _throttled_run(quota_broker, lambda: consumed.extend(loop.run_until_complete(
                consumer.getmany(partition, timeout_ms=200)).get(partition, [])))
            fetch_throttle_ms = _quota_series(quota_broker, "kafka_server_fetch_throttle_time")
        finally:
            loop.run_until_complete(consumer.stop())
    finally:
        loop.close()
    assert consumed
    assert produce_throttle_ms["", "aiokafka"] > 0 and fetch_throttle_ms["", "aiokafka"] > 0


@pytest.mark.parametrize("measured_s", DURATIONS)
def test_a_client_ignoring_throttle_time_is_held_back_all_the_same(quota_broker, admin, measured_s):
    """Requests pipelined without a pause: the broker answers one, then reads nothing more
    from the connection for its throttle time."""
    topic = _topic(admin)
    admin.alter_client_quotas({((CLIENT_ID, "raw-producer"),): {"producer_byte_rate": QUOTA}})
    batch = build_batch([(None, os.urandom(1000), (), int(time.time() * 1000)) for _ in range(64)])
    request = PRODUCE.request(acks=1, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=batch)])])
    sock = connect(quota_broker.port)
    sock.settimeout(None)
    start = time.monotonic()
    until = start + WARM_UP_S + measured_s
    sent = 0

    def send():  # blocks while the broker reads nothing; ends when the socket is shut
        nonlocal sent
        try:
            while time.monotonic() < until:
                sock.sendall(frame(PRODUCE, 9, request, sent, client_id="raw-producer"))
                sent += 1
        except OSError:
            pass

    sender = threading.Thread(target=send)
    sender.start()
    answered, throttle_times = [], []
    while time.monotonic() < until:
        if not select.select([sock], [], [], 0.5)[0]:
            continue
        _, response = decode_response(PRODUCE.key, 9, recv_frame(sock))
        assert response.responses[0].partition_responses[0].error_code == 0
        answered.append((time.monotonic(), len(batch)))
        throttle_times.append(response.throttle_time_ms)
    sock.shutdown(socket.SHUT_RDWR)
    sender.join(10)
    sock.close()
    rate = _rate_over(answered, start + WARM_UP_S, measured_s)
    assert 0.9 * QUOTA <= rate <= _most(measured_s) * QUOTA, f"{rate / QUOTA:.3f} of the quota ({sent} sent)"
    assert max(throttle_times) > 0


def _fill(bootstrap: str, topic: str, megabytes: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 65536})
    value = os.urandom(10 * 1024)
    for _ in range(megabytes * 100):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def _consume_flat_out(bootstrap: str, topic: str, client_id: str, until: float, fetched: list, throttles: list):
    """A confluent-kafka consumer reading partition 0 of `topic` as fast as it is let until
    `until`, from the start again at each end: (time, bytes, seconds the poll returning it
    took) of each value into `fetched`, each throttle_cb's time in `throttles`."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                         "enable.auto.commit": False, "max.partition.fetch.bytes": 65536,
                         "fetch.max.bytes": 65536, "message.max.bytes": 65536, "queued.max.messages.kbytes": 64,
                         "enable.partition.eof": True, "fetch.queue.backoff.ms": 0,
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        while time.monotonic() < until:
            polled = time.monotonic()
            message = consumer.poll(0.1)
            if message is None:
                continue
            if message.error() is None:
                now = time.monotonic()
                fetched.append((now, len(message.value()), now - polled))
            elif message.error().code() == KafkaError._PARTITION_EOF:
                consumer.seek(TopicPartition(topic, 0, 0))
    finally:
        consumer.close()


@pytest.mark.parametrize("measured_s", DURATIONS)
def test_a_limited_consumer_keeps_to_its_quota_and_an_unlimited_one_is_not_throttled(quota_broker, admin, measured_s):
    topic = _topic(admin)
    # More than the limited consumer may read: only the free one comes to the end (and reads again).
    _fill(quota_broker.bootstrap_servers, topic, math.ceil((WARM_UP_S + measured_s) * _most(measured_s) * QUOTA / MIB))
    admin.alter_client_quotas({((CLIENT_ID, "limited-consumer"),): {"consumer_byte_rate": QUOTA}})
    _limited_beside_free(_consume_flat_out, quota_broker, ("limited-consumer", topic), ("free-consumer", topic),
                         measured_s)


def _ask_flat_out(bootstrap: str, topic: str, client_id: str, until: float, answered: list, throttles: list):
    """ApiVersions on one connection, one after the other, until `until`: (time, 1,
    seconds it took) of each answer into `answered`, its throttle time into `throttles`
    (`topic`: unused, as `_flat_out` gives one)."""
    request = API_VERSIONS.request(client_software_name="quota-test", client_software_version="1")
    with connect(int(bootstrap.rsplit(":", 1)[1])) as sock:
        while time.monotonic() < until:
            asked = time.monotonic()
            sock.sendall(frame(API_VERSIONS, 3, request, len(throttles), client_id=client_id))
            throttles.append(decode_response(API_VERSIONS.key, 3, recv_frame(sock))[1].throttle_time_ms)
            now = time.monotonic()
            answered.append((now, 1, now - asked))


@contextlib.contextmanager
def _sampled(broker, name: str, entity: tuple[str, str]):
    """(time, value) of the broker's series `name` for the quota entity (user, client id),
    scraped every 0.2 s while in the block (while it has one)."""
    samples, done = [], threading.Event()

    def sample():
        while not done.wait(0.2):
            value = _quota_series(broker, name).get(entity)
            if value is not None:
                samples.append((time.monotonic(), value))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield samples
    finally:
        done.set()
        sampler.join(15)


REQUEST_PERCENTAGE = 2.0  # 20 ms of a handler's time a second


@pytest.mark.parametrize("measured_s", DURATIONS)
def test_request_percentage_holds_a_busy_client_to_its_share_and_not_the_others(quota_broker, admin, measured_s):
    """A client asking ApiVersions as fast as it is answered, limited to 2% of a handler's
    time: the broker's measure of its request time (Kafka's Request request-time, sampled
    throughout) keeps to that within the bounds of the byte rates, its throttle time
    bounded to one window as Kafka's; an unlimited client asking beside it is never
    throttled (and compared with itself alone over 20 s)."""
    assert admin.alter_client_quotas({((CLIENT_ID, "busy"),): {"request_percentage": REQUEST_PERCENTAGE}}) == {
        ((CLIENT_ID, "busy"),): None}
    with _sampled(quota_broker, "kafka_server_request_request_time", ("", "busy")) as samples:
        def share(events, start: float, seconds: float) -> float:
            measured = [value for t, value in samples if start <= t < start + seconds]
            return sum(measured) / len(measured) / REQUEST_PERCENTAGE

        _limited_beside_free(_ask_flat_out, quota_broker, ("busy", ""), ("free", ""), measured_s, share,
                             longest_throttle_ms=int(WINDOW_S * 1000))


# -- precedence ---------------------------------------------------------------------------------

U, C = "alice", "app"
ROWS = [  # Kafka's order, the most specific first: (entity, the (user, client id) that share its rate)
    (((USER, U), (CLIENT_ID, C)), (U, C)),          # /config/users/<user>/clients/<client-id>
    (((USER, U), (CLIENT_ID, None)), (U, C)),       # /config/users/<user>/clients/<default>
    (((USER, U),), (U, "")),                        # /config/users/<user>
    (((USER, None), (CLIENT_ID, C)), (U, C)),       # /config/users/<default>/clients/<client-id>
    (((USER, None), (CLIENT_ID, None)), (U, C)),    # /config/users/<default>/clients/<default>
    (((USER, None),), (U, "")),                     # /config/users/<default>
    (((CLIENT_ID, C),), ("", C)),                   # /config/clients/<client-id>
    (((CLIENT_ID, None),), ("", C)),                # /config/clients/<default>
]


@pytest.mark.parametrize("row", range(len(ROWS)), ids=lambda row: f"row{row + 1}")
def test_precedence_row_wins_over_every_row_below_it(tmp_path, row):
    """Each row's entity set along with every less specific one: that row's quota
    applies, shared as Kafka's metric tags say; the rows above it only for other keys."""
    quotas = ClientQuotas(str(tmp_path))
    entries = [(list(entity), [("producer_byte_rate", 1000.0 * (i + 1), False)])
               for i, (entity, _) in enumerate(ROWS) if i >= row]
    entries += [(list(entity), [("consumer_byte_rate", 7.0, False)]) for entity, _ in ROWS[:row]]
    assert all(code == 0 for code, _ in asyncio.run(quotas.alter(entries, validate_only=False)))
    assert quotas.resolve(U, C, "producer_byte_rate") == (ROWS[row][1], 1000.0 * (row + 1))
    assert quotas.resolve("bob", "other", "request_percentage") == (("", "other"), None)


def test_a_user_without_a_quota_of_a_type_is_unlimited_for_it(tmp_path):
    quotas = ClientQuotas(str(tmp_path))
    asyncio.run(quotas.alter([([(USER, U)], [("consumer_byte_rate", 10.0, False)])], validate_only=False))
    assert quotas.resolve(U, C, "producer_byte_rate")[1] is None
    assert quotas.resolve(U, C, "consumer_byte_rate") == ((U, ""), 10.0)
    assert quotas.resolve("bob", C, "consumer_byte_rate")[1] is None


def test_the_clients_of_an_entity_share_its_rate(tmp_path):
    """As Kafka's metric tags: a user quota is one rate for all the user's client ids, a
    (user, default client) quota one rate per client id; a throttled fetch's bytes taken
    back; a consumer's fetch capped at the quota over all windows but one."""
    from broker.client_quotas import ClientQuotaManager
    from tests.manual_clock import ManualClock

    clock = ManualClock()  # never advanced: every record falls at one instant
    quotas = ClientQuotas(str(tmp_path))
    asyncio.run(quotas.alter([([(USER, "alice")], [("producer_byte_rate", 100.0, False),
                                                   ("consumer_byte_rate", 100.0, False)]),
                              ([(USER, "bob"), (CLIENT_ID, None)], [("producer_byte_rate", 100.0, False)])],
                             validate_only=False))
    produce = ClientQuotaManager(quotas, "producer_byte_rate", clock, 11, 1.0)
    fetch = ClientQuotaManager(quotas, "consumer_byte_rate", clock, 11, 1.0)
    assert produce.record("alice", "one", 1000) == 0.0  # 10 windows' worth at once
    assert produce.record("alice", "two", 100) > 0  # the same rate
    assert produce.record("bob", "one", 1000) == 0.0
    assert produce.record("bob", "two", 1000) == 0.0  # a rate of its own
    assert produce.record("carol", "one", 10 ** 9) == 0.0  # no quota: not measured
    assert fetch.most_at_once("alice", "x") == 1000.0 and fetch.most_at_once("bob", "x") is None
    assert fetch.record("alice", "x", 1500) > 0
    fetch.unrecord("alice", "x", 1500)
    assert fetch.record("alice", "x", 1000) == 0.0
    # The metrics: one series per entity measured, tagged as Kafka tags it, the average
    # throttle time given (NaN while none was).
    measured = {(user, client): (value, throttle) for user, client, value, throttle in produce.measured()}
    assert set(measured) == {("alice", ""), ("bob", "one"), ("bob", "two")}
    assert measured["alice", ""][0] == 1100 / 10  # Kafka's Rate: over 10 whole windows at first
    assert measured["alice", ""][1] > 0
    assert all(math.isnan(measured[entity][1]) for entity in (("bob", "one"), ("bob", "two")))


def test_the_principals_quota_wins_over_its_client_ids_on_the_broker(quota_broker, admin):
    """PLAINTEXT: the principal is ANONYMOUS. Its user quota (row 3) is tiny and the
    client id's (row 7) unlimited in effect: the produce is throttled."""
    topic = _topic(admin)
    admin.alter_client_quotas({((USER, "ANONYMOUS"),): {"producer_byte_rate": 1000},
                               ((CLIENT_ID, "precedence"),): {"producer_byte_rate": 1 << 40}})
    batch = build_batch([(None, os.urandom(20_000), (), int(time.time() * 1000))])
    request = PRODUCE.request(acks=1, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=batch)])])
    with connect(quota_broker.port) as sock:
        sock.sendall(frame(PRODUCE, 9, request, 1, client_id="precedence"))
        _, response = decode_response(PRODUCE.key, 9, recv_frame(sock))
    # 20 kB against 1000 B/s over 2 windows: about 18 s of throttle time.
    assert 15_000 <= response.throttle_time_ms <= 21_000, response.throttle_time_ms


def test_the_user_is_the_authenticated_principal(tmp_path):
    """alice over SASL PLAIN is throttled by her user quota; the same client id over
    PLAINTEXT (User:ANONYMOUS) is not. confluent-kafka reports the throttle time."""
    from confluent_kafka import Producer

    from tests.test_acls import client_settings, start_broker

    broker = start_broker(tmp_path, "allow.everyone.if.no.acl.found=true\n")
    try:
        with Client(broker.bootstrap("PLAINTEXT")) as client:
            topic = _topic(client.admin)
            client.admin.alter_client_quotas({((USER, "alice"),): {"producer_byte_rate": 1000}})
        throttles = {}
        for user in ("alice", None):
            seen = throttles[user] = []
            producer = Producer({**client_settings(broker, user), "client.id": "same-client",
                                 "throttle_cb": lambda event, seen=seen: seen.append(event.throttle_time)})
            producer.produce(topic, os.urandom(20_000))
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 10
            while user == "alice" and not seen and time.monotonic() < deadline:
                producer.poll(0.1)
        assert throttles["alice"] and throttles["alice"][0] > 5, throttles
        assert not any(throttles[None]), throttles
    finally:
        broker.stop()
