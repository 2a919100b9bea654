"""Idempotent-producer state of one partition: the last batches of each producer.

Rules (Kafka's, for message format v2):
- A producer id seen for the first time must start at sequence 0, else
  UNKNOWN_PRODUCER_ID (its state expired or was never written here).
- An older epoch than the one recorded gets INVALID_PRODUCER_EPOCH; a newer epoch
  must restart at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER.
- Within an epoch, a batch equal to one of the producer's last five is a duplicate and
  is answered with the offsets it was first written at, without appending; any other
  batch must continue the sequence (wrapping from 2**31 - 1 to 0).
- Batches without a sequence (-1) come from the broker itself: transaction markers
  and transactional offset commits. Only their epoch is checked (not older than the
  producer's); a marker with a newer epoch (a coordinator's fencing abort) moves the
  producer to it and forgets its sequences, so the next epoch starts at 0 again.
- Transactions: a producer's first transactional batch opens its transaction here
  (its first offset is kept); a marker (control batch) closes it. A marker for a
  producer with no open transaction (a coordinator retrying after a crash) is
  harmless. The first offsets of open transactions bound the last stable offset.
State is snapshotted to `<offset>.snapshot` at segment roll and clean shutdown (open
transactions included), and rebuilt after a crash by replaying batch headers from the
latest snapshot: transactional data batches open transactions, control batches close them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import deque
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode
from wire.records import NO_PRODUCER_ID, BatchHeader

from broker.errors import BrokerError
from broker.storage.checkpoint import write_atomically

log = logging.getLogger("sluice.storage")

CACHED_BATCHES = 5
_SEQUENCE_WRAP = 1 << 31
_SNAPSHOT_SUFFIX = ".snapshot"




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
    txn_first_offset: int = -1  # first offset of the open transaction, -1 when none
    coordinator_epoch: int = -1  # of the last marker written for this producer

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else -1


def _last_sequence(header: BatchHeader) -> int:
    return (header.base_sequence + header.last_offset_delta) % _SEQUENCE_WRAP


class ProducerStateManager:
    def __init__(self, directory: str):
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def check(self, header: BatchHeader) -> tuple[int, int] | None:
        """Validate a batch before it is appended: None to append it, or the
        (first, last) offsets of the identical batch already in the log."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        seq = header.base_sequence
        if seq < 0:  # written by the broker (markers, transactional offset commits)
            if entry is not None and header.producer_epoch < entry.epoch:
                raise BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                         f"producer {pid} epoch {header.producer_epoch} "
                                         f"is older than {entry.epoch}")
            return None
        if entry is None:
            if seq != 0:
                raise BrokerError(ErrorCode.UNKNOWN_PRODUCER_ID,
                                         f"producer {pid} unknown here, sequence {seq} is not 0")
            return None
        if header.producer_epoch < entry.epoch:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_EPOCH,
                                     f"producer {pid} epoch {header.producer_epoch} "
                                     f"is older than {entry.epoch}")
        if header.producer_epoch > entry.epoch:
            if seq != 0:
                raise BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                         f"producer {pid} new epoch must start at 0, not {seq}")
            return None
        last_seq = _last_sequence(header)
        for batch in entry.batches:
            if batch.first_sequence == seq and batch.last_sequence == last_seq:
                return batch.first_offset, batch.last_offset
        expected = (entry.last_sequence + 1) % _SEQUENCE_WRAP
        if seq != expected:
            raise BrokerError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                                     f"producer {pid} sent sequence {seq}, expected {expected}")
        return None

    def update(self, header: BatchHeader, coordinator_epoch: int = -1) -> int | None:
        """Record a batch that is now in the log (offsets assigned). For a control batch
        that closes a transaction, returns the transaction's first offset (else None)."""
        pid = header.producer_id
        if pid == NO_PRODUCER_ID:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, header.producer_epoch)
        elif header.producer_epoch != entry.epoch:
            if header.producer_epoch < entry.epoch:
                return None  # an older marker replayed after a newer one: nothing to change
            # A new epoch forgets the sequences, never the open transaction: only a marker closes it.
            entry.epoch = header.producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, header.max_timestamp)
        if header.is_control:
            first = entry.txn_first_offset
            entry.txn_first_offset = -1
            if coordinator_epoch >= 0:
                entry.coordinator_epoch = coordinator_epoch
            self.ongoing.pop(pid, None)
            return first if first >= 0 else None
        if header.is_transactional and entry.txn_first_offset < 0:
            entry.txn_first_offset = header.base_offset
            self.ongoing[pid] = header.base_offset
        if header.base_sequence >= 0:
            entry.batches.append(_Batch(header.base_sequence, _last_sequence(header),
                                        header.base_offset, header.last_offset, header.max_timestamp))
        return None

    def first_unstable_offset(self) -> int | None:
        """The smallest first offset of an open transaction, None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for longer than `producer.id.expiration.ms`."""
        for pid in [p for p, e in self.producers.items()
                    if now_ms - e.last_timestamp > expiration_ms and e.txn_first_offset < 0]:
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
                               b.timestamp] for b in e.batches],
                  "txn_first_offset": e.txn_first_offset, "coordinator_epoch": e.coordinator_epoch}
                 for e in self.producers.values()]
        write_atomically(self._snapshot_path(offset), json.dumps(state).encode())
        for old in self._snapshot_offsets()[:-keep]:
            os.unlink(self._snapshot_path(old))

    def clear(self) -> None:
        """Forget every producer and remove every snapshot: the log was emptied."""
        for offset in self._snapshot_offsets():
            os.unlink(self._snapshot_path(offset))
        self.producers = {}
        self.ongoing = {}

    def load_snapshot(self, log_end_offset: int, upto: int | None = None) -> int:
        """Load the newest readable snapshot at or below `log_end_offset` (and `upto`
        when given); returns the offset from which batches must be replayed (0 when
        there is none)."""
        for offset in reversed(self._snapshot_offsets()):
            path = self._snapshot_path(offset)
            if offset > log_end_offset:
                os.unlink(path)  # describes data that did not survive
                continue
            if upto is not None and offset > upto:
                continue
            try:
                with open(path, "rb") as f:
                    state = json.loads(f.read())
                producers = {}
                for item in state:
                    entry = ProducerEntry(item["producer_id"], item["epoch"],
                                          last_timestamp=item["last_timestamp"],
                                          txn_first_offset=item.get("txn_first_offset", -1),
                                          coordinator_epoch=item.get("coordinator_epoch", -1))
                    entry.batches.extend(_Batch(*b) for b in item["batches"])
                    producers[entry.producer_id] = entry
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("producer-state snapshot %s is unreadable (%s: %s); removing it and "
                            "replaying the log from an older snapshot or the start",
                            path, type(exc).__name__, exc)
                with contextlib.suppress(OSError):
                    os.unlink(path)
                continue
            self.producers = producers
            self.ongoing = {e.producer_id: e.txn_first_offset for e in producers.values()
                            if e.txn_first_offset >= 0}
            return offset
        self.producers = {}
        self.ongoing = {}
        return 0
