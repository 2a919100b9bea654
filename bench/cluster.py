"""Cluster benchmarks (issue 17): three brokers under ZooKeeper next to one broker alone.

Every process runs on 127.0.0.1 and is started by this run: one ZooKeeper server
(sluice.zookeeper: Debian's package), and brokers (`python -m broker`, through
sluice.broker_process) with a generated server.properties each: broker.id,
zookeeper.connect under a chroot of its own per cluster, and the settings named in the
report. The single broker is the default single node, without ZooKeeper
(bench.common.SluiceTarget). Before anything is measured, a group is described on both
(serve_a_group), so that __consumer_offsets exists as on any cluster that has served a
consumer group.

1. produce at acks=all: a topic of replication factor 3 on the three brokers against a
   topic of replication factor 1 on the single broker, with bench.broker's produce
   clients and records (confluent-kafka's Producer and kcat -P, 100-byte values,
   linger.ms=5, batch.size=1 MB, no compression), 1 and 8 partitions, taking turns.
   rec/s, MB/s, the ratio and broker CPU seconds (summed over the brokers, /proc).
   Goal: RF=3 >= 0.6x RF=1.
2. end-to-end latency at 10,000 rec/s, acks=all, linger.ms=0 (bench.broker.e2e.e2e_once: the
   send time travels in the record, a consumer process notes its arrival), RF=3 and RF=1.
   Goal: RF=3 p99 <= 10 ms.
3. unavailability: a paced idempotent acks=all producer writes to every partition of an
   RF=3 topic; a broker that leads partitions (never the controller) gets SIGKILL, or
   SIGTERM (controlled shutdown). A partition's unavailability is the longest pause
   between consecutive acknowledgements of its records that ends after the signal; the
   run's figure is the worst partition the broker led. SIGKILL with
   zookeeper.session.timeout.ms=18000 (the default) and 6000, goal <= the session timeout
   + 2 s; SIGTERM, goal <= 1 s. A fresh cluster per run; the brokers' logs give the
   timeline (the controller sees the broker gone, the new leaders take over).

    python -m bench.cluster [--quick] [--records N] [--repeats N] [--out DIR] [--no-write]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import tempfile
import time
import uuid
from typing import Callable

from bench.broker.e2e import e2e_once
from bench.broker.produce import kcat_records_file, produce_kcat, produce_python
from bench.common import (DEFAULT_OUT, MB, VALUE_SIZE, SluiceTarget, _fmt, chosen_sections, client_versions,
                          cpu_seconds, publish, section_timer, value_pool, watermarks, write_result_files)
from bench.machine import describe_machine, machine_details
from tests.support.polling import wait_for

BROKERS = 3
REPLICATION = 3
PRODUCE_GOAL = 0.6           # RF=3 / RF=1 at acks=all
E2E_GOAL_MS = 10.0           # RF=3 p99
CONTROLLED_GOAL_S = 1.0      # unavailability after SIGTERM
KILL_MARGIN_S = 2.0          # unavailability after SIGKILL <= session timeout + this
DEFAULT_SESSION_MS = 18_000  # Kafka's zookeeper.session.timeout.ms
# Kafka's 2014 figures (Jay Kreps, "Benchmarking Apache Kafka"): one producer thread,
# 3x synchronous replication vs none.
KAFKA_2014 = {"rf3_acks_all": 421_823, "rf1": 821_557}
_HEADER = struct.Struct(">Qq")  # record index, send time (monotonic ns)


@dataclasses.dataclass
class Sizes:
    records: int                  # per produce run
    produce_repeats: int          # runs per configuration and target, taking turns; median kept
    produce_partitions: tuple
    clients: tuple
    e2e_rate: int
    e2e_seconds: float
    e2e_warmup_seconds: float
    failover_repeats: int         # runs per fault
    session_timeouts_ms: tuple    # SIGKILL runs, one set per setting
    failover_partitions: int
    failover_rate: int            # records/s of the steady producer, over all partitions
    failover_warmup_seconds: float  # of steady acknowledgements before the signal
    failover_after_seconds: float   # of producing after every partition acknowledged again
    produce_seconds_max: float    # a produce run still going then ends and counts what was written
    step_timeout: float


FULL = Sizes(records=5_000_000, produce_repeats=3, produce_partitions=(1, 8), clients=("python", "kcat"),
             e2e_rate=10_000, e2e_seconds=15.0, e2e_warmup_seconds=2.0,
             failover_repeats=3, session_timeouts_ms=(DEFAULT_SESSION_MS, 6_000), failover_partitions=6,
             failover_rate=2_000, failover_warmup_seconds=3.0, failover_after_seconds=1.0,
             produce_seconds_max=75.0, step_timeout=600.0)
QUICK = dataclasses.replace(FULL, records=500_000, produce_repeats=1, e2e_seconds=5.0,
                            e2e_warmup_seconds=1.0, failover_repeats=1, step_timeout=300.0)
# What the smoke test runs: every section once, in seconds (the e2e rate low enough that
# a record is acknowledged before the next is sent; one fault: SIGTERM).
TINY = dataclasses.replace(QUICK, records=3_000, produce_partitions=(1,), clients=("python",),
                           e2e_rate=100, e2e_seconds=0.5, e2e_warmup_seconds=0.2,
                           session_timeouts_ms=(), failover_rate=200,
                           failover_warmup_seconds=0.5, failover_after_seconds=0.2,
                           produce_seconds_max=30.0, step_timeout=120.0)


# -- the cluster ------------------------------------------------------------------------

class LocalCluster:
    """`brokers` broker processes under a ZooKeeper chroot of their own, on fixed loopback
    ports; `properties` go into every broker's server.properties."""

    name = "rf3"

    def __init__(self, workdir: str, zookeeper, properties: dict | None = None,
                 brokers: int = BROKERS, timeout: float = 120.0):
        from sluice.cluster import free_ports
        from sluice.broker_process import BrokerProcess

        self.chroot = f"/bench-{uuid.uuid4().hex[:12]}"
        self.directory = os.path.join(workdir, self.chroot.lstrip("/"))
        self.properties = dict(properties or {})
        self.timeout = timeout
        self.processes = {}
        for broker_id, port in enumerate(free_ports(brokers, "127.0.0.1")):
            directory = os.path.join(self.directory, f"broker-{broker_id}")
            os.makedirs(directory)
            config = os.path.join(directory, "server.properties")
            with open(config, "w") as f:
                f.writelines(f"{key}={value}\n" for key, value in {
                    "broker.id": broker_id, "zookeeper.connect": f"{zookeeper.hosts}{self.chroot}",
                    **self.properties}.items())
            self.processes[broker_id] = BrokerProcess(os.path.join(directory, "data"), port=port,
                                                      config_file=config)

    def start(self) -> "LocalCluster":
        try:
            for process in self.processes.values():
                process.start(timeout=60)
            wait_for(self._formed, self.timeout, f"brokers {sorted(self.processes)} to register "
                                                   "and agree on a controller")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """SIGKILL whatever still runs: the chroot is never used again."""
        for process in self.processes.values():
            process.kill()

    @property
    def live(self) -> list[int]:
        return [b for b, p in self.processes.items() if p.proc is not None and p.proc.poll() is None]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.processes[b].bootstrap_servers for b in self.live)

    @property
    def pids(self) -> dict[int, int]:
        return {b: self.processes[b].proc.pid for b in self.live}

    def metadata(self, broker_id: int, topics):
        """One broker's Metadata, or None when it does not answer."""
        from sluice_client import Client, ClientError
        from wire.errors import KafkaError

        try:
            with Client(self.processes[broker_id].bootstrap_servers, call_timeout=10,
                        connect_timeout=5, request_timeout=5, retries=0) as client:
                return client.metadata(topics)
        except (ClientError, KafkaError, OSError, TimeoutError):
            return None

    def _formed(self) -> bool:
        live = set(self.live)
        for broker_id in live:
            metadata = self.metadata(broker_id, [])
            if metadata is None or set(metadata.brokers) != live or metadata.controller_id not in live:
                return False
        return True

    def controller_id(self) -> int:
        def agreed():
            seen = {getattr(self.metadata(b, []), "controller_id", None) for b in self.live}
            return list(seen) if len(seen) == 1 and seen <= set(self.live) else None

        return wait_for(agreed, self.timeout, "the brokers to agree on a controller")[0]

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader, once every live broker's Metadata agrees on a live leader
        with every replica in the ISR."""
        def agreed():
            live, views = set(self.live), []
            for broker_id in live:
                metadata = self.metadata(broker_id, [topic])
                info = None if metadata is None else metadata.topics.get(topic)
                if info is None or info.error_code or not info.partitions:
                    return None
                if any(p.leader_id not in live or set(p.isr) != set(p.replicas)
                       for p in info.partitions.values()):
                    return None
                views.append({p: i.leader_id for p, i in info.partitions.items()})
            return views[0] if all(v == views[0] for v in views) else None

        return wait_for(agreed, self.timeout, f"{topic}: a leader and a full ISR per partition "
                                                "in every broker's Metadata")

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        from sluice_client import Client, NewTopic

        with Client(self.bootstrap, call_timeout=self.timeout, request_timeout=self.timeout) as client:
            results = client.admin.create_topics({name: NewTopic(partitions, REPLICATION, dict(configs or {}))
                                            for name, partitions in topics.items()},
                                           timeout_ms=int(self.timeout * 1000))
        failed = {name: r.error for name, r in results.items() if r.error is not None}
        if failed:
            raise RuntimeError(f"cluster: create topics failed: {failed}")
        for name in topics:
            self.leaders(name)

    def delete_topic(self, topic: str) -> None:
        from sluice_client import Client

        with Client(self.bootstrap, call_timeout=self.timeout) as client:
            client.admin.delete_topics([topic])

    def log_lines(self, broker_id: int) -> list[str]:
        return list(self.processes[broker_id].output)


class CpuProbe:
    """Wall time and CPU seconds of a set of broker processes over one measurement."""

    def __init__(self, pids: dict[int, int]):
        self.pids = dict(pids)
        self.cpu0 = {b: cpu_seconds(pid) for b, pid in self.pids.items()}
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        seconds = time.perf_counter() - self.t0
        per_broker = {b: cpu_seconds(pid) - self.cpu0[b] for b, pid in self.pids.items()}
        return {"seconds": seconds, "broker_cpu_s": sum(per_broker.values()),
                "broker_cpu_s_each": per_broker}


# -- 1. produce --------------------------------------------------------------------------

def serve_a_group(bootstrap: str, timeout: float) -> None:
    """Describe a group through its coordinator, as a target that has served consumer
    groups is: the first lookup creates __consumer_offsets (50 partitions, RF=3 on the
    cluster), which must not happen in the middle of a measurement."""
    from sluice_client import Client

    with Client(bootstrap, call_timeout=timeout, retry_timeout=timeout) as client:
        client.admin.describe_groups(["bench-warm-up"])


def produce_once(target, pids: dict[int, int], client: str, partitions: int, sizes: Sizes,
                 pool, path: str) -> dict:
    """One run into a fresh topic, ended after `produce_seconds_max` if still going (past
    librdkafka's socket.timeout.ms, 60 s, so a request left unanswered shows and is sent
    again): the probe's figures, the records written (sum of high watermarks) and whether
    every record was acknowledged in time."""
    topic = f"produce-{target.name}-{client}-{partitions}-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: partitions})
    leaders = target.leaders(topic) if isinstance(target, LocalCluster) else None
    probe = CpuProbe(pids)
    try:
        if client == "python":
            produce_python(target.bootstrap, topic, sizes.records, pool, "all", "none",
                           sizes.produce_seconds_max)
        else:
            produce_kcat(target.bootstrap, topic, path, "all", "none", sizes.produce_seconds_max)
        complete = True
    except (TimeoutError, subprocess.TimeoutExpired):
        complete = False
    m = probe.stop()
    m["complete"] = complete
    m["written"] = sum(high for _, high in watermarks(target.bootstrap, topic, partitions))
    m["leaders"] = leaders
    target.delete_topic(topic)
    return m


def bench_produce(single, cluster, sizes: Sizes, pool, workdir: str, log) -> list[dict]:
    path = os.path.join(workdir, "records.txt")
    if "kcat" in sizes.clients:
        kcat_records_file(path, sizes.records, pool)
    targets = (("rf1", single, {0: single.pid}), ("rf3", cluster, None))
    rows = []
    for client in sizes.clients:
        for partitions in sizes.produce_partitions:
            runs = {name: [] for name, _, _ in targets}
            for repeat in range(sizes.produce_repeats):
                order = targets if repeat % 2 == 0 else targets[::-1]  # load drifts hit both
                for name, target, pids in order:
                    runs[name].append(produce_once(target, pids or cluster.pids, client, partitions,
                                                   sizes, pool, path))
            row = {"client": client, "partitions": partitions, "records": sizes.records,
                   "repeats": sizes.produce_repeats}
            for name, _, _ in targets:
                # the median by rate: a run ended at the bound counts the records it wrote
                m = sorted(runs[name], key=lambda r: r["written"] / r["seconds"])[len(runs[name]) // 2]
                row[name] = {"records_per_s": m["written"] / m["seconds"],
                             "mb_per_s": m["written"] * VALUE_SIZE / m["seconds"] / MB,
                             "all_complete": [r["complete"] for r in runs[name]],
                             "all_seconds": [r["seconds"] for r in runs[name]],
                             "all_written": [r["written"] for r in runs[name]], **m}
            row["ratio"] = row["rf3"]["records_per_s"] / row["rf1"]["records_per_s"]
            rows.append(row)
            log(f"  produce {client:6} {partitions}p: RF=1 {row['rf1']['records_per_s']:10,.0f} rec/s "
                f"(cpu {row['rf1']['broker_cpu_s']:.2f} s)  RF=3 {row['rf3']['records_per_s']:10,.0f} rec/s "
                f"(cpu {row['rf3']['broker_cpu_s']:.2f} s over {BROKERS} brokers)  ratio {row['ratio']:.2f}x")
            for name in ("rf1", "rf3"):
                if not all(row[name]["all_complete"]):
                    log(f"    {name}: {row[name]['all_complete'].count(False)} run(s) ended at "
                        f"{sizes.produce_seconds_max:g} s; records written {row[name]['all_written']}")
    if os.path.exists(path):
        os.remove(path)
    return rows


# -- 2. end-to-end latency ----------------------------------------------------------------

def bench_e2e(single, cluster, sizes: Sizes, log) -> list[dict]:
    """bench.broker's run at its target setting: linger.ms=0, fetch.wait.max.ms=500."""
    rows = []
    for name, target in (("rf1", single), ("rf3", cluster)):
        try:
            row = {"target": name, **e2e_once(target, sizes, 0, 500)}
        except TimeoutError as exc:  # the producer's queue stayed full: the rate was not kept
            row = {"target": name, "rate": sizes.e2e_rate, "achieved_rate": 0.0, "measured": 0,
                   "complete": False, "error": str(exc),
                   **dict.fromkeys(("p50_ms", "p99_ms", "p999_ms", "max_ms"))}
            rows.append(row)
            log(f"  e2e {name}: NOT MEASURED: {exc}")
            continue
        rows.append(row)
        log(f"  e2e {name}: p50 {_fmt(row['p50_ms'])} ms  p99 {_fmt(row['p99_ms'])} ms  "
            f"max {_fmt(row['max_ms'])} ms ({row['measured']} records at {row['achieved_rate']:,.0f}/s"
            + ("" if row["complete"] else ", INCOMPLETE") + ")")
    return rows


