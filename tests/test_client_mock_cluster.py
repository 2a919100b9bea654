"""sluice_client against librdkafka's mock cluster (an independent Kafka implementation),
and against small loopback servers that misbehave or script exact answers.

Every test is bounded: asyncio work runs under `run(...)`'s deadline and every loop has
a fixed number of rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import time
import uuid

import pytest

from sluice_client import (CLIENT_VERSIONS, EARLIEST, LATEST, READ_COMMITTED, AsyncClient,
                           BrokerConnection, BrokerUnreachable, Client, ConnectionFailed, NewTopic, ProducerRecord,
                           ProtocolViolation, RequestTimedOut, ResponseTooLarge, UnsupportedVersion)
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.messages import (API_VERSIONS, CREATE_TOPICS, FETCH, FIND_COORDINATOR, INIT_PRODUCER_ID,
                           LIST_OFFSETS, METADATA, OFFSET_FETCH, PRODUCE)
from wire.protocol import decode_request, encode_response
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, build_batch, build_control_batch,
                          iter_batches)

RUN_TIMEOUT = 20.0
FAST_RETRIES = {"retries": 2, "retry_backoff": 0.05, "retry_backoff_max": 0.1, "retry_timeout": 2.0}
_topic_numbers = itertools.count()


def run(coroutine, timeout: float = RUN_TIMEOUT):
    """Run one test's asyncio part, failing (not hanging) after `timeout` seconds."""
    return asyncio.run(asyncio.wait_for(coroutine, timeout))


def unique_topic(name: str) -> str:
    """The mock cluster lives for the whole session: every test uses its own topics."""
    return f"client-{name}-{next(_topic_numbers)}-{uuid.uuid4().hex[:8]}"


async def create_topic(client: AsyncClient, topic: str) -> list[int]:
    """Auto-create `topic` through Metadata (what the mock offers); its partition ids."""
    metadata = await client.metadata([topic], allow_auto_topic_creation=True)
    info = metadata.topics[topic]
    assert info.error_code == 0, info
    return sorted(info.partitions)


async def fetch_all(client: AsyncClient, topic: str, partition: int, offset: int, count: int,
                    rounds: int = 20) -> list:
    """Fetch until `count` records arrived (the mock returns one batch per fetch)."""
    records = []
    for _ in range(rounds):
        fetched = await client.consumer.fetch_records(topic, partition, offset, max_wait_ms=100)
        records += fetched.records
        offset = fetched.next_offset
        if len(records) >= count:
            return records
    raise AssertionError(f"{len(records)} of {count} records after {rounds} fetches")


def record_rows(records) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.headers) for r in records]


# -- against the mock cluster -----------------------------------------------------------

def test_version_negotiation(mock_cluster):
    """Each API at the newest version both sides speak. The mock lists ApiVersions only up
    to v2, so our v4 request is refused first and the client retries lower."""
    host, port = mock_cluster.rsplit(":", 1)

    async def main():
        connection = BrokerConnection(host, int(port))
        try:
            await connection.open()
            broker = dict(connection.broker_versions)
        finally:
            await connection.close()
        async with AsyncClient(mock_cluster) as client:
            return broker, await client.negotiated_versions()

    broker, negotiated = run(main())
    assert broker[API_VERSIONS.key][1] < CLIENT_VERSIONS[API_VERSIONS.key][1]
    for key, (client_lo, client_hi) in CLIENT_VERSIONS.items():
        if key in broker and max(client_lo, broker[key][0]) <= min(client_hi, broker[key][1]):
            assert negotiated[key] == min(client_hi, broker[key][1])
        else:
            assert key not in negotiated
    assert negotiated[FETCH.key] >= 13  # so fetches address topics by id, not name
    assert {PRODUCE.key, METADATA.key, INIT_PRODUCER_ID.key} <= negotiated.keys()


def test_metadata(mock_cluster):
    topic = unique_topic("metadata")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            missing = await client.metadata([topic])
            assert missing.topics[topic].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert topic not in client.cached_metadata.topics
            partitions = await create_topic(client, topic)
            metadata = await client.metadata([topic])
            every = await client.metadata()
            return partitions, metadata, every, client.cached_metadata

    partitions, metadata, every, cached = run(main())
    host, port = mock_cluster.rsplit(":", 1)
    assert [(b.host, b.port) for b in metadata.brokers.values()] == [(host, int(port))]
    assert metadata.cluster_id
    info = metadata.topics[topic]
    assert partitions == list(range(len(partitions))) and partitions
    assert all(p.leader_id in metadata.brokers for p in info.partitions.values())
    assert all(p.replicas and p.isr for p in info.partitions.values())
    assert info.topic_id != uuid.UUID(int=0)  # the mock answers Metadata v10+ with topic ids
    assert topic in every.topics and cached.topics[topic] == info


def test_create_topics_not_offered_by_mock_fails_clearly(mock_cluster):
    async def main():
        async with AsyncClient(mock_cluster) as client:
            if CREATE_TOPICS.key in await client.negotiated_versions():
                pytest.skip("this mock cluster offers CreateTopics; test_create_and_delete_topics covers it")
            with pytest.raises(UnsupportedVersion, match="does not support CreateTopics"):
                await client.admin.create_topics({unique_topic("create"): NewTopic(2, 1)})

    run(main())


