"""One segment of a partition's log: `<base offset>.log` with its two sparse indexes and,
once a transaction aborts in it, its `.txnindex`.

Batches are stored exactly as they arrive on the wire (with baseOffset and
partitionLeaderEpoch assigned), so a fetch sends file bytes unchanged. The segment
only ever reads batch headers: to find where an offset starts (index lookup, then a
short scan of headers) and to re-validate its tail after an unclean shutdown.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from wire.primitives import DecodeError
from wire.records import HEADER_SIZE, BatchHeader, has_valid_crc, parse_header

from broker.clock import Clock
from broker.storage.deleted_segments import DELETED_SEGMENTS, DELETED_SUFFIX
from broker.storage.index import OffsetIndex, TimeIndex, TransactionIndex

_NAME_DIGITS = 20
# Descriptors the read cache keeps open for reading sealed segments, process-wide.
READ_CACHE_FILES = 64


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:0{_NAME_DIGITS}d}{suffix}"


class SegmentFile:
    """An open descriptor of a `.log` file, closed when its last holder lets go of it
    (the active segment, the read cache, a FileRegion whose sendfile is under way): a
    descriptor is never closed, and its number reused, under a send."""

    __slots__ = ("fd",)

    def __init__(self, path: str, flags: int):
        self.fd = -1
        self.fd = os.open(path, flags, 0o644)

    def __del__(self, _close=os.close):  # bound now: at interpreter exit `os` may be gone
        if self.fd >= 0:
            _close(self.fd)


class _ReadCache:
    """Descriptors for reading sealed segments, at most `capacity` of them, the least
    recently used let go first: old segments hold no descriptor while nobody reads them."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._files: OrderedDict[str, SegmentFile] = OrderedDict()

    def get(self, path: str) -> SegmentFile:
        file = self._files.get(path)
        if file is not None:
            self._files.move_to_end(path)
            return file
        file = self._files[path] = SegmentFile(path, os.O_RDONLY)
        if len(self._files) > self.capacity:
            self._files.popitem(last=False)
        return file

    def discard(self, path: str) -> None:
        """Forget a file being deleted, so that a new file at its path is not read through it."""
        self._files.pop(path, None)


READ_CACHE = _ReadCache(READ_CACHE_FILES)


