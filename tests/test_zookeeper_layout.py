"""Kafka's ZooKeeper layout (broker/zookeeper/layout.py): the exact JSON Kafka writes at
each path, round trips, and garbage refused with the znode's path named. Then the store
(broker/zookeeper/store.py) against a real ZooKeeper (tests/zookeeper.py): ephemeral
registrations, conditional writes, the controller's election and fencing, and data and
sessions kept across a ZooKeeper restart. Each test works under a chroot of its own."""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient

from broker.zookeeper import layout
from broker.zookeeper.layout import (BrokerRegistration, ClusterId, ConfigChange,
                                      ControllerEpoch, ControllerRegistration, EntityConfig,
                                      IsrChange, LeaderAndIsr, Listener, PartitionReassignment,
                                      ProducerIdBlock, TopicAssignment, ZkDataError)
from broker.zookeeper.store import (BrokerIdInUse, ControllerMoved, Election, StaleVersion,
                                     Versioned, ZkStore)
import sluice.zookeeper
from tests import zookeeper as zookeeper_harness
from tests.support.polling import wait_for

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
    # The reassignment done: the partition's adding and removing replicas leave the JSON.
    done = assignment.with_partition(0, (1, 2, 4), (), ())
    assert (done.adding_replicas, done.removing_replicas) == ({}, {})