def test_create_and_delete_topics(mock_cluster):
    topic = unique_topic("create")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            if CREATE_TOPICS.key not in await client.negotiated_versions():
                pytest.skip("librdkafka's mock cluster lists no CreateTopics (API key 19) or "
                            "DeleteTopics (20) in its ApiVersions response; it creates topics "
                            "only by Metadata with allow_auto_topic_creation (see test_metadata)")
            created = await client.admin.create_topics({topic: NewTopic(3, 1, {"cleanup.policy": "delete"})})
            assert created[topic].error is None
            again = await client.admin.create_topics({topic: NewTopic(3, 1)})
            assert again[topic].error.code == ErrorCode.TOPIC_ALREADY_EXISTS
            metadata = await client.metadata([topic])
            assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
            assert (await client.admin.delete_topics([topic]))[topic] is None

    run(main())


@pytest.mark.parametrize("acks", [1, -1])
def test_produce_and_fetch_every_compression(mock_cluster, acks):
    topic = unique_topic(f"produce-acks{acks}")
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]

    async def main():
        async with AsyncClient(mock_cluster) as client:
            partitions = await create_topic(client, topic)
            assert len(partitions) >= 2
            sent = {p: [] for p in partitions}
            for round_number, codec in enumerate(codecs):
                for partition in partitions:
                    batch = [
                        ProducerRecord(f"key-{codec}-{partition}-{i}".encode(), bytes([i]) * (i * 50),
                                       (("codec", codec.encode()), ("n", str(i).encode()), ("null", None)),
                                       1_700_000_000_000 + i)
                        for i in range(3)]
                    batch.append(ProducerRecord(None, None))  # null key and value, no headers
                    result = await client.producer.produce(topic, partition, batch, acks=acks, compression=codec)
                    assert result.base_offset == round_number * len(batch)
                    sent[partition] += [(result.base_offset + i, r.key, r.value, r.headers)
                                        for i, r in enumerate(batch)]
            received = {p: await fetch_all(client, topic, p, 0, len(sent[p])) for p in partitions}
            ends = await client.consumer.list_offsets(topic, partitions, LATEST)
            return sent, received, ends

    sent, received, ends = run(main())
    for partition, rows in sent.items():
        assert record_rows(received[partition]) == rows
        assert ends[partition].offset == len(rows)
        stamped = [r for r in received[partition] if r.key is not None]
        assert all(r.timestamp >= 1_700_000_000_000 for r in stamped)


def test_produce_acks_zero_waits_for_nothing(mock_cluster):
    topic = unique_topic("acks0")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            await create_topic(client, topic)
            results = [await client.producer.produce(topic, 0, [(b"k", str(i).encode())], acks=0) for i in range(5)]
            # The next request on the same connection must still be matched correctly.
            records = await fetch_all(client, topic, 0, 0, 5)
            return results, records

    results, records = run(main())
    assert all(r.base_offset == -1 for r in results)
    assert [r.value for r in records] == [str(i).encode() for i in range(5)]


def test_idempotent_produce(mock_cluster):
    topic = unique_topic("idempotent")

    async def main():
        async with AsyncClient(mock_cluster, enable_idempotence=True) as client:
            partitions = await create_topic(client, topic)
            with pytest.raises(ValueError, match="acks=-1"):
                await client.producer.produce(topic, 0, [(b"k", b"v")], acks=1)
            offsets = []
            for size in (2, 3, 1):
                for partition in partitions[:2]:
                    result = await client.producer.produce(topic, partition, [(b"k", b"v")] * size)
                    offsets.append(result.base_offset)
            headers = {}
            for partition in partitions[:2]:
                headers[partition] = []
                offset = 0
                for _ in range(10):
                    fetched = await client.consumer.fetch(topic, partition, offset, max_wait_ms=100)
                    batch_headers = [h for h, _ in iter_batches(fetched.records)]
                    headers[partition] += batch_headers
                    if not batch_headers or len(headers[partition]) == 3:
                        break
                    offset = batch_headers[-1].last_offset + 1
            return offsets, headers

    offsets, headers = run(main())
    assert offsets == [0, 0, 2, 2, 5, 5]
    for partition_headers in headers.values():
        assert [h.base_sequence for h in partition_headers] == [0, 2, 5]
        assert [h.record_count for h in partition_headers] == [2, 3, 1]
        producer_ids = {h.producer_id for h in partition_headers}
        assert len(producer_ids) == 1 and producer_ids.pop() >= 0
        assert {h.producer_epoch for h in partition_headers} == {partition_headers[0].producer_epoch}
        assert partition_headers[0].producer_epoch >= 0


