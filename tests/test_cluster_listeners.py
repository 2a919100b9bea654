"""Named listeners in a ZooKeeper cluster: every broker registers all of its listeners,
clients are told the brokers' addresses on the listener they asked through, and the
brokers reach each other only through `inter.broker.listener.name`.

The client listener requires SASL here, so a replica fetch, a controller request or a
transaction marker sent to it instead of the inter-broker listener would fail to
authenticate: replication working at acks=all shows the right listener is used.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kazoo.client import KazooClient

from tests.cluster import FAST_FAILOVER, Cluster

pytestmark = pytest.mark.timeout(300)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_app="app-secret";')
LISTENERS = {
    # REPLICATION first: the test harness (tests/cluster.py) talks to the first listener.
    "listeners": "REPLICATION://127.0.0.1:0,CLIENT://127.0.0.1:0",
    "listener.security.protocol.map": "CLIENT:SASL_PLAINTEXT,REPLICATION:PLAINTEXT",
    "inter.broker.listener.name": "REPLICATION",
    "sasl.enabled.mechanisms": "PLAIN",
    "listener.name.client.plain.sasl.jaas.config": JAAS,
}


def client_settings(cluster) -> dict:
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{p.ports['CLIENT']}" for p in cluster.processes.values()),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "app", "sasl.password": "app-secret"}


def test_clients_get_their_listener_and_brokers_replicate_on_theirs(tmp_path, zookeeper):
    with Cluster(tmp_path, zookeeper, brokers=3, properties={**FAST_FAILOVER, **LISTENERS}) as cluster:
        zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
        zk.start(timeout=10)
        try:
            for broker_id, process in cluster.processes.items():
                data, _ = zk.get(f"{cluster.chroot}/brokers/ids/{broker_id}")
                registration = json.loads(data)
                assert registration["endpoints"] == [
                    f"REPLICATION://127.0.0.1:{process.ports['REPLICATION']}",
                    f"CLIENT://127.0.0.1:{process.ports['CLIENT']}"]
                assert registration["listener_security_protocol_map"] == {
                    "CLIENT": "SASL_PLAINTEXT", "REPLICATION": "PLAINTEXT"}
        finally:
            zk.stop()
            zk.close()

        from confluent_kafka.admin import AdminClient, NewTopic

        conf = client_settings(cluster)
        admin = AdminClient(conf)
        metadata = admin.list_topics(timeout=30)
        assert {(b.id, b.port) for b in metadata.brokers.values()} == {
            (i, p.ports["CLIENT"]) for i, p in cluster.processes.items()}
        topic = f"listeners-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 3, 3, config={"min.insync.replicas": "3"})])[topic].result(30)
        cluster.wait_for_leaders(topic, full_isr=True)
        producer = Producer({**conf, "acks": "all", "enable.idempotence": True, "log_level": 3})
        for i in range(30):
            producer.produce(topic, f"v{i}".encode(), partition=i % 3)
        assert producer.flush(60) == 0  # min.insync.replicas=3: every follower fetched it
        consumer = Consumer({**conf, "group.id": "listeners", "auto.offset.reset": "earliest", "log_level": 3})
        consumer.subscribe([topic])
        values = set()
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.add(message.value())
            if len(values) == 30:
                break
        consumer.close()
        assert values == {f"v{i}".encode() for i in range(30)}


def test_scram_users_live_in_zookeeper_and_reach_every_broker(tmp_path, zookeeper):
    """A user made through one broker is in /config/users as Kafka writes it, and every
    other broker authenticates it within a second (the /config/changes notification)."""
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialDeletion, UserScramCredentialUpsertion)

    properties = {**FAST_FAILOVER, **LISTENERS,
                  "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"}
    with Cluster(tmp_path, zookeeper, brokers=3, properties=properties) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.address(0)})  # REPLICATION: plaintext
        upsertion = UserScramCredentialUpsertion("erin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                                 b"erin-secret")
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(30)
        zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
        zk.start(timeout=10)
        try:
            stored = json.loads(zk.get(f"{cluster.chroot}/config/users/erin")[0])
        finally:
            zk.stop()
            zk.close()
        assert stored["version"] == 1 and list(stored["config"]) == ["SCRAM-SHA-256"]
        assert stored["config"]["SCRAM-SHA-256"].startswith("salt=")
        assert stored["config"]["SCRAM-SHA-256"].endswith(",iterations=4096")

        def authenticates(broker_id: int, password: str = "erin-secret") -> bool:
            conf = {"bootstrap.servers": f"127.0.0.1:{cluster.processes[broker_id].ports['CLIENT']}",
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                    "sasl.username": "erin", "sasl.password": password, "log_level": 0}
            try:
                AdminClient(conf).list_topics(timeout=3)
                return True
            except Exception:
                return False

        for broker_id in (1, 2):
            cluster.wait(lambda: authenticates(broker_id), 10, f"broker {broker_id} to know erin")
        assert not authenticates(2, "wrong")
        for future in admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_256)]).values():
            future.result(30)
        cluster.wait(lambda: not authenticates(2), 10, "broker 2 to forget erin")


def test_brokers_replicate_over_sasl_ssl_with_scram(tmp_path, zookeeper):
    """The inter-broker listener is SASL_SSL with SCRAM-SHA-512, the brokers' own user made
    in ZooKeeper before they start (as `kafka-configs --zookeeper` does): followers,
    the controller and controlled shutdown all reach the others through it, so a topic
    at min.insync.replicas=3 takes acks=all writes only if every connection authenticates
    (as User:broker, a super user: an unauthenticated client is denied CLUSTER_ACTION)."""
    import hashlib
    import os

    import trustme
    from confluent_kafka.admin import AdminClient, NewTopic

    from broker.security.scram_credentials import ScramCredential

    ca = trustme.CA()
    ca_path, key_path = tmp_path / "ca.pem", tmp_path / "broker.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(key_path))
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="broker" password="broker-secret";')
    properties = {**FAST_FAILOVER,
                  "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
                  "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                  "inter.broker.listener.name": "INTERNAL",
                  "ssl.keystore.type": "PEM", "ssl.keystore.location": str(key_path),
                  "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_path),
                  "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                  "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                  "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
                  # The brokers are User:broker to each other; unauthenticated clients are
                  # refused CLUSTER_ACTION below, so replication shows they authenticate.
                  "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                  "super.users": "User:broker", "allow.everyone.if.no.acl.found": "true"}
    cluster = Cluster(tmp_path, zookeeper, brokers=3, properties=properties)
    salt = os.urandom(16)
    credential = ScramCredential.from_salted_password(
        "SCRAM-SHA-512", salt, hashlib.pbkdf2_hmac("sha512", b"broker-secret", salt, 4096), 4096)
    zk = KazooClient(hosts=zookeeper.hosts, timeout=10)
    zk.start(timeout=10)
    try:
        zk.create(f"{cluster.chroot}/config/users/broker", json.dumps(
            {"version": 1, "config": {"SCRAM-SHA-512": credential.to_text()}}).encode(), makepath=True)
        cluster.start()
        for broker_id in cluster.ids:
            registration = json.loads(zk.get(f"{cluster.chroot}/brokers/ids/{broker_id}")[0])
            assert registration["listener_security_protocol_map"]["INTERNAL"] == "SASL_SSL"
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        deny = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                          AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)
        admin.create_acls([deny])[deny].result(30)
        topic = f"sasl-ssl-replicated-{uuid.uuid4().hex[:6]}"
        admin.create_topics([NewTopic(topic, 2, 3, config={"min.insync.replicas": "3"})])[topic].result(30)
        cluster.wait_for_leaders(topic, full_isr=True)
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "log_level": 3})
        for i in range(20):
            producer.produce(topic, f"r{i}".encode(), partition=i % 2)
        assert producer.flush(60) == 0
        leader = cluster.leader_of(topic, 0)
        assert cluster.stop(leader) == 0  # controlled shutdown asks the controller over INTERNAL
        cluster.wait(lambda: cluster._try_metadata() is not None and cluster.leader_of(topic, 0) != leader, 60,
                     "partition 0 to move to another leader")
    finally:
        zk.stop()
        zk.close()
        cluster.close()
