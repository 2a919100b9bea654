"""Consumer groups in a cluster (issue 18): real ZooKeeper, three real broker processes
(tests/cluster.py), real clients.

- The coordinator follows the leadership of `__consumer_offsets` on the coordinator
  itself, with real logs: resigning a partition drops its groups and answers their
  waiting JoinGroup NOT_COORDINATOR; leading it again replays only that partition
  (COORDINATOR_LOAD_IN_PROGRESS meanwhile, but a Heartbeat passes and a SyncGroup is
  REBALANCE_IN_PROGRESS, as in Kafka; other groups served) and brings the group,
  its static member and its offsets back; a deposed coordinator's write is refused; a
  static member's restart is stored and survives the next reload. A partition suspended
  (as after a stall) answers COORDINATOR_LOAD_IN_PROGRESS and expires nobody until
  ZooKeeper's state of it resumes it (its group as it was) or resigns it.
- Sluice's client waits for a moving or loading coordinator until its retry timeout,
  whatever its retry count (scripted answers).
- FindCoordinator from every broker names the same broker: the leader of the
  `__consumer_offsets` partition Kafka's placement gives the group (Java's String
  hashCode, computed here independently). The other brokers answer NOT_COORDINATOR to
  the group's OffsetCommit, JoinGroup, Heartbeat, OffsetFetch and DescribeGroups, and do
  not list it; the coordinator accepts the commit.
- `sluice groups` list (every broker's groups, with their coordinators), describe and
  reset-offsets, bootstrapped on a broker that coordinates none of those groups.
- A group of three mixed consumers (confluent-kafka, kafka-python, aiokafka) on an RF=3
  topic consumes while an idempotent producer writes; the group coordinator's broker is
  SIGKILLed. The group carries on with the new coordinator. Counted by name, all 0:
  "lost" (acknowledged records no member processed), "committed offsets going
  backwards" (between successive OffsetFetch samples of the group), "lost commits"
  (acknowledged commits missing after the failover, and at the end), and, with the
  topic read back at the end by confluent-kafka and kafka-python beside the producer's
  acknowledgements, "non-monotonic offsets" and "inconsistent offsets between
  consumers" (tests/anomalies.py). The chaos version
  (`make chaos`) injects SLUICE_CHAOS_ROUNDS (default 5) faults drawn from the seed
  (printed; SLUICE_SEED replays it): SIGKILL of the coordinator, SIGSTOP of it past its
  session, SIGKILL of another broker.
- The coordinator of a confluent-kafka and an aiokafka member SIGSTOPped past its
  ZooKeeper session and the members' session timeout, then SIGCONTed: the resumed broker
  expires no member and never answers for the group again (COORDINATOR_LOAD_IN_PROGRESS
  while it checks its leadership in ZooKeeper, then NOT_COORDINATOR); both members are
  in a Stable group with every partition within two session timeouts.
- A KIP-848 consumer group's coordinator SIGKILLed while a member has partitions to
  revoke: the new coordinator has the group as it was and completes the rebalance,
  revocation before assignment.
- A replicated `__consumer_offsets` partition is compacted by the log cleaner on every
  replica and survives SIGKILL of its leader: the new coordinator replays its own
  compacted replica to every last offset.
- On the coordinator itself: writes are answered and applied only once replicated;
  expiry leaves alone only the offsets (and groups) that writes awaiting replication
  are about.
- Constant commits on a replicated `__consumer_offsets` partition starve neither its
  compaction nor offset expiry, even with every commit waiting for a stopped follower.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from broker.config import BrokerConfig
from broker.errors import BrokerError
from broker.groups.offsets_log import TOPIC as OFFSETS_TOPIC, CommittedOffset
from tests.anomalies import offset_anomalies, read_by_two
from tests.cluster import FAST_FAILOVER, Cluster, Workload, pick_seed
from tests.log_files import log_bytes
from tests.manual_clock import ManualClock
from tests.test_compaction import cleaned_to
from tests.test_client_mock_cluster import ScriptedBroker, start_scripted
from tests.support.polling import wait_for
from tests.replicas import group_coordinator, topic_manager
from tests.test_consumer_groups import describe as describe_consumer_group, heartbeat, join, owned
from tests.test_groups import Raw, Worker, _commit, _java_partition, _join, produce, wait_stable
from sluice_client import EARLIEST, AsyncClient, Client, ClientError
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.messages import (DESCRIBE_GROUPS, FIND_COORDINATOR, HEARTBEAT, LIST_GROUPS, METADATA,
                           OFFSET_FETCH)

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parent.parent
PROPERTIES = {**FAST_FAILOVER, "group.initial.rebalance.delay.ms": "300",
              "group.min.session.timeout.ms": "1000",
              # Small offsets segments compacted often: the cleaner runs during the failovers too.
              "offsets.topic.segment.bytes": "4096", "log.cleaner.backoff.ms": "200",
              "offsets.retention.check.interval.ms": "300"}
OFFSETS_PARTITIONS = int(FAST_FAILOVER["offsets.topic.num.partitions"])
SESSION_MS = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, zookeeper):
    """One cluster for the module's cases; the failover case, which kills a broker, runs last."""
    with Cluster(tmp_path_factory.mktemp("groups-cluster"), zookeeper, brokers=3,
                 properties=PROPERTIES) as running:
        yield running


def groups_on_every_partition(prefix: str, partitions: int = OFFSETS_PARTITIONS) -> dict[int, str]:
    """A group id for each partition of `__consumer_offsets`, by partition."""
    found: dict[int, str] = {}
    for i in range(1000):
        found.setdefault(_java_partition(f"{prefix}-{i}", partitions), f"{prefix}-{i}")
        if len(found) == partitions:
            return found
    raise AssertionError("no group ids found for every partition")


def coordinator_of(cluster: Cluster, group: str, timeout: float = 60.0) -> int:
    """The coordinator FindCoordinator names, once `__consumer_offsets` exists and has a
    live leader for the group's partition."""
    def found():
        try:
            with Client(cluster.bootstrap_servers, retries=0, retry_timeout=2,
                        call_timeout=10) as client:
                node = client.find_coordinator(group).node_id
        except (ClientError, KafkaError, TimeoutError):
            return None
        return [node] if node in cluster.live else None

    return cluster.wait(found, timeout, f"a live coordinator of {group}")[0]