def test_list_offsets(mock_cluster):
    topic = unique_topic("offsets")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            partitions = await create_topic(client, topic)
            before = await client.consumer.list_offsets(topic, partitions, LATEST)
            for _ in range(3):
                await client.producer.produce(topic, 0, [(b"a", b"1"), (b"b", b"2")])
            earliest = await client.consumer.list_offsets(topic, partitions, EARLIEST)
            latest = await client.consumer.list_offsets(topic, partitions, LATEST)
            return partitions, before, earliest, latest

    partitions, before, earliest, latest = run(main())
    assert {p: o.offset for p, o in before.items()} == {p: 0 for p in partitions}
    assert {p: o.offset for p, o in earliest.items()} == {p: 0 for p in partitions}
    assert latest[0].offset == 6
    assert all(latest[p].offset == 0 for p in partitions[1:])


def test_commit_and_fetch_group_offsets(mock_cluster):
    topic = unique_topic("group")
    group = unique_topic("group-id")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            partitions = await create_topic(client, topic)
            coordinator = await client.find_coordinator(group)
            nothing = await client.consumer.fetch_offsets(group, [(topic, p) for p in partitions])
            await client.consumer.commit_offsets(group, {(topic, 0): 5, (topic, 1): (7, "checkpoint")})
            committed = await client.consumer.fetch_offsets(group, [(topic, p) for p in partitions])
            await client.consumer.commit_offsets(group, {(topic, 0): 9})
            updated = await client.consumer.fetch_offsets(group, [(topic, 0)])
            return partitions, coordinator, nothing, committed, updated

    partitions, coordinator, nothing, committed, updated = run(main())
    assert coordinator.node_id >= 0 and coordinator.port > 0
    assert {key: c.offset for key, c in nothing.items()} == {(topic, p): -1 for p in partitions}
    assert committed[(topic, 0)].offset == 5 and committed[(topic, 0)].metadata == ""
    assert committed[(topic, 1)][:2] == (7, "checkpoint")
    assert all(committed[(topic, p)].offset == -1 for p in partitions[2:])
    assert updated[(topic, 0)].offset == 9


def test_fetch_offsets_of_all_partitions(mock_cluster):
    topic = unique_topic("group-all")
    group = unique_topic("group-all-id")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            await create_topic(client, topic)
            await client.consumer.commit_offsets(group, {(topic, 0): 3})
            try:
                return await client.consumer.fetch_offsets(group)
            except ProtocolViolation as exc:
                pytest.skip("librdkafka's mock cluster answers OffsetFetch for all partitions "
                            "(null topics) with a null topics array, which the protocol does "
                            f"not allow: {exc}")

    assert run(main())[(topic, 0)].offset == 3


def test_fetch_long_poll(mock_cluster):
    """A fetch at the log end waits on the broker, is not cut short by the client's
    request timeout, and data produced meanwhile is delivered by the following fetch
    at the latest.

    The mock computes a fetch's answer when the request arrives and then delays an empty
    one by max_wait_ms; Kafka answers as soon as data arrives. Either way the data must
    arrive within a few rounds.
    """
    topic = unique_topic("long-poll")
    max_wait_ms = 1000

    async def main():
        # Separate clients: a long poll holds up requests behind it on its connection.
        async with AsyncClient(mock_cluster, request_timeout=0.5) as consumer, \
                AsyncClient(mock_cluster) as producer:
            await create_topic(producer, topic)
            started = time.monotonic()
            poll = asyncio.create_task(consumer.consumer.fetch_records(topic, 0, 0, max_wait_ms=max_wait_ms))
            await asyncio.sleep(0.2)
            await producer.producer.produce(topic, 0, [(b"late", b"arrival")])
            records, offset = [], 0
            for _ in range(3):
                fetched = await poll
                records += fetched.records
                offset = fetched.next_offset
                if records:
                    break
                poll = asyncio.create_task(consumer.consumer.fetch_records(topic, 0, offset, max_wait_ms=max_wait_ms))
            return records, time.monotonic() - started

    records, elapsed = run(main())
    assert [(r.key, r.value) for r in records] == [(b"late", b"arrival")]
    assert elapsed < 3 * max_wait_ms / 1000 + 2


def test_pipelined_requests_on_one_connection(mock_cluster):
    topic = unique_topic("pipeline")

    async def main():
        async with AsyncClient(mock_cluster) as client:
            partitions = await create_topic(client, topic)
            results = await asyncio.gather(*(
                client.producer.produce(topic, partitions[i % len(partitions)], [(None, str(i).encode())])
                for i in range(40)))
            offsets = await asyncio.gather(*(client.consumer.list_offsets(topic, partitions, LATEST)
                                             for _ in range(10)))
            return partitions, results, offsets, len(client._connections)

    partitions, results, offsets, connections = run(main())
    assert connections == 1  # one broker: every request shared one connection
    for partition in partitions:
        mine = sorted(r.base_offset for r in results if r.partition == partition)
        assert mine == list(range(len(mine)))
    assert all(o == offsets[0] for o in offsets)
    assert sum(o.offset for o in offsets[0].values()) == 40


