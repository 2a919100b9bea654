"""Waiting for a condition, bounded in time: polling, never a fixed sleep (`sluice cluster`
waits so for its processes; the tests' `wait_for` is built on it)."""

from __future__ import annotations

import time

__all__ = ["wait_until"]


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
