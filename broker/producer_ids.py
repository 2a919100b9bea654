"""Producer ids, unique for the life of the data directory (single node) or the cluster.

Ids are handed out from blocks. On the single node the end of the current block is
persisted in the data directory before any id from it is used, so a crash skips the rest
of a block but never reuses an id; a cluster broker claims blocks in ZooKeeper
(`broker.cluster.membership`).
"""

from __future__ import annotations

from typing import Callable

from broker.storage.checkpoint import write_atomically

BLOCK_SIZE = 1000


def local_block_reserver(path: str) -> Callable[[int], int]:
    """The single node's blocks: the first id of the next block of `size`, the block's end
    written to `path` first."""
    claimed_end = 0

    def reserve(size: int) -> int:
        nonlocal claimed_end
        try:
            with open(path) as f:
                start = int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            start = claimed_end
        start = max(start, claimed_end)
        write_atomically(path, str(start + size).encode())
        claimed_end = start + size
        return start

    return reserve


class ProducerIdAllocator:
    def __init__(self, reserve: Callable[[int], int]):
        """`reserve(size)`: the first id of a newly claimed block of `size` ids (raising
        BrokerError when none can be claimed now)."""
        self._reserve = reserve
        self._next = 0
        self._block_end = 0

    def allocate(self) -> int:
        if self._next >= self._block_end:
            start = self._reserve(BLOCK_SIZE)
            self._next, self._block_end = start, start + BLOCK_SIZE
        pid = self._next
        self._next += 1
        return pid