def test_a_request_cancelled_as_its_response_arrives_is_cancelled(mock_cluster):
    """A task stopped (cancelled) in the same loop step that its response lands in stops:
    Python 3.11's asyncio.wait_for lost such cancellations, and a replica fetcher being
    closed went on fetching forever, hanging its broker's shutdown."""
    host, port = mock_cluster.rsplit(":", 1)

    async def main():
        connection = BrokerConnection(host, int(port))
        await connection.open()
        try:
            outcomes = []
            for _ in range(20):
                body = API_VERSIONS.request(client_software_name="t", client_software_version="1")
                task = asyncio.ensure_future(
                    connection.request(API_VERSIONS, connection.version(API_VERSIONS), body))
                while not connection._pending:  # the request is written
                    await asyncio.sleep(0)
                [future] = connection._pending.values()
                future.add_done_callback(lambda _, task=task: task.cancel())
                try:
                    await task
                    outcomes.append("answered")
                except asyncio.CancelledError:
                    outcomes.append("cancelled")
            return outcomes
        finally:
            await connection.close()

    assert run(main()) == ["cancelled"] * 20


def test_a_connect_cancelled_as_the_connection_is_made_is_cancelled(mock_cluster, monkeypatch):
    """The same for a task stopped as its connection is made (the cancellation lands while
    the connect completes): it stops, and the socket made is closed."""
    from sluice_client import connection as connection_module

    host, port = mock_cluster.rsplit(":", 1)
    opening: list[tuple[asyncio.Task, int]] = []  # (the task opening, loop steps until its cancel)
    made = connection_module._Wire.connection_made

    def connection_made(wire, transport):
        made(wire, transport)
        task, steps = opening[-1]

        def step(left):
            if left:
                asyncio.get_running_loop().call_soon(step, left - 1)
            else:
                task.cancel()
        step(steps)

    monkeypatch.setattr(connection_module._Wire, "connection_made", connection_made)

    async def main():
        outcomes = []
        for steps in range(8):  # the cancel lands a step or a few after the connection
            connection = BrokerConnection(host, int(port))
            opening.append((asyncio.ensure_future(connection.open()), steps))
            try:
                await opening[-1][0]
                outcomes.append("opened")
            except asyncio.CancelledError:
                outcomes.append("cancelled" if not connection.connected else "cancelled, left open")
            await connection.close()
        return outcomes

    assert set(run(main())) == {"cancelled"}


def test_response_size_limit_against_real_broker(mock_cluster):
    async def main():
        async with AsyncClient(mock_cluster, max_response_bytes=64, **FAST_RETRIES) as client:
            with pytest.raises(ResponseTooLarge, match="max_response_bytes=64"):
                await client.metadata()

    run(main())


def test_sync_client(mock_cluster):
    topic = unique_topic("sync")
    with Client(mock_cluster, call_timeout=15) as client:
        thread = client._thread
        metadata = client.metadata([topic], allow_auto_topic_creation=True)
        assert topic in metadata.topics
        result = client.producer.produce(topic, 0, [(b"k", b"v", (("h", b"1"),))], compression="gzip")
        fetched = client.consumer.fetch_records(topic, 0, result.base_offset)
        assert record_rows(fetched.records) == [(result.base_offset, b"k", b"v", (("h", b"1"),))]
        assert client.consumer.list_offsets(topic, [0], LATEST)[0].offset == result.base_offset + 1
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        client.metadata()


