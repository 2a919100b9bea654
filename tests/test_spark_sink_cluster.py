"""The exactly-once `sluice` sink on three brokers (real ZooKeeper, real broker processes,
real Spark drivers in processes of their own: tests/spark_sink_job.py through
test_spark_sink's Driver) while brokers and the driver are SIGKILLed.

Input and output topics have three partitions, RF=3, min.insync.replicas=2; the sink's
intent topic gets the brokers' default.replication.factor, 3 here. While a streaming
query copies the input to the output, brokers are SIGKILLed (the transaction coordinator
of the driver's transactional id, found with FindCoordinator; a leader of the output; the
controller) and restarted once ZooKeeper has ended their sessions, and the driver is
SIGKILLed at one of the sink's crash points and started again from its checkpoint. The
last run goes to the end (availableNow). The output is then read from the raw log (by
fate: committed, aborted, left open) and by two independent read_committed consumers
(confluent-kafka and kafka-python). Counted by name, printed, and all 0: lost,
duplicated, left open, aborted reads, non-monotonic offsets, inconsistent offsets
between consumers.

The default run injects one broker kill and one driver kill; the `chaos` run draws
SLUICE_CHAOS_ROUNDS (default 4) driver runs, each with broker kills of random kinds at
random moments and a driver kill at a random crash point, from a printed seed
(SLUICE_SEED replays it).

Without Spark: the last intent is found when the coordinator of the driver's
transactional id died after answering the intent's EndTxn and before writing its marker.
"""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

from tests.anomalies import offset_anomalies, read_by_two  # noqa: E402
from tests.cluster import FAST_FAILOVER, Cluster, pick_seed  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from spark_connector.sink import Intent, _record_intent, last_intent  # noqa: E402
from tests.test_cluster_transactions import (coordinated_by, coordinator_of, raw,  # noqa: E402
                                             restart_as_coordinator)
from tests.test_spark_sink import (EOS_POINTS, Driver, Output, next_batch, produce_input,  # noqa: E402
                                   query_id, record_id, unique)
from sluice_client import Client  # noqa: E402
from wire.internal_topics import SINK_INTENTS_TOPIC  # noqa: E402

PARTITIONS = 3
PROPERTIES = {**FAST_FAILOVER,
              "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
              # The sink creates its intent topic with the broker's default replication.
              "default.replication.factor": "3"}


def create_case(cluster: Cluster, tmp_path, name: str, count: int) -> tuple[Driver, str, dict, str]:
    """RF=3 input (holding `count` records, test_spark_sink's produce_input) and output
    topics, and a driver for the stream between them bootstrapped on every broker."""
    source, output = unique(f"{name}-in"), unique(f"{name}-out")
    for topic in (source, output):
        cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})
        cluster.wait_for_leaders(topic, full_isr=True)
    expected = produce_input(cluster.bootstrap_servers, source, PARTITIONS, count)
    checkpoint = str(tmp_path / "checkpoint")
    driver = Driver(tmp_path, cluster.all_servers, source, output, checkpoint, "exactly_once")
    return driver, output, expected, checkpoint


class Running:
    """A driver run (Driver.run) in a thread; `code` once it has exited."""

    def __init__(self, driver: Driver, mode: str, max_offsets: int, **env):
        self.code: int | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(driver, mode, max_offsets, env), daemon=True)
        self._thread.start()

    def _run(self, driver, mode, max_offsets, env) -> None:
        try:
            self.code = driver.run(mode, max_offsets, **env)
        except BaseException as exc:  # reported by join()
            self.error = exc

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> int:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"the driver run did not end in {timeout:g} s"
        if self.error is not None:
            raise self.error
        return self.code


def wait_for_batch(cluster: Cluster, run: Running, checkpoint: str, batch: int, timeout: float = 120) -> bool:
    """Until micro-batch `batch` is in Spark's commit log; False if the run ended first."""
    cluster.wait(lambda: next_batch(checkpoint) > batch or not run.alive, timeout,
                 f"the query to complete micro-batch {batch}")
    return next_batch(checkpoint) > batch


