"""A follower's fetching from one leader broker, as Kafka's ReplicaFetcherThread does:
one task per leader, one Fetch at a time covering every partition followed there.

- A partition that has just become a follower first truncates its log, never by the
  high watermark alone: OffsetForLeaderEpoch (v3+, replica_id = this broker) asks the
  leader where this log's latest epoch ends there, and `Partition.truncation_offset`
  applies Kafka's rule. A Fetch answer with `diverging_epoch` (v12+) truncates the
  same way.
- Fetch v12+ (replica_id = this broker): fetch offset = the log end, last_fetched_epoch
  = the log's latest epoch, current_leader_epoch = the epoch the controller gave. The
  records are appended unchanged (`Partition.append_as_follower`) with the leader's high
  watermark and log start offset.
- In an incremental fetch session (KIP-227), as Kafka's followers fetch: a request lists
  only partitions whose fetch position changed, forgets those no longer fetched, and
  the leader answers only partitions with news, so idle partitions cost nothing per
  round trip. Any failure, or an answer dropped because its partition changed meanwhile,
  starts a new session with a full fetch.
- A partition added while a fetch waits at the leader does not wait for that long poll
  to end: the fetch is abandoned (its connection closed) and a new one lists it.
- OFFSET_OUT_OF_RANGE below the leader's log start (retention deleted what this follower
  lacks): the log is emptied and starts at the leader's log start offset.
- Replication throttle, as Kafka's follower applies it: a partition its topic lists in
  `follower.replication.throttled.replicas` for this broker is left out of the Fetch
  while the broker's `follower.replication.throttled.rate` is passed (broker.quota, one
  for all fetchers), unless it is in sync (its last fetch reached the leader's high
  watermark, Kafka's follower-side test: the follower's ISR view may be stale). Every
  byte fetched for a listed partition counts, in sync or not.
- Retried after replica.fetch.backoff.ms: connection failures, and answers that the
  leader has not caught up with the controller yet (UNKNOWN_LEADER_EPOCH,
  NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) or cannot answer now. Any other
  error (FENCED_LEADER_EPOCH: this broker's LeaderAndIsr is stale) holds the partition,
  unfetched, until the controller's next LeaderAndIsr for it. An answer (Fetch or
  OffsetForLeaderEpoch) about a partition given a new leader epoch while it was out is
  dropped: it speaks of the old epoch.
"""

from __future__ import annotations

import asyncio
import logging
import math

from sluice_client import BrokerConnection, ClientError
from wire.error_codes import ErrorCode
from wire.messages import FETCH, OFFSET_FOR_LEADER_EPOCH

from broker.errors import BrokerError
from broker.fetch_sessions import INITIAL_EPOCH, next_epoch

log = logging.getLogger("sluice.fetcher")

_FETCH_VERSION = 12  # names topics (v13+ names them by id) and reports diverging epochs
_OFFSET_FOR_LEADER_EPOCH_VERSION = 4
_RETRIED = (ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER,
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE,
            ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR)


