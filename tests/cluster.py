"""A real cluster for tests: N broker processes (sluice/broker_process.py) coordinated through
the module's ZooKeeper (the `zookeeper` fixture), each cluster under a ZooKeeper chroot of
its own so that tests sharing the server do not see each other. Every wait is a bounded
poll of a condition read from the brokers' Metadata.

Then the workload of the failure tests: an idempotent confluent-kafka producer at
acks=all sending unique values from a thread and recording what was acknowledged, and a
verifier that reads every partition back with a fresh consumer and counts the anomalies
by name (lost, duplicated, out of order, offsets going backwards, moved).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Iterable, Mapping

import confluent_kafka
from kazoo.client import KazooClient

from sluice.broker_process import BrokerProcess
from tests.support.polling import wait_for
from sluice_client import Client, ClientError, ClusterMetadata, NewTopic
from wire.errors import KafkaError

# Short enough for quick failovers, long enough for 2 busy cores: a broker's session
# ends this long after it stops answering ZooKeeper.
FAST_FAILOVER = {
    "zookeeper.session.timeout.ms": "6000",
    "replica.lag.time.max.ms": "3000",
    "controlled.shutdown.retry.backoff.ms": "500",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now (all held until all are chosen)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Cluster:
    """Brokers 0 .. brokers-1 on fixed loopback ports, data in tmp_path/broker-<id>.

    `properties` go into every broker's server.properties (after broker.id and
    zookeeper.connect). Brokers killed, stopped or paused are left out of
    `bootstrap_servers` and of the waits until they are started or resumed again.
    """

    def __init__(self, tmp_path, zookeeper, brokers: int = 3,
                 properties: Mapping[str, str] | None = None):
        self.directory = Path(tmp_path)
        self.zookeeper = zookeeper
        self.chroot = f"/cluster-{uuid.uuid4().hex[:12]}"
        self.properties = dict(properties or {})
        self.processes: dict[int, BrokerProcess] = {}
        self.paused: set[int] = set()
        self._zk: KazooClient | None = None  # opened by registered()
        for broker_id, port in enumerate(free_ports(brokers)):
            directory = self.directory / f"broker-{broker_id}"
            directory.mkdir(parents=True, exist_ok=True)
            config = directory / "server.properties"
            config.write_text("".join(f"{key}={value}\n" for key, value in {
                "broker.id": broker_id,
                "zookeeper.connect": f"{zookeeper.hosts}{self.chroot}",
                **self.properties}.items()))
            self.processes[broker_id] = BrokerProcess(directory / "data", port=port,
                                                      config_file=str(config))

    # -- life cycle ---------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> "Cluster":
        for broker_id in self.processes:
            self.processes[broker_id].start()
        self.wait_for_brokers(timeout)
        return self

    def close(self) -> None:
        """SIGKILL whatever still runs: the test is over, its chroot is never used again."""
        for process in self.processes.values():
            process.kill()
        self.paused.clear()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
            self._zk = None

    def __enter__(self) -> "Cluster":
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def ids(self) -> list[int]:
        return sorted(self.processes)

    @property
    def live(self) -> list[int]:
        """Brokers running and not paused."""
        return [b for b in self.ids if self.processes[b].proc is not None and b not in self.paused]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.processes[b].bootstrap_servers for b in self.live)

    @property
    def all_servers(self) -> str:
        """Every broker's address, up or not: what a client configured once is given."""
        return ",".join(self.processes[b].bootstrap_servers for b in self.ids)

    def address(self, broker_id: int) -> str:
        return self.processes[broker_id].bootstrap_servers

    def kill(self, broker_id: int) -> None:
        """SIGKILL: no controlled shutdown, the ZooKeeper session ends at its timeout."""
        if broker_id in self.paused:
            self.paused.discard(broker_id)
        self.processes[broker_id].kill()

    def stop(self, broker_id: int, timeout: float = 60.0) -> int:
        """SIGTERM: the broker moves its leaderships away by controlled shutdown, then exits;
        its exit status."""
        assert broker_id not in self.paused, "resume a paused broker before stopping it"
        return self.processes[broker_id].stop(timeout)

    def pause(self, broker_id: int) -> None:
        """SIGSTOP: a zombie broker, sockets open and nothing answered, as in a long GC."""
        self.processes[broker_id].pause()
        self.paused.add(broker_id)

    def resume(self, broker_id: int) -> None:
        self.processes[broker_id].resume()
        self.paused.discard(broker_id)

    def restart(self, broker_id: int, timeout: float = 60.0) -> None:
        """Start again on the same port and data directory (stopping it first if it runs).
        After a SIGKILL, first wait until ZooKeeper has ended the dead broker's session, so
        that the start is not held up waiting for it (as a broker whose id is still
        registered by another session is)."""
        process = self.processes[broker_id]
        if broker_id in self.paused:
            self.resume(broker_id)
        if process.proc is not None:
            process.stop()
        self.wait(lambda: not self.registered(broker_id), timeout,
                   f"ZooKeeper to drop the registration of broker {broker_id}")
        process.start(timeout)

    def registered(self, broker_id: int) -> bool:
        """Whether /brokers/ids/<id> exists in this cluster's chroot."""
        if self._zk is None:
            self._zk = KazooClient(hosts=self.zookeeper.hosts, timeout=10)
            self._zk.start(timeout=10)
        return self._zk.exists(f"{self.chroot}/brokers/ids/{broker_id}") is not None

    def partition_dirs(self, broker_id: int, topic: str) -> list[str]:
        """The directories of `topic`'s partitions (or what is left of them) in a broker's
        data dir."""
        data = Path(self.processes[broker_id].data_dir)
        return sorted(p.name for p in data.iterdir() if p.is_dir() and p.name.startswith(f"{topic}-"))

    def output(self, broker_id: int, lines: int = 40) -> str:
        return "".join(self.processes[broker_id].output[-lines:])

    # -- metadata -----------------------------------------------------------------------
    def metadata(self, via: int | None = None, topics: Iterable[str] | None = None,
                 timeout: float = 5.0) -> ClusterMetadata:
        """Metadata from broker `via` (default: the first live broker), one request."""
        broker_id = self.live[0] if via is None else via
        with Client(self.address(broker_id), call_timeout=timeout + 2, connect_timeout=timeout,
                    request_timeout=timeout, retries=0) as client:
            return client.metadata(None if topics is None else list(topics))

    def _try_metadata(self, via: int | None = None, topics: Iterable[str] | None = None):
        try:
            return self.metadata(via, topics)
        except (ClientError, KafkaError, OSError, TimeoutError):
            return None

    def wait_for_brokers(self, timeout: float = 60.0, stand_ins: Iterable[int] = ()) -> None:
        """Until Metadata from every live broker lists exactly the live brokers (and
        `stand_ins`: ids a test registered in /brokers/ids itself) and a controller among
        the live brokers."""
        def formed() -> bool:
            live = set(self.live)
            for broker_id in live:
                metadata = self._try_metadata(broker_id, [])
                if (metadata is None or set(metadata.brokers) != live | set(stand_ins)
                        or metadata.controller_id not in live):
                    return False
            return True

        self.wait(formed, timeout, f"brokers {self.live} to register and agree on a controller")

    def controller_id(self, timeout: float = 30.0) -> int:
        """The controller, as the live brokers' Metadata names it once they agree."""
        def agreed() -> list[int] | None:  # a list: broker 0 is a truthy answer
            seen = {getattr(self._try_metadata(b, []), "controller_id", None) for b in self.live}
            if len(seen) == 1 and seen <= set(self.live):
                return list(seen)
            return None

        (controller,) = self.wait(agreed, timeout, "the live brokers to agree on a live controller")
        return controller

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 3,
                     configs: Mapping[str, str] | None = None, timeout: float = 60.0) -> None:
        with Client(self.bootstrap_servers, call_timeout=timeout, request_timeout=timeout,
                    retry_timeout=timeout) as client:
            result = client.admin.create_topics({name: NewTopic(partitions, replication_factor,
                                                          dict(configs or {}))})[name]
        if result.error is not None:
            raise result.error
        self.wait_for_leaders(name, timeout=timeout)

    def partitions(self, topic: str, via: int | None = None) -> dict:
        metadata = self.metadata(via, [topic])
        info = metadata.topics.get(topic)
        assert info is not None and not info.error_code, f"topic {topic}: {info}"
        return info.partitions

    def wait_for_leaders(self, topic: str, full_isr: bool = False, timeout: float = 60.0) -> None:
        """Until every live broker's Metadata gives each partition the same live leader
        (and, with `full_isr`, every replica in the ISR)."""
        def led() -> bool:
            live = set(self.live)
            views = []
            for broker_id in live:
                metadata = self._try_metadata(broker_id, [topic])
                info = None if metadata is None else metadata.topics.get(topic)
                if info is None or info.error_code or not info.partitions:
                    return False
                views.append({p: (i.leader_id, i.leader_epoch) for p, i in info.partitions.items()})
                for partition in info.partitions.values():
                    if partition.leader_id not in live:
                        return False
                    if full_isr and set(partition.isr) != set(partition.replicas):
                        return False
            return all(view == views[0] for view in views)

        what = f"every partition of {topic} to have a live leader" + (
            " and a full ISR" if full_isr else "") + " in every live broker's Metadata"
        self.wait(led, timeout, what)

    def leader_of(self, topic: str, partition: int = 0, via: int | None = None) -> int:
        return self.partitions(topic, via)[partition].leader_id

    def isr_of(self, topic: str, partition: int = 0, via: int | None = None) -> tuple[int, ...]:
        return tuple(sorted(self.partitions(topic, via)[partition].isr))

    def wait_for_isr(self, topic: str, partition: int, isr: Iterable[int],
                     timeout: float = 60.0) -> None:
        wanted = tuple(sorted(isr))

        def reached() -> bool:
            try:
                return self.isr_of(topic, partition) == wanted
            except (AssertionError, ClientError, KafkaError, OSError, TimeoutError):
                return False

        self.wait(reached, timeout, f"the ISR of {topic}-{partition} to be {list(wanted)}")

    def wait(self, predicate, timeout: float, what: str):
        """wait_for, with each broker's last lines of output in the failure message; a
        broker that exited unasked fails the wait at once."""
        def checked():
            for broker_id, process in self.processes.items():
                if process.proc is not None and process.proc.poll() is not None:
                    raise AssertionError(f"broker {broker_id} exited with status "
                                         f"{process.proc.returncode} while waiting for {what}:\n"
                                         f"{self.output(broker_id)}")
            return predicate()

        try:
            return wait_for(checked, timeout, what, interval=0.2)
        except AssertionError as exc:
            outputs = "\n".join(f"---- broker {b}\n{self.output(b, 15)}" for b in self.ids)
            raise AssertionError(f"{exc}\n{outputs}") from None


