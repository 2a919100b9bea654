"""Partition reassignment benchmarks (issue 32): how fast a partition's replicas move
between brokers, with and without a replication throttle, what a move costs a producer
writing beside it, and retiring a broker without a partition going unavailable.

Every process runs on 127.0.0.1 and is started by this run: one ZooKeeper server
(sluice.zookeeper) and clusters of four brokers (bench.cluster.LocalCluster: `python -m
broker` processes, each with a generated server.properties, defaults otherwise). The
moves are started as an operator starts them, with `sluice reassign` (its code, run in
this process: sluice.reassign.main, with --output json).

moves (one cluster):
1. A one-partition topic on brokers [0, 1, 2] receives `move_bytes` of 100-byte values at
   acks=all (bench.broker's Python producer: linger.ms=5, batch.size=1 MB, no compression):
   the cluster's RF=3 produce throughput, MB/s of the partition's log (its leader's
   DescribeLogDirs size) over the producer's time. `sluice reassign --execute` then moves
   it to [1, 2, 3], broker 3 copying the whole log: the copy rate is the log's bytes over
   the time from the command's start until it is done (the controller lists no
   reassignment of it and Metadata gives it the new replicas). Goal: >= 0.5x the produce
   throughput.
2. `sluice reassign --execute --throttle RATE` moves it back to [0, 1, 2] (broker 0 copies
   the log again; Kafka's throttles on every broker involved), and `--verify` removes the
   throttles once it is done. Broker 0's replica size (DescribeLogDirs, every
   SAMPLE_SECONDS) gives the rate over each whole window of `window_seconds` from the last
   sample before any bytes were copied (a first fetch's burst counts) to the last still
   short of the whole log (interpolated between samples). Goal: every window within
   +-10% of RATE.
3. A foreground producer (bench.cluster.paced_acks: confluent-kafka, acks=all,
   linger.ms=0, `foreground_rate` 100-byte records/s) writes to a one-partition topic on
   brokers [0, 3, 1] (both ends of both copies), a fresh producer per window, started
   before it (its first acknowledgement awaited). p99 of the latency from produce() to
   the acknowledgement of the records sent in the window: idle for `idle_seconds` before
   the moves and again after them (pooled: the idle p99), and from the start of each move
   until it is done. Goals: p99 during the unthrottled move <= 3x the idle p99, during
   the throttled move <= 1.5x. The same requests sample the cluster in the idle windows
   as during the moves.

decommission (a fresh cluster):
4. A topic of `decommission_partitions` partitions, RF=3, placed by the brokers, receives
   `decommission_bytes`; `sluice reassign --decommission ID --wait` retires a broker
   other than the controller. Every `sample_seconds` each broker's Metadata is read and
   the partitions with no leader, or with a leader its view does not list as live (or
   that has been stopped), are counted: the worst view is the sample's figure. Time to
   done: the command's (moves, preferred leader elections, the check that the broker
   holds nothing). The broker is then stopped (SIGTERM) and `after_stop_samples` more
   samples are taken. Goal: zero unavailable partitions at every sample.

Nothing here asserts speed: the report states what the run measured, each goal met or not.

    python -m bench.reassignment [--quick] [--only moves,decommission] [--out DIR] [--no-write]
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import io
import json
import os
import shutil
import tempfile
import threading
import time

from bench.broker.produce import produce_python
from bench.cluster import CpuProbe, LocalCluster, latency_summary, paced_acks
from bench.common import (MB, VALUE_SIZE, _fmt, _loads, client_versions, section_timer, sectioned_main, value_pool)
from bench.machine import describe_machine, machine_details
from tests.support.polling import wait_for

BROKERS = 4
ORIGINAL, MOVED = (0, 1, 2), (1, 2, 3)    # the moved partition's replicas before and after the first move
FOREGROUND_REPLICAS = (0, 3, 1)            # both ends of both copies
COPY_GOAL = 0.5                            # unthrottled copy rate / RF=3 produce throughput
THROTTLE_TOLERANCE = 0.10                  # every window within this of the throttle
P99_GOALS = {"unthrottled": 3.0, "throttled": 1.5}  # foreground p99 during the move / idle p99
SAMPLE_SECONDS = 0.25                      # between two looks at a move
SECTIONS = ("moves", "decommission")


@dataclasses.dataclass(frozen=True)
class Sizes:
    move_bytes: int               # 1. value bytes produced into the partition moved
    throttle_rate: int            # 2. bytes/s: sluice reassign --execute --throttle
    window_seconds: float         # 2. the throttled copy's rate is measured over windows this long
    foreground_rate: int          # 3. records/s of the foreground producer
    idle_seconds: float           # 3. each idle window (before and after the moves)
    decommission_partitions: int  # 4. the partitions of the cluster whose broker retires
    decommission_bytes: int       # 4. value bytes produced into them
    sample_seconds: float         # 4. between two samples of the partitions' leaders
    after_stop_samples: int       # 4. samples once the retired broker is stopped
    step_timeout: float           # no single step may take longer


FULL = Sizes(move_bytes=1_000 * MB, throttle_rate=10 * MB, window_seconds=10.0, foreground_rate=10_000,
             idle_seconds=20.0, decommission_partitions=200, decommission_bytes=400 * MB, sample_seconds=1.0,
             after_stop_samples=5, step_timeout=900.0)
QUICK = dataclasses.replace(FULL, move_bytes=200 * MB, idle_seconds=10.0, decommission_bytes=40 * MB,
                            step_timeout=300.0)
# What the smoke test runs: every step, in seconds (a throttle low enough for whole windows).
TINY = dataclasses.replace(QUICK, move_bytes=4 * MB, throttle_rate=1 * MB, window_seconds=1.0,
                           foreground_rate=1_000, idle_seconds=1.0, decommission_partitions=20,
                           decommission_bytes=1 * MB, after_stop_samples=2, step_timeout=120.0)


# -- the cluster and the command ------------------------------------------------------------

def create_placed(cluster: LocalCluster, topic: str, replicas: list[tuple[int, ...]], timeout: float) -> None:
    """A topic with its partitions' replicas placed by hand, led and in sync."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 3})
    admin.create_topics([NewTopic(topic, len(replicas), replica_assignment=[list(r) for r in replicas])]
                        )[topic].result(timeout)
    cluster.leaders(topic)


