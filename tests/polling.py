"""Tests wait with sluice/polling.py's `wait_for` (bounded polling, an AssertionError naming
the condition on time-out); this name stays for the many tests that import it here."""

from sluice.polling import wait_for

__all__ = ["wait_for"]
