"""Log lines that one storm of events must not multiply: a full disk fails every
produce, exhausted descriptors fail every accept, a client may reconnect in a loop.
100 MB of accept errors in 20 s once filled a disk."""

from __future__ import annotations

import logging
import time


class ThrottledLog:
    """A log call that lets `burst` lines through per `window` seconds and counts the
    rest; the count goes out with the first line of the next window."""

    def __init__(self, logger: logging.Logger, level: int, burst: int = 5, window: float = 10.0):
        self.logger, self.level, self.burst, self.window = logger, level, burst, window
        self._window_end = 0.0
        self._logged = self._suppressed = 0

    def __call__(self, message: str, *args, exc_info=None) -> None:
        now = time.monotonic()
        if now >= self._window_end:
            if self._suppressed:
                self.logger.log(self.level, "(%d more like this in %.0f s: %s)", self._suppressed,
                                self.window, message % args)
            self._window_end, self._logged, self._suppressed = now + self.window, 0, 0
        if self._logged >= self.burst:
            self._suppressed += 1
            return
        self._logged += 1
        self.logger.log(self.level, message, *args, exc_info=exc_info)
