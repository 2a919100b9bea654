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
   the single broker, and the same on Apache Kafka (bench.kafka_broker): 3 KRaft nodes
   with RF=3 topics and one node with RF=1 topics, all four taking turns; the median of
   the runs. Beside them, one replication round trip of each cluster: the p50 latency of
   a single record produced with acks=all to an RF=3 partition minus that of acks=1 to
   the same partition. Goals (issue 33): RF=3 >= 0.5x RF=1 in transactions/s; RF=3 commit
   p99 <= 2 round trips + RF=1 commit p99; Sluice RF=3 >= 1.0x Kafka RF=3.

    python -m bench.coordinators [--quick] [--only rebalance,transactions] [--out DIR] [--no-write]
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import shutil
import signal
import tempfile
import threading
import time
import uuid

from bench.common import (SluiceTarget, VALUE_SIZE, _fmt, client_versions, sectioned_main)
from bench.cluster import LocalCluster, _verdict
from bench.e2e_consumer import percentile
from bench.kafka_broker import start_kafka
from bench.machine import describe_machine, machine_details
from tests.support.polling import wait_for

PARTITIONS = 6
CONSUMERS = 3
TXN_RECORDS = 100
TXN_RATIO_GOAL = 0.5      # transactions/s, RF=3 / RF=1
TXN_KAFKA_GOAL = 1.0      # transactions/s, Sluice RF=3 / Kafka RF=3
COMMIT_ROUND_TRIPS = 2    # RF=3 commit p99 <= this many replication round trips + RF=1 commit p99
ROUND_TRIP_WARMUP = 20    # records per producer before the measured ones
# The transactions' targets, in the order of the tables: (key, label, Kafka nodes or None for Sluice)
TXN_TARGETS = (("rf1", "Sluice, RF=1, one broker", None), ("rf3", "Sluice, RF=3, 3 brokers", None),
               ("kafka_rf1", "Kafka, RF=1, one broker", 1), ("kafka_rf3", "Kafka, RF=3, 3 brokers", 3))
TXN_LABELS = {name: label for name, label, _ in TXN_TARGETS}
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
    txn_warmup_seconds: float  # per target, of transactions before the first measured
    round_trip_samples: int    # single records per acks setting, per repeat and cluster
    profile_seconds: float     # per target and profile run (two of them)
    step_timeout: float


FULL = Sizes(kills=7, warmup_seconds=3.0, txn_seconds=10.0, txn_repeats=3, txn_warmup_seconds=3.0,
             round_trip_samples=500, profile_seconds=3.0, step_timeout=300.0)
QUICK = dataclasses.replace(FULL, kills=2, txn_seconds=3.0, txn_repeats=1, txn_warmup_seconds=1.0,
                            round_trip_samples=200, profile_seconds=1.0)


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
    from sluice_client import Client

    with Client(cluster.bootstrap, call_timeout=cluster.timeout) as client:
        return client.find_coordinator(group).node_id


def _stable_on_live_coordinator(cluster: LocalCluster, group: str) -> bool:
    from sluice_client import Client, ClientError
    from wire.errors import KafkaError

    try:
        with Client(cluster.bootstrap, call_timeout=5, request_timeout=2, retries=0) as client:
            if client.find_coordinator(group).node_id not in cluster.live:
                return False
            described = client.admin.describe_groups([group])[group]
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

def transactions_once(target, seconds: float, settings: dict | None = None, after_commit=None) -> dict:
    """Transactions back to back for `seconds`; `settings` add to the producer's, and
    `after_commit(transactional id)` runs after each commit (outside its latency)."""
    from confluent_kafka import Producer

    topic = f"txn-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: PARTITIONS})
    transactional_id = f"bench-{topic}"
    producer = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": transactional_id,
                         "linger.ms": 5, "log_level": 3, **(settings or {})})
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
        if after_commit is not None:
            after_commit(transactional_id)
    elapsed = time.monotonic() - started
    producer.poll(0)  # the log lines of the last commit, for a `logger` in `settings`
    target.delete_topic(topic)
    latencies.sort()
    return {"transactions": count, "seconds": elapsed, "per_s": count / elapsed,
            "commit_p50_ms": percentile(latencies, 0.5) * 1000,
            "commit_p99_ms": percentile(latencies, 0.99) * 1000}


