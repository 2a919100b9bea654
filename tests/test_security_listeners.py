"""TLS and SASL on the broker's listeners, with real clients (confluent-kafka, kafka-python,
aiokafka, kcat) and raw sockets for what clients never send.

One broker process serves five listeners: PLAINTEXT, SSL, SSL with client certificates
required (MTLS), SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) and SASL_SSL (the
same). Certificates come from trustme, with SANs for 127.0.0.1 and localhost. SCRAM users
are made through AlterUserScramCredentials (confluent-kafka's admin client) and kept in
the data dir across a restart.
"""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid

import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.test_broker_failures import assert_closed_by_broker, frame, recv_frame
from wire import decode_response
from wire.error_codes import ErrorCode
from wire.messages import API_VERSIONS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE

trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.timeout(300)

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
PLAIN_USERS = {ADMIN: ADMIN_PASSWORD, "alice": "alice-plain"}
LISTENERS = ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.example", common_name="client")
    other_ca = trustme.CA()
    paths = {"ca": d / "ca.pem", "server": d / "server.pem", "client_cert": d / "client-cert.pem",
             "client_key": d / "client-key.pem", "other_ca": d / "other-ca.pem"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    other_ca.cert_pem.write_to_path(str(paths["other_ca"]))
    server.private_key_and_cert_chain_pem.write_to_path(str(paths["server"]))
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    return {k: str(v) for k, v in paths.items()}


def server_properties(pki, ports: dict[str, int]) -> str:
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
    lines = [
        "listeners=" + ",".join(f"{name}://127.0.0.1:{ports[name]}" for name in LISTENERS),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,"
        "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name=PLAINTEXT",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={pki['server']}",
        f"ssl.truststore.location={pki['ca']}",
        "listener.name.mtls.ssl.client.auth=required",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
        "num.partitions=1",
        "group.initial.rebalance.delay.ms=0",  # each round trip's consumer joins a group of its own
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def secured(tmp_path_factory, pki):
    d = tmp_path_factory.mktemp("secured")
    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS))))
    config = d / "server.properties"
    config.write_text(server_properties(pki, ports))
    broker = BrokerProcess(d / "data", port=ports["PLAINTEXT"], config_file=str(config)).start()
    try:
        assert broker.ports == ports
        yield broker
    finally:
        broker.stop()


def settings(broker, pki, listener: str, mechanism: str | None = None, user: str = ADMIN,
             password: str = ADMIN_PASSWORD) -> dict:
    """confluent-kafka settings for a listener of the secured broker."""
    protocol = {"MTLS": "SSL"}.get(listener, listener)
    conf = {"bootstrap.servers": broker.bootstrap(listener), "security.protocol": protocol}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = pki["ca"]
    if listener == "MTLS":
        conf["ssl.certificate.location"] = pki["client_cert"]
        conf["ssl.key.location"] = pki["client_key"]
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def add_scram_user(broker, user: str, password: str, mechanism: str = "SCRAM-SHA-256",
                   iterations: int = 4096) -> None:
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(getattr(ScramMechanism, mechanism.replace("-", "_")), iterations),
        password.encode())
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)


def round_trip(conf: dict, topic: str, count: int = 20) -> list[bytes]:
    """Produce `count` records with confluent-kafka and read them back; the values read."""
    from confluent_kafka import Consumer, Producer

    producer = Producer({**conf, "acks": "all", "log_level": 3})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest",
                         "log_level": 3})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


def expect_authentication_failure(conf: dict) -> str:
    """confluent-kafka's error when it cannot authenticate (bounded)."""
    from confluent_kafka.admin import AdminClient

    errors = []
    admin = AdminClient({**conf, "error_cb": errors.append, "log_level": 0})

    def reported() -> list:
        admin.poll(0.1)  # serves the error callbacks
        return errors

    wait_for(reported, 15, "confluent-kafka's error callback")
    with pytest.raises(Exception):
        admin.list_topics(timeout=0.5)
    return " ".join(sorted({str(e) for e in errors}))


