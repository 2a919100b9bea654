"""What every benchmark shares: the sizes of a run, the record values, the /proc probes
of a broker process, the brokers as targets (Sluice, librdkafka's mock cluster, Apache
Kafka), the clients' common settings, and writing a run's results.

bench.broker's families (bench/broker/), bench.cluster, bench.coordinators, bench.compare,
bench.durability, bench.connections and bench.spark_write build on it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import resource
import shutil
import subprocess
import time
import uuid

VALUE_SIZE = 100
MB = 1_000_000
MIB = 1 << 20
CLK_TCK = os.sysconf("SC_CLK_TCK")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "bench", "results")
KCAT = shutil.which("kcat") or "/usr/bin/kcat"
BROKERS = ("sluice", "kafka", "mock")  # the order of every table
MOCK_PARTITION_BYTES = 5 * MIB  # what the mock cluster keeps per partition


@dataclasses.dataclass
class Sizes:
    records: int                 # per produce configuration
    produce_repeats: int         # runs per configuration and broker (alternating); median kept
    consume_partitions: int
    consume_per_partition: int   # records; x ~110 bytes stays below the mock's 5 MB
    consume_repeats: int         # cold starts per client and broker (alternating); median kept
    e2e_rate: int
    e2e_seconds: float
    e2e_warmup_seconds: float
    log_bytes: int               # the large partition of the log-scaling benchmark
    log_segment_bytes: int
    fetch_samples: int           # per position (head, tail)
    startup_repeats: int         # clean restarts per log (fastest kept)
    many_partitions: int
    many_partitions_per_topic: int
    many_records_per_partition: int
    metadata_samples: int
    step_timeout: float          # seconds: no single step may take longer
    cold_starts: int = 5         # fresh brokers started per broker (fastest kept)
    idle_seconds: float = 5.0    # after the first answer, before reading the idle RSS


FULL = Sizes(records=5_000_000, produce_repeats=3, consume_partitions=8, consume_per_partition=40_000,
             consume_repeats=7,
             e2e_rate=10_000, e2e_seconds=15.0, e2e_warmup_seconds=2.0,
             log_bytes=3 * 1024 * MIB, log_segment_bytes=256 * MIB, fetch_samples=500,
             startup_repeats=9, many_partitions=10_000, many_partitions_per_topic=100,
             many_records_per_partition=10, metadata_samples=5, step_timeout=900.0)
QUICK = dataclasses.replace(FULL, records=200_000, produce_repeats=3, consume_per_partition=15_000,
                            consume_repeats=5,
                            e2e_seconds=2.0, e2e_warmup_seconds=0.5, log_bytes=200 * MIB,
                            log_segment_bytes=64 * MIB, fetch_samples=200, startup_repeats=5,
                            many_partitions=1_000, metadata_samples=5, step_timeout=300.0,
                            cold_starts=3, idle_seconds=2.0)
# What the smoke test runs: every code path, a few seconds each.
TINY = dataclasses.replace(QUICK, records=3_000, produce_repeats=1, consume_partitions=4, consume_per_partition=500,
                           consume_repeats=1,
                           e2e_rate=1_000, e2e_seconds=1.0, e2e_warmup_seconds=0.3,
                           log_bytes=3 * MIB, log_segment_bytes=1 * MIB, fetch_samples=5,
                           startup_repeats=1, many_partitions=20, many_partitions_per_topic=10,
                           many_records_per_partition=2, metadata_samples=2, step_timeout=120.0,
                           cold_starts=1, idle_seconds=0.5)


# -- values ------------------------------------------------------------------------------

_WORDS = ("user session page view click cart order item price search query result "
          "login logout error retry timeout region eu us ap mobile desktop tablet "
          "chrome firefox safari referrer campaign banner checkout payment card "
          "shipped delivered returned status ok fail latency bytes count").split()


def value_pool(size: int = 1024, seed: int = 7) -> list[bytes]:
    """`size` distinct printable 100-byte values (no newline): log-line-like text, so
    lz4 compresses them about as much as real event data, not like repeated bytes."""
    rng = random.Random(seed)
    pool = []
    for i in range(size):
        words = [f"id={i:06d}", f"ts={rng.randrange(10**12, 10**13)}"]
        while sum(len(w) + 1 for w in words) < VALUE_SIZE:
            words.append(rng.choice(_WORDS) + "=" + str(rng.randrange(10**rng.randrange(1, 7))))
        pool.append(" ".join(words).encode()[:VALUE_SIZE])
    return pool


# -- /proc -------------------------------------------------------------------------------

def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    return sum(cpu_times(pid))


def memory_kib(pid: int, key: str) -> int | None:
    """A /proc/<pid>/status figure in KiB (VmRSS, VmHWM), None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss(pid: int) -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0, own processes); False if refused."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Probe:
    """Wall time, broker CPU and peak broker RSS over one measurement."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak_reset = reset_peak_rss(pid)
        self.children0 = os.times()
        self.cpu0 = cpu_times(pid)
        self.t0 = time.perf_counter()

    def stop(self) -> dict:
        wall = time.perf_counter() - self.t0
        user, system = (now - before for now, before in zip(cpu_times(self.pid), self.cpu0))
        t = os.times()
        peak = memory_kib(self.pid, "VmHWM")
        return {"seconds": wall, "broker_cpu_s": user + system, "broker_user_s": user, "broker_sys_s": system,
                "broker_peak_rss_mib": None if peak is None else peak / 1024,
                "peak_rss_since": "run" if self.peak_reset else "broker start",
                "client_cpu_s": (t.user - self.children0.user + t.system - self.children0.system
                                 + t.children_user - self.children0.children_user
                                 + t.children_system - self.children0.children_system)}


# -- the brokers (Kafka: bench.kafka_broker.KafkaTarget) ------------------------------------

class Target:
    """A broker as the benchmarks see it: `name`, `start()` (returning itself), `bootstrap`,
    `pid` (its process, for /proc), `create_topics`, `delete_topic` and `stop()`, around a
    `process` that knows its bootstrap servers and pid."""

    name: str

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap_servers

    @property
    def pid(self) -> int:
        return self.process.pid


class SluiceTarget(Target):
    name = "sluice"

    def __init__(self, workdir: str, sizes: Sizes, properties: dict | None = None):
        """`properties`: server.properties settings beyond those of the mock cluster."""
        from sluice.broker_process import BrokerProcess

        self.data_dir = os.path.join(workdir, f"sluice-{uuid.uuid4().hex[:6]}")
        os.makedirs(self.data_dir)
        config = os.path.join(self.data_dir, "server.properties")
        with open(config, "w") as f:  # as the mock cluster behaves
            f.write("num.partitions=4\nauto.create.topics.enable=true\n")
            f.writelines(f"{key}={value}\n" for key, value in (properties or {}).items())
        self.process = BrokerProcess(os.path.join(self.data_dir, "data"), config_file=config)
        self.timeout = sizes.step_timeout
        self.client = None

    def start(self) -> "SluiceTarget":
        from sluice_client import Client

        self.process.start(timeout=60)
        self.client = Client(self.bootstrap, call_timeout=self.timeout)
        return self

    @property
    def pid(self) -> int:
        return self.process.proc.pid

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        from sluice_client import NewTopic

        results = self.client.admin.create_topics(
            {name: NewTopic(partitions, 1, dict(configs or {})) for name, partitions in topics.items()},
            timeout_ms=int(self.timeout * 1000))
        failed = {name: r.error for name, r in results.items() if r.error is not None}
        if failed:
            raise RuntimeError(f"sluice: create topics failed: {failed}")

    def delete_topic(self, topic: str) -> None:
        self.client.admin.delete_topics([topic])

    def log_bytes(self, topic: str) -> int:
        """Bytes in the topic's partition directories (segments and indexes)."""
        data = os.path.join(self.data_dir, "data")
        prefix = topic + "-"
        return sum(dir_bytes(os.path.join(data, name)) for name in os.listdir(data)
                   if name.startswith(prefix) and name[len(prefix):].isdigit())

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.process.proc is not None:
            stop_or_kill(self.process, 60)