def replication_round_trip(target, samples: int) -> dict:
    """One record at a time (linger.ms=0) to the one partition of a fresh topic, from a
    producer with acks=1 and one with acks=all taking turns: p50 of each from produce() to
    the acknowledgement, after ROUND_TRIP_WARMUP records each. Their difference is one
    replication round trip: what acks=all waits for beyond the leader's write (the
    followers fetching the record, the leader learning that they have it)."""
    from confluent_kafka import Producer

    topic = f"round-trip-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: 1})
    producers = {acks: Producer({"bootstrap.servers": target.bootstrap, "acks": acks, "linger.ms": 0,
                                 "enable.idempotence": False, "log_level": 3}) for acks in ("1", "all")}
    latencies = {acks: [] for acks in producers}
    value = bytes(VALUE_SIZE)
    for i in range(2 * (ROUND_TRIP_WARMUP + samples)):
        acks = "1" if i % 2 == 0 else "all"
        acknowledged = []
        sent = time.monotonic_ns()
        producers[acks].produce(topic, value, partition=0, on_delivery=lambda error, _: acknowledged.append(
            (error, time.monotonic_ns())))
        if producers[acks].flush(30) or acknowledged[0][0] is not None:
            raise RuntimeError(f"{topic}: a record with acks={acks} was not acknowledged: {acknowledged}")
        if i >= 2 * ROUND_TRIP_WARMUP:
            latencies[acks].append((acknowledged[0][1] - sent) / 1e6)
    target.delete_topic(topic)
    p50 = {acks: percentile(sorted(values), 0.5) for acks, values in latencies.items()}
    return {"acks_1_p50_ms": p50["1"], "acks_all_p50_ms": p50["all"], "round_trip_ms": p50["all"] - p50["1"],
            "samples": samples}


_RESPONSE_RTT = re.compile(r"Received (\w+)Response \(v\d+, \d+ bytes, CorrId \d+, rtt ([\d.]+)ms\)")
PROFILED_REQUESTS = ("AddPartitionsToTxn", "Produce", "EndTxn")


