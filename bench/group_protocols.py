"""Rebalance time of the two group protocols (issue 36): a group of 10 confluent-kafka
consumers on a topic of 100 partitions, one of them leaving (close()), timed from the
close until the 9 left hold every partition between them, each once (their own
assignment(), polled every 50 ms from each consumer's thread). Side by side on the same
broker: the consumer group protocol of KIP-848 (`group.protocol=consumer`, the broker's
`uniform` assignor) and the classic protocol with the cooperative-sticky assignor; on a
Sluice single node and on Apache Kafka 4.4 (one KRaft node, bench.kafka_broker), both
told a heartbeat interval of 500 ms (KIP-848: the broker's
group.consumer.heartbeat.interval.ms; classic: the consumers' heartbeat.interval.ms).
The median of the runs. Goal: Sluice's KIP-848 rebalance <= its classic one.

    python -m bench.group_protocols [--quick] [--only sluice,kafka] [--out DIR] [--no-write]
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid

from bench.common import SluiceTarget, client_versions, sectioned_main
from bench.machine import describe_machine, machine_details
from tests.support.polling import wait_for

MEMBERS = 10
PARTITIONS = 100
HEARTBEAT_MS = 500
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.consumer.heartbeat.interval.ms": str(HEARTBEAT_MS),
                   "group.consumer.min.heartbeat.interval.ms": str(HEARTBEAT_MS)}
PROTOCOLS = {
    "consumer": {"group.protocol": "consumer"},
    "classic": {"partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": HEARTBEAT_MS},
}
SECTIONS = ("sluice", "kafka")


@dataclasses.dataclass
class Sizes:
    repeats: int          # leaves measured per protocol and broker, each with a fresh group
    step_timeout: float   # seconds: no single step may take longer


FULL = Sizes(repeats=5, step_timeout=120.0)
QUICK = Sizes(repeats=2, step_timeout=120.0)


class Member(threading.Thread):
    """One consumer polling from its own thread; `assigned` is its assignment() as of its
    last poll."""

    def __init__(self, bootstrap: str, group: str, topic: str, settings: dict):
        super().__init__(daemon=True)
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3,
                                  "enable.auto.commit": False, **settings})
        self.consumer.subscribe([topic])
        self.assigned: frozenset[int] = frozenset()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.05)
            self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
        self.consumer.close()

    def leave(self) -> None:
        self.stopping.set()
        self.join(60)


def _covered(members: list[Member]) -> bool:
    """Every partition held by exactly one of `members`, each holding some."""
    held = [m.assigned for m in members]
    return all(held) and sum(map(len, held)) == PARTITIONS and len(frozenset().union(*held)) == PARTITIONS


def leave_once(target, protocol: str, sizes: Sizes) -> float:
    """Seconds from one member's close() until the rest hold every partition."""
    topic = f"rebalance-{uuid.uuid4().hex[:6]}"
    target.create_topics({topic: PARTITIONS})
    members = [Member(target.bootstrap, f"{topic}-g", topic, PROTOCOLS[protocol]) for _ in range(MEMBERS)]
    try:
        for member in members:
            member.start()
        wait_for(lambda: _covered(members), sizes.step_timeout, f"{MEMBERS} {protocol} members to settle",
                 interval=0.02)
        leaving, staying = members[0], members[1:]
        started = time.monotonic()
        leaving.leave()
        return wait_for(lambda: _covered(staying) and time.monotonic() - started, sizes.step_timeout,
                        f"{MEMBERS - 1} {protocol} members to take over", interval=0.02)
    finally:
        for member in members:
            member.leave()
        target.delete_topic(topic)


def bench_target(target, sizes: Sizes, log) -> dict:
    runs = {protocol: [] for protocol in PROTOCOLS}
    for i in range(sizes.repeats):
        for protocol in PROTOCOLS:  # taking turns
            seconds = leave_once(target, protocol, sizes)
            runs[protocol].append(seconds)
            log(f"  {target.name} run {i + 1}/{sizes.repeats}: {protocol} {seconds:.2f} s")
    return {protocol: {"median_s": statistics.median(values), "all_s": values} for protocol, values in runs.items()}