class MockTarget(Target):
    name = "mock"

    def __init__(self, workdir: str, sizes: Sizes):
        from bench.mock_broker import MockBrokerProcess

        self.process = MockBrokerProcess(max_seconds=4 * 3600)

    def start(self) -> "MockTarget":
        self.process.start()
        return self

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        for name, partitions in topics.items():
            self.process.create_topic(name, partitions)

    def delete_topic(self, topic: str) -> None:
        self.process.delete_topic(topic)

    def stop(self) -> None:
        self.process.stop()


def watermarks(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[tuple[int, int]]:
    """(low, high) per partition, through ListOffsets; a retriable error (a leader moving or
    not yet known to the broker asked, as right after a topic's creation) is asked again
    until `timeout`, as a Kafka consumer does."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    retriable = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART}
    deadline = time.monotonic() + timeout
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks",
                         "log_level": 3})

    def marks(partition: int) -> tuple[int, int]:
        while True:
            try:
                return consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                      timeout=max(0.1, deadline - time.monotonic()))
            except KafkaException as exc:
                if exc.args[0].code() not in retriable or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)

    try:
        return [marks(p) for p in range(partitions)]
    finally:
        consumer.close()


def run_bounded(args: list[str], timeout: float, stdout=subprocess.DEVNULL) -> subprocess.CompletedProcess:
    result = subprocess.run(args, stdout=stdout, stderr=subprocess.PIPE, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{args[0]} exited with {result.returncode}: "
                           f"{result.stderr.decode(errors='replace')[-2000:]}")
    return result


def stop_or_kill(process, timeout: float) -> None:
    """SIGTERM and wait (BrokerProcess.stop); SIGKILL if it is still running after `timeout`."""
    proc = process.proc
    try:
        process.stop(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise


# -- the clients and the runs --------------------------------------------------------------------

def producer_config(bootstrap: str, acks: str, compression: str, linger_ms: int = 5) -> dict:
    return {"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "batch.size": 1_000_000,
            "acks": acks, "compression.type": compression, "enable.idempotence": False}


def median_run(runs: list[dict]) -> dict:
    """The run of median duration (the slower middle one of an even count)."""
    return sorted(runs, key=lambda m: m["seconds"])[len(runs) // 2]


def page_cache_write_cpu(directory: str, nbytes: int) -> tuple[float, float]:
    """(user, system) CPU seconds this thread spends writing `nbytes` into a new file in
    `directory` with 1 MiB os.write calls (the file is removed afterwards, uncounted):
    the least a log on disk pays for keeping those bytes, measured beside the run it is
    compared with, since this machine's cost per page varies between runs."""
    path = os.path.join(directory, f"page-cache-floor-{uuid.uuid4().hex[:6]}")
    chunk = memoryview(bytes(MIB))
    before = resource.getrusage(resource.RUSAGE_THREAD)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        left = nbytes
        while left > 0:
            left -= os.write(fd, chunk[:min(left, MIB)])
    finally:
        os.close(fd)
        after = resource.getrusage(resource.RUSAGE_THREAD)
        os.unlink(path)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime


def dir_bytes(path: str) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def client_versions() -> dict:
    import confluent_kafka

    try:
        kcat = subprocess.run([KCAT, "-V"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"Version (\S+) .*?(librdkafka \S+)", kcat)
        kcat = f"kcat {match.group(1)} ({match.group(2)})" if match else "kcat ?"
    except (OSError, subprocess.TimeoutExpired):
        kcat = "kcat not found"

    def first(version):  # a string, or (string, int) depending on the release
        return version if isinstance(version, str) else version[0]

    return {"confluent_kafka": first(confluent_kafka.version()),
            "librdkafka": first(confluent_kafka.libversion()), "kcat": kcat}


# -- results -----------------------------------------------------------------------------------

def _fmt(value) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def _loads(results: dict, when: str) -> str:
    return "/".join(f"{v:.1f}" for v in results.get(f"load_average_{when}") or ())


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _rounded(value):
    """Floats to 4 significant digits: the JSON stays small and diffable."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def section_timer(results: dict):
    """`timed(name, fn, *args)`: runs fn(*args), noting its seconds in
    results["section_seconds"][name] (also when it fails)."""
    results["section_seconds"] = {}

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            results["section_seconds"][name] = round(time.perf_counter() - t0, 1)

    return timed


def chosen_sections(parser, only: str | None, sections: tuple[str, ...]) -> tuple[str, ...]:
    """The sections a benchmark's `--only a,b` names (all of them without it); an
    unknown name is a usage error of `parser`."""
    chosen = sections if not only else tuple(s.strip() for s in only.split(","))
    if set(chosen) - set(sections):
        parser.error(f"unknown sections {sorted(set(chosen) - set(sections))}")
    return chosen


def sectioned_main(argv, name: str, description: str, quick_help: str, sections: tuple[str, ...],
                   full, quick, run, markdown_report, prog: str | None = None) -> None:
    """The command line of a benchmark made of sections (`--quick`, `--only a,b`, `--out`,
    `--no-write`): runs `run(sizes, mode, sections, log)` and publishes its report as `name`."""
    import argparse

    from bench.machine import describe_machine

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(sections)}")
    parser.add_argument("--out", default=DEFAULT_OUT, help="directory for .md/.json")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    sizes, mode = (quick, "quick") if args.quick else (full, "full")
    chosen = chosen_sections(parser, args.only, sections)
    print(f"machine: {describe_machine()}", flush=True)
    results = run(sizes, mode, chosen, lambda line: print(line, flush=True))
    publish(name, results, markdown_report(results), None if args.no_write else args.out)


def publish(name: str, results: dict, markdown: str, out_dir: str | None) -> None:
    """Print a run's report and, unless `out_dir` is None, write it and the results
    there (`write_result_files`), naming the files written."""
    print()
    print(markdown)
    if out_dir is not None:
        paths = write_result_files(name, results, out_dir, markdown)
        print("written: " + ", ".join(os.path.relpath(p, REPO) for p in paths.values()))


def write_result_files(name: str, results: dict, out_dir: str, markdown: str) -> dict:
    """`<name>-<date>[-<mode>].json` and `.md` in `out_dir` (a full run's without the mode),
    each written atomically; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    stem = f"{name}-{results['date']}" + ("" if results["mode"] == "full" else f"-{results['mode']}")
    paths = {"json": os.path.join(out_dir, stem + ".json"), "md": os.path.join(out_dir, stem + ".md")}
    _atomic_write(paths["json"], json.dumps(_rounded(results), indent=1) + "\n")
    _atomic_write(paths["md"], markdown)
    return paths

