"""Coordinator benchmarks (issue 18): a consumer group across a kill of its coordinator,
and transactional throughput with three replicas against one.

Every process runs on 127.0.0.1 and is started by this run: one ZooKeeper server
(sluice.zookeeper), brokers as `python -m broker` (bench.cluster.LocalCluster: broker.id
and zookeeper.connect under a chroot of its own per cluster, plus the settings named in
the report), and for RF=1 one broker in the default single-node mode.

1. group coordinator kill: a fresh 3-broker cluster per run, a topic of 6 partitions
   with replication factor 3, a paced producer, and a group of 3 confluent-kafka
   consumers (one thread each) that commit their positions synchronously every 100 ms.
   Once every consumer has an assignment and has committed, the broker coordinating the
   group (FindCoordinator) gets SIGKILL. Measured from the signal: when a commit sent
   after it first succeeds (the group has a coordinator again), and when the group is
   Stable with its 3 members on a live coordinator (DescribeGroups). p50/p99 over the
   runs.
2. transactions: one confluent-kafka transactional producer commits transactions of 100
   records (100 bytes, round-robin over 6 partitions) for a fixed time: transactions/s
   and commit latency on an RF=3 topic of the 3-broker cluster against an RF=1 topic of
   the single broker, taking turns; the median of the runs.

    python -m bench.coordinators [--quick] [--only rebalance,transactions] [--out DIR] [--no-write]
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid

from bench.common import (SluiceTarget, VALUE_SIZE, _fmt, client_versions, sectioned_main)
from bench.cluster import LocalCluster
from bench.e2e_consumer import percentile
from bench.machine import describe_machine, machine_details
from sluice.polling import wait_for

PARTITIONS = 6
CONSUMERS = 3
TXN_RECORDS = 100
COMMIT_INTERVAL_S = 0.1
SECTIONS = ("rebalance", "transactions")
# The cluster for the kills: a short ZooKeeper session so that a run is short; the
# group's consumers keep librdkafka's defaults but for the session timeout.
KILL_PROPERTIES = {"zookeeper.session.timeout.ms": 6000}
CONSUMER_SESSION_MS = 10_000


@dataclasses.dataclass
class Sizes:
    kills: int                 # fresh clusters, one coordinator kill each
    warmup_seconds: float      # of committing before the kill
    txn_seconds: float         # per transactions run
    txn_repeats: int           # per target, taking turns
    step_timeout: float


FULL = Sizes(kills=7, warmup_seconds=3.0, txn_seconds=10.0, txn_repeats=3, step_timeout=300.0)
QUICK = dataclasses.replace(FULL, kills=2, txn_seconds=3.0, txn_repeats=1)


# -- 1. a group across a coordinator kill ------------------------------------------------

class GroupMember(threading.Thread):
    """One consumer of the group: polls, and commits its position every 100 ms; notes
    when each commit that succeeded was sent."""

    def __init__(self, bootstrap: str, group: str, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": CONSUMER_SESSION_MS, "log_level": 3})
        self.topic, self.stop = topic, stop
        self.commits: list[tuple[int, int]] = []  # (sent, answered) monotonic ns of each success
        self.assigned = False

    def run(self) -> None:
        from confluent_kafka import KafkaException

        self.consumer.subscribe([self.topic], on_assign=lambda c, parts: setattr(self, "assigned", True))
        last_commit = 0.0
        try:
            while not self.stop.is_set():
                self.consumer.poll(0.05)
                now = time.monotonic()
                if self.consumer.assignment() and now - last_commit >= COMMIT_INTERVAL_S:
                    last_commit = now
                    sent = time.monotonic_ns()
                    try:
                        self.consumer.commit(asynchronous=False)
                        self.commits.append((sent, time.monotonic_ns()))
                    except KafkaException:
                        pass  # no coordinator, or nothing consumed yet: tried again
        finally:
            self.consumer.close()


def _producer_thread(bootstrap: str, topic: str, stop: threading.Event) -> threading.Thread:
    """A few hundred records a second, so that the consumers' positions move."""
    def run():
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 3})
        value = bytes(VALUE_SIZE)
        while not stop.is_set():
            producer.produce(topic, value)
            producer.poll(0)
            time.sleep(0.003)
        producer.flush(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _coordinator(cluster: LocalCluster, group: str) -> int:
    from wire.client import Client

    with Client(cluster.bootstrap, call_timeout=cluster.timeout) as client:
        return client.find_coordinator(group).node_id


def _stable_on_live_coordinator(cluster: LocalCluster, group: str) -> bool:
    from wire.client import Client, ClientError
    from wire.errors import KafkaError

    try:
        with Client(cluster.bootstrap, call_timeout=5, request_timeout=2, retries=0) as client:
            if client.find_coordinator(group).node_id not in cluster.live:
                return False
            described = client.describe_groups([group])[group]
    except (ClientError, KafkaError, OSError, TimeoutError):
        return False
    return described.state == "Stable" and len(described.members) == CONSUMERS


def kill_once(zookeeper, workdir: str, sizes: Sizes) -> dict:
    cluster = LocalCluster(workdir, zookeeper, KILL_PROPERTIES, timeout=sizes.step_timeout).start()
    stop = threading.Event()
    members: list[GroupMember] = []
    producer = None
    try:
        topic, group = f"rebalance-{uuid.uuid4().hex[:6]}", f"bench-group-{uuid.uuid4().hex[:6]}"
        cluster.create_topics({topic: PARTITIONS})
        producer = _producer_thread(cluster.bootstrap, topic, stop)
        members = [GroupMember(cluster.bootstrap, group, topic, stop) for _ in range(CONSUMERS)]
        for member in members:
            member.start()
        wait_for(lambda: all(m.assigned and m.commits for m in members), sizes.step_timeout,
                   "every consumer to be assigned partitions and to commit")
        wait_for(lambda: _stable_on_live_coordinator(cluster, group), sizes.step_timeout,
                   "the group to be Stable")
        time.sleep(sizes.warmup_seconds)
        victim = _coordinator(cluster, group)
        controller = cluster.controller_id()
        killed_ns = time.monotonic_ns()
        cluster.processes[victim].proc.send_signal(signal.SIGKILL)
        cluster.processes[victim].proc.wait(30)
        stable_at = wait_for(lambda: _stable_on_live_coordinator(cluster, group) and time.monotonic_ns(),
                               sizes.step_timeout, "the group to be Stable on a new coordinator",
                               interval=0.05)
        wait_for(lambda: any(sent > killed_ns for m in members for sent, _ in m.commits),
                   sizes.step_timeout, "a commit sent after the kill to succeed", interval=0.05)
        first_commit = min(done for m in members for sent, done in m.commits if sent > killed_ns)
        return {"victim": victim, "victim_was_controller": victim == controller,
                "commits_resumed_s": (first_commit - killed_ns) / 1e9,
                "stable_s": (stable_at - killed_ns) / 1e9,
                "new_coordinator": _coordinator(cluster, group)}
    finally:
        stop.set()
        for member in members:
            member.join(30)
        if producer is not None:
            producer.join(30)
        cluster.close()


def bench_rebalance(zookeeper, workdir: str, sizes: Sizes, log) -> dict:
    runs = []
    for i in range(sizes.kills):
        run = kill_once(zookeeper, workdir, sizes)
        runs.append(run)
        log(f"  kill {i + 1}/{sizes.kills}: coordinator {run['victim']}"
            f"{' (also the controller)' if run['victim_was_controller'] else ''} -> "
            f"{run['new_coordinator']}: commits resumed after {run['commits_resumed_s']:.2f} s, "
            f"group Stable after {run['stable_s']:.2f} s")
    summary = {}
    for key in ("commits_resumed_s", "stable_s"):
        values = sorted(r[key] for r in runs)
        summary[key] = {"p50": percentile(values, 0.5), "p99": percentile(values, 0.99),
                        "max": values[-1]}
    return {"runs": runs, "summary": summary}


# -- 2. transactions ------------------------------------------------------------------------

def transactions_once(target, seconds: float) -> dict:
    from confluent_kafka import Producer

    topic = f"txn-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: PARTITIONS})
    producer = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": f"bench-{topic}",
                         "linger.ms": 5, "log_level": 3})
    producer.init_transactions(60)
    value = bytes(VALUE_SIZE)
    latencies = []
    count = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        producer.begin_transaction()
        for i in range(TXN_RECORDS):
            producer.produce(topic, value, partition=i % PARTITIONS)
        t0 = time.monotonic()
        producer.commit_transaction(60)
        latencies.append(time.monotonic() - t0)
        count += 1
    elapsed = time.monotonic() - started
    target.delete_topic(topic)
    latencies.sort()
    return {"transactions": count, "seconds": elapsed, "per_s": count / elapsed,
            "commit_p50_ms": percentile(latencies, 0.5) * 1000,
            "commit_p99_ms": percentile(latencies, 0.99) * 1000}


