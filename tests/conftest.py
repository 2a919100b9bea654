"""Shared fixtures. Servers bind to 127.0.0.1 only."""

from __future__ import annotations

import pytest


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
    from tests.broker_process import BrokerProcess

    with BrokerProcess(tmp_path / "data") as proc:
        yield proc


@pytest.fixture(scope="session")
def spark():
    """One real Spark session (local[2]) for the whole test run, with `sluice` registered."""
    import os
    import sys

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_connector

    session = (SparkSession.builder.master("local[2]").appName("sluice-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    spark_connector.register(session)
    yield session
    session.stop()