def _kafka(workdir: str, sizes: Sizes, log):
    """A started KafkaTarget told the same heartbeat interval, or (None, why not)."""
    from bench.kafka_broker import KafkaBrokerProcess, KafkaTarget, KafkaUnavailable, version

    try:
        target = KafkaTarget(workdir, sizes, process=KafkaBrokerProcess(workdir, config=BROKER_SETTINGS))
        target.start()
    except (KafkaUnavailable, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    log(f"  Kafka {version()} started")
    return target, None


def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print) -> dict:
    results = {"mode": mode, "date": datetime.date.today().isoformat(), "machine": machine_details(),
               "clients": client_versions(), "load_average_before": os.getloadavg(),
               "sizes": dataclasses.asdict(sizes)}
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-group-protocols-")
    try:
        if "sluice" in sections:
            log(f"Sluice: {MEMBERS} members, {PARTITIONS} partitions, one leaves")
            target = SluiceTarget(workdir, sizes, BROKER_SETTINGS).start()
            try:
                results["sluice"] = bench_target(target, sizes, log)
            finally:
                target.stop()
        if "kafka" in sections:
            log("Apache Kafka: the same")
            target, unavailable = _kafka(workdir, sizes, log)
            if target is None:
                results["kafka_unavailable"] = unavailable
            else:
                try:
                    results["kafka"] = bench_target(target, sizes, log)
                finally:
                    target.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if "sluice" in results:
        ours = results["sluice"]
        results["goal"] = {"goal": "Sluice KIP-848 rebalance <= Sluice classic cooperative-sticky",
                           "value": ours["consumer"]["median_s"], "needs": ours["classic"]["median_s"],
                           "met": ours["consumer"]["median_s"] <= ours["classic"]["median_s"]}
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    return results


def markdown_report(results: dict) -> str:
    md = [f"# Rebalance time of the group protocols ({results['mode']})", "",
          f"- date: {results['date']}", f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']})",
          f"- run time: {results['seconds']:.0f} s; load average before "
          f"{'/'.join(f'{v:.1f}' for v in results['load_average_before'])}, after "
          f"{'/'.join(f'{v:.1f}' for v in results['load_average_after'])}", "",
          f"{MEMBERS} confluent-kafka consumers in one group on a topic of {PARTITIONS} partitions; one "
          "closes; the time until the others hold every partition, each once (median of "
          f"{results['sizes']['repeats']} runs, a fresh group each). Heartbeat interval {HEARTBEAT_MS} ms "
          "for both protocols.", "",
          "| broker | KIP-848 (group.protocol=consumer) s | classic, cooperative-sticky s | runs (KIP-848 / classic) |",
          "|---|---:|---:|---|"]
    for key, label in (("sluice", "Sluice"), ("kafka", "Apache Kafka")):
        if key in results:
            r = results[key]
            runs = " / ".join(", ".join(f"{v:.2f}" for v in r[p]["all_s"]) for p in PROTOCOLS)
            md.append(f"| {label} | {r['consumer']['median_s']:.2f} | {r['classic']['median_s']:.2f} | {runs} |")
    if "kafka_unavailable" in results:
        md.append(f"\nApache Kafka did not run: {results['kafka_unavailable']}")
    if "goal" in results:
        g = results["goal"]
        md += ["", f"Goal: {g['goal']}: {g['value']:.2f} s against {g['needs']:.2f} s: "
                   f"{'met' if g['met'] else 'not met'}."]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "group-protocols", "Rebalance time: KIP-848 against the classic protocol",
                   "two runs per protocol and broker", SECTIONS, FULL, QUICK, run, markdown_report,
                   prog="python -m bench.group_protocols")


if __name__ == "__main__":
    main(sys.argv[1:])