def test_partition_reassignment_as_kafkas_tools_wrote_it():
    assert layout.REASSIGN_PARTITIONS == "/admin/reassign_partitions"
    written = (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3],'
               b'"log_dirs":["any","any"]},{"topic":"u","partition":4,"replicas":[1]}]}')
    read = PartitionReassignment.from_json(layout.REASSIGN_PARTITIONS, written)
    assert read == PartitionReassignment({("t", 0): (2, 3), ("u", 4): (1,)})
    assert read.to_json() == (b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[2,3]},'
                              b'{"topic":"u","partition":4,"replicas":[1]}]}')


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
    (PartitionReassignment, "/admin/reassign_partitions",
     b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":["1"]}]}'),
    (PartitionReassignment, "/admin/reassign_partitions",
     b'{"version":1,"partitions":[{"topic":"t","partition":0}]}'),
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


# Against a real ZooKeeper

@pytest.fixture
def chroot(request):
    return "/" + request.node.name


@pytest.fixture
def open_store(zookeeper, chroot):
    """Starts ZkStores on this test's chroot; closes them after the test."""
    stores = []

    def open_store(session_timeout_ms: int = 6000) -> ZkStore:
        store = ZkStore(zookeeper.hosts + chroot, session_timeout_ms)
        stores.append(store)
        return store.start(timeout=15)

    yield open_store
    for store in stores:
        store.close()


@pytest.fixture
def raw(zookeeper):
    """A plain kazoo client at the root, to look under the chroot as zkCli.sh would."""
    client = KazooClient(hosts=zookeeper.hosts)
    client.start(15)
    yield client
    client.stop()
    client.close()


def registration(port: int) -> BrokerRegistration:
    return BrokerRegistration((Listener("PLAINTEXT", "127.0.0.1", port),), TS)


def test_start_creates_the_chroot_and_kafkas_paths_once(open_store, raw, chroot):
    first = open_store()
    for path in layout.PERSISTENT_PATHS:
        assert raw.exists(chroot + path) is not None, path
    open_store()  # a second broker finds them there
    assert first.get_or_create_cluster_id("AAAAAAAAAAAAAAAAAAAAAQ") == "AAAAAAAAAAAAAAAAAAAAAQ"
    second = open_store()
    assert second.get_or_create_cluster_id("_____________________w") == "AAAAAAAAAAAAAAAAAAAAAQ"
    data, _ = raw.get(chroot + "/cluster/id")
    assert data == b'{"version":"1","id":"AAAAAAAAAAAAAAAAAAAAAQ"}'


def test_a_registration_lives_as_long_as_its_session(open_store, raw, chroot):
    broker, other = open_store(), open_store()
    broker.register_broker(1, registration(9092))
    broker.register_broker(1, registration(9092))  # again on its own session: already done
    assert other.broker_ids() == [1]
    assert other.broker(1) == registration(9092)
    assert raw.exists(chroot + "/brokers/ids/1").ephemeralOwner == broker.client.client_id[0]
    with pytest.raises(BrokerIdInUse, match="broker id 1"):
        other.register_broker(1, registration(9093))

    broker.close()
    wait_for(lambda: other.broker_ids() == [], 10, "/brokers/ids/1 to go with its session")
    other.register_broker(1, registration(9093))
    assert other.broker(1) == registration(9093)


def test_writes_are_conditional_on_the_version_read(open_store):
    store = open_store()
    assignment = TopicAssignment(UUID_0_1, {0: (1, 2, 3)})
    assert store.create_topic("t", assignment)
    assert not store.create_topic("t", TopicAssignment(UUID_ONES, {0: (3,)}))
    assert store.topics() == ["t"]
    assert store.topic_assignment("t") == Versioned(assignment, 0)
    grown = TopicAssignment(UUID_0_1, {0: (1, 2, 3), 1: (2, 3, 1)})
    assert store.set_topic_assignment("t", grown, 0) == 1
    with pytest.raises(StaleVersion, match="/brokers/topics/t is no longer at version 0"):
        store.set_topic_assignment("t", assignment, 0)
    assert store.topic_assignment("t") == Versioned(grown, 1)

    election = store.elect_controller(ControllerRegistration(1, TS))
    state = LeaderAndIsr(1, 0, (1, 2, 3), election.epoch)
    assert store.create_partition_state("t", 0, state,
                                        controller_epoch_version=election.epoch_zk_version)
    assert not store.create_partition_state("t", 0, state,
                                            controller_epoch_version=election.epoch_zk_version)
    shrunk = LeaderAndIsr(1, 0, (1, 2), election.epoch)
    # A leader shrinking its ISR: conditional on the state's version only.
    assert store.set_partition_state("t", 0, shrunk, 0, controller_epoch_version=None) == 1
    with pytest.raises(StaleVersion):
        store.set_partition_state("t", 0, state, 0, controller_epoch_version=None)
    with pytest.raises(StaleVersion):
        store.set_partition_state("t", 5, state, 0, controller_epoch_version=None)
    assert store.partition_state("t", 0) == Versioned(shrunk, 1)
    assert store.partition_state("t", 5) is None


def test_entity_configs_keep_each_others_keys_and_go_when_empty(open_store, raw, chroot):
    """A user's SCRAM credentials and quotas share /config/users/<user>: a change of some
    keys keeps the others. An emptied (user, client id) takes the `clients` and user
    znodes it leaves empty with it, as Kafka's AdminZkClient; names are sanitized."""
    store = open_store()
    assert layout.config_entity_path(("users", "a/b~c d*"), ("clients", None)) == \
        "users/a%2Fb%7Ec%20d%2A/clients/<default>"
    assert layout.config_entity_parts("users/a%2Fb%7Ec%20d%2A/clients/<default>") == (
        ("users", "a/b~c d*"), ("clients", None))
    store.change_entity_config("users/alice", {"SCRAM-SHA-256": "salt=..."})
    store.change_entity_config("users/alice", {"producer_byte_rate": "1024"})
    store.change_entity_config("users/alice/clients/c1", {"consumer_byte_rate": "2048"})
    assert store.entity_configs() == {
        "users/alice": {"SCRAM-SHA-256": "salt=...", "producer_byte_rate": "1024"},
        "users/alice/clients/c1": {"consumer_byte_rate": "2048"}}
    store.change_entity_config("users/alice", {"SCRAM-SHA-256": None, "producer_byte_rate": None})
    assert json.loads(raw.get(chroot + "/config/users/alice")[0]) == {"version": 1, "config": {}}  # a parent
    store.change_entity_config("users/alice/clients/c1", {"consumer_byte_rate": None})
    assert raw.exists(chroot + "/config/users/alice") is None
    store.change_entity_config("users/bob/clients/<default>", {"consumer_byte_rate": "1"})
    assert raw.get(chroot + "/config/users/bob")[0] == b""  # made as a parent, as Kafka makes it
    assert store.entity_configs() == {"users/bob/clients/<default>": {"consumer_byte_rate": "1"}}
    assert [change.entity_path for _, change, _ in store.config_changes(-1)] == [
        "users/alice", "users/alice", "users/alice/clients/c1", "users/alice", "users/alice/clients/c1",
        "users/bob/clients/<default>"]


def test_one_controller_at_a_time_each_with_a_higher_epoch(open_store, raw, chroot):
    first, second = open_store(), open_store()
    assert first.controller_id() is None and first.controller_epoch() is None
    won = first.elect_controller(ControllerRegistration(1, TS))
    assert won == Election(1, 1)  # /controller_epoch created at 0, then moved to 1
    assert second.elect_controller(ControllerRegistration(2, TS)) is None
    # Electing again on the winning session (a retry after a lost reply) is the same win.
    assert first.elect_controller(ControllerRegistration(1, TS)) == won
    assert second.controller_id() == 1
    assert second.controller_epoch() == Versioned(1, 1)
    assert raw.get(chroot + "/controller_epoch")[0] == b"1"

    first.close()
    wait_for(lambda: second.controller_id() is None, 10, "/controller to go with its session")
    assert second.elect_controller(ControllerRegistration(2, TS)) == Election(2, 2)
    assert second.controller_id() == 2


def test_a_deposed_controller_cannot_write(open_store, raw, chroot):
    deposed, successor = open_store(), open_store()
    old = deposed.elect_controller(ControllerRegistration(1, TS))
    assert deposed.create_topic("t", TopicAssignment(UUID_0_1, {0: (1, 2), 1: (2, 1)}))
    state = LeaderAndIsr(1, 0, (1, 2), old.epoch)
    assert deposed.create_partition_state("t", 0, state,
                                          controller_epoch_version=old.epoch_zk_version)

    raw.delete(chroot + "/controller")  # as the expiry of the deposed one's session would
    new = successor.elect_controller(ControllerRegistration(2, TS))
    assert new.epoch == old.epoch + 1
    moved = LeaderAndIsr(2, 1, (2,), new.epoch)
    assert successor.set_partition_state("t", 0, moved, 0,
                                         controller_epoch_version=new.epoch_zk_version) == 1

    # The deposed controller, even with the state's current version, is refused: its
    # check of /controller_epoch fails in the same multi-op.
    with pytest.raises(ControllerMoved):
        deposed.set_partition_state("t", 0, LeaderAndIsr(1, 1, (1, 2), old.epoch), 1,
                                    controller_epoch_version=old.epoch_zk_version)
    with pytest.raises(ControllerMoved):
        deposed.create_partition_state("t", 1, state, controller_epoch_version=old.epoch_zk_version)
    with pytest.raises(ControllerMoved):
        deposed.set_topic_assignment("t", TopicAssignment(UUID_0_1, {0: (1,)}), 0,
                                     controller_epoch_version=old.epoch_zk_version)
    assert successor.partition_state("t", 0) == Versioned(moved, 1)
    assert successor.partition_state("t", 1) is None
    assert raw.exists(chroot + "/brokers/topics/t/partitions/1") is None
    assert successor.topic_assignment("t").zk_version == 0


def test_a_zookeeper_restart_keeps_the_data_and_the_sessions(zookeeper, open_store):
    broker = open_store(session_timeout_ms=10000)
    broker.register_broker(1, registration(9092))
    assignment = TopicAssignment(UUID_0_1, {0: (1,)})
    assert broker.create_topic("t", assignment)
    session = broker.client.client_id

    zookeeper.stop()
    assert not zookeeper.serving()
    zookeeper.start()

    assert open_store().topic_assignment("t") == Versioned(assignment, 0)
    # The broker's client reconnects to its session, registration included.
    wait_for(lambda: broker.client.connected, 10, "the broker's session to reconnect")
    assert broker.client.client_id == session
    assert broker.broker_ids() == [1]
    assert broker.broker(1) == registration(9092)


def test_a_paused_zookeeper_answers_again_once_resumed(zookeeper, open_store):
    broker = open_store(session_timeout_ms=10000)
    broker.register_broker(1, registration(9092))
    session = broker.client.client_id
    zookeeper.pause()
    try:
        assert not zookeeper.serving()
    finally:
        zookeeper.resume()
    assert broker.broker_ids() == [1]
    assert broker.client.client_id == session


def test_the_launcher_says_what_is_missing(tmp_path, monkeypatch):
    server = zookeeper_harness.ZooKeeperServer(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(zookeeper_harness.ZooKeeperUnavailable, match="`java` is not on PATH"):
        server.start()
    monkeypatch.undo()
    monkeypatch.setattr(sluice.zookeeper, "JARS_DIR", tmp_path)
    with pytest.raises(zookeeper_harness.ZooKeeperUnavailable,
                       match="install Debian's `zookeeper` package"):
        server.start()
    assert server.process is None
