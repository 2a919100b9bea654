"""Real client sessions, captured through a recording proxy, replayed through our codec.

Each test runs one client library (confluent-kafka, kafka-python, aiokafka) against
librdkafka's mock cluster *through* `KafkaCaptureProxy`, checks that the session really
worked (records produced with keys and headers are consumed back intact), and then
requires of every captured frame:

    request:  encode_request(*decode_request(frame)) == frame
    response: encode_response(key, version, header.correlation_id, body) == frame
              (for frames the proxy rewrote, the bytes as the broker sent them)

The mock cluster is not a perfect broker; what it gets wrong is handled narrowly, each
case checked byte for byte and listed in the report:

* ApiVersions v3+ it cannot serve is answered with a hand-made body (int8 array count,
  no tagged fields: `parse_mock_api_versions_error`). The proxy forwards the Apache Kafka
  form (v0 error body) instead — without that, kafka-python cannot even bootstrap
  against the mock — and the test round-trips that repaired frame at v0.
* Flexible Metadata responses (v9+) carry one extra 0x00 byte at the end: its Metadata
  handler writes the top-level tagged-field section and `send_response` appends another.
  Such a frame must be exactly (valid response) + b"\\x00", and the valid part must
  round-trip.
* It advertises JoinGroup v6 and SyncGroup v4 (the first flexible versions) but its
  handlers read those requests with non-flexible array counts and drop the connection
  ("ProtocolCnt 50754145 > max allowed 1000"; "uvarint parsing failed"). It advertises
  LeaveGroup v4 but handles only the v0-2 shape: it ignores the v3+ `members` batch
  (answers UNKNOWN_MEMBER_ID) and leaves the `members` array out of its response, which
  neither kafka-python nor our codec can read. The proxy caps these at JoinGroup v5,
  SyncGroup v3, LeaveGroup v2.
* It answers acks=0 Produce requests (Kafka never does); kafka-python then drops the
  connection ("No in-flight-request found") and loses records. The proxy records those
  answers (`unsolicited`) without forwarding them; they are still round-tripped here.
* Its transaction marker (control) batches carry CRC 0; they are checked with the CRC
  filled in. It lists no aborted transactions in Fetch, so read_committed consumers see
  aborted records (reported, not asserted).
* The proxy narrows ApiVersions to the codec's range (the mock offers Metadata v13, which
  wire/messages.py does not have — librdkafka and kafka-python both use it when offered —
  and APIs the codec does not know): see `clamp_to_codec`.

Record batches in Produce requests and Fetch responses are decoded with wire.records too
(CRC, decompression), so the compression codecs seen are real client output. The mock
has no CreateTopics / DescribeConfigs and names controller_id 0 (no such broker), so
those admin calls fail in the clients; the exact errors are reported and topics are
auto-created instead.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid
from collections import Counter

import pytest
from crc32c import crc32c

from tests.kafka_capture import KafkaCaptureProxy, parse_mock_api_versions_error
from wire.compression import CODEC_NAMES
from wire.messages import APIS
from wire.protocol import decode_request, decode_response, encode_request, encode_response
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, decode_batch, decode_control_record,
                          iter_batches)

pytestmark = pytest.mark.timeout(45)

# librdkafka mock handlers that advertise a version they cannot parse (see module doc).
MOCK_BROKEN_VERSIONS = {11: 5, 13: 2, 14: 3}   # JoinGroup v6, LeaveGroup v3+, SyncGroup v4

API_NAMES = {key: api.name for key, api in APIS.items()}
N = 8  # records per producer session

# Filled by the tests, printed once at the end of the module.
REPORT: dict[str, dict] = {}

COMMON_REQUIRED = {"ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets",
                   "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "OffsetCommit",
                   "OffsetFetch", "LeaveGroup", "InitProducerId"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def records_for(tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [(f"{tag}-key-{i}".encode(), f"{tag}-value-{i}-".encode() * (1 + i * 40),
             [("tag", tag.encode()), ("index", str(i).encode())]) for i in range(N)]


def assert_same_records(got, expected) -> None:
    """`got`/`expected`: iterables of (key, value, [(header, bytes)]) in any order."""
    norm = lambda rows: sorted((k, v, tuple((h, bytes(b)) for h, b in hs)) for k, v, hs in rows)
    assert norm(got) == norm(expected)


# -- the round-trip check ----------------------------------------------------------------

def check_capture(client: str, proxy: KafkaCaptureProxy, required: set[str]) -> None:
    frames = proxy.frames()
    assert frames, "nothing captured"
    assert not proxy.errors, f"proxy problems: {proxy.errors}"
    failures: list[str] = []
    quirks: Counter = Counter()
    requests: Counter = Counter()
    responses: Counter = Counter()
    rewritten: Counter = Counter()
    acks0 = 0
    produced: Counter = Counter()   # codec name -> records, from Produce requests
    fetched: Counter = Counter()    # codec name -> records, from Fetch responses

    for f in frames:
        where = f"{f.direction} api {f.api_key} v{f.api_version} corr {f.correlation_id}"
        if f.direction == "request":
            try:
                header, body = decode_request(f.data)
                again = encode_request(header, body)
            except Exception as exc:
                failures.append(f"{where}: decode/encode failed: {exc!r}")
                continue
            if again != f.data:
                failures.append(f"{where}: re-encoding differs ({len(again)} vs {len(f.data)} bytes)")
            requests[(f.api_key, f.api_version)] += 1
            if f.api_key == 0:
                acks0 += body.acks == 0
                for topic in body.topic_data:
                    for part in topic.partition_data:
                        _decode_records(part.records, produced, failures, where, quirks)
            continue

        responses[(f.api_key, f.api_version)] += 1
        if f.api_key is None:
            failures.append(f"{where}: response to no known request")
            continue
        if f.unsolicited:
            quirks["Produce: mock answers acks=0 requests (answer not forwarded)"] += 1
        if f.rewritten:
            rewritten[API_NAMES.get(f.api_key, f.api_key)] += 1
        data = f.data
        if f.api_key == 18 and f.api_version >= 3 and parse_mock_api_versions_error(data):
            # Mock quirk 1: check what the proxy forwarded instead, at v0.
            quirks["ApiVersions: mock's hand-made UNSUPPORTED_VERSION body (repaired to v0)"] += 1
            assert f.forwarded is not None
            header, body = decode_response(18, 0, f.forwarded)
            assert body.error_code == 35 and [k.api_key for k in body.api_keys] == [18]
            assert encode_response(18, 0, header.correlation_id, body) == f.forwarded
            continue
        if (f.api_key == 3 and f.api_version >= 9 and data.endswith(b"\x00")
                and _round_trips(3, f.api_version, data[:-1])):
            quirks["Metadata v9+: mock appends a second top-level tag section (1 byte)"] += 1
            data = data[:-1]
        try:
            header, body = decode_response(f.api_key, f.api_version, data)
            again = encode_response(f.api_key, f.api_version, header.correlation_id, body)
        except Exception as exc:
            failures.append(f"{where}: decode/encode failed: {exc!r}; frame {bytes(data[:64]).hex()}")
            continue
        if again != data:
            failures.append(f"{where}: re-encoding differs ({len(again)} vs {len(data)} bytes)")
        if f.api_key == 1:
            for topic in body.responses:
                for part in topic.partitions:
                    _decode_records(part.records, fetched, failures, where, quirks)
        if f.forwarded is not None:
            # What the client received instead is our own encoding (plus any junk the
            # broker appended, kept by the proxy): it must round-trip too.
            sent = f.forwarded[:len(f.forwarded) - (len(f.data) - len(data))]
            if not _round_trips(f.api_key, f.api_version, sent):
                failures.append(f"{where}: the proxy's rewritten frame does not round-trip")

    by_api: dict[str, set[int]] = {}
    for key, version in requests:
        by_api.setdefault(API_NAMES.get(key, str(key)), set()).add(version)
    REPORT[client] = {
        "requests": sum(requests.values()), "responses": sum(responses.values()),
        "apis": by_api, "quirks": dict(quirks), "rewritten": dict(rewritten),
        "clamps": sorted(proxy.version_clamps), "acks0": acks0,
        "produced": dict(produced), "fetched": dict(fetched),
    }
    assert not failures, f"{client}: {len(failures)} frame(s) did not round-trip:\n" + \
        "\n".join(failures[:20])
    missing = required - set(by_api)
    assert not missing, f"{client}: expected APIs not captured: {sorted(missing)}; got {by_api}"


def _decode_records(records, counts: Counter, failures: list, where: str,
                    quirks: Counter) -> None:
    """Decode (CRC, decompression, records) every whole batch of a records field with
    wire.records, counting records per codec: the captured data is real client data."""
    if records is None:
        return
    try:
        for header, batch in iter_batches(records):
            if header.is_control and header.crc == 0:
                # Mock quirk: its transaction markers carry CRC 0 (librdkafka does not
                # check CRCs by default). Check the rest strictly with the CRC filled in.
                quirks["Fetch: mock's transaction marker batches have CRC 0"] += 1
                batch = bytearray(batch)
                struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
            rows = decode_batch(batch, 64 * 1024 * 1024)
            assert len(rows) == header.record_count
            if header.is_control:
                markers = [decode_control_record(row).type for row in rows]
                assert set(markers) <= {CONTROL_ABORT, CONTROL_COMMIT}, markers
                counts["control"] += len(rows)
            else:
                counts[CODEC_NAMES[header.compression]] += len(rows)
    except Exception as exc:
        failures.append(f"{where}: record batch failed to decode: {exc!r}")


def _round_trips(key: int, version: int, data: bytes) -> bool:
    try:
        header, body = decode_response(key, version, data)
        return encode_response(key, version, header.correlation_id, body) == data
    except Exception:
        return False


@pytest.fixture(scope="module", autouse=True)
def print_report():
    yield
    if not REPORT:
        return
    print("\n\n=== captured client sessions (request api: versions) ===")
    for client, rep in REPORT.items():
        print(f"\n[{client}] {rep['requests']} requests, {rep['responses']} responses")
        for name in sorted(rep["apis"], key=lambda n: n):
            print(f"    {name:<22} v{', v'.join(map(str, sorted(rep['apis'][name])))}")
        print(f"    record batches decoded: produced {rep['produced']}, fetched {rep['fetched']}")
        if rep["acks0"]:
            print(f"    (of which Produce with acks=0: {rep['acks0']})")
        for note in rep.get("notes", ()):
            print(f"    note: {note}")
        if rep["rewritten"]:
            print(f"    rewritten by the proxy: {rep['rewritten']}")
        for quirk, count in rep["quirks"].items():
            print(f"    mock quirk x{count}: {quirk}")
    clamps = sorted({c for rep in REPORT.values() for c in rep["clamps"]})
    if clamps:
        print("\n  ApiVersions narrowed by the proxy (api: mock range -> advertised max):")
        for key, lo, hi, new in clamps:
            name = API_NAMES.get(key, f"api {key} (unknown to wire)")
            print(f"    {name}: {lo}-{hi} -> {'dropped' if new is None else new}")


def new_proxy(mock_cluster: str) -> KafkaCaptureProxy:
    return KafkaCaptureProxy(mock_cluster, max_versions=MOCK_BROKEN_VERSIONS).start()


# -- confluent-kafka -----------------------------------------------------------------------

def test_confluent_kafka(mock_cluster):
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    topic, group = unique("ck"), unique("ck-group")
    notes = []
    with new_proxy(mock_cluster) as proxy:
        base = {"bootstrap.servers": proxy.bootstrap, "socket.timeout.ms": 10000,
                "topic.metadata.refresh.interval.ms": 5000}

        admin = AdminClient(base)
        try:
            fut = admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)],
                                      operation_timeout=1, request_timeout=2)[topic]
            fut.result(timeout=5)
            notes.append("create_topics: ok")
        except ck.KafkaException as exc:
            # The mock implements no CreateTopics (nor advertises it), and its Metadata
            # names controller_id 0, a broker that does not exist, so librdkafka's admin
            # client waits for a controller until the request times out.
            err = exc.args[0]
            assert err.code() in (ck.KafkaError._TIMED_OUT, ck.KafkaError._UNSUPPORTED_FEATURE), err
            notes.append(f"create_topics: {err.name()}: {err.str()} (topic auto-created instead)")

        expected = []
        for codec in ("gzip", "snappy", "lz4", "zstd"):
            producer = ck.Producer({**base, "enable.idempotence": True, "acks": "all",
                                    "compression.type": codec, "linger.ms": 5})
            rows = records_for(codec)
            delivered = []
            for key, value, headers in rows:
                producer.produce(topic, key=key, value=value, headers=headers,
                                 on_delivery=lambda err, msg: delivered.append(err))
            assert producer.flush(10) == 0, f"{codec}: undelivered records"
            assert delivered == [None] * N, f"{codec}: delivery errors {delivered}"
            expected += rows

        md = admin.list_topics(topic, timeout=10)
        assert topic in md.topics and not md.topics[topic].error
        try:
            res = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=2)
            next(iter(res.values())).result(timeout=5)
            notes.append("describe_configs: ok")
        except ck.KafkaException as exc:
            err = exc.args[0]
            assert err.code() in (ck.KafkaError._TIMED_OUT, ck.KafkaError._UNSUPPORTED_FEATURE), err
            notes.append(f"describe_configs: {err.name()}: {err.str()} (mock has no DescribeConfigs)")

        consumer = ck.Consumer({**base, "group.id": group, "auto.offset.reset": "earliest",
                                "enable.auto.commit": False, "heartbeat.interval.ms": 100,
                                "session.timeout.ms": 6000})
        try:
            consumer.subscribe([topic])
            got, deadline = [], time.monotonic() + 20
            while len(got) < len(expected) and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert not msg.error(), msg.error()
                got.append((msg.key(), msg.value(), msg.headers() or []))
            assert_same_records(got, expected)
            committed = consumer.commit(asynchronous=False)
            assert committed and all(tp.error is None for tp in committed)
            time.sleep(0.3)  # let a heartbeat or two go out
        finally:
            consumer.close()
        # Partitions named explicitly: for "all partitions" (null topics) the mock
        # answers with a null topic list instead of the group's committed offsets.
        partitions = [ck.TopicPartition(topic, p) for p in md.topics[topic].partitions]
        offsets = admin.list_consumer_group_offsets(
            [ck.ConsumerGroupTopicPartitions(group, partitions)],
            request_timeout=10)[group].result(10)
        assert sum(tp.offset for tp in offsets.topic_partitions) == len(expected)
        del producer, admin  # destroyed (connections closed) before the proxy goes away
    check_capture("confluent-kafka", proxy, COMMON_REQUIRED)
    assert {"gzip", "snappy", "lz4", "zstd"} <= set(REPORT["confluent-kafka"]["produced"])
    REPORT["confluent-kafka"]["notes"] = notes


def test_confluent_kafka_transactions(mock_cluster):
    ck = pytest.importorskip("confluent_kafka")
    topic, tid = unique("ck-txn"), unique("txn")
    with new_proxy(mock_cluster) as proxy:
        base = {"bootstrap.servers": proxy.bootstrap, "socket.timeout.ms": 10000}
        producer = ck.Producer({**base, "transactional.id": tid, "compression.type": "zstd"})
        producer.init_transactions(10)
        committed_rows = records_for("committed")
        producer.begin_transaction()
        for key, value, headers in committed_rows:
            producer.produce(topic, key=key, value=value, headers=headers)
        # Consume-transform-produce style offsets (AddOffsetsToTxn + TxnOffsetCommit).
        offsets_consumer = ck.Consumer({**base, "group.id": unique("ck-txn-offsets")})
        try:
            producer.send_offsets_to_transaction(
                [ck.TopicPartition(topic, 0, 1)], offsets_consumer.consumer_group_metadata(), 10)
        finally:
            offsets_consumer.close()
        producer.commit_transaction(10)
        producer.begin_transaction()
        for key, value, headers in records_for("aborted"):
            producer.produce(topic, key=key, value=value, headers=headers)
        producer.flush(10)
        producer.abort_transaction(10)

        md = producer.list_topics(topic, timeout=10).topics[topic]
        del producer  # destroyed (connections closed) before the proxy goes away
        consumer = ck.Consumer({**base, "group.id": unique("ck-txn-group"),
                                "isolation.level": "read_committed",
                                "enable.auto.commit": False})
        try:
            consumer.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING)
                             for p in md.partitions])
            got, deadline = [], time.monotonic() + 15
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    if sum(r[0].startswith(b"committed-") for r in got) == N:
                        break  # all committed records in, and nothing more for 0.2 s
                    continue
                assert not msg.error(), msg.error()
                got.append((msg.key(), msg.value(), msg.headers() or []))
        finally:
            consumer.close()
        # The mock does not list aborted transactions in its Fetch responses, so a
        # read_committed consumer cannot filter the aborted records out: only the
        # committed ones are checked (the count is reported).
        assert_same_records([r for r in got if r[0].startswith(b"committed-")], committed_rows)
        aborted_seen = sum(r[0].startswith(b"aborted-") for r in got)
    check_capture("confluent-kafka (transactional)", proxy,
                  {"ApiVersions", "Metadata", "FindCoordinator", "InitProducerId",
                   "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit", "EndTxn",
                   "Produce", "Fetch"})
    aborted_listed = sum(len(part.aborted_transactions or ())
                         for f in proxy.responses() if f.api_key == 1
                         for topic_data in decode_response(1, f.api_version, f.data)[1].responses
                         for part in topic_data.partitions)
    REPORT["confluent-kafka (transactional)"]["notes"] = [
        f"read_committed consumer saw {aborted_seen}/{N} records of the aborted transaction: "
        f"the mock's Fetch responses listed {aborted_listed} aborted transactions"]


# -- kafka-python --------------------------------------------------------------------------

def test_kafka_python(mock_cluster):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import IncompatibleBrokerVersion, KafkaError

    topic, group = unique("kp"), unique("kp-group")
    notes = []
    with new_proxy(mock_cluster) as proxy:
        common = {"bootstrap_servers": proxy.bootstrap, "request_timeout_ms": 10000}
        expected = []
        # Default settings (idempotent, acks=all, no compression).
        producer = kafka.KafkaProducer(**common)
        rows = records_for("default")
        futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in rows]
        producer.flush(10)
        assert all(f.get(timeout=10).offset >= 0 for f in futures)
        producer.close(5)
        expected += rows
        # gzip is the only codec kafka-python can use with the installed libraries
        # (its snappy/lz4/zstd need python-snappy/lz4/zstandard); acks=0 exercises the
        # proxy's no-response path.
        producer = kafka.KafkaProducer(**common, compression_type="gzip", acks=0,
                                       enable_idempotence=False)
        rows = records_for("gzip")
        for k, v, h in rows:
            producer.send(topic, key=k, value=v, headers=h)
        producer.flush(10)
        producer.close(5)
        expected += rows

        consumer = kafka.KafkaConsumer(topic, **common, group_id=group,
                                       auto_offset_reset="earliest", enable_auto_commit=False,
                                       heartbeat_interval_ms=100, session_timeout_ms=6000,
                                       consumer_timeout_ms=20000)
        try:
            got = []
            for msg in consumer:
                got.append((msg.key, msg.value, list(msg.headers)))
                if len(got) == len(expected):
                    break
            assert_same_records(got, expected)
            consumer.commit()
            time.sleep(0.3)
        finally:
            consumer.close()

        admin = KafkaAdminClient(**common)
        try:
            assert topic in admin.list_topics()
            described = admin.describe_topics([topic])
            assert [d["name"] for d in described] == [topic]
            assert admin.describe_cluster()["brokers"]
            # Partitions named explicitly (the mock answers null topics for "all").
            partitions = [kafka.TopicPartition(topic, p["partition_index"])
                          for p in described[0]["partitions"]]
            offsets = admin.list_group_offsets({group: partitions})[group]
            assert sum(o.offset for o in offsets.values()) == len(expected)
            try:
                admin.create_topics([NewTopic(unique("kp-new"), 1, 1)])
                notes.append("create_topics: ok")
            except (IncompatibleBrokerVersion, KafkaError) as exc:
                notes.append(f"create_topics: {type(exc).__name__} (controller_id 0 names no broker; "
                             "the mock has no CreateTopics anyway)")
        finally:
            admin.close()
    check_capture("kafka-python", proxy, COMMON_REQUIRED)
    assert REPORT["kafka-python"]["acks0"] >= 1
    assert {"none", "gzip"} <= set(REPORT["kafka-python"]["produced"])
    REPORT["kafka-python"]["notes"] = notes


# -- aiokafka ------------------------------------------------------------------------------

def test_aiokafka(mock_cluster):
    aiokafka = pytest.importorskip("aiokafka")
    topic, group = unique("aio"), unique("aio-group")

    async def session(bootstrap: str) -> None:
        expected = []
        for codec in ("lz4", "zstd"):
            producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap,
                                                 enable_idempotence=True,
                                                 compression_type=codec,
                                                 request_timeout_ms=10000)
            await producer.start()
            try:
                rows = records_for(f"aio-{codec}")
                batch = [await producer.send(topic, key=k, value=v, headers=h)
                         for k, v, h in rows]
                await asyncio.gather(*batch)
                expected += rows
            finally:
                await producer.stop()

        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                             auto_offset_reset="earliest",
                                             enable_auto_commit=False,
                                             heartbeat_interval_ms=100,
                                             session_timeout_ms=6000,
                                             request_timeout_ms=10000)
        await consumer.start()
        try:
            got = []
            while len(got) < len(expected):
                batches = await consumer.getmany(timeout_ms=500)
                for msgs in batches.values():
                    got += [(m.key, m.value, list(m.headers)) for m in msgs]
            assert_same_records(got, expected)
            await consumer.commit()
            await asyncio.sleep(0.3)
        finally:
            await consumer.stop()

    with new_proxy(mock_cluster) as proxy:
        asyncio.run(asyncio.wait_for(session(proxy.bootstrap), 30))
    check_capture("aiokafka", proxy, COMMON_REQUIRED)
    assert {"lz4", "zstd"} <= set(REPORT["aiokafka"]["produced"])


# -- the proxy itself, with hand-made traffic ----------------------------------------------

def test_proxy_pipelining_acks0_and_disconnects(mock_cluster):
    """Pipelined requests in one write, an acks=0 Produce among them, a client that
    hangs up mid-frame: answers come back in order, none for acks=0, and the proxy
    keeps serving."""
    from wire.messages import API_VERSIONS, METADATA, PRODUCE
    from wire.protocol import RequestHeader
    from wire.records import build_batch

    topic = unique("raw")

    def framed(key: int, version: int, corr: int, body) -> bytes:
        data = encode_request(RequestHeader(request_api_key=key, request_api_version=version,
                                            correlation_id=corr, client_id="raw"), body)
        return struct.pack(">i", len(data)) + data

    def read_frame(sock) -> bytes:
        def exactly(n: int) -> bytes:
            buf = b""
            while len(buf) < n:
                chunk = sock.recv(n - len(buf))
                assert chunk, "proxy closed the connection"
                buf += chunk
            return buf
        return exactly(struct.unpack(">i", exactly(4))[0])

    batch = build_batch([(b"raw-key", b"raw-value", [("h", b"x")], int(time.time() * 1000))])
    produce = PRODUCE.request(acks=0, timeout_ms=1000, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=batch)])])
    pipelined = b"".join([
        framed(18, 0, 1, API_VERSIONS.request()),
        framed(3, 1, 2, METADATA.request(topics=[METADATA.request.MetadataRequestTopic(name=topic)])),
        framed(0, 3, 3, produce),
        framed(18, 1, 4, API_VERSIONS.request()),
    ])
    with new_proxy(mock_cluster) as proxy:
        host, port = proxy.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(pipelined)
            answers = [read_frame(sock) for _ in range(3)]
            assert [struct.unpack_from(">i", a)[0] for a in answers] == [1, 2, 4]
            _, metadata = decode_response(3, 1, answers[1])
            assert [(b.host, b.port) for b in metadata.brokers] == [(host, int(port))]
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(framed(18, 0, 5, API_VERSIONS.request())[:9])  # then hang up
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(framed(18, 1, 6, API_VERSIONS.request()))
            assert struct.unpack_from(">i", read_frame(sock))[0] == 6
    answers_to_acks0 = [f for f in proxy.responses() if f.correlation_id == 3]
    assert all(f.unsolicited and f.api_key == 0 for f in answers_to_acks0)
    assert len(proxy.requests()) == 5  # the half frame is not a frame
    check_capture("raw socket (proxy self-test)", proxy, {"ApiVersions", "Metadata", "Produce"})