def sluice_reassign(bootstrap: str, *args: str) -> tuple[int, str, str]:
    """`sluice reassign --bootstrap-server BOOTSTRAP ARGS`, run in this process: its exit
    code, stdout and stderr."""
    from sluice.reassign import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--bootstrap-server", bootstrap, *args])
    return code, out.getvalue(), err.getvalue()


def checked(command: tuple[int, str, str], what: str) -> str:
    """The command's stdout; RuntimeError with its stderr when it failed."""
    code, out, err = command
    if code != 0:
        raise RuntimeError(f"{what}: sluice reassign exited with {code}: {err.strip()[-2000:]}")
    return out


def write_plan(path: str, tp: tuple[str, int], replicas: tuple[int, ...]) -> str:
    with open(path, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": tp[0], "partition": tp[1],
                                                 "replicas": list(replicas)}]}, f)
    return path


# -- the foreground producer -----------------------------------------------------------------

class Foreground:
    """bench.cluster's paced acks=all producer in a thread of its own, from `with` until
    its end (then flushed); `latencies(start, end)` of the records sent between two
    moments (time.monotonic_ns)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, timeout: float):
        self.rate, self.timeout = rate, timeout
        self.acks: list[tuple[int, int]] = []
        self.outcome: dict = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(bootstrap, topic), daemon=True,
                                        name="foreground-producer")

    def _run(self, bootstrap: str, topic: str) -> None:
        try:
            self.outcome = paced_acks(bootstrap, topic, self.rate, {}, self.timeout,
                                      lambda sent: self._stop.is_set(), self.acks)
        except Exception as exc:  # noqa: BLE001 (raised again in the measuring thread)
            self.outcome = {"error": exc}

    def __enter__(self) -> "Foreground":
        self._thread.start()
        try:
            wait_for(lambda: self.acks or "error" in self.outcome, self.timeout,
                     "the foreground producer's first acknowledgement")
            self._check()
        except BaseException:
            self._stop.set()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 10)
        self._check()

    def _check(self) -> None:
        if "error" in self.outcome:
            raise RuntimeError(f"the foreground producer failed: {self.outcome['error']}")

    def latencies(self, start_ns: int, end_ns: int) -> list[int]:
        return [latency for sent, latency in self.acks if start_ns <= sent < end_ns]

    def window(self, start_ns: int, end_ns: int) -> dict:
        """The latencies of the window, and what the producer as a whole failed to deliver."""
        seconds = (end_ns - start_ns) / 1e9
        summary = latency_summary(self.latencies(start_ns, end_ns))
        return {"seconds": seconds, "rate": self.rate, "achieved_rate": summary["acked"] / seconds,
                **summary, "delivery_errors": self.outcome.get("delivery_errors"),
                "undelivered": self.outcome.get("undelivered")}


# -- 1-3. moving one partition ------------------------------------------------------------------

def replica_bytes(client, broker_id: int, tp: tuple[str, int]) -> int | None:
    """The size of `broker_id`'s replica of `tp` (DescribeLogDirs), None when it holds none."""
    return client.admin.describe_log_dirs(broker_id, [tp]).get(tp)


