"""Shared fixtures. Servers bind to 127.0.0.1 only."""

from __future__ import annotations

import re

import pytest

from sluice.broker_process import BrokerProcess

# What asyncio prints when work was created and abandoned: a coroutine dropped before it
# ran, or a task garbage-collected while pending.
_ABANDONED_WORK = re.compile(r"coroutine '[^']+' was never awaited|Task was destroyed but it is pending")


@pytest.fixture(scope="session", autouse=True)
def broker_processes():
    """Every BrokerProcess started in this run, with how many of its output lines have
    been checked for abandoned work; the last lines are checked at the end of the run."""
    seen: dict[BrokerProcess, int] = {}
    original_start = BrokerProcess.start

    def start(self, *args, **kwargs):
        seen.setdefault(self, 0)
        return original_start(self, *args, **kwargs)

    BrokerProcess.start = start
    yield seen
    BrokerProcess.start = original_start
    _fail_on_abandoned_work(seen)


def _fail_on_abandoned_work(seen: dict) -> None:
    found = []
    for process, checked in seen.items():
        lines = process.output[:]  # the process's pump thread may still be appending
        found += [f"{process.data_dir}: {line.rstrip()}" for line in lines[checked:]
                  if _ABANDONED_WORK.search(line)]
        seen[process] = len(lines)
    if found:
        pytest.fail("a broker abandoned asyncio work:\n" + "\n".join(found), pytrace=False)


@pytest.fixture(autouse=True)
def no_abandoned_work_in_brokers(broker_processes):
    """Fails the test during which a broker process printed that it abandoned asyncio work
    ("coroutine ... was never awaited", "Task was destroyed but it is pending")."""
    yield
    _fail_on_abandoned_work(broker_processes)


@pytest.fixture(scope="session")
def mock_cluster():
    """librdkafka's built-in mock cluster: an independent Kafka implementation in C,
    listening on a loopback port, alive as long as the handle that created it."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    handle = confluent_kafka.Producer({"test.mock.num.brokers": 1, "client.id": "mock-cluster-owner"})
    brokers = handle.list_topics(timeout=10).brokers
    assert brokers, "mock cluster reported no brokers"
    broker = next(iter(brokers.values()))
    yield f"{broker.host}:{broker.port}"
    handle.flush(5)


@pytest.fixture
def broker(tmp_path):
    """A real broker process on a free loopback port, with its own data directory."""
    from sluice.broker_process import BrokerProcess

    with BrokerProcess(tmp_path / "data") as proc:
        yield proc


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """One real ZooKeeper server (sluice/zookeeper.py's, with tests/zookeeper.py's pause and
    resume) per test module, on a free loopback port; tests keep apart by chroot. Fails,
    never skips, when Java or the jars are missing or the server does not come up."""
    from tests.zookeeper import ZooKeeperServer, ZooKeeperUnavailable

    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    try:
        server.start()
    except ZooKeeperUnavailable as problem:
        raise pytest.fail.Exception(str(problem), pytrace=False) from None
    yield server
    server.stop()


# Why Spark's own Kafka connector is not on the shared session's classpath (Maven's
# reason), or None when it is; `spark_kafka` fails with it.
_spark_kafka_problem: str | None = None


def spark_kafka_jars() -> list[str]:
    """The jars Spark's Kafka connector (sluice/maven.py's SPARK_KAFKA_CONNECTOR) needs beyond
    what pyspark ships: its resolved runtime classpath less every artifact of which pyspark's
    own jars directory already has a version (Spark, Scala, Hadoop, compression, logging).
    Raises MavenUnavailable."""
    import os
    import re

    import pyspark

    from sluice import maven

    shipped = os.listdir(os.path.join(os.path.dirname(pyspark.__file__), "jars"))
    jars = []
    for path in maven.classpath([maven.SPARK_KAFKA_CONNECTOR]):
        artifact = path.parent.parent.name  # .../<artifactId>/<version>/<file>.jar
        pattern = re.compile(re.escape(artifact) + r"-\d")
        if not any(pattern.match(name) for name in shipped):
            jars.append(str(path))
    return jars


@pytest.fixture(scope="session")
def spark():
    """One real Spark session (local[2]) for the whole test run, with `sluice` registered
    and Spark's own Kafka connector (`format("kafka")`) on the classpath when Maven can
    provide it; when it cannot, the other Spark tests run all the same and `spark_kafka`
    fails with Maven's reason."""
    import os
    import sys

    global _spark_kafka_problem
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector
    from sluice import maven

    builder = (SparkSession.builder.master("local[2]").appName("sluice-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2"))
    try:
        builder = builder.config("spark.jars", ",".join(spark_kafka_jars()))
    except maven.MavenUnavailable as problem:
        _spark_kafka_problem = str(problem)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    yield session
    session.stop()


@pytest.fixture
def spark_kafka(spark):
    """The shared Spark session, for tests of Spark's own `format("kafka")`: fails (never
    skips) when its connector could not be put on the classpath."""
    if _spark_kafka_problem is not None:
        pytest.fail(f"Spark's Kafka connector is not on the classpath: {_spark_kafka_problem}")
    return spark


@pytest.fixture
def zk(zookeeper):
    """A kazoo session with the module's ZooKeeper, to read and write znodes as a test."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zookeeper.hosts, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()
