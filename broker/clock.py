"""The broker's one clock: wall time, monotonic time and timers, injected.

Everything that expires by time (retention, group sessions and rebalances, transaction
timeouts, waiting produces and fetches, upkeep jobs) asks the clock it was given, so
that another implementation (the tests' manual clock) can move time forward at once
instead of sleeping. `SystemClock` is the real one. `StallWatch`, on a clock, notices
when the event loop stood still; group sessions and rebalances run on its time, which
leaves such stalls out.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def wall_ms(self) -> int:
        """Milliseconds since the epoch: timestamps, retention, expiry written to disk."""

    def monotonic(self) -> float:
        """Seconds that never go backwards: deadlines and timeouts in memory."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run `callback` on the event loop once `delay` seconds have passed."""

    async def sleep(self, seconds: float) -> None:
        """Return once `seconds` have passed."""


class SystemClock:
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class StallWatch:
    """Notices the event loop standing still: the process stopped (SIGSTOP), a pause of
    the whole machine, a call that blocks the loop. Nobody could be heard meanwhile, yet
    the clock ran on: what times out on it (a group member's session, a rebalance) must
    not count that time, and a coordinator must make sure it still leads before acting
    again, since its ZooKeeper session may have expired meanwhile (broker.coordinator_runtime).

    Once started, `check()` runs every few hundred milliseconds (a broker upkeep task)
    and wherever the broker must not act on what it knew before a stall; a gap of more
    than `STALL_S` since the previous check is a stall, its part beyond `STALL_S` left
    out of `monotonic()` (already before a check notices it: time read first after a
    stall does not jump) and told to the `on_stall` listeners. Before `start()` (a
    broker starting, a coordinator tested alone) nothing counts as a stall."""

    STALL_S = 2.0

    def __init__(self, clock: Clock):
        self._clock = clock
        self._last: float | None = None  # the clock's monotonic() at the last check, once started
        self._stalled = 0.0  # seconds left out: the stalls noticed so far
        self._listeners: list[Callable[[float], None]] = []

    def start(self) -> None:
        """Watch from now on: the first gap is counted from here."""
        self._last = self._clock.monotonic()

    def on_stall(self, listener: Callable[[float], None]) -> None:
        """Call `listener(seconds)` when a check notices a stall that long."""
        self._listeners.append(listener)

    def _left_out(self, now: float) -> float:
        """The part of the gap since the last check beyond STALL_S."""
        return 0.0 if self._last is None else max(0.0, now - self._last - self.STALL_S)

    def check(self) -> float:
        """The length in seconds of the stall that ended now (0.0: none), the listeners
        told."""
        if self._last is None:
            return 0.0
        now = self._clock.monotonic()
        left_out = self._left_out(now)
        stall, self._last = now - self._last, now
        if not left_out:
            return 0.0
        self._stalled += left_out
        for listener in self._listeners:
            listener(stall)
        return stall

    def monotonic(self) -> float:
        """The clock's monotonic time without the stalls, the one under way included."""
        now = self._clock.monotonic()
        return now - self._stalled - self._left_out(now)
