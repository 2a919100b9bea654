"""KIP-848 consumer groups (group.protocol=consumer) against the real broker process.

- confluent-kafka consumers with `group.protocol=consumer` (each in its own process, the
  workers of tests/test_groups.py): one joins and gets every partition, a second and a
  third join, one leaves cleanly, one is SIGKILLed (fenced after the session timeout);
  each time the group reconciles (ConsumerGroupDescribe: Stable, every member's
  assignment what its client holds, disjoint, covering the topic). No partition is ever
  owned by two members at once: neither in any ConsumerGroupDescribe taken while the
  group moves, nor in the members' own assign/revoke callbacks (timestamped). Every
  record is consumed; only those the crashed member consumed past its last commit are
  consumed twice; the offsets committed at the end are the log ends.
- Twenty membership changes (leaves and joins) while records flow in: no record lost or
  consumed twice, no partition ever assigned to two members.
- A static confluent-kafka member closes and comes back (no rebalance, the other member
  sees nothing), and both carry on across a broker restart at the same group epoch.
- Bad heartbeats get Kafka's errors (UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
  UNSUPPORTED_ASSIGNOR, INVALID_REQUEST, UNRELEASED_INSTANCE_ID); OffsetCommit and
  OffsetFetch v9 check the member and its epoch (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH; a
  commit at an older epoch passes for the partitions held since then, KIP-1251);
  ListGroups types the group; the group and its
  members' epochs and assignments survive a broker restart, a member carrying on at its
  epoch; a static member leaving with epoch -2 is replaced by its successor with its
  partitions and no new group epoch; the empty group is deleted with its offsets. A member
  that does not revoke within its rebalance timeout is fenced, its partitions reassigned;
  a group of group.consumer.max.size members refuses another (GROUP_MAX_SIZE_REACHED).
- A regex subscription (confluent-kafka's `^...` topics) is served: the topics it matches
  in full are assigned, one created later too, never another; an invalid regex (or one
  RE2/J refuses: lookarounds, backreferences) is INVALID_REGULAR_EXPRESSION.
- On the coordinator itself (manual clock): an empty group's offsets expire with it; a
  suspended partition (after a stall) fences nobody, its heartbeats counting.
- An empty classic group is taken over by a consumer-protocol member, which resumes from
  the classic group's committed offsets, and the empty consumer group then by a classic
  member, which resumes from its; a group of either kind with members refuses the other
  kind's members; after a restart the group is the classic one with every offset.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
import time
import uuid

import pytest

from broker.errors import BrokerError
from tests.support.polling import wait_for
from tests.test_groups import Raw, Worker, _join, end_offsets, produce, start_broker  # noqa: F401 (the fixture)
from sluice.console.pages import group_page
from sluice_client import Client, NewTopic
from wire.error_codes import ErrorCode
from wire.messages import (CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS, LIST_GROUPS,
                           OFFSET_COMMIT, OFFSET_FETCH)

ck = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(180)

CONSUMER_CONFIG = {"group_consumer_heartbeat_interval_ms": 300, "group_consumer_session_timeout_ms": 4000,
                   "group_consumer_min_heartbeat_interval_ms": 100, "group_consumer_min_session_timeout_ms": 1000}
# Members that heartbeat only when a test says so: sessions outlast the test.
PATIENT_CONFIG = {**CONSUMER_CONFIG, "group_consumer_session_timeout_ms": 60_000}


def describe(raw: Raw, group: str):
    [described] = raw(CONSUMER_GROUP_DESCRIBE, 1, group_ids=[group], include_authorized_operations=False).groups
    return described


def held_by_member(described) -> dict[str, set[int]]:
    """client id -> partitions assigned, as ConsumerGroupDescribe says (one topic)."""
    return {m.client_id: {p for tp in m.assignment.topic_partitions for p in tp.partitions}
            for m in described.members}


class GroupWatch:
    """ConsumerGroupDescribe on every call of `settled`: each answer's assignments must be
    disjoint (no partition assigned to two members at once)."""

    def __init__(self, raw: Raw, group: str):
        self.raw, self.group, self.seen = raw, group, 0

    def check(self):
        """The group as described now (None until it exists)."""
        described = describe(self.raw, self.group)
        if described.error_code == ErrorCode.GROUP_ID_NOT_FOUND and not self.seen:
            return None
        assert described.error_code == ErrorCode.NONE, described
        held = held_by_member(described)
        every = [p for parts in held.values() for p in parts]
        assert len(every) == len(set(every)), f"a partition assigned twice: {held}"
        self.seen += 1
        return described

    def settled(self, workers: list[Worker], partitions: int, timeout: float = 30.0) -> dict[str, set[int]]:
        """Wait until the group is Stable with exactly `workers`, each holding what the
        coordinator assigned it, together every partition."""
        def done():
            described = self.check()
            if described is None:
                return None
            held = held_by_member(described)
            if described.group_state != "Stable" or sorted(held) != sorted(w.name for w in workers):
                return None
            for w in workers:
                with w.lock:
                    if w.assignment != held[w.name]:
                        return None
            return held
        held = wait_for(done, timeout, f"{[w.name for w in workers]} to settle", interval=0.1)
        assert sorted(p for parts in held.values() for p in parts) == list(range(partitions)), held
        return held


def ownership_overlaps(workers: list[Worker], killed: dict[str, float]) -> list:
    """Pairs of members that held a partition at the same time, by their callbacks: a
    member owns a partition from its assign callback to its revoke callback (or its
    SIGKILL, or now)."""
    intervals: dict[int, list[tuple[float, float, str]]] = {}
    for w in workers:
        owned: dict[int, float] = {}
        with w.lock:
            timeline = list(w.timeline)
        for at, kind, parts in timeline:
            for p in parts:
                if kind == "assign":
                    owned[p] = at
                elif p in owned:
                    intervals.setdefault(p, []).append((owned.pop(p), at, w.name))
        end = killed.get(w.name, time.time())
        for p, start in owned.items():
            intervals.setdefault(p, []).append((start, end, w.name))
    overlaps = []
    for p, spans in intervals.items():
        spans.sort()
        for (s1, e1, n1), (s2, e2, n2) in zip(spans, spans[1:]):
            if n1 != n2 and s2 < e1:
                overlaps.append((p, n1, (s1, e1), n2, (s2, e2)))
    return overlaps


def test_consumer_protocol_group_rebalances_on_join_leave_and_crash(start_broker):  # noqa: F811
    broker = start_broker(**CONSUMER_CONFIG)
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "kip848", "kip848-group", 6
    raw = Raw(broker.port)
    workers: dict[str, Worker] = {}
    killed: dict[str, float] = {}

    def start(name, hold_from=-1):
        workers[name] = Worker("confluent-kip848", bootstrap, group, topic, name, 0, hold_from=hold_from)
        return workers[name]

    def all_ids():
        return {i for w in workers.values() for i in w.ids()}

    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
        produce(bootstrap, topic, range(0, 200), partitions)
        watch = GroupWatch(raw, group)
        try:
            alive = [start("a")]
            assert watch.settled(alive, partitions)["a"] == set(range(partitions))
            alive.append(start("b"))
            watch.settled(alive, partitions)
            alive.append(start("c", hold_from=400))  # c commits nothing from record 400 on
            watch.settled(alive, partitions)
            produce(bootstrap, topic, range(200, 400), partitions)
            wait_for(lambda: all_ids() >= {str(i) for i in range(400)}, 30, "records 0-400")

            workers["b"].close()  # a clean leave (epoch -1)
            alive.remove(workers["b"])
            watch.settled(alive, partitions)

            victim = workers["c"]
            produce(bootstrap, topic, range(400, 600), partitions)
            wait_for(lambda: any(int(i) >= 400 for i in victim.ids()), 20, "c to consume past 400")
            victim.kill()
            killed["c"] = time.time()
            alive.remove(victim)
            fenced_from = time.monotonic()
            watch.settled(alive, partitions, timeout=30)
            assert time.monotonic() - fenced_from >= 4.0 - 1.0, "the crashed member was fenced early"
            produce(bootstrap, topic, range(600, 700), partitions)
            wait_for(lambda: all_ids() >= {str(i) for i in range(700)}, 30, "records 0-700")
            workers["a"].close()
            assert describe(raw, group).group_state == "Empty"
        finally:
            for w in workers.values():
                w.kill()
            raw.close()

        assert watch.seen > 10
        overlaps = ownership_overlaps(list(workers.values()), killed)
        assert not overlaps, overlaps
        assert all(w.timeline for w in workers.values())
        seen: dict[str, list] = {}
        for w in workers.values():
            for p, o, i in w.records:
                seen.setdefault(i, []).append((w.name, p, o))
        assert set(seen) == {str(i) for i in range(700)}
        duplicates = {i for i, where in seen.items() if len(where) > 1}
        uncommitted = {i for p, o, i in victim.records if o >= victim.committed.get(p, 0)}
        assert uncommitted and duplicates == uncommitted, (sorted(duplicates)[:10], sorted(uncommitted)[:10])
        for w in workers.values():
            assert not w.commit_failures, (w.name, w.commit_failures[:3])
            assert not w.errors, (w.name, w.errors[:3])
        committed = client.consumer.fetch_offsets(group)
        assert {p: committed[(topic, p)].offset for p in range(partitions)} == end_offsets(client, topic, partitions)


def test_static_member_returns_and_broker_restarts_without_a_rebalance(start_broker):  # noqa: F811
    """A static member (group.instance.id) that closes (epoch -2) and comes back in a new
    process gets its partitions back at the same group epoch, the other member seeing no
    callback; across a broker restart both members carry on at their epochs (the group
    epoch unchanged), and every record is consumed once."""
    broker = start_broker(**CONSUMER_CONFIG)
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "static848", "static848-group", 4
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
    produce(bootstrap, topic, range(0, 100), partitions)
    raw = Raw(broker.port)
    workers = [Worker("confluent-kip848-static", bootstrap, group, topic, "s1", 0),
               Worker("confluent-kip848", bootstrap, group, topic, "d1", 0)]
    try:
        watch = GroupWatch(raw, group)
        before = watch.settled(workers, partitions)
        epoch = describe(raw, group).group_epoch
        wait_for(lambda: len({i for w in workers for i in w.ids()}) == 100, 30, "records 0-100")
        callbacks = len(workers[1].timeline)

        workers[0].close()
        [left] = [m for m in describe(raw, group).members if m.client_id == "s1"]
        assert left.member_epoch == -2  # a static leave: its partitions wait for it
        workers.append(Worker("confluent-kip848-static", bootstrap, group, topic, "s1", 0))
        after = watch.settled(workers[1:], partitions)
        assert after == before and describe(raw, group).group_epoch == epoch
        assert len(workers[1].timeline) == callbacks, workers[1].timeline[callbacks:]

        raw.close()
        broker.restart()
        raw = watch.raw = Raw(broker.port)
        produce(bootstrap, topic, range(100, 200), partitions)
        wait_for(lambda: len({i for w in workers for i in w.ids()}) == 200, 60, "records 100-200")
        assert watch.settled(workers[1:], partitions) == before
        assert describe(raw, group).group_epoch == epoch
        for w in workers[1:]:
            w.close()
    finally:
        for w in workers:
            w.kill()
        raw.close()
    consumed = [i for w in workers for i in w.ids()]
    assert sorted(consumed, key=int) == [str(i) for i in range(200)]  # each once
    assert not any(w.errors for w in workers), [w.errors for w in workers]


def test_twenty_membership_changes_under_load_lose_and_repeat_nothing(start_broker):  # noqa: F811
    """Records flow in while members leave and join, twenty times: after each change the
    group reconciles (no partition ever assigned twice in any description), and in the end
    every record was consumed exactly once (each member commits what it consumed)."""
    broker = start_broker(**CONSUMER_CONFIG)
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "churn848", "churn848-group", 8
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
    raw = Raw(broker.port)
    watch = GroupWatch(raw, group)
    produced = [0]
    stop = threading.Event()

    def feed():
        while not stop.is_set() and produced[0] < 5000:
            produce(bootstrap, topic, range(produced[0], produced[0] + 50), partitions)
            produced[0] += 50
            stop.wait(0.1)
    feeder = threading.Thread(target=feed, daemon=True)
    workers = [Worker("confluent-kip848", bootstrap, group, topic, f"w{i}", 0) for i in range(3)]
    alive = list(workers)
    try:
        feeder.start()
        watch.settled(alive, partitions)
        for change in range(20):
            if change % 2 == 0:
                leaving = alive.pop(0)
                leaving.close()
            else:
                alive.append(Worker("confluent-kip848", bootstrap, group, topic, f"w{len(workers)}", 0))
                workers.append(alive[-1])
            watch.settled(alive, partitions)
        stop.set()
        feeder.join(30)
        everything = {str(i) for i in range(produced[0])}
        wait_for(lambda: {i for w in workers for i in w.ids()} >= everything, 60, "every record")
        for w in alive:
            w.close()
    finally:
        stop.set()
        for w in workers:
            w.kill()
        raw.close()
    consumed = collections.Counter(i for w in workers for i in w.ids())
    assert set(consumed) == everything
    assert [i for i, n in consumed.items() if n > 1] == []
    assert not any(w.commit_failures or w.errors for w in workers), \
        [(w.name, w.commit_failures[:2], w.errors[:2]) for w in workers]
    assert len(workers) == 13 and watch.seen > 20


# -- raw heartbeats ---------------------------------------------------------------------------

def heartbeat(raw: Raw, group: str, member_id: str, epoch: int, version: int = 1, **fields):
    return raw(CONSUMER_GROUP_HEARTBEAT, version, group_id=group, member_id=member_id, member_epoch=epoch,
               **fields)


def join(raw: Raw, group: str, topics, member_id: str | None = None, **fields):
    return heartbeat(raw, group, member_id or str(uuid.uuid4()), 0, rebalance_timeout_ms=5000,
                     subscribed_topic_names=list(topics), topic_partitions=[], **fields)


def owned(response) -> list:
    """The partitions a heartbeat's answer assigns, as the next heartbeat reports them."""
    R = CONSUMER_GROUP_HEARTBEAT.request
    return [R.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
            for tp in response.assignment.topic_partitions]