class FileRegion:
    """Bytes `[position, position + length)` of an open file, to be sent with sendfile.
    It holds the file open until it is dropped."""

    __slots__ = ("file", "position", "length")

    def __init__(self, file: SegmentFile, position: int, length: int):
        self.file, self.position, self.length = file, position, length

    @property
    def fd(self) -> int:
        return self.file.fd

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The bytes themselves, for the rare consumer that cannot use sendfile."""
        return os.pread(self.fd, self.length, self.position)


class LogSegment:
    """A `.log` file plus its `.index` and `.timeindex`, named by the base offset."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int,
                 created_ms: int, empty: bool = False, suffix: str = ""):
        """`empty`: a segment known to have no file yet (a new partition's first).
        `suffix`: after every file name, as the log cleaner's `.cleaned` and `.swap`."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.path = os.path.join(directory, segment_name(base_offset, ".log" + suffix))
        self.offset_index = OffsetIndex(os.path.join(directory, segment_name(base_offset, ".index" + suffix)),
                                        base_offset, empty)
        self.time_index = TimeIndex(os.path.join(directory, segment_name(base_offset, ".timeindex" + suffix)),
                                    base_offset, empty)
        self.txn_index = TransactionIndex(os.path.join(directory,
                                                       segment_name(base_offset, ".txnindex" + suffix)))
        self._file: SegmentFile | None = None  # for appending, open while the segment is active
        self._torn_tail = False  # bytes of a failed write may follow `size` in the file
        self.size = 0 if empty or not os.path.exists(self.path) else os.path.getsize(self.path)
        self.created_ms = created_ms
        self._bytes_since_index_entry = 0
        # Largest timestamp appended so far and the offset of its batch; filled lazily
        # from the time index for segments loaded from disk.
        self._max_timestamp: tuple[int, int] | None = None
        self.next_offset = base_offset  # set by the log after loading

    @property
    def fd(self) -> int:
        if self._file is None:
            self._file = SegmentFile(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        return self._file.fd

    def _reader(self) -> SegmentFile:
        """The active segment reads through its own descriptor, sealed ones through the cache."""
        return self._file if self._file is not None else READ_CACHE.get(self.path)

    # -- writing ---------------------------------------------------------------------
    def append(self, batch, header: BatchHeader) -> None:
        """Append one batch whose offsets are already assigned. A write that fails
        (a full disk, an I/O error) raises OSError and leaves the segment as before:
        its bytes are cut off again, so the file never holds a torn batch."""
        position = self.size
        view = memoryview(batch)
        try:
            fd = self.fd
            if self._torn_tail:
                os.ftruncate(fd, position)
                self._torn_tail = False
            written = 0
            while written < len(view):
                written += os.write(fd, view[written:])
        except OSError:
            self._cut_back(position)
            raise
        self._track(header, position)
        self.size += written

    def _cut_back(self, position: int) -> None:
        """Truncate the file to `position` after a failed write; should even that fail,
        the next append truncates first (appends are O_APPEND: they go to the file's end)."""
        self._torn_tail = True
        try:
            os.ftruncate(self.fd, position)
        except OSError:
            return
        self._torn_tail = False

    def _track(self, header: BatchHeader, position: int) -> None:
        """Account for a batch now stored at `position`: next offset, max timestamp,
        and an entry in both indexes every `index_interval_bytes`."""
        current = self.max_timestamp()
        if current is None or header.max_timestamp > current[0]:
            self._max_timestamp = (header.max_timestamp, header.last_offset)
        if position == 0 or self._bytes_since_index_entry >= self.index_interval_bytes:
            self.offset_index.append(header.base_offset, position)
            self.time_index.append(*self._max_timestamp)  # kept only if it grew
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size
        self.next_offset = header.last_offset + 1

    def flush(self, sync: bool = True) -> None:
        """Write out the indexes' pending entries and, unless not `sync`, fsync the
        segment's files."""
        if self._file is not None and sync:
            os.fsync(self._file.fd)
        self.offset_index.flush(sync)
        self.time_index.flush(sync)
        self.txn_index.flush(sync)

    def seal(self, sync: bool = True) -> None:
        """The segment stops growing: the time index gets its true maximum, everything is
        written out (and flushed, unless not `sync`: a roll leaves that to `sync_files`
        in a thread) and the append descriptor let go (reads go through the read cache),
        so that only active segments hold a descriptor each."""
        current = self.max_timestamp()
        last = self.time_index.max_timestamp()
        if current is not None and (last is None or current[0] > last[0]):
            self.time_index.append(*current)
        self.flush(sync)
        self._file = None

    def sync_files(self) -> None:
        """fsync the files of a segment sealed without it, each opened by its name: a
        file gone meanwhile (deleted, or replaced by the cleaner's, which syncs its own)
        needs none. For a thread: it reads nothing of the segment but its files' names."""
        for path in (self.path, self.offset_index.path, self.time_index.path, self.txn_index.path):
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def close(self) -> None:
        self.seal()
        READ_CACHE.discard(self.path)

    def change_suffix(self, old: str, new: str) -> None:
        """Rename every file of the segment from `<name>old` to `<name>new`, the indexes
        first and the `.log` last (the cleaner's `.cleaned` -> `.swap` -> final names:
        recovery acts on a `.log` name only, so its indexes are always renamed before it).
        The segment must hold no descriptor of its own (sealed)."""
        for holder in (self.offset_index, self.time_index, self.txn_index, self):
            renamed = holder.path[:len(holder.path) - len(old)] + new
            if os.path.exists(holder.path):
                os.replace(holder.path, renamed)
            READ_CACHE.discard(holder.path)
            holder.path = renamed

    def delete_later(self, delay_ms: int, clock: Clock) -> None:
        """Let go of the segment as Kafka's asynchronous delete does: its files renamed
        `.deleted`, the `.log` first (recovery then drops the indexes left, should a stop
        come between), and unlinked `delay_ms` later (broker.storage.deleted_segments)."""
        self._file = None
        renamed = []
        for holder in (self, self.offset_index, self.time_index, self.txn_index):
            READ_CACHE.discard(holder.path)
            try:
                os.replace(holder.path, holder.path + DELETED_SUFFIX)
            except FileNotFoundError:
                continue  # an index never written (a transaction index without aborts)
            holder.path += DELETED_SUFFIX
            renamed.append(holder.path)
        DELETED_SEGMENTS.schedule(renamed, delay_ms, clock)

    def delete(self) -> None:
        self._file = None
        READ_CACHE.discard(self.path)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    # -- reading ---------------------------------------------------------------------
    def header_at(self, position: int) -> BatchHeader:
        data = os.pread(self._reader().fd, HEADER_SIZE, position)
        return parse_header(data)

    def max_timestamp(self) -> tuple[int, int] | None:
        """(largest timestamp, offset of its batch's last record) or None when empty."""
        if self._max_timestamp is None and self.size:
            self._max_timestamp = self.time_index.max_timestamp()
        return self._max_timestamp

    def position_of(self, offset: int) -> tuple[int, BatchHeader | None]:
        """Position of the first batch holding an offset >= `offset`, and its header
        (None when no batch in this segment does: the position is then the end)."""
        _, position = self.offset_index.lookup(offset)
        while position < self.size:
            header = self.header_at(position)
            if header.last_offset >= offset:
                return position, header
            position += header.size
        return self.size, None

    def offset_at_position(self, position: int) -> int:
        """The offset of the first batch starting at or after byte `position` (the
        segment's next offset when none does)."""
        _, at = self.offset_index.lookup_position(position)
        while at < min(position, self.size):
            at += self.header_at(at).size
        if at >= self.size:
            return self.next_offset
        return self.header_at(at).base_offset

    def last_batch_end(self, start: int, limit: int) -> int:
        """The end of the last whole batch that starts at or after `start` (a batch boundary)
        and ends at or before byte `limit`; `start` when even the first does not fit.
        The sparse index puts the walk within index.interval.bytes of `limit`."""
        _, at = self.offset_index.lookup_position(limit)
        at = max(at, start)
        while at < self.size:
            end = at + self.header_at(at).size
            if end > limit:
                break
            at = end
        return at

    def region(self, start: int, end: int) -> FileRegion:
        return FileRegion(self._reader(), start, end - start)

    def batches_from(self, position: int):
        """(position, header) of each batch from `position` to the end of the segment."""
        while position < self.size:
            header = self.header_at(position)
            yield position, header
            position += header.size

    # -- recovery --------------------------------------------------------------------
    def _check_batch(self, fd: int, position: int, size: int, max_batch_bytes: int,
                     after: int) -> tuple[BatchHeader | None, str | None]:
        """(header, None) for a whole, CRC-valid batch at `position` whose offsets start at
        or after `after`; (None, why not) otherwise."""
        data = os.pread(fd, HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None, f"torn batch: {size - position} bytes, less than a batch header"
        try:
            header = parse_header(data)
        except DecodeError as exc:
            return None, f"bad batch header: {exc}"
        if header.size > max_batch_bytes:
            return None, f"batch of {header.size} bytes is over the {max_batch_bytes}-byte limit"
        if position + header.size > size:
            return None, f"torn batch: {size - position} of its {header.size} bytes"
        batch = os.pread(fd, header.size, position)
        if len(batch) != header.size or not has_valid_crc(batch):
            return None, "bad CRC"
        if header.base_offset < after or header.last_offset_delta < 0:
            return None, f"offsets {header.base_offset}..{header.last_offset} do not follow {after - 1}"
        return header, None

    def recover(self, max_batch_bytes: int) -> str | None:
        """Re-validate every batch (CRC included), truncate at the first bad or torn
        one, rebuild both indexes; returns why it truncated (None when nothing was
        wrong). The transaction index is emptied: the log rebuilds it with the
        producer state."""
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        self._max_timestamp = None
        self._bytes_since_index_entry = 0
        fd = self.fd
        size = os.fstat(fd).st_size
        position, after, problem = 0, self.base_offset, None
        while position < size:
            header, problem = self._check_batch(fd, position, size, max_batch_bytes, after)
            if problem is not None:
                break
            self._track(header, position)
            position += header.size
            after = header.last_offset + 1
        if position < size:
            os.ftruncate(fd, position)
        self.size = position
        self.next_offset = after
        self.seal()
        return problem

    def index_problem(self, end_offset: int | None) -> str | None:
        """Why the indexes cannot be trusted for this log (None when they can): torn or
        missing entries, entries not ascending, positions past the log, offsets past
        `end_offset` (the next segment's base, None for the active segment). A garbage
        entry would send reads into the middle of a batch."""
        for index in (self.offset_index, self.time_index):
            problem = index.problem(self.size, end_offset)
            if problem is not None:
                return f"{os.path.basename(index.path)}: {problem}"
        return None

    def tail_problem(self, max_batch_bytes: int, end_offset: int | None) -> str | None:
        """Why the batches from the last offset-index entry to the end are not whole,
        CRC-valid and below `end_offset` (None when they are; then the active segment's
        `next_offset` is set). The check of every segment at every start, cheap since
        index entries are at most one index interval apart; the indexes must be sane."""
        last = self.offset_index.last()
        position, after = (last[1], self.base_offset + last[0]) if last else (0, self.base_offset)
        fd = self._reader().fd if self.size else -1  # an empty segment may have no file yet
        while position < self.size:
            header, problem = self._check_batch(fd, position, self.size, max_batch_bytes, after)
            if problem is not None:
                return f"at byte {position}: {problem}"
            position += header.size
            after = header.last_offset + 1
        if end_offset is None:
            self.next_offset = after
        elif after > end_offset:
            return f"offsets up to {after - 1} overlap the next segment at {end_offset}"
        return None

    def load_next_offset(self) -> int:
        """The offset after this segment's last batch, by scanning from the last index
        entry (a short scan: entries are at most one index interval apart)."""
        last = self.offset_index.last()
        position = last[1] if last is not None and last[1] < self.size else 0
        next_offset = self.base_offset
        for _, header in self.batches_from(position):
            next_offset = header.last_offset + 1
        self.next_offset = next_offset
        return next_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (which must start a batch)."""
        position, _ = self.position_of(offset)
        os.ftruncate(self.fd, position)
        self.size = position
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to_offset(offset)
        self._max_timestamp = None
        self.next_offset = self.load_next_offset() if position else self.base_offset
