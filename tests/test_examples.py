"""Every example runs as a user would run it (its own process, embedded broker)."""

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example_outputs(module: str, timeout: float = 300) -> tuple[str, str]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    done = subprocess.run([sys.executable, "-m", module], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout, done.stderr


def run_example(module: str, timeout: float = 300) -> str:
    return run_example_outputs(module, timeout)[0]


def test_demo_counts_every_view_and_reprocesses_them():
    out, err = run_example_outputs("examples.demo")
    # What a user sees is the story alone: no warnings from Spark or the JVM at start-up,
    # and no progress bars between the demo's lines.
    for stream in (out, err):
        assert not [line for line in stream.splitlines() if "WARN" in line], stream
        assert "[Stage" not in stream and "log4j" not in stream, stream
    counts = [int(n) for n in re.findall(r"^   /\S*\s+(\d+)$", out, re.M)]
    assert sum(counts) == 20_000, out
    assert "the batch job read 20000 page views again (the stream counted 20000)" in out
    assert re.search(r"^   its page of group page-view-counter: state Empty, 0 members, total lag 20000$", out, re.M), out


def test_streaming_etl_parquet():
    assert "wrote 900 orders" in run_example("examples.streaming_etl_parquet")


def test_exactly_once_pipeline():
    out = run_example("examples.exactly_once_pipeline")
    assert re.search(r"^200 large orders copied in \d+ micro-batches \(expected 200\)$", out, re.M), out


def test_reprocess_history():
    out = run_example("examples.reprocess_history")
    assert "reprocessed 28 clicks from the last 15 minutes" in out


@pytest.mark.skipif(not os.path.exists("/usr/bin/kcat"), reason="kcat is not installed")
def test_plain_clients():
    out = run_example("examples.plain_clients")
    assert "got 10 messages" in out and "kcat read 11 messages back" in out