def moved(client, tp: tuple[str, int], target: tuple[int, ...]) -> bool:
    """The controller lists no reassignment of `tp` and Metadata gives it `target`."""
    if client.admin.list_partition_reassignments([tp]):
        return False
    topic = client.metadata([tp[0]]).topics.get(tp[0])
    info = None if topic is None or topic.error_code else topic.partitions.get(tp[1])
    return info is not None and tuple(info.replicas) == target


def watch(client, tp: tuple[str, int], target: tuple[int, ...], destination: int, since_ns: int,
          timeout: float, until_s: float | None = None) -> tuple[list[tuple[float, int]], int]:
    """Every SAMPLE_SECONDS from `since_ns`: (seconds since, bytes of `destination`'s
    replica of `tp`), until `tp` is moved to `target` or, given `until_s`, until that many
    seconds have passed. The samples, and when the watch ended (ns)."""
    samples = []
    for tick in range(int(timeout / SAMPLE_SECONDS) + 1):
        size = replica_bytes(client, destination, tp) or 0
        done = moved(client, tp, target)
        now = time.monotonic_ns()
        elapsed = (now - since_ns) / 1e9
        samples.append((elapsed, size))
        if (elapsed >= until_s) if until_s is not None else done:
            return samples, now
        pause = since_ns / 1e9 + (tick + 1) * SAMPLE_SECONDS - time.monotonic_ns() / 1e9
        if pause > 0:
            time.sleep(pause)
    raise TimeoutError(f"{tp[0]}-{tp[1]} not moved to {list(target)} within {timeout:g} s")


def interpolated(samples: list[tuple[float, int]], t: float) -> float:
    """The bytes at `t` seconds, linear between the samples around it."""
    for (t0, b0), (t1, b1) in zip(samples, samples[1:]):
        if t0 <= t <= t1:
            return b0 if t1 == t0 else b0 + (b1 - b0) * (t - t0) / (t1 - t0)
    raise ValueError(f"{t} s is outside the samples")


