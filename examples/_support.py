"""What the examples share: a broker to talk to, and a Spark session with `sluice`."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile

# Spark's logging for the examples: errors only (no start-up WARN lines).
LOG4J2_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

# The one line the JVM itself prints at start-up: Spark's launcher always adds
# --add-modules=jdk.incubator.vector and Java warns of incubator modules on stderr, with
# no option to turn that off.
JVM_NOISE = b"WARNING: Using incubator modules:"

# Copies the JVM's stderr to ours, line by line, leaving out JVM_NOISE, until the JVM and
# the processes it started have all closed it. A process of its own rather than a thread
# of the example, so that whatever the JVM prints while the example exits still shows.
_STDERR_COPY = f"""
import signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the example; its errors still show
for line in sys.stdin.buffer:
    if not line.startswith({JVM_NOISE!r}):
        sys.stderr.buffer.write(line)
        sys.stderr.buffer.flush()
"""
_stderr_copies = []


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


@contextlib.contextmanager
def _children_stderr_through_copy():
    """Processes started inside (the JVM) write their stderr through _STDERR_COPY."""
    read_end, write_end = os.pipe()
    _stderr_copies.append(subprocess.Popen([sys.executable, "-c", _STDERR_COPY], stdin=read_end))
    os.close(read_end)
    sys.stderr.flush()
    own_stderr = os.dup(2)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(own_stderr, 2)
        os.close(own_stderr)


def spark_session(name: str):
    """A local Spark session that prints nothing but errors (no start-up warnings, no
    progress bars between the example's lines), with format("sluice") registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the driver binds to loopback only
    from pyspark.sql import SparkSession

    import spark_connector

    builder = (SparkSession.builder.master("local[2]").appName(name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.extraJavaOptions", f'"-Dlog4j2.configurationFile={LOG4J2_CONFIG}"')
               .config("spark.sql.shuffle.partitions", "2"))
    with _children_stderr_through_copy():
        spark = builder.getOrCreate()
    spark_connector.register(spark)  # makes format("sluice") available
    return spark
