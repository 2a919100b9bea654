"""The transaction coordinator: transactional ids, producer epochs, two-phase commit.

The coordinator of a transactional id is the leader of its partition of
`__transaction_state` (abs(javaHash(id)) % partitions): on the single node this broker
for every id, in a cluster the broker leading that partition (`self.runtime`, see
`broker.coordinator_runtime`): a partition is loaded when this broker becomes its leader
(COORDINATOR_LOAD_IN_PROGRESS meanwhile, NOT_COORDINATOR for ids of partitions led
elsewhere) and its ids are forgotten when it stops leading. Loading completes the
transactions it finds in PrepareCommit/PrepareAbort. The coordinator epoch written into
markers is the partition's coordinator epoch (its leader epoch when loaded).

States (Kafka's): Empty -> Ongoing
(first AddPartitionsToTxn/AddOffsetsToTxn) -> PrepareCommit | PrepareAbort (EndTxn) ->
CompleteCommit | CompleteAbort (markers written) -> Ongoing again with the next
transaction, or Empty again through InitProducerId. Every transition is appended to
`__transaction_state` and takes effect in memory, and the request is answered, only once
it is committed (acks=all against transaction.state.log.min.isr), as Kafka orders it;
while it is being written the id has a pending transition and other requests for it
get CONCURRENT_TRANSACTIONS. A failed write changes nothing (NOT_COORDINATOR when the
leadership moved, COORDINATOR_NOT_AVAILABLE otherwise: the client retries).

Rules (Kafka's; with transactions version 1 the epoch changes only through
InitProducerId and fencing, with version 2 also at every EndTxn, see below):
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
- EndTxn on an Ongoing transaction logs PrepareCommit/PrepareAbort and is answered
  once that is committed, as Kafka answers it (see `end_txn`). Then, in the background,
  the coordinator writes a COMMIT or ABORT marker (with the producer id and epoch and
  the coordinator epoch) to every partition of the transaction, `__consumer_offsets`
  partitions included (which applies or drops the pending offsets there): locally or
  with WriteTxnMarkers to the partitions' leaders, all at once
  (`broker.transactions.markers`), then logs CompleteCommit/CompleteAbort. Until then
  the id's AddPartitionsToTxn, AddOffsetsToTxn, InitProducerId and EndTxn (either
  result, every version: transactions version 1) get CONCURRENT_TRANSACTIONS, as in
  Kafka. AddPartitionsToTxn and AddOffsetsToTxn first wait for the completion, up to
  add.partitions.to.txn.retry.backoff.max.ms (100 ms), and go on once it is done: the
  retry a client makes after CONCURRENT_TRANSACTIONS comes 20 ms later (librdkafka's and
  Kafka's producers), where the completion takes a few milliseconds, so a producer that
  begins its next transaction at once would wait that long every time (Kafka 4's
  partition leaders retry a transaction's AddPartitionsToTxn on the server side for as
  long, KAFKA-18654). A retry of a completed EndTxn with the same result succeeds; the
  opposite result, or EndTxn with no transaction, is INVALID_TXN_STATE.
- Transactions version 2 (KIP-890 part 2; a client uses it when ApiVersions finalizes
  `transaction.version` 2, see broker.features), chosen per request as Kafka's
  coordinator chooses it: by EndTxn v5+, and by the partition leaders' implicit
  AddPartitionsToTxn for Produce v12+ and TxnOffsetCommit v5+. EndTxn bumps the epoch
  as it logs PrepareCommit/PrepareAbort (the markers carry the new epoch, which fences
  any write of the ended transaction still on its way) and answers the producer id and
  epoch to go on with; at an exhausted epoch (32766) the epoch goes to 32767 for the
  markers and a new producer id is allocated (`next_producer_id`), which takes over at
  epoch 0 when the transaction completes. On a transaction that went through
  transactions v2 a retried EndTxn names the epoch before the bump (or, after an
  overflow, the previous producer id at 32766): answered CONCURRENT_TRANSACTIONS while
  its markers are written, NONE once complete; any other epoch, the current one
  included (it is the next transaction's), is PRODUCER_FENCED, as in Kafka. A fence
  (a timeout's or InitProducerId's abort) ends a transaction as version 1 does.
- Transactions Ongoing for longer than their timeout are aborted by a background task
  (every transaction.abort.timed.out.transaction.cleanup.interval.ms) with a bumped
  epoch, so the abandoned producer is fenced. Transactions found in PrepareCommit or
  PrepareAbort on start or on load (a crash or failover between the two log writes)
  are completed by writing their markers again; partitions tolerate a marker for a
  producer whose transaction is already closed. Markers are retried until written or
  the coordinator resigns; a completion that stopped is started again by that task.
- Transactional ids idle (Empty or Complete*) for transactional.id.expiration.ms are
  forgotten (a tombstone is written).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from wire.error_codes import ErrorCode

from broker.coordinator_runtime import CoordinatorRuntime
from broker.errors import BrokerError
from broker.failpoints import fail_point
from broker.transactions import txn_log
from broker.transactions.add_partitions_manager import AddPartitionsToTxnManager
from broker.transactions.markers import MarkerWriter
from broker.transactions.txn_log import (COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, ONGOING,
                                         PREPARE_ABORT, PREPARE_COMMIT, PREPARE_EPOCH_FENCE,
                                         STATE_NAMES)

log = logging.getLogger("sluice.transactions")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 32767  # Short.MaxValue: reserved so that a producer can always be fenced
_COMPLETING = (PREPARE_COMMIT, PREPARE_ABORT)
_COMPLETE = (COMPLETE_COMMIT, COMPLETE_ABORT)
_WRITE_TIMEOUT_S = 10.0  # for a state change to be committed (COORDINATOR_NOT_AVAILABLE after)
TRANSACTIONS_V0, TRANSACTIONS_V2 = 0, 2  # Kafka's TransactionVersion as the log records it


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= _MAX_EPOCH - 1


# A coordinator's answer as Kafka's partition leaders pass it on to a transactional
# write: a fenced epoch as the partition's own error, a coordinator moving, loading or
# completing the previous transaction as one the client retries.
_LEADER_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                  ErrorCode.CONCURRENT_TRANSACTIONS: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.NOT_COORDINATOR: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.NOT_ENOUGH_REPLICAS,
                  ErrorCode.COORDINATOR_NOT_AVAILABLE: ErrorCode.NOT_ENOUGH_REPLICAS}


def leader_error(code: int) -> int:
    return _LEADER_ERRORS.get(code, code)


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
    pending: bool = False  # a state change is being written (Kafka's pendingState)
    completion: asyncio.Task | None = None  # writing the markers, then Complete*
    log_partition: int = -1  # the partition of `__transaction_state` holding the id
    next_producer_id: int = NO_PRODUCER_ID  # taking over when an overflowed transaction completes
    transactions_v2: bool = False  # the transaction went through transactions v2 (Kafka's clientTransactionVersion)

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]


class TransactionCoordinator:
    def __init__(self, broker):
        self.broker = broker
        self.clock = broker.clock
        cfg = broker.config
        self.max_timeout_ms = cfg.transaction_max_timeout_ms
        self.completion_wait_s = cfg.add_partitions_to_txn_retry_backoff_max_ms / 1000
        self.expiration_ms = cfg.transactional_id_expiration_ms
        self.txns: dict[str, TxnMetadata] = {}
        self.runtime = CoordinatorRuntime(broker, txn_log.TOPIC, cfg.transaction_state_log_num_partitions,
                                          cfg.transaction_state_log_segment_bytes,
                                          self.load_partition, self.unload_partition)
        self.markers = MarkerWriter(broker)
        self.partition_adder = AddPartitionsToTxnManager(broker)  # transactions v2's implicit adds
        self._background: set[asyncio.Task] = set()

    # -- where a transactional id lives ------------------------------------------------
    def _coordinator_of(self, transactional_id: str, create: bool = False) -> tuple[int, int]:
        """(partition index, coordinator epoch) of the id; NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS unless this broker coordinates it. The single
        node before its first transactional id: the partition to be, epoch 0 (nothing
        is known there yet, so nothing is written unless `create`, which creates
        `__transaction_state`)."""
        if not transactional_id:
            raise BrokerError(ErrorCode.INVALID_REQUEST, "the transactional id is empty")
        index = self.runtime.partition_for(transactional_id, create)
        if not self.broker.config.cluster_mode and self.runtime.local_topic(create=False) is None:
            return index, 0
        return index, self.runtime.coordinated.epoch(index)

    def _coordinating(self, index: int, epoch: int) -> bool:
        try:
            return self.runtime.coordinated.epoch(index) == epoch
        except BrokerError:
            return False

    async def _transition(self, meta: TxnMetadata, index: int, epoch: int, **changes) -> None:
        """Log `meta` with `changes` applied; once that is committed, apply them (not if
        the write fails). Meanwhile the id has a pending transition: other requests for it
        get CONCURRENT_TRANSACTIONS (Kafka's pendingState). The write goes on should the
        request be cancelled (its client gone). A transaction that reaches PrepareCommit
        or PrepareAbort starts its completion when this returns: the task starts after the
        caller's current step, in which the request is answered (its response handed to
        the connection), so the markers follow the answer, as Kafka sends them once it
        has responded."""
        self._check_not_pending(meta)
        fields = {"producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                  "timeout_ms": meta.timeout_ms, "state": meta.state,
                  "partitions": meta.partitions, "start_ms": meta.start_ms,
                  "last_producer_id": meta.last_producer_id, "next_producer_id": meta.next_producer_id,
                  "transactions_v2": meta.transactions_v2}
        fields.update(changes)
        now = self.clock.wall_ms()
        record = txn_log.txn_record(meta.transactional_id, fields["producer_id"],
                                    fields["producer_epoch"], fields["timeout_ms"], fields["state"],
                                    fields["partitions"], now, fields["start_ms"], fields["last_producer_id"],
                                    fields["next_producer_id"],
                                    TRANSACTIONS_V2 if fields["transactions_v2"] else TRANSACTIONS_V0)
        meta.pending = True
        write = self._in_background(self._write_transition(meta, index, epoch, record, changes, now),
                                    f"writing the state of {meta.transactional_id}")
        try:
            await asyncio.shield(write)
        except asyncio.CancelledError:  # the requester is gone: the completion follows the write
            write.add_done_callback(lambda _: self._complete_if_prepared(meta, index, epoch))
            raise
        self._complete_if_prepared(meta, index, epoch)

    async def _write_transition(self, meta: TxnMetadata, index: int, epoch: int, record,
                                changes: dict, now: int) -> None:
        try:
            await self.runtime.write(index, epoch, [record], _WRITE_TIMEOUT_S)
        finally:
            meta.pending = False
        if self.txns.get(meta.transactional_id) is not meta or not self._coordinating(index, epoch):
            raise BrokerError(ErrorCode.NOT_COORDINATOR,
                              f"{txn_log.TOPIC}-{index} was unloaded while writing to it")
        for name, value in changes.items():
            setattr(meta, name, value)
        meta.last_update_ms = now
        if meta.state == PREPARE_COMMIT:
            fail_point("txn-after-prepare-commit")

    def _complete_if_prepared(self, meta: TxnMetadata, index: int, epoch: int) -> None:
        """Start the completion of a transaction a committed write left in PrepareCommit
        or PrepareAbort (nothing when the write failed, or the id moved on)."""
        if meta.state in _COMPLETING and self.txns.get(meta.transactional_id) is meta \
                and self._coordinating(index, epoch):
            self._complete_soon(meta, index, epoch)

    # -- loading ---------------------------------------------------------------------
    def _replay_entry(self, entry: tuple, index: int) -> None:
        if entry[0] != "record":
            return
        decoded = txn_log.decode_record(entry[1], entry[2])
        if decoded is None:
            return
        txn_id, v = decoded
        if v is None or v.transaction_status in (DEAD, PREPARE_EPOCH_FENCE) or \
                v.transaction_status not in STATE_NAMES:
            self.txns.pop(txn_id, None)
            return
        partitions = {(p.topic, i) for p in (v.transaction_partitions or ()) for i in p.partition_ids}
        self.txns[txn_id] = TxnMetadata(
            txn_id, v.producer_id, v.previous_producer_id,
            v.producer_epoch, NO_PRODUCER_EPOCH, v.transaction_timeout_ms,
            v.transaction_status, partitions if v.transaction_status not in _COMPLETE else set(),
            v.transaction_start_timestamp_ms, v.transaction_last_update_timestamp_ms, log_partition=index,
            next_producer_id=v.next_producer_id,
            transactions_v2=v.client_transaction_version >= TRANSACTIONS_V2)

    def _ids_of(self, index: int) -> list[TxnMetadata]:
        return [m for m in self.txns.values() if m.log_partition == index]

    async def load(self) -> None:
        """The single node: replay all of `__transaction_state` (when it exists) and
        complete the transactions a crash left between PrepareCommit/PrepareAbort and
        CompleteCommit/CompleteAbort, before serving."""
        await self.runtime.load_local()
        completing = [m.completion for m in self.txns.values() if m.completion is not None]
        await asyncio.gather(*completing, return_exceptions=True)  # failures logged by _in_background

    async def load_partition(self, partition, epoch: int) -> None:
        """This broker now leads `partition` of `__transaction_state` at `epoch`: replay
        it (yielding to other requests now and then), then complete the transactions it
        holds in PrepareCommit/PrepareAbort (their markers are written again, with this
        coordinator epoch)."""
        index = partition.index
        await self.runtime.replay(partition, lambda entry: self._replay_entry(entry, index))
        loaded = self._ids_of(index)
        completing = [m for m in loaded if m.state in _COMPLETING]
        log.info("loaded %d transactional id(s) from %s-%d at coordinator epoch %d (%d to complete)",
                 len(loaded), txn_log.TOPIC, index, epoch, len(completing))
        for meta in completing:
            # Runs once this returns and the partition counts as coordinated at `epoch`.
            self._complete_soon(meta, index, epoch)

    def unload_partition(self, index: int) -> None:
        """This broker no longer coordinates partition `index`: forget its ids (their
        completions stop at their next step: `_coordinating` is false)."""
        for meta in self._ids_of(index):
            del self.txns[meta.transactional_id]

    def _in_background(self, coroutine, what: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)

        def done(task: asyncio.Task) -> None:
            self._background.discard(task)
            if not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                if isinstance(exc, BrokerError):
                    log.info("%s: %s", what, exc)
                else:
                    log.error("%s failed", what, exc_info=exc)

        task.add_done_callback(done)
        return task

    # -- InitProducerId --------------------------------------------------------------
    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> tuple[int, int]:
        """(producer id, epoch) for a transactional producer; raises BrokerError."""
        index, coordinator_epoch = self._coordinator_of(transactional_id, create=True)
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise BrokerError(ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                              f"transaction timeout {timeout_ms} ms is outside "
                              f"(0, {self.max_timeout_ms}] (transaction.max.timeout.ms)")
        meta = self.txns.get(transactional_id)
        if meta is None:
            meta = self.txns[transactional_id] = TxnMetadata(
                transactional_id, self.broker.producer_ids.allocate(), NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms, EMPTY,
                last_update_ms=self.clock.wall_ms(), log_partition=index)
        self._check_not_pending(meta)
        if expected is not None and not self._valid_producer_id(meta, *expected):
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"producer {expected[0]} is not {transactional_id!r}'s current producer")
        if meta.state in _COMPLETING:
            self._complete_soon(meta, index, coordinator_epoch)
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing")
        if meta.state == ONGOING:
            # Abort the open transaction (fencing its producer) and have the client retry:
            # the retry bumps the epoch once more (or rotates the producer id).
            await self._fence_and_abort(meta, index, coordinator_epoch)
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
        await self._transition(meta, index, coordinator_epoch, producer_id=pid, producer_epoch=epoch,
                               timeout_ms=timeout_ms, state=EMPTY, partitions=set(), start_ms=-1,
                               last_producer_id=last_pid, last_producer_epoch=last_epoch)
        log.info("initialized transactional id %s with producer %d epoch %d",
                 transactional_id, pid, epoch)
        return pid, epoch

    @staticmethod
    def _valid_producer_id(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id or
                (producer_id == meta.last_producer_id and epoch_exhausted(epoch)))

    @staticmethod
    def _check_not_pending(meta: TxnMetadata) -> None:
        if meta.pending:
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS,
                              f"a state change of {meta.transactional_id!r} is being written")

    # -- adding partitions -----------------------------------------------------------
    def _known(self, transactional_id: str) -> tuple[TxnMetadata, int, int]:
        """The id's state, partition index and coordinator epoch."""
        index, epoch = self._coordinator_of(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"transactional id {transactional_id!r} is not known")
        return meta, index, epoch

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[TxnMetadata, int, int]:
        meta, index, coordinator_epoch = self._known(transactional_id)
        if meta.producer_id != producer_id:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"producer {producer_id} is not {transactional_id!r}'s ({meta.producer_id})")
        if meta.producer_epoch != epoch:
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"epoch {epoch} of producer {producer_id} is not the current {meta.producer_epoch}")
        return meta, index, coordinator_epoch

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: set[tuple[str, int]], transactions_v2: bool = False) -> None:
        """Add `partitions` to the producer's transaction, starting one if none is
        Ongoing; `transactions_v2`: a partition leader's implicit add for a Produce v12+
        or TxnOffsetCommit v5+, which marks the transaction as one of version 2."""
        meta, _, _ = self._known(transactional_id)
        if meta.state in _COMPLETING and meta.completion is not None and not meta.completion.done():
            # The previous transaction's markers are being written: wait for them a while
            # (see the module's docstring), then look again, as a retry would. Before the
            # producer id is checked: after an epoch overflow the producer goes on with
            # the id that takes over once they are written.
            await asyncio.wait([meta.completion], timeout=self.completion_wait_s)
        meta, index, coordinator_epoch = self._current(transactional_id, producer_id, epoch)
        self._check_not_pending(meta)
        if meta.state in _COMPLETING:
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the previous transaction is completing")
        if meta.state == ONGOING and partitions <= meta.partitions \
                and meta.transactions_v2 >= transactions_v2:
            return
        start = self.clock.wall_ms() if meta.state in (EMPTY, *_COMPLETE) else meta.start_ms
        await self._transition(meta, index, coordinator_epoch, state=ONGOING,
                               partitions=meta.partitions | partitions, start_ms=start,
                               transactions_v2=transactions_v2 or (meta.state == ONGOING and meta.transactions_v2))

    def verify_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                          partitions) -> dict[tuple[str, int], int]:
        """Whether each partition is in the producer's transaction (NONE) or not
        (TRANSACTION_ABORTABLE); raises BrokerError for the producer itself."""
        meta, _, _ = self._current(transactional_id, producer_id, epoch)
        if meta.state in _COMPLETING:
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS, "the transaction is completing")
        return {tp: ErrorCode.NONE if tp in meta.partitions else ErrorCode.TRANSACTION_ABORTABLE
                for tp in partitions}

    def check_write(self, transactional_id: str, producer_id: int, epoch: int,
                    tp: tuple[str, int]) -> ErrorCode | None:
        """None when a transactional write to `tp` (a produce or offset commit) belongs
        to the producer's ongoing transaction; else the coordinator's reason, mapped as
        Kafka's partition leaders map it (`leader_error`)."""
        try:
            code = self.verify_partitions(transactional_id, producer_id, epoch, [tp])[tp]
        except BrokerError as exc:
            code = leader_error(exc.code)
        return None if code == ErrorCode.NONE else code

    # -- ending transactions ---------------------------------------------------------
    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                      transactions_v2: bool = False) -> tuple[int, int]:
        """End the producer's transaction; the producer id and epoch it goes on with.
        Answered once PrepareCommit/PrepareAbort is
        committed, as Kafka answers it: the decision is durable, and the coordinator (or
        the next one, loading it) writes the markers and CompleteCommit/CompleteAbort
        after the answer. Until then the id's next AddPartitionsToTxn, AddOffsetsToTxn,
        InitProducerId and EndTxn get CONCURRENT_TRANSACTIONS (the client retries), so
        that its next transaction writes nothing before the markers of this one; a
        read_committed reader sees the records once their partition has its marker.
        `transactions_v2` (EndTxn v5+) bumps the epoch (see the module's docstring)."""
        meta, index, coordinator_epoch = self._known(transactional_id)
        await self._end(meta, index, coordinator_epoch, producer_id, epoch, commit, from_client=True,
                        transactions_v2=transactions_v2)
        if meta.next_producer_id != NO_PRODUCER_ID:
            return meta.next_producer_id, 0
        return meta.producer_id, meta.producer_epoch

    @staticmethod
    def _valid_end_epoch(meta: TxnMetadata, producer_id: int, epoch: int) -> tuple[bool, bool]:
        """(whether a client's EndTxn names a valid epoch, whether it retries one that
        overflowed the epoch), as Kafka's coordinator checks them: strictly the current
        epoch, but for a transaction that went through transactions v2 the epoch before
        the bump once it is ending or complete."""
        if not meta.transactions_v2:
            return epoch == meta.producer_epoch, False
        retry_on_overflow = (producer_id == meta.last_producer_id and epoch == _MAX_EPOCH - 1
                             and meta.producer_epoch == 0)
        retry_on_bump = meta.producer_epoch == epoch + 1
        if meta.state in _COMPLETING:
            return retry_on_bump, False
        if meta.state in _COMPLETE:
            return retry_on_bump or retry_on_overflow, retry_on_overflow
        return epoch == meta.producer_epoch, False

    async def _end(self, meta: TxnMetadata, index: int, coordinator_epoch: int, producer_id: int,
                   epoch: int, commit: bool, from_client: bool, transactions_v2: bool = False) -> None:
        valid_epoch, retry_on_overflow = (self._valid_end_epoch(meta, producer_id, epoch) if from_client
                                          else (epoch >= meta.producer_epoch, False))
        if meta.producer_id != producer_id and not retry_on_overflow:
            raise BrokerError(ErrorCode.INVALID_PRODUCER_ID_MAPPING,
                              f"producer {producer_id} is not {meta.transactional_id!r}'s ({meta.producer_id})")
        if not valid_epoch:
            raise BrokerError(ErrorCode.PRODUCER_FENCED,
                              f"epoch {epoch} of producer {producer_id} is not the current {meta.producer_epoch}")
        self._check_not_pending(meta)
        result = "commit" if commit else "abort"
        if meta.state == ONGOING:
            if transactions_v2:  # the epoch bumped, the producer id rotated once it is exhausted
                changes = {"producer_epoch": epoch + 1, "last_producer_epoch": epoch, "transactions_v2": True,
                           "next_producer_id": (self.broker.producer_ids.allocate() if epoch_exhausted(epoch)
                                                else NO_PRODUCER_ID)}
            elif epoch == meta.producer_epoch:
                changes = {}
            else:
                # A fence: no retry may resume, nor pass for a retry of a bumped EndTxn.
                changes = {"producer_epoch": epoch, "last_producer_epoch": NO_PRODUCER_EPOCH,
                           "transactions_v2": False}
            await self._transition(meta, index, coordinator_epoch,
                                   state=PREPARE_COMMIT if commit else PREPARE_ABORT, **changes)
        elif meta.state == (COMPLETE_COMMIT if commit else COMPLETE_ABORT):
            return  # a retry of what is done
        elif meta.state in _COMPLETING:
            # Either result, as Kafka's coordinator answers while its markers are pending.
            self._complete_soon(meta, index, coordinator_epoch)
            raise BrokerError(ErrorCode.CONCURRENT_TRANSACTIONS,
                              f"the {meta.state_name} of {meta.transactional_id!r} is being completed")
        else:
            raise BrokerError(ErrorCode.INVALID_TXN_STATE,
                              f"cannot {result}: the transaction of {meta.transactional_id!r} is "
                              f"{meta.state_name}")

    async def _fence_and_abort(self, meta: TxnMetadata, index: int, coordinator_epoch: int) -> None:
        """Abort the Ongoing transaction with the epoch bumped, fencing its producer."""
        await self._end(meta, index, coordinator_epoch, meta.producer_id, meta.producer_epoch + 1,
                        commit=False, from_client=False)

    def _complete_soon(self, meta: TxnMetadata, index: int, coordinator_epoch: int) -> asyncio.Task:
        """The task completing a PrepareCommit/PrepareAbort transaction, started unless
        one runs already."""
        if meta.completion is None or meta.completion.done():
            meta.completion = self._in_background(self._completion(meta, index, coordinator_epoch),
                                                  f"completing the transaction of {meta.transactional_id}")
        return meta.completion

    async def _completion(self, meta: TxnMetadata, index: int, coordinator_epoch: int) -> None:
        """Write the markers of a PrepareCommit/PrepareAbort transaction (only once that
        state is committed: a coordinator taking over must find it, and finish what was
        begun), then log its completion."""
        fail_point("txn-after-prepare-before-markers")
        commit = meta.state == PREPARE_COMMIT
        await self.markers.write(meta.producer_id, meta.producer_epoch, coordinator_epoch, commit,
                                 meta.partitions, lambda: self._coordinating(index, coordinator_epoch))
        # A transaction whose epoch overflowed hands over to its next producer id.
        rotated = {} if meta.next_producer_id == NO_PRODUCER_ID else {
            "producer_id": meta.next_producer_id, "producer_epoch": 0, "next_producer_id": NO_PRODUCER_ID,
            "last_producer_id": meta.producer_id, "last_producer_epoch": meta.producer_epoch}
        await self._transition(meta, index, coordinator_epoch,
                               state=COMPLETE_COMMIT if commit else COMPLETE_ABORT, partitions=set(), **rotated)
        log.debug("transaction of %s %s", meta.transactional_id, "committed" if commit else "aborted")

    # -- background ------------------------------------------------------------------
    def abort_timed_out(self) -> None:
        """Abort transactions Ongoing past their timeout; finish stalled completions."""
        now = self.clock.wall_ms()
        for meta in list(self.txns.values()):
            if meta.pending or (meta.completion is not None and not meta.completion.done()):
                continue
            try:
                index, coordinator_epoch = self._coordinator_of(meta.transactional_id)
            except BrokerError:
                continue
            if meta.state in _COMPLETING:
                self._complete_soon(meta, index, coordinator_epoch)
            elif meta.state == ONGOING and meta.start_ms + meta.timeout_ms < now:
                log.info("aborting the transaction of %s (producer %d epoch %d): its timeout "
                         "of %d ms has passed", meta.transactional_id, meta.producer_id,
                         meta.producer_epoch, meta.timeout_ms)
                self._in_background(self._fence_and_abort(meta, index, coordinator_epoch),
                                    f"aborting the transaction of {meta.transactional_id}")

    def upkeep(self) -> None:
        """Forget transactional ids idle past transactional.id.expiration.ms (the log
        cleaner compacts `__transaction_state` down to each id's last record)."""
        now = self.clock.wall_ms()
        for meta in list(self.txns.values()):
            if meta.state in (EMPTY, *_COMPLETE) and not meta.pending \
                    and now - meta.last_update_ms >= self.expiration_ms:
                self._in_background(self._expire(meta), f"expiring {meta.transactional_id}")

    async def _expire(self, meta: TxnMetadata) -> None:
        index, coordinator_epoch = self._coordinator_of(meta.transactional_id)
        meta.pending = True
        try:
            await self.runtime.write(index, coordinator_epoch, [txn_log.tombstone(meta.transactional_id)],
                                     _WRITE_TIMEOUT_S)
        finally:
            meta.pending = False
        if self.txns.get(meta.transactional_id) is meta:
            del self.txns[meta.transactional_id]
            log.info("transactional id %s expired", meta.transactional_id)

    async def close(self) -> None:
        """The broker stops: state changes and completions in progress end here (the
        next coordinator finishes them from the log)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.markers.close()
        await self.partition_adder.close()

    # -- describing ------------------------------------------------------------------
    def describe(self, transactional_id: str) -> TxnMetadata:
        self._coordinator_of(transactional_id)
        meta = self.txns.get(transactional_id)
        if meta is None or meta.state == DEAD or meta.producer_epoch == NO_PRODUCER_EPOCH:
            raise BrokerError(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND,
                              f"transactional id {transactional_id!r} is not known")
        return meta

    def list(self, states: set[int] | None, producer_ids: set[int] | None,
             duration_ms: int) -> list[TxnMetadata]:
        """The transactions of the partitions coordinated here (loaded ones only)."""
        now = self.clock.wall_ms()
        coordinated = set(self.runtime.coordinated.coordinated())
        return [m for m in self.txns.values()
                if m.state != DEAD and m.producer_epoch != NO_PRODUCER_EPOCH
                and m.log_partition in coordinated
                and (not states or m.state in states)
                and (not producer_ids or m.producer_id in producer_ids)
                and (duration_ms < 0 or now - m.start_ms > duration_ms)]
