"""The controller (broker.cluster.controller) against a real ZooKeeper, at its boundary:
brokers here are real kazoo sessions registering /brokers/ids/<id>, with endpoints that
are small asyncio servers in the test, which decode the controller's requests with
wire.protocol, answer NONE and record what each broker was told. (Real broker processes
come in the cluster's integration tests.) Every wait is bounded."""

from __future__ import annotations

import asyncio
import struct
import time
import uuid
from types import SimpleNamespace

import pytest

from broker.cluster.controller import Controller
from broker.zookeeper.layout import (BrokerRegistration, EntityConfig, IsrChange, LeaderAndIsr,
                                      Listener, TopicAssignment)
from broker.zookeeper.store import ZkStore
from broker.config import BrokerConfig
from broker.errors import BrokerError
from broker.handlers import CLUSTER_HANDLERS, HANDLERS, elect_leaders as elect_leaders_handler
from wire.error_codes import ErrorCode
from wire.messages import (API_VERSIONS, CONTROLLED_SHUTDOWN, ELECT_LEADERS, LEADER_AND_ISR,
                           STOP_REPLICA, UPDATE_METADATA)
from wire.protocol import decode_request, encode_response

_SIZE = struct.Struct(">i")
TIMEOUT = 20.0


async def until(predicate, what: str, timeout: float = TIMEOUT):
    """The first truthy value of `predicate()`, polled; fails naming `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


class FakeBroker:
    """A broker as the controller sees it: a ZooKeeper session holding /brokers/ids/<id>
    and a listener that answers every request with NONE, keeping what it was told.
    Its ApiVersions lists ApiVersions only: the controller sends its fixed versions all
    the same, as brokers that do not list the inter-broker APIs get them in Kafka."""

    def __init__(self, broker_id: int, connect: str):
        self.broker_id = broker_id
        self.connect = connect
        self.received: list[tuple[int, int, object]] = []  # (api key, version, body)
        self.server: asyncio.AbstractServer | None = None
        self.store: ZkStore | None = None
        self.port = 0

    async def start(self) -> "FakeBroker":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        await self.register()
        return self

    async def register(self) -> None:
        """A new session and registration: a new broker epoch."""
        registration = BrokerRegistration((Listener("PLAINTEXT", "127.0.0.1", self.port),),
                                          int(time.time() * 1000))
        self.store = await asyncio.to_thread(ZkStore(self.connect, 6000).start, 15)
        await asyncio.to_thread(self.store.register_broker, self.broker_id, registration)

    async def lose_session(self) -> None:
        """The broker's session ends: ZooKeeper deletes its registration at once."""
        store, self.store = self.store, None
        await asyncio.to_thread(store.close)

    def epoch(self) -> int:
        return self.store.broker_epoch(self.broker_id)

    async def close(self) -> None:
        if self.store is not None:
            await self.lose_session()
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                header, body = decode_request(await reader.readexactly(size))
                key, version = header.request_api_key, header.request_api_version
                if key == API_VERSIONS.key:
                    response = API_VERSIONS.response(api_keys=[
                        API_VERSIONS.response.ApiVersion(api_key=API_VERSIONS.key,
                                                         min_version=0, max_version=4)])
                else:
                    self.received.append((key, version, body))
                    response = {LEADER_AND_ISR.key: LEADER_AND_ISR, UPDATE_METADATA.key:
                                UPDATE_METADATA, STOP_REPLICA.key: STOP_REPLICA}[key].response()
                frame = encode_response(key, version, header.correlation_id, response)
                writer.write(_SIZE.pack(len(frame)) + frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    # What the broker was told

    def bodies(self, api) -> list:
        return [body for key, _, body in self.received if key == api.key]

    def versions(self) -> set[tuple[int, int]]:
        return {(key, version) for key, version, _ in self.received}

    def leader_and_isr(self, topic: str, partition: int) -> list:
        """Every LeaderAndIsr partition state for topic-partition, oldest first."""
        return [(request, state) for request in self.bodies(LEADER_AND_ISR)
                for t in request.topic_states if t.topic_name == topic
                for state in t.partition_states if state.partition_index == partition]

    def metadata(self, topic: str, partition: int) -> list:
        return [(request, state) for request in self.bodies(UPDATE_METADATA)
                for t in request.topic_states if t.topic_name == topic
                for state in t.partition_states if state.partition_index == partition]

    def told(self, topic: str, partition: int, **expected) -> bool:
        """Whether its latest LeaderAndIsr for the partition has these field values."""
        states = self.leader_and_isr(topic, partition)
        return bool(states) and _matches(states[-1][1], expected)

    def knows(self, topic: str, partition: int, **expected) -> bool:
        """Whether its latest UpdateMetadata for the partition has these field values."""
        states = self.metadata(topic, partition)
        return bool(states) and _matches(states[-1][1], expected)

    def stops(self) -> list[tuple[str, int, bool]]:
        return [(t.topic_name, p.partition_index, p.delete_partition)
                for request in self.bodies(STOP_REPLICA) for t in request.topic_states
                for p in t.partition_states]


def _matches(struct, expected: dict) -> bool:
    return all(getattr(struct, name) == value for name, value in expected.items())


class Cluster:
    """A test's chroot with brokers, controllers and an admin session writing znodes."""

    def __init__(self, connect: str):
        self.connect = connect
        self.brokers: dict[int, FakeBroker] = {}
        self.controllers: list[tuple[Controller, ZkStore]] = []
        self.admin: ZkStore | None = None

    async def __aenter__(self) -> "Cluster":
        self.admin = await asyncio.to_thread(ZkStore(self.connect, 6000).start, 15)
        return self

    async def __aexit__(self, *exc) -> None:
        for controller, store in self.controllers:
            await controller.stop()
            await asyncio.to_thread(store.close)
        for broker in self.brokers.values():
            await broker.close()
        await asyncio.to_thread(self.admin.close)

    async def start_brokers(self, *ids: int) -> None:
        for broker_id in ids:
            self.brokers[broker_id] = await FakeBroker(broker_id, self.connect).start()

    async def start_controller(self, broker_id: int = 100, **settings) -> tuple[Controller, ZkStore]:
        settings.setdefault("auto_leader_rebalance_enable", False)
        config = BrokerConfig(node_id=broker_id, controller_socket_timeout_ms=5000, **settings)
        store = await asyncio.to_thread(ZkStore(self.connect, 6000).start, 15)
        controller = Controller(broker_id=broker_id, store=store, config=config)
        self.controllers.append((controller, store))
        await controller.start()
        return controller, store

    async def active_controller(self, **settings) -> Controller:
        controller, _ = await self.start_controller(**settings)
        await until(lambda: controller.is_active, "the controller to be elected")
        return controller

    async def create_topic(self, topic: str, partitions: dict, config: dict | None = None):
        if config is not None:
            await asyncio.to_thread(self.admin.client.create, f"/config/topics/{topic}",
                                    EntityConfig(config).to_json())
        assignment = TopicAssignment(uuid.uuid4(), partitions)
        assert await asyncio.to_thread(self.admin.create_topic, topic, assignment)
        return assignment

    def state(self, topic: str, partition: int):
        return self.admin.partition_state(topic, partition)

    async def wait_state(self, topic: str, partition: int, what: str, **expected) -> LeaderAndIsr:
        def current():
            found = self.state(topic, partition)
            return found and _matches(found.value, expected) and found.value
        return await until(current, f"{topic}-{partition}'s state: {what} {expected}")

    async def leader_changes_isr(self, topic: str, partition: int, isr: tuple[int, ...]):
        """What a leader does: a conditional write of the state on its version, then an
        ISR change notification."""
        found = self.state(topic, partition)
        new = LeaderAndIsr(found.value.leader, found.value.leader_epoch, isr,
                           found.value.controller_epoch)
        await asyncio.to_thread(self.admin.set_partition_state, topic, partition, new,
                                found.zk_version, controller_epoch_version=None)
        await asyncio.to_thread(self.admin.client.create, "/isr_change_notification/isr_change_",
                                IsrChange(((topic, partition),)).to_json(), sequence=True)


@pytest.fixture
def connect(zookeeper, request):
    """A fresh chroot per test, so that tests do not see each other's znodes."""
    return f"{zookeeper.hosts}/controller-{request.node.name}-{uuid.uuid4().hex[:8]}"


def run(connect: str, scenario) -> None:
    async def main():
        async with Cluster(connect) as cluster:
            await asyncio.wait_for(scenario(cluster), 120)
    asyncio.run(main())


# Election and fencing

def test_one_controller_and_another_once_its_session_ends(connect):
    async def scenario(cluster: Cluster):
        first, first_store = await cluster.start_controller(100)
        await until(lambda: first.is_active, "the first controller to be elected")
        second, _ = await cluster.start_controller(101)
        await until(lambda: cluster.admin.controller_id() == 100, "/controller to name 100")
        assert not second.is_active and second.epoch == -1
        assert first.epoch == cluster.admin.controller_epoch().value
        first_epoch = first.epoch

        await asyncio.to_thread(first_store.close)  # its session ends
        await until(lambda: second.is_active, "the second controller to take over")
        await until(lambda: not first.is_active, "the first one to resign")
        assert first.epoch == -1 and second.epoch == first_epoch + 1
        assert cluster.admin.controller_id() == 101
        assert cluster.admin.controller_epoch().value == second.epoch

    run(connect, scenario)


def test_a_fenced_controller_resigns_and_its_write_is_refused(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        controller = await cluster.active_controller()
        old_epoch = controller.epoch
        await cluster.create_topic("t", {0: (1, 2)})
        await cluster.wait_state("t", 0, "initial", leader=1, isr=(1, 2))

        # Another controller's election moved /controller_epoch on under this one.
        epoch, version = cluster.admin.controller_epoch()
        cluster.admin.client.set("/controller_epoch", str(epoch + 1).encode(), version)
        await cluster.brokers[1].lose_session()
        # Its failover write is refused; it resigns, and (as /controller is still its
        # own) frees it and wins again, with a new epoch, before electing.
        state = await cluster.wait_state("t", 0, "failed over", leader=2)
        assert state.controller_epoch == old_epoch + 2 == controller.epoch
        assert state.leader_epoch == 1  # one write: the fenced one never landed
        assert not [s for r, s in cluster.brokers[2].leader_and_isr("t", 0)
                    if r.controller_epoch == old_epoch and s.leader == 2]

    run(connect, scenario)


# Partition states

def test_a_new_topic_gets_its_first_states_from_the_live_replicas(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)  # 3 never starts
        controller = await cluster.active_controller()
        assignment = await cluster.create_topic("t", {0: (3, 1, 2), 1: (2, 3, 1)})
        await cluster.wait_state("t", 0, "initial", leader=1, isr=(1, 2), leader_epoch=0,
                                 controller_epoch=controller.epoch)
        await cluster.wait_state("t", 1, "initial", leader=2, isr=(2, 1), leader_epoch=0)
        for broker in cluster.brokers.values():
            await until(lambda: broker.told("t", 0, leader=1, isr=[1, 2], is_new=True,
                                            replicas=[3, 1, 2], partition_epoch=0)
                        and broker.told("t", 1, leader=2, is_new=True),
                        f"broker {broker.broker_id}'s LeaderAndIsr")
            await until(lambda: broker.knows("t", 0, leader=1, offline_replicas=[3]),
                        f"broker {broker.broker_id}'s UpdateMetadata")
            request = broker.bodies(LEADER_AND_ISR)[-1]
            assert request.controller_id == 100 and request.controller_epoch == controller.epoch
            assert request.broker_epoch == broker.epoch()
            assert request.topic_states[0].topic_id == assignment.topic_id
            assert {leader.broker_id for leader in request.live_leaders} == {1, 2}
            metadata = broker.bodies(UPDATE_METADATA)[-1]
            assert sorted(b.id for b in metadata.live_brokers) == [1, 2]
            endpoint = next(b for b in metadata.live_brokers if b.id == 1).endpoints[0]
            assert (endpoint.host, endpoint.port, endpoint.listener, endpoint.security_protocol) \
                == ("127.0.0.1", cluster.brokers[1].port, "PLAINTEXT", 0)
            assert broker.versions() <= {(LEADER_AND_ISR.key, 6), (UPDATE_METADATA.key, 7)}

    run(connect, scenario)


def test_topics_before_the_controller_are_initialised_at_its_failover(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        await cluster.create_topic("t", {0: (2, 1)})
        controller = await cluster.active_controller()
        await cluster.wait_state("t", 0, "initial", leader=2, isr=(2, 1),
                                 controller_epoch=controller.epoch)
        for broker in cluster.brokers.values():
            await until(lambda: broker.told("t", 0, leader=2), "LeaderAndIsr")
            assert broker.bodies(LEADER_AND_ISR)[0].type == 2  # FULL (Kafka's value): every partition it hosts

    run(connect, scenario)


def test_a_dead_follower_leaves_the_isr_and_a_dead_leader_is_replaced(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2, 3)
        await cluster.active_controller()
        await cluster.create_topic("t", {0: (1, 2, 3)})
        await cluster.wait_state("t", 0, "initial", leader=1, isr=(1, 2, 3), leader_epoch=0)

        await cluster.brokers[3].lose_session()
        await cluster.wait_state("t", 0, "follower 3 removed", leader=1, isr=(1, 2),
                                 leader_epoch=1)
        for broker_id in (1, 2):
            broker = cluster.brokers[broker_id]
            await until(lambda: broker.told("t", 0, leader=1, isr=[1, 2], leader_epoch=1),
                        f"broker {broker_id} told of the ISR")
            await until(lambda: broker.knows("t", 0, isr=[1, 2], offline_replicas=[3]),
                        f"broker {broker_id}'s metadata")

        await cluster.brokers[1].lose_session()
        await cluster.wait_state("t", 0, "failed over", leader=2, isr=(2,), leader_epoch=2)
        broker = cluster.brokers[2]
        await until(lambda: broker.told("t", 0, leader=2, isr=[2], leader_epoch=2),
                    "the survivor's LeaderAndIsr")
        await until(lambda: broker.knows("t", 0, leader=2, offline_replicas=[1, 3]),
                    "the survivor's metadata")

    run(connect, scenario)


def test_offline_partitions_with_and_without_unclean_election(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        await cluster.active_controller()
        await cluster.create_topic("clean", {0: (1, 2)})
        await cluster.create_topic("unclean", {0: (1, 2)},
                                   {"unclean.leader.election.enable": "true"})
        for topic in ("clean", "unclean"):
            await cluster.wait_state(topic, 0, "initial", leader=1, isr=(1, 2))
        await cluster.brokers[2].lose_session()
        for topic in ("clean", "unclean"):
            await cluster.wait_state(topic, 0, "2 removed", leader=1, isr=(1,))
        await cluster.brokers[1].lose_session()
        for topic in ("clean", "unclean"):  # no live replica: offline, the ISR kept
            await cluster.wait_state(topic, 0, "offline", leader=-1, isr=(1,), leader_epoch=2)

        await cluster.brokers[2].register()  # out of sync, back
        broker = cluster.brokers[2]
        await cluster.wait_state("unclean", 0, "unclean leader", leader=2, isr=(2,),
                                 leader_epoch=3)
        await until(lambda: broker.told("unclean", 0, leader=2, leader_epoch=3),
                    "the unclean leader's LeaderAndIsr")
        await until(lambda: broker.knows("clean", 0, leader=-1), "the offline partition's metadata")
        assert broker.bodies(LEADER_AND_ISR)[-1].type == 2  # FULL (Kafka's value): all it hosts, on its start
        assert cluster.state("clean", 0).value == LeaderAndIsr(-1, 2, (1,), cluster.controllers[0][0].epoch)

        await cluster.brokers[1].register()  # the last in-sync replica is back
        await cluster.wait_state("clean", 0, "clean leader", leader=1, isr=(1,), leader_epoch=3)
        await until(lambda: cluster.brokers[1].told("clean", 0, leader=1, leader_epoch=3),
                    "the returning broker's LeaderAndIsr")
        await until(lambda: cluster.brokers[1].told("unclean", 0, leader=2),
                    "the returning broker told of the other partition as a follower")

    run(connect, scenario)


def test_added_partitions_get_their_first_states(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        await cluster.active_controller()
        assignment = await cluster.create_topic("t", {0: (1, 2)})
        await cluster.wait_state("t", 0, "initial", leader=1)
        grown = TopicAssignment(assignment.topic_id, {0: (1, 2), 1: (2, 1), 2: (1, 2)})
        await asyncio.to_thread(cluster.admin.set_topic_assignment, "t", grown, 0)
        await cluster.wait_state("t", 1, "added", leader=2, isr=(2, 1), leader_epoch=0)
        await cluster.wait_state("t", 2, "added", leader=1, isr=(1, 2), leader_epoch=0)
        for broker in cluster.brokers.values():
            await until(lambda: broker.told("t", 1, leader=2, is_new=True)
                        and broker.told("t", 2, leader=1, is_new=True), "LeaderAndIsr")
            await until(lambda: broker.knows("t", 2, leader=1), "UpdateMetadata")
        assert cluster.state("t", 0).value.leader_epoch == 0  # untouched

    run(connect, scenario)


# Topic deletion and ISR changes

def test_topic_deletion_stops_the_replicas_then_removes_the_znodes(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        await cluster.active_controller()
        await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)}, {"retention.ms": "1000"})
        await cluster.create_topic("kept", {0: (1, 2)})
        await cluster.wait_state("t", 1, "initial", leader=2)
        await cluster.wait_state("kept", 0, "initial", leader=1)
        client = cluster.admin.client
        await asyncio.to_thread(client.create, "/admin/delete_topics/t")
        await asyncio.to_thread(client.create, "/admin/delete_topics/never-was")

        await until(lambda: client.exists("/brokers/topics/t") is None, "t's znodes to go")
        await until(lambda: client.get_children("/admin/delete_topics") == [],
                    "the delete requests to go")
        assert client.exists("/config/topics/t") is None
        assert client.exists("/brokers/topics/kept/partitions/0/state") is not None
        for broker in cluster.brokers.values():
            assert sorted(broker.stops()) == [("t", 0, True), ("t", 1, True)]
            assert all(request.topic_states[0].partition_states[0].leader_epoch == -2
                       for request in broker.bodies(STOP_REPLICA))
            # Told that the partitions are being deleted (leader -2) before the StopReplica.
            keys = [key for key, _, _ in broker.received]
            assert broker.knows("t", 0, leader=-2) and broker.knows("t", 1, leader=-2)
            told = next(i for i, (key, _, body) in enumerate(broker.received)
                        if key == UPDATE_METADATA.key and any(
                            s.leader == -2 for t in body.topic_states for s in t.partition_states))
            assert told < keys.index(STOP_REPLICA.key)
            assert (STOP_REPLICA.key, 3) in broker.versions()
        assert not cluster.brokers[1].told("t", 0, leader=-2)

    run(connect, scenario)


def test_isr_change_notifications_reach_every_broker_and_are_consumed(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2, 3)
        await cluster.active_controller()
        await cluster.create_topic("t", {0: (1, 2, 3)})
        await cluster.wait_state("t", 0, "initial", isr=(1, 2, 3))
        await cluster.leader_changes_isr("t", 0, (1, 3))
        for broker in cluster.brokers.values():
            await until(lambda: broker.knows("t", 0, isr=[1, 3], zk_version=1),
                        f"broker {broker.broker_id}'s metadata to show the new ISR")
        client = cluster.admin.client
        await until(lambda: client.get_children("/isr_change_notification") == [],
                    "the notification to be deleted")
        assert cluster.state("t", 0).value.isr == (1, 3)  # the leader's write stands

    run(connect, scenario)


# ControlledShutdown and ElectLeaders

def test_controlled_shutdown_moves_leadership_and_followers_out(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2, 3)
        controller = await cluster.active_controller()
        await cluster.create_topic("led", {0: (1, 2, 3)})
        await cluster.create_topic("follows", {0: (2, 1, 3)})
        await cluster.create_topic("single", {0: (1,)})
        await cluster.create_topic("stuck", {0: (1, 2)})
        for topic in ("led", "follows", "single", "stuck"):
            await cluster.wait_state(topic, 0, "initial", leader_epoch=0)
        await cluster.leader_changes_isr("stuck", 0, (1,))
        await until(lambda: cluster.admin.client.get_children("/isr_change_notification") == [],
                    "the ISR change to be consumed")
        epoch = cluster.brokers[1].epoch()

        with pytest.raises(BrokerError) as stale:
            await controller.controlled_shutdown(1, epoch - 1)
        assert stale.value.code == ErrorCode.STALE_BROKER_EPOCH
        other, _ = await cluster.start_controller(101)
        with pytest.raises(BrokerError) as not_controller:
            await other.controlled_shutdown(1, epoch)
        assert not_controller.value.code == ErrorCode.NOT_CONTROLLER

        request = CONTROLLED_SHUTDOWN.request(broker_id=1, broker_epoch=epoch)
        header = SimpleNamespace(request_api_version=3)
        answer = await elect_leaders_handler.controlled_shutdown(
            SimpleNamespace(controller=other, node_id=101, authorizer=None), header, request, "127.0.0.1")
        assert answer.error_code == ErrorCode.NOT_CONTROLLER
        answer = await elect_leaders_handler.controlled_shutdown(
            SimpleNamespace(controller=controller, node_id=100, authorizer=None), header, request, "127.0.0.1")
        assert answer.error_code == ErrorCode.NONE
        # No other in-sync replica for "stuck"; "single" (one replica) is not counted.
        assert [(p.topic_name, p.partition_index) for p in answer.remaining_partitions] == \
            [("stuck", 0)]
        assert cluster.state("led", 0).value == LeaderAndIsr(2, 1, (2, 3), controller.epoch)
        assert cluster.state("follows", 0).value == LeaderAndIsr(2, 1, (2, 3), controller.epoch)
        assert cluster.state("single", 0).value.leader == 1
        broker = cluster.brokers[1]
        await until(lambda: ("follows", 0, False) in broker.stops(), "StopReplica to broker 1")
        await until(lambda: broker.told("led", 0, leader=2, isr=[2, 3]), "broker 1 told it follows")
        await until(lambda: cluster.brokers[2].told("led", 0, leader=2)
                    and cluster.brokers[3].told("follows", 0, isr=[2, 3]), "the others")
        assert not broker.told("follows", 0, leader_epoch=1)  # only stopped, not told

        # Its replicas are offline from now on, and the leaders hear so before they hear of
        # ISRs without it: none of them takes it back in.
        leader = cluster.brokers[2]
        await until(lambda: leader.knows("follows", 0, isr=[2, 3], offline_replicas=[1]),
                    "broker 2 told broker 1's replica is offline")

        def first(api, **expected) -> int:
            return next(i for i, (key, _, body) in enumerate(leader.received) if key == api.key
                        and any(_matches(state, expected) for topic in body.topic_states
                                if topic.topic_name == "follows" for state in topic.partition_states))

        assert first(UPDATE_METADATA, offline_replicas=[1]) < first(LEADER_AND_ISR, isr=[2, 3])
        assert cluster.brokers[3].knows("led", 0, offline_replicas=[1])

        # A shutting-down broker is no candidate when its new leader then dies.
        await cluster.brokers[2].lose_session()
        await cluster.wait_state("led", 0, "failed over past 1", leader=3, isr=(3,))

    run(connect, scenario)


def test_elect_leaders_preferred_and_unclean(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2, 3)
        controller = await cluster.active_controller()
        await cluster.create_topic("t", {0: (1, 2, 3)})
        await cluster.create_topic("u", {0: (3, 1), 1: (3,)})
        await cluster.wait_state("t", 0, "initial", leader=1)
        await cluster.wait_state("u", 1, "initial", leader=3)

        await cluster.brokers[1].lose_session()
        await cluster.wait_state("t", 0, "failed over", leader=2, isr=(2, 3))
        await cluster.brokers[1].register()
        await until(lambda: cluster.brokers[1].told("t", 0, leader=2), "broker 1 back")
        results = await controller.elect_leaders(0, [("t", 0), ("nope", 0)])
        assert results[("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # not in ISR
        assert results[("nope", 0)][0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await cluster.leader_changes_isr("t", 0, (2, 3, 1))
        await until(lambda: cluster.brokers[3].knows("t", 0, isr=[2, 3, 1]), "the ISR change")
        assert await controller.elect_leaders(0, [("t", 0)]) == {("t", 0): (ErrorCode.NONE, None)}
        assert cluster.state("t", 0).value == LeaderAndIsr(1, 2, (2, 3, 1), controller.epoch)
        await until(lambda: cluster.brokers[2].told("t", 0, leader=1, leader_epoch=2),
                    "the preferred leader's LeaderAndIsr")
        again = await controller.elect_leaders(0, None)
        assert again[("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED

        # Unclean: u-0's ISR is 3 alone when 3 dies; u-1 has no other replica at all.
        await cluster.leader_changes_isr("u", 0, (3,))
        await until(lambda: cluster.brokers[1].knows("u", 0, isr=[3]), "u-0's ISR change")
        await cluster.brokers[3].lose_session()
        await cluster.wait_state("u", 0, "offline", leader=-1, isr=(3,))
        results = await controller.elect_leaders(1, [("u", 0), ("u", 1), ("t", 0)])
        assert results[("u", 0)][0] == ErrorCode.NONE
        assert results[("u", 1)][0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
        assert results[("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
        assert cluster.state("u", 0).value.leader == 1 and cluster.state("u", 0).value.isr == (1,)
        await until(lambda: cluster.brokers[1].told("u", 0, leader=1), "the unclean leader")

        # The handler: the controller's answer, or NOT_CONTROLLER elsewhere.
        request = ELECT_LEADERS.request(election_type=0, topic_partitions=[
            ELECT_LEADERS.request.TopicPartitions(topic="t", partitions=[0])])
        header = SimpleNamespace(request_api_version=1)
        answer = await elect_leaders_handler.handle(SimpleNamespace(controller=controller, cluster=True, node_id=100,
                                                                    authorizer=None),
                                                    header, request, "127.0.0.1")
        assert answer.error_code == 0
        [result] = answer.replica_election_results
        assert (result.topic, result.partition_result[0].error_code) == \
            ("t", ErrorCode.ELECTION_NOT_NEEDED)
        elsewhere = SimpleNamespace(controller=None, cluster=True, node_id=7, authorizer=None)  # not the controller
        answer = await elect_leaders_handler.handle(
            elsewhere, SimpleNamespace(request_api_version=1), request, "127.0.0.1")
        assert answer.error_code == ErrorCode.NOT_CONTROLLER
        answer = await elect_leaders_handler.handle(
            elsewhere, SimpleNamespace(request_api_version=0), request, "127.0.0.1")
        assert answer.replica_election_results[0].partition_result[0].error_code == \
            ErrorCode.NOT_CONTROLLER
        assert ELECT_LEADERS.key in HANDLERS and CONTROLLED_SHUTDOWN.key in CLUSTER_HANDLERS

    run(connect, scenario)


def test_auto_rebalance_gives_preferred_replicas_their_leadership_back(connect):
    async def scenario(cluster: Cluster):
        await cluster.start_brokers(1, 2)
        await cluster.active_controller(auto_leader_rebalance_enable=True,
                                        leader_imbalance_check_interval_seconds=1,
                                        leader_imbalance_per_broker_percentage=10)
        await cluster.create_topic("t", {0: (1, 2), 1: (2, 1)})
        await cluster.wait_state("t", 0, "initial", leader=1)
        await cluster.brokers[1].lose_session()
        await cluster.wait_state("t", 0, "failed over", leader=2, isr=(2,))
        await cluster.brokers[1].register()
        await until(lambda: cluster.brokers[1].told("t", 0, leader=2), "broker 1 back")
        await cluster.leader_changes_isr("t", 0, (2, 1))  # caught up
        await cluster.wait_state("t", 0, "rebalanced", leader=1, isr=(2, 1))
        await until(lambda: cluster.brokers[2].told("t", 0, leader=1), "the new leader sent")
        assert cluster.state("t", 1).value.leader == 2  # balanced already

    run(connect, scenario)