def test_heartbeat_errors_commits_and_restart(start_broker):  # noqa: F811
    broker = start_broker(**PATIENT_CONFIG)
    topic, group = "raw848", "raw848-group"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({topic: NewTopic(partitions=4, replication_factor=1)})
    raw = Raw(broker.port)
    try:
        errors = {
            "unknown member": heartbeat(raw, group, "nobody", 3).error_code,
            "no rebalance timeout": heartbeat(raw, group, "m", 0, subscribed_topic_names=[topic],
                                              topic_partitions=[]).error_code,
            "no subscription": heartbeat(raw, group, "m", 0, rebalance_timeout_ms=5000,
                                         topic_partitions=[]).error_code,
            "no member id": heartbeat(raw, group, "", 0, rebalance_timeout_ms=5000,
                                      subscribed_topic_names=[topic], topic_partitions=[]).error_code,
            "bad epoch": heartbeat(raw, group, "m", -3).error_code,
            "unknown assignor": join(raw, group, [topic], server_assignor="sticky").error_code,
        }
        assert errors == {"unknown member": ErrorCode.UNKNOWN_MEMBER_ID,
                          "no rebalance timeout": ErrorCode.INVALID_REQUEST,
                          "no subscription": ErrorCode.INVALID_REQUEST,
                          "no member id": ErrorCode.INVALID_REQUEST, "bad epoch": ErrorCode.INVALID_REQUEST,
                          "unknown assignor": ErrorCode.UNSUPPORTED_ASSIGNOR}

        first = join(raw, group, [topic], member_id="m1", server_assignor="range", instance_id="i1")
        assert first.error_code == ErrorCode.NONE and first.member_epoch == 1, first
        assert sorted(first.assignment.topic_partitions[0].partitions) == [0, 1, 2, 3]
        assert heartbeat(raw, group, "m1", 2).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert join(raw, group, [topic], member_id="m2", instance_id="i1").error_code == \
            ErrorCode.UNRELEASED_INSTANCE_ID

        # A second member: m1 must revoke two partitions before m2 gets them (range: m1 0-1, m2 2-3).
        second = join(raw, group, [topic], member_id="m2")
        assert second.member_epoch == 2 and second.assignment.topic_partitions == [], second
        revoke = heartbeat(raw, group, "m1", 1, topic_partitions=owned(first))
        assert revoke.member_epoch == 1 and revoke.assignment.topic_partitions[0].partitions == [0, 1]
        assert heartbeat(raw, group, "m2", 2).assignment is None  # 2-3 are still m1's
        moved = heartbeat(raw, group, "m1", 1, topic_partitions=owned(revoke))
        assert moved.member_epoch == 2 and moved.assignment is None
        given = heartbeat(raw, group, "m2", 2)
        assert given.assignment.topic_partitions[0].partitions == [2, 3]
        described = describe(raw, group)
        assert (described.group_state, described.group_epoch, described.assignment_epoch,
                described.assignor_name) == ("Stable", 2, 2, "range")
        assert {m.member_id: (m.member_epoch, m.assignment.topic_partitions[0].partitions)
                for m in described.members} == {"m1": (2, [0, 1]), "m2": (2, [2, 3])}

        R = OFFSET_COMMIT.request

        def commit(epoch, member="m1", partition=0):
            response = raw(OFFSET_COMMIT, 9, group_id=group, generation_id_or_member_epoch=epoch,
                           member_id=member, topics=[R.OffsetCommitRequestTopic(name=topic, partitions=[
                               R.OffsetCommitRequestPartition(partition_index=partition, committed_offset=7)])])
            return response.topics[0].partitions[0].error_code
        # KIP-1251: an older epoch commits the partitions the member has held since then.
        assert commit(1, partition=2) == ErrorCode.STALE_MEMBER_EPOCH  # m1's at epoch 1, now m2's
        assert commit(3) == ErrorCode.STALE_MEMBER_EPOCH  # ahead of the member
        assert commit(1, partition=0) == ErrorCode.NONE  # m1's since epoch 1
        assert commit(2, member="ghost") == ErrorCode.UNKNOWN_MEMBER_ID
        assert commit(-1, member="") == ErrorCode.UNKNOWN_MEMBER_ID  # the group has members
        assert commit(2) == ErrorCode.NONE
        F = OFFSET_FETCH.request

        def fetch(member, epoch):
            [answer] = raw(OFFSET_FETCH, 9, groups=[F.OffsetFetchRequestGroup(
                group_id=group, member_id=member, member_epoch=epoch, topics=[
                    F.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]).groups
            return answer.error_code, [p.committed_offset for t in answer.topics for p in t.partitions]
        assert fetch("m1", 1) == (ErrorCode.STALE_MEMBER_EPOCH, [])
        assert fetch("ghost", 2) == (ErrorCode.UNKNOWN_MEMBER_ID, [])
        assert fetch("m1", 2) == (ErrorCode.NONE, [7])
        assert fetch(None, -1) == (ErrorCode.NONE, [7])  # the admin's fetch
        listed = raw(LIST_GROUPS, 5, states_filter=[], types_filter=["consumer"]).groups
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == \
            [(group, "consumer", "consumer", "Stable")]
        assert raw(LIST_GROUPS, 5, states_filter=[], types_filter=["classic"]).groups == []
    finally:
        raw.close()

    broker.restart()
    raw = Raw(broker.port)
    try:
        again = describe(raw, group)
        assert (again.group_state, again.group_epoch, again.assignment_epoch) == ("Stable", 2, 2)
        assert {m.member_id: (m.member_epoch, m.instance_id, m.assignment.topic_partitions[0].partitions)
                for m in again.members} == {"m1": (2, "i1", [0, 1]), "m2": (2, None, [2, 3])}
        assert heartbeat(raw, group, "m1", 2).error_code == ErrorCode.NONE
        assert heartbeat(raw, group, "m1", 3).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert client_offset(broker, group, topic) == 7

        # Static leave, then the instance rejoins under a new member id: same partitions,
        # no new group epoch.
        left = heartbeat(raw, group, "m1", -2, instance_id="i1")
        assert (left.error_code, left.member_epoch) == (ErrorCode.NONE, -2)
        back = join(raw, group, [topic], member_id="m1-again", instance_id="i1", server_assignor="range")
        assert back.error_code == ErrorCode.NONE and back.member_epoch == 2, back
        assert back.assignment.topic_partitions[0].partitions == [0, 1]
        assert {m.member_id for m in describe(raw, group).members} == {"m1-again", "m2"}
        assert describe(raw, group).group_epoch == 2
        assert heartbeat(raw, group, "m1", 2).error_code == ErrorCode.UNKNOWN_MEMBER_ID

        gone = heartbeat(raw, group, "m2", -1)
        assert (gone.error_code, gone.member_epoch) == (ErrorCode.NONE, -1)
        assert describe(raw, group).group_epoch == 3

        # Deleted once empty, offsets and all.
        deleted = raw(DELETE_GROUPS, 2, groups_names=[group]).results[0].error_code
        assert deleted == ErrorCode.NON_EMPTY_GROUP
        assert heartbeat(raw, group, "m1-again", -1).error_code == ErrorCode.NONE
        assert raw(DELETE_GROUPS, 2, groups_names=[group]).results[0].error_code == ErrorCode.NONE
        assert describe(raw, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        with Client(broker.bootstrap_servers) as client:
            assert client.consumer.fetch_offsets(group) == {}
    finally:
        raw.close()


def test_member_that_does_not_revoke_in_time_is_fenced(start_broker):  # noqa: F811
    broker = start_broker(**PATIENT_CONFIG, group_consumer_max_size=2)
    topic, group = "slow848", "slow848-group"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({topic: NewTopic(partitions=4, replication_factor=1)})
    raw = Raw(broker.port)
    try:
        first = heartbeat(raw, group, "slow", 0, rebalance_timeout_ms=1000, subscribed_topic_names=[topic],
                          topic_partitions=[], server_assignor="range")
        assert first.member_epoch == 1
        assert join(raw, group, [topic], member_id="next").member_epoch == 2
        full = join(raw, group, [topic], member_id="third")
        assert (full.error_code, full.member_epoch) == (ErrorCode.GROUP_MAX_SIZE_REACHED, 0)
        asked = heartbeat(raw, group, "slow", 1, topic_partitions=owned(first))  # range: "next" < "slow"
        assert asked.assignment.topic_partitions[0].partitions == [2, 3]  # asked to revoke 0-1
        started = time.monotonic()

        def taken_over():
            answer = heartbeat(raw, group, "next", 2)
            return answer.assignment is not None and answer.assignment.topic_partitions
        # "slow" never revokes: fenced after its rebalance timeout (1 s), long before its
        # session (60 s) ends; the group moves on without it.
        wait_for(taken_over, 20, "the partitions of the member that did not revoke")
        assert 1.0 <= time.monotonic() - started < 20
        assert heartbeat(raw, group, "slow", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert [m.member_id for m in describe(raw, group).members] == ["next"]
    finally:
        raw.close()


def client_offset(broker, group: str, topic: str) -> int:
    with Client(broker.bootstrap_servers) as client:
        return client.consumer.fetch_offsets(group)[(topic, 0)].offset


def test_empty_classic_group_is_taken_over_by_a_consumer_protocol_member(start_broker):  # noqa: F811
    broker = start_broker(**CONSUMER_CONFIG)
    bootstrap, topic, group = broker.bootstrap_servers, "takeover", "takeover-group"
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=2, replication_factor=1)})
    produce(bootstrap, topic, range(0, 100), 2)

    def consumer(**extra):
        return ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, **extra})

    def consume(c, want):
        got, deadline = [], time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is not None and not msg.error():
                got.append(int(msg.value()))
        return got

    classic = consumer(**{"session.timeout.ms": 6000})
    classic.subscribe([topic])
    first = consume(classic, 50)
    classic.commit(asynchronous=False)
    raw = Raw(broker.port)
    try:
        # While the classic group has a member, a consumer-protocol member is refused.
        assert join(raw, group, [topic]).error_code == ErrorCode.GROUP_ID_NOT_FOUND
        classic.close()
        modern = consumer(**{"group.protocol": "consumer"})
        modern.subscribe([topic])
        rest = consume(modern, 50)
        modern.commit(asynchronous=False)
        described = describe(raw, group)
        assert described.error_code == ErrorCode.NONE and len(described.members) == 1, described
        # And back: a classic member is refused while the consumer group has a member,
        # takes the group over once it is empty and resumes from its offsets.
        assert _join(raw, group, member="x").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        modern.close()
        produce(bootstrap, topic, range(100, 120), 2)
        classic = consumer(**{"session.timeout.ms": 6000})
        classic.subscribe([topic])
        last = consume(classic, 20)
        classic.commit(asynchronous=False)
        assert describe(raw, group).error_code == ErrorCode.GROUP_ID_NOT_FOUND  # a classic group now
        classic.close()
    finally:
        raw.close()
    assert len(first) == 50 and sorted(first + rest) == list(range(100)), (sorted(first), sorted(rest))
    assert sorted(last) == list(range(100, 120)), sorted(last)
    broker.restart()  # the records of both kinds replay to the classic group and its offsets
    with Client(broker.bootstrap_servers) as client:
        assert {p: o.offset for (t, p), o in client.consumer.fetch_offsets(group).items()} == \
            end_offsets(client, topic, 2)
        assert client.admin.describe_groups([group])[group].state == "Empty"


