"""AlterConfigs and IncrementalAlterConfigs against the real broker process, from three
clients (confluent-kafka, kafka-python, sluice_client) and `sluice configs`.

- Topics: SET/DELETE/APPEND/SUBTRACT, replace semantics of AlterConfigs, validate_only,
  per-resource errors naming the key; the change reaches the live logs (a small
  segment.bytes rolls, a small max.message.bytes refuses) and survives a restart;
  DescribeConfigs reports overrides as DYNAMIC_TOPIC_CONFIG and defaults once deleted.
- Broker: dynamic topic defaults at the cluster and broker level, persisted; other keys
  are INVALID_REQUEST.

Servers bind to 127.0.0.1 only; every wait is bounded.
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ConfigSource)
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType

from tests.test_cli import fails, ok, ok_json
from sluice_client import (APPEND_CONFIG, BROKER_RESOURCE, DEFAULT_CONFIG, DELETE_CONFIG,
                           DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG,
                           SET_CONFIG, SUBTRACT_CONFIG, TOPIC_RESOURCE, Client, NewTopic)
from wire.error_codes import ErrorCode
from wire.errors import KafkaError

pytestmark = pytest.mark.timeout(60)


def topic_configs(client: Client, topic: str) -> dict:
    return client.admin.describe_configs([(TOPIC_RESOURCE, topic)])[(TOPIC_RESOURCE, topic)]


def test_incremental_ops_errors_and_validate_only(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"t": NewTopic(1, 1, {"retention.ms": "60000"})})
        t = (TOPIC_RESOURCE, "t")
        errors = client.admin.incremental_alter_configs({
            t: [("segment.bytes", SET_CONFIG, "1000000"), ("cleanup.policy", APPEND_CONFIG, "compact"),
                ("retention.ms", DELETE_CONFIG, None)],
            (TOPIC_RESOURCE, "missing"): [("segment.bytes", SET_CONFIG, "1000000")]})
        assert errors[t] is None
        assert errors[(TOPIC_RESOURCE, "missing")].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        configs = topic_configs(client, "t")
        assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == ("1000000", DYNAMIC_TOPIC_CONFIG)
        assert configs["cleanup.policy"].value == "delete,compact"
        assert configs["retention.ms"].source == DEFAULT_CONFIG

        assert client.admin.incremental_alter_configs(
            {t: [("cleanup.policy", SUBTRACT_CONFIG, "delete")]})[t] is None
        assert topic_configs(client, "t")["cleanup.policy"].value == "compact"

        bad = {"unknown": [("no.such.key", SET_CONFIG, "1")],
               "value": [("retention.ms", SET_CONFIG, "soon")],
               "append": [("retention.ms", APPEND_CONFIG, "1")]}
        for case, changes in bad.items():
            error = client.admin.incremental_alter_configs({t: changes})[t]
            assert error.code == ErrorCode.INVALID_CONFIG, case
            assert changes[0][0] in str(error), case

        assert client.admin.incremental_alter_configs(
            {t: [("retention.ms", SET_CONFIG, "5")]}, validate_only=True)[t] is None
        assert client.admin.alter_configs({t: {"retention.ms": "5"}}, validate_only=True)[t] is None
        assert topic_configs(client, "t")["retention.ms"].source == DEFAULT_CONFIG

        # AlterConfigs replaces the whole override set.
        assert client.admin.alter_configs({t: {"retention.bytes": "4096"}})[t] is None
        overrides = {k: e.value for k, e in topic_configs(client, "t").items() if e.source == DYNAMIC_TOPIC_CONFIG}
        assert overrides == {"retention.bytes": "4096"}


def test_changes_reach_live_logs_and_survive_restart(broker):
    data = os.path.join(broker.data_dir, "live-0")
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"live": NewTopic(1, 1, {})})
        client.producer.produce("live", 0, [(None, b"x" * 100)])
        assert len([f for f in os.listdir(data) if f.endswith(".log")]) == 1
        live = (TOPIC_RESOURCE, "live")
        assert client.admin.incremental_alter_configs({live: [("segment.bytes", SET_CONFIG, "200"),
                                                        ("max.message.bytes", SET_CONFIG, "500")]})[live] is None
        for _ in range(3):
            client.producer.produce("live", 0, [(None, b"y" * 100)])
        assert len([f for f in os.listdir(data) if f.endswith(".log")]) >= 3
        with pytest.raises(KafkaError) as refused:
            client.producer.produce("live", 0, [(None, b"z" * 2000)])
        assert refused.value.code == ErrorCode.MESSAGE_TOO_LARGE
    broker.restart()
    with Client(broker.bootstrap_servers) as client:
        configs = topic_configs(client, "live")
        assert (configs["segment.bytes"].value, configs["segment.bytes"].source) == ("200", DYNAMIC_TOPIC_CONFIG)
        with pytest.raises(KafkaError):
            client.producer.produce("live", 0, [(None, b"z" * 2000)])


def test_broker_dynamic_defaults(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"plain": NewTopic(1, 1, {})})
        default, this = (BROKER_RESOURCE, ""), (BROKER_RESOURCE, "0")
        errors = client.admin.incremental_alter_configs({
            default: [("log.retention.ms", SET_CONFIG, "123456"), ("message.max.bytes", SET_CONFIG, "300")],
            this: [("log.retention.ms", SET_CONFIG, "654321")]})
        assert errors == {default: None, this: None}
        refused = client.admin.incremental_alter_configs({this: [("num.partitions", SET_CONFIG, "3")]})[this]
        assert refused.code == ErrorCode.INVALID_REQUEST and "dynamically" in str(refused)
        assert client.admin.alter_configs({(BROKER_RESOURCE, "b"): {}})[(BROKER_RESOURCE, "b")].code == \
            ErrorCode.INVALID_REQUEST
        with pytest.raises(KafkaError) as too_large:
            client.producer.produce("plain", 0, [(None, b"z" * 1000)])
        assert too_large.value.code == ErrorCode.MESSAGE_TOO_LARGE
    broker.restart()
    with Client(broker.bootstrap_servers) as client:
        described = client.admin.describe_configs([(BROKER_RESOURCE, "0")])[(BROKER_RESOURCE, "0")]
        assert (described["log.retention.ms"].value, described["log.retention.ms"].source) == \
            ("654321", DYNAMIC_BROKER_CONFIG)
        assert described["message.max.bytes"].source == DYNAMIC_DEFAULT_BROKER_CONFIG
        plain = topic_configs(client, "plain")
        assert (plain["retention.ms"].value, plain["retention.ms"].source) == ("654321", DYNAMIC_BROKER_CONFIG)
        # Deleting the broker level falls back to the cluster default.
        assert client.admin.incremental_alter_configs(
            {(BROKER_RESOURCE, "0"): [("log.retention.ms", DELETE_CONFIG, None)]})[(BROKER_RESOURCE, "0")] is None
        assert topic_configs(client, "plain")["retention.ms"].value == "123456"


def test_internal_topic_keeps_compaction(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"t": NewTopic(1, 1, {})})
        client.consumer.commit_offsets("g", {("t", 0): 0})  # creates __consumer_offsets
        offsets = (TOPIC_RESOURCE, "__consumer_offsets")
        assert client.admin.alter_configs({offsets: {"retention.ms": "1000"}})[offsets] is None
        assert topic_configs(client, "__consumer_offsets")["cleanup.policy"].value == "compact"
        error = client.admin.incremental_alter_configs({offsets: [("cleanup.policy", SET_CONFIG, "delete")]})[offsets]
        assert error.code == ErrorCode.INVALID_CONFIG


def test_confluent_and_kafka_python_admins(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    assert admin.create_topics([CkNewTopic("c", 1, 1)])["c"].result(15) is None
    resource = ConfigResource(ConfigResource.Type.TOPIC, "c", incremental_configs=[
        ConfigEntry("retention.ms", "7777", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(15)
    described = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "c")])
    configs = next(iter(described.values())).result(15)
    assert configs["retention.ms"].value == "7777"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "delete,compact"
    legacy = ConfigResource(ConfigResource.Type.TOPIC, "c", set_config={"segment.ms": "60000"})
    for future in admin.alter_configs([legacy]).values():
        future.result(15)
    configs = next(iter(admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "c")])
                        .values())).result(15)
    assert configs["segment.ms"].value == "60000" and configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    bad = ConfigResource(ConfigResource.Type.TOPIC, "c", incremental_configs=[
        ConfigEntry("retention.ms", "never", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="retention.ms"):
        next(iter(admin.incremental_alter_configs([bad]).values())).result(15)

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=15000)
    try:
        kp.alter_configs([KpResource(ConfigResourceType.TOPIC, "c", configs={"retention.bytes": "9999"})],
                         incremental=False)
        kp.alter_configs([KpResource(ConfigResourceType.TOPIC, "c", configs={"flush.ms": "1234"})])
    finally:
        kp.close()
    with Client(broker.bootstrap_servers) as client:
        overrides = {k: e.value for k, e in topic_configs(client, "c").items() if e.source == DYNAMIC_TOPIC_CONFIG}
    # kafka-python's AlterConfigs carries the other overrides along (it replaces the set).
    assert overrides == {"segment.ms": "60000", "retention.bytes": "9999", "flush.ms": "1234"}


def test_sluice_configs_verb(broker):
    server = ("--bootstrap-server", broker.bootstrap_servers)
    ok("topics", *server, "create", "v")
    topic = (*server, "--entity-type", "topics", "--entity-name", "v")
    assert "Completed" in ok("configs", *topic, "--alter",
                             "--add-config", "retention.ms=1000,cleanup.policy=[delete,compact]")
    described = ok_json("configs", *topic, "--describe")
    assert {c["name"]: c["value"] for c in described["configs"]} == \
        {"retention.ms": "1000", "cleanup.policy": "delete,compact"}
    ok("configs", *topic, "--alter", "--delete-config", "retention.ms")
    assert "retention.ms" not in ok("configs", *topic, "--describe")
    assert "segment.bytes" in ok("configs", *topic, "--describe", "--all")
    assert "retention.ms" in fails("configs", *topic, "--alter", "--add-config", "retention.ms=x", code=1)
    assert "does not exist" in fails("configs", *server, "--entity-type", "topics", "--entity-name",
                                     "nope", "--alter", "--add-config", "retention.ms=1", code=1)
    brokers = (*server, "--entity-type", "brokers", "--entity-default")
    ok("configs", *brokers, "--alter", "--add-config", "log.retention.ms=4242")
    assert "log.retention.ms=4242" in ok("configs", *brokers, "--describe")
    assert "dynamically" in fails("configs", *brokers, "--alter", "--add-config", "num.partitions=2")
    fails("configs", *server, "--entity-type", "topics", "--describe", code=2)


def test_a_resource_listed_twice_is_refused_each_time(broker):
    """As Kafka answers: INVALID_REQUEST for every entry of a duplicated resource, the
    others applied."""
    from tests.test_broker_failures import connect, roundtrip
    from wire.messages import INCREMENTAL_ALTER_CONFIGS

    Request = INCREMENTAL_ALTER_CONFIGS.request
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"twice": NewTopic(1), "once": NewTopic(1)})

        def resource(name: str, value: str):
            return Request.AlterConfigsResource(resource_type=TOPIC_RESOURCE, resource_name=name, configs=[
                Request.AlterableConfig(name="retention.ms", config_operation=SET_CONFIG, value=value)])

        body = Request(validate_only=False, resources=[resource("twice", "1000"), resource("once", "2000"),
                                                       resource("twice", "3000")])
        with connect(broker.port) as sock:
            response = roundtrip(sock, INCREMENTAL_ALTER_CONFIGS, 1, body, 7)
        assert [(r.resource_name, r.error_code) for r in response.responses] == [
            ("twice", ErrorCode.INVALID_REQUEST), ("once", ErrorCode.NONE), ("twice", ErrorCode.INVALID_REQUEST)]
        assert topic_configs(client, "once")["retention.ms"].value == "2000"
        assert topic_configs(client, "twice")["retention.ms"].source == DEFAULT_CONFIG
