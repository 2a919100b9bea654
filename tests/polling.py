"""Waiting for a condition in tests, bounded in time."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 15.0, what: str = "condition", interval: float = 0.1):
    """The first truthy value of `predicate()`, polled every `interval` seconds; an
    AssertionError naming `what` once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