def test_regex_subscription_picks_up_new_topics(start_broker):  # noqa: F811
    broker = start_broker(**CONSUMER_CONFIG)
    bootstrap, group = broker.bootstrap_servers, "regex-group"
    with Client(bootstrap) as client:
        client.admin.create_topics({"re848-a": NewTopic(partitions=2, replication_factor=1),
                              "other848": NewTopic(partitions=1, replication_factor=1)})
    produce(bootstrap, "re848-a", range(0, 10), 2)
    produce(bootstrap, "other848", range(0, 10), 1)
    raw = Raw(broker.port)
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                            "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500})
    try:
        for bad in ("re848-(?=a)", "re848-[", r"(re848)\1"):
            assert join(raw, "regex-bad", [], subscribed_topic_regex=bad).error_code == \
                ErrorCode.INVALID_REGULAR_EXPRESSION, bad
        consumer.subscribe(["^re848-.*"])
        got: dict[str, set[int]] = {}

        def consumed(topic, count):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got.setdefault(msg.topic(), set()).add(int(msg.value()))
            return len(got.get(topic, ())) >= count
        wait_for(lambda: consumed("re848-a", 10), 30, "the records of re848-a")
        [member] = describe(raw, group).members
        # librdkafka sends its regexes joined as one: "(^re848-.*)".
        assert (member.subscribed_topic_regex, member.subscribed_topic_names) == ("(^re848-.*)", [])
        with Client(bootstrap) as client:
            client.admin.create_topics({"re848-b": NewTopic(partitions=3, replication_factor=1)})
        produce(bootstrap, "re848-b", range(100, 110), 3)
        wait_for(lambda: consumed("re848-b", 10), 30, "the records of re848-b, created after the subscription")
        assigned = {tp.topic_name: sorted(tp.partitions) for tp in describe(raw, group).members[0].assignment.topic_partitions}
        assert assigned == {"re848-a": [0, 1], "re848-b": [0, 1, 2]}
        assert set(got) == {"re848-a", "re848-b"}  # never the topic the regex does not match
        consumer.close()
    finally:
        raw.close()


