"""Consumer groups and committed offsets against the real broker process, with real clients.

- One group of three confluent-kafka consumers, one kafka-python and one aiokafka consumer
  (each in its own process; kafka-python auto-commits, the others commit what each poll
  returned) over a 10-partition topic: once stable, the assignment every client reports
  is disjoint from the others', covers every partition and is what DescribeGroups says;
  every record is consumed; a clean leave (close()) and a SIGKILL (noticed after the
  session timeout) both rebalance the rest; the only records consumed twice are exactly
  those the killed member consumed after its last commit, and the offsets committed at
  the end are the log ends.
- Committed offsets survive a clean restart and a SIGKILL of the broker (OffsetFetch by
  confluent's committed() and by Sluice's client); a consumer kept running across both
  carries on, and a new one resumes from the committed offsets; nothing is lost.
- Static membership: a confluent member with group.instance.id (the leader, then a
  follower) closes (no LeaveGroup) and a new one with the same instance id comes back
  within the session timeout: the
  others see no rebalance (no callbacks, the group never leaves Stable) and it gets its
  old assignment back. A second live consumer with the same instance id fences the
  first (FENCED_INSTANCE_ID, fatal in librdkafka).
- OffsetCommit/OffsetFetch/JoinGroup/DeleteGroups edge cases over raw sockets, each
  answered with Kafka's error; afterwards the broker is alive, printed no traceback and
  replays the same offsets after a restart. Commits during a rebalance: accepted while it
  is being prepared, REBALANCE_IN_PROGRESS while it completes (Kafka's rules).
- `__consumer_offsets` holds Kafka's key/value layout, in Kafka's partition for the group.
- With a small offsets segment size the log cleaner compacts `__consumer_offsets` (its
  size on disk stays bounded, its log start offset stays 0), and the offsets and the
  group replay correctly after a clean restart and after SIGKILL; the topic stays
  internal (tests/test_offsets_compaction.py has transactional commits too). Expiry of an empty
  group's offsets is tested on the coordinator itself with a manual clock, across a reload.

Every wait is bounded in time; workers exit by themselves after a deadline.
Run as `python -m tests.test_groups worker ...` this module is a consumer process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_LIFETIME_S = 150.0
HEARTBEAT_MS = 500


# ---------------------------------------------------------------------------------------
# Worker processes: one consumer each, reporting JSON lines on stdout. "close" on stdin
# (or stdin closing) closes the consumer cleanly; the test may also SIGKILL it.
# ---------------------------------------------------------------------------------------

def _emit(kind: str, **fields) -> None:
    sys.stdout.write(json.dumps({"ev": kind, **fields}) + "\n")
    sys.stdout.flush()


def _report(consumed, ends, committed_ok, error=None):
    if consumed:
        _emit("recs", recs=consumed)
    if ends:
        if committed_ok:
            _emit("commit", offsets=ends)
        else:
            _emit("commit_failed", offsets=ends, error=error)


def _run_confluent(bootstrap, group, topic, client_id, session_ms, stop, deadline, hold_from=-1,
                   group_protocol="classic", static=False):
    """`hold_from` >= 0: stop committing once a record with that id or a larger one arrived
    (so that a crash leaves consumed records uncommitted, known exactly). With
    `group_protocol` "consumer" (KIP-848) the broker assigns and sets the session timeout
    and heartbeat interval; the callbacks then report partitions added and removed.
    `static`: the client id is also the group.instance.id."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
              "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    if static:
        config["group.instance.id"] = client_id
    if group_protocol == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": HEARTBEAT_MS,
                       "partition.assignment.strategy": "roundrobin"})
    consumer = Consumer(config)
    consumer.subscribe([topic],
                       on_assign=lambda c, ps: _emit("assign", parts=[p.partition for p in ps], at=time.time()),
                       on_revoke=lambda c, ps: _emit("revoke", parts=[p.partition for p in ps], at=time.time()))
    reported, holding = None, False
    while not stop.is_set() and time.monotonic() < deadline:
        consumed, ends = [], {}
        for msg in consumer.consume(200, 0.2):
            if msg.error():
                _emit("error", error=str(msg.error()))
                continue
            consumed.append([msg.partition(), msg.offset(), msg.value().decode()])
            ends[msg.partition()] = msg.offset() + 1
            holding = holding or 0 <= hold_from <= int(msg.value())
        if holding:
            _emit("recs", recs=consumed)
            consumed, ends = [], {}
        error = None
        if ends:
            try:
                consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in ends.items()],
                                asynchronous=False)
            except KafkaException as exc:
                error = str(exc)
        _report(consumed, ends, error is None, error)
        assignment = sorted(tp.partition for tp in consumer.assignment())
        if assignment != reported:
            _emit("assignment", parts=assignment)
            reported = assignment
    consumer.close()


def _run_kafka_python(bootstrap, group, topic, client_id, session_ms, stop, deadline):
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            _emit("revoke", parts=[tp.partition for tp in revoked])

        def on_partitions_assigned(self, assigned):
            _emit("assign", parts=[tp.partition for tp in assigned])

    # Auto-commit: kafka-python commits what poll() returned every second, before it
    # rejoins in a rebalance (the group is then preparing the rebalance) and on close.
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
                             session_timeout_ms=session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
                             enable_auto_commit=True, auto_commit_interval_ms=1000,
                             auto_offset_reset="earliest",
                             partition_assignment_strategy=[RoundRobinPartitionAssignor],
                             max_poll_records=200)
    consumer.subscribe([topic], listener=Listener())
    reported = None
    while not stop.is_set() and time.monotonic() < deadline:
        consumed = [[tp.partition, r.offset, r.value.decode()]
                    for tp, records in consumer.poll(timeout_ms=200).items() for r in records]
        _report(consumed, {}, True)
        assignment = sorted(tp.partition for tp in consumer.assignment())
        if assignment != reported:
            _emit("assignment", parts=assignment)
            reported = assignment
    consumer.close()


def _run_aiokafka(bootstrap, group, topic, client_id, session_ms, stop, deadline):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    async def main():
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id,
            session_timeout_ms=session_ms, heartbeat_interval_ms=HEARTBEAT_MS,
            enable_auto_commit=False, auto_offset_reset="earliest",
            partition_assignment_strategy=(RoundRobinPartitionAssignor,))
        await consumer.start()
        reported = None
        try:
            while not stop.is_set() and time.monotonic() < deadline:
                consumed, ends = [], {}
                batches = await consumer.getmany(timeout_ms=200, max_records=200)
                for tp, records in batches.items():
                    for r in records:
                        consumed.append([tp.partition, r.offset, r.value.decode()])
                        ends[tp.partition] = r.offset + 1
                error = None
                if ends:
                    try:
                        await consumer.commit({TopicPartition(topic, p): o for p, o in ends.items()})
                    except Exception as exc:
                        error = repr(exc)
                _report(consumed, ends, error is None, error)
                assignment = sorted(tp.partition for tp in consumer.assignment())
                if assignment != reported:
                    _emit("assignment", parts=assignment)
                    reported = assignment
        finally:
            await consumer.stop()

    asyncio.run(main())


