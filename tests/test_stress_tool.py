"""tools/stress.py (`make stress`): each test runs in a fresh pytest up to --runs times
while busy processes load the CPU, stops at its first failure, and the exit status says
whether every test passed every run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

TOOL = Path(__file__).resolve().parent.parent / "tools" / "stress.py"


def stress(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          cwd=tmp_path, timeout=100)


def test_runs_each_test_in_a_row_and_stops_a_test_at_its_first_failure(tmp_path):
    (tmp_path / "test_cases.py").write_text(
        "import pathlib\n"
        "def test_passes():\n    pass\n"
        "def test_fails_on_its_second_run():\n"
        "    marker = pathlib.Path('ran-once')\n"
        "    if marker.exists():\n        raise AssertionError('second run')\n"
        "    marker.write_text('')\n")
    done = stress(tmp_path, "--runs", "3", "--burners", "1",
                  "test_cases.py::test_passes", "test_cases.py::test_fails_on_its_second_run")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "test_cases.py::test_passes: 3 of 3 passed in a row under 1 burners" in done.stdout
    assert "FAILED test_cases.py::test_fails_on_its_second_run at run 2 (after 1 passed in a row)" \
        in done.stdout
    assert "AssertionError: second run" in done.stdout


def test_every_run_passing_exits_0(tmp_path):
    (tmp_path / "test_cases.py").write_text("def test_passes():\n    pass\n")
    done = stress(tmp_path, "--runs", "2", "--burners", "0", "test_cases.py::test_passes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2/2 in a row" in done.stdout