def victim(cluster: Cluster, kind: str, checkpoint: str, output: str, rng: random.Random) -> int:
    if kind == "coordinator":  # of the driver's transactional id: intents and their commits
        return coordinator_of(cluster, f"sluice-{query_id(checkpoint)}")
    if kind == "leader":
        return cluster.leader_of(output, rng.randrange(PARTITIONS))
    return cluster.controller_id()


def kill_and_restart(cluster: Cluster, broker_id: int, what: str) -> None:
    """SIGKILL, then start again once ZooKeeper has dropped the broker, and wait until the
    brokers agree again."""
    started = time.monotonic()
    cluster.kill(broker_id)
    cluster.restart(broker_id)
    cluster.wait_for_brokers()
    print(f"SIGKILL broker {broker_id} ({what}); back after {time.monotonic() - started:.1f} s")


def crashed_at(driver: Driver, code: int, point: str, batch: int) -> None:
    assert code == -signal.SIGKILL, f"driver exited with {code}, not by the crash hook:\n{driver.log()}"
    reached, batch_reached, _ = driver.crash_log.read_text().splitlines()[-1].split()
    assert (reached, int(batch_reached)) == (point, batch)


def count_anomalies(cluster: Cluster, test: str, output: str, expected: dict, seed: int | None = None) -> dict:
    """The output against the input, from the raw log and from two read_committed
    consumers; prints every count."""
    bootstrap = cluster.bootstrap_servers
    out = Output(bootstrap, output, PARTITIONS)
    committed = Output.ids(out.committed)
    aborted_at = {(r[1], r[7]) for r in out.aborted}
    reads = read_by_two(bootstrap, output, PARTITIONS, "read_committed", len(expected))
    examples: list[str] = []
    counts = {"lost": len(set(expected) - set(committed)),
              "duplicated": sum(n - 1 for n in committed.values() if n > 1),
              "left open": len(out.open),
              "non-transactional": len(out.plain),
              "altered": sum(1 for r in out.committed if expected.get(r[0]) != (r[2], r[3], r[4])),
              "aborted reads": sum(1 for records in reads.values() for p, o, _ in records if (p, o) in aborted_at),
              **offset_anomalies(reads, examples)}
    # What each consumer saw: every input record exactly once.
    for client, records in reads.items():
        seen = collections.Counter(record_id(value) for _, _, value in records)
        counts[f"lost by {client}"] = len(set(expected) - set(seen))
        counts[f"duplicated for {client}"] = sum(n - 1 for n in seen.values() if n > 1)
    print(f"{test}{'' if seed is None else f' seed={seed}'}: {len(expected)} in, {sum(committed.values())} "
          f"committed, {len(out.aborted)} aborted (rewritten after kills); "
          + ", ".join(f"{name} {n}" for name, n in counts.items()))
    for example in examples:
        print(f"  {example}")
    return counts