def test_offsets_of_an_empty_consumer_group_expire_with_it(tmp_path):
    """Offsets retention of consumer groups on the coordinator itself, with a manual clock:
    an empty group's offsets go `offsets.retention.minutes` after their commit, the group
    with the last of them; a group with members keeps its offsets."""
    import asyncio

    from broker.config import BrokerConfig
    from broker.groups.offsets_log import CommittedOffset
    from tests.manual_clock import ManualClock
    from tests.replicas import group_coordinator, topic_manager

    config = BrokerConfig(data_dir=str(tmp_path), offsets_retention_minutes=1, offsets_topic_num_partitions=3)
    topics = topic_manager(config)
    topics.load()
    topics.create("expiring", 2, {})
    clock = ManualClock()
    groups = group_coordinator(config, topics, clock)
    R = CONSUMER_GROUP_HEARTBEAT.request

    async def member_commits(group, offset, leave):
        joined = await groups.consumer_groups.heartbeat(R(
            group_id=group, member_id=f"{group}-m", member_epoch=0, rebalance_timeout_ms=5000,
            subscribed_topic_names=["expiring"], topic_partitions=[]), 1, "client", "/127.0.0.1")
        codes = await groups.offsets.commit(group, joined.member_epoch, joined.member_id, None, {
            ("expiring", 0): CommittedOffset(offset, -1, "", clock.wall_ms())})
        assert codes == {("expiring", 0): ErrorCode.NONE}
        if leave:
            await groups.consumer_groups.heartbeat(R(group_id=group, member_id=joined.member_id, member_epoch=-1),
                                                   1, "client", "/127.0.0.1")

    asyncio.run(member_commits("left", 5, leave=True))
    asyncio.run(member_commits("stays", 6, leave=False))
    asyncio.run(clock.advance(59))
    groups.expire_offsets()
    assert set(groups.consumer_groups.groups) == {"left", "stays"}
    asyncio.run(clock.advance(2))
    groups.expire_offsets()
    assert set(groups.consumer_groups.groups) == {"stays"}
    assert groups.offsets.committed("left") == {}
    assert {tp: c.offset for tp, c in groups.offsets.committed("stays").items()} == {("expiring", 0): 6}

    replayed = group_coordinator(config, topics, clock)  # what a restart loads from __consumer_offsets
    asyncio.run(replayed.load())
    assert set(replayed.consumer_groups.groups) == {"stays"} and replayed.groups == {}
    assert replayed.offsets.committed("left") == {}
    topics.close()


