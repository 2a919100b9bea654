"""Apache Kafka itself as a benchmark target: a single-node KRaft broker in a JVM of its own.

The broker comes from Maven Central's `org.apache.kafka:kafka_2.13` artifacts and their
dependencies (sluice.maven resolves and caches the classpath once). One node runs in
combined mode (process.roles=broker,controller, node.id=1), its PLAINTEXT and CONTROLLER
listeners on free 127.0.0.1 ports, its log in a temporary directory that `stop()` removes.
The storage is formatted first (`kafka.tools.StorageTool format --standalone`, outside the
start-up time), then `kafka.Kafka server.properties` runs with Kafka's own heap and GC
settings (bin/kafka-server-start.sh: -Xmx1G -Xms1G, G1 with 20 ms pauses) and no
logging (no SLF4J binding is on the classpath; log4j2 is set to ERROR). `start()` waits,
bounded, for the first Metadata answer naming a broker.

`KafkaCluster` runs several such nodes as one cluster: each node is a broker and a
controller, the controllers a static quorum (controller.quorum.voters, each node's storage
formatted with one cluster id), and the internal topics replicated as Kafka's defaults
replicate them (offsets and transaction state RF=3, transaction.state.log.min.isr=2,
min.insync.replicas=1), as a Sluice cluster's are. Its heap is smaller (CLUSTER_HEAP).

`KafkaTarget` (one node) and `KafkaClusterTarget` are bench.common.Targets, as SluiceTarget
and MockTarget are; when Kafka cannot be resolved (no network, no Maven, no Java) or does
not start, `KafkaUnavailable` says why and the benchmarks carry on without it.

Kafka's own producer benchmark (`org.apache.kafka.tools.ProducerPerformance`, from
kafka-tools) is here too (`producer_performance`), to run against any of the brokers.

    python -m bench.kafka_broker   # start, answer one Metadata request, report, stop
"""

from __future__ import annotations

import atexit
import base64
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid

from bench.common import Target, memory_kib
from sluice import maven

