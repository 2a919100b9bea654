"""`sluice cluster` (sluice/cluster.py) run as a user runs it, in a subprocess: start three
brokers and ZooKeeper, check them with status, write and read a replicated topic through
the bootstrap servers it printed, refuse a second start, stop, start the same cluster
again with its data, stop. A broker added to a running cluster (add-broker) joins it,
`sluice reassign --rebalance --wait` spreads the replicas and leaders onto it, and
status, stop and start include it from then on. Bad input gets one readable line and a non-zero exit code,
never a traceback, and starts nothing.
"""

from __future__ import annotations

import json
import os
from collections import Counter
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster import Workload, count_anomalies, read_all
from sluice_client import Client, NewTopic

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parent.parent


def sluice(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """`sluice ARGS` with this tree's packages (the brokers it starts inherit the path)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=environment, cwd=REPO)


@pytest.fixture
def cluster_dir(tmp_path):
    """The cluster's directory; whatever it left running is stopped, then killed."""
    directory = tmp_path / "cluster"
    yield directory
    state_file = directory / "cluster.json"
    if state_file.exists():
        sluice("cluster", "stop", "--data-dir", str(directory), "--timeout", "20")
        state = json.loads(state_file.read_text())
        for pid in [state.get("zookeeper_pid")] + [b.get("pid") for b in state["brokers"]]:
            if pid and Path(f"/proc/{pid}/cmdline").exists() and str(directory).encode() in \
                    Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def assert_refused(done: subprocess.CompletedProcess, message: str, code: int = 1) -> None:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    assert message in done.stderr, done.stderr


def test_start_status_use_stop_and_start_again(cluster_dir, tmp_path):
    extra = tmp_path / "extra.properties"
    extra.write_text("offsets.topic.num.partitions=3\nzookeeper.session.timeout.ms=6000\n"
                     "controlled.shutdown.retry.backoff.ms=500\n")
    started = sluice("cluster", "start", "--brokers", "3", "--data-dir", str(cluster_dir),
                     "--config", str(extra))
    assert started.returncode == 0, started.stderr
    bootstrap = started.stdout.strip()
    addresses = bootstrap.split(",")
    assert len(addresses) == 3 and all(a.startswith("127.0.0.1:") for a in addresses), bootstrap
    state = json.loads((cluster_dir / "cluster.json").read_text())
    assert [b["id"] for b in state["brokers"]] == [0, 1, 2]
    properties = (cluster_dir / "broker-1" / "server.properties").read_text()
    assert "broker.id=1\n" in properties and "offsets.topic.num.partitions=3\n" in properties
    assert f"zookeeper.connect=127.0.0.1:{state['zookeeper_port']}/sluice\n" in properties

    status = sluice("cluster", "status", "--data-dir", str(cluster_dir))
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.count("running") == 4, status.stdout
    assert f"bootstrap servers: {bootstrap}" in status.stdout

    again = sluice("cluster", "start", "--data-dir", str(cluster_dir))
    assert_refused(again, "is running")

    with Client(bootstrap) as client:
        assert sorted(client.metadata([]).brokers) == [0, 1, 2]
        result = client.admin.create_topics({"kept": NewTopic(2, 3, {"min.insync.replicas": "2"})})["kept"]
        assert result.error is None, result.error
    workload = Workload(bootstrap, "kept", 2, seed=17, rate=1000, count=100).start()
    workload.complete(60)
    assert workload.acked_count() == 100, workload.failed
    anomalies = count_anomalies(workload.acked, read_all(bootstrap, "kept", 2))
    assert anomalies.clean and anomalies.read == 100, anomalies.summary()

    stopped = sluice("cluster", "stop", "--data-dir", str(cluster_dir))
    assert stopped.returncode == 0, stopped.stderr
    status = sluice("cluster", "status", "--data-dir", str(cluster_dir))
    assert status.returncode == 3 and status.stdout.count("stopped") == 4, status.stdout

    restarted = sluice("cluster", "start", "--data-dir", str(cluster_dir))
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == bootstrap
    anomalies = count_anomalies(workload.acked, read_all(bootstrap, "kept", 2))
    assert anomalies.clean and anomalies.read == 100, anomalies.summary()
    stopped = sluice("cluster", "stop", "--data-dir", str(cluster_dir))
    assert stopped.returncode == 0, stopped.stderr
    state = json.loads((cluster_dir / "cluster.json").read_text())
    for pid in [state["zookeeper_pid"]] + [b["pid"] for b in state["brokers"]]:
        assert not Path(f"/proc/{pid}").exists() or b"Z" in Path(f"/proc/{pid}/stat").read_bytes()


def test_a_broker_added_to_a_running_cluster_gets_replicas_by_rebalance(cluster_dir, tmp_path):
    extra = tmp_path / "extra.properties"
    extra.write_text("zookeeper.session.timeout.ms=6000\ncontrolled.shutdown.retry.backoff.ms=500\n"
                     "auto.leader.rebalance.enable=false\n")
    started = sluice("cluster", "start", "--brokers", "2", "--data-dir", str(cluster_dir),
                     "--config", str(extra))
    assert started.returncode == 0, started.stderr
    with Client(started.stdout.strip()) as client:
        result = client.admin.create_topics({"spread": NewTopic(4, 2)})["spread"]
        assert result.error is None, result.error
        for partition in range(4):
            client.producer.produce("spread", partition, [(None, b"%d-%d" % (partition, i)) for i in range(25)])

    added = sluice("cluster", "add-broker", "--data-dir", str(cluster_dir))
    assert added.returncode == 0, added.stderr
    bootstrap = added.stdout.strip().splitlines()[-1]
    assert bootstrap.startswith(started.stdout.strip() + ",127.0.0.1:"), added.stdout
    assert "Broker 2 joined on 127.0.0.1:" in added.stdout
    state = json.loads((cluster_dir / "cluster.json").read_text())
    assert [b["id"] for b in state["brokers"]] == [0, 1, 2]
    properties = (cluster_dir / "broker-2" / "server.properties").read_text()
    assert "broker.id=2\n" in properties and "auto.leader.rebalance.enable=false\n" in properties
    with Client(bootstrap) as client:
        assert sorted(client.metadata([]).brokers) == [0, 1, 2]
    status = sluice("cluster", "status", "--data-dir", str(cluster_dir))
    assert status.returncode == 0 and status.stdout.count("running") == 4, status.stdout

    # `sluice reassign --rebalance` moves replicas and preferred leaders onto it.
    rebalanced = sluice("reassign", "--bootstrap-server", bootstrap, "--rebalance", "--wait")
    assert rebalanced.returncode == 0, rebalanced
    with Client(bootstrap) as client:
        partitions = client.metadata(["spread"]).topics["spread"].partitions.values()
    replicas = Counter(b for p in partitions for b in p.replicas)
    assert sorted(replicas.values()) == [2, 3, 3], rebalanced.stdout
    assert sorted(Counter(p.replicas[0] for p in partitions).values()) == [1, 1, 2]
    assert all(p.leader_id == p.replicas[0] for p in partitions), rebalanced.stdout  # elected
    again = sluice("reassign", "--bootstrap-server", bootstrap, "--rebalance", "--wait")
    assert again.returncode == 0 and "spread evenly over brokers 0, 1, 2 already" in again.stdout, again

    stopped = sluice("cluster", "stop", "--data-dir", str(cluster_dir))
    assert stopped.returncode == 0, stopped.stderr
    status = sluice("cluster", "status", "--data-dir", str(cluster_dir))
    assert status.returncode == 3 and status.stdout.count("stopped") == 4, status.stdout
    assert_refused(sluice("cluster", "add-broker", "--data-dir", str(cluster_dir)), "is not running")
    restarted = sluice("cluster", "start", "--data-dir", str(cluster_dir))
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == bootstrap
    records = read_all(bootstrap, "spread", 4)
    assert sorted(r.value for r in records) == sorted(b"%d-%d" % (p, i) for p in range(4) for i in range(25))


@pytest.mark.parametrize("args, message, code", [
    (["start"], "--data-dir", 2),
    (["start", "--data-dir", "{dir}"], "say how many with --brokers N", 1),
    (["start", "--data-dir", "{dir}", "--brokers", "0"], "'0' is not positive", 2),
    (["start", "--data-dir", "{dir}", "--brokers", "three"], "'three' is not an integer", 2),
    (["start", "--data-dir", "{dir}", "--brokers", "3", "--base-port", "70000"],
     "70000 is outside 1-65535", 2),
    (["start", "--data-dir", "{dir}", "--brokers", "3", "--base-port", "65534"],
     "leaves no room for 3 brokers", 1),
    (["start", "--data-dir", "{dir}", "--brokers", "3", "--config", "{dir}.missing"],
     "cannot read config file", 1),
    (["start", "--data-dir", "{dir}", "--brokers", "3", "--timeout", "-1"], "not positive", 2),
    (["status", "--data-dir", "{dir}"], "no cluster in", 1),
    (["stop", "--data-dir", "{dir}"], "no cluster in", 1),
    (["add-broker", "--data-dir", "{dir}"], "no cluster in", 1),
    (["restart", "--data-dir", "{dir}"], "invalid choice", 2),
])
def test_bad_arguments_are_refused_readably(cluster_dir, args, message, code):
    done = sluice("cluster", *[a.format(dir=cluster_dir) for a in args])
    assert_refused(done, message, code)
    assert not (cluster_dir / "cluster.json").exists()


@pytest.mark.parametrize("properties, message", [
    ("broker.id=7\n", "broker.id set by `sluice cluster start`"),
    ("listeners=PLAINTEXT://127.0.0.1:1\nlog.dirs=/tmp\n", "listeners, log.dirs set by"),
    ("num.partitions=zero\n", "num.partitions: 'zero' is not an integer"),
    ("just a line\n", "expected key=value"),
])
def test_a_bad_extra_config_is_refused_before_anything_starts(cluster_dir, tmp_path, properties,
                                                              message):
    extra = tmp_path / "extra.properties"
    extra.write_text(properties)
    done = sluice("cluster", "start", "--data-dir", str(cluster_dir), "--brokers", "2",
                  "--config", str(extra))
    assert_refused(done, message)
    assert not (cluster_dir / "cluster.json").exists()


def test_a_broker_that_exits_at_start_is_reported_with_its_status_and_log(cluster_dir):
    done = sluice("cluster", "start", "--data-dir", str(cluster_dir), "--brokers", "2",
                  env={"SLUICE_FAILPOINTS": "no-such-point"})
    assert_refused(done, "exited with status 2; the end of ")
    assert "SLUICE_FAILPOINTS names no such fail point: no-such-point" in done.stderr, done.stderr
    assert "stopping what was started" in done.stderr


def test_a_data_dir_that_is_a_file_is_refused(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("")
    done = sluice("cluster", "start", "--data-dir", str(path), "--brokers", "1")
    assert_refused(done, "is not a directory")


def test_without_java_start_says_what_to_install(cluster_dir, tmp_path):
    done = sluice("cluster", "start", "--data-dir", str(cluster_dir), "--brokers", "1",
                  env={"PATH": str(tmp_path)})
    assert_refused(done, "apt-get install zookeeper")
    assert not cluster_dir.exists()


def test_a_port_in_use_is_refused(cluster_dir):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = sluice("cluster", "start", "--data-dir", str(cluster_dir), "--brokers", "1",
                      "--base-port", str(port))
    assert_refused(done, f"cannot listen on 127.0.0.1:{port}")