def _worker_main(argv: list[str]) -> None:
    kind, bootstrap, group, topic, client_id, session_ms, hold_from = argv
    stop = threading.Event()

    def watch_stdin():
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    run = {"confluent": _run_confluent, "confluent-kip848": _run_confluent, "confluent-kip848-static": _run_confluent,
           "kafka-python": _run_kafka_python, "aiokafka": _run_aiokafka}[kind]
    options = {"hold_from": int(hold_from)} if int(hold_from) >= 0 else {}
    if kind.startswith("confluent-kip848"):
        options["group_protocol"] = "consumer"
        options["static"] = kind.endswith("-static")
    run(bootstrap, group, topic, client_id, int(session_ms), stop,
        time.monotonic() + WORKER_LIFETIME_S, **options)
    _emit("closed")


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker_main(sys.argv[2:])
    sys.exit(0)


# ---------------------------------------------------------------------------------------
# The tests
# ---------------------------------------------------------------------------------------

import pytest  # noqa: E402

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.manual_clock import ManualClock  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.log_files import log_bytes  # noqa: E402
from tests.replicas import group_coordinator, topic_manager  # noqa: E402
from sluice_client import EARLIEST, LATEST, Client, NewTopic  # noqa: E402
from wire.error_codes import ErrorCode  # noqa: E402
from wire.messages import (API_VERSIONS, CONSUMER_PROTOCOL_ASSIGNMENT,  # noqa: E402
                           CONSUMER_PROTOCOL_SUBSCRIPTION, DELETE_GROUPS, DESCRIBE_GROUPS,
                           GROUP_METADATA_KEY, GROUP_METADATA_VALUE, HEARTBEAT, JOIN_GROUP,
                           LEAVE_GROUP, LIST_GROUPS, OFFSET_COMMIT, OFFSET_COMMIT_KEY,
                           OFFSET_COMMIT_VALUE, OFFSET_DELETE, OFFSET_FETCH, SYNC_GROUP)
from wire.protocol import RequestHeader, decode_response, encode_request  # noqa: E402

ck = pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")
pytest.importorskip("aiokafka")

pytestmark = pytest.mark.timeout(150)

OFFSETS_TOPIC = "__consumer_offsets"
BASE_CONFIG = {
    "group.initial.rebalance.delay.ms": "300",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "auto.create.topics.enable": "false",
}


@pytest.fixture
def start_broker(tmp_path):
    """start_broker(**overrides) -> a started BrokerProcess with BASE_CONFIG plus overrides
    (keys with '_' for '.'). At teardown it is stopped and must not have printed a traceback."""
    started = []

    def start(**overrides):
        config = dict(BASE_CONFIG)
        config.update({k.replace("_", "."): str(v) for k, v in overrides.items()})
        path = tmp_path / f"server-{len(started)}.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        proc = BrokerProcess(tmp_path / f"data-{len(started)}", config_file=str(path))
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        if proc.proc is not None:
            proc.stop()
    for proc in started:
        output = "".join(proc.output)
        assert "Traceback" not in output, output[-5000:]