def test_confluent_consumer_reads_what_we_produce(mock_cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = unique_topic("to-confluent")
    sent = [ProducerRecord(f"k{i}".encode(), f"v{i}".encode() * i, (("i", str(i).encode()),),
                           1_700_000_000_000 + i) for i in range(10)]

    async def produce():
        async with AsyncClient(mock_cluster) as client:
            await create_topic(client, topic)
            await client.producer.produce(topic, 0, sent[:5], compression="lz4")
            await client.producer.produce(topic, 0, sent[5:], compression="zstd")

    run(produce())
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": mock_cluster, "group.id": unique_topic("confluent-group"),
        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        messages = []
        deadline = time.monotonic() + 15
        for _ in range(100):
            if len(messages) >= len(sent) or time.monotonic() > deadline:
                break
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                messages.append(message)
    finally:
        consumer.close()
    got = [(m.offset(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1]) for m in messages]
    assert got == [(i, r.key, r.value, r.headers, r.timestamp) for i, r in enumerate(sent)]


def test_we_fetch_what_a_confluent_producer_produces(mock_cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = unique_topic("from-confluent")

    async def prepare():
        async with AsyncClient(mock_cluster) as client:
            return await create_topic(client, topic)

    partitions = run(prepare())
    producer = confluent_kafka.Producer({"bootstrap.servers": mock_cluster, "linger.ms": 5,
                                         "compression.type": "snappy", "enable.idempotence": True})
    sent = {p: [] for p in partitions[:2]}
    for i in range(20):
        partition = partitions[i % 2]
        key, value, headers = f"k{i}".encode(), f"value {i}".encode(), [("n", str(i).encode())]
        producer.produce(topic, value=value, key=key, headers=headers, partition=partition)
        sent[partition].append((key, value, (("n", str(i).encode()),)))
    assert producer.flush(15) == 0

    async def fetch():
        async with AsyncClient(mock_cluster) as client:
            return {p: await fetch_all(client, topic, p, 0, len(rows)) for p, rows in sent.items()}

    received = run(fetch())
    for partition, rows in sent.items():
        assert [(r.key, r.value, r.headers) for r in received[partition]] == rows
        assert [r.offset for r in received[partition]] == list(range(len(rows)))


# -- failures ---------------------------------------------------------------------------

def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_connecting_to_a_closed_port_fails_fast():
    port = closed_port()

    async def main():
        async with AsyncClient(f"127.0.0.1:{port}", connect_timeout=2, **FAST_RETRIES) as client:
            started = time.monotonic()
            with pytest.raises(ConnectionFailed) as caught:
                await client.metadata()
            return caught.value, time.monotonic() - started

    error, elapsed = run(main())
    assert f"127.0.0.1:{port}" in str(error) and "refused" in str(error).lower()
    assert elapsed < 5


class ScriptedServer:
    """A loopback server that hands each connection to `serve(reader, writer)`."""

    def __init__(self, serve):
        self.serve = serve
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return "127.0.0.1:%d" % self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc_info) -> None:
        self.server.close()

    async def _handle(self, reader, writer):
        try:
            await self.serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def read_request(reader) -> tuple:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return decode_request(await reader.readexactly(size))


def misbehaving(answer: bytes, *, then_close: bool = False):
    """A server answering the first request with `answer`, whatever was asked."""
    async def serve(reader, writer):
        header, _ = await read_request(reader)
        writer.write(answer(header.correlation_id) if callable(answer) else answer)
        await writer.drain()
        if not then_close:
            await reader.read()  # until the client hangs up
    return serve


@pytest.mark.parametrize("answer, error, message", [
    (b"\x7f\xff\xff\xff", ResponseTooLarge, "2147483647-byte response"),
    (b"\xff\xff\xff\xfe", ProtocolViolation, "frame of -2 bytes"),
    (b"\x00\x00\x00\x08" + b"\x12\x34\x56\x78" * 2, ProtocolViolation, "unknown correlation id"),
    (lambda cid: struct.pack(">ii", 12, cid) + b"\x00\x00\xff\xff\xff\xff\x00\x00",
     ProtocolViolation, "cannot parse ApiVersions v4 response"),
    (b"GET / HTTP/1.1\r\n\r\n", ResponseTooLarge, "response"),
], ids=["huge-size", "negative-size", "unknown-correlation-id", "garbage-body", "http"])
def test_garbage_from_the_server_fails_clearly(answer, error, message):
    async def main():
        async with ScriptedServer(misbehaving(answer)) as address:
            async with AsyncClient(address, **FAST_RETRIES) as client:
                started = time.monotonic()
                with pytest.raises(error, match=message) as caught:
                    await client.metadata()
                return caught.value, time.monotonic() - started

    caught, elapsed = run(main())
    assert elapsed < 5
    assert "127.0.0.1" in str(caught)


def test_server_closing_mid_response_fails_with_connection_error():
    answer = b"\x00\x00\x01\x00\x00\x00"  # announces 256 bytes, sends 2, hangs up

    async def main():
        async with ScriptedServer(misbehaving(answer, then_close=True)) as address:
            async with AsyncClient(address, **FAST_RETRIES) as client:
                with pytest.raises(ConnectionFailed, match="closed by the broker"):
                    await client.metadata()

    run(main())


def test_silent_server_times_out():
    async def silent(reader, writer):
        await reader.read()

    async def main():
        async with ScriptedServer(silent) as address:
            async with AsyncClient(address, request_timeout=0.3, **FAST_RETRIES) as client:
                started = time.monotonic()
                # The only bootstrap broker timed out: none is reachable.
                with pytest.raises(ConnectionFailed, match="ApiVersions v4 .* no response within 0.3 s"):
                    await client.metadata()
                return time.monotonic() - started

    assert run(main()) < 5


def test_unanswered_request_times_out_and_the_connection_recovers():
    broker = ScriptedBroker({METADATA: 12, PRODUCE: 9}, {PRODUCE.key: lambda body: None})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack, request_timeout=0.3, retries=0)
            started = time.monotonic()
            with pytest.raises(RequestTimedOut, match=r"Produce v9 to .*: no response within 1.3 s"):
                await client.producer.produce("t", 0, [(b"k", b"v")], timeout_ms=1000)
            elapsed = time.monotonic() - started
            metadata = await client.metadata()  # on a new connection
            return elapsed, metadata

    elapsed, metadata = run(main())
    assert 1.2 < elapsed < 5 and metadata.cluster_id == "scripted"
    assert len(broker.sent(API_VERSIONS)) == 2


def test_connection_loss_fails_pending_requests_and_reconnects():
    """Two requests in flight when the broker drops the connection both fail; the next
    request connects again."""
    connections = []

    async def serve(reader, writer):
        connections.append(writer)
        header, _ = await read_request(reader)  # ApiVersions
        writer.write(_frame(encode_response(API_VERSIONS.key, header.request_api_version, header.correlation_id,
                                            API_VERSIONS.response(api_keys=_api_keys({METADATA: 9})))))
        if len(connections) == 1:
            await read_request(reader)
            await read_request(reader)
            return  # hang up with both unanswered
        header, _ = await read_request(reader)
        writer.write(_frame(encode_response(METADATA.key, header.request_api_version,
                                            header.correlation_id, METADATA.response(cluster_id="again"))))
        await reader.read()

    async def main():
        async with ScriptedServer(serve) as address:
            async with AsyncClient(address, retries=0) as client:
                first = await asyncio.gather(client.metadata(), client.metadata(), return_exceptions=True)
                second = await client.metadata()
                return first, second

    first, second = run(main())
    assert all(isinstance(e, ConnectionFailed) and "closed by the broker" in str(e) for e in first)
    assert second.cluster_id == "again" and len(connections) == 2