def find_at(cluster: Cluster, broker_id: int, group: str) -> tuple[int, int]:
    """(error code, node id) of FindCoordinator v4 sent to one broker."""
    raw = Raw(cluster.processes[broker_id].port)
    try:
        body = raw(FIND_COORDINATOR, 4, key_type=0, coordinator_keys=[group])
    finally:
        raw.close()
    (answer,) = body.coordinators
    return answer.error_code, answer.node_id


# -- the coordinator itself, following a partition's leadership ------------------------------

def code_of(call) -> int:
    """The Kafka error code `call()` raises, NONE when it returns."""
    try:
        call()
    except BrokerError as exc:
        return exc.code
    return ErrorCode.NONE


def test_partition_load_and_unload_follow_leadership(tmp_path):
    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=2,
                          group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config)
    topics.load()
    topics.create("t", 2, {})
    groups = group_coordinator(config, topics)
    moving, staying = (groups_on_every_partition("unit", 2)[i] for i in (0, 1))

    async def scenario():
        async def join(member_id="", instance=None):
            return await groups.join(moving, member_id, instance, "client", "host", 10_000, 10_000,
                                     "consumer", [("range", b"")], require_known_member_id=False)

        # 600 commits in the moving group's partition: its load yields to the loop.
        for offset in range(600):
            assert await groups.offsets.commit(moving, -1, "", None, {("t", 0): CommittedOffset(
                offset, -1, "", 0)}) == {("t", 0): 0}
        assert await groups.offsets.commit(staying, -1, "", None, {("t", 1): CommittedOffset(7, -1, "", 0)}) \
            == {("t", 1): 0}
        first = await join(instance="static-1")  # a static member
        await groups.sync(moving, first.generation, first.member_id, "static-1", None, None,
                          {first.member_id: b"all"})
        second = asyncio.ensure_future(join())  # waits for the first member to rejoin
        await asyncio.sleep(0.05)
        assert not second.done() and groups.groups[moving].state == "PreparingRebalance"

        index = groups.partition_for(moving)
        partition = topics.partition(OFFSETS_TOPIC, index)
        groups.runtime.coordinated.resigned(index)  # a LeaderAndIsr made this broker a follower
        with pytest.raises(BrokerError) as refused:
            await second
        assert refused.value.code == ErrorCode.NOT_COORDINATOR
        assert moving not in groups.groups and groups.offsets.committed(staying)
        assert code_of(lambda: groups.offsets.committed(moving)) == ErrorCode.NOT_COORDINATOR
        assert code_of(lambda: groups.heartbeat(moving, first.generation, first.member_id, None)) \
            == ErrorCode.NOT_COORDINATOR
        with pytest.raises(BrokerError) as refused:
            await join()
        assert refused.value.code == ErrorCode.NOT_COORDINATOR
        assert [g.group_id for g in groups.listed()] == [staying]

        partition.make_leader(partition.leader_epoch + 1, [0], [0])
        groups.runtime.coordinated.elected(partition)
        await asyncio.sleep(0)  # the load runs up to its first yield
        assert code_of(lambda: groups.offsets.committed(moving)) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        assert code_of(groups.listed) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        # Kafka's answers while loading: a heartbeat passes blindly, a SyncGroup sends the
        # member back to JoinGroup (aiokafka takes COORDINATOR_LOAD_IN_PROGRESS there for fatal).
        assert code_of(lambda: groups.heartbeat(moving, first.generation, first.member_id, None)) \
            == ErrorCode.NONE
        with pytest.raises(BrokerError) as refused:
            await groups.sync(moving, first.generation, first.member_id, None, None, None, {})
        assert refused.value.code == ErrorCode.REBALANCE_IN_PROGRESS
        assert groups.offsets.committed(staying)[("t", 1)].offset == 7  # other partitions go on
        deadline = time.monotonic() + 10
        while code_of(lambda: groups.offsets.committed(moving)) != ErrorCode.NONE:
            assert time.monotonic() < deadline, "the partition did not load within 10 s"
            await asyncio.sleep(0.01)
        assert groups.offsets.committed(moving)[("t", 0)].offset == 599
        restored = groups.groups[moving]
        assert (restored.state, restored.generation, list(restored.members)) == \
            ("Stable", first.generation, [first.member_id])
        groups.heartbeat(moving, first.generation, first.member_id, None)
        assert sorted(g.group_id for g in groups.listed()) == sorted([moving, staying])

        # Deposed without being told yet (a newer leader epoch elsewhere): writes refused.
        partition.make_leader(partition.leader_epoch + 1, [0], [0])
        with pytest.raises(BrokerError) as refused:
            await groups.offsets.commit(moving, first.generation, first.member_id, None,
                                        {("t", 0): CommittedOffset(1000, -1, "", 0)})
        assert refused.value.code == ErrorCode.NOT_COORDINATOR
        groups.runtime.coordinated.elected(partition)
        wait_loaded = time.monotonic() + 10
        while code_of(lambda: groups.offsets.committed(moving)) != ErrorCode.NONE:
            assert time.monotonic() < wait_loaded
            await asyncio.sleep(0.01)
        assert groups.offsets.committed(moving)[("t", 0)].offset == 599  # the refused write is nowhere
        assert groups.groups[moving] is restored  # led on at the new epoch: kept, not reloaded
        groups.heartbeat(moving, first.generation, first.member_id, None)

        # The static member restarts (a new member id, same instance id): its assignment
        # comes back without a rebalance, the replacement stored before the answer.
        again = await join(instance="static-1")
        assert (again.error, again.generation) == (0, first.generation) and again.member_id != first.member_id
        _, _, assignment = await groups.sync(moving, again.generation, again.member_id, "static-1",
                                             None, None, {})
        assert assignment == b"all" and groups.groups[moving].state == "Stable"
        groups.runtime.coordinated.resigned(index)
        partition.make_leader(partition.leader_epoch + 1, [0], [0])
        groups.runtime.coordinated.elected(partition)
        while code_of(lambda: groups.offsets.committed(moving)) != ErrorCode.NONE:
            assert time.monotonic() < wait_loaded
            await asyncio.sleep(0.01)
        assert groups.groups[moving].static_members == {"static-1": again.member_id}

    asyncio.run(scenario())
    topics.close()


