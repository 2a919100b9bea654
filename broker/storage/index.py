"""Sparse indexes of a log segment, in Kafka's on-disk layout.

`OffsetIndex` (`.index`): 8-byte entries, int32 offset relative to the segment's base
offset and int32 byte position in the `.log` file, one entry per
`log.index.interval.bytes` of appended data. `TimeIndex` (`.timeindex`): 12-byte
entries, int64 timestamp and int32 relative offset, added when a batch raises the
segment's largest timestamp. Both are append-only; lookups are binary searches over
in-memory copies, loaded lazily so that opening a log does not read its indexes.
`TransactionIndex` (`.txnindex`): the segment's aborted transactions, for read_committed
fetches.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_right
from typing import NamedTuple

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


def _append_whole(path: str, data: bytes, size_before: int, sync: bool = False) -> None:
    """Append `data` to the file that should be `size_before` bytes long (and fsync it
    when `sync`). A failed write (a full disk) is cut off again, and the bytes an earlier
    failed one left are cut off first, so the file only ever holds whole entries."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        if os.fstat(fd).st_size != size_before:
            os.ftruncate(fd, size_before)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])
        if sync:
            os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, size_before)
        except OSError:
            pass  # the next append cuts it off
        raise
    finally:
        os.close(fd)


class _SparseIndex:
    """An append-only file of fixed-size (key, value) entries with keys ascending."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, empty: bool = False):
        """`empty`: known to have no file yet, so none is read."""
        self.path = path
        self.base_offset = base_offset
        self._keys: array | None = array("q") if empty else None  # loaded on first use
        self._values: array | None = array("q") if empty else None
        self._pending = bytearray()

    def _load(self) -> None:
        keys, values = array("q"), array("q")
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            data = b""
        usable = len(data) - len(data) % self.entry.size  # a torn last entry is dropped
        for key, value in self.entry.iter_unpack(data[:usable]):
            if keys and key <= keys[-1]:
                break  # not ascending: the rest is garbage from an unclean stop
            keys.append(key)
            values.append(value)
        self._keys, self._values = keys, values

    def _entries_on_disk(self) -> list[tuple[int, int]] | str:
        """Every entry in the file, or why they cannot be read."""
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        if len(data) % self.entry.size:
            return f"torn entry ({len(data)} bytes)"
        return list(self.entry.iter_unpack(data))

    @property
    def entries(self) -> int:
        if self._keys is None:
            self._load()
        return len(self._keys)

    def last(self) -> tuple[int, int] | None:
        if self._keys is None:
            self._load()
        return (self._keys[-1], self._values[-1]) if self._keys else None

    def _append(self, key: int, value: int) -> None:
        if self._keys is None:
            self._load()
        if self._keys and key <= self._keys[-1]:
            return
        self._keys.append(key)
        self._values.append(value)
        self._pending += self.entry.pack(key, value)

    def _floor(self, key: int) -> int:
        """Index of the last entry whose key is <= `key`, or -1."""
        if self._keys is None:
            self._load()
        return bisect_right(self._keys, key) - 1

    def flush(self, sync: bool = True) -> None:
        """Append the pending entries and fsync them unless not `sync` (a segment flush
        makes its indexes as durable as its data); after a failed write they stay pending."""
        if self._pending:
            # A copy: a view of `_pending` kept by the exception of a failed write would
            # stop it from growing.
            _append_whole(self.path, bytes(self._pending),
                          len(self._keys) * self.entry.size - len(self._pending), sync=sync)
            self._pending.clear()

    def reset(self) -> None:
        """Drop every entry (before rebuilding the index from the log)."""
        self._keys, self._values = array("q"), array("q")
        self._pending.clear()
        with open(self.path, "wb"):
            pass

    def truncate_after(self, key: int) -> None:
        """Drop entries with key > `key`."""
        keep = self._floor(key) + 1
        if keep == len(self._keys):
            return
        self.flush()
        del self._keys[keep:]
        del self._values[keep:]
        os.truncate(self.path, keep * self.entry.size)

    def delete(self) -> None:
        self._pending.clear()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class OffsetIndex(_SparseIndex):
    entry = _OFFSET_ENTRY

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `offset`; else the segment start."""
        i = self._floor(offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self.truncate_after(offset - self.base_offset - 1)

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before byte `position`; else the
        segment start."""
        if self._keys is None:
            self._load()
        i = bisect_right(self._values, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past `position` (the log was cut there)."""
        if self._keys is None:
            self._load()
        keep = len(self._values)
        while keep and self._values[keep - 1] >= position:
            keep -= 1
        if keep < len(self._keys):
            self.truncate_after(self._keys[keep - 1] if keep else -1)


    def problem(self, log_size: int, end_offset: int | None) -> str | None:
        """Why the file cannot index a log of `log_size` bytes with offsets below
        `end_offset` (None: unbounded); None when it can. A log with data has an entry
        at position 0."""
        entries = self._entries_on_disk()
        if isinstance(entries, str):
            return entries
        if log_size and (not entries or entries[0][1] != 0):
            return "no entry for position 0"
        previous_key = previous_position = -1
        for key, position in entries:
            if key <= previous_key or position <= previous_position:
                return f"entry ({key}, {position}) does not ascend"
            if position >= log_size:
                return f"position {position} is past the log's {log_size} bytes"
            if end_offset is not None and self.base_offset + key >= end_offset:
                return f"offset {self.base_offset + key} is past the segment's end {end_offset}"
            previous_key, previous_position = key, position
        return None


class TimeIndex(_SparseIndex):
    entry = _TIME_ENTRY

    def append(self, timestamp: int, offset: int) -> None:
        self._append(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> int:
        """Offset to start scanning from for the first record at or after `timestamp`:
        the offset of the last entry whose timestamp is below it, else the segment start."""
        i = self._floor(timestamp - 1)
        return self.base_offset if i < 0 else self.base_offset + self._values[i]

    def max_timestamp(self) -> tuple[int, int] | None:
        """(largest indexed timestamp, its offset), or None for an empty index."""
        last = self.last()
        return None if last is None else (last[0], self.base_offset + last[1])

    def problem(self, log_size: int, end_offset: int | None) -> str | None:
        """Why the file cannot index a log of `log_size` bytes with offsets below
        `end_offset` (None: unbounded); None when it can. A log with data has an entry."""
        entries = self._entries_on_disk()
        if isinstance(entries, str):
            return entries
        if log_size and not entries:
            return "no entries"
        if not log_size and entries:
            return "entries for an empty log"
        previous_timestamp, previous_offset = -(1 << 63), 0
        for timestamp, relative in entries:
            if timestamp <= previous_timestamp or relative < previous_offset:
                return f"entry ({timestamp}, {relative}) does not ascend"
            if end_offset is not None and self.base_offset + relative >= end_offset:
                return f"offset {self.base_offset + relative} is past the segment's end {end_offset}"
            previous_timestamp, previous_offset = timestamp, relative
        return None

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        if self._keys is None:
            self._load()
        keep = len(self._values)
        while keep and self._values[keep - 1] + self.base_offset >= offset:
            keep -= 1
        if keep < len(self._keys):
            self.truncate_after(self._keys[keep - 1] if keep else -(1 << 63))


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int  # the partition's last stable offset once this transaction ended


_TXN_ENTRY = struct.Struct(">hqqqq")  # version 0, then the four fields above
_TXN_ENTRY_VERSION = 0


class TransactionIndex:
    """`.txnindex`: the aborted transactions whose ABORT marker lies in the segment, in
    Kafka's layout (34-byte entries: int16 version 0, int64 producer id, first offset,
    last offset, last stable offset). Created on the first entry; written at once."""

    def __init__(self, path: str):
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._written = 0  # how many of the entries the file holds
        self._synced = 0  # how many of them were fsynced

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            usable = len(data) - len(data) % _TXN_ENTRY.size  # a torn last entry is dropped
            entries = []
            for version, *fields in _TXN_ENTRY.iter_unpack(data[:usable]):
                if version != _TXN_ENTRY_VERSION:
                    break
                entries.append(AbortedTxn(*fields))
            self._entries = entries
            self._written = self._synced = len(entries)
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction. Fetches see it at once; should the write fail
        (a full disk), `flush` writes it later, and fails until it can."""
        entries = self.entries
        if entries and entry.last_offset <= entries[-1].last_offset:
            return  # already indexed (a replay of what is on disk)
        entries.append(entry)
        try:
            self._write_unwritten()
        except OSError:
            pass  # its marker is in the log already: the entry waits for flush

    def _write_unwritten(self) -> None:
        if self._written < len(self.entries):
            _append_whole(self.path, b"".join(_TXN_ENTRY.pack(_TXN_ENTRY_VERSION, *e)
                                              for e in self._entries[self._written:]),
                          self._written * _TXN_ENTRY.size)
            self._written = len(self._entries)

    def reset(self) -> None:
        """Drop every entry (before rebuilding the index from the log)."""
        self._entries = []
        self._written = self._synced = 0
        self.delete()

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset`."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep < len(entries):
            del entries[keep:]
            self._written = min(self._written, keep)
            self._synced = min(self._synced, keep)
            if self._written:
                os.truncate(self.path, self._written * _TXN_ENTRY.size)
            else:
                self.delete()

    def flush(self, sync: bool = True) -> None:
        """Write the entries a failed write left behind and fsync the new ones unless not `sync`."""
        if self._entries and self._synced < len(self._entries):
            self._write_unwritten()
            if not sync:
                return
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            self._synced = self._written

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
