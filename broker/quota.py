"""A bound on a rate (bytes a second), measured as Kafka measures its quotas: the
replication throttles (`leader.replication.throttled.rate`,
`follower.replication.throttled.rate`), the log cleaner's I/O
(`log.cleaner.io.max.bytes.per.second`) and the client quotas (broker.client_quotas)
use it. Its windows also give the client quotas' throttle-time metric (Kafka's Avg).

What is recorded goes into sampled windows (Kafka's replication quotas: 11 of 1 s): a
window starts with the first record after the previous one ended, and windows that
began `samples` × `window_s` ago or earlier are forgotten. The rate is what the windows
hold over the time since the oldest began, counted as one window at least (Kafka's
SimpleRate), so an idle quota allows a window's worth at once. Client quotas measure
with Kafka's Rate instead (`full_windows`): that time counts as `samples` - 1 whole
windows at least plus the part of the current one, so a client new to its quota may
send that many windows' worth at once, and is held back until they are forgotten; its
throttle time is Kafka's, (rate - bound) / bound × that time. The clock is the broker's.

Controller mutations (KIP-599) are bounded by Kafka's TokenBucket instead: it holds
`samples` × `window_s` seconds' worth of the bound at most, starts full, refills at the
bound, and what is recorded is taken out of it, which may leave it below 0; the throttle
time is then the time it takes to refill to 0.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Callable

from broker.clock import Clock


class Quota:
    def __init__(self, clock: Clock, bound: Callable[[], float], samples: int = 11, window_s: float = 1.0,
                 full_windows: bool = False):
        """`bound()`: the rate allowed now (read at each check: a dynamic config)."""
        self._clock = clock
        self._bound = bound
        self._samples = samples
        self._window_s = window_s
        self._full_windows = full_windows
        self._windows: deque[list[float]] = deque()  # [start, amount, records], the oldest first

    def record(self, amount: float) -> None:
        now = self._clock.monotonic()
        self._forget(now)
        windows = self._windows
        if not windows or now >= windows[-1][0] + self._window_s:
            windows.append([now, 0.0, 0])
            if len(windows) > self._samples:
                windows.popleft()
        windows[-1][1] += amount
        windows[-1][2] += 1

    def _forget(self, now: float) -> None:
        horizon = now - self._samples * self._window_s
        while self._windows and self._windows[0][0] <= horizon:
            self._windows.popleft()

    def _measured(self) -> tuple[float, float]:
        """(amount the windows hold, seconds since the oldest began)."""
        now = self._clock.monotonic()
        self._forget(now)
        total = sum(amount for _, amount, _ in self._windows)
        return total, now - self._windows[0][0] if self._windows else 0.0

    def _span(self, elapsed: float) -> float:
        """The time the windows' amount is divided by: Kafka's SimpleRate or Rate."""
        if self._full_windows:
            short = self._samples - 1 - int(elapsed // self._window_s)
            return elapsed + max(short, 0) * self._window_s
        return max(elapsed, self._window_s)

    def idle(self) -> bool:
        """Nothing recorded within the windows."""
        self._forget(self._clock.monotonic())
        return not self._windows

    def rate(self) -> float:
        total, elapsed = self._measured()
        return total / self._span(elapsed)

    def average(self) -> float:
        """What the windows hold over the number of records in them (Kafka's Avg); NaN
        when they hold none."""
        total, _ = self._measured()
        records = sum(count for _, _, count in self._windows)
        return total / records if records else math.nan

    def headroom(self) -> float:
        """How much may be recorded now with the rate staying within the bound; negative
        once past it (Kafka's quota violation)."""
        total, elapsed = self._measured()
        return self._bound() * self._span(elapsed) - total

    def throttle_time(self) -> float:
        """0 while the rate is within the bound; past it, Kafka's throttle time: with
        SimpleRate the seconds until the rate is back within the bound with nothing more
        recorded, with Rate (rate - bound) / bound × its span."""
        total, elapsed = self._measured()
        bound = self._bound()
        span = self._span(elapsed)
        if total <= bound * span:
            return 0.0
        if bound <= 0:
            return math.inf
        return total / bound - (span if self._full_windows else elapsed)


class TokenBucket:
    def __init__(self, clock: Clock, bound: Callable[[], float], samples: int, window_s: float):
        """`bound()`: the rate allowed now (a quota, read at each use)."""
        self._clock = clock
        self._bound = bound
        self._burst_s = samples * window_s
        self._tokens: float | None = None  # None: never used, full
        self._refilled = 0.0

    def _refill(self) -> tuple[float, float]:
        """(the bound, the most the bucket holds), the bucket refilled up to now."""
        now, bound = self._clock.monotonic(), self._bound()
        burst = bound * self._burst_s
        self._tokens = burst if self._tokens is None else min(burst, self._tokens + bound * (now - self._refilled))
        self._refilled = now
        return bound, burst

    def record(self, amount: float) -> None:
        _, burst = self._refill()
        self._tokens = min(burst, self._tokens - amount)

    def idle(self) -> bool:
        """Full again: as if nothing had been recorded."""
        _, burst = self._refill()
        return self._tokens >= burst

    def tokens(self) -> float:
        """What the bucket holds now (below 0 while throttling)."""
        self._refill()
        return self._tokens

    def throttle_time(self) -> float:
        """0 while tokens are left; below 0, the seconds until it is back at 0."""
        bound, _ = self._refill()
        if self._tokens >= 0:
            return 0.0
        return math.inf if bound <= 0 else -self._tokens / bound