def produce(bootstrap: str, topic: str, ids, partitions: int) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    failures = []
    for i in ids:
        producer.produce(topic, value=str(i).encode(), partition=i % partitions,
                         on_delivery=lambda err, msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(20) == 0 and not failures, failures


def end_offsets(client: Client, topic: str, partitions: int) -> dict[int, int]:
    return {p: o.offset for p, o in client.consumer.list_offsets(topic, range(partitions), LATEST).items()}


# -- workers seen from the test -----------------------------------------------------------

class Worker:
    """A consumer process (see the top of this module) and what it reported."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, name: str,
                 session_ms: int, hold_from: int = -1):
        self.kind, self.name = kind, name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.test_groups", "worker", kind, bootstrap, group, topic,
             name, str(session_ms), str(hold_from)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=ROOT)
        self.lock = threading.Lock()
        self.records: list[tuple[int, int, str]] = []
        self.committed: dict[int, int] = {}  # partition -> last offset it reported committed
        self.commit_failures: list = []
        self.assignment: set[int] | None = None
        self.callbacks: list[tuple[str, list]] = []
        self.timeline: list[tuple[float, str, list]] = []  # (time.time(), assign/revoke, parts): confluent's
        self.errors: list[str] = []
        self.closed = False
        self.stderr: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue  # a line cut short by SIGKILL
            with self.lock:
                kind = ev["ev"]
                if kind == "recs":
                    self.records += [tuple(r) for r in ev["recs"]]
                elif kind == "commit":
                    self.committed.update({int(p): o for p, o in ev["offsets"].items()})
                elif kind == "commit_failed":
                    self.commit_failures.append(ev)
                elif kind == "assignment":
                    self.assignment = set(ev["parts"])
                elif kind in ("assign", "revoke"):
                    self.callbacks.append((kind, ev["parts"]))
                    if "at" in ev:
                        self.timeline.append((ev["at"], kind, ev["parts"]))
                elif kind == "error":
                    self.errors.append(ev["error"])
                elif kind == "closed":
                    self.closed = True

    def ids(self) -> list[str]:
        with self.lock:
            return [r[2] for r in self.records]

    def close(self, timeout: float = 30.0) -> None:
        """Ask for a clean close (commit, LeaveGroup) and wait for the process to end."""
        try:
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass
        try:
            assert self.proc.wait(timeout) == 0, self.describe()
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not close within {timeout:g} s\n{self.describe()}")
        wait_for(lambda: self.closed, 5, f"{self.name}'s last report")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.reader.join(10)  # what it wrote before dying is still read

    def describe(self) -> str:
        return f"{self.name} ({self.kind}) stderr:\n" + "".join(self.stderr[-40:])


def wait_stable(client: Client, group: str, topic: str, partitions: int, workers: list[Worker],
                timeout: float = 30.0) -> dict[str, set[int]]:
    """Wait until the group is Stable with exactly `workers` as members, each worker's own
    assignment() equal to what the coordinator holds for it; then check the assignments are
    disjoint and cover every partition. Returns {worker name: partitions}."""
    last = {}

    def settled():
        described = client.admin.describe_groups([group])[group]
        last["described"] = described
        if described.state != "Stable" or \
                sorted(m.client_id for m in described.members) != sorted(w.name for w in workers):
            return None
        held = {m.client_id: set(m.consumer_assignment().get(topic, ())) for m in described.members}
        for w in workers:
            with w.lock:
                if w.assignment != held[w.name]:
                    return None
        return held

    try:
        held = wait_for(settled, timeout, f"group {group} to settle on {[w.name for w in workers]}",
                          interval=0.2)
    except AssertionError:
        reported = {w.name: w.assignment for w in workers}
        raise AssertionError(f"group {group} did not settle: {last.get('described')}, "
                             f"workers report {reported}\n" +
                             "\n".join(w.describe() for w in workers)) from None
    union = [p for parts in held.values() for p in parts]
    assert sorted(union) == list(range(partitions)), f"assignments overlap or miss partitions: {held}"
    assert all(held.values()), f"a member got nothing although there are enough partitions: {held}"
    return held


# -- 1. a mixed group over a 10-partition topic -----------------------------------------------

def test_mixed_clients_share_a_topic_and_survive_leave_and_crash(start_broker):
    broker = start_broker()
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "mixed", "mixed-group", 10
    session_ms = 3000
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
        produce(bootstrap, topic, range(0, 300), partitions)
        kinds = [("confluent", "c1"), ("confluent", "c2"), ("confluent", "c3"),
                 ("kafka-python", "kp"), ("aiokafka", "aio")]
        # c3 will be killed: from record 800 on it consumes without committing.
        workers = {name: Worker(kind, bootstrap, group, topic, name, session_ms,
                                hold_from=800 if name == "c3" else -1)
                   for kind, name in kinds}
        try:
            _run_mixed_group(client, bootstrap, topic, group, partitions, session_ms, workers)
        finally:
            for w in workers.values():
                w.kill()


def _all_ids(workers) -> set[str]:
    return {i for w in workers.values() for i in w.ids()}


def _run_mixed_group(client, bootstrap, topic, group, partitions, session_ms, workers):
    alive = list(workers.values())
    wait_stable(client, group, topic, partitions, alive, timeout=40)
    produced = list(range(0, 600))
    produce(bootstrap, topic, range(300, 600), partitions)
    wait_for(lambda: _all_ids(workers) >= {str(i) for i in produced}, 30, "the first 600 records")

    # A clean leave: the others take over its partitions.
    workers["c2"].close()
    alive.remove(workers["c2"])
    wait_stable(client, group, topic, partitions, alive)
    produce(bootstrap, topic, range(600, 800), partitions)
    produced += range(600, 800)
    wait_for(lambda: _all_ids(workers) >= {str(i) for i in produced}, 30, "records 600-800")

    # A crash while records flow: noticed after the session timeout.
    victim = workers["c3"]
    feeder = threading.Thread(target=lambda: [
        (produce(bootstrap, topic, range(start, start + 50), partitions), time.sleep(0.05))
        for start in range(800, 1200, 50)])
    feeder.start()
    produced += range(800, 1200)
    wait_for(lambda: any(int(i) >= 800 for i in victim.ids()), 20,
               f"{victim.name} to consume new records")
    victim.kill()
    killed_at = time.monotonic()
    alive.remove(victim)
    feeder.join(30)
    held = wait_stable(client, group, topic, partitions, alive, timeout=session_ms / 1000 + 20)
    took = time.monotonic() - killed_at
    assert took >= session_ms / 1000 - 1.0, \
        f"rebalanced {took:.1f} s after the crash, before the session timeout"
    wait_for(lambda: _all_ids(workers) >= {str(i) for i in produced}, 30, "records 800-1200")

    # kafka-python leaves cleanly too; then the rest, and the group is empty.
    workers["kp"].close()
    alive.remove(workers["kp"])
    wait_stable(client, group, topic, partitions, alive)
    produce(bootstrap, topic, range(1200, 1300), partitions)
    produced += range(1200, 1300)
    wait_for(lambda: _all_ids(workers) >= {str(i) for i in produced}, 30, "records 1200-1300")
    for w in list(alive):
        w.close()
    assert client.admin.describe_groups([group])[group].state == "Empty"

    # Every record at least once; twice only when the crashed member had consumed it
    # past its last reported commit of that partition.
    seen: dict[str, list[tuple[str, int, int]]] = {}
    for w in workers.values():
        for p, o, i in w.records:
            seen.setdefault(i, []).append((w.name, p, o))
    assert set(seen) == {str(i) for i in produced}
    duplicates = {i: where for i, where in seen.items() if len(where) > 1}
    allowed = {i for i, where in duplicates.items() if len(where) == 2 and any(
        name == victim.name and o >= victim.committed.get(p, 0) for name, p, o in where)}
    assert set(duplicates) == allowed, {i: duplicates[i] for i in sorted(set(duplicates) - allowed)[:10]}
    # And those the crashed member consumed but had not committed were consumed again.
    uncommitted = {i for p, o, i in victim.records if o >= victim.committed.get(p, 0)}
    assert uncommitted and set(duplicates) == uncommitted, (len(uncommitted), len(duplicates))
    for w in workers.values():
        assert not w.commit_failures, (w.name, w.commit_failures[:3])
        assert not w.errors, (w.name, w.errors[:3])
    # Every member, of every kind of client, had partitions and consumed from them.
    assert all(w.records for w in workers.values()), {w.name: len(w.records) for w in workers.values()}
    assert held and all(held.values())

    ends = end_offsets(client, topic, partitions)
    committed = client.consumer.fetch_offsets(group)
    assert {p: committed[(topic, p)].offset for p in range(partitions)} == ends


# -- 2. committed offsets across broker restarts ------------------------------------------------

def _consumer(bootstrap: str, group: str, **extra):
    config = {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 6000,
              "heartbeat.interval.ms": HEARTBEAT_MS, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "reconnect.backoff.max.ms": 500}
    config.update(extra)
    return ck.Consumer(config)


def _consume(consumer, want: int, timeout: float = 30.0) -> list:
    """Poll until `want` records arrived (bounded); returns them."""
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.2):
            if msg.error() is None:
                got.append(msg)
    assert len(got) == want, f"got {len(got)} of {want} records"
    return got


def _commit_positions(consumer, msgs) -> dict[int, int]:
    ends = {}
    for m in msgs:
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
    consumer.commit(offsets=[ck.TopicPartition(msgs[0].topic(), p, o) for p, o in ends.items()],
                    asynchronous=False)
    return ends


def _check_committed(bootstrap, consumer, group, topic, partitions, expected):
    tps = [ck.TopicPartition(topic, p) for p in range(partitions)]
    assert {tp.partition: tp.offset for tp in consumer.committed(tps, timeout=15)} == expected
    with Client(bootstrap) as client:
        fetched = client.consumer.fetch_offsets(group)
        assert {p: fetched[(topic, p)].offset for p in range(partitions)} == expected
        assert end_offsets(client, topic, partitions) == expected  # everything consumed


def test_committed_offsets_survive_clean_restart_and_sigkill(start_broker):
    broker = start_broker()
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "durable", "durable-group", 4
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
    produce(bootstrap, topic, range(0, 200), partitions)
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    seen = []
    try:
        msgs = _consume(consumer, 200)
        seen += msgs
        expected = {p: 50 for p in range(partitions)}
        assert _commit_positions(consumer, msgs) == expected
        _check_committed(bootstrap, consumer, group, topic, partitions, expected)

        broker.restart()
        _check_committed(bootstrap, consumer, group, topic, partitions, expected)
        produce(bootstrap, topic, range(200, 300), partitions)
        msgs = _consume(consumer, 100)  # the same consumer carries on where it was
        seen += msgs
        expected = {p: 75 for p in range(partitions)}
        assert _commit_positions(consumer, msgs) == expected

        broker.kill()
        broker.start()
        _check_committed(bootstrap, consumer, group, topic, partitions, expected)
        produce(bootstrap, topic, range(300, 400), partitions)
        msgs = _consume(consumer, 100)
        seen += msgs
        expected = {p: 100 for p in range(partitions)}
        assert _commit_positions(consumer, msgs) == expected
        _check_committed(bootstrap, consumer, group, topic, partitions, expected)
    finally:
        consumer.close()

    # A new consumer in the same group after another crash resumes at the committed offsets.
    broker.kill()
    broker.start()
    produce(bootstrap, topic, range(400, 440), partitions)
    fresh = _consumer(bootstrap, group)
    fresh.subscribe([topic])
    try:
        msgs = _consume(fresh, 40)
        seen += msgs
        assert sorted(int(m.value()) for m in msgs) == list(range(400, 440))
        _commit_positions(fresh, msgs)
        assert not fresh.consume(10, 0.5)
    finally:
        fresh.close()
    assert sorted(int(m.value()) for m in seen) == list(range(440))  # none lost, none twice
    with Client(bootstrap) as client:
        fetched = client.consumer.fetch_offsets(group)
        assert {p: fetched[(topic, p)].offset for p in range(partitions)} == \
            {p: 110 for p in range(partitions)}


# -- 3. static membership ---------------------------------------------------------------------

class Member:
    """An in-process confluent consumer and the rebalance callbacks it saw."""

    def __init__(self, bootstrap, group, topic, name, instance_id=None, session_ms=6000):
        extra = {"client.id": name, "session.timeout.ms": session_ms,
                 "partition.assignment.strategy": "roundrobin", "error_cb": self._on_error}
        if instance_id:
            extra["group.instance.id"] = instance_id
        self.name = name
        self.events: list[tuple[str, list[int]]] = []
        self.errors: list = []
        self.consumer = _consumer(bootstrap, group, **extra)
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, partitions):
        self.events.append(("assign", sorted(p.partition for p in partitions)))

    def _on_revoke(self, consumer, partitions):
        self.events.append(("revoke", sorted(p.partition for p in partitions)))

    def _on_error(self, error):
        self.errors.append(error)

    def poll(self):
        msg = self.consumer.poll(0.05)
        if msg is not None and msg.error() is not None:
            self.errors.append(msg.error())

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def _pump(members, seconds: float, until=None) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        if until is not None and until():
            return True
    return until is None


def _group_leader(bootstrap: str, group: str) -> str:
    """The leader named by the group's last record in __consumer_offsets."""
    leader = None
    for _, key, value in _read_offsets_topic(bootstrap, 5):
        if int.from_bytes(key[:2], "big") == 2 and value is not None and \
                GROUP_METADATA_KEY.decode_versioned(key)[1].group == group:
            leader = GROUP_METADATA_VALUE.decode_versioned(value)[1].leader
    return leader


def test_static_member_restarts_without_rebalance_and_duplicate_is_fenced(start_broker):
    broker = start_broker()
    bootstrap, topic, group, partitions = broker.bootstrap_servers, "static", "static-group", 6
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
        members = {}

        def settled(count):
            def check():
                described = client.admin.describe_groups([group])[group]
                held = {m.client_id: set(m.consumer_assignment().get(topic, ()))
                        for m in described.members}
                return described.state == "Stable" and len(described.members) == count and \
                    all(held.get(m.name) == m.assignment() and m.assignment() for m in members.values())
            return check

        try:
            # a joins first, so it leads the group (a leader that rejoins stays leader).
            members["a"] = Member(bootstrap, group, topic, "a", instance_id="inst-a")
            assert _pump(members.values(), 20, settled(1)), client.admin.describe_groups([group])
            members["b"] = Member(bootstrap, group, topic, "b", instance_id="inst-b")
            members["d"] = Member(bootstrap, group, topic, "d")
            assert _pump(members.values(), 30, settled(3)), client.admin.describe_groups([group])
            ids = {m.client_id: m.member_id for m in client.admin.describe_groups([group])[group].members}
            assert _group_leader(bootstrap, group) == ids["a"]
            assignments = {name: m.assignment() for name, m in members.items()}
            assert sorted(p for parts in assignments.values() for p in parts) == list(range(partitions))

            # The leader a, then the follower b, restart: close (a static member sends no
            # LeaveGroup) and a new consumer with the same instance id.
            for name in ("a", "b"):
                others = [m for n, m in members.items() if n != name]
                marks = {m.name: len(m.events) for m in others}
                members[name].consumer.close()
                assert client.admin.describe_groups([group])[group].state == "Stable"
                members[name] = again = Member(bootstrap, group, topic, name, instance_id=f"inst-{name}")
                states = []

                def rejoined():
                    states.append(client.admin.describe_groups([group])[group].state)
                    return again.assignment() == assignments[name] and \
                        again.events == [("assign", sorted(assignments[name]))]
                assert _pump(members.values(), 10, rejoined), \
                    (again.events, again.assignment(), assignments)
                _pump(members.values(), 2)  # several heartbeats: still nothing for the others
                states.append(client.admin.describe_groups([group])[group].state)
                assert set(states) == {"Stable"}, states
                for m in others:
                    assert m.events[marks[m.name]:] == [], (m.name, m.events)
                    assert m.assignment() == assignments[m.name]
                now = {m.client_id: m.member_id for m in client.admin.describe_groups([group])[group].members}
                assert now.keys() == ids.keys() and now[name] != ids[name]
                assert all(now[n] == ids[n] for n in ids if n != name)
                ids = now
                assert not any(m.errors for m in members.values())
            assert _group_leader(bootstrap, group) == ids["a"]  # the new a took over the lead

            # A second live consumer with the same instance id: the older one is fenced.
            # librdkafka turns FENCED_INSTANCE_ID into a fatal error, reported to error_cb.
            fenced_one = members["a"]
            members["a"] = newest = Member(bootstrap, group, topic, "a", instance_id="inst-a")
            others = [members["b"], members["d"]]
            marks = {m.name: len(m.events) for m in others}

            def fenced():
                return any(e.code() == ck.KafkaError._FATAL for e in fenced_one.errors) and \
                    newest.assignment() == assignments["a"]
            assert _pump([fenced_one, *members.values()], 15, fenced), \
                (fenced_one.errors, newest.events, newest.assignment())
            assert all("Static consumer fenced by other consumer with same group.instance.id" in e.str()
                       for e in fenced_one.errors if e.code() == ck.KafkaError._FATAL), fenced_one.errors
            _pump(members.values(), 1.5)
            assert not newest.errors
            for m in others:
                assert m.events[marks[m.name]:] == [], (m.name, m.events)
            assert client.admin.describe_groups([group])[group].state == "Stable"
            fenced_one.consumer.close()
        finally:
            for m in members.values():
                try:
                    m.consumer.close()
                except RuntimeError:
                    pass  # already closed


# -- 4. edge cases over raw requests ---------------------------------------------------------

_SIZE = struct.Struct(">i")


class Raw:
    """One connection speaking raw requests."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.correlation = 0

    def __call__(self, api, version: int, **fields):
        self.send(api, version, **fields)
        return self.receive(api, version)

    def send(self, api, version: int, **fields) -> None:
        """Send without waiting (a JoinGroup may be answered only when the rebalance ends)."""
        self.correlation += 1
        payload = encode_request(RequestHeader(
            request_api_key=api.key, request_api_version=version, correlation_id=self.correlation,
            client_id="raw-groups"), api.request(**fields))
        self.sock.sendall(_SIZE.pack(len(payload)) + payload)

    def receive(self, api, version: int):
        (size,) = _SIZE.unpack(self._exact(4))
        header, body = decode_response(api.key, version, self._exact(size))
        assert header.correlation_id == self.correlation
        return body

    def _exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return bytes(data)

    def close(self):
        self.sock.close()


def _commit(raw, group, generation, member, offsets, version=8):
    """offsets: {(topic, partition): (offset, metadata)} -> {(topic, partition): error code}"""
    R = OFFSET_COMMIT.request
    by_topic = {}
    for (t, p), (o, meta) in offsets.items():
        by_topic.setdefault(t, []).append(R.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=o, committed_metadata=meta))
    body = raw(OFFSET_COMMIT, version, group_id=group, generation_id_or_member_epoch=generation,
               member_id=member, topics=[R.OffsetCommitRequestTopic(name=t, partitions=ps)
                                         for t, ps in by_topic.items()])
    return {(t.name, p.partition_index): p.error_code for t in body.topics for p in t.partitions}


def _join_fields(group, member="", protocol_type="consumer", protocols=(("range", b"x"),),
                 session_ms=30000, instance=None):
    P = JOIN_GROUP.request.JoinGroupRequestProtocol
    return dict(group_id=group, session_timeout_ms=session_ms, rebalance_timeout_ms=session_ms,
                member_id=member, group_instance_id=instance, protocol_type=protocol_type,
                protocols=[P(name=n, metadata=m) for n, m in protocols])


def _join(raw, group, version=5, **options):
    return raw(JOIN_GROUP, version, **_join_fields(group, **options))


def _sync(raw, group, generation, member, assignments=None):
    A = SYNC_GROUP.request.SyncGroupRequestAssignment
    return raw(SYNC_GROUP, 3, group_id=group, generation_id=generation, member_id=member,
               assignments=[A(member_id=m, assignment=a) for m, a in (assignments or {}).items()])


def _state(raw, group) -> str:
    described = raw(DESCRIBE_GROUPS, 5, groups=[group], include_authorized_operations=False)
    return described.groups[0].group_state


def _fetch_v8(raw, groups: dict):
    """groups: {group: [(topic, [partitions])] or None} -> {group: {(t, p): (offset, metadata)}}"""
    R = OFFSET_FETCH.request
    body = raw(OFFSET_FETCH, 8, groups=[R.OffsetFetchRequestGroup(
        group_id=g, topics=None if ts is None else [
            R.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in ts])
        for g, ts in groups.items()])
    out = {}
    for g in body.groups:
        assert g.error_code == 0
        out[g.group_id] = {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                           for t in g.topics for p in t.partitions if p.error_code == 0}
    return out


def test_offset_and_group_requests_edge_cases(start_broker):
    E = ErrorCode
    broker = start_broker()
    topic = "edge"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({topic: NewTopic(partitions=3, replication_factor=1)})
    raw = Raw(broker.port)
    try:
        # A member with garbage protocol metadata: the broker stores it, never parses it.
        garbage = bytes(range(256))[::-1] * 2
        first = _join(raw, "edge-g", protocols=(("range", garbage),))
        assert first.error_code == E.MEMBER_ID_REQUIRED and first.member_id
        member = first.member_id
        joined = _join(raw, "edge-g", member=member, protocols=(("range", garbage),))
        assert joined.error_code == 0 and joined.leader == member and joined.generation_id == 1
        assert [(m.member_id, bytes(m.metadata)) for m in joined.members] == [(member, garbage)]
        synced = _sync(raw, "edge-g", 1, member, {member: b"\xff\x00not-an-assignment"})
        assert synced.error_code == 0 and bytes(synced.assignment) == b"\xff\x00not-an-assignment"
        described = raw(DESCRIBE_GROUPS, 5, groups=["edge-g"], include_authorized_operations=False)
        [g] = described.groups
        assert g.group_state == "Stable" and g.protocol_type == "consumer" and g.protocol_data == "range"
        assert bytes(g.members[0].member_metadata) == garbage
        assert bytes(g.members[0].member_assignment) == b"\xff\x00not-an-assignment"

        # JoinGroup refusals.
        assert _join(raw, "edge-g", protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert _join(raw, "edge-g", protocols=(("other", b""),)).error_code == \
            E.INCONSISTENT_GROUP_PROTOCOL
        assert _join(raw, "edge-g", session_ms=10).error_code == E.INVALID_SESSION_TIMEOUT
        assert _join(raw, "edge-x", session_ms=1_800_001).error_code == E.INVALID_SESSION_TIMEOUT
        assert _join(raw, "").error_code == E.INVALID_GROUP_ID
        assert _join(raw, "edge-g", member="stranger").error_code == E.UNKNOWN_MEMBER_ID
        beat = raw(HEARTBEAT, 3, group_id="edge-g", generation_id=1, member_id=member)
        assert beat.error_code == 0

        # OffsetCommit on a group with a member.
        ok = {(topic, 0): (5, "m0"), (topic, 1): (7, None)}
        assert _commit(raw, "edge-g", 1, member, ok) == {(topic, 0): 0, (topic, 1): 0}
        assert _commit(raw, "edge-g", 1, member, {("no-such-topic", 0): (1, ""), (topic, 9): (1, ""),
                                                  (topic, 2): (3, "")}) == {
            ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION, (topic, 9): E.UNKNOWN_TOPIC_OR_PARTITION,
            (topic, 2): 0}
        late = {(topic, 0): (99, "")}
        assert _commit(raw, "edge-g", 0, member, late) == {(topic, 0): E.ILLEGAL_GENERATION}
        assert _commit(raw, "edge-g", 1, "nobody", late) == {(topic, 0): E.UNKNOWN_MEMBER_ID}
        assert _commit(raw, "edge-g", -1, "", late) == {(topic, 0): E.UNKNOWN_MEMBER_ID}
        assert _commit(raw, "edge-g", 1, member, {(topic, 0): (99, "x" * 5000)}) == {
            (topic, 0): E.OFFSET_METADATA_TOO_LARGE}
        assert _commit(raw, "", -1, "", {(topic, 0): (1, "")}) == {(topic, 0): E.INVALID_GROUP_ID}
        # A group that does not exist cannot have a generation.
        assert _commit(raw, "edge-none", 3, "", {(topic, 0): (1, "")}) == \
            {(topic, 0): E.ILLEGAL_GENERATION}

        # assign()-style commits (generation -1, no member) to a group without members.
        assert _commit(raw, "edge-assign", -1, "", {(topic, 0): (11, "meta-a"), (topic, 2): (12, "")},
                       version=2) == {(topic, 0): 0, (topic, 2): 0}
        assert _commit(raw, "edge-assign", -1, "", {(topic, 1): (13, "meta-b")}) == {(topic, 1): 0}

        # OffsetFetch: several groups at once (v8); unknown groups and partitions get -1.
        fetched = _fetch_v8(raw, {"edge-g": [(topic, [0, 1, 2])], "edge-assign": None,
                                  "edge-unknown": [(topic, [0, 1])], "edge-unknown-2": None})
        assert fetched == {
            "edge-g": {(topic, 0): (5, "m0"), (topic, 1): (7, ""), (topic, 2): (3, "")},
            "edge-assign": {(topic, 0): (11, "meta-a"), (topic, 1): (13, "meta-b"), (topic, 2): (12, "")},
            "edge-unknown": {(topic, 0): (-1, ""), (topic, 1): (-1, "")},
            "edge-unknown-2": {}}
        old = raw(OFFSET_FETCH, 1, group_id="edge-assign",
                  topics=[OFFSET_FETCH.request.OffsetFetchRequestTopic(name=topic,
                                                                       partition_indexes=[0, 1])])
        assert [(p.partition_index, p.committed_offset, p.metadata, p.error_code)
                for t in old.topics for p in t.partitions] == [(0, 11, "meta-a", 0), (1, 13, "meta-b", 0)]

        # DeleteGroups.
        deleted = raw(DELETE_GROUPS, 2, groups_names=["edge-g", "edge-never", "edge-assign"])
        assert {r.group_id: r.error_code for r in deleted.results} == {
            "edge-g": E.NON_EMPTY_GROUP, "edge-never": E.GROUP_ID_NOT_FOUND, "edge-assign": 0}
        assert raw(DESCRIBE_GROUPS, 5, groups=["edge-assign"],
                   include_authorized_operations=False).groups[0].group_state == "Dead"
        assert _fetch_v8(raw, {"edge-assign": None}) == {"edge-assign": {}}

        left = raw(LEAVE_GROUP, 3, group_id="edge-g",
                   members=[LEAVE_GROUP.request.MemberIdentity(member_id=member)])
        assert left.error_code == 0 and [m.error_code for m in left.members] == [0]
        assert raw(DESCRIBE_GROUPS, 5, groups=["edge-g"],
                   include_authorized_operations=False).groups[0].group_state == "Empty"
        # Once empty, assign()-style commits are welcome and the group can be deleted.
        assert _commit(raw, "edge-g", -1, "", {(topic, 2): (4, "")}) == {(topic, 2): 0}
        keep = {(topic, 0): (21, "kept"), (topic, 1): (22, "")}
        assert _commit(raw, "edge-keep", -1, "", keep) == {(topic, 0): 0, (topic, 1): 0}
        deleted = raw(DELETE_GROUPS, 0, groups_names=["edge-g"])
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("edge-g", 0)]
        listed = raw(LIST_GROUPS, 4, states_filter=[])
        assert {g.group_id for g in listed.groups} == {"edge-keep"}
        before = _fetch_v8(raw, {"edge-keep": None, "edge-g": None, "edge-assign": None})
        assert before == {"edge-keep": {(topic, 0): (21, "kept"), (topic, 1): (22, "")},
                          "edge-g": {}, "edge-assign": {}}
        assert raw(API_VERSIONS, 3, client_software_name="t", client_software_version="1").error_code == 0
    finally:
        raw.close()

    # The offsets log replays to the same state (deleted groups stay deleted).
    for restart in (broker.restart, lambda: (broker.kill(), broker.start())):
        restart()
        raw = Raw(broker.port)
        try:
            assert _fetch_v8(raw, {"edge-keep": None, "edge-g": None, "edge-assign": None}) == before
            assert {g.group_id for g in raw(LIST_GROUPS, 4, states_filter=[]).groups} == {"edge-keep"}
        finally:
            raw.close()
    assert "Traceback" not in "".join(broker.output)


def test_member_commits_while_the_group_rebalances(start_broker):
    """As in Kafka: while the group prepares a rebalance, a member may still commit for its
    generation (it learns of the rebalance from its next heartbeat; clients commit what they
    consumed before rejoining); once the new generation exists but is not yet assigned,
    commits get REBALANCE_IN_PROGRESS (and the old generation ILLEGAL_GENERATION)."""
    E = ErrorCode
    broker = start_broker()
    topic, group = "rebalancing", "rebalancing-group"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({topic: NewTopic(partitions=2, replication_factor=1)})
    one, two = Raw(broker.port), Raw(broker.port)
    try:
        m1 = _join(one, group).member_id
        assert _join(one, group, member=m1).generation_id == 1
        assert _sync(one, group, 1, m1, {m1: b"all"}).error_code == 0
        assert _commit(one, group, 1, m1, {(topic, 0): (1, "")}) == {(topic, 0): 0}

        m2 = _join(two, group).member_id  # MEMBER_ID_REQUIRED
        two.send(JOIN_GROUP, 5, **_join_fields(group, member=m2))  # answered when m1 rejoins
        wait_for(lambda: _state(one, group) == "PreparingRebalance", 10, "the rebalance to start")
        assert _commit(one, group, 1, m1, {(topic, 0): (3, "before-rejoin")}) == {(topic, 0): 0}
        assert one(HEARTBEAT, 3, group_id=group, generation_id=1, member_id=m1).error_code == \
            E.REBALANCE_IN_PROGRESS

        rejoined = _join(one, group, member=m1)
        assert (rejoined.error_code, rejoined.generation_id, rejoined.leader) == (0, 2, m1)
        assert sorted(m.member_id for m in rejoined.members) == sorted([m1, m2])
        joined = two.receive(JOIN_GROUP, 5)
        assert (joined.error_code, joined.generation_id, joined.members) == (0, 2, [])
        assert _state(one, group) == "CompletingRebalance"
        assert _commit(one, group, 2, m1, {(topic, 0): (4, "")}) == {(topic, 0): E.REBALANCE_IN_PROGRESS}
        assert _commit(one, group, 1, m1, {(topic, 0): (4, "")}) == {(topic, 0): E.ILLEGAL_GENERATION}

        assert _sync(one, group, 2, m1, {m1: b"p0", m2: b"p1"}).error_code == 0
        synced = _sync(two, group, 2, m2)
        assert (synced.error_code, bytes(synced.assignment)) == (0, b"p1")
        assert _commit(two, group, 2, m2, {(topic, 1): (5, "")}) == {(topic, 1): 0}
        assert _fetch_v8(one, {group: None}) == \
            {group: {(topic, 0): (3, "before-rejoin"), (topic, 1): (5, "")}}
    finally:
        one.close()
        two.close()


def _delete_offsets(raw, group, partitions):
    """OffsetDelete v0 -> (top-level error, {(topic, partition): error code})"""
    R = OFFSET_DELETE.request
    by_topic = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(R.OffsetDeleteRequestPartition(partition_index=p))
    body = raw(OFFSET_DELETE, 0, group_id=group,
               topics=[R.OffsetDeleteRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    return body.error_code, {(t.name, p.partition_index): p.error_code
                             for t in body.topics for p in t.partitions}


def test_offset_delete(start_broker):
    """OffsetDelete (kafka-consumer-groups --delete-offsets), Kafka's rules: a live consumer
    group keeps the offsets of topics a member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC) and
    loses the others; once empty, any; a group with members of another protocol type is
    NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND. Deletions survive a restart."""
    E = ErrorCode
    broker = start_broker()
    group, subscribed, other = "od-group", "od-subscribed", "od-other"
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({subscribed: NewTopic(partitions=2, replication_factor=1),
                              other: NewTopic(partitions=1, replication_factor=1)})
    subscription = CONSUMER_PROTOCOL_SUBSCRIPTION.encode_versioned(1, CONSUMER_PROTOCOL_SUBSCRIPTION(
        topics=[subscribed], user_data=None, owned_partitions=[]))
    raw = Raw(broker.port)
    try:
        member = _join(raw, group, protocols=(("range", subscription),)).member_id
        assert _join(raw, group, member=member, protocols=(("range", subscription),)).generation_id == 1
        assert _sync(raw, group, 1, member, {member: b""}).error_code == 0
        offsets = {(subscribed, 0): (5, ""), (subscribed, 1): (6, ""), (other, 0): (7, "")}
        assert set(_commit(raw, group, 1, member, offsets).values()) == {0}

        assert _delete_offsets(raw, group, [(subscribed, 0), (other, 0), ("od-never", 0)]) == (0, {
            (subscribed, 0): E.GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0, ("od-never", 0): 0})
        assert _fetch_v8(raw, {group: None}) == {group: {(subscribed, 0): (5, ""), (subscribed, 1): (6, "")}}

        assert _delete_offsets(raw, "od-unknown", [(other, 0)]) == (E.GROUP_ID_NOT_FOUND, {})
        assert _delete_offsets(raw, "", [(other, 0)]) == (E.INVALID_GROUP_ID, {})
        connect = _join(raw, "od-connect", protocol_type="connect").member_id
        assert _join(raw, "od-connect", member=connect, protocol_type="connect").generation_id == 1
        assert _delete_offsets(raw, "od-connect", [(other, 0)]) == (E.NON_EMPTY_GROUP, {})

        left = raw(LEAVE_GROUP, 3, group_id=group,
                   members=[LEAVE_GROUP.request.MemberIdentity(member_id=member)])
        assert left.error_code == 0 and _state(raw, group) == "Empty"
        assert _delete_offsets(raw, group, [(subscribed, 0)]) == (0, {(subscribed, 0): 0})
        assert _fetch_v8(raw, {group: None}) == {group: {(subscribed, 1): (6, "")}}
    finally:
        raw.close()

    broker.restart()
    raw = Raw(broker.port)
    try:
        assert _fetch_v8(raw, {group: None}) == {group: {(subscribed, 1): (6, "")}}
    finally:
        raw.close()


# -- 5. the layout of __consumer_offsets ----------------------------------------------------------

def _java_partition(group: str, partitions: int) -> int:
    """Kafka's Utils.abs(group.hashCode()) % partitions, for ASCII group ids."""
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    if h >= 1 << 31:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _read_offsets_topic(bootstrap: str, partitions: int) -> list[tuple[int, bytes, bytes | None]]:
    reader = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "layout-reader",
                          "enable.auto.commit": False})
    try:
        ends = {p: reader.get_watermark_offsets(ck.TopicPartition(OFFSETS_TOPIC, p), timeout=10)[1]
                for p in range(partitions)}
        reader.assign([ck.TopicPartition(OFFSETS_TOPIC, p, ck.OFFSET_BEGINNING)
                       for p in range(partitions)])
        records, next_offset = [], {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + 20
        while any(next_offset[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in reader.consume(500, 0.2):
                assert msg.error() is None, msg.error()
                records.append((msg.partition(), msg.key(), msg.value()))
                next_offset[msg.partition()] = msg.offset() + 1
        assert all(next_offset[p] >= ends[p] for p in ends), (next_offset, ends)
        return records
    finally:
        reader.close()


def test_consumer_offsets_topic_has_kafkas_layout(start_broker):
    assert _java_partition("hello", 1 << 31) == 99162322  # "hello".hashCode() in Java
    broker = start_broker()
    bootstrap, topic, partitions = broker.bootstrap_servers, "layout", 3
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
        produce(bootstrap, topic, range(30), partitions)
        consumer = _consumer(bootstrap, "layout-group", **{"client.id": "layout-client"})
        consumer.subscribe([topic])
        try:
            _commit_positions(consumer, _consume(consumer, 30))
        finally:
            consumer.close()
        client.consumer.commit_offsets("layout-standalone", {(topic, 0): (3, "standalone-meta"), (topic, 2): 4})
        offsets_partitions = len(client.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].partitions)
    assert offsets_partitions == 5

    latest_offsets, latest_groups = {}, {}
    for partition, key, value in _read_offsets_topic(bootstrap, offsets_partitions):
        version = int.from_bytes(key[:2], "big")
        if version in (0, 1):
            _, k = OFFSET_COMMIT_KEY.decode_versioned(key)
            assert partition == _java_partition(k.group, offsets_partitions)
            value_version, v = OFFSET_COMMIT_VALUE.decode_versioned(value)
            assert value_version == 3 and v.commit_timestamp > 0
            latest_offsets[(k.group, k.topic, k.partition)] = (v.offset, v.metadata)
        else:
            assert version == 2, key
            _, k = GROUP_METADATA_KEY.decode_versioned(key)
            assert partition == _java_partition(k.group, offsets_partitions)
            value_version, v = (None, None) if value is None else \
                GROUP_METADATA_VALUE.decode_versioned(value)
            assert value_version in (None, 3)
            latest_groups[k.group] = v
    assert latest_offsets == {
        **{("layout-group", topic, p): (10, "") for p in range(partitions)},
        ("layout-standalone", topic, 0): (3, "standalone-meta"), ("layout-standalone", topic, 2): (4, "")}
    group = latest_groups["layout-group"]
    # The consumer left: the last record is the empty group of a later generation.
    assert group.protocol_type == "consumer" and group.generation >= 2 and group.members == []
    assert "layout-standalone" not in latest_groups  # standalone commits need no group record


def test_consumer_offsets_group_record_names_members(start_broker):
    broker = start_broker()
    bootstrap, topic = broker.bootstrap_servers, "layout-live"
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=2, replication_factor=1)})
        consumer = _consumer(bootstrap, "layout-live-group", **{
            "client.id": "live-client", "partition.assignment.strategy": "roundrobin"})
        consumer.subscribe([topic])
        try:
            wait_for(lambda: consumer.poll(0.1) is None and len(consumer.assignment()) == 2, 20,
                       "the consumer's assignment")
            records = _read_offsets_topic(bootstrap, 5)
        finally:
            consumer.close()
    groups = [GROUP_METADATA_VALUE.decode_versioned(v)[1] for _, k, v in records
              if int.from_bytes(k[:2], "big") == 2 and v is not None
              and GROUP_METADATA_KEY.decode_versioned(k)[1].group == "layout-live-group"]
    stable = [g for g in groups if g.members and any(bytes(m.assignment) for m in g.members)]
    assert stable, groups
    g = stable[-1]
    assert g.protocol_type == "consumer" and g.protocol == "roundrobin" and g.generation >= 1
    [m] = g.members
    assert m.client_id == "live-client" and m.member_id == g.leader and m.session_timeout == 6000
    _, subscription = CONSUMER_PROTOCOL_SUBSCRIPTION.decode_versioned(bytes(m.subscription))
    _, assignment = CONSUMER_PROTOCOL_ASSIGNMENT.decode_versioned(bytes(m.assignment))
    assert list(subscription.topics) == [topic]
    assert [(a.topic, sorted(a.partitions)) for a in assignment.assigned_partitions] == [(topic, [0, 1])]