def test_suspended_partition_waits_for_zookeepers_word(tmp_path):
    """On the coordinator itself, with a manual clock: a partition suspended (as after a
    stall or a lost ZooKeeper session) answers COORDINATOR_LOAD_IN_PROGRESS, a Heartbeat
    passes blindly (and counts), and no member expires, however long it lasts. ZooKeeper
    naming this broker at the coordinator's epoch resumes it with its group as it was; an
    older epoch there (a LeaderAndIsr applied since the read) too; a newer one resigns it."""
    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=1,
                          group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config)
    topics.load()
    topics.create("t", 1, {})
    clock = ManualClock()
    groups = group_coordinator(config, topics, clock)

    async def scenario():
        joined = await groups.join("g", "", None, "client", "host", 10_000, 10_000, "consumer",
                                   [("range", b"")], require_known_member_id=False)
        await groups.sync("g", joined.generation, joined.member_id, None, None, None,
                          {joined.member_id: b"all"})

        def heartbeat() -> int:
            return code_of(lambda: groups.heartbeat("g", joined.generation, joined.member_id, None))

        coordinated = groups.runtime.coordinated
        (index,) = coordinated.coordinated()
        epoch = topics.partition(OFFSETS_TOPIC, index).leader_epoch
        coordinated.suspend()
        assert code_of(lambda: groups.offsets.committed("g")) == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        await clock.advance(30)  # three sessions: nobody expires while in doubt
        groups.expire_sessions()
        assert heartbeat() == ErrorCode.NONE and coordinated.coordinated() == []
        coordinated.confirm(index, True, epoch)
        groups.expire_sessions()  # the blind heartbeat counted
        assert heartbeat() == ErrorCode.NONE and list(groups.groups["g"].members) == [joined.member_id]

        coordinated.suspend()
        coordinated.confirm(index, False, epoch - 1)
        assert heartbeat() == ErrorCode.NONE

        coordinated.suspend()
        coordinated.confirm(index, True, epoch + 1)
        assert heartbeat() == ErrorCode.NOT_COORDINATOR and "g" not in groups.groups

    asyncio.run(scenario())
    topics.close()


def test_writes_are_answered_once_replicated(tmp_path):
    """On the coordinator itself, its offsets partition led with a follower in the ISR
    that fetches when the test says: an OffsetCommit and the leader's SyncGroup are
    answered, and applied, only once the follower has the records; a commit whose
    partition moves away meanwhile is NOT_COORDINATOR and never applied; with the ISR
    below min.insync.replicas, COORDINATOR_NOT_AVAILABLE, and the SyncGroup's members
    get that error too."""
    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=1,
                          group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config)
    topics.load()
    topics.create("t", 1, {})
    topics.create(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact", "min.insync.replicas": "2"})
    groups = group_coordinator(config, topics)
    asyncio.run(groups.load())
    partition = topics.partition(OFFSETS_TOPIC, 0)
    tp = ("t", 0)

    async def elected(epoch: int, isr: list[int]) -> None:
        partition.make_leader(epoch, [0, 1], isr)
        groups.runtime.coordinated.elected(partition)
        for _ in range(500):
            if groups.runtime.coordinated.coordinated() == [0]:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the partition did not load")

    def commit(offset: int, group: str = "g"):
        return asyncio.ensure_future(groups.offsets.commit(group, -1, "", None,
                                                           {tp: CommittedOffset(offset, -1, "", 0)}))

    async def scenario():
        await elected(partition.leader_epoch + 1, [0, 1])
        pending = commit(5)
        await asyncio.sleep(0.05)
        assert not pending.done() and groups.offsets.committed("g") == {}  # not replicated: not applied
        partition.update_follower(1, partition.log_end_offset)
        assert await pending == {tp: 0} and groups.offsets.committed("g")[tp].offset == 5

        joined = await groups.join("s", "", None, "c", "h", 10_000, 10_000, "consumer",
                                   [("range", b"")], require_known_member_id=False)
        sync = asyncio.ensure_future(groups.sync("s", joined.generation, joined.member_id, None,
                                                 None, None, {joined.member_id: b"mine"}))
        await asyncio.sleep(0.05)
        assert not sync.done() and groups.groups["s"].state == "CompletingRebalance"
        partition.update_follower(1, partition.log_end_offset)
        assert (await sync)[2] == b"mine" and groups.groups["s"].state == "Stable"

        pending = commit(6)
        await asyncio.sleep(0.05)
        partition.make_follower(1, partition.leader_epoch + 1, [0, 1], [0, 1])
        groups.runtime.coordinated.resigned(0)
        with pytest.raises(BrokerError) as refused:
            await pending
        assert refused.value.code == ErrorCode.NOT_COORDINATOR

        await elected(partition.leader_epoch + 1, [0])  # the ISR below min.insync.replicas
        assert groups.offsets.committed("g")[tp].offset in (5, 6)  # 6 only if the new leader kept it
        kept = groups.offsets.committed("g")[tp].offset
        with pytest.raises(BrokerError) as refused:
            await commit(7)
        assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert groups.offsets.committed("g")[tp].offset == kept
        joined = await groups.join("s2", "", None, "c", "h", 10_000, 10_000, "consumer",
                                   [("range", b"")], require_known_member_id=False)
        with pytest.raises(BrokerError) as refused:
            await groups.sync("s2", joined.generation, joined.member_id, None, None, None,
                              {joined.member_id: b"mine"})
        assert refused.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert groups.groups["s2"].state == "PreparingRebalance"  # it rebalances, as Kafka's

    asyncio.run(scenario())
    topics.close()


def test_expiry_leaves_alone_only_the_offsets_being_written(tmp_path):
    """On the coordinator itself, its offsets partition led with a follower in the ISR
    that fetches when the test says, and a manual clock: with commits awaiting
    replication, expiry drops every other stale offset of the partition, but not an
    offset being written (its old value stays until the commit applies) nor a group
    whose only offset is being written; once replicated, memory and a replay of the log
    agree."""
    clock = ManualClock()
    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=1,
                          offsets_retention_minutes=1, group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config, clock)
    topics.load()
    topics.create("t", 3, {})
    topics.create(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    groups = group_coordinator(config, topics, clock)
    asyncio.run(groups.load())
    partition = topics.partition(OFFSETS_TOPIC, 0)

    def commit(group: str, partition_index: int, offset: int):
        return asyncio.ensure_future(groups.offsets.commit(group, -1, "", None, {
            ("t", partition_index): CommittedOffset(offset, -1, "", clock.wall_ms())}))

    def committed(coordinator, group: str) -> dict[int, int]:
        return {p: c.offset for (_, p), c in coordinator.offsets.committed(group).items()}

    async def scenario():
        partition.make_leader(partition.leader_epoch + 1, [0, 1], [0, 1])
        groups.runtime.coordinated.elected(partition)
        for _ in range(100):
            if groups.runtime.coordinated.coordinated() == [0]:
                break
            await asyncio.sleep(0)
        assert groups.runtime.coordinated.coordinated() == [0], "the partition did not load"
        written = [commit("mixed", 0, 5), commit("mixed", 1, 6), commit("one", 0, 7)]
        await asyncio.sleep(0)  # appended (a commit's first step), now waiting for the follower
        partition.update_follower(1, partition.log_end_offset)
        await asyncio.gather(*written)
        await clock.advance(61)  # every offset is a retention old
        writing = [commit("mixed", 0, 8), commit("one", 2, 9)]
        await asyncio.sleep(0)
        assert not any(w.done() for w in writing)
        groups.expire_offsets()
        assert committed(groups, "mixed") == {0: 5}  # 1 expired; 0 is being written
        assert committed(groups, "one") == {} and "one" in groups.groups  # its new offset is on the way
        partition.update_follower(1, partition.log_end_offset)
        await asyncio.gather(*writing)

    asyncio.run(scenario())
    assert committed(groups, "mixed") == {0: 8} and committed(groups, "one") == {2: 9}
    replayed = group_coordinator(config, topics, clock)
    asyncio.run(replayed.load())
    assert committed(replayed, "mixed") == {0: 8} and committed(replayed, "one") == {2: 9}
    topics.close()


# -- Sluice's client waiting for a coordinator ----------------------------------------------

def test_sluice_client_waits_for_a_moving_coordinator_whatever_its_retry_count():
    """Scripted answers (tests/test_client_mock_cluster.py's ScriptedBroker): with one
    retry allowed, FindCoordinator's COORDINATOR_NOT_AVAILABLE, OffsetFetch's
    COORDINATOR_LOAD_IN_PROGRESS and NOT_COORDINATOR are waited through (the coordinator
    found again after NOT_COORDINATOR); while loading lasts past retry_timeout the
    client gives up with that error."""
    answers = {"find": [ErrorCode.COORDINATOR_NOT_AVAILABLE] * 3,
               "fetch": [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 4 + [ErrorCode.NOT_COORDINATOR]}

    def find(body):
        host, port = broker.address.rsplit(":", 1)
        code = answers["find"].pop(0) if answers["find"] else 0
        return FIND_COORDINATOR.response(coordinators=[FIND_COORDINATOR.response.Coordinator(
            key=k, node_id=1, host=host, port=int(port), error_code=code)
            for k in body.coordinator_keys])

    def offset_fetch(body):
        R = OFFSET_FETCH.response
        code = answers["fetch"].pop(0) if answers["fetch"] else 0
        return R(groups=[R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=code, topics=[
            R.OffsetFetchResponseTopics(name="t", partitions=[R.OffsetFetchResponsePartitions(
                partition_index=0, committed_offset=42, metadata="")])] if not code else [])
            for g in body.groups])

    broker = ScriptedBroker({METADATA: 12, FIND_COORDINATOR: 4, OFFSET_FETCH: 8},
                            {FIND_COORDINATOR.key: find, OFFSET_FETCH.key: offset_fetch})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack, retries=1, retry_backoff_max=0.05,
                                          retry_timeout=10)
            committed = await client.consumer.fetch_offsets("g")
            answers["fetch"] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 1000
            client.retry_timeout = 0.5
            with pytest.raises(KafkaError) as still_loading:
                await client.consumer.fetch_offsets("g")
            return committed, still_loading.value.code

    committed, code = asyncio.run(asyncio.wait_for(main(), 30))
    assert committed[("t", 0)].offset == 42 and code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert len(broker.sent(FIND_COORDINATOR)) >= 5  # 3 refusals, then found again after NOT_COORDINATOR


