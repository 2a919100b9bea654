"""A bound on a rate (bytes a second), measured as Kafka measures its quotas: the
replication throttles (`leader.replication.throttled.rate`,
`follower.replication.throttled.rate`) and the log cleaner's I/O
(`log.cleaner.io.max.bytes.per.second`) use it, and client quotas can.

What is recorded goes into sampled windows (Kafka's replication quotas: 11 of 1 s): a
window starts with the first record after the previous one ended, and windows that
began `samples` × `window_s` ago or earlier are forgotten. The rate is what the windows
hold over the time since the oldest began, counted as one window at least (Kafka's
SimpleRate), so an idle quota allows a window's worth at once. The clock is the broker's.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

from broker.clock import Clock


class Quota:
    def __init__(self, clock: Clock, bound: Callable[[], float], samples: int = 11, window_s: float = 1.0):
        """`bound()`: the rate allowed now (read at each check: a dynamic config)."""
        self._clock = clock
        self._bound = bound
        self._samples = samples
        self._window_s = window_s
        self._windows: deque[list[float]] = deque()  # [start, amount], the oldest first

    def record(self, amount: float) -> None:
        now = self._clock.monotonic()
        self._forget(now)
        windows = self._windows
        if not windows or now >= windows[-1][0] + self._window_s:
            windows.append([now, 0.0])
            if len(windows) > self._samples:
                windows.popleft()
        windows[-1][1] += amount

    def _forget(self, now: float) -> None:
        horizon = now - self._samples * self._window_s
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()

    def _measured(self) -> tuple[float, float]:
        """(amount the windows hold, seconds since the oldest began)."""
        now = self._clock.monotonic()
        self._forget(now)
        total = sum(amount for _, amount in self._windows)
        return total, now - self._windows[0][0] if self._windows else 0.0

    def rate(self) -> float:
        total, elapsed = self._measured()
        return total / max(elapsed, self._window_s)

    def headroom(self) -> float:
        """How much may be recorded now with the rate staying within the bound; negative
        once past it (Kafka's quota violation)."""
        total, elapsed = self._measured()
        return self._bound() * max(elapsed, self._window_s) - total

    def throttle_time(self) -> float:
        """Seconds until the rate is back within the bound with nothing more recorded
        (0: it is); Kafka's throttle time."""
        total, elapsed = self._measured()
        bound = self._bound()
        if total <= bound * max(elapsed, self._window_s):
            return 0.0
        return total / bound - elapsed if bound > 0 else math.inf
