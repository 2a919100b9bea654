"""What the examples share: a broker to talk to, and a Spark session with `sluice`."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile


@contextlib.contextmanager
def broker_from_args(description: str):
    """Yields bootstrap servers: `--bootstrap-server` if given, else an embedded broker."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bootstrap-server", help="an existing Kafka-compatible broker; "
                        "default: start an embedded Sluice broker")
    args = parser.parse_args()
    if args.bootstrap_server:
        yield args.bootstrap_server
        return
    from broker.embedded import EmbeddedBroker

    with tempfile.TemporaryDirectory(prefix="sluice-example-") as data_dir, \
            EmbeddedBroker(data_dir) as broker:
        yield broker.bootstrap_servers


def spark_session(name: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_connector

    spark = (SparkSession.builder.master("local[2]").appName(name)
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark_connector.register(spark)  # makes format("sluice") available
    return spark
