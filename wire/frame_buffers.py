"""Buffers for frames too large for a connection's read buffer, read into in place, for
the broker's listener and the client alike.

A fresh anonymous mapping faults in every page as a frame is read into it (about half of
the broker's CPU on 1 MB produce requests), so a few buffers are kept and lent again. A
kept buffer is lent again only once no view of it remains: its holders (handlers,
decoded responses) are only ever given views, and `mmap.resize` refuses while one
exists.
"""

from __future__ import annotations

import collections
import mmap


class FrameBuffers:
    def __init__(self, keep: int, max_kept_bytes: int):
        self._keep = keep
        self._max_kept_bytes = max_kept_bytes
        self._kept: collections.deque[mmap.mmap] = collections.deque()  # oldest first

    def lend(self, size: int) -> mmap.mmap:
        """A buffer of exactly `size` bytes, to read a frame into: a kept one no view
        refers to any more, else a new mapping. It is not lent again until `keep`."""
        for frame in self._kept:
            try:
                frame.resize(size)
            except BufferError:
                continue
            self._kept.remove(frame)
            return frame
        return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)

    def keep(self, frame: mmap.mmap) -> memoryview:
        """The filled `frame` as the view to hand over; the buffer is kept for a later
        `lend` (the oldest let go past `keep` buffers; large ones are not kept)."""
        if len(frame) <= self._max_kept_bytes:
            self._kept.append(frame)
            if len(self._kept) > self._keep:
                self._kept.popleft()
        return memoryview(frame)