# -- TLS -------------------------------------------------------------------------------------

def test_tls_listener_serves_producers_and_consumers(secured, pki):
    values = round_trip(settings(secured, pki, "SSL"), f"tls-{uuid.uuid4().hex[:6]}")
    assert values == [f"v{i}".encode() for i in range(20)]


def test_tls_fetch_larger_than_a_sendfile_region(secured, pki):
    """A fetch over TLS goes through the buffered path (no sendfile to the socket): records
    well above the zero-copy threshold come back intact."""
    from confluent_kafka import Consumer, Producer

    conf = settings(secured, pki, "SSL")
    topic = f"tls-big-{uuid.uuid4().hex[:6]}"
    producer = Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000, "log_level": 3})
    payloads = [bytes([i % 251]) * 50_000 for i in range(60)]  # 3 MB
    for value in payloads:
        producer.produce(topic, value)
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": "big", "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(payloads) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    assert got == payloads


def test_kcat_and_kafka_python_over_tls(secured, pki):
    topic = f"tls-clients-{uuid.uuid4().hex[:6]}"
    kcat = ["kcat", "-b", secured.bootstrap("SSL"), "-X", "security.protocol=ssl", "-X",
            f"ssl.ca.location={pki['ca']}"]
    subprocess.run(kcat + ["-P", "-t", topic], input=b"a\nb\nc\n", check=True, timeout=60)
    out = subprocess.run(kcat + ["-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60).stdout
    assert out.split() == [b"a", b"b", b"c"]
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=secured.bootstrap("SSL"), security_protocol="SSL",
                             ssl_cafile=pki["ca"], auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    assert [m.value for m in itertools.islice(consumer, 3)] == [b"a", b"b", b"c"]
    consumer.close()


def test_client_certificate_required(secured, pki):
    values = round_trip(settings(secured, pki, "MTLS"), f"mtls-{uuid.uuid4().hex[:6]}", count=3)
    assert len(values) == 3
    without = settings(secured, pki, "MTLS")
    del without["ssl.certificate.location"], without["ssl.key.location"]
    expect_authentication_failure(without)


def test_plaintext_client_on_a_tls_listener_fails_cleanly(secured, pki):
    """A plaintext Kafka request on the TLS port: no answer, the connection closes within
    the handshake bound, and the broker serves everyone else meanwhile."""
    sock = socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=30)
    sock.sendall(frame(API_VERSIONS, 0, API_VERSIONS.request(), 1))
    assert_closed_by_broker(sock, timeout=20)
    sock.close()
    assert len(round_trip(settings(secured, pki, "SSL"), f"after-{uuid.uuid4().hex[:6]}", 2)) == 2


def test_tls_client_trusting_another_ca_fails(secured, pki):
    conf = settings(secured, pki, "SSL")
    conf["ssl.ca.location"] = pki["other_ca"]
    errors = expect_authentication_failure(conf)
    assert "certificate" in errors.lower() or "ssl" in errors.lower(), errors


def test_garbage_and_silent_tls_clients_are_closed_within_a_bound(secured):
    garbage = socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=30)
    garbage.sendall(b"\x16\x03\x01\x02\x00" + b"\xff" * 600)  # a TLS record header, then nonsense
    assert_closed_by_broker(garbage, timeout=20)
    silent = socket.create_connection(("127.0.0.1", secured.ports["SASL_SSL"]), timeout=30)
    started = time.monotonic()
    assert_closed_by_broker(silent, timeout=25)  # the TLS handshake never comes
    assert time.monotonic() - started < 20
    garbage.close()
    silent.close()


# -- SASL ------------------------------------------------------------------------------------

