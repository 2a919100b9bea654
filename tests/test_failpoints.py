"""Fail points (broker/failpoints.py): a name in SLUICE_FAILPOINTS that is no fail point
stops the broker at start-up, as a process and embedded, with a message naming it and
the points there are; every point the broker's code names is registered, and every
registered point is named. The points themselves kill the broker in
tests/test_transactions.py's crash tests and tests/test_cluster_admin.py's replica deletion."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

from broker.failpoints import POINTS

REPO = pathlib.Path(__file__).resolve().parent.parent
BAD_SETTING = "txn-mid-commit-markers, no-such-point"


def run_with_fail_points(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=30,
                          cwd=REPO, env=dict(os.environ, SLUICE_FAILPOINTS=BAD_SETTING))


def assert_refused(message: str) -> None:
    assert "SLUICE_FAILPOINTS names no such fail point: no-such-point (" in message
    assert all(name in message for name in POINTS)


def test_an_unknown_fail_point_stops_the_broker_process(tmp_path):
    result = run_with_fail_points(["-m", "broker", "--data-dir", str(tmp_path / "data"),
                                   "--host", "127.0.0.1", "--port", "0"])
    assert result.returncode == 2
    assert result.stderr.startswith("sluice broker: ") and "Traceback" not in result.stderr
    assert_refused(result.stderr)
    assert "listening" not in result.stderr + result.stdout


def test_an_unknown_fail_point_stops_an_embedded_broker(tmp_path):
    script = ("import sys\n"
              "from broker.config import ConfigError\n"
              "from broker.embedded import EmbeddedBroker\n"
              "try:\n"
              "    EmbeddedBroker(sys.argv[1]).start().stop()\n"
              "except ConfigError as exc:\n"
              "    print(exc)\n"
              "    sys.exit(2)\n")
    result = run_with_fail_points(["-c", script, str(tmp_path / "data")])
    assert result.returncode == 2, result.stderr
    assert_refused(result.stdout)


def test_the_fail_points_in_the_code_are_the_registered_ones():
    named = set()
    for path in (REPO / "broker").rglob("*.py"):
        named |= set(re.findall(r'fail_point\("([^"]+)"\)', path.read_text()))
    assert named == set(POINTS)