# -- upkeep under constant commits -------------------------------------------------------------

RETENTION_S = 60  # offsets.retention.minutes=1, the least there is
PAUSE_LEAD_S = 10  # the follower stops this long before the offsets are a retention old


class CommitStream:
    """OffsetCommits of other groups on the one `__consumer_offsets` partition, one started
    every `interval` seconds from a thread without waiting for those before it (a commit
    waiting for replication holds up none after it)."""

    def __init__(self, bootstrap: str, topic: str, interval: float = 0.05):
        self.bootstrap = bootstrap
        self.topic = topic
        self.interval = interval
        self.acknowledged = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(),), daemon=True)

    def start(self) -> "CommitStream":
        self._thread.start()
        return self

    async def _run(self) -> None:
        async with AsyncClient(self.bootstrap, retries=0, request_timeout=10) as client:
            pending: set[asyncio.Task] = set()
            sent = 0
            while not self._stop.is_set():
                task = asyncio.ensure_future(self._commit(client, sent))
                pending.add(task)
                task.add_done_callback(pending.discard)
                sent += 1
                await asyncio.sleep(self.interval)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _commit(self, client: AsyncClient, offset: int) -> None:
        try:
            await client.consumer.commit_offsets(f"busy-{offset % 8}", {(self.topic, 0): offset})
        except (ClientError, KafkaError):
            return  # not replicated in time (COORDINATOR_NOT_AVAILABLE): the next one comes
        self.acknowledged += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.mark.long  # a minute: offsets.retention.minutes is at least 1 (`make test-long`)
