"""SASL re-authentication (KIP-368) with `connections.max.reauth.ms`, against a real
broker with a SASL_PLAINTEXT listener (PLAIN and SCRAM-SHA-256): SCRAM sessions last
LIFETIME_MS, PLAIN ones PLAIN_LIFETIME_MS (the listener-and-mechanism override).

- SaslAuthenticate v1 tells the client its session's lifetime; a client authenticated
  with v1 authenticates again on the same connection (its requests go on), the principal
  and mechanism unchanged; a changed principal or mechanism fails and closes it.
- Once a session has expired, its next request other than a re-authentication closes the
  connection (a v0 client, which cannot re-authenticate, included).
- confluent-kafka and Sluice's client re-authenticate on their own and keep producing;
  once the user's password is changed, their connection stops working at its next
  re-authentication, within the lifetime.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid

import pytest

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from tests.test_broker_failures import assert_closed_by_broker
from tests.test_security_listeners import _request, free_ports
from sluice_client import AuthenticationFailed, Client, ClientError, ClientSecurity
from wire.error_codes import ErrorCode
from wire.messages import METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE

pytestmark = pytest.mark.timeout(240)

LIFETIME_MS, PLAIN_LIFETIME_MS = 3000, 2000
PLAIN_USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    d = tmp_path_factory.mktemp("reauth")
    plaintext, sasl = free_ports(2)
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in PLAIN_USERS.items()) + ";")
    config = d / "server.properties"
    config.write_text("\n".join([
        f"listeners=PLAINTEXT://127.0.0.1:{plaintext},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "inter.broker.listener.name=PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}",
        f"connections.max.reauth.ms={LIFETIME_MS}",
        f"listener.name.sasl_plaintext.plain.connections.max.reauth.ms={PLAIN_LIFETIME_MS}",
        "num.partitions=1",
    ]) + "\n")
    with BrokerProcess(d / "data", port=plaintext, config_file=str(config)) as process:
        yield process


def set_scram_password(broker, user: str, password: str) -> None:
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    upsertion = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                             password.encode())
    for future in admin.alter_user_scram_credentials([upsertion]).values():
        future.result(30)


def plain_login(sock, user: str, version: int = 1, mechanism: str = "PLAIN"):
    """A PLAIN handshake and token on `sock`: the SaslAuthenticate answer."""
    assert _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism=mechanism)).error_code == 0
    token = b"\0" + user.encode() + b"\0" + PLAIN_USERS[user].encode()
    return _request(sock, SASL_AUTHENTICATE, version, SASL_AUTHENTICATE.request(auth_bytes=token))


def connect(broker) -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), timeout=30)


def reauthentications(broker, user: str) -> int:
    """How many times the broker has logged a re-authentication of `user`."""
    pattern = re.compile(rf"re-authenticated as User:{re.escape(user)} ")
    return sum(1 for line in broker.output if pattern.search(line))


def test_a_session_is_authenticated_again_on_its_connection(broker):
    sock = connect(broker)
    answer = plain_login(sock, "alice")
    assert (answer.error_code, answer.session_lifetime_ms) == (0, PLAIN_LIFETIME_MS)
    for _ in range(2):  # at once, and again
        again = plain_login(sock, "alice")
        assert (again.error_code, again.session_lifetime_ms) == (0, PLAIN_LIFETIME_MS)
        assert _request(sock, METADATA, 1, METADATA.request(topics=None)).brokers
    sock.close()


def test_a_reauthentication_cannot_change_the_principal_or_the_mechanism(broker):
    sock = connect(broker)
    assert plain_login(sock, "alice").error_code == 0
    other = plain_login(sock, "bob")
    assert other.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "Cannot change principals" in other.error_message, other
    assert_closed_by_broker(sock)
    sock.close()

    sock = connect(broker)
    assert plain_login(sock, "alice").error_code == 0
    assert _request(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="SCRAM-SHA-256")).error_code == 0
    refused = _request(sock, SASL_AUTHENTICATE, 1, SASL_AUTHENTICATE.request(auth_bytes=b"n,,n=alice,r=abc"))
    assert refused.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert "not supported for re-authentication of mechanism 'PLAIN'" in refused.error_message, refused
    assert_closed_by_broker(sock)
    sock.close()


@pytest.mark.parametrize("version", [0, 1])
def test_an_expired_session_is_closed_at_its_next_request(broker, version):
    """A client that does not re-authenticate (SaslAuthenticate v0 cannot) is served
    until its session ends, then closed at its next request."""
    sock = connect(broker)
    authenticated = time.monotonic()
    assert plain_login(sock, "alice", version).error_code == 0
    assert _request(sock, METADATA, 1, METADATA.request(topics=None)).brokers

    def closed() -> bool:
        try:
            _request(sock, METADATA, 1, METADATA.request(topics=None))
        except (AssertionError, OSError):  # closed instead of answered
            return True
        return False

    wait_for(closed, 30, "the connection to be closed once its session expired")
    assert time.monotonic() - authenticated >= PLAIN_LIFETIME_MS / 1000
    sock.close()


def test_confluent_kafka_reauthenticates_and_a_changed_password_stops_it(broker):
    """librdkafka re-authenticates within each session's lifetime and keeps producing;
    once the user's password changes, its next re-authentication fails and it reports
    an authentication error."""
    from confluent_kafka import KafkaError, Producer

    user, topic = f"carol-{uuid.uuid4().hex[:6]}", f"reauth-{uuid.uuid4().hex[:6]}"
    set_scram_password(broker, user, "first")
    errors: list = []
    producer = Producer({"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"),
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                         "sasl.username": user, "sasl.password": "first", "linger.ms": 0,
                         "error_cb": errors.append, "log_level": 3})
    delivered: list = []

    def produce_some() -> None:
        producer.produce(topic, b"v", on_delivery=lambda error, _: delivered.append(error))
        producer.flush(10)

    wait_for(lambda: (produce_some(), reauthentications(broker, user) >= 2)[1], 60,
             "librdkafka to re-authenticate twice while producing")
    assert delivered and all(error is None for error in delivered), delivered
    assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors

    set_scram_password(broker, user, "second")
    wait_for(lambda: (producer.poll(0.2), any(e.code() == KafkaError._AUTHENTICATION for e in errors))[1],
             2 * LIFETIME_MS / 1000 + 20, "librdkafka to report its re-authentication refused")


def test_the_sluice_client_reauthenticates_and_a_changed_password_stops_it(broker):
    user, topic = f"dave-{uuid.uuid4().hex[:6]}", f"reauth-wire-{uuid.uuid4().hex[:6]}"
    set_scram_password(broker, user, "first")
    security = ClientSecurity({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                               "sasl.username": user, "sasl.password": "first"})
    with Client(broker.bootstrap("SASL_PLAINTEXT"), security=security, call_timeout=30, retries=0) as client:
        wait_for(lambda: (client.metadata([topic], allow_auto_topic_creation=True),
                          reauthentications(broker, user) >= 2)[1], 60,
                 "Sluice's client to re-authenticate twice")
        set_scram_password(broker, user, "second")
        refused = threading.Event()

        def stopped() -> bool:
            try:
                client.metadata([topic])
            except AuthenticationFailed:
                refused.set()
            except ClientError:
                pass
            return refused.is_set()

        wait_for(stopped, 2 * LIFETIME_MS / 1000 + 20, "Sluice's client's re-authentication to be refused")