# -- 6. compaction and expiry of __consumer_offsets -------------------------------------------

def test_offsets_topic_is_compacted_and_replays(start_broker):
    segment_bytes = 2048
    broker = start_broker(offsets_topic_segment_bytes=segment_bytes, offsets_topic_num_partitions=1,
                          log_cleaner_backoff_ms=100)
    bootstrap, topic, partitions = broker.bootstrap_servers, "cleaned", 4
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions=partitions, replication_factor=1)})
        produce(bootstrap, topic, range(40), partitions)
        # A real consumer group, so that its group metadata record must survive compaction.
        consumer = _consumer(bootstrap, "clean-live", **{"client.id": "clean-client"})
        consumer.subscribe([topic])
        try:
            _commit_positions(consumer, _consume(consumer, 40))
            rounds = 300
            for r in range(rounds):
                client.consumer.commit_offsets("clean-a", {(topic, p): (r * 10 + p, f"r{r}")
                                                  for p in range(partitions)})
                if r % 3 == 0:
                    client.consumer.commit_offsets("clean-b", {(topic, 0): r})
            expected_a = {(topic, p): ((rounds - 1) * 10 + p, f"r{rounds - 1}")
                          for p in range(partitions)}
            expected_b = {(topic, 0): (297, "")}
            log_end = end_offsets(client, OFFSETS_TOPIC, 1)[0]
            assert log_end > 1000
            # ~60 segments of history without compaction; the cleaner keeps each key's last record.
            wait_for(lambda: log_bytes(broker.data_dir, OFFSETS_TOPIC, 0)[0] <= 4 * segment_bytes, 20,
                     "the cleaner to compact __consumer_offsets-0")
            live_assignment = consumer.assignment()
        finally:
            consumer.close()

    def check():
        with Client(bootstrap) as client:
            a, b = client.consumer.fetch_offsets("clean-a"), client.consumer.fetch_offsets("clean-b")
            live = client.consumer.fetch_offsets("clean-live")
            assert {tp: (c.offset, c.metadata) for tp, c in a.items()} == expected_a
            assert {tp: (c.offset, c.metadata) for tp, c in b.items()} == expected_b
            assert {tp: c.offset for tp, c in live.items()} == {(topic, p): 10 for p in range(partitions)}
            assert client.admin.describe_groups(["clean-live"])["clean-live"].state == "Empty"
            assert client.consumer.list_offsets(OFFSETS_TOPIC, [0], EARLIEST)[0].offset == 0  # not deleted
            assert client.metadata([OFFSETS_TOPIC]).topics[OFFSETS_TOPIC].is_internal
    assert live_assignment
    check()
    broker.restart()
    check()
    broker.kill()
    broker.start()
    check()
    assert log_bytes(broker.data_dir, OFFSETS_TOPIC, 0)[0] <= 4 * segment_bytes


