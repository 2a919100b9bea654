"""Waiting for a condition, bounded in time: polling, never a fixed sleep."""

from __future__ import annotations

import time

__all__ = ["wait_for", "wait_until"]


def wait_until(predicate, timeout: float, interval: float = 0.1):
    """The first truthy value of `predicate()`, polled every `interval` seconds; None once
    `timeout` seconds have passed without one."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(interval)


def wait_for(predicate, timeout: float = 15.0, what: str = "condition", interval: float = 0.1):
    """`wait_until`, where the condition not holding in time is a failed expectation (tests,
    benchmarks): an AssertionError naming `what`."""
    value = wait_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
    return value
