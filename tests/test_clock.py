"""Timeouts on the broker's injected clock: a broker in this process runs on a
ManualClock, clients talk to it over loopback, and the test advances time instead of
sleeping.

- Groups (members sending wire's JoinGroup/SyncGroup/Heartbeat requests on their own
  connections, Sluice's client's DescribeGroups to watch): a member that stops heartbeating stays a member until its
  session timeout has passed on the clock, and is removed at the next check after it;
  a rebalance that a member does not rejoin completes, without it, once the rebalance
  timeout has passed, and not before. Time the broker stood still (the clock jumping
  three session timeouts with nothing run, as under SIGSTOP) does not count: both
  members stay, and a silent one goes a session timeout after its last heartbeat.
- Transactions (Sluice's client): a transaction left open stays Ongoing until its
  timeout has passed on the clock, then the coordinator aborts it with the epoch
  bumped: DescribeTransactions and ListTransactions say CompleteAbort, and the
  abandoned producer is fenced (EndTxn PRODUCER_FENCED, its produce
  INVALID_PRODUCER_EPOCH).

Every wait for the broker is a bounded poll of its answers; no test sleeps.
"""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from broker.broker import Broker
from broker.config import build_config
from tests.manual_clock import ManualClock
from sluice_client import AsyncClient, NewTopic
from wire.error_codes import ErrorCode
from wire.errors import KafkaError, check
from wire.messages import HEARTBEAT, JOIN_GROUP, SYNC_GROUP
from wire.protocol import RequestHeader, decode_response, encode_request
from wire.records import build_batch

pytestmark = pytest.mark.timeout(60)

SESSION_MS = 10_000
REBALANCE_MS = 20_000
TXN_TIMEOUT_MS = 30_000
TXN_CHECK_MS = 1_000


def run_broker(tmp_path, scenario, **properties) -> None:
    """Run `scenario(client, clock)` against a broker started on a ManualClock, with
    the given broker properties, on one event loop."""
    async def main():
        config, _ = build_config(properties, {"data_dir": str(tmp_path), "port": 0,
                                              "host": "127.0.0.1"})
        clock = ManualClock()
        broker = Broker(config, clock)
        await broker.start()
        try:
            async with AsyncClient(f"127.0.0.1:{broker.server.port}") as client:
                await asyncio.wait_for(scenario(client, clock), 45)
        finally:
            await broker.stop()

    asyncio.run(main())