def test_constant_commits_starve_neither_cleaning_nor_offset_expiry(tmp_path, zookeeper):
    """`__consumer_offsets` (one partition, two replicas) takes a commit of some group
    every 50 ms throughout. The coordinator's log cleaner compacts the partition while the
    commits go on. Once a group's offset is a retention old it expires while every commit
    waits for replication (the follower SIGSTOPped, kept in the ISR by long session and
    lag timeouts): expiry skipped a partition while any write to it awaited replication,
    so that constant commits held it off for good."""
    properties = {"offsets.topic.num.partitions": "1", "offsets.topic.replication.factor": "2",
                  "offsets.retention.minutes": "1", "offsets.retention.check.interval.ms": "250",
                  "offsets.topic.segment.bytes": "4096", "log.cleaner.backoff.ms": "200",
                  # Longer than the follower's pause: it stays registered and in the ISR.
                  "zookeeper.session.timeout.ms": "40000", "replica.lag.time.max.ms": "40000"}
    with Cluster(tmp_path, zookeeper, brokers=2, properties=properties) as cluster:
        cluster.create_topic("committed", 1, 2)
        committed_at = time.monotonic()
        with Client(cluster.bootstrap_servers, call_timeout=60) as client:
            client.consumer.commit_offsets("expiring", {("committed", 0): 7})
        coordinator = coordinator_of(cluster, "expiring")
        follower = next(b for b in cluster.ids if b != coordinator)
        stream = CommitStream(cluster.address(coordinator), "committed").start()
        try:
            wait_for(lambda: stream.acknowledged >= 100 and
                     cleaned_to(cluster.processes[coordinator], OFFSETS_TOPIC) > 0, 30,
                     f"the coordinator's cleaner to compact {OFFSETS_TOPIC}-0 while commits go on")
            # Waiting for time itself: the offset is a retention old at committed_at + RETENTION_S.
            time.sleep(max(0.0, committed_at + RETENTION_S - PAUSE_LEAD_S - time.monotonic()))
            cluster.pause(follower)
            with Client(cluster.address(coordinator), call_timeout=10, request_timeout=5) as client:
                wait_for(lambda: client.consumer.fetch_offsets("expiring") == {},
                         committed_at + RETENTION_S + 15 - time.monotonic(),
                         "the offset of group 'expiring' to expire")
            assert cluster.isr_of(OFFSETS_TOPIC, 0, via=coordinator) == tuple(sorted(cluster.ids)), \
                "the follower left the ISR: the commits did not wait for it"
        finally:
            if follower in cluster.paused:
                cluster.resume(follower)
            stream.stop()


# -- placement -------------------------------------------------------------------------------

