"""One topic-partition's replica state on this broker, between every request (and every
coordinator) and the partition's log, as Kafka's `Partition` is.

- State: the leader (this broker), its leader epoch, the assigned replicas, the in-sync
  replicas (ISR), and each follower's log end offset as its fetches report it; while the
  partition is being reassigned, the replicas being added and removed, as the controller
  said (a reassigning partition's replication counts in Kafka's metrics of that name).
- The high watermark is the smallest log end offset over the ISR, the leader's own
  included. It never moves backwards; it starts from the `replication-offset-checkpoint`
  and moves when the leader appends or a follower's fetch shows it caught up.
- Consumers read below the high watermark (read_uncommitted) or the last stable offset
  (read_committed); followers read up to the log end.
- Every move of the high watermark, and every append while followers may be waiting for
  it, wakes the requests waiting on the partition (`DelayedOperations`); no writer
  wakes anything itself.
- A follower joins the ISR once its log end offset reaches the high watermark, if its
  owner admits it (a cluster broker admits no replica the controller lists as offline),
  and is dropped from it when it has not been caught up with the log end for
  replica.lag.time.max.ms.
- acks=all: the append is refused with NOT_ENOUGH_REPLICAS while the ISR is smaller than
  min.insync.replicas; it is complete once the high watermark passes it, with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND should the ISR have shrunk below min.insync.replicas
  by then.
- The leader stamps its epoch into every batch it appends. On one broker each partition
  is made leader with ISR = {this broker} when its log opens, one epoch past the last it
  holds records of (`lead_alone`), so the high watermark follows every append at once.
- Only the leader takes produces, transaction markers and consumers' reads
  (NOT_LEADER_OR_FOLLOWER elsewhere). Becoming a follower wakes every waiting request,
  so an acks=all produce or a long-poll fetch learns at once that this broker no longer
  leads. A follower appends the leader's batches unchanged (`append_as_follower`), takes
  the leader's high watermark as far as its own log reaches, and on a new leader cuts
  its log where it diverged from the leader's (`truncation_point`, Kafka's rule).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from wire.error_codes import ErrorCode
from wire.records import BatchHeader

from broker.clock import Clock
from broker.errors import BrokerError
from broker.replica.delayed import DelayedOperations
from broker.storage.index import AbortedTxn
from broker.storage.log import AppendResult, PartitionLog
from broker.storage.segment import FileRegion

UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class PartitionState:
    """A partition as the controller states it (LeaderAndIsr, UpdateMetadata): its leader
    and epoch, its replicas and in-sync replicas."""

    index: int
    leader_id: int  # -1: no leader
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass
class FollowerState:
    end_offset: int = UNKNOWN_OFFSET  # as its last fetch reported; unknown until then
    last_caught_up_ms: int = 0  # when a fetch of it last reached the leader's log end
    log_start_offset: int = UNKNOWN_OFFSET  # as its last fetch reported


class Partition:
    def __init__(self, log: PartitionLog, local_id: int, delayed: DelayedOperations, clock: Clock,
                 lag_time_max_ms: int, admit_to_isr: Callable[["Partition", int], bool] | None = None):
        """`admit_to_isr(partition, replica)`: asked when a caught-up follower would join the
        ISR here; False keeps it out (a cluster broker refuses offline replicas and writes
        an admitted one to ZooKeeper)."""
        self.log = log  # the partition's storage; only this class and its owner touch it
        self.topic = log.topic
        self.index = log.partition
        self.key = (log.topic, log.partition)
        self.local_id = local_id
        self._delayed = delayed
        self._clock = clock
        self._lag_time_max_ms = lag_time_max_ms
        self._admit_to_isr = admit_to_isr
        # Until `make_leader`: no leader, and the high watermark stays as restored.
        self.leader_id = -1
        self.leader_epoch = log.epochs.latest_epoch
        self.replicas: list[int] = []
        self.isr: set[int] = set()
        self.adding_replicas: tuple[int, ...] = ()
        self.removing_replicas: tuple[int, ...] = ()
        self._followers: dict[int, FollowerState] = {}
        self.state = PartitionState(self.index, -1, self.leader_epoch, (), ())  # as the metadata view shows it

    # -- leadership and replicas ---------------------------------------------------------
    def make_leader(self, leader_epoch: int, replicas: list[int], isr: list[int], *,
                    adding: Iterable[int] = (), removing: Iterable[int] = ()) -> None:
        """Lead the partition from `leader_epoch` on, with these replicas and ISR (this
        broker among them), `adding` and `removing` those of a reassignment. A new leader
        knows no follower's position until it fetches; a leader staying leader (a new
        epoch for an ISR change) keeps what it knows, as Kafka's does."""
        if self.local_id not in replicas or self.local_id not in isr:
            raise ValueError(f"broker {self.local_id} leads {self.topic}-{self.index} only as "
                             f"an in-sync replica, not with replicas {replicas} and ISR {isr}")
        now = self._clock.wall_ms()
        known = self._followers if self.is_leader else {}
        self.leader_id = self.local_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = set(isr)
        self.adding_replicas, self.removing_replicas = tuple(adding), tuple(removing)
        self._followers = {r: known.get(r) or FollowerState(last_caught_up_ms=now)
                           for r in replicas if r != self.local_id}
        self._state_changed()
        self._maybe_advance_high_watermark()

    def make_follower(self, leader_id: int, leader_epoch: int, replicas: list[int], isr: list[int], *,
                      adding: Iterable[int] = (), removing: Iterable[int] = ()) -> bool:
        """Follow `leader_id` from `leader_epoch` on (`adding` and `removing`: as for
        `make_leader`); True when the leader or the epoch changed. Followers' positions are the leader's business: forgotten here. Waiting
        requests are woken to find this broker no longer leads."""
        if leader_id == self.local_id or self.local_id not in replicas:
            raise ValueError(f"broker {self.local_id} follows {self.topic}-{self.index} only as a "
                             f"replica other than the leader, not with leader {leader_id} and "
                             f"replicas {replicas}")
        changed = (leader_id, leader_epoch) != (self.leader_id, self.leader_epoch)
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas)
        self.isr = set(isr)
        self.adding_replicas, self.removing_replicas = tuple(adding), tuple(removing)
        self._followers = {}
        self._state_changed()
        self._delayed.wake(self.key)
        return changed

    def stop(self) -> None:
        """The controller stopped this replica to delete it (moved away, or its topic
        deleted): it leads and follows no one. Waiting requests are woken
        to find that out, as Kafka completes them when it stops a replica, rather than
        waiting out their timeouts for a high watermark that no longer moves here."""
        self.leader_id = -1
        self._followers = {}
        self._state_changed()
        self._delayed.wake(self.key)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_id

    @property
    def is_reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def check_leader(self) -> None:
        """NOT_LEADER_OR_FOLLOWER unless this broker leads the partition."""
        if not self.is_leader:
            leader = f"broker {self.leader_id}" if self.leader_id >= 0 else "no broker"
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"broker {self.local_id} is not the leader of {self.topic}-{self.index} "
                              f"(leader epoch {self.leader_epoch}): {leader} is")

    def lead_alone(self) -> None:
        """Lead as the only replica (the single node), from one epoch past the log's last."""
        self.make_leader(self.log.epochs.latest_epoch + 1, [self.local_id], [self.local_id])

    def update_follower(self, replica_id: int, fetch_offset: int, log_start_offset: int = UNKNOWN_OFFSET) -> bool:
        """Record a follower's fetch position (its log end offset) and log start; False
        when `replica_id` is not a replica of this partition."""
        follower = self._followers.get(replica_id)
        if follower is None:
            return False
        moved = fetch_offset != follower.end_offset
        follower.end_offset = fetch_offset
        follower.log_start_offset = log_start_offset
        if fetch_offset >= self.log.log_end_offset:
            follower.last_caught_up_ms = self._clock.wall_ms()
        if replica_id not in self.isr and fetch_offset >= self.log.high_watermark and (
                self._admit_to_isr is None or self._admit_to_isr(self, replica_id)):
            self.isr.add(replica_id)
            self._state_changed()
            moved = True
        if moved:  # else the high watermark is where every other change left it
            self._maybe_advance_high_watermark()
        return True

    def lagging_followers(self) -> list[int]:
        """The ISR's followers not caught up with the log end for replica.lag.time.max.ms
        (none on a follower: only a leader tracks its followers)."""
        if not self.is_leader:
            return []
        now = self._clock.wall_ms()
        return sorted(r for r in self.isr if r != self.local_id
                      and now - self._followers[r].last_caught_up_ms > self._lag_time_max_ms)

    def remove_from_isr(self, replicas: list[int]) -> None:
        """Drop `replicas` from the ISR (a cluster broker once ZooKeeper has the smaller
        ISR); the high watermark may move on."""
        if self.isr & set(replicas):
            self.isr.difference_update(replicas)
            self._state_changed()
            self._maybe_advance_high_watermark()

    def _state_changed(self) -> None:
        self.state = PartitionState(self.index, self.leader_id, self.leader_epoch, tuple(self.replicas),
                                    tuple(sorted(self.isr)))

    def _maybe_advance_high_watermark(self) -> bool:
        ends = [self.log.log_end_offset]
        ends += [self._followers[r].end_offset for r in self.isr if r != self.local_id]
        candidate = min(ends)
        if candidate <= self.log.high_watermark:
            return False
        self.log.update_high_watermark(candidate)
        self._delayed.wake(self.key)
        return True

    def _appended(self) -> None:
        """The log end moved: the high watermark may follow; followers waiting for data
        are woken even when it does not."""
        if not self._maybe_advance_high_watermark() and self._followers:
            self._delayed.wake(self.key)

    # -- positions ------------------------------------------------------------------------
    @property
    def config(self):
        return self.log.config

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    @property
    def size_bytes(self) -> int:
        return self.log.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self.log.segments)

    # -- writing --------------------------------------------------------------------------
    def append_as_leader(self, header: BatchHeader, batch: memoryview, required_acks: int) -> AppendResult:
        """Append a validated batch under the current leader epoch (see `PartitionLog.append`)."""
        self.check_leader()
        if required_acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            raise BrokerError(ErrorCode.NOT_ENOUGH_REPLICAS,
                              f"{len(self.isr)} in-sync replica(s) of {self.topic}-{self.index} are "
                              f"fewer than min.insync.replicas {self.config.min_insync_replicas}")
        result = self.log.append(header, batch, self.leader_epoch)
        if not result.duplicate:
            self._appended()
        return result

    def append_marker_as_leader(self, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                                commit: bool, transaction_version: int = 0) -> int:
        """Append a transaction marker (see `PartitionLog.append_marker`); its offset."""
        self.check_leader()
        offset = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit,
                                        self.leader_epoch, transaction_version)
        self._appended()
        return offset

    def acks_all_result(self, required_offset: int) -> ErrorCode | None:
        """None while the high watermark is below `required_offset` (the acks=all produce
        waits); then NONE, or NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is now too small.
        NOT_LEADER_OR_FOLLOWER as soon as this broker no longer leads: the batch may not
        survive the new leader's truncation."""
        if not self.is_leader:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.log.high_watermark < required_offset:
            return None
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    async def until_replicated(self, required_offset: int, timeout_s: float) -> ErrorCode:
        """Wait for `acks_all_result(required_offset)`, REQUEST_TIMED_OUT after
        `timeout_s` (a coordinator's own write waits here as a produce does)."""
        deadline = self._clock.monotonic() + timeout_s
        while True:
            code = self.acks_all_result(required_offset)
            if code is not None:
                return code
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self._delayed.wait([self.key], remaining)

    def append_as_follower(self, records, leader_high_watermark: int, leader_log_start_offset: int) -> int:
        """Append the leader's batches from its Fetch response (see
        `PartitionLog.append_as_follower`); returns how many. The high watermark then
        moves up to the leader's, as far as this log reaches, and the log start offset up
        to the leader's (records the leader deleted go here too), within the high watermark."""
        if self.is_leader:
            raise BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              f"broker {self.local_id} leads {self.topic}-{self.index}: it appends "
                              f"no other broker's batches")
        appended = self.log.append_as_follower(records)
        high_watermark = min(leader_high_watermark, self.log.log_end_offset)
        moved = appended > 0
        if high_watermark > self.log.high_watermark:
            self.log.update_high_watermark(high_watermark)
            moved = True
        log_start = min(leader_log_start_offset, self.log.high_watermark)
        if log_start > self.log.log_start_offset:
            self.log.delete_records_before(log_start)
            moved = True
        if moved:
            self._delayed.wake(self.key)
        return appended

    def delete_records_before(self, offset: int) -> None:
        self.log.delete_records_before(offset)

    def enforce_retention(self, now_ms: int) -> int:
        return self.log.enforce_retention(now_ms)

    def flush_if_due(self) -> None:
        self.log.flush_if_due()

    def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset` (a follower's divergent tail); the high watermark
        follows it down if it was above."""
        self.log.truncate_to(offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and start it at `offset`: a follower whose log ends below the
        leader's log start (the leader answered its fetch OFFSET_OUT_OF_RANGE) starts
        over from the leader's log start offset."""
        self.log.truncate_fully_and_start_at(offset)

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch this log holds records of (-1: none); what a follower
        asks the leader's OffsetForLeaderEpoch about."""
        return self.log.epochs.latest_epoch

    def truncation_point(self, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
        """(offset to truncate to, whether that ends the truncation) from the leader's
        answer (epoch, end offset) to OffsetForLeaderEpoch for `latest_epoch`, or from a
        Fetch response's diverging epoch; Kafka's follower rule:
        - an undefined answer (-1 epoch or offset): the high watermark;
        - an epoch this log has too: the smaller of both ends of that epoch (this log's
          end for its latest epoch) - done;
        - an epoch this log does not have: the end of this log's largest epoch below it,
          not done: ask again with the new latest epoch (a Fetch v12+ with
          last_fetched_epoch finds any divergence left)."""
        end = self.log.log_end_offset
        if leader_epoch < 0 or leader_end_offset < 0:
            return min(self.log.high_watermark, end), True
        own_epoch, own_end = self.log.epochs.end_offset_for(leader_epoch, end)
        if own_epoch < 0 or own_end < 0:  # no epoch at or below it here: trust the leader
            return min(leader_end_offset, end), True
        if own_epoch != leader_epoch:
            return min(own_end, end), False
        return min(own_end, leader_end_offset, end), True

    def truncation_offset(self, leader_epoch: int, leader_end_offset: int) -> int:
        """Where to truncate given the leader's epoch and end offset (see `truncation_point`)."""
        return self.truncation_point(leader_epoch, leader_end_offset)[0]

    # -- reading --------------------------------------------------------------------------
    def read(self, offset: int, max_bytes: int, read_committed: bool, min_one_batch: bool,
             leader_only: bool = True) -> tuple[FileRegion | None, list[AbortedTxn]]:
        """A consumer's read: up to the high watermark, or with `read_committed` up to the
        last stable offset with the aborted transactions in range, as this replica knows
        them. The leader's only, unless not `leader_only` (KIP-392: a follower serves a
        consumer that gives its client metadata)."""
        if leader_only:
            self.check_leader()
        if read_committed:
            return self.log.read_committed(offset, max_bytes, min_one_batch)
        return self.log.read(offset, max_bytes, self.log.high_watermark, min_one_batch), []

    def preferred_read_replica(self, client_rack: str, fetch_offset: int, rack_of) -> int | None:
        """The replica a consumer in `client_rack` should fetch from, if not this leader
        (Kafka's RackAwareReplicaSelector): among the leader and the in-sync followers
        whose log holds `fetch_offset`, the leader if it is in that rack, else the most
        caught-up one there (log end, then the latest caught up, then the highest id);
        None when none is there. `rack_of(broker id)`: its broker.rack, or None."""
        if not client_rack or not self.is_leader or rack_of(self.local_id) == client_rack:
            return None
        now = self._clock.wall_ms()
        candidates = [(state.end_offset, state.last_caught_up_ms - now, replica)
                      for replica, state in self._followers.items()
                      if replica in self.isr and state.log_start_offset <= fetch_offset <= state.end_offset
                      and rack_of(replica) == client_rack]
        return max(candidates)[2] if candidates else None

    def read_as_follower(self, offset: int, max_bytes: int, min_one_batch: bool) -> FileRegion | None:
        """A follower's read: up to the log end."""
        return self.log.read(offset, max_bytes, self.log.log_end_offset, min_one_batch)

    def decoded_batches(self, max_decompressed: int):
        """Every stored batch with its records, for a coordinator loading its state."""
        return self.log.decoded_batches(max_decompressed)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.log.offset_for_timestamp(timestamp)

    def max_timestamp(self) -> tuple[int, int] | None:
        return self.log.max_timestamp()

    def epoch_at(self, offset: int) -> int:
        """The leader epoch the record at `offset` was written in (-1 when unknown)."""
        return self.log.epochs.epoch_for(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch. The current epoch ends at the log
        end even before its first record (Kafka records it when leadership begins)."""
        if epoch == self.leader_epoch:
            return epoch, self.log.log_end_offset
        return self.log.epochs.end_offset_for(epoch, self.log.log_end_offset)

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """(epoch, end offset) where a fetcher's log diverges from this one, judged by the
        epoch of the last batch it fetched (Fetch v12+), or None when it does not. An epoch
        this log cannot place, or an offset below the log start, is OFFSET_OUT_OF_RANGE."""
        epoch, end = self.end_offset_for_epoch(last_fetched_epoch)
        if epoch < 0 or end < 0:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"cannot find the end of epoch {last_fetched_epoch} in {self.topic}-{self.index}")
        if fetch_offset < self.log.log_start_offset:
            raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE,
                              f"offset {fetch_offset} is below the log start offset "
                              f"{self.log.log_start_offset} of {self.topic}-{self.index}")
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def check_leader_epoch(self, requested: int) -> None:
        """A request's current leader epoch (-1: not given) must be ours: older is
        FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH (this broker has not heard of it)."""
        if requested < 0 or requested == self.leader_epoch:
            return
        if requested < self.leader_epoch:
            raise BrokerError(ErrorCode.FENCED_LEADER_EPOCH,
                              f"leader epoch {requested} of {self.topic}-{self.index} is older than "
                              f"the current {self.leader_epoch}")
        raise BrokerError(ErrorCode.UNKNOWN_LEADER_EPOCH,
                          f"leader epoch {requested} of {self.topic}-{self.index} is newer than "
                          f"the current {self.leader_epoch}")

    # -- producers and transactions -----------------------------------------------------
    def producers(self):
        """The producers this partition keeps state of (DescribeProducers)."""
        return self.log.producer_state.producers.values()
