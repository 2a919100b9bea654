"""Client quotas in a cluster (issue 37): kept in ZooKeeper where Kafka's ZooKeeper mode
keeps them, in force on every broker, across restarts.

A quota set through broker 0 is in /config/clients/<client-id> and
/config/users/<user>/clients/<client-id> with Kafka's JSON (values as strings) and a
/config/changes notification naming the entity; a producer to a partition led by broker 2
is throttled there within seconds, and still after broker 2 restarts. A quota removed
takes its znode and the parents it leaves empty with it, as Kafka's AdminZkClient does,
and broker 2 stops throttling. Broker 2 refuses a client's topics past its
controller_mutation_rate.

Kafka's kafka-configs.sh (ConfigCommand) with --bootstrap-server does the same: a client
id's quota set through broker 0 is enforced by another broker, and still once every broker
has been stopped and started again.
"""

import json
import os
import time

import pytest

from tests.cluster import FAST_FAILOVER, Cluster
from tests.test_broker_failures import connect, frame, recv_frame
from sluice_client import Client
from wire.error_codes import ErrorCode
from wire.messages import CREATE_TOPICS, PRODUCE
from wire.protocol import decode_response
from wire.quota_types import CLIENT_ID, USER
from wire.records import build_batch

pytestmark = pytest.mark.timeout(240)

BATCH = build_batch([(None, os.urandom(1000), (), int(time.time() * 1000)) for _ in range(64)])
CAPPED, PAIRED = ((CLIENT_ID, "capped"),), ((CLIENT_ID, "paired"), (USER, "ANONYMOUS"))


def _throttle_ms(port: int, topic: str, partition: int, client_id: str) -> int:
    """One Produce of 64 KB on a new connection: its response's throttle_time_ms."""
    request = PRODUCE.request(acks=1, timeout_ms=10_000, transactional_id=None, topic_data=[
        PRODUCE.request.TopicProduceData(name=topic, partition_data=[
            PRODUCE.request.PartitionProduceData(index=partition, records=BATCH)])])
    sock = connect(port)
    try:
        sock.sendall(frame(PRODUCE, 9, request, 1, client_id=client_id))
        _, response = decode_response(PRODUCE.key, 9, recv_frame(sock))
    finally:
        sock.close()
    assert response.responses[0].partition_responses[0].error_code == 0
    return response.throttle_time_ms


def _znode(zk, path: str):
    data, _ = zk.get(path)
    return json.loads(data)


def test_a_quota_set_through_one_broker_is_in_zookeeper_and_in_force_on_every_broker(tmp_path, zookeeper, zk):
    with Cluster(tmp_path, zookeeper, brokers=3, properties=FAST_FAILOVER) as cluster:
        cluster.create_topic("quoted", partitions=3, replication_factor=1)
        partition = next(p for p in range(3) if cluster.leader_of("quoted", p) == 2)
        port = cluster.processes[2].port
        assert _throttle_ms(port, "quoted", partition, "capped") == 0
        with Client(cluster.address(0)) as client:
            assert client.admin.alter_client_quotas({CAPPED: {"producer_byte_rate": 1024},
                                              PAIRED: {"producer_byte_rate": 2048}}) == {CAPPED: None, PAIRED: None}
        root = f"{cluster.chroot}/config"
        assert _znode(zk, f"{root}/clients/capped") == {"version": 1, "config": {"producer_byte_rate": "1024"}}
        assert _znode(zk, f"{root}/users/ANONYMOUS/clients/paired") == {
            "version": 1, "config": {"producer_byte_rate": "2048"}}
        changes = [_znode(zk, f"{root}/changes/{name}") for name in sorted(zk.get_children(f"{root}/changes"))]
        assert {"version": 2, "entity_path": "clients/capped"} in changes
        assert {"version": 2, "entity_path": "users/ANONYMOUS/clients/paired"} in changes

        for client_id in ("capped", "paired"):
            cluster.wait(lambda: _throttle_ms(port, "quoted", partition, client_id) > 0, 5,
                         f"broker 2 to throttle {client_id}")
        assert _throttle_ms(port, "quoted", partition, "unlimited") == 0

        with Client(cluster.address(1)) as client:
            assert client.admin.alter_client_quotas({PAIRED: {"producer_byte_rate": None}}) == {PAIRED: None}
            assert client.admin.describe_client_quotas() == {CAPPED: {"producer_byte_rate": 1024.0}}
        assert zk.exists(f"{root}/users/ANONYMOUS") is None  # emptied: gone with its parents
        cluster.wait(lambda: _throttle_ms(port, "quoted", partition, "paired") == 0, 5,
                     "broker 2 to stop throttling paired")

        # controller_mutation_rate, through broker 2's admin path: 11 windows' worth at once
        creator = ((CLIENT_ID, "creator"),)
        with Client(cluster.address(0)) as client:
            client.admin.alter_client_quotas({creator: {"controller_mutation_rate": 1}})
        with Client(cluster.address(2)) as client:
            cluster.wait(lambda: creator in client.admin.describe_client_quotas(), 5, "broker 2 to know creator's quota")
        creation = CREATE_TOPICS.request(timeout_ms=30_000, topics=[CREATE_TOPICS.request.CreatableTopic(
            name=f"made{i}", num_partitions=6, replication_factor=1, assignments=[], configs=[]) for i in range(3)])
        with connect(port) as sock:
            sock.sendall(frame(CREATE_TOPICS, 7, creation, 1, client_id="creator"))
            created = decode_response(CREATE_TOPICS.key, 7, recv_frame(sock))[1]
        # the topics are created concurrently: any one of them is the one past the quota
        assert sorted(t.error_code for t in created.topics) == [0, 0, ErrorCode.THROTTLING_QUOTA_EXCEEDED]
        assert created.throttle_time_ms > 0

        cluster.restart(2)
        cluster.wait_for_leaders("quoted")
        assert _throttle_ms(port, "quoted", partition, "capped") > 0
        with Client(cluster.address(2)) as client:
            assert client.admin.describe_client_quotas()[CAPPED] == {"producer_byte_rate": 1024.0}


def test_kafka_configs_sets_a_quota_through_one_broker_enforced_on_another_across_a_restart(
        tmp_path, zookeeper):
    """Kafka's ConfigCommand (kafka-configs.sh --bootstrap-server broker 0) sets a client
    id's quota; a broker that leads a partition the client produces to throttles it, and
    still does, and describes it, once every broker has been stopped and started again."""
    from tests.test_kafka_tools import CONFIGS, tool

    with Cluster(tmp_path, zookeeper, brokers=3, properties=FAST_FAILOVER) as cluster:
        cluster.create_topic("configured", partitions=3, replication_factor=1)
        tool(CONFIGS, "--bootstrap-server", cluster.address(0), "--entity-type", "clients",
             "--entity-name", "configured", "--alter", "--add-config", "producer_byte_rate=1024")

        def throttled_by_another() -> bool:
            partition = next(p for p in range(3) if cluster.leader_of("configured", p) != 0)
            port = cluster.processes[cluster.leader_of("configured", partition)].port
            return _throttle_ms(port, "configured", partition, "configured") > 0

        cluster.wait(throttled_by_another, 5, "a broker other than 0 to throttle the client")
        for broker_id in cluster.ids:
            cluster.stop(broker_id)
        cluster.start()
        cluster.wait_for_leaders("configured")
        assert throttled_by_another()
        described = tool(CONFIGS, "--bootstrap-server", cluster.address(2), "--entity-type", "clients",
                         "--entity-name", "configured", "--describe").stdout
        assert "Quota configs for client-id 'configured' are producer_byte_rate=1024.0" in described, described