def test_suspended_partition_expires_no_consumer_group_member(tmp_path):
    """On the coordinator itself, with a manual clock: while a consumer group's partition is
    suspended (after a stall), heartbeats answer COORDINATOR_LOAD_IN_PROGRESS but count, and
    no member is fenced however long it lasts; once ZooKeeper's word resumes it, the
    member carries on at its epoch."""
    import asyncio

    from broker.config import BrokerConfig
    from broker.groups.offsets_log import TOPIC as OFFSETS_TOPIC
    from tests.manual_clock import ManualClock
    from tests.replicas import group_coordinator, topic_manager

    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=1)
    topics = topic_manager(config)
    topics.load()
    topics.create("t", 1, {})
    clock = ManualClock()
    groups = group_coordinator(config, topics, clock)
    R = CONSUMER_GROUP_HEARTBEAT.request

    async def scenario():
        async def beat(epoch, **fields):
            try:
                result = await groups.consumer_groups.heartbeat(
                    R(group_id="g", member_id="m", member_epoch=epoch, **fields), 1, "client", "/127.0.0.1")
            except BrokerError as exc:
                return exc.code, None
            return ErrorCode.NONE, result.member_epoch

        assert await beat(0, rebalance_timeout_ms=5000, subscribed_topic_names=["t"], topic_partitions=[]) == \
            (ErrorCode.NONE, 1)
        coordinated = groups.runtime.coordinated
        (index,) = coordinated.coordinated()
        epoch = topics.partition(OFFSETS_TOPIC, index).leader_epoch
        coordinated.suspend()
        for _ in range(3):  # 120 s in all: nearly three sessions (45 s), a heartbeat every 40 s
            await clock.advance(40)
            assert await beat(1) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None)
            groups.expire_sessions()
        coordinated.confirm(index, True, epoch)
        groups.expire_sessions()
        await asyncio.sleep(0)  # a fencing would have started
        assert await beat(1) == (ErrorCode.NONE, 1)
        assert list(groups.consumer_groups.groups["g"].members) == ["m"]

    asyncio.run(scenario())
    topics.close()


