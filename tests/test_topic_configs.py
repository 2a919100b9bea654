"""Kafka's topic configs against the real broker process: the ones implemented change
behaviour, the ones not implemented are refused by name, never accepted and ignored.

- min.insync.replicas above the one in-sync replica: acks=all is NOT_ENOUGH_REPLICAS,
  acks=1 still writes (as Kafka's leader answers with a shrunken ISR).
- message.timestamp.after.max.ms / before.max.ms: CreateTime records too far from the
  broker's clock are INVALID_TIMESTAMP; LogAppendTime topics take any timestamp.
- segment.index.bytes: a full offset index rolls the segment.
- unclean.leader.election.enable: accepted and described (BOOLEAN) as Kafka accepts it
  on any broker; one node has no other replica, so it never elects anything there.
- Every config of NOT_IMPLEMENTED_TOPIC_CONFIGS is INVALID_CONFIG naming it, at
  CreateTopics and IncrementalAlterConfigs, and docs/broker.md (Topic configs) lists it.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from broker.config import NOT_IMPLEMENTED_TOPIC_CONFIGS
from sluice_client import BROKER_RESOURCE, SET_CONFIG, TOPIC_RESOURCE, Client, NewTopic
from wire.error_codes import ErrorCode
from wire.errors import KafkaError

pytestmark = pytest.mark.timeout(60)
BROKER_DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs" / "broker.md"


def produce_error(client: Client, topic: str, *, acks: int = -1, timestamp: int | None = None):
    """The error code of producing one record, or None when it was written."""
    try:
        client.producer.produce(topic, 0, [(b"k", b"v", (), timestamp)], acks=acks)
    except KafkaError as exc:
        return exc.code
    return None


def test_min_insync_replicas_refuses_acks_all(broker):
    with Client(broker.bootstrap_servers, retries=0) as client:
        client.admin.create_topics({"strict": NewTopic(1, 1, {"min.insync.replicas": "2"})})
        assert produce_error(client, "strict") == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce_error(client, "strict", acks=1) is None
        errors = client.admin.incremental_alter_configs(
            {(TOPIC_RESOURCE, "strict"): [("min.insync.replicas", SET_CONFIG, "1")]})
        assert errors[(TOPIC_RESOURCE, "strict")] is None
        assert produce_error(client, "strict") is None
        bad = client.admin.create_topics({"zero": NewTopic(1, 1, {"min.insync.replicas": "0"})})["zero"]
        assert bad.error.code == ErrorCode.INVALID_CONFIG


def test_timestamp_bounds(broker):
    hour = 3_600_000
    with Client(broker.bootstrap_servers, retries=0) as client:
        client.admin.create_topics({
            "default": NewTopic(1, 1, {}),
            "loose": NewTopic(1, 1, {"message.timestamp.after.max.ms": str(3 * hour)}),
            "recent": NewTopic(1, 1, {"message.timestamp.before.max.ms": "60000"}),
            "appended": NewTopic(1, 1, {"message.timestamp.type": "LogAppendTime",
                                        "message.timestamp.before.max.ms": "60000"})})
        now = int(time.time() * 1000)
        # Kafka 4's default: at most one hour ahead of the broker, any age behind.
        assert produce_error(client, "default", timestamp=now + 2 * hour) == ErrorCode.INVALID_TIMESTAMP
        assert produce_error(client, "default", timestamp=now + 60_000) is None
        assert produce_error(client, "default", timestamp=1) is None
        assert produce_error(client, "loose", timestamp=now + 2 * hour) is None
        assert produce_error(client, "recent", timestamp=now - hour) == ErrorCode.INVALID_TIMESTAMP
        assert produce_error(client, "recent", timestamp=now) is None
        assert produce_error(client, "appended", timestamp=now - hour) is None
        # Two written; the refused one was not.
        assert client.consumer.list_offsets("default", [0], -1)[0].offset == 2


def test_segment_index_bytes_rolls_full_index(broker):
    with Client(broker.bootstrap_servers) as client:
        # An index entry per batch (its timestamp grows too): 24 bytes hold two 12-byte
        # time index entries, so each segment takes two batches.
        client.admin.create_topics({"small-index": NewTopic(1, 1, {"segment.index.bytes": "24",
                                                             "index.interval.bytes": "0"})})
        start = int(time.time() * 1000)
        for i in range(6):
            client.producer.produce("small-index", 0, [(b"k", b"%d" % i, (), start + i)])
        logs = sorted(name for name in os.listdir(os.path.join(broker.data_dir, "small-index-0"))
                      if name.endswith(".log"))
        assert logs == [f"{base:020d}.log" for base in (0, 2, 4)]


def test_unclean_leader_election_enable_is_a_topic_config(broker):
    """Through CreateTopics, AlterConfigs and IncrementalAlterConfigs, described as a
    BOOLEAN with its source; a value other than true or false is INVALID_CONFIG."""
    from tests.test_broker_failures import connect, roundtrip
    from sluice_client import DEFAULT_CONFIG, DELETE_CONFIG, DYNAMIC_TOPIC_CONFIG
    from wire.messages import DESCRIBE_CONFIGS

    key, resource = "unclean.leader.election.enable", (TOPIC_RESOURCE, "elected")

    def described(client: Client) -> tuple[str, int]:
        entry = client.admin.describe_configs([resource])[resource][key]
        return entry.value, entry.source

    with Client(broker.bootstrap_servers, retries=0) as client:
        assert client.admin.create_topics({"elected": NewTopic(1, 1, {key: "true"})})["elected"].error is None
        assert described(client) == ("true", DYNAMIC_TOPIC_CONFIG)
        assert client.admin.alter_configs({resource: {key: "False"}}) == {resource: None}
        assert described(client) == ("false", DYNAMIC_TOPIC_CONFIG)
        assert client.admin.incremental_alter_configs({resource: [(key, DELETE_CONFIG, None)]}) == {resource: None}
        assert described(client) == ("false", DEFAULT_CONFIG)
        assert client.admin.incremental_alter_configs({resource: [(key, SET_CONFIG, "true")]}) == {resource: None}
        assert described(client) == ("true", DYNAMIC_TOPIC_CONFIG)
        error = client.admin.incremental_alter_configs({resource: [(key, SET_CONFIG, "yes")]})[resource]
        assert error.code == ErrorCode.INVALID_CONFIG and key in str(error), error
        assert described(client) == ("true", DYNAMIC_TOPIC_CONFIG)
        assert produce_error(client, "elected") is None

    Req = DESCRIBE_CONFIGS.request
    body = Req(resources=[Req.DescribeConfigsResource(resource_type=TOPIC_RESOURCE, resource_name="elected",
                                                      configuration_keys=[key])],
               include_synonyms=False, include_documentation=False)
    with connect(broker.port) as sock:
        (entry,) = roundtrip(sock, DESCRIBE_CONFIGS, 4, body, 1).results[0].configs
    BOOLEAN = 1
    assert (entry.name, entry.config_type) == (key, BOOLEAN)


@pytest.mark.parametrize("key", sorted(NOT_IMPLEMENTED_TOPIC_CONFIGS))
def test_unimplemented_topic_config_is_refused_by_name(broker_once, key):
    with Client(broker_once.bootstrap_servers) as client:
        created = client.admin.create_topics({f"t-{key}": NewTopic(1, 1, {key: "1"})})[f"t-{key}"]
        assert created.error.code == ErrorCode.INVALID_CONFIG
        assert key in str(created.error) and "not implemented" in str(created.error)
        assert f"t-{key}" not in client.metadata().topics
        client.admin.create_topics({"plain": NewTopic(1, 1, {})})
        errors = client.admin.incremental_alter_configs({(TOPIC_RESOURCE, "plain"): [(key, SET_CONFIG, "1")]})
        assert errors[(TOPIC_RESOURCE, "plain")].code == ErrorCode.INVALID_CONFIG
        assert key in str(errors[(TOPIC_RESOURCE, "plain")])
    assert f"`{key}`" in BROKER_DOCS.read_text(), f"docs/broker.md does not list {key}"


def test_message_format_version_is_accepted_and_ignored(broker_once):
    """As Kafka 3.x takes it (batches stay in format v2): CreateTopics, AlterConfigs and
    IncrementalAlterConfigs set it and DescribeConfigs shows it; a value that is no Kafka
    version is INVALID_CONFIG naming the key."""
    key, topic = "message.format.version", "formatted"
    resource = (TOPIC_RESOURCE, topic)
    with Client(broker_once.bootstrap_servers) as client:
        assert client.admin.create_topics({topic: NewTopic(1, 1, {key: "0.10.2"})})[topic].error is None
        assert client.admin.describe_configs([resource])[resource][key].value == "0.10.2"
        assert client.admin.alter_configs({resource: {key: "2.8"}})[resource] is None
        assert client.admin.describe_configs([resource])[resource][key].value == "2.8"
        assert client.admin.incremental_alter_configs({resource: [(key, SET_CONFIG, "3.0-IV1")]})[resource] is None
        assert client.admin.describe_configs([resource])[resource][key].value == "3.0-IV1"
        refused = client.admin.incremental_alter_configs({resource: [(key, SET_CONFIG, "banana")]})[resource]
        assert refused.code == ErrorCode.INVALID_CONFIG and key in str(refused)
        client.producer.produce(topic, 0, [(None, b"v2 as ever")])
        assert [r.value for r in client.consumer.fetch_records(topic, 0, 0).records] == [b"v2 as ever"]


def test_kerberos_broker_configs_are_refused_with_the_reason(broker_once):
    """Kafka lets kafka-configs change a broker's sasl.kerberos.* keys; GSSAPI is not
    offered here, and the refusal says so (never an unknown key)."""
    resource = (BROKER_RESOURCE, "0")
    with Client(broker_once.bootstrap_servers) as client:
        for key in ("sasl.kerberos.service.name", "sasl.kerberos.principal.to.local.rules"):
            refused = client.admin.incremental_alter_configs({resource: [(key, SET_CONFIG, "kafka")]})[resource]
            assert refused.code == ErrorCode.INVALID_CONFIG, (key, refused)
            assert key in str(refused) and "GSSAPI" in str(refused), refused


@pytest.fixture(scope="module")
def broker_once(tmp_path_factory):
    """One broker for the many refusals, which change nothing."""
    from sluice.broker_process import BrokerProcess

    with BrokerProcess(tmp_path_factory.mktemp("refusals") / "data") as proc:
        yield proc


def test_broker_configs_are_described_with_source_and_read_only(tmp_path):
    """Every broker key the broker understands is described: the topic defaults dynamic,
    the others read-only, each with where its value came from."""
    from sluice.broker_process import BrokerProcess
    from sluice_client import BROKER_RESOURCE, DEFAULT_CONFIG, STATIC_BROKER_CONFIG

    properties = tmp_path / "server.properties"
    properties.write_text("group.initial.rebalance.delay.ms=0\nmin.insync.replicas=1\n")
    with BrokerProcess(tmp_path / "data", config_file=str(properties)) as proc:
        with Client(proc.bootstrap_servers) as client:
            configs = client.admin.describe_configs([(BROKER_RESOURCE, "")])[(BROKER_RESOURCE, "")]
    delay = configs["group.initial.rebalance.delay.ms"]
    assert (delay.value, delay.source, delay.read_only) == ("0", STATIC_BROKER_CONFIG, True)
    isr = configs["min.insync.replicas"]
    assert (isr.value, isr.source, isr.read_only) == ("1", STATIC_BROKER_CONFIG, False)
    assert configs["log.retention.ms"].source == DEFAULT_CONFIG and not configs["log.retention.ms"].read_only
    assert configs["listeners"].value == f"PLAINTEXT://127.0.0.1:{proc.port}"
    assert configs["queued.max.requests"].read_only


def test_config_types_are_kafkas(broker):
    """DescribeConfigs v3+ types: a broker default as its topic key is typed, the broker's
    other keys as Kafka types them."""
    from tests.test_broker_failures import connect, roundtrip
    from wire.messages import DESCRIBE_CONFIGS

    Req = DESCRIBE_CONFIGS.request
    body = Req(resources=[Req.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)],
               include_synonyms=False, include_documentation=False)
    with connect(broker.port) as sock:
        response = roundtrip(sock, DESCRIBE_CONFIGS, 4, body, 3)
    types = {c.name: c.config_type for c in response.results[0].configs}
    BOOLEAN, STRING, INT, LONG, LIST = 1, 2, 3, 5, 7
    assert {key: types[key] for key in ("log.segment.bytes", "log.retention.ms", "log.cleanup.policy",
                                        "compression.type", "min.insync.replicas", "num.partitions",
                                        "auto.create.topics.enable", "listeners",
                                        "connections.max.idle.ms", "queued.max.requests")} == {
        "log.segment.bytes": INT, "log.retention.ms": LONG, "log.cleanup.policy": LIST,
        "compression.type": STRING, "min.insync.replicas": INT, "num.partitions": INT,
        "auto.create.topics.enable": BOOLEAN, "listeners": STRING, "connections.max.idle.ms": LONG,
        "queued.max.requests": INT}


def test_every_broker_key_is_described_with_kafkas_type(tmp_path):
    """DescribeConfigs for the broker lists every key server.properties takes, the ACL and
    inter-broker keys too, typed as Kafka types them (log.dir, log.retention.minutes|hours
    and log.roll.hours aside: their keys stand for them, as log.retention.ms does)."""
    from broker.config import BROKER_KEYS
    from sluice.broker_process import BrokerProcess
    from tests.test_broker_failures import connect, roundtrip
    from wire.messages import DESCRIBE_CONFIGS

    properties = tmp_path / "server.properties"
    properties.write_text("super.users=User:ops;User:admin\nsecurity.inter.broker.protocol=PLAINTEXT\n")
    Req = DESCRIBE_CONFIGS.request
    body = Req(resources=[Req.DescribeConfigsResource(resource_type=4, resource_name="", configuration_keys=None)],
               include_synonyms=False, include_documentation=False)
    with BrokerProcess(tmp_path / "data", config_file=str(properties)) as proc:
        with connect(proc.port) as sock:
            configs = {c.name: c for c in roundtrip(sock, DESCRIBE_CONFIGS, 4, body, 3).results[0].configs}
    assert set(configs) == {key for key, spec in BROKER_KEYS.items() if spec.synonym_of is None}
    BOOLEAN, STRING, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 2, 4, 5
    described = {key: (configs[key].value, configs[key].config_type, configs[key].config_source)
                 for key in ("super.users", "security.inter.broker.protocol", "authorizer.class.name",
                             "allow.everyone.if.no.acl.found", "listener.security.protocol.map",
                             "inter.broker.listener.name")}
    assert described == {
        "super.users": ("User:admin;User:ops", STRING, STATIC_BROKER_CONFIG),
        "security.inter.broker.protocol": ("PLAINTEXT", STRING, STATIC_BROKER_CONFIG),
        "authorizer.class.name": ("", STRING, DEFAULT_CONFIG),
        "allow.everyone.if.no.acl.found": ("false", BOOLEAN, DEFAULT_CONFIG),
        "listener.security.protocol.map": ("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                           "SASL_SSL:SASL_SSL", STRING, DEFAULT_CONFIG),
        "inter.broker.listener.name": ("PLAINTEXT", STRING, DEFAULT_CONFIG)}
    assert all(configs[key].read_only for key in described)