def transaction_profile(target, seconds: float) -> dict:
    """Where a transaction's time goes, in two runs of `seconds`: (1) transactions back to
    back with librdkafka's protocol log, whose round trip (rtt) of every request of
    PROFILED_REQUESTS gives its count per transaction and p50 (AddPartitionsToTxn more
    than once a transaction: answered CONCURRENT_TRANSACTIONS, retried 20 ms later);
    (2) after each commit, DescribeTransactions polled at the coordinator until the id is
    CompleteCommit: the time from EndTxn's answer to the markers and CompleteCommit
    written (to within one DescribeTransactions)."""
    import logging

    from sluice_client import Client

    rtts = {name: [] for name in PROFILED_REQUESTS}

    class Rtts(logging.Handler):
        def emit(self, record):
            match = _RESPONSE_RTT.search(record.getMessage())
            if match and match.group(1) in rtts:
                rtts[match.group(1)].append(float(match.group(2)))

    logger = logging.getLogger(f"bench.coordinators.rdkafka-{uuid.uuid4().hex[:6]}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Rtts())
    logged = transactions_once(target, seconds, {"debug": "protocol", "logger": logger})
    completions = []
    with Client(target.bootstrap, call_timeout=60) as client:
        def completed(transactional_id: str) -> None:
            answered = time.monotonic()
            wait_for(lambda: client.admin.describe_transaction(transactional_id).state == "CompleteCommit", 60,
                     f"{transactional_id}'s CompleteCommit", interval=0)
            completions.append((time.monotonic() - answered) * 1000)

        waited = transactions_once(target, seconds, after_commit=completed)
    profile = {name: {"per_transaction": len(values) / logged["transactions"],
                      "p50_ms": percentile(sorted(values), 0.5)} for name, values in rtts.items()}
    return {**profile, "transactions": logged["transactions"],
            "completion_p50_ms": percentile(sorted(completions), 0.5),
            "completed_commit_p50_ms": waited["commit_p50_ms"]}


def bench_transactions(zookeeper, workdir: str, sizes: Sizes, log) -> dict:
    from bench.kafka_broker import version

    targets, unavailable = {}, {}
    try:
        targets["rf1"] = SluiceTarget(workdir, sizes).start()
        targets["rf3"] = LocalCluster(workdir, zookeeper, timeout=sizes.step_timeout).start()
        for name, _, kafka_nodes in TXN_TARGETS:
            if kafka_nodes is not None:
                target, unavailable[name] = start_kafka(workdir, sizes, log, kafka_nodes)
                if target is not None:
                    targets[name] = target
                else:
                    log(f"  {name}: Kafka unavailable: {unavailable[name]}")
        order = [name for name, _, _ in TXN_TARGETS if name in targets]
        for name in order:  # the JVMs' code compiled, every coordinator's state topic made
            transactions_once(targets[name], sizes.txn_warmup_seconds)
        runs = {name: [] for name in order}
        round_trips = {name: [] for name in order if name.endswith("rf3")}
        for repeat in range(sizes.txn_repeats):
            for name in (order if repeat % 2 == 0 else order[::-1]):  # load drifts hit every target
                run = transactions_once(targets[name], sizes.txn_seconds)
                runs[name].append(run)
                log(f"  {name}: {run['per_s']:.1f} transactions/s, commit p50 "
                    f"{_fmt(run['commit_p50_ms'])} ms p99 {_fmt(run['commit_p99_ms'])} ms")
                if name in round_trips:
                    trip = replication_round_trip(targets[name], sizes.round_trip_samples)
                    round_trips[name].append(trip)
                    log(f"  {name}: acks=1 p50 {_fmt(trip['acks_1_p50_ms'])} ms, acks=all p50 "
                        f"{_fmt(trip['acks_all_p50_ms'])} ms: one round trip {_fmt(trip['round_trip_ms'])} ms")
        profiles = {}
        for name in order:
            profiles[name] = transaction_profile(targets[name], sizes.profile_seconds)
            log(f"  {name} profile: " + ", ".join(
                f"{request} {profiles[name][request]['per_transaction']:.2f}/transaction p50 "
                f"{_fmt(profiles[name][request]['p50_ms'])} ms" for request in PROFILED_REQUESTS)
                + f"; EndTxn answered -> CompleteCommit p50 {_fmt(profiles[name]['completion_p50_ms'])} ms")
        kafka_jvms = {name: {"rss_mib": targets[name].rss_mib(), "heap": targets[name].heap}
                      for name in order if name.startswith("kafka")}
        median = {name: sorted(r, key=lambda x: x["per_s"])[len(r) // 2] for name, r in runs.items()}
        round_trip = {name: sorted(r, key=lambda x: x["round_trip_ms"])[len(r) // 2]
                      for name, r in round_trips.items()}
        return {"runs": runs, "median": median, "round_trips": round_trips, "round_trip": round_trip,
                "profiles": profiles,
                "ratio": median["rf3"]["per_s"] / median["rf1"]["per_s"], "kafka_version": version(),
                "kafka_unavailable": {k: v for k, v in unavailable.items() if v}, "kafka_jvms": kafka_jvms}
    finally:
        for target in targets.values():
            if isinstance(target, LocalCluster):
                target.close()
            else:
                target.stop()


def transaction_goals(t: dict) -> list[dict]:
    """Issue 33's three goals for the transactions, met or not (None: not measured)."""
    median, trip = t["median"], t["round_trip"]["rf3"]["round_trip_ms"]
    rf1, rf3 = median["rf1"], median["rf3"]
    bound = COMMIT_ROUND_TRIPS * trip + rf1["commit_p99_ms"]
    goals = [{"goal": f"transactions/s RF=3 >= {TXN_RATIO_GOAL}x RF=1", "value": f"{t['ratio']:.2f}x",
              "needs": f">= {TXN_RATIO_GOAL}x", "met": t["ratio"] >= TXN_RATIO_GOAL,
              "detail": f"{rf3['per_s']:.1f} vs {rf1['per_s']:.1f} transactions/s"},
             {"goal": f"commit p99 RF=3 <= {COMMIT_ROUND_TRIPS} replication round trips + RF=1 commit p99",
              "value": f"{_fmt(rf3['commit_p99_ms'])} ms", "needs": f"<= {_fmt(bound)} ms",
              "met": rf3["commit_p99_ms"] <= bound,
              "detail": f"round trip {_fmt(trip)} ms (acks=all p50 minus acks=1 p50, RF=3), "
                        f"RF=1 commit p99 {_fmt(rf1['commit_p99_ms'])} ms"}]
    # Kafka's 3 brokers if they ran; one broker against one if only that ran
    sluice, kafka = ("rf3", "kafka_rf3") if "kafka_rf3" in median else ("rf1", "kafka_rf1")
    if kafka in median:
        ratio = median[sluice]["per_s"] / median[kafka]["per_s"]
        what = (f"RF=3 >= {TXN_KAFKA_GOAL}x Kafka RF=3 (3 brokers)" if sluice == "rf3" else
                f"RF=1 >= {TXN_KAFKA_GOAL}x Kafka RF=1 (one broker against one)")
        goals.append({"goal": f"transactions/s Sluice {what}",
                      "value": f"{ratio:.2f}x", "needs": f">= {TXN_KAFKA_GOAL}x", "met": ratio >= TXN_KAFKA_GOAL,
                      "detail": f"{median[sluice]['per_s']:.1f} vs {median[kafka]['per_s']:.1f} transactions/s"
                                + ("" if sluice == "rf3" else
                                   f" (Kafka's 3 brokers did not run: {t['kafka_unavailable']['kafka_rf3']})")})
    else:
        goals.append({"goal": f"transactions/s Sluice RF=3 >= {TXN_KAFKA_GOAL}x Kafka RF=3 (3 brokers)",
                      "value": "-", "needs": f">= {TXN_KAFKA_GOAL}x", "met": None,
                      "detail": f"Kafka did not run: {t['kafka_unavailable']}"})
    return goals


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
            log(f"2. transactions of {TXN_RECORDS} records: RF=3 on 3 brokers vs RF=1 on one, Sluice and Kafka")
            results["transactions"] = bench_transactions(zookeeper, workdir, sizes, log)
            results["transactions"]["goals"] = transaction_goals(results["transactions"])
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
        median = t["median"]
        md += ["", "## 2. Transactions", "",
               f"One confluent-kafka transactional producer, transactions of {TXN_RECORDS} records of "
               f"{VALUE_SIZE} bytes over {PARTITIONS} partitions, each committed before the next "
               f"begins, for {results['sizes']['txn_seconds']:g} s per run; median of "
               f"{results['sizes']['txn_repeats']} run(s) by transactions/s, the targets taking turns "
               "(every one of them running throughout). Sluice RF=3: three brokers under ZooKeeper "
               "(transaction.state.log.replication.factor 3, min ISR 2, min.insync.replicas 1: the "
               f"defaults); Kafka {t['kafka_version']} RF=3: three KRaft nodes, each broker and "
               "controller, with the same settings (bench.kafka_broker.KafkaCluster); RF=1: one "
               "broker alone, its internal topics RF=1.", "",
               "### Goals", "", "| goal | measured | needs | verdict | detail |", "|---|---:|---|---|---|"]
        md += [f"| {g['goal']} | {g['value']} | {g['needs']} | {_verdict(g)} | {g['detail']} |" for g in t["goals"]]
        md += ["", "| target | transactions/s | records/s | commit p50 ms | commit p99 ms | runs (transactions/s) |",
               "|---|---:|---:|---:|---:|---|"]
        for name, label, _ in TXN_TARGETS:
            if name not in median:
                md.append(f"| {label} | not run: {t['kafka_unavailable'].get(name)} | - | - | - | - |")
                continue
            m = median[name]
            each = ", ".join(f"{r['per_s']:.1f}" for r in t["runs"][name])
            md.append(f"| {label} | {m['per_s']:.1f} | {_fmt(m['per_s'] * TXN_RECORDS)} | "
                      f"{_fmt(m['commit_p50_ms'])} | {_fmt(m['commit_p99_ms'])} | {each} |")
        md += ["", f"RF=3 / RF=1: Sluice {t['ratio']:.2f}x"
               + (f", Kafka {median['kafka_rf3']['per_s'] / median['kafka_rf1']['per_s']:.2f}x"
                  if {"kafka_rf1", "kafka_rf3"} <= set(median) else "")]
        md += ["", "### One replication round trip", "",
               f"{results['sizes']['round_trip_samples']} single records (linger.ms=0) per acks setting to "
               "the one partition of a fresh RF=3 topic, from a producer with acks=1 and one with "
               "acks=all taking turns, each record acknowledged before the next is sent; the round "
               "trip is the acks=all p50 minus the acks=1 p50 (median over the repeats).", "",
               "| cluster | acks=1 p50 ms | acks=all p50 ms | round trip ms |", "|---|---:|---:|---:|"]
        for name, trip in t["round_trip"].items():
            md.append(f"| {TXN_LABELS[name]} | {_fmt(trip['acks_1_p50_ms'])} | "
                      f"{_fmt(trip['acks_all_p50_ms'])} | {_fmt(trip['round_trip_ms'])} |")
        md += ["", "### Where a transaction's time goes", "",
               "Two more runs per target after the measured ones, "
               f"{results['sizes']['profile_seconds']:g} s each. Back to back with librdkafka's protocol "
               "log: each request's count per transaction and its p50 round trip as the client saw it "
               "(AddPartitionsToTxn more than once a transaction: answered CONCURRENT_TRANSACTIONS while "
               "the previous transaction completed, retried by librdkafka 20 ms later; Sluice holds it "
               "up to add.partitions.to.txn.retry.backoff.max.ms instead). Then each commit followed by "
               "DescribeTransactions polled at the coordinator until CompleteCommit: the time from "
               "EndTxn's answer to the markers and CompleteCommit written, and the commit p50 when "
               "every transaction begins after the previous one completed.", "",
               "| target | AddPartitionsToTxn per transaction | AddPartitionsToTxn p50 ms | Produce p50 ms "
               "(6 per transaction) | EndTxn p50 ms | EndTxn answered -> CompleteCommit p50 ms | "
               "commit p50 ms, each after the previous completed |", "|---|---:|---:|---:|---:|---:|---:|"]
        for name, p in t["profiles"].items():
            md.append(f"| {TXN_LABELS[name]} | {p['AddPartitionsToTxn']['per_transaction']:.2f} | "
                      f"{_fmt(p['AddPartitionsToTxn']['p50_ms'])} | {_fmt(p['Produce']['p50_ms'])} | "
                      f"{_fmt(p['EndTxn']['p50_ms'])} | {_fmt(p['completion_p50_ms'])} | "
                      f"{_fmt(p['completed_commit_p50_ms'])} |")
        if t["kafka_jvms"]:
            md += ["", "Kafka's JVMs (heap = -Xms = -Xmx), resident set after the runs: "
                   + "; ".join(f"{TXN_LABELS[name]}: heap {jvm['heap']}, RSS "
                               f"{', '.join(f'{r:.0f}' for r in jvm['rss_mib'])} MiB"
                               for name, jvm in t["kafka_jvms"].items())
                   + f" (machine: {results['machine']['memory_gib']} GiB)."]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "coordinators", __doc__.splitlines()[0], "fewer kills, shorter runs", SECTIONS, FULL,
                   QUICK, run, markdown_report)


if __name__ == "__main__":
    main()