# (label, producer settings): librdkafka's default for a non-idempotent producer allows
# 1,000,000 requests in flight per connection (the e2e run's), an idempotent one 5.
ACK_VARIANTS = (("max.in.flight=1", {"max.in.flight": 1}),
                ("max.in.flight=5", {"max.in.flight": 5}),
                ("idempotent (max.in.flight=5)", {"enable.idempotence": True}))


def paced_acks(bootstrap: str, topic: str, rate: int, settings: dict, timeout: float,
               done: Callable[[int], bool], acks: list) -> dict:
    """Records paced at `rate` to partition 0 of `topic` (acks=all, linger.ms=0, the send
    time in each) until `done(records sent)` or `timeout` seconds, then flushed: each
    acknowledgement is appended to `acks` as it comes, (send time, ns from produce() to
    it), so that another thread may watch them. Records sent, undelivered and failed."""
    from confluent_kafka import Producer

    failed = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "log_level": 3, **settings})
    pad = bytes(VALUE_SIZE - _HEADER.size)

    def on_delivery(error, message):
        if error is not None:
            failed.append(str(error))
        else:
            sent_ns = _HEADER.unpack_from(message.value())[1]
            acks.append((sent_ns, time.monotonic_ns() - sent_ns))

    interval_ns = 1_000_000_000 // rate
    started = time.monotonic_ns()
    sent = 0
    while not done(sent) and time.monotonic_ns() - started < timeout * 1e9:
        due = (time.monotonic_ns() - started) // interval_ns + 1
        while sent < due and not done(sent):
            producer.produce(topic, _HEADER.pack(sent, time.monotonic_ns()) + pad, partition=0,
                             on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        pause = (started + sent * interval_ns - time.monotonic_ns()) / 1e9
        if pause > 0:
            time.sleep(pause)
    left = producer.flush(timeout)
    return {"sent": sent, "undelivered": left, "delivery_errors": len(failed)}


def latency_summary(latencies_ns) -> dict:
    """How many, and p50/p99/max in ms, of latencies in ns."""
    from bench.e2e_consumer import percentile

    latencies = sorted(latencies_ns)
    return {"acked": len(latencies),
            **{key: None if percentile(latencies, q) is None else percentile(latencies, q) / 1e6
               for key, q in (("p50_ms", 0.5), ("p99_ms", 0.99), ("max_ms", 1.0))}}


def ack_latency(target, rate: int, seconds: float, settings: dict, timeout: float) -> dict:
    """Seconds from produce() to the acknowledgement (acks=all, linger.ms=0) of records
    paced at `rate` to partition 0 of a fresh topic: p50/p99/max."""
    topic = f"acks-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: 1})
    total, acks = int(rate * seconds), []
    run = paced_acks(target.bootstrap, topic, rate, settings, timeout, lambda sent: sent >= total, acks)
    target.delete_topic(topic)
    return {**run, **latency_summary(latency for _, latency in acks)}


def bench_acks(single, cluster, sizes: Sizes, log) -> list[dict]:
    """Where the e2e time goes: how long the producer waits for acks=all at the e2e rate,
    by requests allowed in flight per connection."""
    rows = []
    seconds = min(sizes.e2e_seconds, 3.0)
    for label, settings in ACK_VARIANTS:
        for name, target in (("rf1", single), ("rf3", cluster)):
            row = {"target": name, "producer": label, "rate": sizes.e2e_rate, "seconds": seconds,
                   **ack_latency(target, sizes.e2e_rate, seconds, settings, sizes.step_timeout)}
            rows.append(row)
            log(f"  acks=all ack latency {name} {label}: p50 {_fmt(row['p50_ms'])} ms, p99 "
                f"{_fmt(row['p99_ms'])} ms, max {_fmt(row['max_ms'])} ms ({row['acked']} of {row['sent']})")
    return rows


# -- 3. unavailability after a leader fails ------------------------------------------------

_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_time(line: str) -> float | None:
    """The wall-clock time (time.time()) of a broker log line, from its asctime."""
    match = _LOG_TIME.match(line)
    if not match:
        return None
    return datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def timeline(cluster: LocalCluster, victim: int, topic: str, led: list[int], signal_wall: float) -> dict:
    """Seconds after the signal (from the brokers' log lines, millisecond resolution) at
    which the controller learnt of the broker's going and the new leaders took over."""
    gone = re.compile(rf"controller \d+: (brokers gone: .*\b{victim}\b|broker {victim} shutting down)")
    led_lines = {f"{topic}-{p}: leader at epoch" for p in led}
    marks = {"controller_noticed_s": None, "new_leaders_s": None}
    for broker_id in cluster.processes:
        if broker_id == victim:
            continue
        for line in cluster.log_lines(broker_id):
            at = log_time(line)
            if at is None or at < signal_wall - 0.002:
                continue
            if gone.search(line) and marks["controller_noticed_s"] is None:
                marks["controller_noticed_s"] = at - signal_wall
            if any(key in line for key in led_lines):
                marks["new_leaders_s"] = max(marks["new_leaders_s"] or 0.0, at - signal_wall)
    return marks


def longest_gap(times_ns: list[int]) -> float:
    """Seconds of the longest gap between consecutive times (0 for fewer than two)."""
    times = sorted(times_ns)
    return max((b - a for a, b in zip(times, times[1:])), default=0) / 1e9


def longest_pause(acks_ns: list[int], after_ns: int) -> tuple[float, float] | None:
    """(seconds, start relative to `after_ns`) of the longest gap between consecutive
    acknowledgement times that ends after `after_ns`; None without an ack on each side."""
    times = sorted(acks_ns)
    if not times or times[0] > after_ns:
        return None
    best = max(((later - earlier, earlier) for earlier, later in zip(times, times[1:])
                if later > after_ns), default=None)
    if best is None:
        return None
    return best[0] / 1e9, (best[1] - after_ns) / 1e9


def steady_produce(cluster: LocalCluster, topic: str, sizes: Sizes, fault, led: list[int]) -> dict:
    """Paced idempotent acks=all producing to every partition; `fault()` once every partition
    has acknowledged for the warm-up, then on until every partition in `led` has acknowledged
    a record sent after the fault (or the step timeout). Acknowledgement times per partition."""
    from confluent_kafka import Producer

    errors, failed = [], []
    partitions = sizes.failover_partitions
    acks = {p: [] for p in range(partitions)}
    state = {"fault_ns": None, "resumed": set()}

    def on_delivery(error, message):
        now = time.monotonic_ns()
        if error is not None:
            failed.append(str(error))
            return
        _, sent = _HEADER.unpack_from(message.value())
        acks[message.partition()].append(now)
        if state["fault_ns"] is not None and sent > state["fault_ns"]:
            state["resumed"].add(message.partition())

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 0, "log_level": 3, "error_cb": errors.append})
    pad = bytes(VALUE_SIZE - _HEADER.size)
    interval_ns = 1_000_000_000 // sizes.failover_rate
    started = time.monotonic_ns()
    deadline = started + int(sizes.step_timeout * 1e9)
    sent, fault_wall, resumed_ns = 0, None, None
    try:
        while True:
            now = time.monotonic_ns()
            if now > deadline:
                break
            due = (now - started) // interval_ns + 1
            while sent < due:
                try:
                    producer.produce(topic, _HEADER.pack(sent, time.monotonic_ns()) + pad,
                                     partition=sent % partitions, on_delivery=on_delivery)
                    sent += 1
                except BufferError:
                    break
            producer.poll(0)
            if (state["fault_ns"] is None and now - started >= sizes.failover_warmup_seconds * 1e9
                    and all(acks.values())):
                state["fault_ns"], fault_wall = time.monotonic_ns(), time.time()
                fault()
            if state["fault_ns"] is not None and resumed_ns is None and set(led) <= state["resumed"]:
                resumed_ns = now
            if resumed_ns is not None and now - resumed_ns > sizes.failover_after_seconds * 1e9:
                break
            pause = (started + sent * interval_ns - time.monotonic_ns()) / 1e9
            if pause > 0:
                time.sleep(pause)
    finally:
        left = producer.flush(30)
    return {"acks": acks, "fault_ns": state["fault_ns"], "fault_wall": fault_wall,
            "recovered": resumed_ns is not None, "sent": sent, "undelivered": left,
            "delivery_errors": len(failed), "first_errors": failed[:3] + [str(e) for e in errors[:3]]}