HEAP = "1g"  # bin/kafka-server-start.sh's default (-Xmx1G -Xms1G); -Xms is the heap too
CLUSTER_HEAP = "512m"  # per node of a KafkaCluster: three JVMs share the machine
# bin/kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS
JVM_FLAGS = ["-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]
PERF_HEAP = "512m"
CREATE_BATCH = 5000  # partitions per CreateTopics request
LOG4J2 = ("status = error\nappender.err.type = Console\nappender.err.name = ERR\n"
          "appender.err.target = SYSTEM_ERR\nappender.err.layout.type = PatternLayout\n"
          "appender.err.layout.pattern = %d %p %c: %m%n\nrootLogger.level = error\n"
          "rootLogger.appenderRef.err.ref = ERR\n")


class KafkaUnavailable(RuntimeError):
    """Kafka could not be resolved or started; the message says why."""


def version() -> str:
    return maven.KAFKA_VERSION


def broker_classpath() -> list:
    try:
        return maven.classpath([f"org.apache.kafka:kafka_2.13:{maven.KAFKA_VERSION}"])
    except maven.MavenUnavailable as e:
        raise KafkaUnavailable(str(e)) from None


def tools_classpath() -> list:
    try:
        return maven.classpath([f"org.apache.kafka:kafka-tools:{maven.KAFKA_VERSION}"])
    except maven.MavenUnavailable as e:
        raise KafkaUnavailable(str(e)) from None


def _java(entries, main_class: str, *args: str, heap: str, flags=()) -> list[str]:
    try:
        command = maven.java_command(entries, main_class, *args, heap=heap, quick_start=False)
    except maven.MavenUnavailable as e:
        raise KafkaUnavailable(str(e)) from None
    command[1:1] = list(flags)
    return command


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (a random Uuid, base64 without padding)."""
    cluster_id = "-"
    while cluster_id.startswith("-"):  # as Kafka's own Uuid: an id like "-x..." reads as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a Metadata request by hand: the start-up probe, the same for every broker ----------------

def _metadata_request(correlation_id: int) -> bytes:
    client = b"bench-probe"
    # header v1: api_key 3 (Metadata), version 1, correlation id, client id; body: no topics
    body = struct.pack(">hhih", 3, 1, correlation_id, len(client)) + client + struct.pack(">i", 0)
    return struct.pack(">i", len(body)) + body


def metadata_brokers(host: str, port: int, timeout: float = 1.0) -> int:
    """Brokers named by one Metadata v1 answer from host:port; raises OSError when
    nothing (or nothing whole) answers within `timeout`."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(_metadata_request(1))
        data = b""
        while len(data) < 12:
            chunk = s.recv(4096)
            if not chunk:
                raise ConnectionError("closed before answering")
            data += chunk
    size, correlation_id, brokers = struct.unpack_from(">iii", data)
    if correlation_id != 1 or size < 8:
        raise ConnectionError(f"unexpected answer (correlation id {correlation_id})")
    return brokers


def wait_for_metadata(bootstrap: str, deadline: float, alive=lambda: True, brokers: int = 1) -> float:
    """Poll until a Metadata answer names `brokers` brokers or more (or `deadline`,
    time.monotonic(), passes, or `alive()` turns false); returns the time.perf_counter()
    of that answer."""
    host, port = bootstrap.rsplit(":", 1)
    last = None
    while time.monotonic() < deadline:
        if not alive():
            raise KafkaUnavailable(f"the broker exited before answering ({last})")
        try:
            named = metadata_brokers(host, int(port), timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            if named >= brokers:
                return time.perf_counter()
            last = f"an answer naming {named} broker(s)"
        except (OSError, struct.error) as e:
            last = e
        time.sleep(0.02)
    raise TimeoutError(f"no Metadata answer from {bootstrap} ({last})")


# -- the broker ---------------------------------------------------------------------------------

class KafkaBrokerProcess:
    """One Kafka node (broker and controller) in a JVM of its own."""

    def __init__(self, workdir: str | None = None, heap: str = HEAP, config: dict | None = None,
                 listeners: dict[str, str] | None = None, node_id: int = 1,
                 controller_port: int | None = None, voters: str | None = None):
        """`listeners`: more listeners beside PLAINTEXT, name -> security protocol, each on a
        free port (`listener_ports`) and advertised; their TLS/SASL settings go in `config`.
        `voters` (controller.quorum.voters, with this node's `node_id` and `controller_port`
        among them) makes it a node of a KafkaCluster; without, it is a quorum of its own."""
        self.dir = tempfile.mkdtemp(prefix="kafka-", dir=workdir)
        self.heap = heap
        self.voters = voters
        self.port, self.controller_port = free_port(), controller_port or free_port()
        quorum = ({"controller.quorum.voters": voters} if voters else
                  {"controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}"})
        self.listener_ports = {name: free_port() for name in listeners or {}}
        extra = "".join(f",{name}://127.0.0.1:{port}" for name, port in self.listener_ports.items())
        protocols = "".join(f",{name}:{protocol}" for name, protocol in (listeners or {}).items())
        self.log_dir = os.path.join(self.dir, "logs")
        self.properties = os.path.join(self.dir, "server.properties")
        self.log4j = os.path.join(self.dir, "log4j2.properties")
        settings = {
            "process.roles": "broker,controller", "node.id": str(node_id), **quorum,
            "listeners": (f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
                          f"{extra}"),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{extra}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
            "log.dirs": self.log_dir, "num.partitions": "4", "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
            "delete.topic.enable": "true", **(config or {})}
        with open(self.properties, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in settings.items())
        with open(self.log4j, "w") as f:
            f.write(LOG4J2)
        self.proc: subprocess.Popen | None = None
        self.stderr_path = os.path.join(self.dir, "stderr.log")
        self.format_s: float | None = None
        self.launched: float | None = None
        self.start_s: float | None = None
        atexit.register(self.stop)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap(self, listener: str) -> str:
        """The address of one of the `listeners` given at construction."""
        return f"127.0.0.1:{self.listener_ports[listener]}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _command(self, main_class: str, *args: str, heap: str, flags=()) -> list[str]:
        return _java(broker_classpath(), main_class, *args, heap=heap,
                     flags=[f"-Dlog4j2.configurationFile={self.log4j}", *flags])

    def format(self, timeout: float = 120.0, extra_args=(), cluster_id: str | None = None) -> float:
        """`kafka-storage format` with `cluster_id` (a fresh one by default) and `extra_args`
        (e.g. --add-scram ...), `--standalone` unless the node is one of `voters`: seconds taken."""
        cluster_id = cluster_id or new_cluster_id()
        standalone = () if self.voters else ("--standalone",)
        started = time.perf_counter()
        try:
            done = subprocess.run(self._command("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                                "-c", self.properties, *standalone, *extra_args,
                                                heap="256m"),
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise KafkaUnavailable(f"formatting Kafka's storage took over {timeout:g} s") from None
        if done.returncode != 0:
            output = "".join(line for line in (done.stdout + done.stderr).splitlines(True) if "SLF4J" not in line)
            raise KafkaUnavailable(f"kafka.tools.StorageTool format exited with {done.returncode}: "
                                   f"{output.strip()[-1500:]}")
        self.format_s = time.perf_counter() - started
        return self.format_s

    def start(self, timeout: float = 120.0) -> "KafkaBrokerProcess":
        """Format (once), start the JVM and wait for the first Metadata answer: `start_s` is
        the time from starting the JVM to that answer."""
        if self.format_s is None:
            self.format(timeout)
        self.launch()
        return self.wait_started(timeout)

    def launch(self) -> None:
        """Start the JVM (its storage formatted), not waiting for it."""
        command = self._command("kafka.Kafka", self.properties, heap=self.heap,
                                flags=[f"-Xms{self.heap}", *JVM_FLAGS])
        with open(self.stderr_path, "ab") as err:
            self.launched = time.perf_counter()
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err,
                                         stdin=subprocess.DEVNULL, cwd=self.dir)

    def wait_started(self, timeout: float, brokers: int = 1) -> "KafkaBrokerProcess":
        """Wait for the launched JVM's first Metadata answer naming `brokers` brokers;
        `start_s` is the time from the launch to that answer. Killed if none comes."""
        try:
            answered = wait_for_metadata(self.bootstrap_servers, time.monotonic() + timeout,
                                         alive=lambda: self.proc.poll() is None, brokers=brokers)
        except (KafkaUnavailable, TimeoutError) as e:
            code = self.proc.poll()
            self.kill()
            raise KafkaUnavailable(f"Kafka did not start ({e}; exit code {code}): "
                                   f"{self._stderr_tail()}") from None
        self.start_s = answered - self.launched
        return self

    def _stderr_tail(self) -> str:
        try:
            with open(self.stderr_path, errors="replace") as f:
                lines = [line for line in f if "SLF4J" not in line]
            return "".join(lines)[-1500:].strip() or "(nothing on stderr)"
        except OSError:
            return "(no stderr)"

    def stop_process(self, timeout: float = 60.0) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL if it has not ended after `timeout`."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the JVM and remove the directory (log included)."""
        try:
            self.stop_process(timeout)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
            atexit.unregister(self.stop)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class KafkaCluster:
    """`brokers` KafkaBrokerProcess nodes, broker and controller each, the controllers one
    static quorum; the internal topics replicated as Kafka's defaults say (REPLICATION)."""

    REPLICATION = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                   "transaction.state.log.min.isr": "2", "min.insync.replicas": "1",
                   "share.coordinator.state.topic.replication.factor": "3",
                   "share.coordinator.state.topic.min.isr": "2"}

    def __init__(self, workdir: str | None = None, brokers: int = 3, heap: str = CLUSTER_HEAP):
        ports = {node_id: free_port() for node_id in range(1, brokers + 1)}
        voters = ",".join(f"{node_id}@127.0.0.1:{port}" for node_id, port in ports.items())
        self.nodes = [KafkaBrokerProcess(workdir, heap=heap, config=self.REPLICATION, node_id=node_id,
                                         controller_port=port, voters=voters)
                      for node_id, port in ports.items()]
        self.heap = heap
        self.format_s: float | None = None
        self.start_s: float | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.bootstrap_servers for node in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [node.pid for node in self.nodes]

    def start(self, timeout: float = 120.0) -> "KafkaCluster":
        """Format every node with one cluster id, start every JVM (the quorum needs a
        majority), and wait until each answers Metadata naming every broker: `start_s` is
        the time from the first launch to the last such answer, `format_s` the formats'."""
        cluster_id = new_cluster_id()
        self.format_s = sum(node.format(timeout, cluster_id=cluster_id) for node in self.nodes)
        try:
            for node in self.nodes:
                node.launch()
            for node in self.nodes:
                node.wait_started(timeout, brokers=len(self.nodes))
        except KafkaUnavailable:
            self.stop()
            raise
        self.start_s = max(node.launched + node.start_s for node in self.nodes) - self.nodes[0].launched
        return self

    def stop(self, timeout: float = 60.0) -> None:
        """SIGKILL every JVM and remove their directories: the cluster is never used again
        (SIGTERM one node at a time, the last ones wait for a quorum that has gone)."""
        for node in self.nodes:
            node.kill()
            node.stop(timeout)


class KafkaTarget(Target):
    """bench.common's Target around a KafkaBrokerProcess: topics of replication factor 1."""

    name = "kafka"
    replication = 1

    def __init__(self, workdir: str, sizes, process=None):
        self.process = process or KafkaBrokerProcess(workdir)
        self.timeout = sizes.step_timeout
        self.admin = None

    @property
    def pids(self) -> list[int]:
        return [self.process.pid]

    @property
    def heap(self) -> str:
        """Each JVM's heap (-Xms and -Xmx)."""
        return self.process.heap

    def rss_mib(self) -> list[float]:
        """Each JVM's resident set, MiB."""
        return [memory_kib(pid, "VmRSS") / 1024 for pid in self.pids]

    def start(self) -> "KafkaTarget":
        from confluent_kafka.admin import AdminClient

        self.process.start(timeout=min(self.timeout, 180.0))
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        return self

    def create_topics(self, topics: dict[str, int], configs: dict | None = None) -> None:
        """Created, and every partition's leader known to the broker (bounded)."""
        from confluent_kafka.admin import NewTopic

        # Kafka's controller refuses one request writing more than 10,000 metadata records
        # (one per partition, one per topic): requests of at most CREATE_BATCH partitions.
        batches, batch, size = [], [], 0
        for name, partitions in topics.items():
            if batch and size + partitions > CREATE_BATCH:
                batches.append(batch)
                batch, size = [], 0
            batch.append(NewTopic(name, partitions, self.replication, config=dict(configs or {})))
            size += partitions
        batches.append(batch)
        failed = {}
        for batch in batches:
            futures = self.admin.create_topics(batch, operation_timeout=self.timeout,
                                               request_timeout=self.timeout)
            for name, future in futures.items():
                try:
                    future.result(self.timeout)
                except Exception as e:  # noqa: BLE001 (KafkaException; reported below)
                    failed[name] = e
        if failed:
            raise RuntimeError(f"kafka: creating {len(failed)} topics failed, e.g. "
                               f"{dict(list(failed.items())[:2])}")
        deadline = time.monotonic() + self.timeout
        waiting = dict(topics)
        while waiting:
            listed = self.admin.list_topics(timeout=max(1.0, deadline - time.monotonic())).topics
            waiting = {t: n for t, n in waiting.items()
                       if t not in listed or len(listed[t].partitions) != n
                       or any(p.leader < 0 for p in listed[t].partitions.values())}
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"kafka: no leaders for {sorted(waiting)[:5]}")
            if waiting:
                time.sleep(0.02)

    def delete_topic(self, topic: str) -> None:
        for future in self.admin.delete_topics([topic], operation_timeout=self.timeout).values():
            future.result(self.timeout)

    def stop(self) -> None:
        self.admin = None
        self.process.stop(60)