def test_expired_offsets_of_empty_groups_are_dropped(tmp_path):
    """Offsets retention on the coordinator itself, with a manual clock."""
    from broker.config import BrokerConfig
    from broker.groups.offsets_log import CommittedOffset

    config = BrokerConfig(data_dir=str(tmp_path), offsets_retention_minutes=1,
                          offsets_topic_num_partitions=3, group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config)
    topics.load()
    topics.create("expiring", 2, {})
    clock = ManualClock()
    groups = group_coordinator(config, topics, clock, port=9092)

    def commit(group, partition, offset):
        ts = clock.wall_ms()
        codes = asyncio.run(groups.offsets.commit(group, -1, "", None,
                                                  {("expiring", partition): CommittedOffset(offset, -1, "", ts)}))
        assert codes == {("expiring", partition): 0}

    commit("old", 0, 5)
    commit("old", 1, 6)
    commit("mixed", 0, 7)
    asyncio.run(clock.advance(50))
    commit("recent", 0, 8)
    commit("mixed", 1, 9)
    asyncio.run(clock.advance(11))  # 61 s after the first commits, 11 s after the later ones
    groups.expire_offsets()
    assert groups.offsets.committed("old") == {}
    assert "old" not in groups.groups
    assert {tp: c.offset for tp, c in groups.offsets.committed("recent").items()} == {("expiring", 0): 8}
    assert {tp: c.offset for tp, c in groups.offsets.committed("mixed").items()} == {("expiring", 1): 9}

    replayed = group_coordinator(config, topics, clock, port=9092)  # what a restart would load from __consumer_offsets
    asyncio.run(replayed.load())
    assert set(replayed.groups) == {"recent", "mixed"}
    assert {tp: c.offset for tp, c in replayed.offsets.committed("mixed").items()} == {("expiring", 1): 9}
    asyncio.run(clock.advance(60))
    groups.expire_offsets()
    assert groups.groups == {}
    replayed = group_coordinator(config, topics, clock, port=9092)
    asyncio.run(replayed.load())
    assert replayed.groups == {}

    # A restart does not restart the clock: offsets committed before it (by a standalone
    # user, and by a group whose members all left) expire on time after it.
    async def members_come_and_go():
        joined = await groups.join("had-members", "", None, "client", "host", 10_000, 10_000,
                                   "consumer", [("range", b"")], require_known_member_id=False)
        await groups.sync("had-members", joined.generation, joined.member_id, None, None, None,
                          {joined.member_id: b""})
        assert groups.leave("had-members", [(joined.member_id, None)]) == [0]
    asyncio.run(members_come_and_go())
    assert groups.groups["had-members"].state == "Empty"
    commit("had-members", 0, 10)
    commit("standalone", 1, 11)
    asyncio.run(clock.advance(45))
    restarted = group_coordinator(config, topics, clock, port=9092)
    asyncio.run(restarted.load())
    restarted.expire_offsets()
    assert set(restarted.groups) == {"had-members", "standalone"}
    asyncio.run(clock.advance(20))  # 65 s after the commits, 20 s after the "restart"
    restarted.expire_offsets()
    assert restarted.groups == {}
    topics.close()