def failover_once(zookeeper, workdir: str, sizes: Sizes, fault: str, session_ms: int, log) -> dict:
    """One run on a fresh cluster: `fault` is "SIGKILL" or "SIGTERM" to a broker leading
    partitions, not the controller."""
    cluster = LocalCluster(workdir, zookeeper, {"zookeeper.session.timeout.ms": session_ms},
                           timeout=sizes.step_timeout).start()
    try:
        topic = f"failover-{uuid.uuid4().hex[:6]}"
        cluster.create_topics({topic: sizes.failover_partitions})
        leaders = cluster.leaders(topic)
        controller = cluster.controller_id()
        victim = min(b for b in set(leaders.values()) if b != controller)
        led = sorted(p for p, leader in leaders.items() if leader == victim)
        process = cluster.processes[victim].proc

        def signal_victim():
            process.send_signal(signal.SIGKILL if fault == "SIGKILL" else signal.SIGTERM)

        run = steady_produce(cluster, topic, sizes, signal_victim, led)
        process.wait(sizes.step_timeout)  # a SIGTERM'd broker exits by itself
        fault_ns = run["fault_ns"]
        pauses = {p: longest_pause(run["acks"][p], fault_ns) for p in range(sizes.failover_partitions)}
        led_pauses = [pauses[p][0] for p in led if pauses[p] is not None]
        others = [pauses[p][0] for p in pauses if p not in led and pauses[p] is not None]
        before = [longest_gap([t for t in run["acks"][p] if t <= fault_ns]) for p in led]
        result = {"fault": fault, "session_timeout_ms": session_ms, "victim": victim,
                  "controller": controller, "led_partitions": led,
                  "partitions": sizes.failover_partitions, "rate": sizes.failover_rate,
                  "recovered": run["recovered"] and len(led_pauses) == len(led),
                  "unavailable_s": max(led_pauses) if led_pauses and run["recovered"] else None,
                  "per_partition_s": {p: None if v is None else v[0] for p, v in pauses.items()},
                  "pause_start_after_signal_s": {p: None if v is None else v[1] for p, v in pauses.items()},
                  "other_partitions_longest_s": max(others) if others else None,
                  "pause_before_signal_s": max(before) if before else None,
                  "acks_resumed_s": max((pauses[p][1] + pauses[p][0] for p in led if pauses[p] is not None),
                                        default=None),
                  "exit_status": process.returncode,
                  **{k: run[k] for k in ("sent", "undelivered", "delivery_errors", "first_errors")},
                  **timeline(cluster, victim, topic, led, run["fault_wall"])}
    finally:
        cluster.close()
    return result


