"""Kafka's ZooKeeper layout (broker/cluster/zk_layout.py): the exact JSON Kafka writes at
each path, round trips, and garbage refused with the znode's path named."""

from __future__ import annotations

import json
import uuid

import pytest

from broker.cluster import zk_layout as layout
from broker.cluster.zk_layout import (BrokerRegistration, ClusterId, ConfigChange,
                                      ControllerEpoch, ControllerRegistration, EntityConfig,
                                      IsrChange, LeaderAndIsr, Listener, ProducerIdBlock,
                                      TopicAssignment, ZkDataError)

TS = 1718000000123
# Kafka's Uuid(0, 1) (its metadata topic's id) and a UUID whose base64 needs '-' and '_'.
UUID_0_1 = uuid.UUID(int=1)
UUID_ONES = uuid.UUID(int=(1 << 128) - 1)


def test_paths_are_kafkas():
    assert layout.broker_path(3) == "/brokers/ids/3"
    assert layout.topic_path("t") == "/brokers/topics/t"
    assert layout.partition_state_path("t", 7) == "/brokers/topics/t/partitions/7/state"
    assert layout.topic_config_path("t") == "/config/topics/t"
    assert layout.delete_topic_path("t") == "/admin/delete_topics/t"
    assert layout.CONFIG_CHANGE_PREFIX == "/config/changes/config_change_"
    assert layout.ISR_CHANGE_PREFIX == "/isr_change_notification/isr_change_"
    assert (layout.CLUSTER_ID, layout.CONTROLLER, layout.CONTROLLER_EPOCH,
            layout.PRODUCER_ID_BLOCK, layout.BROKER_SEQID) == (
        "/cluster/id", "/controller", "/controller_epoch", "/latest_producer_id_block",
        "/brokers/seqid")


def test_broker_registration_is_kafkas_version_5():
    registration = BrokerRegistration((Listener("PLAINTEXT", "h", 9092),), TS, rack="r1")
    assert registration.to_json() == (
        b'{"version":5,"host":"h","port":9092,"jmx_port":-1,"timestamp":"1718000000123",'
        b'"endpoints":["PLAINTEXT://h:9092"],"listener_security_protocol_map":'
        b'{"PLAINTEXT":"PLAINTEXT"},"rack":"r1","features":{}}')
    path = layout.broker_path(1)
    assert BrokerRegistration.from_json(path, registration.to_json()) == registration


def test_broker_registration_without_rack_has_no_rack_key():
    registration = BrokerRegistration((Listener("PLAINTEXT", "127.0.0.1", 19092),), TS)
    written = json.loads(registration.to_json())
    assert "rack" not in written
    assert written["host"] == "127.0.0.1" and written["port"] == 19092
    assert BrokerRegistration.from_json("/brokers/ids/0", registration.to_json()) == registration


def test_broker_registration_with_several_listeners():
    """host and port are the PLAINTEXT listener's; names map to their security protocols;
    IPv6 hosts are bracketed in endpoints."""
    registration = BrokerRegistration((Listener("INTERNAL", "::1", 9093, "SSL"),
                                       Listener("EXTERNAL", "h", 9092, "PLAINTEXT")), TS)
    written = json.loads(registration.to_json())
    assert written["endpoints"] == ["INTERNAL://[::1]:9093", "EXTERNAL://h:9092"]
    assert written["listener_security_protocol_map"] == {"INTERNAL": "SSL", "EXTERNAL": "PLAINTEXT"}
    assert (written["host"], written["port"]) == ("h", 9092)
    assert BrokerRegistration.from_json("/brokers/ids/0", registration.to_json()) == registration


def test_controller_and_its_epoch():
    controller = ControllerRegistration(1, TS)
    assert controller.to_json() == (
        b'{"version":2,"brokerid":1,"timestamp":"1718000000123","kraftControllerEpoch":-1}')
    assert ControllerRegistration.from_json("/controller", controller.to_json()) == controller
    assert ControllerEpoch(5).to_json() == b"5"
    assert ControllerEpoch.from_json("/controller_epoch", b"5") == ControllerEpoch(5)


def test_topic_assignment_is_kafkas_version_3():
    assignment = TopicAssignment(UUID_0_1, {0: (1, 2, 3), 1: (2, 3, 1)})
    assert assignment.to_json() == (
        b'{"version":3,"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":{"0":[1,2,3],'
        b'"1":[2,3,1]},"adding_replicas":{},"removing_replicas":{}}')
    path = layout.topic_path("t")
    assert TopicAssignment.from_json(path, assignment.to_json()) == assignment


def test_topic_assignment_with_a_reassignment_under_way():
    assignment = TopicAssignment(UUID_ONES, {0: (1, 2, 4)}, adding_replicas={0: (4,)},
                                 removing_replicas={0: (3,)})
    written = json.loads(assignment.to_json())
    assert written["topic_id"] == "_____________________w"
    assert written["adding_replicas"] == {"0": [4]}
    assert written["removing_replicas"] == {"0": [3]}
    assert TopicAssignment.from_json("/brokers/topics/t", assignment.to_json()) == assignment


def test_partition_state():
    state = LeaderAndIsr(leader=1, leader_epoch=4, isr=(1, 2, 3), controller_epoch=5)
    assert state.to_json() == (
        b'{"version":1,"leader":1,"leader_epoch":4,"controller_epoch":5,"isr":[1,2,3]}')
    path = layout.partition_state_path("t", 0)
    assert LeaderAndIsr.from_json(path, state.to_json()) == state
    offline = LeaderAndIsr(layout.NO_LEADER, 5, (), 6)
    assert json.loads(offline.to_json())["leader"] == -1
    assert LeaderAndIsr.from_json(path, offline.to_json()) == offline