async def until(probe, what: str, timeout: float = 10.0):
    """The first truthy result of the coroutine function `probe`, polled for at most
    `timeout` seconds of real time (the broker answers at once; this only lets its
    requests arrive)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


_SIZE = struct.Struct(">i")


class GroupMember:
    """One member of a group, sending the group requests itself (Sluice's client has
    no group membership) on its own connection, one request at a time."""

    def __init__(self, client: AsyncClient, group: str, name: str):
        self.address = client.bootstrap[0]
        self.name = name
        self.group = group
        self.member_id = ""
        self.generation = -1
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self._correlation_id = 0

    async def request(self, api, version: int, body):
        if self._streams is None:
            self._streams = await asyncio.open_connection(*self.address)
        reader, writer = self._streams
        self._correlation_id += 1
        frame = encode_request(RequestHeader(
            request_api_key=api.key, request_api_version=version,
            correlation_id=self._correlation_id, client_id=self.name), body)
        writer.write(_SIZE.pack(len(frame)) + frame)
        (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
        header, response = decode_response(api.key, version, await reader.readexactly(size))
        assert header.correlation_id == self._correlation_id
        return response

    async def join(self):
        for _ in range(2):  # a new member is told the id to join with, then joins
            response = await self.request(JOIN_GROUP, 5, JOIN_GROUP.request(
                group_id=self.group, session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=REBALANCE_MS, member_id=self.member_id,
                group_instance_id=None, protocol_type="consumer",
                protocols=[JOIN_GROUP.request.JoinGroupRequestProtocol(name="range", metadata=b"")]))
            self.member_id = response.member_id
            if response.error_code != ErrorCode.MEMBER_ID_REQUIRED:
                break
        check(response.error_code, "JoinGroup")
        self.generation = response.generation_id
        return response

    async def sync(self, assignments: dict[str, bytes] | None = None) -> bytes:
        assignment = SYNC_GROUP.request.SyncGroupRequestAssignment
        response = await self.request(SYNC_GROUP, 3, SYNC_GROUP.request(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, assignments=[assignment(member_id=m, assignment=a)
                                                 for m, a in (assignments or {}).items()]))
        check(response.error_code, "SyncGroup")
        return bytes(response.assignment)

    async def heartbeat(self) -> int:
        response = await self.request(HEARTBEAT, 3, HEARTBEAT.request(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None))
        return response.error_code

    async def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()


async def described(client: AsyncClient, group: str) -> tuple[str, set[str]]:
    description = (await client.admin.describe_groups([group]))[group]
    return description.state, {m.member_id for m in description.members}


def test_session_and_rebalance_timeouts_follow_the_clock(tmp_path):
    async def scenario(client: AsyncClient, clock: ManualClock):
        group = "clocked"
        a, b, c = (GroupMember(client, group, name) for name in ("a", "b", "c"))
        try:
            assert (await a.join()).leader == a.member_id  # alone: no delay to wait for
            await a.sync({a.member_id: b"a"})
            b_joins = asyncio.create_task(b.join())
            await until(lambda: _told_to_rejoin(a), "the rebalance b's JoinGroup starts")
            await asyncio.gather(a.join(), b_joins)
            await asyncio.gather(a.sync({a.member_id: b"a", b.member_id: b"b"}), b.sync())
            assert await described(client, group) == ("Stable", {a.member_id, b.member_id})

            # a stops heartbeating; b goes on. a stays a member for its whole session
            # timeout, and is gone one second of the clock later.
            for _ in range(SESSION_MS // 1000):
                await clock.advance(1)
                assert await b.heartbeat() == ErrorCode.NONE
                assert await described(client, group) == ("Stable", {a.member_id, b.member_id})
            await clock.advance(1)
            assert await described(client, group) == ("PreparingRebalance", {b.member_id})
            await b.join()
            assert b.generation == 3 and await b.sync({b.member_id: b"b"}) == b"b"

            # c joins; b heartbeats (told to rejoin) but never rejoins: c's JoinGroup is
            # answered once the rebalance timeout has passed, with b removed.
            c_joins = asyncio.create_task(c.join())
            rebalancing = await until(lambda: _rebalancing_with(client, group, 2),
                                      "c's JoinGroup to start a rebalance")
            assert rebalancing == ("PreparingRebalance", {b.member_id, c.member_id})
            for _ in range(REBALANCE_MS // 1000):
                await clock.advance(1)
                assert await b.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS
                assert await described(client, group) == rebalancing
            await clock.advance(1)
            joined = await asyncio.wait_for(c_joins, 10)
            assert (joined.generation_id, joined.leader) == (4, c.member_id)
            assert [m.member_id for m in joined.members] == [c.member_id]
            assert await b.heartbeat() == ErrorCode.UNKNOWN_MEMBER_ID
            await c.sync({c.member_id: b"c"})
            assert await described(client, group) == ("Stable", {c.member_id})
        finally:
            for member in (a, b, c):
                await member.close()

    run_broker(tmp_path, scenario, **{"group.initial.rebalance.delay.ms": "0",
                                      "offsets.topic.num.partitions": "1"})


def test_time_the_broker_stood_still_does_not_count_against_sessions(tmp_path):
    async def scenario(client: AsyncClient, clock: ManualClock):
        group = "stalled"
        a, b = (GroupMember(client, group, name) for name in ("a", "b"))
        try:
            await a.join()
            await a.sync({a.member_id: b"a"})
            b_joins = asyncio.create_task(b.join())
            await until(lambda: _told_to_rejoin(a), "the rebalance b's JoinGroup starts")
            await asyncio.gather(a.join(), b_joins)
            await asyncio.gather(a.sync({a.member_id: b"a", b.member_id: b"b"}), b.sync())

            # The broker stands still for three session timeouts (SIGSTOP: the clock runs
            # on, nothing runs), then goes on: it heard no heartbeat meanwhile, so the
            # members' sessions go on from where they were.
            clock.stall(3 * SESSION_MS / 1000)
            await clock.advance(0.5)
            assert await described(client, group) == ("Stable", {a.member_id, b.member_id})
            assert await a.heartbeat() == ErrorCode.NONE and await b.heartbeat() == ErrorCode.NONE

            # From then on the clock counts as before: b, silent, goes after its session.
            for _ in range(SESSION_MS // 1000):
                await clock.advance(1)
                assert await a.heartbeat() == ErrorCode.NONE
                assert await described(client, group) == ("Stable", {a.member_id, b.member_id})
            await clock.advance(1)
            assert await described(client, group) == ("PreparingRebalance", {a.member_id})
        finally:
            for member in (a, b):
                await member.close()

    run_broker(tmp_path, scenario, **{"group.initial.rebalance.delay.ms": "0",
                                      "offsets.topic.num.partitions": "1"})


async def _told_to_rejoin(member: GroupMember) -> bool:
    return await member.heartbeat() == ErrorCode.REBALANCE_IN_PROGRESS


async def _rebalancing_with(client: AsyncClient, group: str, members: int):
    """The group's description once it prepares a rebalance with `members` members."""
    state, member_ids = await described(client, group)
    return (state, member_ids) if state == "PreparingRebalance" and len(member_ids) == members else None