def bench_failover(zookeeper, workdir: str, sizes: Sizes, log) -> list[dict]:
    plans = [("SIGKILL", ms) for ms in sizes.session_timeouts_ms] + [("SIGTERM", DEFAULT_SESSION_MS)]
    runs = []
    for fault, session_ms in plans:
        for repeat in range(sizes.failover_repeats):
            run = failover_once(zookeeper, workdir, sizes, fault, session_ms, log)
            run["repeat"] = repeat
            runs.append(run)
            log(f"  {fault} broker {run['victim']} (led {run['led_partitions']}), session "
                f"{session_ms} ms: unavailable {_fmt(run['unavailable_s'])} s; after the signal the "
                f"controller noticed at {_fmt(run['controller_noticed_s'])} s, new leaders at "
                f"{_fmt(run['new_leaders_s'])} s, acks resumed at {_fmt(run['acks_resumed_s'])} s; "
                f"followed partitions' longest pause {_fmt(run['other_partitions_longest_s'])} s, "
                f"longest before the signal {_fmt(run['pause_before_signal_s'])} s"
                + ("" if run["recovered"] else "  (NOT RECOVERED within the step timeout)")
                + (f"  ({run['delivery_errors']} delivery errors)" if run["delivery_errors"] else ""))
    return runs