def bench_transactions(zookeeper, workdir: str, sizes: Sizes, log) -> dict:
    single = cluster = None
    try:
        single = SluiceTarget(workdir, sizes).start()
        cluster = LocalCluster(workdir, zookeeper, timeout=sizes.step_timeout).start()
        targets = (("rf1", single), ("rf3", cluster))
        runs = {name: [] for name, _ in targets}
        for repeat in range(sizes.txn_repeats):
            for name, target in (targets if repeat % 2 == 0 else targets[::-1]):
                run = transactions_once(target, sizes.txn_seconds)
                runs[name].append(run)
                log(f"  {name}: {run['per_s']:.1f} transactions/s, commit p50 "
                    f"{_fmt(run['commit_p50_ms'])} ms p99 {_fmt(run['commit_p99_ms'])} ms")
        median = {name: sorted(r, key=lambda x: x["per_s"])[len(r) // 2] for name, r in runs.items()}
        return {"runs": runs, "median": median,
                "ratio": median["rf3"]["per_s"] / median["rf1"]["per_s"]}
    finally:
        if cluster is not None:
            cluster.close()
        if single is not None:
            single.stop()


# -- running and reporting ---------------------------------------------------------------------

def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print) -> dict:
    from sluice.zookeeper import ZooKeeperServer

    results = {"mode": mode, "date": datetime.date.today().isoformat(),
               "machine": machine_details(), "clients": client_versions(),
               "load_average_before": os.getloadavg(), "sizes": dataclasses.asdict(sizes)}
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-coordinators-")
    zookeeper = ZooKeeperServer(os.path.join(workdir, "zookeeper"))
    try:
        zookeeper.start()
        if "rebalance" in sections:
            log(f"1. a group of {CONSUMERS} consumers across {sizes.kills} kills of its coordinator")
            results["rebalance"] = bench_rebalance(zookeeper, workdir, sizes, log)
        if "transactions" in sections:
            log(f"2. transactions of {TXN_RECORDS} records: RF=3 on 3 brokers vs RF=1 on one")
            results["transactions"] = bench_transactions(zookeeper, workdir, sizes, log)
    finally:
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    return results


def markdown_report(results: dict) -> str:
    loads = {w: "/".join(f"{v:.1f}" for v in results[f"load_average_{w}"]) for w in ("before", "after")}
    md = [f"# Coordinator benchmarks ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']})",
          f"- run time: {results['seconds']:.0f} s; load average (1/5/15 min) before {loads['before']}, "
          f"after {loads['after']} on {results['machine']['cores']} cores",
          f"- sizes: {results['sizes']}", ""]
    if "rebalance" in results:
        r = results["rebalance"]
        md += ["## 1. A consumer group across a kill of its coordinator", "",
               f"A fresh cluster of 3 brokers per run ({KILL_PROPERTIES}, defaults otherwise), a topic "
               f"of {PARTITIONS} partitions with replication factor 3, a paced producer, and "
               f"{CONSUMERS} confluent-kafka consumers in one group (session.timeout.ms="
               f"{CONSUMER_SESSION_MS}) committing their positions synchronously every "
               f"{COMMIT_INTERVAL_S * 1000:g} ms. The group's coordinator gets SIGKILL; times from "
               "the signal.", "",
               "| measure | p50 s | p99 s | max s |", "|---|---:|---:|---:|"]
        for key, label in (("commits_resumed_s", "first success of a commit sent after the kill"),
                           ("stable_s", "group Stable with every member on a live coordinator")):
            s = r["summary"][key]
            md.append(f"| {label} | {_fmt(s['p50'])} | {_fmt(s['p99'])} | {_fmt(s['max'])} |")
        md += ["", "| run | coordinator killed | was the controller | new coordinator | "
               "commits resumed s | Stable s |", "|---:|---:|---|---:|---:|---:|"]
        for i, run in enumerate(r["runs"], 1):
            md.append(f"| {i} | {run['victim']} | {'yes' if run['victim_was_controller'] else 'no'} | "
                      f"{run['new_coordinator']} | {_fmt(run['commits_resumed_s'])} | {_fmt(run['stable_s'])} |")
    if "transactions" in results:
        t = results["transactions"]
        md += ["", "## 2. Transactions", "",
               f"One confluent-kafka transactional producer, transactions of {TXN_RECORDS} records of "
               f"{VALUE_SIZE} bytes over {PARTITIONS} partitions, each committed before the next "
               f"begins, for {results['sizes']['txn_seconds']:g} s per run; median of "
               f"{results['sizes']['txn_repeats']} run(s), the targets taking turns.", "",
               "| topic | transactions/s | records/s | commit p50 ms | commit p99 ms |",
               "|---|---:|---:|---:|---:|"]
        for name, label in (("rf1", "RF=1, one broker"), ("rf3", "RF=3, 3 brokers")):
            m = t["median"][name]
            md.append(f"| {label} | {m['per_s']:.1f} | {_fmt(m['per_s'] * TXN_RECORDS)} | "
                      f"{_fmt(m['commit_p50_ms'])} | {_fmt(m['commit_p99_ms'])} |")
        md += ["", f"RF=3 / RF=1: {t['ratio']:.2f}x"]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "coordinators", __doc__.splitlines()[0], "fewer kills, shorter runs", SECTIONS, FULL,
                   QUICK, run, markdown_report)


if __name__ == "__main__":
    main()
