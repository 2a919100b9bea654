"""Requests waiting on partitions: fetches waiting for data, acks=all produces waiting
for the high watermark.

One place wakes them: a `Partition` calls `wake` when its high watermark moves (which is
also when new data and a new last stable offset become visible). A waiter checks its own
condition before every wait, the first included (a wake-up before it registered reached
nobody: a waiting request's task starts after its handler returned), and waits again
until its deadline, so a wake-up that is not for it costs one check. Deadlines come from
the broker's clock.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Hashable, Iterable

from broker.clock import Clock


class DelayedOperations:
    def __init__(self, clock: Clock):
        self._clock = clock
        self._waiters: dict[Hashable, set[asyncio.Future]] = defaultdict(set)

    def wake(self, key: Hashable) -> None:
        """Everything waiting on `key` (a (topic, partition)) checks its condition again."""
        waiters = self._waiters.pop(key, None)
        if waiters:
            for future in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait(self, keys: Iterable[Hashable], timeout: float) -> None:
        """Sleep until one of `keys` is woken or `timeout` seconds pass on the clock."""
        keys = list(keys)
        future = asyncio.get_running_loop().create_future()
        timer = self._clock.call_later(timeout, lambda: future.done() or future.set_result(None))
        for key in keys:
            self._waiters[key].add(future)
        try:
            await future
        finally:
            timer.cancel()
            for key in keys:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[key]