def failover_summary(runs: list[dict]) -> list[dict]:
    """Per (fault, session timeout): every run's figure, the median and the goal."""
    groups = {}
    for run in runs:
        groups.setdefault((run["fault"], run["session_timeout_ms"]), []).append(run)
    summary = []
    for (fault, session_ms), group in groups.items():
        figures = [r["unavailable_s"] for r in group]
        known = [f for f in figures if f is not None]
        goal = CONTROLLED_GOAL_S if fault == "SIGTERM" else session_ms / 1000 + KILL_MARGIN_S
        median = statistics.median(known) if len(known) == len(figures) else None

        def med(key):
            values = [r[key] for r in group if r[key] is not None]
            return statistics.median(values) if values else None

        summary.append({"fault": fault, "session_timeout_ms": session_ms, "runs_s": figures,
                        "median_s": median, "worst_s": max(known) if known else None, "goal_s": goal,
                        "met": None if median is None else median <= goal,
                        "controller_noticed_median_s": med("controller_noticed_s"),
                        "new_leaders_median_s": med("new_leaders_s"),
                        "other_partitions_median_s": med("other_partitions_longest_s"),
                        "acks_resumed_median_s": med("acks_resumed_s"),
                        "pause_before_median_s": med("pause_before_signal_s")})
    return summary


# -- where the produce time goes --------------------------------------------------------------

PROFILE_RECORDS = 200_000  # at most, per profiled produce