def test_every_broker_names_the_leader_of_the_groups_partition(cluster):
    cluster.create_topic("placed", partitions=2, replication_factor=3)
    groups = groups_on_every_partition("placed")
    coordinator_of(cluster, groups[0])  # creates __consumer_offsets
    cluster.wait_for_leaders(OFFSETS_TOPIC)
    leaders = {p: info.leader_id for p, info in cluster.partitions(OFFSETS_TOPIC).items()}
    assert len(leaders) == OFFSETS_PARTITIONS
    for partition, group in groups.items():
        answers = {b: find_at(cluster, b, group) for b in cluster.live}
        assert answers == {b: (ErrorCode.NONE, leaders[partition]) for b in cluster.live}, \
            (group, partition, leaders)

    group = groups[0]
    coordinator = leaders[0]
    offsets = {("placed", 0): (5, "m"), ("placed", 1): (6, "")}
    raw = Raw(cluster.processes[coordinator].port)
    try:
        wait_for(lambda: _commit(raw, group, -1, "", offsets) == {tp: 0 for tp in offsets}, 30,
                 "the coordinator to accept a commit")
    finally:
        raw.close()
    for other in [b for b in cluster.live if b != coordinator]:
        raw = Raw(cluster.processes[other].port)
        try:
            assert _commit(raw, group, -1, "", offsets) == {tp: ErrorCode.NOT_COORDINATOR for tp in offsets}
            assert _join(raw, group).error_code == ErrorCode.NOT_COORDINATOR
            assert raw(HEARTBEAT, 4, group_id=group, generation_id=1, member_id="m",
                       group_instance_id=None).error_code == ErrorCode.NOT_COORDINATOR
            fetched = raw(OFFSET_FETCH, 8, groups=[OFFSET_FETCH.request.OffsetFetchRequestGroup(
                group_id=group, topics=None)], require_stable=False)
            assert [(g.group_id, g.error_code) for g in fetched.groups] == [(group, ErrorCode.NOT_COORDINATOR)]
            fetched = raw(OFFSET_FETCH, 5, group_id=group, topics=None)
            assert fetched.error_code == ErrorCode.NOT_COORDINATOR
            fetched = raw(OFFSET_FETCH, 1, group_id=group, topics=[
                OFFSET_FETCH.request.OffsetFetchRequestTopic(name="placed", partition_indexes=[0, 1])])
            assert [(t.name, p.partition_index, p.error_code) for t in fetched.topics for p in t.partitions] \
                == [("placed", 0, ErrorCode.NOT_COORDINATOR), ("placed", 1, ErrorCode.NOT_COORDINATOR)]
            described = raw(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
            assert [(g.group_id, g.error_code) for g in described.groups] == [(group, ErrorCode.NOT_COORDINATOR)]
            listed = raw(LIST_GROUPS, 4, states_filter=[])
            assert listed.error_code == 0 and group not in {g.group_id for g in listed.groups}
        finally:
            raw.close()
    with Client(cluster.address(next(b for b in cluster.live if b != coordinator))) as client:
        committed = client.consumer.fetch_offsets(group)  # the client finds the coordinator itself
    assert {tp: (c.offset, c.metadata) for tp, c in committed.items()} == offsets


# -- the CLI -----------------------------------------------------------------------------------

def sluice(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_groups_cli_against_any_broker(cluster):
    cluster.create_topic("cli", partitions=3, replication_factor=3)
    produce(cluster.bootstrap_servers, "cli", range(120), 3)  # 40 records a partition
    groups = groups_on_every_partition("cli")
    with Client(cluster.bootstrap_servers, retry_timeout=60, retries=20) as client:
        for partition, group in groups.items():
            client.consumer.commit_offsets(group, {("cli", p): 10 * (partition + 1) + p for p in range(3)})
    coordinators = {group: coordinator_of(cluster, group) for group in groups.values()}
    target = groups[0]
    # Bootstrapped on a broker other than the target group's coordinator.
    via = cluster.address(next(b for b in cluster.live if b != coordinators[target]))

    done = sluice("groups", "--bootstrap-server", via, "--output", "json", "list")
    assert done.returncode == 0, done.stderr
    listed = {g["group"]: g["coordinator"] for g in json.loads(done.stdout)["groups"]}
    assert {g: listed.get(g) for g in coordinators} == coordinators

    done = sluice("groups", "--bootstrap-server", via, "--output", "json", "describe", target)
    assert done.returncode == 0, done.stderr
    described = json.loads(done.stdout)
    assert described["state"] == "Empty" and described["coordinator"]["id"] == coordinators[target]
    assert {o["partition"]: o["current_offset"] for o in described["offsets"]} == {0: 10, 1: 11, 2: 12}

    done = sluice("groups", "--bootstrap-server", via, "reset-offsets", "--group", target,
                  "--topic", "cli", "--to-offset", "1", "--execute")
    assert done.returncode == 0, done.stderr
    with Client(via) as client:
        committed = client.consumer.fetch_offsets(target)
    assert {p: committed[("cli", p)].offset for p in range(3)} == {0: 1, 1: 1, 2: 1}


# -- compaction --------------------------------------------------------------------------------

def test_compacted_offsets_partition_survives_sigkill_of_its_leader(cluster):
    """The log cleaner compacts the group's `__consumer_offsets` partition on each replica
    (each broker cleans its own log, as in Kafka): its size on disk falls to a few segments
    while its log start stays 0, and after SIGKILL of the coordinator the new one, loading
    its compacted replica, has every last offset."""
    cluster.create_topic("cleaned", partitions=2, replication_factor=3)
    group = groups_on_every_partition("cleaned")[1]
    partition = _java_partition(group, OFFSETS_PARTITIONS)
    coordinator = coordinator_of(cluster, group)
    with Client(cluster.bootstrap_servers, retries=20, retry_timeout=60) as client:
        for r in range(200):
            client.consumer.commit_offsets(group, {("cleaned", p): (r * 10 + p, f"r{r}") for p in range(2)})
        expected = {("cleaned", p): (199 * 10 + p, "r199") for p in range(2)}
        segment_bytes = int(PROPERTIES["offsets.topic.segment.bytes"])
        for broker_id in cluster.live:
            data_dir = cluster.processes[broker_id].data_dir
            wait_for(lambda: log_bytes(data_dir, OFFSETS_TOPIC, partition)[0] <= 3 * segment_bytes,
                     20, f"the cleaner of broker {broker_id} to compact {OFFSETS_TOPIC}-{partition}")
        assert client.consumer.list_offsets(OFFSETS_TOPIC, [partition], EARLIEST)[partition].offset == 0
    cluster.kill(coordinator)
    try:
        with Client(cluster.bootstrap_servers, retries=50, retry_timeout=90) as client:
            committed = client.consumer.fetch_offsets(group)
            assert client.admin.describe_groups([group])[group].coordinator.node_id != coordinator
        assert {tp: (c.offset, c.metadata) for tp, c in committed.items()} == expected
    finally:
        cluster.restart(coordinator)
        cluster.wait_for_leaders(OFFSETS_TOPIC, full_isr=True, timeout=90)


def test_consumer_protocol_group_survives_sigkill_of_its_coordinator_mid_rebalance(cluster):
    """A KIP-848 group killed with its coordinator while a member still has to revoke:
    the new coordinator replays it as it was (epochs, targets, the member yet to revoke)
    and the rebalance completes there, revocation before assignment."""
    cluster.create_topic("kip848-failover", partitions=4, replication_factor=3)
    group = groups_on_every_partition("kip848-failover")[2]
    coordinator = coordinator_of(cluster, group)
    raw = Raw(cluster.processes[coordinator].port)
    try:
        first = join(raw, group, ["kip848-failover"], member_id="m1", server_assignor="range")
        assert (first.error_code, first.member_epoch) == (ErrorCode.NONE, 1), first
        second = join(raw, group, ["kip848-failover"], member_id="m2")
        assert (second.member_epoch, second.assignment.topic_partitions) == (2, []), second  # 2-3 still m1's
    finally:
        raw.close()
    cluster.kill(coordinator)
    try:
        successor = coordinator_of(cluster, group)
        assert successor != coordinator
        raw = Raw(cluster.processes[successor].port)
        try:
            def replayed():
                described = describe_consumer_group(raw, group)
                return described if described.error_code == ErrorCode.NONE else None
            described = wait_for(replayed, 60, f"broker {successor} to load {group}")
            assert (described.group_state, described.group_epoch, described.assignment_epoch) == \
                ("Reconciling", 2, 2)
            assert {m.member_id: (m.member_epoch, [p for tp in m.assignment.topic_partitions for p in tp.partitions])
                    for m in described.members} == {"m1": (1, [0, 1, 2, 3]), "m2": (2, [])}
            revoke = heartbeat(raw, group, "m1", 1, topic_partitions=owned(first))
            assert (revoke.member_epoch, revoke.assignment.topic_partitions[0].partitions) == (1, [0, 1]), revoke
            assert heartbeat(raw, group, "m2", 2).assignment is None  # not before m1 revoked
            assert heartbeat(raw, group, "m1", 1, topic_partitions=owned(revoke)).member_epoch == 2
            assert heartbeat(raw, group, "m2", 2).assignment.topic_partitions[0].partitions == [2, 3]
            assert describe_consumer_group(raw, group).group_state == "Stable"
        finally:
            raw.close()
    finally:
        cluster.restart(coordinator)
        cluster.wait_for_leaders(OFFSETS_TOPIC, full_isr=True, timeout=90)


# -- failover ----------------------------------------------------------------------------------

class OffsetSampler:
    """OffsetFetch of the group every 0.25 s from a thread (through whichever broker
    coordinates it): counts committed offsets going backwards between samples."""

    def __init__(self, bootstrap: str, group: str):
        self.group = group
        self.client = Client(bootstrap, retries=0, retry_timeout=2, request_timeout=3, call_timeout=5)
        self.highest: dict[tuple[str, int], int] = {}
        self.backwards: list[str] = []
        self.samples = 0
        self.failures: collections.Counter[str] = collections.Counter()  # unanswered, by error
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "OffsetSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            try:
                committed = self.client.consumer.fetch_offsets(self.group)
            except (ClientError, KafkaError, TimeoutError, OSError) as exc:
                self.failures[getattr(exc.__class__, "__name__")
                              + (f" {exc.code.name}" if isinstance(exc, KafkaError) else "")] += 1
                continue
            self.record(committed)

    def record(self, committed) -> dict[tuple[str, int], int]:
        offsets = {tp: c.offset for tp, c in committed.items() if c.offset >= 0}
        with self.lock:
            self.samples += 1
            for tp, offset in offsets.items():
                if offset < self.highest.get(tp, -1):
                    self.backwards.append(f"{tp}: {self.highest[tp]} -> {offset}")
                self.highest[tp] = max(offset, self.highest.get(tp, -1))
        return offsets

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def acknowledged_commits(workers) -> dict[int, int]:
    """The highest offset per partition any worker reported committed (acknowledged)."""
    highest: dict[int, int] = {}
    for w in workers:
        with w.lock:
            for p, o in w.committed.items():
                highest[p] = max(o, highest.get(p, -1))
    return highest


def lost_commits(acked: dict[int, int], committed: dict[tuple[str, int], int], topic: str) -> list[str]:
    return [f"{topic}-{p}: acknowledged {o}, committed {committed.get((topic, p))}"
            for p, o in sorted(acked.items()) if committed.get((topic, p), -1) < o]


def close_member(worker: Worker) -> None:
    """A clean close. aiokafka's stop() may raise CancelledError out of its fetcher's close
    when a broker it fetched from was killed (the client's own failure at close, after its
    last commit): that exit is tolerated, no other."""
    try:
        worker.close(60)
    except AssertionError:
        stderr = "".join(worker.stderr)
        if not (worker.kind == "aiokafka" and "in close" in stderr and "fetcher.py" in stderr
                and stderr.rstrip().endswith("asyncio.exceptions.CancelledError")):
            raise
        print("tolerated: aiokafka's stop() ended with CancelledError from its fetcher")


# The faults a round may inject: SIGKILL of the coordinator's broker; SIGSTOP of it past
# its ZooKeeper session (another broker takes over; then resumed, the zombie is fenced
# and follows); SIGKILL of another broker (the coordinator stays, its partition's epoch
# moves on and it loads the partition again).
FAULTS = ("kill coordinator", "pause coordinator", "kill other broker")


class MixedGroup:
    """A topic (`partitions`, RF=3, min.insync.replicas=2) written by an idempotent producer
    and read by a group of a confluent-kafka, a kafka-python and an aiokafka member (each
    in its own process), its committed offsets sampled (OffsetSampler) from `start()` on.
    `check()` counts by name, prints and asserts all 0: "lost" (acknowledged records no
    member processed), "committed offsets going backwards", "lost commits" (acknowledged
    commits missing at the end, and those `check` is given), and, with the topic read
    back by confluent-kafka and kafka-python beside the producer's acknowledgements,
    "non-monotonic offsets" and "inconsistent offsets between consumers"; `members_in_order`
    counts the members' own reads among those views (a group that never rebalances reads
    each partition in order)."""

    def __init__(self, cluster: Cluster, seed: int, name: str, partitions: int = 6,
                 members_in_order: bool = False):
        self.cluster, self.seed, self.name = cluster, seed, name
        self.topic, self.partitions, self.group = f"{name}-events", partitions, f"{name}-group"
        self.members_in_order = members_in_order
        cluster.create_topic(self.topic, partitions=partitions, replication_factor=3,
                             configs={"min.insync.replicas": "2"})
        bootstrap = cluster.all_servers
        self.workload = Workload(bootstrap, self.topic, partitions, seed=seed, name="p0", rate=100,
                                 count=100_000)
        self.workers = [Worker(kind, bootstrap, self.group, self.topic, kind, SESSION_MS)
                        for kind in ("confluent", "kafka-python", "aiokafka")]
        self.sampler = OffsetSampler(bootstrap, self.group)

    def start(self) -> "MixedGroup":
        """The producer started, the group Stable and committing."""
        self.workload.start()
        with Client(self.cluster.all_servers, retries=20, retry_timeout=60) as client:
            wait_stable(client, self.group, self.topic, self.partitions, self.workers, timeout=60)
        self.sampler.start()
        reporting = [w for w in self.workers if w.kind != "kafka-python"]  # it auto-commits, unseen
        wait_for(lambda: set(acknowledged_commits(reporting)) >= {
            p for w in reporting for p in w.assignment or ()}, 30,
            "commits of every partition of the members that report them")
        return self

    def check(self, lost: list[str] = ()) -> None:
        """Stop producing, wait until the members processed every acknowledged record,
        close them, and count."""
        cluster, topic, workload, workers = self.cluster, self.topic, self.workload, self.workers
        lost = list(lost)
        workload.finish(60)
        acked = {a.value.decode() for a in workload.acked}
        wait_for(lambda: acked <= {i for w in workers for i in w.ids()}, 60,
                 "every acknowledged record to be processed", interval=0.5)
        for w in workers:
            close_member(w)
        self.sampler.stop()
        with Client(cluster.bootstrap_servers, retries=30, retry_timeout=60) as client:
            final = self.sampler.record(client.consumer.fetch_offsets(self.group))
        lost += lost_commits(acknowledged_commits(workers), final, topic)
        processed = {i for w in workers for i in w.ids()}
        # The topic read back by two independent consumers, the producer's acknowledgements
        # (partition, offset, value) a third view of it.
        views = {**read_by_two(cluster.bootstrap_servers, topic, self.partitions),
                 "producer acks": [(a.partition, a.offset, a.value) for a in workload.acked]}
        if self.members_in_order:
            views.update({w.name: [(p, o, value.encode()) for p, o, value in w.records] for w in workers})
        examples: list[str] = []
        counts = {"lost": len(acked - processed),
                  "committed offsets going backwards": len(self.sampler.backwards),
                  "lost commits": len(lost),
                  **offset_anomalies(views, examples)}
        print(f"{self.name} seed={self.seed}: acknowledged={len(acked)} processed={len(processed)} "
              f"failed sends={dict(workload.failed)} offset samples={self.sampler.samples} "
              f"(unanswered {dict(self.sampler.failures)}) commit failures seen by members="
              f"{sum(len(w.commit_failures) for w in workers)} " +
              " ".join(f"{k.replace(' ', '_')}={v}" for k, v in counts.items()))
        assert counts == {k: 0 for k in counts}, (self.sampler.backwards[:5], lost[:5], examples)

    def close(self) -> None:
        self.workload.abandon()
        self.sampler.stop()
        for w in self.workers:
            w.kill()


def run_faults(cluster: Cluster, seed: int, name: str, faults: list[str]) -> None:
    """The mixed group consumes while each fault in `faults` is injected in turn (the
    broker restarted or resumed between faults); then the counts."""
    rng = random.Random(seed)
    run = MixedGroup(cluster, seed, name)
    group, topic = run.group, run.topic
    # A Sluice client kept across the kills: it must find the new coordinator by itself
    # (connection refused, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS are retried).
    watcher = Client(cluster.all_servers, retries=200, retry_timeout=90, request_timeout=5)
    try:
        run.start()
        lost: list[str] = []
        for round_, fault in enumerate(faults):
            run.workload.wait_acked(rng.randrange(100, 400), timeout=60)
            coordinator = coordinator_of(cluster, group)
            watcher.consumer.fetch_offsets(group)
            assert watcher.admin.describe_groups([group])[group].coordinator.node_id == coordinator
            acked_before = acknowledged_commits(run.workers)
            victim = coordinator if fault != "kill other broker" else \
                rng.choice([b for b in cluster.live if b != coordinator])
            if fault == "pause coordinator":
                cluster.pause(victim)
            else:
                cluster.kill(victim)
            faulted_at = time.monotonic()
            cluster.wait(lambda: not cluster.registered(victim), 60,
                         f"ZooKeeper to drop the registration of broker {victim}")
            # The group goes on under the (new) coordinator, with every acknowledged commit.
            after = run.sampler.record(watcher.consumer.fetch_offsets(group))
            new = watcher.admin.describe_groups([group])[group].coordinator.node_id
            assert new in cluster.live and (new != coordinator or victim != coordinator)
            if fault == "pause coordinator":
                cluster.resume(victim)  # a zombie, fenced by now, back among the clients
            wait_stable(watcher, group, topic, run.partitions, run.workers, timeout=90)
            lost += lost_commits(acked_before, after, topic)
            print(f"{name} round {round_}: {fault} (broker {victim}); coordinator {coordinator}, now "
                  f"{new}; the group was stable again {time.monotonic() - faulted_at:.1f} s after the fault")
            if round_ + 1 < len(faults):
                if fault != "pause coordinator":
                    cluster.restart(victim)
                cluster.wait_for_leaders(topic, full_isr=True, timeout=90)
                cluster.wait_for_leaders(OFFSETS_TOPIC, full_isr=True, timeout=90)
        run.check(lost)
    except AssertionError:
        for b in cluster.ids:
            print(f"---- broker {b}\n{cluster.output(b, 80)}")
        raise
    finally:
        run.close()
        watcher.close()


def test_group_survives_sigkill_of_its_coordinator(cluster, request):
    seed = pick_seed()
    print(f"{request.node.name} seed={seed}")
    run_faults(cluster, seed, "failover", ["kill coordinator"])


@pytest.mark.chaos
@pytest.mark.timeout(900)
def test_group_survives_repeated_coordinator_faults(tmp_path, zookeeper, request):
    seed = pick_seed()
    print(f"{request.node.name} seed={seed}")
    rounds = int(os.environ.get("SLUICE_CHAOS_ROUNDS") or 5)
    draw = random.Random(f"{seed}-faults")
    faults = [draw.choice(FAULTS) for _ in range(rounds)]
    faults[0] = "kill coordinator"  # at least one coordinator failover, whatever the draw
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        run_faults(cluster, seed, "chaos", faults)


# -- a coordinator paused past its ZooKeeper session, then resumed ------------------------------

PAUSED_SESSION_MS = 6000  # the members' session timeout: the coordinator stays paused longer


def describe_answer(raw: Raw) -> int:
    """The error code of the answer to the DescribeGroups v5 (of one group) sent on `raw`."""
    (described,) = raw.receive(DESCRIBE_GROUPS, 5).groups
    return described.error_code


def test_coordinator_paused_past_its_session_leaves_the_group_alone_when_resumed(tmp_path, zookeeper):
    """A group of a confluent-kafka and an aiokafka member (a 6 s session); its
    coordinator is SIGSTOPped until ZooKeeper has dropped it, another broker leads the
    group's partition and the members' session timeout has passed, then SIGCONTed. The
    resumed broker expires no member (it heard none while stopped), and never answers
    for the group again: a DescribeGroups sent to it while it was stopped, and every one
    after, is COORDINATOR_LOAD_IN_PROGRESS (while it checks in ZooKeeper that it still
    leads the partition) until it is NOT_COORDINATOR. Both members are back in a Stable
    group with every partition within two session timeouts of the resumption."""
    topic, partitions, group = "paused-events", 6, "paused-group"
    session_s = PAUSED_SESSION_MS / 1000
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        cluster.create_topic(topic, partitions=partitions, replication_factor=3)
        bootstrap = cluster.all_servers
        workers = [Worker(kind, bootstrap, group, topic, kind, PAUSED_SESSION_MS)
                   for kind in ("confluent", "aiokafka")]
        watcher = Client(bootstrap, retries=200, retry_timeout=90, request_timeout=5)
        raw = None
        try:
            wait_stable(watcher, group, topic, partitions, workers, timeout=60)
            coordinator = coordinator_of(cluster, group)
            raw = Raw(cluster.processes[coordinator].port)
            cluster.pause(coordinator)
            paused_at = time.monotonic()
            cluster.wait(lambda: not cluster.registered(coordinator)
                         and time.monotonic() - paused_at > 1.5 * session_s, 60,
                         f"ZooKeeper to drop broker {coordinator} and the members' session to pass")
            coordinator_of(cluster, group)  # a live broker leads the group's partition now
            # Waiting in the stopped broker's socket, as a member's heartbeat would.
            raw.send(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
            seen = len(cluster.processes[coordinator].output)
            cluster.resume(coordinator)
            resumed_at = time.monotonic()
            codes = [describe_answer(raw)]

            def deposed() -> bool:
                if codes[-1] != ErrorCode.NOT_COORDINATOR:
                    raw.send(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
                    codes.append(describe_answer(raw))
                return codes[-1] == ErrorCode.NOT_COORDINATOR

            cluster.wait(deposed, 30, f"broker {coordinator} to answer NOT_COORDINATOR for {group}")
            answered = [ErrorCode(code).name for code in codes]
            assert set(codes[:-1]) <= {ErrorCode.COORDINATOR_LOAD_IN_PROGRESS}, answered
            wait_stable(watcher, group, topic, partitions, workers,
                        timeout=resumed_at + 2 * session_s - time.monotonic())
            print(f"stable again {time.monotonic() - resumed_at:.1f} s after the resumption; "
                  f"broker {coordinator} answered {answered}")
            resumed_output = "".join(cluster.processes[coordinator].output[seen:])
            assert "missed its session timeout" not in resumed_output, resumed_output
        except AssertionError:
            for b in cluster.ids:
                print(f"---- broker {b}\n{cluster.output(b, 60)}")
            raise
        finally:
            if raw is not None:
                raw.close()
            watcher.close()
            for w in workers:
                w.kill()
