"""Fetch v4–18 (older versions would need message-format down-conversion).

- Long poll: the response waits until `min_bytes` are available or `max_wait_ms`
  passes, woken when the high watermark of a requested partition moves. As Kafka's
  DelayedFetch, a wake reads the partitions again only when a read could answer
  differently (see `_readable_ends`): a follower's fetch is not read again for a high
  watermark that moved without new bytes.
- Limits: `partition_max_bytes` per partition and `max_bytes` (v3+) in total, except
  that the first batch of the first partition with data is always returned whole,
  so a consumer can never get stuck behind a batch larger than its limits.
- A consumer's reads stop at the high watermark (read_uncommitted) or the last stable
  offset (read_committed, v4+). A fetch from a replica (`replica_id`, v15+
  `replica_state.replica_id`, >= 0) reads up to the log end and reports the follower's
  position to the partition, which may move the high watermark; a broker that is not
  a replica of the partition gets no records, as Kafka answers it. read_committed responses list the aborted transactions
  (producer id, first offset) with records between the fetch offset and the end of
  the batches returned, from the segments' transaction indexes (an empty list when
  there are none); `aborted_transactions` is null for read_uncommitted.
- v7+ incremental fetch sessions (KIP-227; broker.fetch_sessions): an incremental fetch
  reads every partition of its session and answers only those with something new.
- v9+ `current_leader_epoch` is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
- Followers fetch from the leader only, and so do consumers before v11:
  NOT_LEADER_OR_FOLLOWER elsewhere; from v16 that answer and FENCED_LEADER_EPOCH name the
  current leader and its endpoint (KIP-951, broker.handlers.leader_discovery). A partition with an error (this one included, as
  when the broker stops leading during a long poll) or a diverging epoch ends the long
  poll at once, as in Kafka.
- Fetching from the closest replica (KIP-392), as Kafka: a v11+ consumer (it sends its
  client metadata) may fetch from any replica, which serves it up to its own high
  watermark or last stable offset. With `replica.selector.class` set to Kafka's
  RackAwareReplicaSelector, the leader answers a consumer whose `rack_id` names another
  rack than its own with no records and `preferred_read_replica`: the most caught-up
  in-sync follower in that rack holding the fetch offset (Partition.preferred_read_replica),
  at once, whatever min_bytes. The consumer asks that replica from then on, and the
  leader again on an error there.
- v12+ `last_fetched_epoch` (>= 0) is checked against the epoch history: a fetcher whose
  log diverged (that epoch ends here before its fetch offset, or this log never had it)
  gets no records and `diverging_epoch` (the epoch and end offset to truncate to); an
  epoch that cannot be placed, or an offset below the log start, is OFFSET_OUT_OF_RANGE.
- v13+ topics are named by id (UNKNOWN_TOPIC_ID for an unknown one).
- v18+ a follower tells the high watermark it knows (KIP-1166; the largest long when it
  does not say): behind the leader's, the fetch is answered at once, and a long poll ends
  when the high watermark moves, so that the follower learns it without waiting for data.
- Record bytes are sent from the segment files unchanged (sendfile for large ranges).
- Replication throttle, as Kafka's leader applies it: the replicas a topic lists in
  `leader.replication.throttled.replicas` for this broker are read, for followers out of
  the ISR, within the broker's `leader.replication.throttled.rate` (broker.quota, one
  for all of them): past the rate, no records (the partition answered without them, the
  rest of the fetch as usual); below it, at most the quota's headroom less what the
  fetch's earlier throttled partitions took, one batch at least when it is the fetch's
  first data, so that every throttled replica moves on (Kafka reads a whole partition
  limit there, which holds the rate only over longer windows). Every byte of a listed partition sent
  to a follower counts, in sync or not, as in Kafka.
- Client quotas (broker.client_quotas), as Kafka's KafkaApis: a consumer's fetch (not a
  follower's) reads at most what its consumer_byte_rate allows at once (the quota over
  all its windows but one); the record bytes of its answer count against the rate, and
  past it the answer is throttle_time_ms and no partitions (those bytes taken back, the
  fetch session left as it was) and the connection is muted that long.
- Authorization (broker.security.acls), as Kafka's KafkaApis, checked once per request
  (an incremental fetch's session partitions included): a consumer needs READ on each
  topic, a follower (replica id >= 0) CLUSTER_ACTION on the cluster; otherwise the
  partitions are TOPIC_AUTHORIZATION_FAILED (before any other check, so that a topic one
  may not read is not told to exist or not). An unknown topic id stays UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import FETCH
from wire.primitives import ZERO_UUID
from broker.client_quotas import throttle_ms
from broker.errors import BrokerError
from broker.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH
from broker.handlers.leader_discovery import name_leaders
from broker.security.acls import permitted, refused
from broker.handler_results import Throttled


_Resp = FETCH.response
_HIGH_WATERMARK_NOT_TOLD = 0x7FFFFFFFFFFFFFFF  # v18's default: the follower does not say
READ_COMMITTED = 1
_LEADER_MOVED = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH)


def fetching_replica(request, version: int) -> int:
    if version >= 15:
        return request.replica_state.replica_id if request.replica_state is not None else -1
    return request.replica_id


def _build(broker, fetch):
    """One pass over the fetch's wanted partitions ((topic name, or id from v13,
    FetchPartition), in order) but for its denied topic refs, within its byte budget: ((topic ref,
    PartitionData) answered, bytes, partition keys, whether a partition's answer is
    already final: an error or a diverging epoch, which waiting cannot change, bytes of
    leader-throttled replicas, whether a throttled replica got nothing for the rate)."""
    request, version, denied, budget = fetch.request, fetch.version, fetch.denied, fetch.budget
    committed = request.isolation_level == READ_COMMITTED
    replica_id = fetch.replica_id
    by_id = version >= 13
    # KIP-392: a consumer giving its client metadata (v11+) may read from any replica,
    # and the leader may point one with a rack at a replica in its rack.
    anywhere = replica_id < 0 and version >= 11
    client_rack = request.rack_id if anywhere and broker.config.replica_selector_class else ""
    racks = None  # broker id -> rack, read at the first partition that needs it
    quota_room = None  # the leader throttle's headroom, read at the first throttled partition
    total = throttled_bytes = 0
    withheld = False
    settled = False
    keys = []
    answered = []
    topics = {}  # ref -> (name, Topic or None)
    for ref, wanted in fetch.wanted:
        found = topics.get(ref)
        if found is None:
            topic = broker.topics.by_id.get(ref) if by_id else broker.topics.topics.get(ref)
            found = topics[ref] = (topic.name if topic is not None else None, topic)
        name, topic = found
        out = _Resp.PartitionData(partition_index=wanted.partition, high_watermark=-1,
                                  last_stable_offset=-1, log_start_offset=-1,
                                  aborted_transactions=[] if committed else None,
                                  preferred_read_replica=-1, records=b"")
        answered.append((ref, out))
        if ref in denied:
            out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            settled = True
            continue
        if topic is None:
            known = broker.metadata.topic_by_id(ref) if by_id else broker.metadata.topic(ref)
            if known is not None:  # a cluster's topic this broker holds no replica of
                out.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            settled = True
            continue
        try:
            partition = broker.topics.partition(name, wanted.partition)
            keys.append(partition.key)
            partition.check_leader_epoch(wanted.current_leader_epoch)
            if not anywhere:
                partition.check_leader()
        except BrokerError as exc:
            out.error_code = exc.code
            settled = True
            continue
        try:
            limit = max(min(wanted.partition_max_bytes, budget - total), 0)
            diverging = None
            if version >= 12 and wanted.last_fetched_epoch >= 0:
                diverging = partition.diverging_epoch(wanted.last_fetched_epoch, wanted.fetch_offset)
            if diverging is not None:
                region = None
                settled = True
                out.diverging_epoch = _Resp.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1])
            elif replica_id >= 0:
                region = None
                if version >= 18 and wanted.high_watermark < partition.high_watermark:
                    settled = True  # KIP-1166: the follower learns the high watermark now
                # A follower at the log end has nothing to read (nor to hold back for a throttle).
                if partition.update_follower(replica_id, wanted.fetch_offset, wanted.log_start_offset) \
                        and wanted.fetch_offset != partition.log_end_offset:
                    throttled = partition.config.leader_replication_throttled_replicas.covers(
                        partition.index, broker.node_id)
                    if throttled and replica_id not in partition.isr:
                        if quota_room is None:
                            quota_room = broker.leader_replication_quota.headroom()
                        room = quota_room - throttled_bytes
                        if room >= 0:
                            allowed = min(limit, int(room))
                            region = partition.read_as_follower(wanted.fetch_offset, allowed,
                                                                total == 0 or 0 < allowed < limit)
                        else:
                            withheld = True
                    else:
                        region = partition.read_as_follower(wanted.fetch_offset, limit, total == 0)
                    if throttled and region is not None:
                        throttled_bytes += len(region)
            else:
                preferred = None
                if client_rack and partition.is_leader:
                    if racks is None:
                        racks = {b.node_id: b.rack for b in broker.metadata.brokers()}
                    preferred = partition.preferred_read_replica(client_rack, wanted.fetch_offset, racks.get)
                if preferred is not None:  # no records: the consumer asks that replica (as Kafka answers)
                    region, aborted = None, []
                    out.preferred_read_replica = preferred
                    settled = True
                else:
                    region, aborted = partition.read(wanted.fetch_offset, limit, committed, total == 0,
                                                     leader_only=not anywhere)
                if committed:
                    out.aborted_transactions = [
                        _Resp.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                        for a in aborted]
        except BrokerError as exc:  # e.g. OFFSET_OUT_OF_RANGE, answered with the positions
            out.error_code = exc.code
            settled = True
            region = None
        out.high_watermark = partition.high_watermark
        out.last_stable_offset = partition.last_stable_offset
        out.log_start_offset = partition.log_start_offset
        if region is not None:
            out.records = region
            total += len(region)
    return answered, total, keys, settled, throttled_bytes, withheld


def _grouped(answered, by_id: bool) -> list:
    """FetchableTopicResponses of (topic ref, PartitionData) pairs, a topic's consecutive
    partitions together."""
    topics_out = []
    current = last = None
    for ref, out in answered:
        if current is None or ref != last:
            current = _Resp.FetchableTopicResponse(topic=None if by_id else ref,
                                                   topic_id=ref if by_id else ZERO_UUID, partitions=[])
            topics_out.append(current)
            last = ref
        current.partitions.append(out)
    return topics_out


class _Fetch:
    """One Fetch request: the partitions it reads (the session's for an incremental one)
    and the session it answers for: continued, to be opened with the answer, or none."""

    __slots__ = ("request", "version", "replica_id", "listener", "wanted", "session", "opens", "denied", "client",
                 "budget")

    def __init__(self, broker, request, version, listener, client):
        self.request = request
        self.version = version
        self.replica_id = fetching_replica(request, version)
        self.listener = listener
        self.client = client  # a consumer's (principal name, client id); None for a follower
        self.budget = self._budget(broker)
        self.session = None
        self.opens = False
        by_id = version >= 13
        epoch = request.session_epoch if version >= 7 else FINAL_EPOCH
        if epoch in (FINAL_EPOCH, INITIAL_EPOCH):
            if request.session_id:
                broker.fetch_sessions.remove(request.session_id)
            self.opens = epoch == INITIAL_EPOCH
            self.wanted = [(t.topic_id if by_id else t.topic, p) for t in request.topics for p in t.partitions]
        else:
            self.session = broker.fetch_sessions.continue_session(request, by_id)
            self.wanted = self.session.wanted()
        self.denied = frozenset()  # topic refs the principal may not fetch: see `refuse`

    def refuse(self, broker, session) -> None:
        """Note the topics the connection's principal may not fetch."""
        if broker.authorizer is None:
            return
        refs = {ref for ref, _ in self.wanted}
        if self.replica_id >= 0:
            if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
                self.denied = frozenset(refs)
            return
        if self.version < 13:
            self.denied = refused(broker, session, Operation.READ, ResourceType.TOPIC, refs)
            return
        names = {ref: topic.name for ref in refs if (topic := broker.metadata.topic_by_id(ref)) is not None}
        denied_names = refused(broker, session, Operation.READ, ResourceType.TOPIC, names.values())
        self.denied = frozenset(ref for ref, name in names.items() if name in denied_names)

    def _budget(self, broker) -> int:
        """The bytes this fetch may read: its max_bytes (v3+), for a consumer with a
        consumer_byte_rate at most what its quota allows at once (as Kafka caps it, once
        per request)."""
        budget = self.request.max_bytes if self.version >= 3 else 0x7FFFFFFF
        if self.client is not None:
            most = broker.fetch_quotas.most_at_once(*self.client)
            if most is not None:
                budget = min(budget, int(most))
        return budget

    def over_quota(self, broker, total: int):
        """Count a consumer's `total` bytes against its consumer_byte_rate: past it, the
        response Kafka gives (throttle_time_ms and no partitions; the records not
        counted, the session not moved on), else None."""
        if self.client is None:
            return None
        throttle = broker.fetch_quotas.record(*self.client, total)
        if not throttle:
            return None
        broker.fetch_quotas.unrecord(*self.client, total)
        session_id = self.session.id if self.session is not None else 0
        return Throttled(_Resp(error_code=0, session_id=session_id, responses=[],
                               throttle_time_ms=throttle_ms(throttle)), throttle)

    def answer(self, broker, answered):
        by_id = self.version >= 13
        session = self.session
        if session is not None:
            answered = session.select(answered)
        elif self.opens:
            self.opens = False
            session = broker.fetch_sessions.open(by_id, self.replica_id >= 0, self.wanted)
            if session is not None:
                session.select(answered)  # remembered as sent: a full answer sends them all
        broker.metrics.fetched(answered, by_id, self.replica_id)
        response = _Resp(error_code=0, session_id=session.id if session is not None else 0,
                         responses=_grouped(answered, by_id), throttle_time_ms=0)
        if self.version >= 16:
            moved = [(ref, out) for ref, out in answered if out.error_code in _LEADER_MOVED]
            if moved:
                response.node_endpoints = name_leaders(broker, self.listener, _Resp, (
                    (topic.name, out.partition_index, out) for ref, out in moved
                    if (topic := broker.metadata.topic_by_id(ref)) is not None))
        return response


def handle(broker, header, request, session):
    """The response now, or (when it must wait for data) an awaitable of it."""
    version = header.request_api_version
    client = None if fetching_replica(request, version) >= 0 else (session.principal.name, header.client_id or "")
    try:
        fetch = _Fetch(broker, request, version, session.listener, client)
    except BrokerError as exc:  # the session named is gone or out of step
        return _Resp(error_code=exc.code, session_id=0, responses=[])
    fetch.refuse(broker, session)
    deadline = broker.clock.monotonic() + max(request.max_wait_ms, 0) / 1000
    response, keys, until = _answer_if_ready(broker, fetch, deadline)
    if response is not None:
        return response
    return _long_poll(broker, fetch, deadline, keys, until, _readable_ends(broker, fetch))


def _answer_if_ready(broker, fetch, deadline):
    """(response, None, 0) once `min_bytes` are there, a partition has an error or a
    diverging epoch (as Kafka answers at once), the deadline passed or nothing can arrive;
    else (None, the partition keys to wait on, the clock time to wait until at most: the
    deadline, or sooner when the leader replication quota lets a withheld throttled
    replica read again, so that a throttled copy keeps to its rate rather than to the
    follower's max wait)."""
    request = fetch.request
    answered, total, keys, settled, throttled, withheld = _build(broker, fetch)
    now = broker.clock.monotonic()
    if total >= request.min_bytes or settled or deadline <= now or not keys:
        if throttled:
            broker.leader_replication_quota.record(throttled)
        return fetch.over_quota(broker, total) or fetch.answer(broker, answered), None, 0.0
    rate_back = broker.leader_replication_quota.throttle_time() if withheld else 0.0
    if rate_back > 0:  # 0: this fetch's own reads used the room, answered with them
        return None, keys, min(deadline, now + rate_back)
    return None, keys, deadline


def _readable_ends(broker, fetch) -> list:
    """What a new read of the fetch's partitions could answer differently on, as Kafka's
    DelayedFetch checks it: each partition's replica here, leader epoch and leadership,
    and the offset reads stop at (the log end for a follower, the last stable offset or
    the high watermark for a consumer). A high watermark moving without new bytes
    changes nothing for a follower, but for one telling the high watermark it knows (v18+)."""
    by_id = fetch.version >= 13
    follower = fetch.replica_id >= 0
    committed = fetch.request.isolation_level == READ_COMMITTED
    ends = []
    for ref, wanted in fetch.wanted:
        topic = broker.topics.by_id.get(ref) if by_id else broker.topics.topics.get(ref)
        partition = topic.partitions.get(wanted.partition) if topic is not None else None
        if partition is None:
            ends.append(None)
            continue
        end = (partition.log_end_offset if follower else
               partition.last_stable_offset if committed else partition.high_watermark)
        if follower and fetch.version >= 18 and wanted.high_watermark != _HIGH_WATERMARK_NOT_TOLD:
            end = (end, partition.high_watermark)
        ends.append((partition, partition.leader_epoch, partition.is_leader, end))
    return ends


async def _long_poll(broker, fetch, deadline, keys, until, ends):
    """Wait on the requested partitions until `min_bytes` or the deadline, reading them
    again only when `_readable_ends` moved from `ends` (or at `until`): checked before
    each wait, the first included, as data may have come between the handler's read and
    this task's start, waking nobody."""
    while True:
        while _readable_ends(broker, fetch) == ends:
            remaining = until - broker.clock.monotonic()
            if remaining <= 0:
                break
            await broker.delayed.wait(keys, remaining)
        response, keys, until = _answer_if_ready(broker, fetch, deadline)
        if response is not None:
            return response
        ends = _readable_ends(broker, fetch)
