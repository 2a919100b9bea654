"""Every example runs, as a user would run it."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_example(module: str, timeout: float = 240) -> str:
    done = subprocess.run([sys.executable, "-m", module], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_demo():
    out = run_example("examples.demo")
    assert "after restart: 20000 records, identical: True" in out