def profile_leader(cluster: LocalCluster, sizes: Sizes, pool, workdir: str, log) -> dict:
    """py-spy of the leader of a one-partition RF=3 topic while the Python producer writes
    to it (bench.broker's recorder: again until it has a few seconds of samples), with the
    CPU seconds of the leader and of each follower over the same time."""
    from bench.broker.profile import PROFILE_RATE_HZ, _recorded, leaf_shares, py_spy_path

    spy = py_spy_path()
    if spy is None:
        return {"error": "py-spy is not installed"}
    topic = f"profile-{uuid.uuid4().hex[:6]}"
    cluster.create_topics({topic: 1})
    leader = cluster.leaders(topic)[0]
    out = os.path.join(workdir, "profile-leader.txt")
    probe = CpuProbe(cluster.pids)
    records = min(sizes.records, PROFILE_RECORDS)
    m, err, rounds = _recorded(spy, cluster.pids[leader], out, lambda _: produce_python(
        cluster.bootstrap, topic, records, pool, "all", "none", sizes.step_timeout))
    cpu = probe.stop()
    cluster.delete_topic(topic)
    if not os.path.exists(out):
        return {"error": f"py-spy recorded nothing: {err.strip()[-300:]}"}
    with open(out) as f:
        samples, top = leaf_shares(f)
    records *= rounds
    result = {"leader": leader, "records": records, "records_per_s": records / m["seconds"],
              "samples": samples, "rate_hz": PROFILE_RATE_HZ, "top": top, "seconds": cpu["seconds"],
              "broker_cpu_s_each": cpu["broker_cpu_s_each"]}
    log(f"  profile of leader {leader}: {samples} samples, {records:,} records at "
        f"{result['records_per_s']:,.0f} rec/s; CPU s per broker {_cpu_each(cpu['broker_cpu_s_each'], leader)}")
    for entry in top[:6]:
        log(f"    {entry['share']:6.1%}  {entry['function']}")
    return result


def _cpu_each(per_broker: dict, leader: int | None = None) -> str:
    return ", ".join(f"{b}{' (leader)' if b == leader else ''} {s:.2f}" for b, s in sorted(per_broker.items()))


# -- goals ---------------------------------------------------------------------------------------

def evaluate_goals(results: dict) -> list[dict]:
    goals = []
    if results.get("produce"):
        worst = min(results["produce"], key=lambda r: r["ratio"])
        goals.append({"goal": f"produce RF=3 >= {PRODUCE_GOAL}x RF=1 at acks=all", "value": worst["ratio"],
                      "needs": f">= {PRODUCE_GOAL}x", "met": worst["ratio"] >= PRODUCE_GOAL,
                      "short_by": max(0.0, PRODUCE_GOAL - worst["ratio"]),
                      "detail": f"worst of {len(results['produce'])}: {worst['client']} "
                                f"{worst['partitions']}p, {worst['rf3']['records_per_s']:,.0f} vs "
                                f"{worst['rf1']['records_per_s']:,.0f} rec/s"})
    rf3 = next((r for r in results.get("e2e") or () if r["target"] == "rf3"), None)
    if rf3 is not None:
        p99 = rf3["p99_ms"]
        goals.append({"goal": f"e2e p99 <= {E2E_GOAL_MS:g} ms at {rf3['rate']:,} rec/s, RF=3 acks=all",
                      "value": p99, "needs": f"<= {E2E_GOAL_MS:g} ms",
                      "met": p99 is not None and rf3["complete"] and p99 <= E2E_GOAL_MS,
                      "short_by": None if p99 is None else max(0.0, p99 - E2E_GOAL_MS),
                      "detail": rf3.get("error") or f"p50 {_fmt(rf3['p50_ms'])} ms, max "
                                                     f"{_fmt(rf3['max_ms'])} ms, {rf3['measured']:,} records"})
    for s in results.get("failover_summary") or ():
        what = ("controlled shutdown (SIGTERM)" if s["fault"] == "SIGTERM" else
                f"SIGKILL, zookeeper.session.timeout.ms={s['session_timeout_ms']}")
        goals.append({"goal": f"unavailability after {what} <= {s['goal_s']:g} s",
                      "value": s["median_s"], "needs": f"<= {s['goal_s']:g} s", "met": s["met"],
                      "short_by": None if s["median_s"] is None else max(0.0, s["median_s"] - s["goal_s"]),
                      "detail": f"median of {len(s['runs_s'])} (runs "
                                f"{', '.join(_fmt(r) for r in s['runs_s'])} s; worst {_fmt(s['worst_s'])} s)"})
    return goals


# -- the run -------------------------------------------------------------------------------------

SECTIONS = ("produce", "e2e", "failover")


def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print) -> dict:
    """Every benchmark in `sections`; returns the results (nothing written)."""
    import shutil

    from sluice.zookeeper import ZooKeeperServer

    pool = value_pool()
    results = {"mode": mode, "date": datetime.date.today().isoformat(),
               "started": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": machine_details(), "clients": client_versions(),
               "load_average_before": os.getloadavg(), "sizes": dataclasses.asdict(sizes)}
    timed = section_timer(results)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-cluster-")
    zookeeper = ZooKeeperServer(os.path.join(workdir, "zookeeper"))

    try:
        zookeeper.start()
        if {"produce", "e2e"} & set(sections):
            single = cluster = None
            try:
                single = SluiceTarget(workdir, sizes).start()
                cluster = LocalCluster(workdir, zookeeper, timeout=sizes.step_timeout).start()
                for target in (single, cluster):
                    serve_a_group(target.bootstrap, sizes.step_timeout)
                if "produce" in sections:
                    log("1. produce at acks=all: RF=3 on 3 brokers vs RF=1 on one")
                    results["produce"] = timed("produce", bench_produce, single, cluster, sizes, pool,
                                               workdir, log)
                    if min(r["ratio"] for r in results["produce"]) < PRODUCE_GOAL:
                        log("1b. the goal is not met: a profile of the leader")
                        results["produce_profile"] = timed("produce_profile", profile_leader, cluster,
                                                           sizes, pool, workdir, log)
                if "e2e" in sections:
                    log(f"2. end-to-end latency at {sizes.e2e_rate:,} rec/s, acks=all")
                    results["e2e"] = timed("e2e", bench_e2e, single, cluster, sizes, log)
                    rf3 = next(r for r in results["e2e"] if r["target"] == "rf3")
                    if not rf3["complete"] or rf3["p99_ms"] is None or rf3["p99_ms"] > E2E_GOAL_MS:
                        log("2b. the goal is not met: the producer's wait for acks=all")
                        results["acks"] = timed("acks", bench_acks, single, cluster, sizes, log)
            finally:
                if cluster is not None:
                    cluster.close()
                if single is not None:
                    single.stop()
        if "failover" in sections:
            log("3. unavailability after the leader fails")
            results["failover"] = timed("failover", bench_failover, zookeeper, workdir, sizes, log)
            results["failover_summary"] = failover_summary(results["failover"])
    finally:
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    results["goals"] = evaluate_goals(results)
    return results


