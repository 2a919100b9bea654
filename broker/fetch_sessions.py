"""Incremental fetch sessions (KIP-227, Fetch v7+): the broker remembers what a fetcher
asked for and what it was last told, so each side lists only what changed.

- `session_epoch` -1 (final) is a fetch without a session; one naming a session closes
  it. Epoch 0 (initial) is a full fetch that opens a session (closing the one named, if
  any); the response carries its id, or 0 when the cache has no slot for it.
- Epoch > 0 continues session `session_id` at exactly the epoch it expects next (1 after
  the opening, then +1, wrapping from 2^31-1 to 1): FETCH_SESSION_ID_NOT_FOUND for an
  unknown session, INVALID_FETCH_SESSION_EPOCH for another epoch, and
  FETCH_SESSION_TOPIC_ID_ERROR when the request names topics differently from the one
  that opened it (by name before v13, by id from v13). The partitions it lists are added
  or updated; `forgotten_topics_data` removes partitions; the rest keep what was last
  asked.
- An incremental response lists a session partition only if it has something to say:
  records, an error, a diverging epoch, or a high watermark, last stable offset or log
  start offset other than the one last sent. A partition answered with an error is sent
  again at its next change. Partitions whose records were returned move to the end of
  the session, so a fetch's byte budget reaches every partition in turn.
- A partition stays in the session whatever its answer (as in Kafka): one unknown here
  now, e.g. a new topic a follower heard of before its leader did, is answered with its
  error each time until it exists, and then served.
- The cache holds `max.incremental.fetch.session.cache.slots` sessions (Kafka's 1000).
  When full, a new session takes the slot of the least recently used one idle for
  EVICTION_S, else of the smallest consumer session when the new one is a follower's or
  larger; otherwise it is not opened (id 0) and the fetch is answered in full.
"""

from __future__ import annotations

import random

from wire.error_codes import ErrorCode

from broker.errors import BrokerError

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
EVICTION_S = 120.0  # Kafka's fetch session eviction time
_INT32_MAX = 2**31 - 1


def next_epoch(epoch: int) -> int:
    return 1 if epoch == _INT32_MAX else epoch + 1


class CachedPartition:
    """A session partition: the fetcher's last request for it, and the positions it was
    last sent (-1: never, or an error since, so the next answer goes out)."""

    __slots__ = ("wanted", "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, wanted):
        self.wanted = wanted  # the FetchPartition last listed
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    def must_send(self, out) -> bool:
        """Whether `out` (the partition's PartitionData) differs from what was last sent;
        remembers it as sent."""
        send = bool(out.records) or out.error_code != ErrorCode.NONE or out.preferred_read_replica >= 0 \
            or (out.diverging_epoch is not None and out.diverging_epoch.epoch >= 0)
        if out.high_watermark != self.high_watermark:
            send = True
            self.high_watermark = out.high_watermark
        if out.last_stable_offset != self.last_stable_offset:
            send = True
            self.last_stable_offset = out.last_stable_offset
        if out.log_start_offset != self.log_start_offset:
            send = True
            self.log_start_offset = out.log_start_offset
        if out.error_code != ErrorCode.NONE:
            self.high_watermark = -1
        return send


class FetchSession:
    __slots__ = ("id", "epoch", "by_id", "privileged", "partitions", "last_used")

    def __init__(self, session_id: int, by_id: bool, privileged: bool, now: float):
        self.id = session_id
        self.epoch = 1  # the next one expected
        self.by_id = by_id  # topics named by id (v13+)
        self.privileged = privileged  # a follower's
        self.partitions: dict[tuple, CachedPartition] = {}  # (topic name or id, index), in fetch order
        self.last_used = now

    def update(self, topics, forgotten) -> None:
        """Apply an incremental request: its partitions added or updated, then the
        forgotten ones removed (as Kafka orders them)."""
        for topic in topics:
            ref = topic.topic_id if self.by_id else topic.topic
            for wanted in topic.partitions:
                cached = self.partitions.get((ref, wanted.partition))
                if cached is None:
                    self.partitions[(ref, wanted.partition)] = CachedPartition(wanted)
                else:
                    cached.wanted = wanted
        for topic in forgotten:
            ref = topic.topic_id if self.by_id else topic.topic
            for index in topic.partitions:
                self.partitions.pop((ref, index), None)

    def wanted(self) -> list[tuple]:
        """(topic ref, FetchPartition) for every partition, in fetch order."""
        return [(key[0], cached.wanted) for key, cached in self.partitions.items()]

    def select(self, answered: list[tuple]) -> list[tuple]:
        """The (ref, PartitionData) of `answered` that must be sent, remembering them as
        sent; rotates partitions that returned records to the end."""
        chosen = []
        rotate = []
        for ref, out in answered:
            key = (ref, out.partition_index)
            cached = self.partitions.get(key)
            if cached is None:
                continue
            if cached.must_send(out):
                chosen.append((ref, out))
                if out.records:
                    rotate.append(key)
        for key in rotate:
            self.partitions[key] = self.partitions.pop(key)
        return chosen


class FetchSessionCache:
    def __init__(self, slots: int, clock):
        self._slots = slots
        self._clock = clock
        self._sessions: dict[int, FetchSession] = {}  # least recently used first

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def continue_session(self, request, by_id: bool) -> FetchSession:
        """The session an incremental request (epoch > 0) continues, updated by it and
        expecting the next epoch. Raises BrokerError with the session error."""
        session = self._sessions.get(request.session_id)
        if session is None:
            raise BrokerError(ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                              f"no fetch session {request.session_id}")
        if request.session_epoch != session.epoch:
            raise BrokerError(ErrorCode.INVALID_FETCH_SESSION_EPOCH,
                              f"fetch session {session.id} expects epoch {session.epoch}, "
                              f"not {request.session_epoch}")
        if by_id != session.by_id:
            raise BrokerError(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
                              f"fetch session {session.id} names its topics "
                              f"{'by id' if session.by_id else 'by name'}")
        session.epoch = next_epoch(session.epoch)
        session.last_used = self._clock.monotonic()
        del self._sessions[session.id]
        self._sessions[session.id] = session  # most recently used
        session.update(request.topics, request.forgotten_topics_data)
        return session

    def open(self, by_id: bool, privileged: bool, wanted: list[tuple]) -> FetchSession | None:
        """A new session holding `wanted` ((topic ref, FetchPartition)), or None when no
        slot is free or can be freed."""
        if len(self._sessions) >= self._slots and not self._evict_for(privileged, len(wanted)):
            return None
        session_id = 0
        while session_id == 0 or session_id in self._sessions:
            session_id = random.randint(1, _INT32_MAX)
        session = FetchSession(session_id, by_id, privileged, self._clock.monotonic())
        for ref, fetch_partition in wanted:
            session.partitions[(ref, fetch_partition.partition)] = CachedPartition(fetch_partition)
        self._sessions[session_id] = session
        return session

    def _evict_for(self, privileged: bool, size: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if self._clock.monotonic() - oldest.last_used >= EVICTION_S:
            del self._sessions[oldest.id]
            return True
        consumers = [s for s in self._sessions.values() if not s.privileged]
        if consumers:
            smallest = min(consumers, key=lambda s: len(s.partitions))
            if privileged or size > len(smallest.partitions):
                del self._sessions[smallest.id]
                return True
        return False