@pytest.mark.long  # three brokers and two driver runs, 40 s: `make test-long`
def test_sink_is_exactly_once_across_a_broker_and_a_driver_kill(tmp_path, zookeeper, request):
    """The coordinator of the driver's transactional id is SIGKILLed once the query has
    committed its first micro-batch, and restarted; the driver is SIGKILLed in the middle
    of batch 3's commits (some of its transactions committed, some not), then run to the
    end."""
    with Cluster(tmp_path / "cluster", zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        driver, output, expected, checkpoint = create_case(cluster, tmp_path, "sink", 900)
        run = Running(driver, "processing", 150, SLUICE_TEST_SINK_CRASH="mid-commit",
                      SLUICE_TEST_SINK_CRASH_BATCH="3")
        assert wait_for_batch(cluster, run, checkpoint, 0), driver.log()
        target = victim(cluster, "coordinator", checkpoint, output, random.Random(0))
        kill_and_restart(cluster, target, f"coordinator of sluice-{query_id(checkpoint)}")
        crashed_at(driver, run.join(driver.timeout + 30), "mid-commit", 3)
        assert driver.run("available-now", 1000) == 0, driver.log()
        counts = count_anomalies(cluster, request.node.name, output, expected)
        assert counts == {name: 0 for name in counts}


@pytest.mark.chaos
@pytest.mark.timeout(1200)
def test_sink_is_exactly_once_under_random_broker_and_driver_kills(tmp_path, zookeeper, request):
    seed = pick_seed()
    rng = random.Random(seed)
    rounds = int(os.environ.get("SLUICE_CHAOS_ROUNDS") or 4)
    print(f"{request.node.name} seed={seed} rounds={rounds}")
    kinds = ["coordinator", "leader", "controller"]
    with Cluster(tmp_path / "cluster", zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        batch_size = 150
        driver, output, expected, checkpoint = create_case(cluster, tmp_path, "chaos", 150 * 4 * (rounds + 1))
        for round_ in range(rounds):
            first = next_batch(checkpoint)
            point, crash_batch = rng.choice(EOS_POINTS), first + rng.randint(2, 3)
            faults = [rng.choice(kinds) for _ in range(rng.randint(1, 2))]
            print(f"round {round_}: from batch {first}, broker kills {faults}, driver kill {point} "
                  f"in batch {crash_batch}")
            run = Running(driver, "processing", batch_size, SLUICE_TEST_SINK_CRASH=point,
                          SLUICE_TEST_SINK_CRASH_BATCH=str(crash_batch))
            for n, kind in enumerate(faults):
                if not wait_for_batch(cluster, run, checkpoint, first + n):
                    break
                kill_and_restart(cluster, victim(cluster, kind, checkpoint, output, rng), kind)
            crashed_at(driver, run.join(driver.timeout + 60), point, crash_batch)
        assert driver.run("available-now", 1000) == 0, driver.log()
        counts = count_anomalies(cluster, request.node.name, output, expected, seed)
        assert counts == {name: 0 for name in counts}, f"seed={seed}"


def test_the_last_intent_waits_for_its_marker_when_the_coordinator_died_after_answering(
        tmp_path, zookeeper, monkeypatch):
    """The driver's intent is committed (EndTxn answered) and the coordinator of the
    driver's transactional id dies before writing its COMMIT marker (fail point
    txn-after-prepare-before-markers). A write task of the batch's replay reading the
    last intent then finds it without its marker: it waits for the next coordinator to
    write it, instead of taking the batch for undecided (and writing it again, or
    failing the run as fenced)."""
    with Cluster(tmp_path, zookeeper, brokers=3, properties=PROPERTIES) as cluster:
        cluster.create_topic(SINK_INTENTS_TOPIC, 1, 3)
        victim = next(b for b in cluster.ids if b != cluster.leader_of(SINK_INTENTS_TOPIC))
        coordinator_of(cluster, "probe")  # creates __transaction_state
        restart_as_coordinator(cluster, victim, monkeypatch, "txn-after-prepare-before-markers")
        driver_txn_id = coordinated_by(cluster, victim, prefix="sluice-")
        query = driver_txn_id.removeprefix("sluice-")
        intent = Intent(3, "run-1", {0: None, 1: None})
        with Client(cluster.all_servers) as client:
            driver = client.producer.init_transactions(driver_txn_id, 60_000)
            _record_intent(client, query, driver, intent, first=False)
            wait_for(lambda: cluster.processes[victim].proc.poll() is not None, 60,
                     f"broker {victim} to die at its fail point")
            cluster.kill(victim)  # reaped: out of bootstrap_servers and the waits
            assert "fail point txn-after-prepare-before-markers reached" in cluster.output(victim, 200)
            assert last_intent(client, query) == intent
        conn = raw(cluster, coordinator_of(cluster, driver_txn_id))
        assert conn.completed(driver_txn_id).transaction_state == "CompleteCommit"
        conn.close()