# -- exact answers from a scripted broker --------------------------------------------------

def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _api_keys(versions: dict) -> list:
    """ApiVersions entries: {Api: max version} (min 0)."""
    return [API_VERSIONS.response.ApiVersion(api_key=api.key, min_version=0, max_version=hi)
            for api, hi in versions.items()]


class ScriptedBroker:
    """Answers requests through `handlers[api key]` (body -> response body, or None for
    no answer), decoding and encoding with the codec, and records every request it
    receives. Metadata, unless scripted, describes this broker as node 1, leading
    partition 0 of topic "t"."""

    def __init__(self, versions: dict, handlers: dict):
        self.versions = versions
        self.handlers = {METADATA.key: self.metadata, **handlers}
        self.requests: list[tuple] = []
        self.address = ""

    async def serve(self, reader, writer):
        while True:
            header, body = await read_request(reader)
            self.requests.append((header, body))
            api_key, version = header.request_api_key, header.request_api_version
            if api_key == API_VERSIONS.key:
                reply = API_VERSIONS.response(api_keys=_api_keys(self.versions))
            else:
                reply = self.handlers[api_key](body)
            if reply is not None:
                writer.write(_frame(encode_response(api_key, version, header.correlation_id, reply)))

    def sent(self, api) -> list:
        return [(h.request_api_version, b) for h, b in self.requests if h.request_api_key == api.key]

    def metadata(self, body):
        host, port = self.address.rsplit(":", 1)
        return METADATA.response(
            brokers=[METADATA.response.MetadataResponseBroker(node_id=1, host=host, port=int(port))],
            cluster_id="scripted", controller_id=1,
            topics=[METADATA.response.MetadataResponseTopic(name="t", partitions=[
                METADATA.response.MetadataResponsePartition(partition_index=0, leader_id=1,
                                                            replica_nodes=[1], isr_nodes=[1])])])


async def start_scripted(broker: ScriptedBroker, stack: contextlib.AsyncExitStack,
                         **options) -> AsyncClient:
    broker.address = await stack.enter_async_context(ScriptedServer(broker.serve))
    return await stack.enter_async_context(AsyncClient(broker.address, retry_backoff=0.01, **options))


def test_api_versions_retry_at_the_version_kafka_offers():
    """Kafka answers an ApiVersions version it does not know with UNSUPPORTED_VERSION in
    the v0 layout, listing the ApiVersions versions it has; the client retries at the
    newest of those."""
    versions_asked = []

    async def old_kafka(reader, writer):
        for _ in range(2):
            header, _ = await read_request(reader)
            versions_asked.append(header.request_api_version)
            if header.request_api_version > 2:
                body = API_VERSIONS.response(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                             api_keys=_api_keys({API_VERSIONS: 2}))
                writer.write(_frame(encode_response(API_VERSIONS.key, 0, header.correlation_id, body)))
            else:
                body = API_VERSIONS.response(api_keys=_api_keys({API_VERSIONS: 2, METADATA: 8}))
                writer.write(_frame(encode_response(API_VERSIONS.key, 2, header.correlation_id, body)))
        await reader.read()

    async def main():
        async with ScriptedServer(old_kafka) as address:
            async with AsyncClient(address) as client:
                return await client.negotiated_versions()

    versions = run(main())
    assert versions_asked == [4, 2]
    assert versions == {API_VERSIONS.key: 2, METADATA.key: 8}


def test_no_common_version_is_a_clear_error():
    async def main():
        broker = ScriptedBroker({METADATA: 12, PRODUCE: 2}, {})
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack)
            with pytest.raises(UnsupportedVersion, match=r"Produce: broker .* supports v0-2, this client v3-11"):
                await client.producer.produce("t", 0, [(b"k", b"v")])

    run(main())


