"""Kafka's asynchronous segment delete: a segment the log lets go of (retention,
DeleteRecords, a truncation, the cleaner's swap) has its files renamed `<name>.deleted`
at once and unlinked `file.delete.delay.ms` later, by a thread of its own.

The rename takes the segment's names from recovery and from a new segment of the same
base offset; the delay lets a fetch still reading the old files by name finish, and the
thread keeps a large unlink (a gigabyte takes some 0.3 s) off the event loop. What a stop
leaves renamed, the log's next start removes (`remove_leftovers`).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading

from broker.clock import Clock

log = logging.getLogger(__name__)

DELETED_SUFFIX = ".deleted"
# How long the thread waits at most before reading the clock again: a clock other than
# the system's (the tests' manual clock) moves without waking it.
_RECHECK_S = 0.5


class DeletedSegments:
    """The renamed files waiting for their delay, one process-wide thread removing them
    in the order they fall due."""

    def __init__(self):
        self._due: list[tuple[float, int, Clock, list[str]]] = []  # a heap: (due, n, clock, paths)
        self._numbering = itertools.count()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None

    def schedule(self, paths: list[str], delay_ms: int, clock: Clock) -> None:
        """Unlink `paths` once `delay_ms` have passed on `clock` (0: as soon as the thread
        gets to them)."""
        with self._wakeup:
            heapq.heappush(self._due, (clock.monotonic() + delay_ms / 1000, next(self._numbering), clock, paths))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="segment-deleter", daemon=True)
                self._thread.start()
            self._wakeup.notify()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while True:
                    if not self._due:
                        self._wakeup.wait()
                        continue
                    due, _, clock, paths = self._due[0]
                    wait = due - clock.monotonic()
                    if wait <= 0:
                        heapq.heappop(self._due)
                        break
                    self._wakeup.wait(min(wait, _RECHECK_S))
            _unlink(paths)


def _unlink(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass  # removed already: by a start-up, or a later segment renamed over it
        except OSError as exc:  # the next start removes it
            log.warning("cannot remove the deleted segment file %s: %s", path, exc)


def remove_leftovers(directory: str, names: list[str]) -> None:
    """Unlink the `.deleted` files a stop left among `names` (a listing of `directory`)."""
    _unlink([os.path.join(directory, name) for name in names if name.endswith(DELETED_SUFFIX)])


DELETED_SEGMENTS = DeletedSegments()
