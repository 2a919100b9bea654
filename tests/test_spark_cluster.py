"""The `sluice` source and exactly-once sink on a real Spark standalone cluster.

A Master and Workers run as processes of their own, started with the pyspark package's
`bin/spark-class` (tests/spark_cluster.py); executors run in JVMs of their own under the
Workers, with their own Python workers; the driver is tests/spark_cluster_job.py, in a
process of its own (the pytest process already holds a local Spark session). Everything
binds to 127.0.0.1. A stream goes Kafka -> Spark -> Kafka (`format("sluice")` both ways,
exactly once by default); the output is then read from the raw log and each input record
must be there exactly once, committed, with nothing left open.
- An executor JVM is SIGKILLed while a task of a micro-batch is in flight: the Worker
  starts a new executor, the lost tasks run again (attempt 1) and the batch is written
  once.
- Speculation (two Workers, as two hosts): one partition's task is slow in every
  micro-batch, so Spark runs a speculative copy of it on the other executor. Either the
  copy overtakes a stuck attempt 0, or attempt 0 finishes while the copy runs. The output
  must be exactly once, and attempts must not fence each other's transactions (each
  attempt has a transactional id of its own): no attempt is lost to PRODUCER_FENCED.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import time

import pytest

pytest.importorskip("pyspark")
# A standalone cluster and its executors' JVMs take half a minute a run: `make test-long`.
pytestmark = pytest.mark.long

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.spark_cluster import (DRIVER_TIMEOUT, Driver, Markers, StandaloneCluster,  # noqa: E402
                                 assert_loopback_only, check_exactly_once, job_config)
from tests.test_spark_sink import create_topics, produce_input, unique  # noqa: E402


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cluster-broker") / "data") as proc:
        yield proc.bootstrap_servers


@pytest.fixture
def cluster(tmp_path, request):
    spec = getattr(request, "param", (("127.0.0.1", 2),))
    cluster = StandaloneCluster(tmp_path / "cluster", workers=spec)
    try:
        started = time.monotonic()
        cluster.start()
        print(f"cluster of {len(spec)} worker(s) up after {time.monotonic() - started:.1f} s")
        yield cluster
    finally:
        cluster.close()


def run_driver(driver: Driver, cluster: StandaloneCluster, during=None) -> int:
    """Runs the driver to its end (bounded) and returns its exit code; `during(app_id)`
    runs meanwhile. The driver's processes are killed whatever happens."""
    started = time.monotonic()
    try:
        if during is not None:
            app = wait_for(lambda: _alive(driver, cluster) and cluster.active_apps(), 60,
                           "the application to register with the Master")[0]
            during(app)
        code = driver.wait(max(1.0, DRIVER_TIMEOUT - (time.monotonic() - started)))
    finally:
        driver.kill()
    print(f"driver exit {code} after {time.monotonic() - started:.1f} s")
    return code


def _alive(driver: Driver, cluster: StandaloneCluster) -> bool:
    if not driver.alive():
        raise AssertionError(f"driver exited with {driver.proc.returncode}\n{driver.log()}\n{cluster.logs()}")
    return True