# -- the workload ---------------------------------------------------------------------------

def pick_seed() -> int:
    """SLUICE_SEED when set (to replay a run), else a fresh one; printed by every report."""
    return int(os.environ.get("SLUICE_SEED") or random.randrange(1 << 32))




@dataclasses.dataclass(frozen=True)
class Acked:
    partition: int
    offset: int
    value: bytes


class Workload:
    """An idempotent producer at acks=all sending `<name>-<seq>` values (seq counting from
    0 in send order) to partitions drawn from `random.Random(seed)`, at most `rate` a
    second and `count` in all, from a thread. Delivery callbacks record what was
    acknowledged, in order, and the errors of what was not, by name."""

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int, *, seed: int,
                 name: str = "p0", rate: float = 200.0, count: int = 30_000,
                 config: Mapping[str, object] | None = None):
        self.topic = topic
        self.partitions = partitions
        self.name = name
        self.rate = rate
        self.count = count
        self.rng = random.Random(f"{seed}-{name}")
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap_servers,
            "client.id": f"workload-{name}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "topic.metadata.refresh.interval.ms": 1000,
            **(config or {})})
        self.acked: list[Acked] = []
        self.failed: collections.Counter[str] = collections.Counter()
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"workload-{name}", daemon=True)

    def _on_delivery(self, error, message) -> None:
        with self._lock:
            if error is None:
                self.acked.append(Acked(message.partition(), message.offset(), message.value()))
            else:
                self.failed[error.name()] += 1

    def _run(self) -> None:
        interval = 1.0 / self.rate
        next_send = time.monotonic()
        while self.sent < self.count and not self._stop.is_set():
            partition = self.rng.randrange(self.partitions)
            value = f"{self.name}-{self.sent}".encode()
            try:
                self.producer.produce(self.topic, value, partition=partition,
                                      on_delivery=self._on_delivery)
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.1)
                continue
            self.sent += 1
            self.producer.poll(0)
            next_send += interval
            pause = next_send - time.monotonic()
            if pause > 0:
                self._stop.wait(pause)

    def start(self) -> "Workload":
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return len(self.acked)

    def wait_acked(self, more: int, timeout: float = 30.0) -> None:
        """Until `more` further values have been acknowledged."""
        target = self.acked_count() + more
        wait_for(lambda: self.acked_count() >= target, timeout,
                 f"{more} more acknowledgements from {self.name} (at {self.acked_count()})")

    def complete(self, timeout: float = 60.0) -> None:
        """Send all `count` values, then wait until each is acknowledged or failed."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} sent {self.sent} of {self.count} in {timeout:g} s"
        self.finish(timeout)

    def finish(self, timeout: float = 150.0) -> None:
        """Stop sending; wait (bounded) until every value sent is acknowledged or failed."""
        self._stop.set()
        self._thread.join(10)
        remaining = self.producer.flush(timeout)
        assert remaining == 0, f"{remaining} values of {self.name} still in flight after {timeout:g} s"

    def abandon(self) -> None:
        """Stop sending and drop what is in flight (a test's teardown after a failure)."""
        self._stop.set()
        self._thread.join(10)
        self.producer.purge()
        self.producer.flush(0)


@dataclasses.dataclass
class Read:
    partition: int
    offset: int
    value: bytes


def read_all(bootstrap_servers: str, topic: str, partitions: int,
             timeout: float = 60.0) -> list[Read]:
    """Every record of every partition, from its start to its high watermark now, with a
    fresh consumer assigned each partition (no group)."""
    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": f"verifier-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": True, "topic.metadata.refresh.interval.ms": 1000})
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p),
                                                     timeout=timeout)
            ends[p] = high
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        records: list[Read] = []
        positions = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(positions[p] < ends[p] for p in ends):
            if time.monotonic() > deadline:
                raise AssertionError(f"read {topic} only up to {positions} of {ends} in {timeout:g} s")
            for message in consumer.consume(500, 1.0):
                error = message.error()
                if error is not None:
                    if error.code() == confluent_kafka.KafkaError._PARTITION_EOF:
                        continue
                    if error.retriable() or not error.fatal():
                        continue
                    raise AssertionError(f"consumer error: {error}")
                records.append(Read(message.partition(), message.offset(), message.value()))
                positions[message.partition()] = message.offset() + 1
        return records
    finally:
        consumer.close()


