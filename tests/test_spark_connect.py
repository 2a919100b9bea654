"""The `sluice` source and exactly-once sink through Spark Connect.

A Spark Connect server (master local[2]) runs as a process of its own, started with the
pyspark package's `bin/spark-submit` (tests/spark_cluster.py), its gRPC service on
127.0.0.1. The client is tests/spark_cluster_job.py in a process of its own (a Connect
session beside the pytest process's classic one is not what a user runs): it registers
the data source through the Connect session (`spark_connector.register(spark)`, i.e.
`spark.dataSource.register`, which ships the class to the server), or leaves it to the
server's lookup of the `pyspark_sluice` module its Python workers import, and streams
Kafka -> Spark -> Kafka with `format("sluice")` both ways, exactly once by default. The
source, the sink and the query's Python UDF run in the server's Python workers. Each
input record must be in the output exactly once, committed, nothing left open.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("grpc")  # the Connect client: pyspark[connect]'s extras

from sluice.broker_process import BrokerProcess  # noqa: E402
from tests.spark_cluster import (DRIVER_TIMEOUT, ConnectServer, Driver, Markers,  # noqa: E402
                                 assert_loopback_only, check_exactly_once, job_config)
from tests.test_spark_sink import create_topics, produce_input, unique  # noqa: E402


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("connect-broker") / "data") as proc:
        yield proc.bootstrap_servers


@pytest.fixture
def connect_server(tmp_path):
    server = ConnectServer(tmp_path / "connect")
    try:
        started = time.monotonic()
        server.start()
        print(f"Spark Connect server at {server.url} after {time.monotonic() - started:.1f} s")
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("register", [True, False], ids=["registered", "found-by-pyspark"])
def test_stream_through_spark_connect_exactly_once(kafka, connect_server, tmp_path, register):
    partitions, count = 3, 900
    source, output = unique("connect-in"), unique("connect-out")
    create_topics(kafka, partitions, source, output)
    expected = produce_input(kafka, source, partitions, count)
    markers = Markers(tmp_path / "markers")
    config = job_config(kafka, tmp_path, source, output, markers, remote=connect_server.url, max_offsets=300,
                        register=register)
    client = Driver(tmp_path, config, connect_server.env, name="connect-client")
    started = time.monotonic()
    try:
        code = client.wait(DRIVER_TIMEOUT)
    finally:
        client.kill()
    print(f"client exit {code} after {time.monotonic() - started:.1f} s")
    assert code == 0, f"client exit {code}\n{client.log()}\n{connect_server.log()}"
    log = client.log(10**6)
    assert "pyspark.sql.connect.session.SparkSession" in log  # a Connect session, not a classic one
    # The UDF ran in the server's Python workers: 3 micro-batches of 3 tasks, one attempt each.
    assert sorted(m[:3] for m in markers.all()) == [(b, p, 0) for b in range(3) for p in range(3)]
    assert_loopback_only(connect_server.pids())
    check_exactly_once(kafka, output, partitions, expected)
