"""ACLs enforced on users who authenticated with SASL: one broker with an authorizer and a
SASL_SSL listener only (PLAIN users from its JAAS entry, SCRAM users made over the wire),
real clients (confluent-kafka, kafka-python) for the users, and `sluice acls` / `sluice
users` with --command-config for the super user. What the issue asks: a user without
ACLs can do nothing; READ on a topic without READ on the group cannot join the group;
deny beats allow; a super user can do everything; Metadata hides the topics a user may
not describe; a change takes effect at once.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.broker_process import BrokerProcess
from sluice.cli import main as sluice

trustme = pytest.importorskip("trustme")
pytestmark = pytest.mark.timeout(300)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    d = tmp_path_factory.mktemp("authz")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(d / "broker.pem"))
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")
    config = d / "server.properties"
    config.write_text("\n".join([
        "listeners=SASL_SSL://127.0.0.1:0", "ssl.keystore.type=PEM", f"ssl.keystore.location={d / 'broker.pem'}",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256", f"listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "super.users=User:admin",
        "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false"]) + "\n")
    admin_config = d / "admin.properties"
    admin_config.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=admin\n"
                            f"sasl.password={USERS['admin']}\nssl.ca.location={d / 'ca.pem'}\n")
    broker = BrokerProcess(d / "data", port=free_port(), config_file=str(config)).start()
    broker.ca = str(d / "ca.pem")
    broker.admin_config = str(admin_config)
    try:
        yield broker
    finally:
        broker.stop()


def conf(broker, user: str, password: str | None = None, mechanism: str = "PLAIN") -> dict:
    return {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SASL_SSL",
            "ssl.ca.location": broker.ca, "sasl.mechanism": mechanism, "sasl.username": user,
            "sasl.password": password or USERS[user], "log_level": 0}


def acls(broker, *args: str) -> None:
    assert sluice(["acls", "--bootstrap-server", broker.bootstrap_servers, "--command-config",
                   broker.admin_config, *args]) == 0


def create_topic(broker, name: str, partitions: int = 1) -> None:
    admin = AdminClient(conf(broker, "admin"))  # held until the future is done
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def produce_error(broker, user: str, topic: str, password: str | None = None):
    """The delivery error of one record sent as `user` (None when delivered)."""
    outcome = []
    producer = Producer({**conf(broker, user, password), "message.timeout.ms": 10_000})
    producer.produce(topic, b"v", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(20)
    assert outcome, "no delivery report in 20 s"
    return outcome[0]


def consume_error(broker, user: str, topic: str, group: str):
    """The first error a consumer of `group` meets, None if it reads a record (it fails
    the test when neither comes within 20 s)."""
    consumer = Consumer({**conf(broker, user), "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            return message.error()
        pytest.fail("the consumer got neither a record nor an error in 20 s")
    finally:
        consumer.close()


def test_a_user_without_acls_can_do_nothing(secured):
    topic = f"closed-{uuid.uuid4().hex[:6]}"
    create_topic(secured, topic)
    error = produce_error(secured, "alice", topic)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    listed = AdminClient(conf(secured, "alice")).list_topics(timeout=10)
    assert topic not in listed.topics  # Metadata hides what alice may not describe
    admin = AdminClient(conf(secured, "alice"))
    with pytest.raises(KafkaException) as info:
        admin.create_topics([NewTopic("alice-topic", 1, 1)])["alice-topic"].result(30)
    assert info.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)


def test_read_on_the_topic_without_read_on_the_group_cannot_join(secured):
    topic, group = f"readable-{uuid.uuid4().hex[:6]}", f"group-{uuid.uuid4().hex[:6]}"
    create_topic(secured, topic)
    assert produce_error(secured, "admin", topic) is None  # the super user may do anything
    acls(secured, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--topic", topic)
    error = consume_error(secured, "alice", topic, group)
    assert error is not None and error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, error
    acls(secured, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", group)
    assert consume_error(secured, "alice", topic, group) is None  # the change applies at once


def test_deny_beats_allow(secured):
    prefix = f"shared-{uuid.uuid4().hex[:6]}"
    allowed, denied = f"{prefix}-open", f"{prefix}-x"
    create_topic(secured, allowed)
    create_topic(secured, denied)
    acls(secured, "--add", "--allow-principal", "User:bob", "--operation", "All", "--topic", prefix,
         "--resource-pattern-type", "prefixed")
    acls(secured, "--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic", denied)
    assert produce_error(secured, "bob", allowed) is None
    error = produce_error(secured, "bob", denied)
    assert error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, error
    listed = AdminClient(conf(secured, "bob")).list_topics(timeout=10).topics
    assert allowed in listed and denied in listed  # DESCRIBE follows from the allowed ALL


def test_scram_user_made_by_the_super_user_gets_only_what_its_acls_give(secured, tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("carol-secret\n")
    assert sluice(["users", "--bootstrap-server", secured.bootstrap_servers, "--command-config",
                   secured.admin_config, "add", "--user", "carol", "--add-config", "SCRAM-SHA-256",
                   "--password-file", str(password_file)]) == 0
    topic = f"carol-{uuid.uuid4().hex[:6]}"
    create_topic(secured, topic)
    acls(secured, "--add", "--producer", "--allow-principal", "User:carol", "--topic", topic)
    producer = Producer({**conf(secured, "carol", "carol-secret", "SCRAM-SHA-256")})
    outcome = []
    producer.produce(topic, b"c", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(20)
    assert outcome == [None]
    listed = AdminClient(conf(secured, "carol", "carol-secret", "SCRAM-SHA-256")).list_topics(timeout=10).topics
    assert topic in listed and not any(t.startswith("closed-") for t in listed)


def test_kafka_python_sees_the_same_authorization(secured):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = f"kp-{uuid.uuid4().hex[:6]}"
    create_topic(secured, topic)
    producer = KafkaProducer(bootstrap_servers=secured.bootstrap_servers, security_protocol="SASL_SSL",
                             ssl_cafile=secured.ca, sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password=USERS["alice"], max_block_ms=10_000)
    try:
        with pytest.raises((TopicAuthorizationFailedError, Exception)) as info:
            producer.send(topic, b"x").get(20)
        assert "Authorization" in type(info.value).__name__ or "AUTHORIZATION" in str(info.value).upper()
    finally:
        producer.close(timeout=5)


# -- principals from client certificates ---------------------------------------------------------

def test_distinguished_names_and_mapping_rules():
    from broker.security.tls import distinguished_name, principal_mapper

    certificate = {"subject": ((("countryName", "US"),), (("organizationName", "Acme, Inc"),),
                               (("commonName", "alice"),))}
    assert distinguished_name(certificate) == "CN=alice,O=Acme\\, Inc,C=US"  # RFC 2253: most specific first
    assert str(principal_mapper(None)(certificate)) == "User:CN=alice,O=Acme\\, Inc,C=US"
    rules = "RULE:^CN=([a-zA-Z]+),O=Acme.*$/$1@acme/U,RULE:^CN=(.*?),.*$/$1/,DEFAULT"
    assert str(principal_mapper(rules)(certificate)) == "User:ALICE@ACME"
    other = {"subject": ((("organizationName", "Other"),), (("commonName", "bob"),))}
    assert str(principal_mapper(rules)(other)) == "User:bob"
    from broker.config import ConfigError

    with pytest.raises(ConfigError, match="ssl.principal.mapping.rules"):
        principal_mapper("RULE:no-slashes")


def test_client_certificates_name_principals_the_authorizer_judges(tmp_path):
    """An SSL listener requiring client certificates, with a mapping rule that keeps the
    CN: the certificate of `client` is a super user, that of `stranger` may do nothing."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "broker.pem"))
    for name in ("client", "stranger"):
        leaf = ca.issue_cert(f"{name}.example", common_name=name)
        leaf.cert_chain_pems[0].write_to_path(str(tmp_path / f"{name}-cert.pem"))
        leaf.private_key_pem.write_to_path(str(tmp_path / f"{name}-key.pem"))
    config = tmp_path / "server.properties"
    config.write_text("\n".join([
        "listeners=SSL://127.0.0.1:0", "ssl.keystore.type=PEM", f"ssl.keystore.location={tmp_path / 'broker.pem'}",
        f"ssl.truststore.location={tmp_path / 'ca.pem'}", "ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([a-z]+),.*$/$1/,DEFAULT",
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer", "super.users=User:client"]) + "\n")
    broker = BrokerProcess(tmp_path / "data", port=free_port(), config_file=str(config)).start()
    try:
        def settings(name):
            return {"bootstrap.servers": broker.bootstrap_servers, "security.protocol": "SSL",
                    "ssl.ca.location": str(tmp_path / "ca.pem"),
                    "ssl.certificate.location": str(tmp_path / f"{name}-cert.pem"),
                    "ssl.key.location": str(tmp_path / f"{name}-key.pem"), "log_level": 0}

        admin = AdminClient(settings("client"))
        admin.create_topics([NewTopic("certified", 1, 1)])["certified"].result(30)
        outcomes = {}
        for name in ("client", "stranger"):
            producer = Producer({**settings(name), "message.timeout.ms": 10_000})
            producer.produce("certified", b"x", on_delivery=lambda error, message, name=name:
                             outcomes.__setitem__(name, error))
            producer.flush(20)
        assert outcomes["client"] is None
        assert outcomes["stranger"].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, outcomes
    finally:
        broker.stop()