@dataclasses.dataclass
class Anomalies:
    acknowledged: int
    read: int
    lost: int = 0  # acknowledged, never read
    duplicated: int = 0  # a value read more than once (extra copies)
    out_of_order: int = 0  # per partition, a producer's value read after a later one of it
    offsets_backwards: int = 0  # per partition, offsets read (or one producer's acknowledged) not increasing
    moved: int = 0  # acknowledged at one offset, read at another
    examples: list[str] = dataclasses.field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.lost or self.duplicated or self.out_of_order or self.offsets_backwards
                    or self.moved)

    def summary(self) -> str:
        return (f"acknowledged={self.acknowledged} read={self.read} lost={self.lost} "
                f"duplicated={self.duplicated} out_of_order={self.out_of_order} "
                f"offsets_backwards={self.offsets_backwards} moved={self.moved}")


def _sequence(value: bytes) -> tuple[str, int]:
    name, _, seq = value.decode().rpartition("-")
    return name, int(seq)


def count_anomalies(acked: Iterable[Acked], read: Iterable[Read]) -> Anomalies:
    """Compare what producers had acknowledged (each producer's in acknowledgement order)
    with what a consumer read (in offset order per partition)."""
    acked, read = list(acked), list(read)
    result = Anomalies(len(acked), len(read))

    def note(text: str) -> None:
        if len(result.examples) < 10:
            result.examples.append(text)

    read_at: dict[bytes, list[Read]] = collections.defaultdict(list)
    last_offset: dict[int, int] = {}
    last_seq: dict[tuple[int, str], int] = {}
    for record in read:
        read_at[record.value].append(record)
        if record.offset <= last_offset.get(record.partition, -1):
            result.offsets_backwards += 1
            note(f"read offset {record.offset} of partition {record.partition} after "
                 f"{last_offset[record.partition]}")
        last_offset[record.partition] = record.offset
        name, seq = _sequence(record.value)
        key = (record.partition, name)
        if seq < last_seq.get(key, -1):
            result.out_of_order += 1
            note(f"{record.value!r} read at {record.partition}/{record.offset} after "
                 f"{name}-{last_seq[key]}")
        last_seq[key] = max(seq, last_seq.get(key, -1))
    for value, copies in read_at.items():
        if len(copies) > 1:
            result.duplicated += len(copies) - 1
            note(f"{value!r} read {len(copies)} times: "
                 f"{[(c.partition, c.offset) for c in copies]}")
    acked_offset: dict[tuple[int, str], int] = {}  # (partition, producer): last offset
    for ack in acked:
        key = (ack.partition, _sequence(ack.value)[0])
        if ack.offset <= acked_offset.get(key, -1):
            result.offsets_backwards += 1
            note(f"{ack.value!r} acknowledged at {ack.partition}/{ack.offset} after offset "
                 f"{acked_offset[key]}")
        acked_offset[key] = max(ack.offset, acked_offset.get(key, -1))
        copies = read_at.get(ack.value)
        if not copies:
            result.lost += 1
            note(f"{ack.value!r} acknowledged at {ack.partition}/{ack.offset}, not read")
        elif not any((c.partition, c.offset) == (ack.partition, ack.offset) for c in copies):
            result.moved += 1
            note(f"{ack.value!r} acknowledged at {ack.partition}/{ack.offset}, read at "
                 f"{[(c.partition, c.offset) for c in copies]}")
    return result


def verify(cluster: Cluster, topic: str, partitions: int, workloads: Iterable[Workload], *,
           test: str, seed: int, timeout: float = 60.0, preloaded: Iterable[Acked] = ()) -> Anomalies:
    """Read the topic back and count the anomalies against what the workloads had
    acknowledged, and what was acknowledged before they started (`preloaded`); prints the
    counts with the test's name and seed."""
    workloads = list(workloads)
    acked = [*preloaded, *(a for w in workloads for a in w.acked)]
    read = read_all(cluster.bootstrap_servers, topic, partitions, timeout)
    anomalies = count_anomalies(acked, read)
    failed = collections.Counter()
    for w in workloads:
        failed.update(w.failed)
    print(f"{test} seed={seed}: sent={sum(w.sent for w in workloads)} {anomalies.summary()} "
          f"delivery_failures={dict(failed)}")
    for example in anomalies.examples:
        print(f"  {example}")
    return anomalies