# -- the report ----------------------------------------------------------------------------------

def _verdict(goal) -> str:
    return "not run" if goal["met"] is None else "met" if goal["met"] else "NOT met"


def _loads(results: dict, when: str) -> str:
    return "/".join(f"{v:.1f}" for v in results.get(f"load_average_{when}") or ())


def markdown_report(results: dict) -> str:
    sizes = results["sizes"]
    md = [f"# Cluster benchmarks: {BROKERS} brokers under ZooKeeper vs one broker ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']}), {results['clients']['kcat']}",
          f"- run time: {results['seconds']:.0f} s ({results['section_seconds']}); load average "
          f"(1/5/15 min) before {_loads(results, 'before')}, after {_loads(results, 'after')} on "
          f"{results['machine']['cores']} cores (other work on the machine shows here)",
          f"- sizes: {json.dumps(sizes)}",
          "- RF=3: three `python -m broker` processes, each with a generated server.properties "
          "(broker.id, zookeeper.connect under a chroot of its own per cluster, defaults otherwise "
          "unless named), one ZooKeeper server (sluice.zookeeper) for the run; RF=1: one broker "
          "in the default single-node mode, no ZooKeeper. Both served a consumer group before "
          "the first measurement (so __consumer_offsets exists). Every process on 127.0.0.1, "
          "data on local disk, all sharing the machine's cores with the clients.", ""]
    md += ["## Goals", "", "| goal | measured | needs | verdict | short by | detail |",
           "|---|---:|---|---|---:|---|"]
    for g in results["goals"]:
        unit = "x" if g["goal"].startswith("produce") else (" ms" if "e2e" in g["goal"] else " s")
        value = "-" if g["value"] is None else f"{g['value']:.3f}{unit}" if unit == "x" else f"{_fmt(g['value'])}{unit}"
        short = "-" if not g["short_by"] else (f"{g['short_by']:.3f}x" if unit == "x" else f"{_fmt(g['short_by'])}{unit}")
        md.append(f"| {g['goal']} | {value} | {g['needs']} | {_verdict(g)} | {short} | {g['detail']} |")
    if results.get("produce"):
        md += ["", "## 1. Produce at acks=all", "",
               f"{sizes['records']:,} records of {VALUE_SIZE} bytes per run, linger.ms=5, batch.size=1 MB, "
               f"no compression (bench.broker's producers); median of {sizes['produce_repeats']} run(s), "
               "RF=1 and RF=3 taking turns. A run still going after "
               f"{sizes['produce_seconds_max']:g} s is ended there (past librdkafka's socket.timeout.ms, "
               "60 s, after which it sends an unanswered request again); its rate is the records "
               "written (the sum of the high watermarks) over that time. Broker CPU: user + system seconds from /proc, summed over "
               "the brokers (each broker's in the JSON).", "",
               "| client | partitions | RF=1 rec/s | RF=1 MB/s | RF=1 broker CPU s | RF=3 rec/s | "
               "RF=3 MB/s | RF=3 broker CPU s (3 brokers) | RF=3 / RF=1 |",
               "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        def rate(side):
            return _fmt(side["records_per_s"]) + ("" if all(side["all_complete"]) else " (ended at the bound)")

        for r in results["produce"]:
            a, b = r["rf1"], r["rf3"]
            md.append(f"| {r['client']} | {r['partitions']} | {rate(a)} | {_fmt(a['mb_per_s'])} | "
                      f"{a['broker_cpu_s']:.2f} | {rate(b)} | {_fmt(b['mb_per_s'])} | "
                      f"{b['broker_cpu_s']:.2f} | {r['ratio']:.2f}x |")
        md += ["", f"For reference, not measured here: Kafka's own 2014 figures (one producer thread, "
                   f"6 partitions, 3 machines) were {KAFKA_2014['rf3_acks_all']:,} rec/s with 3x synchronous "
                   f"replication vs {KAFKA_2014['rf1']:,} without, "
                   f"{KAFKA_2014['rf3_acks_all'] / KAFKA_2014['rf1']:.2f}x."]
        short = [r for r in results["produce"] if any(w != r["records"] for w in r["rf1"]["all_written"]
                                                      + r["rf3"]["all_written"])]
        if short:
            md.append(f"\nWritten records (high watermarks) differ from the records sent in: "
                      f"{[(r['client'], r['partitions']) for r in short]}.")
    profile = results.get("produce_profile")
    if profile:
        md += ["", "### Where the RF=3 produce time goes (the goal is not met)", ""]
        if "error" in profile:
            md.append(f"Profile: {profile['error']}")
        else:
            md += [f"py-spy at {profile['rate_hz']} Hz of the leader (broker {profile['leader']}) of a "
                   f"one-partition RF=3 topic while the Python producer wrote {profile['records']:,} "
                   f"records ({profile['records_per_s']:,.0f} rec/s under the profiler): "
                   f"{profile['samples']} samples. CPU seconds per broker over the same "
                   f"{profile['seconds']:.1f} s: {_cpu_each(profile['broker_cpu_s_each'], profile['leader'])}.",
                   "", "| share of samples | innermost function |", "|---:|---|"]
            md += [f"| {e['share']:.1%} | {e['function']} |" for e in profile["top"]]
    if results.get("e2e"):
        md += ["", "## 2. End-to-end latency", "",
               "bench.broker's measurement: a paced confluent-kafka producer (linger.ms=0, acks=all) "
               "puts its send time (CLOCK_MONOTONIC) in each record of partition 0; a consumer process "
               "(fetch.wait.max.ms=500) notes the arrival. Records of the warm-up left out.", "",
               "| topic | rate (achieved) | records measured | p50 ms | p99 ms | p99.9 ms | max ms | complete |",
               "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in results["e2e"]:
            if "error" in r:
                md.append(f"| {'RF=3, 3 brokers' if r['target'] == 'rf3' else 'RF=1, one broker'} | "
                          f"{r['rate']:,}/s not kept: {r['error']} | - | - | - | - | - | NO |")
                continue
            md.append(f"| {'RF=3, 3 brokers' if r['target'] == 'rf3' else 'RF=1, one broker'} | "
                      f"{r['rate']:,} ({r['achieved_rate']:,.0f})/s | {r['measured']:,} | {_fmt(r['p50_ms'])} | "
                      f"{_fmt(r['p99_ms'])} | {_fmt(r['p999_ms'])} | {_fmt(r['max_ms'])} | "
                      f"{'yes' if r['complete'] else 'NO'} |")
    if results.get("acks"):
        md += ["", "### Where the RF=3 e2e time goes (the goal is not met)", "",
               f"The producer's wait for acks=all alone: records paced at {results['acks'][0]['rate']:,}/s "
               f"for {results['acks'][0]['seconds']:g} s to a fresh one-partition topic, linger.ms=0, by "
               "requests allowed in flight per connection (the e2e run's producer: librdkafka's "
               "default for a non-idempotent producer, 1,000,000). Latency from produce() to the "
               "delivery report.", "",
               "| producer | topic | acked | p50 ms | p99 ms | max ms |", "|---|---|---:|---:|---:|---:|"]
        for r in results["acks"]:
            md.append(f"| {r['producer']} | {'RF=3' if r['target'] == 'rf3' else 'RF=1'} | "
                      f"{r['acked']:,} of {r['sent']:,} | {_fmt(r['p50_ms'])} | {_fmt(r['p99_ms'])} | "
                      f"{_fmt(r['max_ms'])} |")
    if results.get("failover"):
        md += ["", "## 3. Unavailability after a leader fails", "",
               f"A fresh cluster per run; an RF=3 topic of {sizes['failover_partitions']} partitions; one "
               f"confluent-kafka producer (acks=all, idempotent, linger.ms=0) sends {sizes['failover_rate']:,} "
               f"rec/s round-robin over the partitions. After {sizes['failover_warmup_seconds']:g} s of "
               "acknowledgements from every partition, the lowest-numbered broker that leads partitions "
               "and is not the controller gets the signal. Unavailability of a partition: the longest "
               "pause between consecutive acknowledgements of its records that ends after the signal "
               "(so a response already on its way when the broker died does not end it); the figure "
               "is the worst of the partitions the broker led. From the surviving brokers' logs: when "
               "the controller noticed (SIGKILL: its ZooKeeper session expired and the controller saw "
               "the registration go; SIGTERM: the controlled shutdown request) and when the last of "
               "the new leaders took over, both after the signal, and when the acknowledgements "
               "resumed. The longest pause before the signal is the ordinary spacing of "
               "acknowledgements. The partitions the broker only "
               "followed pause too with acks=all, until the controller removes it from their ISR: "
               "their longest pause is shown beside.", "",
               "| fault | zookeeper.session.timeout.ms | runs (s) | median s | goal s | verdict | "
               "controller noticed, median s | new leaders, median s | acks resumed, median s | "
               "longest pause before the signal, median s | followed partitions' pause, median s |",
               "|---|---:|---|---:|---:|---|---:|---:|---:|---:|---:|"]
        for s in results["failover_summary"]:
            md.append(f"| {s['fault']} | {s['session_timeout_ms']} | {', '.join(_fmt(r) for r in s['runs_s'])} | "
                      f"{_fmt(s['median_s'])} | {s['goal_s']:g} | {_verdict(s)} | "
                      f"{_fmt(s['controller_noticed_median_s'])} | {_fmt(s['new_leaders_median_s'])} | "
                      f"{_fmt(s['acks_resumed_median_s'])} | {_fmt(s['pause_before_median_s'])} | "
                      f"{_fmt(s['other_partitions_median_s'])} |")
        md += ["", "Each run:", "", "| fault | session ms | broker | led | unavailable s (per led partition) | "
               "controller noticed s | new leaders s | records sent | delivery errors |",
               "|---|---:|---:|---|---|---:|---:|---:|---:|"]
        for r in results["failover"]:
            per = ", ".join(f"{p}: {_fmt(r['per_partition_s'][p])}" for p in r["led_partitions"])
            md.append(f"| {r['fault']} | {r['session_timeout_ms']} | {r['victim']} | {r['led_partitions']} | "
                      f"{per} | {_fmt(r['controller_noticed_s'])} | {_fmt(r['new_leaders_s'])} | "
                      f"{r['sent']:,} | {r['delivery_errors']} |")
    return "\n".join(md) + "\n"


def write_reports(results: dict, out_dir: str) -> dict:
    return write_result_files("cluster", results, out_dir, markdown_report(results))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer records, one run per fault")
    parser.add_argument("--records", type=int, help="records per produce run")
    parser.add_argument("--repeats", type=int, help="runs per fault")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(SECTIONS)}")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    sizes, mode = (QUICK, "quick") if args.quick else (FULL, "full")
    if args.records or args.repeats:
        sizes = dataclasses.replace(sizes, records=args.records or sizes.records,
                                    failover_repeats=args.repeats or sizes.failover_repeats)
        mode = "custom"
    sections = chosen_sections(parser, args.only, SECTIONS)
    print(f"machine: {describe_machine()}")
    print(f"cluster benchmarks ({mode}): {BROKERS} brokers under ZooKeeper vs one broker, 127.0.0.1",
          flush=True)

    def log(line):
        print(line, flush=True)

    results = run(sizes, mode, sections, log)
    publish("cluster", results, markdown_report(results), None if args.no_write else args.out)


if __name__ == "__main__":
    main()