@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_sasl_plain_round_trip(secured, pki, listener):
    conf = settings(secured, pki, listener, "PLAIN", "alice", PLAIN_USERS["alice"])
    assert len(round_trip(conf, f"plain-{listener.lower()}-{uuid.uuid4().hex[:6]}", 5)) == 5


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_users_made_over_the_wire_authenticate(secured, pki, mechanism):
    user = f"bob-{mechanism[-3:]}"
    add_scram_user(secured, user, "bob-secret", mechanism, iterations=8192)
    for listener in ("SASL_PLAINTEXT", "SASL_SSL"):
        conf = settings(secured, pki, listener, mechanism, user, "bob-secret")
        assert len(round_trip(conf, f"scram-{uuid.uuid4().hex[:6]}", 3)) == 3
    errors = expect_authentication_failure(settings(secured, pki, "SASL_SSL", mechanism, user, "wrong"))
    assert "Authentication failed" in errors and "wrong" not in errors, errors


def test_wrong_plain_password_is_refused_and_not_echoed(secured, pki):
    errors = expect_authentication_failure(settings(secured, pki, "SASL_SSL", "PLAIN", "alice",
                                                    "not-the-password"))
    assert "Authentication failed" in errors and "not-the-password" not in errors, errors


def test_kafka_python_and_aiokafka_with_scram(secured, pki):
    add_scram_user(secured, "carol", "carol-secret", "SCRAM-SHA-512")
    topic = f"py-scram-{uuid.uuid4().hex[:6]}"
    from kafka import KafkaConsumer, KafkaProducer

    common = dict(bootstrap_servers=secured.bootstrap("SASL_SSL"), security_protocol="SASL_SSL",
                  ssl_cafile=pki["ca"], sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
                  sasl_plain_password="carol-secret")
    producer = KafkaProducer(**common)
    for i in range(3):
        producer.send(topic, f"k{i}".encode()).get(30)
    producer.close()
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10_000, **common)
    assert [m.value for m in itertools.islice(consumer, 3)] == [b"k0", b"k1", b"k2"]
    consumer.close()

    import asyncio

    from aiokafka import AIOKafkaConsumer
    from aiokafka.helpers import create_ssl_context

    async def consume():
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=secured.bootstrap("SASL_SSL"),
                                    security_protocol="SASL_SSL", ssl_context=create_ssl_context(cafile=pki["ca"]),
                                    sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
                                    sasl_plain_password="carol-secret", auto_offset_reset="earliest")
        await consumer.start()
        try:
            return [(await asyncio.wait_for(consumer.getone(), 20)).value for _ in range(3)]
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == [b"k0", b"k1", b"k2"]


def test_kcat_with_sasl_plain(secured, pki):
    topic = f"kcat-plain-{uuid.uuid4().hex[:6]}"
    kcat = ["kcat", "-b", secured.bootstrap("SASL_SSL"), "-X", "security.protocol=sasl_ssl", "-X",
            f"ssl.ca.location={pki['ca']}", "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice",
            "-X", f"sasl.password={PLAIN_USERS['alice']}"]
    subprocess.run(kcat + ["-P", "-t", topic], input=b"x\ny\n", check=True, timeout=60)
    out = subprocess.run(kcat + ["-C", "-t", topic, "-o", "beginning", "-e", "-q"], capture_output=True,
                         check=True, timeout=60).stdout
    assert out.split() == [b"x", b"y"]


# -- the SASL state machine on the wire --------------------------------------------------------

def _request(sock, api, version, body, correlation_id=1):
    sock.sendall(frame(api, version, body, correlation_id))
    data = recv_frame(sock)
    assert data is not None, f"{api.name}: closed instead of answered"
    return decode_response(api.key, version, data)[1]


def test_nothing_but_the_handshake_before_authentication(secured):
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    assert _request(sock, API_VERSIONS, 0, API_VERSIONS.request()).error_code == 0
    sock.sendall(frame(METADATA, 1, METADATA.request(topics=None), 2))
    assert_closed_by_broker(sock)
    sock.close()


def test_failed_authentication_answers_then_closes(secured):
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    handshake = _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="GSSAPI"))
    assert handshake.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
    assert handshake.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="PLAIN")).error_code == 0
    answer = _request(sock, SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request(auth_bytes=b"\0alice\0nope"))
    assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "nope" not in answer.error_message
    assert_closed_by_broker(sock)
    sock.close()


