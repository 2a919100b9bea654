"""Real Spark processes for tests: a standalone cluster (Master and Workers from the
pyspark package's own `bin/spark-class`), a Spark Connect server, and driver scripts, each
in a session of its own so that teardown can SIGKILL everything it started.

Every process binds to 127.0.0.1 (SPARK_LOCAL_IP, explicit --host and bind addresses).
Executors are children of their Worker and PySpark's Python daemons children of their
JVM; the daemon moves its workers to a process group of their own but not to another
session, so "every process of the session" is the unit of cleanup.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pyspark

from tests.support.polling import wait_for
from tests.test_spark_sink import Output, read_committed_wire

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
FAST_JVM = "-XX:TieredStopAtLevel=1"  # C1 only: the JVMs start in about half the time
DRIVER_TIMEOUT = 150  # seconds a driver script may take, start to end


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # pid (comm) state ppid pgrp session ...; comm may hold spaces and parentheses.
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[3])


def session_members(sid: int) -> list[int]:
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit() and session_of(int(name)) == sid:
            members.append(int(name))
    return members


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def kill_session(sid: int, timeout: float = 20.0) -> None:
    """SIGKILL every process of session `sid` until none is left (zombies excepted)."""
    deadline = time.monotonic() + timeout
    for _ in range(1000):
        alive = [pid for pid in session_members(sid) if _state(pid) not in ("Z", None)]
        if not alive:
            return
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"processes of session {sid} still alive: {alive}")


def _state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2]


def spark_env(work: str, **extra: str) -> dict[str, str]:
    """The environment of every Spark process started here: loopback only, small daemons,
    this repository importable by Python workers, configuration only from `work`."""
    conf_dir = os.path.join(work, "conf")
    os.makedirs(conf_dir, exist_ok=True)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPARK_", "PYSPARK_")) and k != "PYTHONPATH"}
    env.update({
        "SPARK_HOME": SPARK_HOME,
        "SPARK_CONF_DIR": conf_dir,           # empty: nothing from the machine's Spark
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": os.path.join(work, "logs"),
        "SPARK_PID_DIR": os.path.join(work, "pids"),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": FAST_JVM,
        # The Master's REST submission server would listen on the fixed port 6066.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": ROOT,
        **extra,
    })
    return env


class Process:
    """A command in a session of its own, its output in `log_path`."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_path: str):
        self.name = name
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env=env, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        return [pid for pid in session_members(self.proc.pid) if _state(pid) not in ("Z", None)]

    def kill(self) -> None:
        """Every process of the session: the command, its JVMs and their Python workers."""
        kill_session(self.proc.pid)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def log(self, tail: int = 8000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f"---- {self.name} ({self.log_path})\n" + f.read()[-tail:]
        except OSError:
            return f"---- {self.name}: no log"


def listening_sockets(pids) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening TCP socket the processes hold."""
    inodes = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[int(target[8:-1])] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or int(fields[9]) not in inodes:  # 0A: LISTEN
                    continue
                address, port = fields[1].split(":")
                raw = bytes.fromhex(address)
                # Each 32-bit word is in host (little-endian) order.
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                found.append((inodes[int(fields[9])], socket.inet_ntop(
                    socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw), int(port, 16)))
    return found


def loopback(address: str) -> bool:
    return address == "127.0.0.1" or address == "::ffff:127.0.0.1"


def get_json(url: str):
    """The JSON at `url`, or None while the server is not answering with JSON yet (a
    starting Master's UI has been seen to serve its HTML page at /json/)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)
    except (OSError, ValueError):
        return None


class StandaloneCluster:
    """A Spark Master and Workers, each started with `bin/spark-class`. `workers` are
    (host, cores) pairs; hosts are names of 127.0.0.1 ("127.0.0.1", "localhost"), which
    Spark's scheduler treats as different hosts."""

    def __init__(self, work, workers=(("127.0.0.1", 2),), worker_memory: str = "1g"):
        self.work = str(work)
        os.makedirs(self.work, exist_ok=True)
        self.workers_spec = list(workers)
        self.worker_memory = worker_memory
        self.port, self.webui_port = free_port(), free_port()
        self.worker_webui_ports = [free_port() for _ in self.workers_spec]
        self.env = spark_env(self.work)
        self.processes: list[Process] = []
        self.master: Process | None = None
        self.workers: list[Process] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "StandaloneCluster":
        spark_class = os.path.join(SPARK_HOME, "bin", "spark-class")
        self.master = self._spawn("master", [
            spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.port), "--webui-port", str(self.webui_port)])
        wait_for(lambda: self._check("master") and (self.state() or {}).get("status") == "ALIVE",
                 timeout, "the Spark Master to be ALIVE")
        for n, ((host, cores), ui) in enumerate(zip(self.workers_spec, self.worker_webui_ports)):
            work_dir = os.path.join(self.work, f"worker-{n}")
            self.workers.append(self._spawn(f"worker-{n}", [
                spark_class, "org.apache.spark.deploy.worker.Worker", self.master_url,
                "--host", host, "--cores", str(cores), "--memory", self.worker_memory,
                "--webui-port", str(ui), "--work-dir", work_dir]))
        wait_for(lambda: self._check("workers") and
                 (self.state() or {}).get("aliveworkers") == len(self.workers_spec),
                 timeout, f"{len(self.workers_spec)} Spark Workers to register")
        return self

    def _spawn(self, name: str, args: list[str]) -> Process:
        proc = Process(name, args, self.env, os.path.join(self.work, f"{name}.log"))
        self.processes.append(proc)
        return proc

    def _check(self, what: str) -> bool:
        dead = [p for p in self.processes if not p.alive()]
        if dead:
            raise AssertionError(f"{what}: {[p.name for p in dead]} exited\n" + self.logs())
        return True

    def state(self) -> dict | None:
        """The Master's view (its web UI's /json): workers, applications."""
        return get_json(f"http://127.0.0.1:{self.webui_port}/json/")

    def active_apps(self) -> list[str]:
        return [app["id"] for app in (self.state() or {}).get("activeapps", [])]

    def executors(self, app_id: str) -> list[int]:
        """Pids of the app's live executor JVMs (CoarseGrainedExecutorBackend processes
        under the Workers)."""
        pids = []
        for worker in self.workers:
            for pid in session_members(worker.pid):
                args = cmdline(pid)
                if (_state(pid) not in ("Z", None)
                        and "org.apache.spark.executor.CoarseGrainedExecutorBackend" in args
                        and app_id in args):
                    pids.append(pid)
        return sorted(pids)

    def pids(self) -> list[int]:
        """Every live process of the cluster: Master, Workers, executors, Python workers."""
        return [pid for proc in self.processes for pid in session_members(proc.pid)
                if _state(pid) not in ("Z", None)]

    def logs(self) -> str:
        parts = [p.log(3000) for p in self.processes]
        for n in range(len(self.workers)):
            work_dir = os.path.join(self.work, f"worker-{n}")
            for base, _, files in os.walk(work_dir):
                for name in files:
                    if name == "stderr":
                        with open(os.path.join(base, name), errors="replace") as f:
                            parts.append(f"---- {os.path.join(base, name)}\n{f.read()[-4000:]}")
        return "\n".join(parts)

    def close(self) -> None:
        errors = []
        for proc in reversed(self.processes):
            try:
                proc.kill()
            except AssertionError as exc:
                errors.append(str(exc))
        assert not errors, errors


class Driver(Process):
    """A Spark driver script (tests/spark_cluster_job.py) in a session of its own."""

    def __init__(self, work, config: dict, env: dict[str, str] | None = None, name: str = "driver"):
        work = str(work)
        super().__init__(name, [sys.executable, os.path.join(ROOT, "tests", "spark_cluster_job.py"),
                                json.dumps(config)],
                         env or spark_env(work), os.path.join(work, f"{name}.log"))


class ConnectServer:
    """A Spark Connect server (master local[2]) started with the pyspark package's
    `bin/spark-submit`, its gRPC service on 127.0.0.1 at a free port. Python code that the
    clients send (data sources, UDFs) runs in its Python workers, which import this
    repository (PYTHONPATH)."""

    def __init__(self, work):
        self.work = str(work)
        os.makedirs(self.work, exist_ok=True)
        self.port = free_port()
        # spark-submit sizes the Connect server's JVM as a daemon's (as the Thrift server's).
        self.env = spark_env(self.work, SPARK_DAEMON_MEMORY="1g")
        self.process: Process | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> "ConnectServer":
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": FAST_JVM,
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.pyspark.python": sys.executable,
            "spark.local.dir": os.path.join(self.work, "local"),
        }
        args = [os.path.join(SPARK_HOME, "bin", "spark-submit"),
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--master", "local[2]", "--name", "sluice-connect-server"]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        self.process = Process("connect-server", args, self.env, os.path.join(self.work, "server.log"))

        def listening() -> bool:
            if not self.process.alive():
                raise AssertionError("the Spark Connect server exited\n" + self.process.log())
            with socket.socket() as sock:
                sock.settimeout(1)
                return sock.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(listening, timeout, f"the Spark Connect server to listen on 127.0.0.1:{self.port}", 0.2)
        return self

    def pids(self) -> list[int]:
        return self.process.pids() if self.process else []

    def log(self) -> str:
        return self.process.log() if self.process else ""

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()


# -- what the tests check ---------------------------------------------------------------

class Markers:
    """The task attempts the job's UDF saw: (batch, partition, attempt, pid) per file."""

    def __init__(self, directory):
        self.directory = str(directory)
        os.makedirs(self.directory, exist_ok=True)

    def all(self) -> list[tuple[int, int, int, int]]:
        return sorted(tuple(int(x) for x in name.split("-")) for name in os.listdir(self.directory))


def job_config(kafka, tmp_path, source, output, markers, **more) -> dict:
    return {"bootstrap": kafka, "input": source, "output": output,
            "checkpoint": str(tmp_path / "checkpoint"), "markers": markers.directory,
            "lifetime": DRIVER_TIMEOUT - 20, **more}


def check_exactly_once(kafka, output, partitions, expected) -> Output:
    """Each input record committed exactly once with its key, value and headers; nothing
    open, nothing outside a transaction. Prints the anomalies counted."""
    out = Output(kafka, output, partitions)
    committed = Output.ids(out.committed)
    lost = set(expected) - set(committed)
    duplicated = sum(n - 1 for n in committed.values() if n > 1)
    unexpected = set(committed) - set(expected)
    print(f"output: {sum(committed.values())} committed for {len(expected)} input records; "
          f"lost {len(lost)}, duplicated {duplicated}, unexpected {len(unexpected)}, "
          f"left open {len(out.open)}, non-transactional {len(out.plain)}, "
          f"aborted {len(out.aborted)}")
    assert (len(lost), duplicated, len(unexpected), len(out.open), len(out.plain)) == (0, 0, 0, 0, 0)
    assert sorted((r[0], r[2], r[3], r[4]) for r in out.committed) == sorted(
        (rid, *record) for rid, record in expected.items())
    assert read_committed_wire(kafka, output, partitions) == collections.Counter(list(expected))
    return out


def assert_loopback_only(pids) -> None:
    sockets = listening_sockets(pids)
    outside = [s for s in sockets if not loopback(s[1])]
    print(f"{len(pids)} processes, {len(sockets)} listening sockets, {len(outside)} not on 127.0.0.1")
    assert sockets and not outside, outside
