"""Idempotent-producer state of one partition: the last batches of each producer.

Rules (Kafka's, for message format v2):
- A producer id seen for the first time must start at sequence 0, else
  UNKNOWN_PRODUCER_ID (its state expired or was never written here).
- An older epoch than the one recorded gets INVALID_PRODUCER_EPOCH; a newer epoch
  must restart at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
- Within an epoch, a batch equal to one of the producer's last five is a duplicate and
  is answered with the offsets it was first written at, without appending; any other
  batch must continue the sequence (wrapping from 2**31 - 1 to 0).
State is snapshotted to `<offset>.snapshot` at segment roll and clean shutdown, and
rebuilt after a crash by replaying batch headers from the latest snapshot.
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode
from wire.records import NO_PRODUCER_ID, BatchHeader

from broker.storage.checkpoint import write_atomically

CACHED_BATCHES = 5
_SEQUENCE_WRAP = 1 << 31
_SNAPSHOT_SUFFIX = ".snapshot"


class ProducerStateError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        self.code = code
        super().__init__(message)


@dataclass
class _Batch:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque = field(default_factory=lambda: deque(maxlen=CACHED_BATCHES))
    last_timestamp: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def _last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % _SEQUENCE_WRAP


class ProducerStateManager:
    def __init__(self, directory: str):
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> tuple[int, int] | None:
        """Validate a batch before it is appended: None to append it, or the
        (first, last) offsets of the identical batch already in the log."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        seq = header.base_sequence
        if entry is None:
            if seq != 0:
                raise ProducerStateError(ErrorCode.UNKNOWN_PRODUCER_ID,
                                         f"producer {pid} unknown here, sequence {seq} is not 0")
            return None
        if header.producer_epoch < entry.epoch:
            raise ProducerStateError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"producer {pid} epoch {header.producer_epoch} "
                                     f"is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if seq != 0:
                raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                         f"producer {pid} new epoch must start at 0, not {seq}")
            return None
        last_seq = _last_sequence(header)
        for batch in entry.batches:
            if batch.first_sequence == seq and batch.last_sequence == last_seq:
                return batch.first_offset, batch.last_offset
        expected = (entry.last_sequence + 1) % _SEQUENCE_WRAP
        if seq != expected:
            raise ProducerStateError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {pid} sent sequence {seq}, expected {expected}")
        return None

    def update(self, header: BatchHeader) -> None:
        """Record a batch that is now in the log (offsets assigned)."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID or header.base_sequence < 0:
            return
        entry = self.producers.get(pid)
        if entry is None or header.producer_epoch != entry.epoch:
            entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
        entry.batches.append(_Batch(header.base_sequence, _last_sequence(header),
                                    header.base_offset, header.last_offset, header.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for longer than `producer.id.expiration.ms`."""
        for pid in [p for p, e in self.producers.items() if now_ms - e.last_timestamp > expiration_ms]:
            del self.producers[pid]

    # -- snapshots -------------------------------------------------------------------
    def _snapshot_offsets(self) -> list[int]:
        offsets = []
        for name in os.listdir(self.directory):
            if name.endswith(_SNAPSHOT_SUFFIX) and name[:-len(_SNAPSHOT_SUFFIX)].isdigit():
                offsets.append(int(name[:-len(_SNAPSHOT_SUFFIX)]))
        return sorted(offsets)

    def _snapshot_path(self, offset: int) -> str:
        return os.path.join(self.directory, f"{offset:020d}{_SNAPSHOT_SUFFIX}")

    def write_snapshot(self, offset: int, keep: int = 2) -> None:
        """Persist the state as of log end offset `offset`; keep the newest `keep` files."""
        state = [{"producer_id": e.producer_id, "epoch": e.epoch, "last_timestamp": e.last_timestamp,
                  "batches": [[b.first_sequence, b.last_sequence, b.first_offset, b.last_offset,
                               b.timestamp] for b in e.batches]}
                 for e in self.producers.values()]
        write_atomically(self._snapshot_path(offset), json.dumps(state).encode())
        for old in self._snapshot_offsets()[:-keep]:
            os.unlink(self._snapshot_path(old))

    def load_snapshot(self, log_end_offset: int) -> int:
        """Load the newest readable snapshot at or below `log_end_offset`; returns the
        offset from which batches must be replayed (0 when there is none)."""
        for offset in reversed(self._snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > log_end_offset:
                os.unlink(path)  # describes data that did not survive
                continue
            try:
                with open(path, "rb") as f:
                    state = json.loads(f.read())
                producers = {}
                for item in state:
                    entry = ProducerEntry(item["producer_id"], item["epoch"],
                                          last_timestamp=item["last_timestamp"])
                    entry.batches.extend(_Batch(*b) for b in item["batches"])
                    producers[entry.producer_id] = entry
            except (OSError, ValueError, KeyError, TypeError):
                continue
            self.producers = producers
            return offset
        self.producers = {}
        return 0