def test_idempotent_retry_resends_the_same_batch_and_accepts_duplicates():
    answers = iter([ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
                    ErrorCode.NONE, ErrorCode.NONE])

    def produce(body):
        partition = body.topic_data[0].partition_data[0]
        return PRODUCE.response(responses=[PRODUCE.response.TopicProduceResponse(
            name=body.topic_data[0].name, partition_responses=[
                PRODUCE.response.PartitionProduceResponse(
                    index=partition.index, error_code=next(answers), base_offset=10)])])

    async def main():
        broker = ScriptedBroker({METADATA: 12, PRODUCE: 9, INIT_PRODUCER_ID: 4},
                                {PRODUCE.key: produce,
                                 INIT_PRODUCER_ID.key: lambda body: INIT_PRODUCER_ID.response(
                                     producer_id=77, producer_epoch=3)})
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack, enable_idempotence=True)
            first = await client.producer.produce("t", 0, [(b"a", b"1"), (b"b", b"2")])
            # Near the int32 limit, sequence numbers wrap to 0.
            client.producer._session.sequences[("t", 0)] = 2**31 - 2
            second = await client.producer.produce("t", 0, [(b"c", b"3")] * 3)
            third = await client.producer.produce("t", 0, [(b"d", b"4")])
            return first, second, third, broker

    first, second, third, broker = run(main())
    assert first.duplicate and not second.duplicate
    batches = [bytes(b.topic_data[0].partition_data[0].records) for _, b in broker.sent(PRODUCE)]
    assert len(batches) == 4 and batches[0] == batches[1]  # the retry resent the very batch
    headers = [next(iter_batches(b))[0] for b in batches[1:]]
    assert [(h.producer_id, h.producer_epoch) for h in headers] == [(77, 3)] * 3
    assert [h.base_sequence for h in headers] == [0, 2**31 - 2, 1]
    assert len(broker.sent(INIT_PRODUCER_ID)) == 1
    # NOT_LEADER_OR_FOLLOWER made the client ask for metadata again.
    assert len(broker.sent(METADATA)) == 2


def test_group_requests_in_their_batched_forms():
    """FindCoordinator v4+ takes a list of keys, OffsetFetch v8+ a list of groups: forms
    the mock does not offer."""

    def find(body):
        host, port = broker.address.rsplit(":", 1)
        return FIND_COORDINATOR.response(coordinators=[FIND_COORDINATOR.response.Coordinator(
            key=k, node_id=1, host=host, port=int(port)) for k in body.coordinator_keys])

    def offset_fetch(body):
        response = OFFSET_FETCH.response
        return response(groups=[response.OffsetFetchResponseGroup(group_id=g.group_id, topics=[
            response.OffsetFetchResponseTopics(name=t.name, partitions=[
                response.OffsetFetchResponsePartitions(partition_index=p, committed_offset=p * 10,
                                                       metadata="m")
                for p in t.partition_indexes]) for t in g.topics]) for g in body.groups])

    broker = ScriptedBroker({METADATA: 12, FIND_COORDINATOR: 6, OFFSET_FETCH: 9},
                            {FIND_COORDINATOR.key: find, OFFSET_FETCH.key: offset_fetch})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack)
            return await client.consumer.fetch_offsets("g", [("t", 1), ("t", 2)])

    committed = run(main())
    assert {k: v.offset for k, v in committed.items()} == {("t", 1): 10, ("t", 2): 20}
    (version, find_body), = broker.sent(FIND_COORDINATOR)
    assert version == 6 and find_body.coordinator_keys == ["g"]
    (version, fetch_body), = broker.sent(OFFSET_FETCH)
    assert version == 9 and [g.group_id for g in fetch_body.groups] == ["g"]


def test_create_topics_surfaces_per_topic_errors():

    def create(body):
        response = CREATE_TOPICS.response
        return response(topics=[response.CreatableTopicResult(
            name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
            error_code=ErrorCode.TOPIC_ALREADY_EXISTS if t.name == "old" else 0,
            error_message="exists" if t.name == "old" else None) for t in body.topics])

    broker = ScriptedBroker({METADATA: 12, CREATE_TOPICS: 7}, {CREATE_TOPICS.key: create})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack)
            return await client.admin.create_topics({"new": NewTopic(3, 1, {"retention.ms": "1000"}),
                                               "old": NewTopic()})

    results = run(main())
    assert results["new"].error is None and results["new"].partitions == 3
    assert isinstance(results["old"].error, KafkaError)
    assert results["old"].error.code == ErrorCode.TOPIC_ALREADY_EXISTS and "exists" in str(results["old"].error)
    (_, body), = broker.sent(CREATE_TOPICS)
    assert [(c.name, c.value) for c in body.topics[0].configs] == [("retention.ms", "1000")]


def test_fetch_records_drops_aborted_transactions_and_earlier_offsets():
    """The mock reports no aborted transactions, so a scripted broker does: producer 5's
    transaction is aborted, producer 6's committed."""
    aborted = build_batch([(b"a", b"0", (), 1), (b"a", b"1", (), 1)], base_offset=0,
                          producer_id=5, producer_epoch=0, base_sequence=0, transactional=True)
    abort = build_control_batch(CONTROL_ABORT, 5, 0, 0, 1, base_offset=2)
    committed = build_batch([(b"c", b"3", (), 1), (b"c", b"4", (), 1)], base_offset=3,
                            producer_id=6, producer_epoch=0, base_sequence=0, transactional=True)
    commit = build_control_batch(CONTROL_COMMIT, 6, 0, 0, 1, base_offset=5)
    log = aborted + abort + committed + commit

    def fetch(body):
        response = FETCH.response
        return response(responses=[response.FetchableTopicResponse(topic="t", partitions=[
            response.PartitionData(partition_index=0, high_watermark=6, last_stable_offset=6,
                                   aborted_transactions=[response.AbortedTransaction(
                                       producer_id=5, first_offset=0)],
                                   records=log)])])

    broker = ScriptedBroker({METADATA: 12, FETCH: 17}, {FETCH.key: fetch})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack)
            uncommitted = await client.consumer.fetch_records("t", 0, 1)
            read_committed = await client.consumer.fetch_records("t", 0, 1, isolation_level=READ_COMMITTED)
            return uncommitted, read_committed

    uncommitted, read_committed = run(main())
    assert [r.value for r in uncommitted.records] == [b"1", b"3", b"4"]
    assert [r.value for r in read_committed.records] == [b"3", b"4"]
    assert uncommitted.next_offset == read_committed.next_offset == 6
    assert read_committed.result.aborted_transactions == ((5, 0),)
    # The scripted metadata has no topic ids, so fetches stay below v13 and use names.
    assert {version for version, _ in broker.sent(FETCH)} == {12}