def test_static_member_rejoins_with_new_metadata_without_rebalance(tmp_path):
    """On the coordinator itself: a static member that restarts with different metadata
    for the same protocol (the Java client sends its owned partitions and generation)
    gets its assignment back in the same generation, and its JoinGroup names the leader
    as it was (the old member id when it led), as Kafka answers."""
    from broker.config import BrokerConfig

    config = BrokerConfig(data_dir=str(tmp_path), offsets_topic_num_partitions=1,
                          group_initial_rebalance_delay_ms=0)
    topics = topic_manager(config)
    topics.load()
    clock = ManualClock()
    groups = group_coordinator(config, topics, clock)

    async def scenario():
        def join(instance, metadata, member_id=""):
            return groups.join("g", member_id, instance, instance, "host", 10_000, 10_000,
                               "consumer", [("range", metadata), ("roundrobin", b"")],
                               require_known_member_id=False)
        first = await join("inst-a", b"a-fresh")
        await groups.sync("g", first.generation, first.member_id, None, None, None,
                          {first.member_id: b"all"})
        b_joins = asyncio.ensure_future(join("inst-b", b"b-fresh"))
        await asyncio.sleep(0)  # b's JoinGroup starts the rebalance a then rejoins
        a, b = await asyncio.gather(join("inst-a", b"a-again", first.member_id), b_joins)
        leader, follower = (a, b) if a.leader == a.member_id else (b, a)
        assert follower.leader == leader.member_id and leader.generation == follower.generation
        plan = {leader.member_id: b"assigned-to-leader", follower.member_id: b"assigned-to-follower"}
        await asyncio.gather(
            groups.sync("g", leader.generation, leader.member_id, None, None, None, plan),
            groups.sync("g", follower.generation, follower.member_id, None, None, None, {}))
        assert groups.groups["g"].state == "Stable"
        instance = "inst-a" if leader is a else "inst-b"
        again = await join(instance, b"owned-partitions-and-generation")
        assert again.error == 0 and again.member_id != leader.member_id
        assert again.generation == leader.generation  # no rebalance
        assert again.leader == leader.member_id and again.members == []
        assert groups.groups["g"].state == "Stable"
        _, _, assignment = await groups.sync("g", again.generation, again.member_id, instance,
                                             None, None, {})
        assert assignment == b"assigned-to-leader"
        groups.heartbeat("g", follower.generation, follower.member_id, None)  # undisturbed

    asyncio.run(scenario())
    topics.close()
