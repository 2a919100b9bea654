"""The broker's one clock: wall time, monotonic time and timers, injected.

Everything that expires by time (retention, group sessions and rebalances, transaction
timeouts, waiting produces and fetches, upkeep jobs) asks the clock it was given, so
that another implementation (the tests' manual clock) can move time forward at once
instead of sleeping. `SystemClock` is the real one.
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
