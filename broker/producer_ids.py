"""Producer ids, unique for the life of the data directory.

Ids are handed out from blocks; the end of the current block is persisted before any
id from it is used, so a crash skips the rest of a block but never reuses an id.
"""

from __future__ import annotations

from broker.storage.checkpoint import write_atomically

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, path: str):
        self.path = path
        self._next = 0
        self._block_end = 0

    def _reserve_block(self) -> None:
        try:
            with open(self.path) as f:
                start = int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            start = max(self._block_end, 0)
        start = max(start, self._block_end)
        write_atomically(self.path, str(start + BLOCK_SIZE).encode())
        self._next, self._block_end = start, start + BLOCK_SIZE

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._reserve_block()
        pid = self._next
        self._next += 1
        return pid
