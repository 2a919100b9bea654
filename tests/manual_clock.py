"""A broker clock (see broker/clock.py) that moves only when a test advances it.

Tests give it to a Broker and call `await clock.advance(seconds)` instead of sleeping:
session timeouts, rebalance timeouts, transaction timeouts and the upkeep jobs then
happen at once, in the order their times fall due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from typing import Callable

# Turns of the event loop granted after each due timer: enough for what it woke (an
# upkeep job that runs and sleeps again, a handler that answers) to settle before the
# next timer falls due.
_SETTLE_TURNS = 5


class ManualTimer:
    def __init__(self, when: float, callback: Callable[[], None]):
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic: float = 1_000.0):
        self._wall_origin_ms = wall_ms
        self._monotonic_origin = monotonic
        self._elapsed = 0.0
        self._due: list[tuple[float, int, ManualTimer]] = []
        self._order = itertools.count()  # timers due at the same time run in call order

    def wall_ms(self) -> int:
        return self._wall_origin_ms + round(self._elapsed * 1000)

    def monotonic(self) -> float:
        return self._monotonic_origin + self._elapsed

    def call_later(self, delay: float, callback: Callable[[], None]) -> ManualTimer:
        timer = ManualTimer(self._elapsed + max(delay, 0.0), callback)
        heapq.heappush(self._due, (timer.when, next(self._order), timer))
        return timer

    async def sleep(self, seconds: float) -> None:
        woken = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()

    def stall(self, seconds: float) -> None:
        """Move time `seconds` forward with nothing run meanwhile, as for a process that
        stood still (SIGSTOP): the timers due on the way run late, at the next `advance`."""
        self._elapsed += seconds

    async def advance(self, seconds: float) -> None:
        """Move time `seconds` forward on the running loop, stopping at each timer that
        falls due on the way (in time order) to run it and let the loop settle."""
        target = self._elapsed + seconds
        while self._due and self._due[0][0] <= target:
            when, _, timer = heapq.heappop(self._due)
            if timer.cancelled:
                continue
            self._elapsed = max(self._elapsed, when)  # a timer overdue after a stall runs late
            timer.callback()
            await _settle()
        self._elapsed = target
        await _settle()


async def _settle() -> None:
    for _ in range(_SETTLE_TURNS):
        await asyncio.sleep(0)