def test_open_transaction_is_aborted_when_its_timeout_passes_on_the_clock(tmp_path):
    async def scenario(client: AsyncClient, clock: ManualClock):
        topic, txn_id = "clocked", "clocked-txn"
        await client.admin.create_topics({topic: NewTopic(partitions=1, replication_factor=1)})
        pid, epoch = await client.producer.init_transactions(txn_id, transaction_timeout_ms=TXN_TIMEOUT_MS)
        await client.producer.add_partitions_to_txn(txn_id, pid, epoch, {topic: [0]})
        started_ms = clock.wall_ms()
        batch = build_batch([(None, b"left open", (), started_ms)], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        await client.producer.produce_batch(topic, 0, batch, transactional_id=txn_id)
        opened = await client.admin.describe_transaction(txn_id)
        assert (opened.state, opened.start_ms) == ("Ongoing", started_ms)

        await clock.advance(TXN_TIMEOUT_MS / 1000)  # the timeout is reached, not passed
        assert (await client.admin.describe_transaction(txn_id)).state == "Ongoing"
        await clock.advance(TXN_CHECK_MS / 1000)  # passed, and the abort check has run
        aborted = await client.admin.describe_transaction(txn_id)
        assert (aborted.state, aborted.producer_id, aborted.producer_epoch) == \
            ("CompleteAbort", pid, epoch + 1)
        assert [t.transactional_id for t in await client.admin.list_transactions(["CompleteAbort"])] == [txn_id]
        assert await client.admin.list_transactions(["Ongoing"]) == []

        with pytest.raises(KafkaError) as fenced:
            await client.producer.end_txn(txn_id, pid, epoch, commit=True)
        assert fenced.value.code == ErrorCode.PRODUCER_FENCED
        late = build_batch([(None, b"too late", (), clock.wall_ms())], producer_id=pid,
                           producer_epoch=epoch, base_sequence=1, transactional=True)
        with pytest.raises(KafkaError) as refused:
            await client.producer.produce_batch(topic, 0, late, transactional_id=txn_id)
        assert refused.value.code == ErrorCode.INVALID_PRODUCER_EPOCH

    run_broker(tmp_path, scenario, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": str(TXN_CHECK_MS),
        "transaction.state.log.num.partitions": "1", "offsets.topic.num.partitions": "1"})
