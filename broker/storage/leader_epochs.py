"""A partition's leader epoch history: `leader-epoch-checkpoint`, in Kafka's format.

Each entry is (epoch, start offset): the first offset appended under that epoch. The
file holds a version line (0), a count line, then `epoch start_offset` lines; it is
rewritten atomically whenever the history changes, which is rare (a new epoch's first
append, truncation, the log start moving past an entry).

`end_offset_for` answers OffsetForLeaderEpoch with Kafka's rules: for the latest epoch
the log end offset; for an older one the start offset of the next higher epoch, paired
with the largest epoch at or below the one asked; for an epoch below every entry, the
start of the first entry, paired with the epoch asked; for one above all, or -1,
(-1, -1).
"""

from __future__ import annotations

import logging
from bisect import bisect_right

from broker.storage.checkpoint import write_atomically

log = logging.getLogger("sluice.storage")

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, path: str):
        self.path = path
        self.entries: list[tuple[int, int]] = []  # (epoch, start offset), both ascending
        self.pending_from: int | None = None  # the first entry's start not yet in the file

    def load(self) -> bool:
        """Read the file; returns False when it is absent or unreadable (then empty)."""
        try:
            with open(self.path) as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return False
        try:
            if lines[0] != "0" or int(lines[1]) != len(lines) - 2:
                raise ValueError("bad version or count")
            entries = [tuple(int(field) for field in line.split(" ")) for line in lines[2:]]
            if any(len(e) != 2 for e in entries) or any(
                    a[0] >= b[0] or a[1] >= b[1] for a, b in zip(entries, entries[1:])):
                raise ValueError("entries not ascending")
        except (IndexError, ValueError) as exc:
            log.warning("%s is unreadable (%s): rebuilt from the log", self.path, exc)
            return False
        self.entries = entries
        return True

    def write(self) -> None:
        lines = ["0", str(len(self.entries))] + [f"{e} {s}" for e, s in self.entries]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())
        self.pending_from = None

    def sync(self) -> None:
        """Write the entries `assign` kept in memory."""
        if self.pending_from is not None:
            self.write()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record in memory, until `sync`, that `epoch` begins at `start_offset`, if it is
        newer than the last; whether it was. An older epoch that begins there too (it has
        no records) is replaced, as in Kafka."""
        if self.entries and epoch <= self.entries[-1][0]:
            return False
        self.entries = [e for e in self.entries if e[1] < start_offset]
        self.entries.append((epoch, start_offset))
        if self.pending_from is None or start_offset < self.pending_from:
            self.pending_from = start_offset
        return True

    def epoch_for(self, offset: int) -> int:
        """The epoch under which `offset` was written (-1 when none is known)."""
        i = bisect_right([s for _, s in self.entries], offset) - 1
        return self.entries[i][0] if i >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self.latest_epoch:
            return epoch, log_end_offset
        epochs = [e for e, _ in self.entries]
        higher = bisect_right(epochs, epoch)
        if higher == len(self.entries):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            return epoch, self.entries[0][1]
        return self.entries[higher - 1][0], self.entries[higher][1]

    def clear(self) -> None:
        """The log was emptied: no epoch is known any more."""
        self.entries = []
        self.write()

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was cut at `end_offset`: epochs starting there or later are gone."""
        kept = [e for e in self.entries if e[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self.write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: earlier epochs go, the one covering it
        starts there."""
        below = [i for i, (_, s) in enumerate(self.entries) if s < start_offset]
        if not below:
            return
        last = below[-1]
        following = self.entries[last + 1:]
        if following and following[0][1] == start_offset:
            self.entries = following
        else:
            self.entries = [(self.entries[last][0], start_offset)] + following
        self.write()