class _Session:
    """This follower's side of its fetch session with one leader: the session id, the
    epoch of the next request (0: open a session with a full fetch), and what the leader
    was last told of each partition."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.id = 0
        self.epoch = INITIAL_EPOCH
        self.sent: dict[tuple[str, int], tuple] = {}

    def next_request(self, fetching: dict) -> tuple[dict, list]:
        """(the partitions to list, the keys to forget) for `fetching`: every partition in
        a full fetch, else only new or changed ones."""
        if self.epoch == INITIAL_EPOCH:
            return fetching, []
        listed = {key: value for key, value in fetching.items() if self.sent.get(key) != value}
        return listed, [key for key in self.sent if key not in fetching]

    def answered(self, session_id: int, fetching: dict) -> None:
        """A response without a top-level error to the request for `fetching`."""
        if self.epoch != INITIAL_EPOCH and session_id != self.id:
            self.reset()  # the leader closed the session
        elif session_id == 0:
            self.reset()  # no slot at the leader: full fetches, asking again each time
        else:
            self.id = session_id
            self.epoch = next_epoch(self.epoch)
            self.sent = dict(fetching)


class ReplicaFetcher:
    def __init__(self, local_id: int, leader_id: int, host: str, port: int, config, clock, metrics, quota,
                 security=None):
        """`metrics`: the broker's (broker.metrics), counting the bytes a new replica of a
        reassignment fetched; `quota`: the broker's follower replication quota; `security`:
        the inter-broker listener's (broker.security.inter_broker), None for PLAINTEXT."""
        self.local_id = local_id
        self._metrics = metrics
        self._quota = quota
        self._security = security
        self.leader_id = leader_id
        self.address = (host, port)
        self._config = config
        self._clock = clock
        self._partitions: dict[tuple[str, int], object] = {}  # key -> Partition
        self._truncate: set[tuple[str, int]] = set()  # keys still to truncate before fetching
        self._held: set[tuple[str, int]] = set()  # keys waiting for the next LeaderAndIsr
        # Keys whose last fetch reached the leader's high watermark (the throttle spares them).
        self._in_sync: set[tuple[str, int]] = set()
        self._changed = asyncio.Event()  # partitions added or removed
        self._added: asyncio.Future | None = None  # resolved by add() while a fetch waits
        self._session = _Session()
        self._connection = self._connect()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _connect(self) -> BrokerConnection:
        timeout = self._config.replica_socket_timeout_ms / 1000
        return BrokerConnection(*self.address, client_id=f"broker-{self.local_id}-fetcher-{self.leader_id}",
                                request_timeout=timeout, connect_timeout=timeout, security=self._security)

    def __repr__(self) -> str:
        return f"ReplicaFetcher(leader {self.leader_id} at {self.address[0]}:{self.address[1]})"

    @property
    def keys(self) -> set[tuple[str, int]]:
        return set(self._partitions)

    def add(self, partition) -> None:
        """Follow `partition` here, truncating first."""
        self._partitions[partition.key] = partition
        self._truncate.add(partition.key)
        self._held.discard(partition.key)
        self._in_sync.discard(partition.key)
        self._changed.set()
        if self._added is not None and not self._added.done():
            self._added.set_result(None)

    def remove(self, key) -> None:
        self._partitions.pop(key, None)
        self._truncate.discard(key)
        self._held.discard(key)
        self._in_sync.discard(key)
        self._changed.set()

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._connection.close()

    # -- the loop -------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = self._config.replica_fetch_backoff_ms / 1000
        while True:
            active = [k for k in self._partitions if k not in self._held]
            if not active:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if self._truncate:
                    await self._truncate_all()
                progressed = await self._fetch_once()
            except (ClientError, ConnectionError, OSError) as exc:
                log.info("%r: %s; retrying in %g s", self, exc, backoff)
                self._session.reset()
                progressed = False
            except BrokerError as exc:  # e.g. a full disk while appending: retried
                log.warning("%r: %s; retrying in %g s", self, exc, backoff)
                self._session.reset()
                progressed = False
            if not progressed:
                await self._clock.sleep(backoff)

    async def _truncate_all(self) -> None:
        """OffsetForLeaderEpoch for every partition still to truncate, then the cuts. A log
        without an epoch history has nothing to ask about: it truncates to its high
        watermark."""
        Req = OFFSET_FOR_LEADER_EPOCH.request
        asked: dict[str, list] = {}
        epochs = {}  # key -> the leader epoch it was asked at
        for key in sorted(self._truncate):
            partition = self._partitions[key]
            if partition.latest_epoch < 0:
                self._truncate_to(key, partition, partition.truncation_point(-1, -1), "no epoch history")
                continue
            epochs[key] = partition.leader_epoch
            asked.setdefault(key[0], []).append(Req.OffsetForLeaderPartition(
                partition=key[1], current_leader_epoch=partition.leader_epoch,
                leader_epoch=partition.latest_epoch))
        if not asked:
            return
        response = await self._connection.request(
            OFFSET_FOR_LEADER_EPOCH, _OFFSET_FOR_LEADER_EPOCH_VERSION,
            Req(replica_id=self.local_id, topics=[Req.OffsetForLeaderTopic(topic=t, partitions=ps)
                                                  for t, ps in asked.items()]))
        for topic in response.topics:
            for answer in topic.partitions:
                key = (topic.topic, answer.partition)
                partition = self._partitions.get(key)
                if partition is None or key not in self._truncate \
                        or partition.leader_epoch != epochs.get(key):
                    # Removed, or given a new leader epoch while the request was out: a
                    # FENCED_LEADER_EPOCH for the old epoch must not hold the new one.
                    continue
                if answer.error_code != ErrorCode.NONE:
                    self._on_error(key, answer.error_code, "OffsetForLeaderEpoch")
                    continue
                self._truncate_to(key, partition,
                                  partition.truncation_point(answer.leader_epoch, answer.end_offset),
                                  f"leader {self.leader_id}'s epoch {answer.leader_epoch} ends at "
                                  f"{answer.end_offset}")

    def _truncate_to(self, key, partition, point: tuple[int, bool], why: str) -> None:
        """Cut at `point` (offset, complete); an incomplete cut (the leader answered an
        epoch this log never had) asks again with the log's new latest epoch."""
        offset, complete = point
        if offset < partition.log_end_offset:
            log.info("%s-%d: truncating from %d to %d (%s)", key[0], key[1],
                     partition.log_end_offset, offset, why)
        partition.truncate_to(offset)
        if complete:
            self._truncate.discard(key)
        else:
            self._truncate.add(key)

    async def _fetch_once(self) -> bool:
        """One Fetch for every partition ready to fetch; whether anything was appended or
        the leader answered without error (so the next fetch follows at once). Throttled
        partitions left out wait only until the follower quota has room again: the fetch's
        long poll is cut to that time, and with nothing else to fetch the loop sleeps it
        (rather than replica.fetch.backoff.ms, which held the copy below its rate)."""
        cfg = self._config
        Req = FETCH.request
        fetching = {}  # key -> (fetch offset, leader epoch, last fetched epoch, log start offset)
        past_rate = None  # whether the follower quota is passed, read at the first throttled partition
        left_out = False  # a throttled partition not fetched for the rate
        for key, partition in self._partitions.items():
            if key in self._held or key in self._truncate:
                continue
            if key not in self._in_sync and self._throttled(key, partition):
                if past_rate is None:
                    past_rate = self._quota.headroom() < 0
                if past_rate:
                    left_out = True
                    continue
            fetching[key] = (partition.log_end_offset, partition.leader_epoch, partition.latest_epoch,
                             partition.log_start_offset)
        rate_back = self._quota.throttle_time() if left_out else 0.0
        if not fetching:
            if not left_out:
                return False
            await self._clock.sleep(min(rate_back, self._config.replica_fetch_backoff_ms / 1000))
            return True
        session = self._session
        listed, forgotten = session.next_request(fetching)
        by_topic: dict[str, list] = {}
        for (topic, index), (offset, leader_epoch, last_epoch, log_start) in listed.items():
            by_topic.setdefault(topic, []).append(Req.FetchPartition(
                partition=index, current_leader_epoch=leader_epoch, fetch_offset=offset,
                last_fetched_epoch=last_epoch, log_start_offset=log_start,
                partition_max_bytes=cfg.replica_fetch_max_bytes))
        gone: dict[str, list] = {}
        for topic, index in forgotten:
            gone.setdefault(topic, []).append(index)
        max_wait_ms = cfg.replica_fetch_wait_max_ms
        if rate_back > 0:
            max_wait_ms = min(max_wait_ms, math.ceil(rate_back * 1000))
        request = Req(replica_id=self.local_id, max_wait_ms=max_wait_ms,
                      min_bytes=cfg.replica_fetch_min_bytes, max_bytes=cfg.replica_fetch_response_max_bytes,
                      isolation_level=0, session_id=session.id, session_epoch=session.epoch,
                      topics=[Req.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()],
                      forgotten_topics_data=[Req.ForgottenTopic(topic=t, partitions=ps) for t, ps in gone.items()],
                      rack_id="")
        response = await self._request_unless_added(request)
        if response is None:
            return True
        if response.error_code != ErrorCode.NONE:
            log.info("%r: fetch answered %s", self, ErrorCode(response.error_code).name)
            session.reset()
            return False
        session.answered(response.session_id, fetching)
        healthy = True
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                partition = self._partitions.get(key)
                if partition is None or key in self._truncate or key not in fetching \
                        or partition.leader_epoch != fetching[key][1]:
                    session.reset()  # what the leader takes as sent was not applied
                    continue  # removed, re-added or given a new leader epoch while the fetch was out
                if not self._apply(key, partition, data):
                    healthy = False
        return healthy

    async def _request_unless_added(self, request):
        """The Fetch's response, or None when partitions were added while it waited: then
        the connection, with the long poll still pending at the leader, is replaced."""
        cfg = self._config
        timeout = cfg.replica_socket_timeout_ms / 1000 + cfg.replica_fetch_wait_max_ms / 1000
        fetch = asyncio.ensure_future(self._connection.request(FETCH, _FETCH_VERSION, request, timeout=timeout))
        added = self._added = asyncio.get_running_loop().create_future()
        try:
            done, _ = await asyncio.wait((fetch, added), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._added = None
            if not fetch.done():
                fetch.cancel()
        if fetch not in done:
            await asyncio.gather(fetch, return_exceptions=True)
            await self._connection.close()
            self._connection = self._connect()
            self._session.reset()
            return None
        return fetch.result()

    def _throttled(self, key, partition) -> bool:
        return partition.config.follower_replication_throttled_replicas.covers(key[1], self.local_id)

    def _apply(self, key, partition, data) -> bool:
        code = data.error_code
        if code == ErrorCode.NONE:
            diverging = data.diverging_epoch
            if diverging is not None and diverging.epoch >= 0:
                self._truncate_to(key, partition,
                                  partition.truncation_point(diverging.epoch, diverging.end_offset),
                                  f"diverging: leader {self.leader_id}'s epoch {diverging.epoch} ends "
                                  f"at {diverging.end_offset}")
                return True
            records = data.records or b""
            if records and self._throttled(key, partition):
                self._quota.record(len(records))
            partition.append_as_follower(records, data.high_watermark, data.log_start_offset)
            if self.local_id in partition.adding_replicas:
                self._metrics.reassignment_bytes_in += len(records)
            if partition.log_end_offset >= data.high_watermark:
                self._in_sync.add(key)
            else:
                self._in_sync.discard(key)
            return True
        if code == ErrorCode.OFFSET_OUT_OF_RANGE and data.log_start_offset > partition.log_end_offset:
            log.info("%s-%d: the leader's log starts at %d, past this log's end %d: starting there",
                     key[0], key[1], data.log_start_offset, partition.log_end_offset)
            partition.truncate_fully_and_start_at(data.log_start_offset)
            return True
        self._on_error(key, code, "Fetch")
        return False

    def _on_error(self, key, code: int, what: str) -> None:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        if code in _RETRIED:
            log.debug("%s-%d: %s from leader %d answered %s; retrying", key[0], key[1], what,
                      self.leader_id, name)
            return
        log.warning("%s-%d: %s from leader %d answered %s; waiting for the controller",
                    key[0], key[1], what, self.leader_id, name)
        self._held.add(key)
