"""The exactly-once sink where Kafka transactions run out: a driver down past
`kafka.transaction.timeout.ms`, tasks slower than it, a commit that fails half way, a
long-running query's transactional state, and two drivers of one query.

Real Spark drivers in processes of their own (tests/spark_sink_job.py, whose fault
injection wraps the real sink writer) against a real broker process that aborts timed-out
transactions every 500 ms. Every test ends by reading the output's raw log: each input
record committed exactly once, nothing left open; the counts printed are the anomalies
looked for (lost, duplicated, left open) and the aborted records.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import threading

import pytest

pytest.importorskip("pyspark")
pytestmark = pytest.mark.long  # minutes of Spark drivers outliving timeouts: `make test-long`

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402
from tests.test_spark_sink import (Driver, Output, create_topics, last_intent, next_batch,  # noqa: E402
                                   produce_input, query_id, read_committed_wire, stream_case, unique)
from sluice_client import TOPIC_RESOURCE, Client  # noqa: E402
from wire.internal_topics import SINK_INTENTS_TOPIC  # noqa: E402

TIMEOUT_MS = 15_000  # above a normal batch on a loaded 2-core machine


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    """A broker that aborts timed-out transactions within half a second."""
    root = tmp_path_factory.mktemp("sink-timeout-broker")
    config = root / "server.properties"
    config.write_text("transaction.abort.timed.out.transaction.cleanup.interval.ms=500\n")
    with BrokerProcess(root / "data", config_file=str(config)) as proc:
        yield proc.bootstrap_servers


def short_timeout(**more) -> dict:
    return {"SLUICE_TEST_SINK_OPTIONS": json.dumps({"kafka.transaction.timeout.ms": str(TIMEOUT_MS), **more})}


def check_exactly_once(kafka: str, topic: str, partitions: int, expected: dict) -> Output:
    out = Output(kafka, topic, partitions)
    committed = Output.ids(out.committed)
    lost = len(set(expected) - set(committed))
    duplicated = sum(n - 1 for n in committed.values() if n > 1)
    print(f"{topic}: lost {lost}, duplicated {duplicated}, left open {len(out.open)}, "
          f"aborted {len(out.aborted)}, non-transactional {len(out.plain)}")
    assert (lost, duplicated, len(out.open), len(out.plain)) == (0, 0, 0, 0)
    assert set(committed) == set(expected)
    assert sorted((r[0], r[2], r[3], r[4]) for r in out.committed) == sorted(
        (rid, *record) for rid, record in expected.items())
    assert read_committed_wire(kafka, topic, partitions) == collections.Counter(list(expected))
    return out


def states(kafka: str, txns) -> list[str]:
    with Client(kafka) as client:
        return [client.admin.describe_transaction(t.transactional_id).state for t in txns]


def wait_until_ended(kafka: str, txns, what: str) -> list[str]:
    wait_for(lambda: "Ongoing" not in states(kafka, txns), TIMEOUT_MS / 1000 + 30, what)
    return states(kafka, txns)


def test_driver_down_past_the_transaction_timeout(kafka, tmp_path):
    """Killed mid-commit, then after the intent, each time down until the broker has
    aborted every transaction left open: the restarts write exactly the aborted tasks'
    rows again, and the output is whole."""
    partitions, count = 3, 900
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "down", partitions, count)

    driver.crash("mid-commit", 1, **short_timeout())
    intent = last_intent(kafka, checkpoint)
    assert intent.batch == 1 and len(intent.txns()) == partitions
    ended = wait_until_ended(kafka, intent.txns(), "the broker to abort the batch's open transactions")
    print(f"batch 1 after the kill and the timeout: {ended}")
    assert "CompleteCommit" in ended and "CompleteAbort" in ended  # half the batch is visible now

    # The restart replays batch 1 (rewriting the aborted tasks), then is killed after
    # batch 2's intent; again down until the timeout aborted all of batch 2.
    driver.crash("after-intent", 2, **short_timeout())
    intent = last_intent(kafka, checkpoint)
    assert intent.batch == 2
    assert set(wait_until_ended(kafka, intent.txns(), "batch 2's transactions to time out")) == {"CompleteAbort"}

    assert driver.run("available-now", 150, **short_timeout()) == 0, driver.log()
    out = check_exactly_once(kafka, output, partitions, expected)
    assert out.aborted  # what the timeouts threw away was written again


def test_tasks_slower_than_the_transaction_timeout_fail_cleanly_and_replay(kafka, tmp_path):
    partitions, count = 3, 300
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "slow", partitions, count)

    code = driver.run("available-now", 100, SLUICE_TEST_SINK_SLOW=f"1:{TIMEOUT_MS / 1000 + 3}",
                      **short_timeout())
    assert code == 1, driver.log()  # the query failed (awaitTermination raised), cleanly
    assert f"took longer than kafka.transaction.timeout.ms={TIMEOUT_MS}" in driver.log_path.read_text()
    assert next_batch(checkpoint) == 1
    out = Output(kafka, output, partitions)
    assert not out.open and len(Output.ids(out.committed)) == 100  # batch 0 only, nothing of 1
    assert last_intent(kafka, checkpoint).batch == 0

    assert driver.run("available-now", 100, **short_timeout()) == 0, driver.log()
    check_exactly_once(kafka, output, partitions, expected)


def test_abort_after_a_failed_commit_keeps_the_decided_transactions(kafka, tmp_path):
    """commit() fails after committing one of batch 1's transactions; Spark then calls
    abort(), which must leave the other decided ones open for the replay to commit."""
    partitions, count = 3, 300
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "abort", partitions, count)

    code = driver.run("available-now", 100, SLUICE_TEST_SINK_CRASH="mid-commit",
                      SLUICE_TEST_SINK_CRASH_BATCH="1", SLUICE_TEST_SINK_FAULT="raise")
    assert code == 1, driver.log()  # the query failed
    assert "mid-commit of batch 1 fails on purpose" in driver.log_path.read_text()
    assert "is aborting" in driver.log_path.read_text()  # Spark called the sink's abort()
    intent = last_intent(kafka, checkpoint)
    assert intent.batch == 1
    left = sorted(states(kafka, intent.txns()))
    print(f"batch 1 after the failed commit and abort(): {left}")
    assert left == ["CompleteCommit", "Ongoing", "Ongoing"]

    assert driver.run("available-now", 100) == 0, driver.log()
    out = check_exactly_once(kafka, output, partitions, expected)
    assert not out.aborted  # nothing decided was ever aborted


SINK_BATCHES = int(os.environ.get("SLUICE_SINK_BATCHES", "25"))


@pytest.mark.timeout(max(300, 4 * SINK_BATCHES))
def test_transactional_ids_stay_bounded_over_many_batches(kafka, tmp_path):
    """One transactional id per write slot and attempt, reused by every batch; the intents
    go to the one compacted topic every query shares, which never expires them by time
    or size, and the query has no topic of its own. SLUICE_SINK_BATCHES sets the number
    of micro-batches (`make test-long` runs 1,000)."""
    batches = SINK_BATCHES
    partitions = 2
    driver, output, expected, checkpoint = stream_case(kafka, tmp_path, "many", partitions, batches * partitions)
    driver.timeout = max(150, batches * 3)

    assert driver.run("available-now", partitions) == 0, driver.log()
    assert next_batch(checkpoint) == batches
    check_exactly_once(kafka, output, partitions, expected)
    query = query_id(checkpoint)
    with Client(kafka) as client:
        ids = sorted(t.transactional_id for t in client.admin.list_transactions()
                     if t.transactional_id.startswith(f"sluice-{query}"))
        configs = client.admin.describe_configs([(TOPIC_RESOURCE, SINK_INTENTS_TOPIC)])
        topics = [t for t in client.metadata().topics if t.startswith("__sluice")]
    print(f"{batches} batches: the coordinator holds {len(ids)} transactional ids of the query")
    run = last_intent(kafka, checkpoint).run
    assert ids == sorted([f"sluice-{query}"] + [f"sluice-{query}-{run}-{p}-0" for p in range(partitions)])
    topic_config = configs[(TOPIC_RESOURCE, SINK_INTENTS_TOPIC)]
    assert topics == [SINK_INTENTS_TOPIC]
    assert (topic_config["cleanup.policy"].value, topic_config["retention.ms"].value,
            topic_config["retention.bytes"].value) == ("compact,delete", "-1", "-1")


def test_a_second_driver_of_the_same_query_is_fenced(kafka, tmp_path):
    """Two drivers run one query (the second from a copy of the first's checkpoint, so
    Spark's own checkpoint files cannot tell them apart): whichever falls behind is
    fenced with an error naming the query, and no batch is written twice."""
    partitions, count = 2, 600
    source, output = unique("two-in"), unique("two-out")
    create_topics(kafka, partitions, source, output)
    expected = produce_input(kafka, source, partitions, count)
    first_cp, second_cp = str(tmp_path / "first"), str(tmp_path / "second")
    first = Driver(tmp_path / "a", kafka, source, output, first_cp, "exactly_once")
    second = Driver(tmp_path / "b", kafka, source, output, second_cp, "exactly_once")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert first.run("available-now", 100) == 0 and next_batch(first_cp) == 6
    shutil.copytree(first_cp, second_cp)
    produce_input(kafka, source, partitions, count)  # the same records again: each id twice

    codes = {}
    drivers = {"first": first, "second": second}
    threads = [threading.Thread(target=lambda n=n, d=d: codes.__setitem__(n, d.run("available-now", 40)))
               for n, d in drivers.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * first.timeout)
    fenced = sorted(n for n, d in drivers.items() if "is fenced" in d.log_path.read_text())
    print(f"two drivers of one query: exit codes {codes}, fenced {fenced}")
    # One is fenced (it wrote a batch the other decided first, or the other's commit
    # fenced its open transactions) and the other goes on to the end; or one only ever
    # completed the other's decisions. Never do both commit writes of their own, and
    # never are both fenced (as Spark keeps one of two runs sharing a checkpoint): the
    # one behind fences neither the other's intent append nor, in abort(), its open
    # transactions (test_spark_sink.py's test_a_driver_behind_* step through both).
    assert all(codes[n] == 1 for n in fenced)
    assert sorted(codes.values()) == ([0, 1] if fenced else [0, 0]), codes
    out = Output(kafka, output, partitions)
    committed = Output.ids(out.committed)
    lost = sum(1 for rid in expected if committed[rid] < 2)
    duplicated = sum(max(0, n - 2) for n in committed.values())
    print(f"lost {lost}, duplicated {duplicated}, left open {len(out.open)}, aborted {len(out.aborted)}")
    assert (lost, duplicated, len(out.open), len(out.plain)) == (0, 0, 0, 0)
    assert set(committed) == set(expected)  # each id twice: the input holds every record twice