def test_authenticated_connection_serves_requests_and_refuses_a_second_handshake(secured):
    """Authenticated with SaslAuthenticate v0, a client cannot re-authenticate (KIP-368:
    tests/test_sasl_reauthentication.py): a second handshake is ILLEGAL_SASL_STATE."""
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    assert _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="PLAIN")).error_code == 0
    answer = _request(sock, SASL_AUTHENTICATE, 0,
                      SASL_AUTHENTICATE.request(auth_bytes=b"\0alice\0" + PLAIN_USERS["alice"].encode()))
    assert (answer.error_code, answer.session_lifetime_ms) == (0, 0)
    assert _request(sock, METADATA, 1, METADATA.request(topics=None)).brokers[0].port == \
        secured.ports["SASL_PLAINTEXT"]  # the listener's own address
    again = _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="PLAIN"))
    assert again.error_code == ErrorCode.ILLEGAL_SASL_STATE
    sock.close()


def test_v0_handshake_takes_raw_tokens(secured):
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    assert _request(sock, SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request(mechanism="PLAIN")).error_code == 0
    token = b"\0alice\0" + PLAIN_USERS["alice"].encode()
    sock.sendall(struct.pack(">i", len(token)) + token)
    assert recv_frame(sock) == b""  # PLAIN's empty final token
    assert _request(sock, METADATA, 1, METADATA.request(topics=None)).brokers
    sock.close()
    bad = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    assert _request(bad, SASL_HANDSHAKE, 0, SASL_HANDSHAKE.request(mechanism="PLAIN")).error_code == 0
    bad.sendall(struct.pack(">i", 12) + b"\0alice\0wrong")
    assert_closed_by_broker(bad)
    bad.close()


def test_oversized_token_before_authentication_closes(secured):
    sock = socket.create_connection(("127.0.0.1", secured.ports["SASL_PLAINTEXT"]), timeout=30)
    sock.sendall(struct.pack(">i", 600_000) + b"\0" * 1024)  # above sasl.server.max.receive.size
    assert_closed_by_broker(sock)
    sock.close()


def test_sasl_requests_on_a_plaintext_listener_are_illegal(secured):
    sock = socket.create_connection(("127.0.0.1", secured.ports["PLAINTEXT"]), timeout=30)
    answer = _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="PLAIN"))
    assert answer.error_code == ErrorCode.ILLEGAL_SASL_STATE
    sock.close()


# -- credentials over the wire and across restarts ---------------------------------------------

def test_scram_credentials_describe_delete_and_survive_a_restart(tmp_path, pki):
    from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion

    ports = dict(zip(LISTENERS, free_ports(len(LISTENERS))))
    config = tmp_path / "server.properties"
    config.write_text(server_properties(pki, ports))
    broker = BrokerProcess(tmp_path / "data", port=ports["PLAINTEXT"], config_file=str(config)).start()
    try:
        add_scram_user(broker, "dave", "dave-secret", "SCRAM-SHA-256", 4096)
        add_scram_user(broker, "dave", "dave-secret-512", "SCRAM-SHA-512", 10000)
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
        described = admin.describe_user_scram_credentials(["dave"])["dave"].result(30)
        assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
            (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 10000)]
        conf = settings(broker, pki, "SASL_PLAINTEXT", "SCRAM-SHA-512", "dave", "dave-secret-512")
        assert len(round_trip(conf, "after-restart", 2)) == 2
        for future in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_512)]).values():
            future.result(30)
        expect_authentication_failure(conf)
        stored = (tmp_path / "data" / "scram-credentials.json").read_text()
        assert "dave-secret" not in stored and "SCRAM-SHA-256" in stored
    finally:
        broker.stop()