def window_rates(samples: list[tuple[float, int]], whole: int, window: float) -> list[float]:
    """Bytes/s copied over each whole window of `window` s, from the last sample before any
    bytes were on the new replica (the copy's first fetch may take a burst: the throttle
    allows it, and it counts) to the last still short of `whole`."""
    copying = [t for t, size in samples if 0 < size < whole]
    if not copying:
        return []
    start = max((t for t, size in samples if size == 0 and t < copying[0]), default=copying[0])
    end = copying[-1]
    return [(interpolated(samples, start + (k + 1) * window) - interpolated(samples, start + k * window)) / window
            for k in range(int((end - start) // window))]


def current_replicas(client, tp: tuple[str, int]) -> tuple[int, ...]:
    return tuple(client.metadata([tp[0]]).topics[tp[0]].partitions[tp[1]].replicas)


def idle_window(cluster: LocalCluster, client, tp: tuple[str, int], foreground: str, sizes: Sizes) -> dict:
    """The foreground producer alone, the partition watched as during a move."""
    replicas = current_replicas(client, tp)
    with Foreground(cluster.bootstrap, foreground, sizes.foreground_rate, sizes.step_timeout) as fg:
        start = time.monotonic_ns()
        _, end = watch(client, tp, replicas, replicas[0], start, sizes.step_timeout, until_s=sizes.idle_seconds)
    return {**fg.window(start, end), "latencies": fg.latencies(start, end)}


def move_once(cluster: LocalCluster, client, tp: tuple[str, int], target: tuple[int, ...], foreground: str,
              sizes: Sizes, workdir: str, throttle: int | None, log) -> dict:
    """`tp` moved to `target` with sluice reassign (throttled when `throttle`), the
    foreground producer writing beside it; the new replica's size sampled throughout."""
    current = current_replicas(client, tp)
    (destination,) = set(target) - set(current)
    wait_for(lambda: replica_bytes(client, destination, tp) is None, sizes.step_timeout,
             f"broker {destination} to hold no replica of {tp[0]}-{tp[1]} (deleted by the move before)")
    leader = cluster.leaders(tp[0])[tp[1]]
    whole = replica_bytes(client, leader, tp)
    plan = write_plan(os.path.join(workdir, f"plan-{'-'.join(map(str, target))}.json"), tp, target)
    throttling = ("--throttle", str(throttle)) if throttle else ()
    probe = CpuProbe(cluster.pids)
    with Foreground(cluster.bootstrap, foreground, sizes.foreground_rate, sizes.step_timeout) as fg:
        submitted = time.monotonic_ns()
        execute = json.loads(checked(sluice_reassign(cluster.bootstrap, "--output", "json", "--execute",
                                                     "--reassignment-json-file", plan, *throttling),
                                     f"move to {list(target)}"))
        samples, done = watch(client, tp, target, destination, submitted, sizes.step_timeout)
    samples.insert(0, (0.0, 0))  # at the command's start: no replica there (waited for above)
    cpu = probe.stop()
    seconds = (done - submitted) / 1e9
    result = {"from": list(current), "to": list(target), "leader": leader,
              "destination": destination, "throttle": throttle, "bytes": whole, "seconds": seconds,
              "mb_per_s": whole / seconds / MB, "started": execute["started"],
              "first_bytes_s": next((t for t, size in samples if size > 0), None),
              "copied_s": next((t for t, size in samples if size >= whole), None),
              "window_rates": window_rates(samples, whole, sizes.window_seconds),
              "samples": samples, "broker_cpu_s_each": cpu["broker_cpu_s_each"],
              "foreground": fg.window(submitted, done)}
    if throttle:
        verified = sluice_reassign(cluster.bootstrap, "--output", "json", "--verify",
                                   "--reassignment-json-file", plan)
        result["verify_exit"] = verified[0]
    log(f"  {'throttled' if throttle else 'unthrottled'} move of {whole / MB:,.1f} MB to broker {destination}: "
        f"{seconds:.1f} s, {result['mb_per_s']:.1f} MB/s"
        + (f"; windows of {sizes.window_seconds:g} s: "
           + ", ".join(f"{r / MB:.2f}" for r in result["window_rates"]) + " MB/s" if throttle else "")
        + f"; foreground p99 {_fmt(result['foreground']['p99_ms'])} ms")
    return result


def bench_moves(zookeeper, workdir: str, sizes: Sizes, pool, log) -> dict:
    from sluice_client import Client

    cluster = LocalCluster(workdir, zookeeper, brokers=BROKERS, timeout=sizes.step_timeout).start()
    try:
        tp, foreground = ("moved", 0), "foreground"
        create_placed(cluster, tp[0], [ORIGINAL], sizes.step_timeout)
        create_placed(cluster, foreground, [FOREGROUND_REPLICAS], sizes.step_timeout)
        records = sizes.move_bytes // VALUE_SIZE
        log(f"  producing {records:,} records into {tp[0]} (RF=3, acks=all)")
        probe = CpuProbe(cluster.pids)
        produce_python(cluster.bootstrap, tp[0], records, pool, "all", "none", sizes.step_timeout)
        cpu = probe.stop()
        leader = cluster.leaders(tp[0])[tp[1]]
        with Client(cluster.bootstrap, call_timeout=sizes.step_timeout) as client:
            log_bytes = replica_bytes(client, leader, tp)
            produce = {"records": records, "seconds": cpu["seconds"], "log_bytes": log_bytes,
                       "mb_per_s": log_bytes / cpu["seconds"] / MB,
                       "value_mb_per_s": records * VALUE_SIZE / cpu["seconds"] / MB,
                       "broker_cpu_s_each": cpu["broker_cpu_s_each"]}
            log(f"  produce: {produce['mb_per_s']:.1f} MB/s of log ({produce['value_mb_per_s']:.1f} MB/s of "
                f"values) in {produce['seconds']:.1f} s")
            idle_before = idle_window(cluster, client, tp, foreground, sizes)
            log(f"  idle: foreground p99 {_fmt(idle_before['p99_ms'])} ms")
            unthrottled = move_once(cluster, client, tp, MOVED, foreground, sizes, workdir, None, log)
            throttled = move_once(cluster, client, tp, ORIGINAL, foreground, sizes, workdir, sizes.throttle_rate,
                                  log)
            idle_after = idle_window(cluster, client, tp, foreground, sizes)
            log(f"  idle again: foreground p99 {_fmt(idle_after['p99_ms'])} ms")
    finally:
        cluster.close()
        shutil.rmtree(cluster.directory, ignore_errors=True)  # gigabytes
    pooled = latency_summary(idle_before.pop("latencies") + idle_after.pop("latencies"))
    return {"topic": tp[0], "foreground_topic": foreground, "foreground_replicas": list(FOREGROUND_REPLICAS),
            "produce": produce, "idle": {"before": idle_before, "after": idle_after, "pooled": pooled},
            "unthrottled": unthrottled, "throttled": throttled}


# -- 4. retiring a broker ------------------------------------------------------------------------

class LeaderSampler:
    """Every `interval` s in a thread of its own: each broker's Metadata, the partitions
    with no leader or a leader not live in that view (or stopped), the worst view kept,
    and how many partitions the controller's view still places on `retiring`."""

    def __init__(self, cluster: LocalCluster, retiring: int, controller: int, interval: float, timeout: float):
        self.cluster, self.retiring, self.controller = cluster, retiring, controller
        self.brokers = sorted(cluster.processes)
        self.interval, self.timeout = interval, timeout
        self.stopped: frozenset[int] = frozenset()  # stopped on purpose: not live, whatever a view says
        self.samples: list[dict] = []
        self.since = time.monotonic()
        self._end = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="leader-sampler")

    def sample(self) -> dict:
        at = time.monotonic() - self.since
        unavailable, holding, answered = [], None, 0
        for broker_id in self.brokers:
            metadata = self.cluster.metadata(broker_id, None)
            if metadata is None:
                continue
            answered += 1
            live = set(metadata.brokers) - self.stopped
            partitions = [info for topic in metadata.topics.values() if not topic.error_code
                          for info in topic.partitions.values()]
            unavailable.append(sum(1 for info in partitions if info.leader_id not in live))
            if broker_id == self.controller:
                holding = sum(1 for info in partitions if self.retiring in info.replicas)
        return {"at_s": at, "views": answered, "unavailable": max(unavailable, default=None),
                "holding": holding}

    def _run(self) -> None:
        for tick in range(int(3 * self.timeout / self.interval) + 1):
            self.samples.append(self.sample())
            if self._end.wait(max(0.0, self.since + (tick + 1) * self.interval - time.monotonic())):
                return

    def __enter__(self) -> "LeaderSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._end.set()
        self._thread.join(self.timeout)


def bench_decommission(zookeeper, workdir: str, sizes: Sizes, pool, log) -> dict:
    from sluice_client import Client

    cluster = LocalCluster(workdir, zookeeper, brokers=BROKERS, timeout=sizes.step_timeout).start()
    try:
        topic = "spread"
        cluster.create_topics({topic: sizes.decommission_partitions})
        records = sizes.decommission_bytes // VALUE_SIZE
        # each record to a partition of its own choosing (not librdkafka's sticky partitioning,
        # which gives a short run's records to a few partitions)
        produce_python(cluster.bootstrap, topic, records, pool, "all", "none", sizes.step_timeout,
                       {"sticky.partitioning.linger.ms": 0})
        cluster.leaders(topic)
        controller = cluster.controller_id()
        retiring = max(b for b in cluster.processes if b != controller)
        with Client(cluster.bootstrap, call_timeout=sizes.step_timeout) as client:
            held = client.admin.describe_log_dirs(retiring)
        led = sum(1 for leader in cluster.leaders(topic).values() if leader == retiring)
        log(f"  retiring broker {retiring} (controller: {controller}): {len(held)} replicas, "
            f"{sum(held.values()) / MB:,.1f} MB, leading {led} partitions")
        with LeaderSampler(cluster, retiring, controller, sizes.sample_seconds, sizes.step_timeout) as sampler:
            started = time.monotonic()
            code, out, err = sluice_reassign(cluster.bootstrap, "--output", "json", "--decommission", str(retiring),
                                             "--wait", "--wait-timeout", str(sizes.step_timeout))
            seconds = time.monotonic() - started
            stop_exit = cluster.processes[retiring].stop(sizes.step_timeout)  # SIGTERM, until it exits
            sampler.stopped = frozenset({retiring})
            stopped = time.monotonic()
            wait_for(lambda: sum(1 for s in sampler.samples if s["at_s"] > stopped - sampler.since)
                     >= sizes.after_stop_samples,
                     sizes.step_timeout, f"{sizes.after_stop_samples} samples after broker {retiring} stopped")
    finally:
        cluster.close()
        shutil.rmtree(cluster.directory, ignore_errors=True)
    document = json.loads(out) if out.strip().startswith("{") else {}
    samples = [{**s, "at_s": s["at_s"] - (started - sampler.since)} for s in sampler.samples]  # from the start
    counted = [s["unavailable"] for s in samples if s["unavailable"] is not None]
    election = document.get("election") or {}
    result = {"brokers": BROKERS, "partitions": sizes.decommission_partitions, "records": records,
              "retiring": retiring, "controller": controller, "replicas_on_retiring": len(held),
              "bytes_on_retiring": sum(held.values()), "led_by_retiring": led,
              "seconds": seconds, "exit_code": code, "error": err.strip()[-2000:] if code else None,
              "can_stop": document.get("can_stop"), "moved": len(document.get("started", ())),
              "failed": document.get("failed"), "pending": document.get("pending"),
              "elected": len(election.get("elected", ())), "election_failed": election.get("failed"),
              "drained_s": next((s["at_s"] for s in samples if s["at_s"] >= 0 and s["holding"] == 0), None),
              "stopped_s": stopped - started, "stop_exit_status": stop_exit,
              "samples": samples, "max_unavailable": max(counted, default=None),
              "samples_with_unavailable": sum(1 for n in counted if n > 0),
              "samples_unanswered": sum(1 for s in samples if s["views"] == 0)}
    log(f"  decommission: exit {code} in {seconds:.1f} s, {result['moved']} partitions moved, "
        f"{result['elected']} leaders elected, can stop: {result['can_stop']}; unavailable partitions at "
        f"{len(samples)} samples: at most {result['max_unavailable']}")
    return result


# -- goals ---------------------------------------------------------------------------------------

def evaluate_goals(results: dict) -> list[dict]:
    goals = []
    moves = results.get("moves")
    if moves:
        copy, produce = moves["unthrottled"]["mb_per_s"], moves["produce"]["mb_per_s"]
        goals.append({"goal": f"unthrottled copy rate >= {COPY_GOAL}x the RF=3 acks=all produce throughput",
                      "measured": f"{copy / produce:.2f}x ({copy:.1f} vs {produce:.1f} MB/s)",
                      "needs": f">= {COPY_GOAL}x", "met": copy / produce >= COPY_GOAL})
        throttled = moves["throttled"]
        rates = throttled["window_rates"]
        limit = throttled["throttle"]
        goals.append({"goal": f"throttled copy rate within +-{THROTTLE_TOLERANCE:.0%} of {limit / MB:g} MB/s "
                              f"over every {results['sizes']['window_seconds']:g} s window",
                      "measured": (f"{len(rates)} windows, {min(rates) / MB:.2f} to {max(rates) / MB:.2f} MB/s"
                                   if rates else "no whole window"),
                      "needs": f"{limit * (1 - THROTTLE_TOLERANCE) / MB:g} to "
                               f"{limit * (1 + THROTTLE_TOLERANCE) / MB:g} MB/s",
                      "met": all(abs(r / limit - 1) <= THROTTLE_TOLERANCE for r in rates) if rates else None})
        idle = moves["idle"]["pooled"]["p99_ms"]
        for name, bound in P99_GOALS.items():
            p99 = moves[name]["foreground"]["p99_ms"]
            ratio = p99 / idle if p99 is not None and idle else None
            goals.append({"goal": f"foreground p99 during the {name} move <= {bound:g}x idle p99",
                          "measured": "-" if ratio is None else f"{ratio:.2f}x ({_fmt(p99)} vs {_fmt(idle)} ms)",
                          "needs": f"<= {bound:g}x", "met": None if ratio is None else ratio <= bound})
    decommission = results.get("decommission")
    if decommission:
        d = decommission
        goals.append({"goal": f"decommission of broker {d['retiring']} done, the broker free to stop",
                      "measured": f"{d['seconds']:.1f} s, exit code {d['exit_code']}, can stop: {d['can_stop']}",
                      "needs": "exit code 0, can stop", "met": d["exit_code"] == 0 and d["can_stop"] is True})
        goals.append({"goal": "zero unavailable partitions at every sample of the decommission",
                      "measured": f"at most {d['max_unavailable']} at {len(d['samples'])} samples",
                      "needs": "0 at every sample",
                      "met": None if d["max_unavailable"] is None else d["max_unavailable"] == 0})
    return goals


# -- the run -------------------------------------------------------------------------------------

def run(sizes: Sizes, mode: str, sections=SECTIONS, log=print) -> dict:
    """Every benchmark in `sections`; returns the results (nothing written)."""
    from sluice.zookeeper import ZooKeeperServer

    pool = value_pool()
    results = {"mode": mode, "date": datetime.date.today().isoformat(),
               "started": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": machine_details(), "clients": client_versions(),
               "load_average_before": os.getloadavg(), "sizes": dataclasses.asdict(sizes)}
    timed = section_timer(results)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="sluice-bench-reassignment-")
    zookeeper = ZooKeeperServer(os.path.join(workdir, "zookeeper"))
    try:
        zookeeper.start()
        if "moves" in sections:
            log(f"1-3. moving a partition of {sizes.move_bytes / MB:,.0f} MB of values, unthrottled and "
                f"throttled, a producer at {sizes.foreground_rate:,} rec/s beside it")
            results["moves"] = timed("moves", bench_moves, zookeeper, workdir, sizes, pool, log)
        if "decommission" in sections:
            log(f"4. retiring one of {BROKERS} brokers holding {sizes.decommission_partitions} partitions")
            results["decommission"] = timed("decommission", bench_decommission, zookeeper, workdir, sizes, pool,
                                            log)
    finally:
        zookeeper.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    results["seconds"] = time.perf_counter() - started
    results["load_average_after"] = os.getloadavg()
    results["goals"] = evaluate_goals(results)
    return results


# -- the report ----------------------------------------------------------------------------------

def _verdict(met) -> str:
    return "not measured" if met is None else "met" if met else "NOT met"


def _latency_row(label: str, w: dict, idle_p99: float | None) -> str:
    ratio = f"{w['p99_ms'] / idle_p99:.2f}x" if w["p99_ms"] is not None and idle_p99 else "-"
    return (f"| {label} | {w['seconds']:.1f} | {w['acked']:,} ({w['achieved_rate']:,.0f}/s) | {_fmt(w['p50_ms'])} | "
            f"{_fmt(w['p99_ms'])} | {_fmt(w['max_ms'])} | {ratio} | {w['delivery_errors']} |")


def markdown_report(results: dict) -> str:
    sizes = results["sizes"]
    md = [f"# Partition reassignment benchmarks ({results['mode']})", "",
          f"- date: {results['date']}",
          f"- machine: {describe_machine()}",
          f"- clients: confluent-kafka {results['clients']['confluent_kafka']} "
          f"(librdkafka {results['clients']['librdkafka']}), Sluice's client and `sluice reassign` (sluice)",
          f"- run time: {results['seconds']:.0f} s ({results['section_seconds']}); load average (1/5/15 min) "
          f"before {_loads(results, 'before')}, after {_loads(results, 'after')} on "
          f"{results['machine']['cores']} cores (other work on the machine shows here)",
          f"- sizes: {json.dumps(sizes)}",
          f"- clusters: {BROKERS} `python -m broker` processes each (bench.cluster.LocalCluster: generated "
          "server.properties, broker.id and zookeeper.connect under a chroot of their own, defaults "
          "otherwise), one ZooKeeper server (sluice.zookeeper) for the run; every process on 127.0.0.1, "
          "data on local disk, all sharing the machine's cores with the clients. Moves started with "
          "`sluice reassign` (its code, in the benchmark's process). MB are 10^6 bytes.", "",
          "## Goals", "", "| goal | measured | needs | verdict |", "|---|---|---|---|"]
    md += [f"| {g['goal']} | {g['measured']} | {g['needs']} | {_verdict(g['met'])} |" for g in results["goals"]]
    moves = results.get("moves")
    if moves:
        p, u, t = moves["produce"], moves["unthrottled"], moves["throttled"]
        md += ["", "## 1. Moving a partition, unthrottled", "",
               f"One partition, replicas {list(ORIGINAL)}, filled with {p['records']:,} records of {VALUE_SIZE}-byte "
               "values by bench.broker's Python producer (acks=all, linger.ms=5, batch.size=1 MB, no "
               "compression): that is the cluster's RF=3 produce throughput. It is then moved with `sluice "
               f"reassign --execute` to {u['to']}; the copy rate is the log's bytes over the time from the "
               "command's start until the controller lists no reassignment of the partition and Metadata gives "
               "it the new replicas. The new replica's size is sampled (DescribeLogDirs) every "
               f"{SAMPLE_SECONDS:g} s: when its first bytes showed and when it held the whole log.", "",
               "| measure | value |", "|---|---:|",
               f"| partition log (leader's DescribeLogDirs size) | {p['log_bytes'] / MB:,.1f} MB |",
               f"| RF=3 acks=all produce | {p['seconds']:.1f} s: **{p['mb_per_s']:.1f} MB/s** of log, "
               f"{p['value_mb_per_s']:.1f} MB/s of values |",
               f"| unthrottled move {u['from']} -> {u['to']} (leader {u['leader']}, new replica on broker "
               f"{u['destination']}) | {u['seconds']:.1f} s: **{u['mb_per_s']:.1f} MB/s** |",
               f"| first bytes on the new replica, whole log on it | {_fmt(u['first_bytes_s'])} s, "
               f"{_fmt(u['copied_s'])} s after the command's start |",
               f"| copy rate / produce throughput | {u['mb_per_s'] / p['mb_per_s']:.2f}x |"]
        md += ["", "## 2. Moving it back, throttled", "",
               f"`sluice reassign --execute --throttle {t['throttle']}` to {t['to']} (new replica on broker "
               f"{t['destination']}), then `--verify` (exit code {t.get('verify_exit')}), which removes the "
               f"throttles. Rate over each whole window of {sizes['window_seconds']:g} s from the last sample before "
               "any bytes were on the new replica (so a burst of the first fetch counts) to the last still short "
               "of the whole log (interpolated between samples).", "",
               "| measure | value |", "|---|---:|",
               f"| throttle | {t['throttle'] / MB:g} MB/s |",
               f"| move, command start to done | {t['seconds']:.1f} s: {t['mb_per_s']:.2f} MB/s |",
               f"| first bytes on the new replica, whole log on it | {_fmt(t['first_bytes_s'])} s, "
               f"{_fmt(t['copied_s'])} s |",
               "| each window, MB/s | " + (", ".join(f"{r / MB:.2f}" for r in t["window_rates"]) or "none") + " |",
               "| each window / the throttle | "
               + (", ".join(f"{r / t['throttle']:.3f}" for r in t["window_rates"]) or "-") + " |"]
        idle_p99 = moves["idle"]["pooled"]["p99_ms"]
        md += ["", "## 3. A producer beside the moves", "",
               f"bench.cluster's paced producer (confluent-kafka, acks=all, linger.ms=0, not idempotent), "
               f"{sizes['foreground_rate']:,} records of {VALUE_SIZE} bytes a second to a one-partition topic on "
               f"brokers {moves['foreground_replicas']} (leader {moves['foreground_replicas'][0]}), a fresh producer "
               "per window whose first acknowledgement is awaited before the window starts. Latency: produce() "
               "to the acknowledgement, of the records sent within the window. The idle p99 is that of both "
               "idle windows' records together.", "",
               "| window | s | records acknowledged (rate) | p50 ms | p99 ms | max ms | p99 / idle p99 | "
               "delivery errors |", "|---|---:|---:|---:|---:|---:|---:|---:|",
               _latency_row("idle, before the moves", moves["idle"]["before"], idle_p99),
               _latency_row("unthrottled move", u["foreground"], idle_p99),
               _latency_row("throttled move", t["foreground"], idle_p99),
               _latency_row("idle, after the moves", moves["idle"]["after"], idle_p99),
               f"| idle, both windows | | {moves['idle']['pooled']['acked']:,} | "
               f"{_fmt(moves['idle']['pooled']['p50_ms'])} | {_fmt(idle_p99)} | "
               f"{_fmt(moves['idle']['pooled']['max_ms'])} | | |",
               "", "Broker CPU seconds (user + system, /proc) over each move:", "",
               "| move | " + " | ".join(f"broker {b}" for b in sorted(u["broker_cpu_s_each"])) + " |",
               "|---|" + "---:|" * len(u["broker_cpu_s_each"])]
        for name, m in (("produce (fill)", p), ("unthrottled", u), ("throttled", t)):
            md.append(f"| {name} | " + " | ".join(f"{m['broker_cpu_s_each'][b]:.1f}"
                                                   for b in sorted(m["broker_cpu_s_each"])) + " |")
    d = results.get("decommission")
    if d:
        md += ["", "## 4. Retiring a broker", "",
               f"A fresh cluster; a topic of {d['partitions']} partitions, RF=3, placed by the brokers, filled with "
               f"{d['records']:,} records of {VALUE_SIZE}-byte values at acks=all. `sluice reassign --decommission "
               f"{d['retiring']} --wait` (broker {d['controller']} is the controller). Every "
               f"{sizes['sample_seconds']:g} s each broker's Metadata is read; a partition is unavailable in a "
               "view when it has no leader or its leader is not live there (or was stopped); the sample's "
               "figure is the worst view. After the command, the broker is stopped (SIGTERM) and "
               f"{sizes['after_stop_samples']} more samples are taken.", "",
               "| measure | value |", "|---|---:|",
               f"| replicas on broker {d['retiring']} | {d['replicas_on_retiring']} "
               f"({d['bytes_on_retiring'] / MB:,.1f} MB), leader of {d['led_by_retiring']} |",
               f"| **time to done** (the command: moves, elections, the check) | **{d['seconds']:.1f} s**, exit code "
               f"{d['exit_code']} |",
               f"| partitions moved, leaders elected | {d['moved']}, {d['elected']} |",
               f"| nothing left on it (controller's view) | {_fmt(d['drained_s'])} s |",
               f"| can be stopped (the command says) | {d['can_stop']} |",
               f"| stopped (SIGTERM, exited) at, exit status | {d['stopped_s']:.1f} s, {d['stop_exit_status']} |",
               f"| samples | {len(d['samples'])} ({d['samples_unanswered']} with no view answering) |",
               f"| **unavailable partitions, most at a sample** | **{d['max_unavailable']}** "
               f"({d['samples_with_unavailable']} samples with any) |"]
        if d["error"]:
            md += ["", f"The command failed: {d['error']}"]
    md += ["", "## Notes", "",
           "- Figures measured while other work ran on the machine are not comparable between runs; the load "
           "averages above say how busy it was.",
           "- Every sample is in the JSON (the new replica's size during each move, the decommission's views)."]
    return "\n".join(md) + "\n"


def main(argv=None) -> None:
    sectioned_main(argv, "reassignment", __doc__.splitlines()[0], "a partition of 200 MB, smaller windows",
                   SECTIONS, FULL, QUICK, run, markdown_report, prog="python -m bench.reassignment")


if __name__ == "__main__":
    main()
