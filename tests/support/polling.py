"""Waiting for what a test expects: `sluice.polling.wait_until`, where the condition not
holding in time is a failed expectation."""

from __future__ import annotations

from sluice.polling import wait_until

__all__ = ["wait_for"]


def wait_for(predicate, timeout: float = 15.0, what: str = "condition", interval: float = 0.1):
    """The first truthy value of `predicate()`; an AssertionError naming `what` once
    `timeout` seconds have passed without one."""
    value = wait_until(predicate, timeout, interval)
    if not value:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
    return value