def _sluice_groups(bootstrap: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sluice.cli", "groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_sluice_groups_describes_a_consumer_group_and_will_not_reset_it_while_active(start_broker):  # noqa: F811
    """`sluice groups describe` of a KIP-848 group (ConsumerGroupDescribe): its type, state,
    assignor, epochs, and each member's epoch, owned and target partitions, beside the
    committed offsets; reset-offsets is refused while it has members, as for a classic
    group with members."""
    broker = start_broker(**PATIENT_CONFIG)
    topic, group = "described848", "described848-group"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({topic: NewTopic(partitions=2, replication_factor=1)})
    raw = Raw(broker.port)
    try:
        first = join(raw, group, [topic], member_id="only", server_assignor="range")
        assert first.member_epoch == 1
        assert heartbeat(raw, group, "only", 1, topic_partitions=owned(first)).error_code == ErrorCode.NONE
        committed = raw(OFFSET_COMMIT, 9, group_id=group, generation_id_or_member_epoch=1, member_id="only",
                        group_instance_id=None, topics=[OFFSET_COMMIT.request.OffsetCommitRequestTopic(
                            name=topic, partitions=[OFFSET_COMMIT.request.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=0, committed_leader_epoch=-1,
                                committed_metadata="")])])
        assert committed.topics[0].partitions[0].error_code == ErrorCode.NONE

        described = _sluice_groups(broker.bootstrap_servers, "describe", group, "--output", "json")
        assert described.returncode == 0, described.stderr
        document = json.loads(described.stdout)
        assert (document["type"], document["state"], document["protocol"], document["group_epoch"],
                document["assignment_epoch"]) == ("consumer", "Stable", "range", 1, 1), document
        [member] = document["members"]
        assert (member["member_id"], member["member_epoch"], member["subscription"]) == ("only", 1, [topic])
        assert member["assignment"] == member["target_assignment"] == [{"topic": topic, "partitions": [0, 1]}]
        assert [(o["partition"], o["current_offset"], o["member_id"]) for o in document["offsets"]] == [
            (0, 0, "only"), (1, None, "only")]

        page = group_page(document, lag_interval_ms=1000, reset_form="", notice=None, cluster_id=None).decode()
        assert "consumer</span>\ngroup, assignor range · group epoch 1 · assignment epoch 1" in page, page
        assert "<th>Member epoch</th>" in page and f"<td>{topic}:0,1</td><td>{topic}:0,1</td>" in page, page

        text = _sluice_groups(broker.bootstrap_servers, "describe", group).stdout
        assert "Type: consumer  State: Stable" in text and "GroupEpoch: 1  AssignmentEpoch: 1" in text, text
        assert f"{topic}:0,1" in text and "TARGET-ASSIGNMENT" in text, text

        reset = _sluice_groups(broker.bootstrap_servers, "reset-offsets", "--group", group, "--topic", topic,
                               "--to-earliest", "--execute")
        assert reset.returncode != 0 and "active member" in reset.stderr, (reset.stdout, reset.stderr)
    finally:
        raw.close()