class KafkaClusterTarget(KafkaTarget):
    """A KafkaTarget of `brokers` nodes (KafkaCluster): topics of replication factor `brokers`."""

    name = "kafka-cluster"

    def __init__(self, workdir: str, sizes, brokers: int = 3):
        super().__init__(workdir, sizes, KafkaCluster(workdir, brokers))
        self.replication = brokers

    @property
    def pids(self) -> list[int]:
        return self.process.pids


# -- Kafka's own producer benchmark ----------------------------------------------------------------

_PERF_SUMMARY = re.compile(r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec "
                           r"\((?P<mb>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg latency, "
                           r"(?P<max>[\d.]+) ms max latency(?:, (?P<p50>\d+) ms 50th, "
                           r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th)?")


def producer_performance(bootstrap: str, topic: str, records: int, record_size: int,
                         props: dict, timeout: float) -> dict:
    """`org.apache.kafka.tools.ProducerPerformance` (kafka-tools) at full speed
    (--throughput -1): its final summary line, parsed. Its own clock starts at the first
    send, so the JVM's start is not in the rate."""
    command = _java(tools_classpath(), "org.apache.kafka.tools.ProducerPerformance",
                    "--topic", topic, "--num-records", str(records), "--record-size", str(record_size),
                    "--throughput", "-1", "--producer-props", f"bootstrap.servers={bootstrap}",
                    *(f"{k}={v}" for k, v in props.items()), heap=PERF_HEAP)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"ProducerPerformance took over {timeout:g} s") from None
    summaries = [m for m in map(_PERF_SUMMARY.search, done.stdout.splitlines()) if m]
    if done.returncode != 0 or not summaries:
        raise RuntimeError(f"ProducerPerformance exited with {done.returncode}: "
                           f"{(done.stdout + done.stderr).strip()[-1500:]}")
    m = summaries[-1]
    return {"records": int(m["records"]), "records_per_s": float(m["rate"]),
            "mb_per_s": float(m["mb"]) * (1 << 20) / 1e6,  # its MB are MiB
            "avg_latency_ms": float(m["avg"]), "max_latency_ms": float(m["max"]),
            **({"p50_ms": int(m["p50"]), "p95_ms": int(m["p95"]), "p99_ms": int(m["p99"])}
               if m["p50"] else {})}


def main() -> None:
    with KafkaBrokerProcess() as kafka:
        print(f"Kafka {version()} on {kafka.bootstrap_servers}: storage formatted in "
              f"{kafka.format_s:.2f} s, JVM start to first Metadata answer {kafka.start_s:.2f} s, "
              f"RSS {memory_kib(kafka.pid, 'VmRSS') / 1024:.0f} MiB")


if __name__ == "__main__":
    main()


def start_kafka(workdir: str, sizes, log, brokers: int = 1):
    """A started KafkaTarget (a KafkaClusterTarget of `brokers` nodes when more than one),
    or (None, the reason) when Kafka cannot be had."""
    try:
        target = KafkaTarget(workdir, sizes) if brokers == 1 else KafkaClusterTarget(workdir, sizes, brokers)
    except Exception as e:  # noqa: BLE001 (reported, and the run carries on)
        return None, f"{type(e).__name__}: {e}"
    try:
        target.start()
    except KafkaUnavailable as e:
        target.stop()
        return None, str(e)
    log(f"  Kafka {version()} started ({brokers} node{'s' if brokers > 1 else ''}): storage formatted in "
        f"{target.process.format_s:.1f} s, JVM start to first Metadata answer {target.process.start_s:.1f} s")
    return target, None