@pytest.mark.parametrize("line, needle", [
    ("listeners=SSL://127.0.0.1:0\n", "needs a key and certificate"),
    ("listeners=SASL_PLAINTEXT://127.0.0.1:0\n", "GSSAPI"),
    ("listeners=SASL_PLAINTEXT://127.0.0.1:0\nsasl.enabled.mechanisms=PLAIN\n", "plain.sasl.jaas.config"),
    ("listeners=X://127.0.0.1:0\n", "no security protocol for listener X"),
    ("listeners=PLAINTEXT://127.0.0.1:0\ninter.broker.listener.name=OTHER\n", "OTHER"),
    ("listeners=SSL://127.0.0.1:0\nssl.keystore.location=/nonexistent.pem\n", "cannot load"),
    ("listeners=SSL://127.0.0.1:0\nssl.keystore.type=JKS\n", "only PEM"),
])
def test_security_config_errors_are_one_readable_line(tmp_path, line, needle):
    config = tmp_path / "server.properties"
    config.write_text(line)
    done = subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(tmp_path / "d"), "--config",
                           str(config)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_kafka_java_tools_over_sasl_ssl_with_scram(secured, pki, tmp_path):
    """Kafka's own Java client (kafka-topics, the console producer and consumer) over
    SASL_SSL with SCRAM-SHA-512, trusting the CA as a PEM truststore."""
    from tests.test_kafka_tools import CONSOLE_CONSUMER, CONSOLE_PRODUCER, TOPICS, tool

    add_scram_user(secured, "java-user", "java-secret", "SCRAM-SHA-512")
    client = tmp_path / "client.properties"
    client.write_text("security.protocol=SASL_SSL\n"
                      "ssl.truststore.type=PEM\n"
                      f"ssl.truststore.location={pki['ca']}\n"
                      "sasl.mechanism=SCRAM-SHA-512\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                      'username="java-user" password="java-secret";\n')
    bootstrap = secured.bootstrap("SASL_SSL")
    topic = f"java-sasl-{uuid.uuid4().hex[:6]}"
    tool(TOPICS, "--bootstrap-server", bootstrap, "--command-config", str(client), "--create", "--topic", topic,
         "--partitions", "2", "--replication-factor", "1")
    lines = [f"line {i}" for i in range(5)]
    tool(CONSOLE_PRODUCER, "--bootstrap-server", bootstrap, "--topic", topic, "--command-config", str(client),
         stdin="\n".join(lines) + "\n")
    consumed = tool(CONSOLE_CONSUMER, "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
                    "--max-messages", str(len(lines)), "--timeout-ms", "30000", "--command-config", str(client))
    assert sorted(line for line in consumed.stdout.splitlines() if line) == lines


def test_kafka_configs_sets_both_scram_mechanisms_of_a_user_at_once(secured, pki):
    """kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[...],SCRAM-SHA-512=[...]'
    sends both of the user's mechanisms in one AlterUserScramCredentials: both are set,
    and the user authenticates with each."""
    from tests.test_kafka_tools import CONFIGS, tool

    tool(CONFIGS, "--bootstrap-server", secured.bootstrap("PLAINTEXT"), "--alter", "--add-config",
         "SCRAM-SHA-256=[iterations=4096,password=carol-secret],SCRAM-SHA-512=[password=carol-secret]",
         "--entity-type", "users", "--entity-name", "carol")
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        conf = settings(secured, pki, "SASL_PLAINTEXT", mechanism, "carol", "carol-secret")
        assert len(round_trip(conf, f"carol-{uuid.uuid4().hex[:6]}", 2)) == 2, mechanism


def test_spark_exactly_once_stream_over_sasl_ssl(secured, pki, spark, tmp_path):
    """A streaming query reading and writing through the SASL_SSL listener (SCRAM-SHA-256)
    with the exactly-once sink: the output holds every input record once, committed, as a
    read_committed consumer over the same listener sees it."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    add_scram_user(secured, "spark-user", "spark-secret", "SCRAM-SHA-256")
    conf = settings(secured, pki, "SASL_SSL", "SCRAM-SHA-256", "spark-user", "spark-secret")
    source, output = f"spark-in-{uuid.uuid4().hex[:6]}", f"spark-out-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(output, 2, 1)]).values():
        future.result(30)
    producer = Producer({**conf, "log_level": 3})
    for i in range(40):
        producer.produce(source, f"value-{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0
    options = {"kafka.bootstrap.servers": conf["bootstrap.servers"], "kafka.security.protocol": "SASL_SSL",
               "kafka.ssl.ca.location": pki["ca"], "kafka.sasl.mechanism": "SCRAM-SHA-256",
               "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                         'username="spark-user" password="spark-secret";'}
    reader = spark.readStream.format("sluice").option("subscribe", source).option("startingOffsets", "earliest")
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = (reader.load().selectExpr("key", "value").writeStream.format("sluice").option("topic", output)
              .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True))
    for name, value in options.items():
        writer = writer.option(name, value)
    query = writer.start()
    assert query.awaitTermination(180) and query.exception() is None
    consumer = Consumer({**conf, "group.id": "spark-check", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "log_level": 3})
    consumer.subscribe([output])
    values, deadline = [], time.monotonic() + 60
    while len(values) < 40 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(f"value-{i}".encode() for i in range(40))


def test_scram_credential_changes_follow_kafkas_rules(secured):
    """AlterUserScramCredentials per user: unknown mechanism, iterations out of range,
    empty salt, a user's mechanism named twice (not a user with both mechanisms), a
    deletion of nothing; DescribeUserScramCredentials of an unknown user. Users with an
    error are left as they were, all their changes with them."""
    from wire.messages import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

    Req = ALTER_USER_SCRAM_CREDENTIALS.request
    up = Req.ScramCredentialUpsertion
    sock = socket.create_connection(("127.0.0.1", secured.ports["PLAINTEXT"]), timeout=30)
    answer = _request(sock, ALTER_USER_SCRAM_CREDENTIALS, 0, Req(deletions=[
        Req.ScramCredentialDeletion(name="nobody", mechanism=1)], upsertions=[
        up(name="m3", mechanism=3, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        up(name="few", mechanism=1, iterations=1000, salt=b"s", salted_password=b"p" * 32),
        up(name="nosalt", mechanism=1, iterations=4096, salt=b"", salted_password=b"p" * 32),
        up(name="twice", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        up(name="twice", mechanism=1, iterations=8192, salt=b"s", salted_password=b"p" * 32),
        up(name="half", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        up(name="half", mechanism=2, iterations=100, salt=b"s", salted_password=b"p" * 64),
        up(name="both", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p" * 32),
        up(name="both", mechanism=2, iterations=8192, salt=b"s", salted_password=b"p" * 64),
        up(name="fine", mechanism=2, iterations=16384, salt=b"s", salted_password=b"p" * 64)]))
    codes = {r.user: r.error_code for r in answer.results}
    assert codes == {"nobody": ErrorCode.RESOURCE_NOT_FOUND, "m3": ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                     "few": ErrorCode.UNACCEPTABLE_CREDENTIAL, "nosalt": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "twice": ErrorCode.DUPLICATE_RESOURCE, "half": ErrorCode.UNACCEPTABLE_CREDENTIAL,
                     "both": ErrorCode.NONE, "fine": ErrorCode.NONE}
    Desc = DESCRIBE_USER_SCRAM_CREDENTIALS.request
    described = _request(sock, DESCRIBE_USER_SCRAM_CREDENTIALS, 0, Desc(users=[
        Desc.UserName(name=name) for name in ("fine", "both", "few", "twice", "half")]))
    by_user = {r.user: r for r in described.results}
    for name in ("few", "twice", "half"):
        assert by_user[name].error_code == ErrorCode.RESOURCE_NOT_FOUND, name
    assert [(i.mechanism, i.iterations) for i in by_user["fine"].credential_infos] == [(2, 16384)]
    assert [(i.mechanism, i.iterations) for i in by_user["both"].credential_infos] == [(1, 4096), (2, 8192)]
    sock.close()
