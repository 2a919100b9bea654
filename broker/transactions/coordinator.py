"""The transaction coordinator: transactional ids, producer epochs, two-phase commit.

This broker coordinates every transactional id. States (Kafka's): Empty -> Ongoing
(first AddPartitionsToTxn/AddOffsetsToTxn) -> PrepareCommit | PrepareAbort (EndTxn) ->
CompleteCommit | CompleteAbort (markers written) -> Ongoing again with the next
transaction, or Empty again through InitProducerId. Every transition is written to
`__transaction_state` before it takes effect and before the request is answered.
Rules (Kafka's, transactions version 1: the epoch changes only through
InitProducerId and fencing, not with every transaction):
- InitProducerId: a new transactional id gets a new producer id at epoch 0; a known
  one gets its epoch bumped (which fences the previous producer), or a new producer id
  at epoch 0 once the epoch is exhausted (32766). If a transaction is Ongoing, it is
  aborted first with a bumped epoch and CONCURRENT_TRANSACTIONS answered (the client
  retries and gets the epoch after that); while a transaction completes,
  CONCURRENT_TRANSACTIONS too. v3+ may name the caller's producer id and epoch
  (KIP-360): the current epoch is bumped, a retry naming the previous epoch gets the
  current one again, anything else is PRODUCER_FENCED. The timeout must lie in
  (0, transaction.max.timeout.ms], else INVALID_TRANSACTION_TIMEOUT.
- AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit and transactional
  produces name the producer id and epoch: an unknown transactional id or another
  producer id is INVALID_PRODUCER_ID_MAPPING, another epoch PRODUCER_FENCED (the
  handlers answer INVALID_PRODUCER_EPOCH to versions that predate PRODUCER_FENCED, and
  to produces and offset commits, as Kafka's partition leaders do).
- EndTxn on an Ongoing transaction logs PrepareCommit/PrepareAbort, writes a COMMIT
  or ABORT marker (with the producer id and epoch and the coordinator epoch) to every
  partition of the transaction, `__consumer_offsets` partitions included (which applies
  or drops the pending offsets there), then logs CompleteCommit/CompleteAbort. A retry
  of a completed EndTxn with the same result succeeds; the opposite result, or EndTxn
  with no transaction, is INVALID_TXN_STATE; one while the markers are being written
  is CONCURRENT_TRANSACTIONS.
- Transactions Ongoing for longer than their timeout are aborted by a background task
  (every transaction.abort.timed.out.transaction.cleanup.interval.ms) with a bumped
  epoch, so the abandoned producer is fenced. Transactions found in PrepareCommit or
  PrepareAbort on start (a crash between the two log writes) are completed by writing
  their markers again; partitions tolerate a marker for a producer whose transaction
  is already closed. Markers that failed to be written are retried by the same task.
- Transactional ids idle (Empty or Complete*) for transactional.id.expiration.ms are
  forgotten (a tombstone is written).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode

from broker.errors import BrokerError
from broker.failpoints import fail_point
from broker.groups import offsets_log
from broker.transactions import txn_log
from broker.transactions.txn_log import (COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, ONGOING,
                                         PREPARE_ABORT, PREPARE_COMMIT, PREPARE_EPOCH_FENCE,
                                         STATE_NAMES)

log = logging.getLogger("sluice.transactions")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 32767  # Short.MaxValue: reserved so that a producer can always be fenced
_COMPLETING = (PREPARE_COMMIT, PREPARE_ABORT)
_COMPLETE = (COMPLETE_COMMIT, COMPLETE_ABORT)


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= _MAX_EPOCH - 1




@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: int
    partitions: set = field(default_factory=set)  # (topic, partition) in the transaction
    start_ms: int = -1
    last_update_ms: int = 0
    unmarked: set | None = None  # partitions still owed a marker while completing

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


class TransactionCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.clock = broker.clock
        cfg = broker.config
        self.max_timeout_ms = cfg.transaction_max_timeout_ms
        self.partitions = cfg.transaction_state_log_num_partitions
        self.expiration_ms = cfg.transactional_id_expiration_ms
        self.coordinator_epoch = 0
        self.txns: dict[str, TxnMetadata] = {}

    # -- durability ------------------------------------------------------------------
    def _topic(self):
        topics = self.broker.topics
        topic = topics.topics.get(txn_log.TOPIC)
        if topic is None:
            topic = topics.create(txn_log.TOPIC, self.partitions, {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.broker.config.transaction_state_log_segment_bytes)})
        return topic

    def _transition(self, meta: TxnMetadata, **changes) -> None:
        """Log `meta` with `changes` applied, then apply them (not if the write fails)."""
        fields = {"producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                  "timeout_ms": meta.timeout_ms, "state": meta.state,
                  "partitions": meta.partitions, "start_ms": meta.start_ms}
        fields.update(changes)
        now = self.clock.wall_ms()
        record = txn_log.txn_record(meta.transactional_id, fields["producer_id"],
                                    fields["producer_epoch"], fields["timeout_ms"], fields["state"],
                                    fields["partitions"], now, fields["start_ms"])
        topic = self._topic()
        partition = topic.partitions[txn_log.partition_for(meta.transactional_id, len(topic.partitions))]
        try:
            txn_log.append_records(partition, [record], now)
        except BrokerError as exc:
            log.error("cannot write to %s: %s", txn_log.TOPIC, exc)
            raise BrokerError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc)) from None
        for name, value in changes.items():
            setattr(meta, name, value)
        meta.last_update_ms = now

    def load(self) -> None:
        """Replay `__transaction_state` (when it exists); complete the transactions a
        crash left between PrepareCommit/PrepareAbort and CompleteCommit/CompleteAbort."""
        topic = self.broker.topics.topics.get(txn_log.TOPIC)
        if topic is None:
            return
        for partition in topic.partitions.values():
            for key, value in txn_log.read_records(partition):
                decoded = txn_log.decode_record(key, value)
                if decoded is None:
                    continue
                txn_id, v = decoded
                if v is None or v.transaction_status in (DEAD, PREPARE_EPOCH_FENCE) or \
                        v.transaction_status not in STATE_NAMES:
                    self.txns.pop(txn_id, None)
                    continue
                partitions = {(p.topic, i) for p in (v.transaction_partitions or ()) for i in p.partition_ids}
                self.txns[txn_id] = TxnMetadata(
                    txn_id, v.producer_id, getattr(v, "previous_producer_id", NO_PRODUCER_ID),
                    v.producer_epoch, NO_PRODUCER_EPOCH, v.transaction_timeout_ms,
                    v.transaction_status, partitions if v.transaction_status not in _COMPLETE else set(),
                    v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms)
        completing = [m for m in self.txns.values() if m.state in _COMPLETING]
        for meta in completing:
            log.info("completing transaction of %s (producer %d epoch %d) left in %s",
                     meta.transactional_id, meta.producer_id, meta.producer_epoch, meta.state_name)
            self._complete(meta)
        ongoing = sum(m.state == ONGOING for m in self.txns.values())
        log.info("loaded %d transactional id(s) from %s (%d ongoing, %d completed on load)",
                 len(self.txns), txn_log.TOPIC, ongoing, len(completing))

    # -- InitProducerId --------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer; raises BrokerError."""
        if not transactional_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise BrokerError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                              f"transaction timeout {timeout_ms} ms is outside "
                              f"(0, {self.max_timeout_ms}] (transaction.max.timeout.ms)")
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = self.txns[transactional_id] = TxnMetadata(
                transactional_id, self.broker.producer_ids.allocate(), NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms, EMPTY,
                last_update_ms=self.clock.wall_ms())
        if expected is not None and not self._valid_producer_id(meta, *expected):
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"producer {expected[0]} is not {transactional_id!r}'s current producer")
        if meta.state in _COMPLETING:
            self._complete(meta)  # retry markers a failure left unwritten
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing")
        if meta.state == ONGOING:
            # Abort the open transaction (fencing its producer) and have the client retry:
            # the retry bumps the epoch once more (or rotates the producer id).
            self._fence_and_abort(meta)
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "aborted the ongoing transaction first")
        if epoch_exhausted(meta.producer_epoch) and (expected is None or expected[1] == meta.producer_epoch):
            pid, epoch = self.broker.producer_ids.allocate(), 0
            last_epoch = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            last_pid = meta.producer_id
        else:
            last_pid = meta.last_producer_id
            pid, bumped = meta.producer_id, meta.producer_epoch + 1
            if expected is None:
                epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
            elif meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
                epoch, last_epoch = bumped, meta.producer_epoch
            elif expected[1] == meta.last_producer_epoch:
                epoch, last_epoch = meta.producer_epoch, meta.last_producer_epoch  # a retry
            else:
                raise BrokerError(ErrorCode.PRODUCER_FENCED,
                                  f"epoch {expected[1]} is neither the current {meta.producer_epoch} "
                                  f"nor the previous {meta.last_producer_epoch}")
        self._transition(meta, producer_id=pid, producer_epoch=epoch, timeout_ms=timeout_ms,
                         state=EMPTY, partitions=set(), start_ms=-1)
        meta.last_producer_id, meta.last_producer_epoch = last_pid, last_epoch
        log.info("initialized transactional id %s with producer %d epoch %d",
                 transactional_id, pid, epoch)
        return pid, epoch

    @staticmethod
    def _valid_producer_id(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id or
                (producer_id == meta.last_producer_id and epoch_exhausted(epoch)))

    # -- adding partitions -----------------------------------------------------------
    def _known(self, transactional_id: str) -> TxnMetadata:
        if not transactional_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"transactional id {transactional_id!r} is not known")
        return meta

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TxnMetadata:
        meta = self._known(transactional_id)
        if meta.producer_id != producer_id:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"producer {producer_id} is not {transactional_id!r}'s ({meta.producer_id})")
        if meta.producer_epoch != epoch:
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"epoch {epoch} of producer {producer_id} is not the current {meta.producer_epoch}")
        return meta

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: set[tuple[str, int]]) -> None:
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state in _COMPLETING:
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing")
        if meta.state == ONGOING and partitions <= meta.partitions:
            return
        start = self.clock.wall_ms() if meta.state in (EMPTY, *_COMPLETE) else meta.start_ms
        self._transition(meta, state=ONGOING, partitions=meta.partitions | partitions, start_ms=start)

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions) -> dict[tuple[str, int], int]:
        """Whether each partition is in the producer's transaction (NONE) or not
        (TRANSACTION_ABORTABLE); raises BrokerError for the producer itself."""
        meta = self._current(transactional_id, producer_id, epoch)
        if meta.state in _COMPLETING:
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction is completing")
        return {tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}

    def check_write(self, transactional_id: str, producer_id: int, epoch: int,
                    tp: tuple[str, int]) -> ErrorCode | None:
        """None when a transactional write to `tp` (a produce or offset commit) belongs
        to the producer's ongoing transaction; else the coordinator's reason, mapped as
        Kafka's partition leaders map it (PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH,
        CONCURRENT_TRANSACTIONS -> NOT_ENOUGH_REPLICAS, so that clients retry)."""
        try:
            code = self.verify_partitions(transactional_id, producer_id, epoch, [tp])[tp]
        except BrokerError as exc:
            code = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                    ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS}.get(exc.code, exc.code)
        return None if code == ErrorCode.NONE else code

    # -- ending transactions ---------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        meta = self._known(transactional_id)
        self._end(meta, producer_id, epoch, commit, from_client=True)

    def _end(self, meta: TxnMetadata, producer_id: int, epoch: int, commit: bool,
             from_client: bool) -> None:
        if meta.producer_id != producer_id:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"producer {producer_id} is not {meta.transactional_id!r}'s ({meta.producer_id})")
        if (from_client and epoch != meta.producer_epoch) or epoch < meta.producer_epoch:
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"epoch {epoch} of producer {producer_id} is not the current {meta.producer_epoch}")
        result = "commit" if commit else "abort"
        if meta.state == ONGOING:
            if epoch != meta.producer_epoch:
                meta.last_producer_epoch = NO_PRODUCER_EPOCH  # a fence: no retry may resume
            self._transition(meta, producer_epoch=epoch,
                             state=PREPARE_COMMIT if commit else PREPARE_ABORT)
            if commit:
                fail_point("txn-after-prepare-commit")
            self._complete(meta)
        elif meta.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return  # a retry of what is done
        elif meta.state == (PREPARE_COMMIT if commit else PREPARE_ABORT):
            self._complete(meta)
            if meta.state in _COMPLETING:
                raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, f"the {result} is being completed")
        else:
            raise BrokerError(ErrorCode.INVALID_TXN_STATE,
                              f"cannot {result}: the transaction of {meta.transactional_id!r} is "
                              f"{meta.state_name}")

    def _fence_and_abort(self, meta: TxnMetadata) -> None:
        """Abort the Ongoing transaction with the epoch bumped, fencing its producer."""
        self._end(meta, meta.producer_id, meta.producer_epoch + 1, commit=False, from_client=False)

    def _complete(self, meta: TxnMetadata) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort transaction, then log its
        completion. A marker that cannot be written leaves the transaction completing;
        the background task retries it."""
        commit = meta.state == PREPARE_COMMIT
        if meta.unmarked is None:
            meta.unmarked = set(meta.partitions)
        groups = self.broker.groups
        for topic, partition in sorted(meta.unmarked):
            try:
                self.broker.topics.partition(topic, partition).append_marker_as_leader(
                    meta.producer_id, meta.producer_epoch, self.coordinator_epoch, commit)
            except BrokerError as exc:
                if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    log.warning("%s-%d is gone; no marker for producer %d", topic, partition, meta.producer_id)
                elif exc.code == ErrorCode.KAFKA_STORAGE_ERROR:  # the log has warned
                    return  # retried by the background task
                else:
                    log.warning("marker for producer %d refused by %s-%d: %s", meta.producer_id,
                                topic, partition, exc)
            else:
                if topic == offsets_log.TOPIC:
                    groups.end_transaction(meta.producer_id, partition, commit)
            meta.unmarked.discard((topic, partition))
            if commit and meta.unmarked:
                fail_point("txn-mid-commit-markers")
        try:
            self._transition(meta, state=COMPLETE_COMMIT if commit else COMPLETE_ABORT,
                             partitions=set())
        except BrokerError:
            return  # retried by the background task
        meta.unmarked = None
        log.debug("transaction of %s %s", meta.transactional_id, "committed" if commit else "aborted")

    # -- background ------------------------------------------------------------------
    def abort_timed_out(self) -> None:
        """Abort transactions Ongoing past their timeout; finish stalled completions."""
        now = self.clock.wall_ms()
        for meta in list(self.txns.values()):
            try:
                if meta.state in _COMPLETING:
                    self._complete(meta)
                elif meta.state == ONGOING and meta.start_ms + meta.timeout_ms < now:
                    log.info("aborting the transaction of %s (producer %d epoch %d): its timeout "
                             "of %d ms has passed", meta.transactional_id, meta.producer_id,
                             meta.producer_epoch, meta.timeout_ms)
                    self._fence_and_abort(meta)
            except BrokerError as exc:
                log.warning("could not abort the transaction of %s: %s", meta.transactional_id, exc)

    def upkeep(self) -> None:
        """Forget transactional ids idle past transactional.id.expiration.ms; clean
        every partition of `__transaction_state` with two or more sealed segments."""
        now = self.clock.wall_ms()
        topic = self.broker.topics.topics.get(txn_log.TOPIC)
        if topic is None:
            return
        for meta in list(self.txns.values()):
            if meta.state in (EMPTY, *_COMPLETE) and now - meta.last_update_ms >= self.expiration_ms:
                partition = topic.partitions[txn_log.partition_for(meta.transactional_id, len(topic.partitions))]
                try:
                    txn_log.append_records(partition, [txn_log.tombstone(meta.transactional_id)], now)
                except BrokerError:  # KAFKA_STORAGE_ERROR: the log has warned
                    continue
                del self.txns[meta.transactional_id]
                log.info("transactional id %s expired", meta.transactional_id)
        for index, partition in sorted(topic.partitions.items()):
            if partition.segment_count < 3:
                continue
            live = [txn_log.txn_record(m.transactional_id, m.producer_id, m.producer_epoch,
                                       m.timeout_ms, m.state, m.partitions, m.last_update_ms, m.start_ms)
                    for m in self.txns.values() if m.producer_epoch != NO_PRODUCER_EPOCH
                    and txn_log.partition_for(m.transactional_id, len(topic.partitions)) == index]
            txn_log.clean(partition, live, now)

    # -- describing ------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnMetadata:
        if not transactional_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == DEAD or meta.producer_epoch == NO_PRODUCER_EPOCH:
            raise BrokerError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                              f"transactional id {transactional_id!r} is not known")
        return meta

    def list(self, states: set[int] | None, producer_ids: set[int] | None,
             duration_ms: int) -> list[TxnMetadata]:
        now = self.clock.wall_ms()
        return [m for m in self.txns.values()
                if m.state != DEAD and m.producer_epoch != NO_PRODUCER_EPOCH
                and (not states or m.state in states)
                and (not producer_ids or m.producer_id in producer_ids)
                and (duration_ms < 0 or now - m.start_ms > duration_ms)]