def test_executor_killed_mid_batch_exactly_once(kafka, cluster, tmp_path):
    partitions, count = 3, 1800
    source, output = unique("cluster-in"), unique("cluster-out")
    create_topics(kafka, partitions, source, output)
    expected = produce_input(kafka, source, partitions, count)
    markers = Markers(tmp_path / "markers")
    # 300 records a micro-batch: 6 batches of 3 tasks; each task attempt pauses 0.5 s at
    # its first row, so that a kill lands inside a task.
    config = job_config(kafka, tmp_path, source, output, markers, master=cluster.master_url,
                        max_offsets=300, pause=0.5)
    driver = Driver(tmp_path, config, cluster.env)
    killed = {}

    def kill_an_executor(app):
        first = wait_for(lambda: _alive(driver, cluster) and cluster.executors(app), 60,
                         "the application's executor JVM")
        assert len(first) == 1, first
        # A task of micro-batch 2 (batches 0 and 1 done or in flight) has started.
        in_flight = wait_for(lambda: _alive(driver, cluster) and [m for m in markers.all() if m[0] >= 2],
                             90, "a task of micro-batch 2 to start")
        os.kill(first[0], signal.SIGKILL)
        killed.update(pid=first[0], tasks=in_flight, at=time.monotonic())
        print(f"SIGKILLed executor JVM {first[0]} of {app} while tasks {in_flight} ran")
        replacement = wait_for(lambda: _alive(driver, cluster) and
                               [p for p in cluster.executors(app) if p != first[0]], 60,
                               "the Worker to start a new executor")
        print(f"new executor JVM {replacement} after {time.monotonic() - killed['at']:.1f} s")
        assert_loopback_only(cluster.pids() + driver.pids())

    code = run_driver(driver, cluster, kill_an_executor)
    assert code == 0, f"driver exit {code}\n{driver.log()}\n{cluster.logs()}"

    attempts = markers.all()
    retried = sorted({(b, p) for b, p, a, _ in attempts if a >= 1})
    print(f"task attempts: {len(attempts)}; tasks run again after the kill: {retried}")
    # The task that was in flight when its executor died ran again (attempt >= 1).
    assert any((b, p) in retried for b, p, a, pid in killed["tasks"]), (killed, attempts)
    check_exactly_once(kafka, output, partitions, expected)


SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.multiplier": "1",
    "spark.speculation.quantile": "0.1",
    "spark.speculation.minTaskRuntime": "1s",
}


_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ", re.M)


def lost_tasks(log: str) -> collections.Counter:
    """Why task attempts were lost, from the driver's "Lost task" warnings: PRODUCER_FENCED
    when the sink's transaction of the attempt was fenced, else the reason's first words."""
    reasons = collections.Counter()
    for entry in _LOG_LINE.split(log):
        if "Lost task" in entry and "): " in entry:
            reason = entry.split("): ", 1)[1]
            reasons["PRODUCER_FENCED" if "PRODUCER_FENCED" in reason else reason.splitlines()[0][:60]] += 1
    return reasons


# Speculation never runs a copy of a task on a host where an attempt of it runs: the two
# Workers are 127.0.0.1 under two names.
@pytest.mark.parametrize("cluster", [(("127.0.0.1", 1), ("localhost", 1))], indirect=True)
def test_speculative_attempts_exactly_once(kafka, cluster, tmp_path):
    partitions, count = 3, 1200
    source, output = unique("spec-in"), unique("spec-out")
    create_topics(kafka, partitions, source, output)
    expected = produce_input(kafka, source, partitions, count)
    markers = Markers(tmp_path / "markers")
    # 4 micro-batches of 3 tasks. Partition 0's task is slow in each: in batches 0 and 2
    # attempt 0 is stuck until a speculative copy overtakes it; in batches 1 and 3
    # attempt 0 goes on once the copy has started, and finishes while the copy runs.
    slow = {"partition": 0, "seconds": 30, "batches": {"0": "stuck", "1": "race", "2": "stuck", "3": "race"}}
    config = job_config(kafka, tmp_path, source, output, markers, master=cluster.master_url,
                        max_offsets=300, slow=slow, conf=SPECULATION)
    driver = Driver(tmp_path, config, cluster.env)
    code = run_driver(driver, cluster)
    log = driver.log(10**7)
    assert code == 0, f"driver exit {code}\n{driver.log()}\n{cluster.logs()}"
    attempts = markers.all()
    copies = sorted({(b, p) for b, p, a, _ in attempts if a >= 1})
    lost = lost_tasks(log)
    print(f"task attempts (batch, partition, attempt): {[a[:3] for a in attempts]}")
    print(f"tasks with a speculative copy: {copies}; attempts lost: {dict(lost)}")
    assert copies == [(b, 0) for b in range(4)], attempts
    check_exactly_once(kafka, output, partitions, expected)
    # The attempts did not fence each other either: each one lost was killed once
    # another had won.
    assert not lost["PRODUCER_FENCED"] and "PRODUCER_FENCED" not in log, dict(lost)
