"""A cluster broker's identity checks at start (broker/cluster/membership.py), with real
broker processes and the module's ZooKeeper: each refusal is one readable line on the
broker's output, a non-zero exit status and no traceback, and leaves the cluster as it was.

- A data dir whose meta.properties names another cluster.id (it served cluster A, then
  is pointed at cluster B's ZooKeeper chroot).
- A data dir of broker.id 0 started as broker.id 2.
- A second process with the broker.id of a live broker (its own data dir), once it has
  waited the session timeout and a margin for that registration to go.

And the other side of the last check: a broker SIGKILLed and started again at once finds
its own registration still there, waits for ZooKeeper to expire the dead session (saying
so), then registers and serves.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.cluster.membership import STALE_REGISTRATION_MARGIN_S
from tests.cluster import FAST_FAILOVER, Cluster

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parent.parent


def run_broker(directory: Path, data_dir: Path, properties: dict[str, object]) -> subprocess.CompletedProcess:
    """`python -m broker` in the foreground, expected to exit on its own."""
    config = directory / "server.properties"
    config.write_text("".join(f"{key}={value}\n" for key, value in properties.items()))
    return subprocess.run([sys.executable, "-m", "broker", "--data-dir", str(data_dir),
                           "--host", "127.0.0.1", "--port", "0", "--config", str(config)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)


def assert_refused(done: subprocess.CompletedProcess, *phrases: str) -> None:
    output = done.stdout + done.stderr
    assert done.returncode not in (0, None), output
    assert "Traceback" not in output, output
    for phrase in phrases:
        assert phrase in output, output


def meta_properties(data_dir: Path) -> dict[str, str]:
    lines = (data_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def test_a_data_dir_of_another_cluster_or_broker_id_is_refused(tmp_path, zookeeper):
    cluster_a = Cluster(tmp_path / "a", zookeeper, brokers=1, properties=FAST_FAILOVER)
    cluster_b = Cluster(tmp_path / "b", zookeeper, brokers=1, properties=FAST_FAILOVER)
    try:
        cluster_a.start()
        assert cluster_a.stop(0) == 0
        cluster_b.start()
        data_a = Path(cluster_a.processes[0].data_dir)
        id_a = meta_properties(data_a)["cluster.id"]
        id_b = meta_properties(Path(cluster_b.processes[0].data_dir))["cluster.id"]
        assert id_a != id_b

        other_cluster = run_broker(tmp_path, data_a, {
            "broker.id": 0, "zookeeper.connect": f"{zookeeper.hosts}{cluster_b.chroot}"})
        assert_refused(other_cluster, f"belongs to cluster {id_a}", f"holds cluster {id_b}")
        assert meta_properties(data_a)["cluster.id"] == id_a  # nothing rewritten

        other_id = run_broker(tmp_path, data_a, {
            "broker.id": 2, "zookeeper.connect": f"{zookeeper.hosts}{cluster_a.chroot}"})
        assert_refused(other_id, "belongs to broker 0, not broker.id 2")
        assert not cluster_a.registered(2)

        # Refused twice, the data dir still serves its own cluster as its own broker.
        cluster_a.restart(0)
        cluster_a.wait_for_brokers()
        assert cluster_a.metadata(0).cluster_id == id_a
    finally:
        cluster_a.close()
        cluster_b.close()


def registration_wait_s(properties: dict[str, str]) -> float:
    """How long a broker waits for another session's registration of its id to go."""
    return int(properties["zookeeper.session.timeout.ms"]) / 1000 + STALE_REGISTRATION_MARGIN_S


def test_a_second_process_with_a_live_brokers_id_is_refused(tmp_path, zookeeper, zk):
    with Cluster(tmp_path / "c", zookeeper, brokers=2, properties=FAST_FAILOVER) as cluster:
        registered_before = zk.exists(f"{cluster.chroot}/brokers/ids/1")
        wait = registration_wait_s(FAST_FAILOVER)
        started = time.monotonic()
        twin = run_broker(tmp_path, tmp_path / "twin-data", {
            **FAST_FAILOVER, "broker.id": 1, "zookeeper.connect": f"{zookeeper.hosts}{cluster.chroot}"})
        assert time.monotonic() - started >= wait
        assert_refused(twin, f"waiting up to {wait:g} s",
                       f"still after {wait:g} s: another broker runs with broker.id 1")
        # The live broker 1 keeps its registration (the same znode, not a new one) and serves.
        assert zk.exists(f"{cluster.chroot}/brokers/ids/1").czxid == registered_before.czxid
        cluster.wait_for_brokers()
        metadata = cluster.metadata(0)
        assert metadata.brokers[1].port == cluster.processes[1].port


def test_a_broker_restarted_at_once_after_a_crash_registers_once_its_old_session_expires(
        tmp_path, zookeeper, zk):
    # Long enough for the restarted broker to reach its registration, on a busy machine,
    # before ZooKeeper expires the dead session.
    properties = {**FAST_FAILOVER, "zookeeper.session.timeout.ms": "10000"}
    wait = registration_wait_s(properties)
    with Cluster(tmp_path, zookeeper, brokers=3, properties=properties) as cluster:
        cluster.create_topic("kept", 3, 3)
        cluster.wait_for_leaders("kept", full_isr=True)
        path = f"{cluster.chroot}/brokers/ids/1"
        crashed = zk.exists(path)
        cluster.kill(1)
        cluster.processes[1].start(timeout=wait + 30)
        assert f"waiting up to {wait:g} s" in "".join(cluster.processes[1].output)
        registered = zk.exists(path)
        assert registered.czxid != crashed.czxid and registered.ephemeralOwner != crashed.ephemeralOwner
        cluster.wait_for_brokers()
        cluster.wait_for_leaders("kept", full_isr=True)