def test_configs_and_notifications():
    config = EntityConfig({"retention.ms": "86400000"})
    assert config.to_json() == b'{"version":1,"config":{"retention.ms":"86400000"}}'
    assert EntityConfig.from_json("/config/topics/t", config.to_json()) == config

    change = ConfigChange("topics/t")
    assert change.to_json() == b'{"version":2,"entity_path":"topics/t"}'
    assert ConfigChange.from_json("/config/changes/config_change_0000000000",
                                  change.to_json()) == change

    isr_change = IsrChange((("t", 0), ("u", 3)))
    assert isr_change.to_json() == (
        b'{"version":1,"partitions":[{"topic":"t","partition":0},{"topic":"u","partition":3}]}')
    assert IsrChange.from_json("/isr_change_notification/isr_change_0000000000",
                               isr_change.to_json()) == isr_change


def test_cluster_id_and_producer_id_block():
    cluster = ClusterId("AAAAAAAAAAAAAAAAAAAAAQ")
    assert cluster.to_json() == b'{"version":"1","id":"AAAAAAAAAAAAAAAAAAAAAQ"}'
    assert ClusterId.from_json("/cluster/id", cluster.to_json()) == cluster

    block = ProducerIdBlock(broker_id=1, block_start=0, block_end=999)
    assert block.to_json() == b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}'
    assert ProducerIdBlock.from_json("/latest_producer_id_block", block.to_json()) == block


def test_uuids_are_kafkas_base64():
    assert layout.uuid_to_string(UUID_0_1) == "AAAAAAAAAAAAAAAAAAAAAQ"
    for value in (UUID_0_1, UUID_ONES, uuid.uuid4()):
        assert layout.uuid_from_string("/p", layout.uuid_to_string(value)) == value


@pytest.mark.parametrize("kind, path, data", [
    (BrokerRegistration, "/brokers/ids/1", b""),
    (BrokerRegistration, "/brokers/ids/1", b"\xff\xfe{"),
    (BrokerRegistration, "/brokers/ids/1", b"not json"),
    (BrokerRegistration, "/brokers/ids/1", b"[1, 2]"),
    (BrokerRegistration, "/brokers/ids/1", b'{"version":5,"timestamp":"1"}'),
    (BrokerRegistration, "/brokers/ids/1", b'{"endpoints":"PLAINTEXT://h:1","timestamp":"1"}'),
    (BrokerRegistration, "/brokers/ids/1", b'{"endpoints":["PLAINTEXT:/h:1"],"timestamp":"1"}'),
    (BrokerRegistration, "/brokers/ids/1", b'{"endpoints":["PLAINTEXT://h:1"],"timestamp":1}'),
    (BrokerRegistration, "/brokers/ids/1",
     b'{"endpoints":["PLAINTEXT://h:1"],"timestamp":"1","jmx_port":"-1"}'),
    (ControllerRegistration, "/controller", b'{"version":2,"timestamp":"1"}'),
    (ControllerEpoch, "/controller_epoch", b"abc"),
    (ControllerEpoch, "/controller_epoch", b'"5"'),
    (ControllerEpoch, "/controller_epoch", b"1.5"),
    (TopicAssignment, "/brokers/topics/t", b'{"version":3,"partitions":{"0":[1]}}'),
    (TopicAssignment, "/brokers/topics/t", b'{"topic_id":"short","partitions":{"0":[1]}}'),
    (TopicAssignment, "/brokers/topics/t",
     b'{"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":{"x":[1]}}'),
    (TopicAssignment, "/brokers/topics/t",
     b'{"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":{"0":["1"]}}'),
    (TopicAssignment, "/brokers/topics/t",
     b'{"topic_id":"AAAAAAAAAAAAAAAAAAAAAQ","partitions":{"0":[true]}}'),
    (LeaderAndIsr, "/brokers/topics/t/partitions/0/state",
     b'{"leader":"1","leader_epoch":0,"controller_epoch":1,"isr":[1]}'),
    (LeaderAndIsr, "/brokers/topics/t/partitions/0/state",
     b'{"leader":1,"leader_epoch":0,"controller_epoch":1}'),
    (LeaderAndIsr, "/brokers/topics/t/partitions/0/state",
     b'{"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":1}'),
    (EntityConfig, "/config/topics/t", b'{"version":1,"config":{"retention.ms":86400000}}'),
    (ConfigChange, "/config/changes/config_change_0000000001", b'{"version":2}'),
    (IsrChange, "/isr_change_notification/isr_change_0000000001",
     b'{"version":1,"partitions":[{"topic":"t","partition":"0"}]}'),
    (IsrChange, "/isr_change_notification/isr_change_0000000001", b'{"version":1}'),
    (ClusterId, "/cluster/id", b'{"version":"1","id":5}'),
    (ProducerIdBlock, "/latest_producer_id_block",
     b'{"version":1,"broker":1,"block_start":0,"block_end":"999"}'),
    (ProducerIdBlock, "/latest_producer_id_block",
     b'{"version":1,"broker":1,"block_start":"0","block_end":"99x"}'),
])
def test_garbage_is_refused_naming_the_znode(kind, path, data):
    with pytest.raises(ZkDataError) as refused:
        kind.from_json(path, data)
    assert refused.value.path == path
    assert str(refused.value).startswith(path + ": ")