def test_a_dead_leader_or_coordinator_is_waited_for_whatever_the_retry_count():
    """A broker the cluster names (partition leader, coordinator) refusing connections is
    a failover in progress: with one retry allowed, the client keeps asking until the
    metadata / FindCoordinator names a live broker (here after 5 answers naming a closed
    port), and gives up with BrokerUnreachable only at its retry timeout. A cluster of
    which no broker answers still fails after the counted retries
    (test_connecting_to_a_closed_port_fails_fast)."""
    dead = closed_port()
    named_dead = {"leader": 5, "coordinator": 5}

    def metadata(body):
        R = METADATA.response
        host, port = broker.address.rsplit(":", 1)
        leader = 2 if named_dead["leader"] > 0 else 1
        named_dead["leader"] -= 1
        return R(brokers=[R.MetadataResponseBroker(node_id=1, host=host, port=int(port)),
                          R.MetadataResponseBroker(node_id=2, host="127.0.0.1", port=dead)],
                 cluster_id="scripted", controller_id=1,
                 topics=[R.MetadataResponseTopic(name="t", partitions=[R.MetadataResponsePartition(
                     partition_index=0, leader_id=leader, replica_nodes=[1, 2], isr_nodes=[1, 2])])])

    def find(body):
        host, port = broker.address.rsplit(":", 1)
        node, port = (2, dead) if named_dead["coordinator"] > 0 else (1, int(port))
        named_dead["coordinator"] -= 1
        return FIND_COORDINATOR.response(coordinators=[FIND_COORDINATOR.response.Coordinator(
            key=k, node_id=node, host=host, port=port) for k in body.coordinator_keys])

    def offset_fetch(body):
        R = OFFSET_FETCH.response
        return R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id, topics=[
            R.OffsetFetchResponseTopics(name="t", partitions=[R.OffsetFetchResponsePartitions(
                partition_index=0, committed_offset=42, metadata="")])]) for g in body.groups])

    def list_offsets(body):
        R = LIST_OFFSETS.response
        return R(topics=[R.ListOffsetsTopicResponse(name="t", partitions=[
            R.ListOffsetsPartitionResponse(partition_index=0, offset=7, timestamp=-1)])])

    broker = ScriptedBroker({METADATA: 12, FIND_COORDINATOR: 4, OFFSET_FETCH: 8, LIST_OFFSETS: 7},
                            {METADATA.key: metadata, FIND_COORDINATOR.key: find,
                             OFFSET_FETCH.key: offset_fetch, LIST_OFFSETS.key: list_offsets})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack, retries=1, retry_backoff_max=0.05, retry_timeout=10)
            end = (await client.consumer.list_offsets("t", [0], LATEST))[0].offset
            committed = await client.consumer.fetch_offsets("g")
            named_dead["coordinator"] = 1000
            client.retry_timeout = 0.5
            started = time.monotonic()
            with pytest.raises(BrokerUnreachable, match=str(dead)):
                await client.consumer.fetch_offsets("other")
            return end, committed, time.monotonic() - started

    end, committed, gave_up_after = run(main())
    assert end == 7 and committed[("t", 0)].offset == 42
    assert 0.4 < gave_up_after < 5


def test_metadata_requiring_topics_retries_then_names_the_missing(mock_cluster):
    """require_topics: a topic that appears while the client retries is returned; topics
    still unknown when the retries run out are named in the error."""
    late, missing, other = (unique_topic(name) for name in ("late", "missing", "other"))

    async def main():
        async with AsyncClient(mock_cluster, **FAST_RETRIES) as client, AsyncClient(mock_cluster) as creator:
            with pytest.raises(KafkaError) as info:
                await client.metadata([missing, other], require_topics=True)
            patient = AsyncClient(mock_cluster, retries=100, retry_backoff=0.05, retry_backoff_max=0.05,
                                  retry_timeout=10.0)
            async with patient:
                waiting = asyncio.create_task(patient.metadata([late], require_topics=True))
                await asyncio.sleep(0.3)
                assert not waiting.done()
                await create_topic(creator, late)
                found = await waiting
            return info.value, found

    error, found = run(main())
    assert error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert repr(missing) in str(error) and repr(other) in str(error)
    assert found.topics[late].error_code == 0 and found.topics[late].partitions
