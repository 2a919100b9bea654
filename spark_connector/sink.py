"""The `sluice` sink: Spark rows written to Kafka, exactly once by default.

Columns and options follow Spark's Kafka sink: `value` (binary or string, required),
`key`, `topic`, `partition`, `headers` (array<struct<key string, value binary>>), and
a `timestamp` column (timestamp) that sets the records' timestamps; options
`kafka.bootstrap.servers`, `topic` (when set, it overrides any topic column, as in
Spark's Kafka sink), other `kafka.*`. A row without a partition goes where Kafka's
default partitioner puts it (murmur2 of the key; rows without a key are spread
round-robin). A topic that does not exist is created by the sink's Metadata request, as
by a Kafka producer's, where the broker's auto.create.topics.enable allows it.

`deliveryGuarantee`:
- `exactly_once` (default): each write task attempt writes inside a transaction of its
  own, left open; the driver records its decision to commit a micro-batch (the intent),
  then commits every task's transaction. Replays, retries, speculative attempts, zombies,
  transaction timeouts and a second driver cannot duplicate or lose a batch. See
  docs/exactly-once-sink.md for the protocol, its invariants and every failure case.
- `at_least_once`: an idempotent producer per task, no transactions.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import uuid
from bisect import bisect_right
from collections import Counter
from itertools import repeat
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from spark_connector.errors import message_first
from spark_connector.options import AT_LEAST_ONCE, CODECS, SinkOptions
from sluice_client import Client, ClientError, NewTopic
from sluice_client.partitioner import DefaultPartitioner
from sluice_client.sync import Call
from wire.errors import ErrorCode, KafkaError
from wire.internal_topics import SINK_INTENTS_TOPIC
from wire.records import (CONTROL_COMMIT, build_batch, build_batch_columns, decode_batch,
                          decode_control_record, iter_batches)

_BATCH_RECORDS = 5000
_BATCH_BYTES = 900 * 1024
# Every query's intents, keyed by query id, in one partition: compaction keeps the last
# of each query (the only one that matters) and drops the rest once their segment is
# sealed, so the topic holds about one record per query that ever wrote. Nothing
# expires by time or size unless the topic's retention.ms is set: then the intents of a
# query that has not committed a batch for that long go.
_INTENT_TOPIC_CONFIG = {"cleanup.policy": "compact,delete", "retention.ms": "-1",
                        "retention.bytes": "-1", "segment.bytes": str(1 << 20)}
_INTENT_LOOKBACK = 64  # offsets read back from the end to find the query's last intent
_MAX_DECOMPRESSED = 64 * 1024 * 1024
_MARKER_SCAN_BYTES = 4 << 20
_MARKER_SCAN_FETCHES = 256  # bounds the walk from a transaction's data to its marker
_SETTLE_ROUNDS = 50  # rounds of waiting for a completing transaction to be decided
_METADATA_ROUNDS = 200  # rounds of waiting for a topic being created to have leaders
_DECIDE_ROUNDS = 5  # intent appends fenced by other drivers' InitProducerId before this one stops
_COMMITTED, _ABORTED = "committed", "aborted"


class SluiceSinkError(RuntimeError):
    """The sink cannot complete a batch; the message says why and what happens next."""


@dataclass(frozen=True)
class Txn:
    """A task's transaction as the driver commits it, and where its data landed: the
    last offset it wrote in one of its partitions, from which its marker is found."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    topic: str
    partition: int
    last_offset: int

    def to_json(self) -> list:
        return [self.transactional_id, self.producer_id, self.producer_epoch, self.topic,
                self.partition, self.last_offset]


@dataclass
class TaskCommit(WriterCommitMessage):
    """What a write task hands the driver. `txn` is its open transaction (None when it
    wrote nothing or found its slot already committed); `replay` says the task found an
    intent for its own batch, i.e. the batch had been decided before this attempt."""

    query: str | None
    run: str | None
    slot: int
    txn: Txn | None
    rows: int = 0
    replay: bool = False


@dataclass
class _Partitioner:
    """Where rows go. Each topic's partition count comes from Metadata requests that allow
    auto-creation, as a Kafka producer sends them; rows without a partition go where
    Kafka's default partitioner puts them (sluice_client.partitioner)."""

    counts: dict = field(default_factory=dict)
    default: DefaultPartitioner = field(default_factory=DefaultPartitioner)

    def count(self, client: Client, topic: str) -> int:
        count = self.counts.get(topic)
        if count is None:
            count = self.counts[topic] = _partition_count(client, topic)
        return count

    def partitions(self, client: Client, topic: str, keys: list) -> list[int]:
        return self.default.partitions(topic, keys, self.count(client, topic))


def _partition_count(client: Client, topic: str) -> int:
    """The topic's partition count. A missing topic is created by the Metadata request
    where the broker's auto.create.topics.enable allows it (as a Kafka producer's first
    Metadata request creates it), and answered LEADER_NOT_AVAILABLE until its leaders
    are known."""
    for _ in range(_METADATA_ROUNDS):
        info = client.metadata([topic], allow_auto_topic_creation=True).topics.get(topic)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if info is None else info.error_code
        if code == ErrorCode.NONE and info.partitions:
            return len(info.partitions)
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise SluiceSinkError(
                f"sluice sink: topic {topic!r} does not exist, and the broker does not create topics "
                "on first use (its auto.create.topics.enable is false): create the topic first")
        if code not in (ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE):
            raise SluiceSinkError(f"sluice sink: cannot write to topic {topic!r}: {ErrorCode(code).name}")
        time.sleep(0.1)  # being created: no leaders yet
    raise SluiceSinkError(f"sluice sink: topic {topic!r} still has no leaders after "
                          f"{_METADATA_ROUNDS} Metadata requests")


def _as_binary(column):
    """A string or binary Arrow column as binary (the same buffers)."""
    if pa.types.is_string(column.type):
        return column.cast(pa.binary())
    if pa.types.is_large_string(column.type):
        return column.cast(pa.large_binary())
    return column


def _timestamps_ms(column, n: int):
    """The `timestamp` column in epoch milliseconds, as an int64 Arrow array; the time of
    writing where it is null or absent."""
    now = _now()
    if column is None:
        return pa.array([now] * n, pa.int64())
    millis = column.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    return pc.fill_null(millis, now)


def _lengths(column):
    """Each value's length in bytes, 0 where null, as an int64 Arrow array."""
    return pc.fill_null(pc.binary_length(column), 0).cast(pa.int64())


@dataclass
class _Pending:
    """Rows waiting for one topic-partition, as columns."""

    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    headers: list | None = None
    timestamps: list = field(default_factory=list)
    size: int = 0


class _TaskWriter:
    """Turns a task's Arrow batches into record batches, per topic-partition, encoded
    from columns (no Python object per record beyond the key and value bytes). As a Kafka
    producer does, it adds the new partitions of each Arrow batch to the transaction in
    one AddPartitionsToTxn, and keeps one produce request in flight per partition (the
    next batch is encoded while the broker appends the last), which keeps each
    partition's batches in order."""

    def __init__(self, client: Client, options: SinkOptions, transaction: tuple | None):
        self.client = client
        self.options = options
        self.transaction = transaction  # (transactional id, producer id, epoch) or None
        self.partitioner = _Partitioner()
        self.pending: dict[tuple[str, int], _Pending] = {}
        self.sequences: dict[tuple[str, int], int] = {}
        self.in_flight: dict[tuple[str, int], tuple[Call, int]] = {}  # (produce, its record count)
        self.last_offsets: dict[tuple[str, int], int] = {}
        self.rows = 0

    def write(self, batch) -> None:
        """Place the rows, then queue them per topic-partition in row order, cutting
        batches where they are full. The rows are grouped with one stable Arrow sort by
        target rather than row by row in Python: a task's rows are many (a million-row
        write is a few hundred thousand per task)."""
        n = batch.num_rows
        columns = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        values = _as_binary(columns["value"])
        keys = _as_binary(columns["key"]) if "key" in columns else pa.nulls(n, pa.binary())
        if self.options.topic:  # as Spark's Kafka sink: the option wins over the column
            topics = [self.options.topic]
        else:
            topic_column = columns["topic"]
            if topic_column.null_count:
                raise SluiceSinkError("sluice sink: a row has a null topic and option 'topic' is not set")
            topics = topic_column.to_pylist()
        # As a producer: Metadata for every topic written, and the partitions given checked.
        counts = {topic: self.partitioner.count(self.client, topic) for topic in set(topics)}
        partitions = columns["partition"].to_pylist() if "partition" in columns else [None] * n
        if "partition" in columns:
            row_topics = repeat(topics[0], n) if len(topics) == 1 else topics
            wrong = next(((t, p) for t, p in zip(row_topics, partitions)
                          if p is not None and not 0 <= p < counts[t]), None)
            if wrong is not None:
                topic, partition = wrong
                raise SluiceSinkError(f"sluice sink: a row is for partition {partition} of topic {topic!r}, "
                                      f"which has partitions 0 to {counts[topic] - 1}")
        if "partition" not in columns and len(topics) == 1:  # Kafka's default partitioner for all
            partitions = self.partitioner.partitions(self.client, topics[0], keys.to_pylist())
        elif None in partitions:  # for the rows without a partition
            key_list = keys.to_pylist()
            unplaced: dict[str, list[int]] = {}
            for i, partition in enumerate(partitions):
                if partition is None:
                    unplaced.setdefault(topics[0] if len(topics) == 1 else topics[i], []).append(i)
            for topic, rows in unplaced.items():
                placed = self.partitioner.partitions(self.client, topic, [key_list[i] for i in rows])
                for i, partition in zip(rows, placed):
                    partitions[i] = partition
        if len(topics) == 1:  # the partition alone orders the targets
            targets = [(topics[0], p) for p in sorted(set(partitions))]
            target_keys = partitions
        else:
            targets = sorted(set(zip(topics, partitions)))
            ids_of = {target: i for i, target in enumerate(targets)}
            target_keys = [ids_of[target] for target in zip(topics, partitions)]
        per_target = Counter(target_keys)
        order = pc.sort_indices(pa.array(target_keys, pa.int32()))  # stable: row order within a target
        keys, values = keys.take(order), values.take(order)
        timestamps = _timestamps_ms(columns.get("timestamp"), n).take(order).to_pylist()
        # Running byte counts of the rows in their new order, to cut where a batch is full.
        sizes = pc.cumulative_sum(pc.add(pc.add(_lengths(keys), _lengths(values)), 16)).to_pylist()
        key_list, value_list = keys.to_pylist(), values.to_pylist()
        headers = None
        if "headers" in columns:
            headers = [None if row is None else [(h["key"], h["value"]) for h in row]
                       for row in columns["headers"].take(order).to_pylist()]
        if self.transaction is not None:
            self._add_to_transaction([tp for tp in targets if tp not in self.sequences])
        start = 0
        for tp, count in zip(targets, (per_target[key] for key in sorted(per_target))):
            end_of_target = start + count
            while start < end_of_target:
                pending = self.pending.get(tp)
                if pending is None:
                    pending = self.pending[tp] = _Pending(headers=[] if headers is not None else None)
                before = sizes[start - 1] if start else 0
                fits = bisect_right(sizes, before + _BATCH_BYTES - pending.size, start, end_of_target)
                end = min(start + _BATCH_RECORDS - len(pending.keys), max(fits, start + 1))
                pending.keys += key_list[start:end]
                pending.values += value_list[start:end]
                pending.timestamps += timestamps[start:end]
                if headers is not None:
                    pending.headers += headers[start:end]
                pending.size += sizes[end - 1] - before
                start = end
                if len(pending.keys) >= _BATCH_RECORDS or pending.size >= _BATCH_BYTES:
                    self._send(tp)
        self.rows += n

    def flush(self) -> None:
        """Send what is pending and wait for every produce request in flight."""
        for tp in list(self.pending):
            self._send(tp)
        for tp in list(self.in_flight):
            self._landed(tp)

    def drain(self) -> None:
        """Wait for the requests in flight, whatever their outcome: a transaction is
        aborted only once none of its records can still arrive."""
        for call, _ in self.in_flight.values():
            with contextlib.suppress(Exception):
                call.result()
        self.in_flight.clear()

    def _add_to_transaction(self, partitions: list[tuple[str, int]]) -> None:
        if not partitions:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        self.client.producer.add_partitions_to_txn(*self.transaction, by_topic)
        self.sequences.update((tp, 0) for tp in partitions)

    def _send(self, tp: tuple[str, int]) -> None:
        rows = self.pending.pop(tp)
        topic, partition = tp
        codec = CODECS.index(self.options.compression)
        if tp in self.in_flight:  # the partition's last batch first: one in flight keeps them in order
            self._landed(tp)
        if self.transaction is None:  # at least once: the client's idempotent producer
            headers = rows.headers if rows.headers is not None else [()] * len(rows.keys)
            call = self.client.producer.start("produce", topic, partition,
                                     list(zip(rows.keys, rows.values, headers, rows.timestamps)),
                                     compression=codec)
        else:
            txn_id, pid, epoch = self.transaction
            batch = build_batch_columns(rows.keys, rows.values, rows.headers, rows.timestamps,
                                        compression=codec, producer_id=pid, producer_epoch=epoch,
                                        base_sequence=self.sequences[tp], transactional=True)
            call = self.client.producer.start("produce_batch", topic, partition, batch, transactional_id=txn_id)
            self.sequences[tp] += len(rows.keys)
        self.in_flight[tp] = (call, len(rows.keys))

    def _landed(self, tp: tuple[str, int]) -> None:
        """Wait for the partition's produce request in flight; where its records landed."""
        call, count = self.in_flight.pop(tp)
        result = call.result()
        self.last_offsets[tp] = result.base_offset + count - 1

    def written(self) -> Txn | None:
        """The open transaction, with one partition it wrote; None if it wrote nothing."""
        if not self.last_offsets:
            return None
        (topic, partition), last = min(self.last_offsets.items())
        txn_id, pid, epoch = self.transaction
        return Txn(txn_id, pid, epoch, topic, partition, last)


def _now() -> int:
    return time.time_ns() // 1_000_000


def _client(options: SinkOptions, idempotent: bool = False) -> Client:
    return Client(options.bootstrap_servers, enable_idempotence=idempotent, **dict(options.client))


@contextlib.contextmanager
def _naming_servers(options: SinkOptions, what: str):
    """Connection failures name the option and its value, as the source's do."""
    try:
        yield
    except ClientError as exc:
        raise SluiceSinkError(f"sluice sink: cannot {what} via kafka.bootstrap.servers="
                              f"{options.bootstrap_servers}: {exc}") from None


def _task_context():
    from pyspark import TaskContext
    return TaskContext.get()


def _task_txn_id(owner: str, slot: int, attempt: int) -> str:
    """One transactional id per (query run or batch job, write slot, attempt number):
    reused by every batch of the run, so the coordinator holds O(slots) ids, not
    O(batches); attempts of one slot never fence each other (a speculative copy runs
    beside the first attempt), nor do two drivers of one query (different runs)."""
    return f"sluice-{owner}-{slot}-{attempt}"


def _driver_txn_id(query: str) -> str:
    """The transactional id the driver writes intents with (outside the tasks' prefix)."""
    return f"sluice-{query}"


def _write_slot(options: SinkOptions, client: Client, iterator, txn_id: str) -> _TaskWriter:
    """Write the task's rows inside a new transaction of `txn_id`, left open. The
    InitProducerId fences any earlier producer of the id and aborts its open transaction."""
    pid, epoch = client.producer.init_transactions(txn_id, options.transaction_timeout_ms)
    writer = _TaskWriter(client, options, (txn_id, pid, epoch))
    try:
        for batch in iterator:
            writer.write(batch)
        writer.flush()
    except BaseException:
        writer.drain()
        with contextlib.suppress(Exception):  # else the sweep or the timeout aborts it
            client.producer.end_txn(txn_id, pid, epoch, commit=False)
        raise
    return writer


def _write_at_least_once(options: SinkOptions, iterator) -> int:
    with _client(options, idempotent=True) as client:
        writer = _TaskWriter(client, options, None)
        for batch in iterator:
            writer.write(batch)
        writer.flush()
        return writer.rows


# -- the fate of a transaction -----------------------------------------------------------

def _fate_from_marker(client: Client, txn: Txn) -> str | None:
    """COMMITTED or ABORTED from the first control batch of the transaction's producer
    after its data; None while no marker is there yet. The log is the only record that
    survives the coordinator moving on (a later epoch, an expired id)."""
    offset = txn.last_offset + 1
    for _ in range(_MARKER_SCAN_FETCHES):
        fetched = client.consumer.fetch(txn.topic, txn.partition, offset, max_wait_ms=0,
                               max_bytes=_MARKER_SCAN_BYTES)
        batches = list(iter_batches(fetched.records))
        for header, batch in batches:
            if header.last_offset < offset or header.producer_id != txn.producer_id:
                continue
            if header.is_control:
                marker = decode_control_record(decode_batch(batch, _MAX_DECOMPRESSED)[0])
                return _COMMITTED if marker.type == CONTROL_COMMIT else _ABORTED
        if not batches:
            return None
        offset = max(offset, batches[-1][0].last_offset + 1)
        if offset >= fetched.high_watermark:
            return None
    raise SluiceSinkError(f"sluice sink: no end found for transaction {txn.transactional_id} in "
                          f"{txn.topic}-{txn.partition} after offset {txn.last_offset}")


def _settle(client: Client, txn: Txn) -> str:
    """Bring a decided transaction to its end and say which: an open one is committed
    now; one that ended says so by its coordinator state or, once the coordinator has
    moved on, by its marker in the log. Raises if neither tells within bounded time."""
    for _ in range(_SETTLE_ROUNDS):
        try:
            state = client.admin.describe_transaction(txn.transactional_id)
        except KafkaError as exc:
            if exc.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise
            state = None
        current = (state is not None and state.producer_id == txn.producer_id
                   and state.producer_epoch == txn.producer_epoch)
        if current and state.state == "Ongoing":
            try:
                client.producer.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit=True)
                return _COMMITTED
            except KafkaError as exc:
                if exc.code not in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH,
                                    ErrorCode.INVALID_TXN_STATE, ErrorCode.CONCURRENT_TRANSACTIONS):
                    raise
                continue  # it ended meanwhile (a timeout): look again
        if current and state.state in ("PrepareCommit", "CompleteCommit"):
            return _COMMITTED
        if current and state.state in ("PrepareAbort", "CompleteAbort"):
            return _ABORTED
        fate = _fate_from_marker(client, txn)
        if fate is not None:
            return fate
        time.sleep(0.1)  # the coordinator is still writing its markers
    raise SluiceSinkError(f"sluice sink: cannot tell whether transaction {txn.transactional_id} "
                          f"(producer {txn.producer_id}, epoch {txn.producer_epoch}) committed")


def _closed_by(client: Client, txns: list[Txn]) -> dict[Txn, str | None]:
    """For each transaction: None while it is open at its epoch; else "fenced" when
    another producer of its id has initialised since, or "aborted" (the broker's timeout,
    which bumps the epoch once). The coordinators are asked all at once."""
    described = [(txn, client.admin.start("describe_transaction", txn.transactional_id)) for txn in txns]
    return {txn: _closed_as(txn, call) for txn, call in described}


def _closed_as(txn: Txn, described: Call) -> str | None:
    """`_closed_by` for one transaction, from its DescribeTransactions call."""
    try:
        state = described.result()
    except KafkaError:
        return _ABORTED
    if state.producer_id != txn.producer_id:
        return "fenced"
    if state.producer_epoch == txn.producer_epoch and state.state == "Ongoing":
        return None
    if state.producer_epoch > txn.producer_epoch + 1 or (
            state.producer_epoch > txn.producer_epoch and state.state in ("Empty", "Ongoing")):
        return "fenced"
    return _ABORTED


def _abort_quietly(client: Client, txns) -> None:
    """EndTxn(ABORT) at the transactions' own epochs: a transaction that has committed
    meanwhile refuses it (INVALID_TXN_STATE), so this never undoes a commit."""
    for txn in txns:
        with contextlib.suppress(KafkaError, ClientError):
            client.producer.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit=False)


def _abort_leftovers(client: Client, owner: str, keep: set[str], timeout_ms: int, ongoing=None) -> int:
    """Fence every open transaction of the tasks of `owner` (a query, one run of it, or
    a batch job) not in `keep`: those of failed, killed or losing speculative attempts,
    and of a crashed run. InitProducerId aborts the transaction and bumps the id's epoch,
    so a zombie of that attempt can write no more. Without this they would hold
    read_committed readers back until `transaction.timeout.ms`. `ongoing`: the Ongoing
    transactions when listed already, else they are listed here. Returns how many were
    aborted."""
    prefix = f"sluice-{owner}-"
    aborted = 0
    for listed in client.admin.list_transactions(["Ongoing"]) if ongoing is None else ongoing:
        if listed.transactional_id.startswith(prefix) and listed.transactional_id not in keep:
            with contextlib.suppress(KafkaError):
                client.producer.init_transactions(listed.transactional_id, timeout_ms)
                aborted += 1
    return aborted


# -- the intent log ------------------------------------------------------------------------

@dataclass(frozen=True)
class Intent:
    """The driver's durable decision: batch `batch` of the query commits the transaction
    of each write slot (None: the slot wrote nothing). `run` is the Spark run that
    decided it."""

    batch: int
    run: str | None
    slots: dict[int, Txn | None]

    def encode(self) -> bytes:
        return json.dumps({"batch": self.batch, "run": self.run,
                           "slots": {str(s): t.to_json() if t else None for s, t in self.slots.items()}}).encode()

    @classmethod
    def decode(cls, value: bytes) -> Intent:
        raw = json.loads(value)
        return cls(raw["batch"], raw.get("run"),
                   {int(s): Txn(*t) if t else None for s, t in raw["slots"].items()})

    def txns(self) -> list[Txn]:
        return [t for t in self.slots.values() if t is not None]


def last_intent(client: Client, query: str) -> Intent | None:
    """The last intent the query's driver committed, or None when it has none.

    Every query appends to the one topic, so it is read uncommitted and an intent counts
    once the COMMIT marker of its transaction follows it: read_committed stops at the
    first open transaction of any query (a driver killed while appending leaves one open
    for kafka.transaction.timeout.ms), and would hide this query's later intents. An
    intent whose transaction is aborted (a fenced driver's) or still open never counts.
    EndTxn is answered before the markers are written (as Kafka answers it), so an
    intent found without its marker may be committed already: then the driver's
    transaction is waited for until it is no longer PrepareCommit or PrepareAbort, and
    the log read again."""
    intent, unmarked = _scan_intents(client, query)
    if unmarked:
        _await_markers(client, _driver_txn_id(query))
        intent, _ = _scan_intents(client, query)
    return intent


def _scan_intents(client: Client, query: str) -> tuple[Intent | None, bool]:
    """The query's last intent with its COMMIT marker after it, and whether a record of
    the query without a marker yet follows it."""
    known = client.metadata([SINK_INTENTS_TOPIC]).topics.get(SINK_INTENTS_TOPIC)
    if known is None or known.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return None, False  # no query has committed anything yet
    latest, earliest = (client.consumer.start("list_offsets", SINK_INTENTS_TOPIC, [0], timestamp)
                        for timestamp in (-1, -2))
    end, start = latest.result()[0].offset, earliest.result()[0].offset
    key = query.encode()
    lookback = _INTENT_LOOKBACK
    unmarked = False
    while end > start:
        found, pending = _last_committed(client, key, max(start, end - lookback), end)
        unmarked = unmarked or pending
        if found is not None:
            return (None if found.value is None else Intent.decode(found.value)), unmarked
        if end - lookback <= start:
            return None, unmarked
        lookback *= 4
    return None, unmarked


def _last_committed(client: Client, key: bytes, offset: int, end: int):
    """The last record with `key` in the intents topic between `offset` and `end` whose
    transaction commits there (its producer's next marker is a COMMIT), or None; and
    whether a record with `key` after it has no marker yet."""
    since_marker: dict[int, list] = {}  # producer id -> its records with the key since its last marker
    found = None
    while offset < end:
        fetched = client.consumer.fetch(SINK_INTENTS_TOPIC, 0, offset, max_wait_ms=0, max_bytes=_MARKER_SCAN_BYTES)
        batches = [(h, b) for h, b in iter_batches(fetched.records) if h.last_offset >= offset]
        within = [(h, b) for h, b in batches if h.base_offset < end]
        for header, batch in within:
            if header.is_control:
                mine = since_marker.pop(header.producer_id, None)
                # A marker the cleaner emptied ended a transaction whose records are gone.
                marker = decode_batch(batch, _MAX_DECOMPRESSED)
                if mine and marker and decode_control_record(marker[0]).type == CONTROL_COMMIT:
                    found = mine[-1]
            elif header.is_transactional:
                mine = [r for r in decode_batch(batch, _MAX_DECOMPRESSED) if r.key == key]
                if mine:
                    since_marker.setdefault(header.producer_id, []).extend(mine)
        if not within or len(within) < len(batches):
            break  # the end, or past it
        offset = within[-1][0].last_offset + 1
    after = -1 if found is None else found.offset
    return found, any(r.offset > after for records in since_marker.values() for r in records)


def _await_markers(client: Client, transactional_id: str) -> None:
    """Until the transaction of `transactional_id` is neither PrepareCommit nor
    PrepareAbort: its coordinator has written its markers."""
    for _ in range(_SETTLE_ROUNDS):
        try:
            state = client.admin.describe_transaction(transactional_id)
        except KafkaError as exc:
            if exc.code != ErrorCode.TRANSACTIONAL_ID_NOT_FOUND:
                raise
            return
        if state.state not in ("PrepareCommit", "PrepareAbort"):
            return
        time.sleep(0.1)  # the coordinator is still writing its markers
    raise SluiceSinkError(f"sluice sink: the coordinator of {transactional_id} did not write the "
                          f"markers of its transaction in time")


def _record_intent(client: Client, query: str, driver: tuple[int, int], intent: Intent,
                   first: bool) -> None:
    """Append the intent, keyed by the query, inside the driver's transaction
    (PRODUCER_FENCED if another driver of the query has initialised since); the query's
    `first` creates the intents topic when no query has yet."""
    if first:
        created = client.admin.create_topics({SINK_INTENTS_TOPIC: NewTopic(1, -1, dict(_INTENT_TOPIC_CONFIG))})
        error = created[SINK_INTENTS_TOPIC].error
        if error is not None and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise error
    txn_id = _driver_txn_id(query)
    pid, epoch = driver
    client.producer.add_partitions_to_txn(txn_id, pid, epoch, {SINK_INTENTS_TOPIC: [0]})
    batch = build_batch([(query.encode(), intent.encode(), (), _now())], producer_id=pid,
                        producer_epoch=epoch, base_sequence=0, transactional=True)
    client.producer.produce_batch(SINK_INTENTS_TOPIC, 0, batch, transactional_id=txn_id)
    client.producer.end_txn(txn_id, pid, epoch, commit=True)


def _fenced(query: str, why: str) -> SluiceSinkError:
    return SluiceSinkError(
        f"sluice sink: query {query} is fenced: {why}. Another driver runs this query (from the "
        "same checkpoint or a copy of it); only one may, and this one stops. Nothing it wrote "
        "is visible.")


# -- the writers -----------------------------------------------------------------------------

def _messages(messages) -> list[TaskCommit]:
    return [m for m in messages if isinstance(m, TaskCommit)]


@message_first
class SluiceStreamWriter(DataSourceStreamArrowWriter):
    """`writeStream.format("sluice")`: see the module docstring and the design note."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator) -> TaskCommit:
        with _naming_servers(self.options, "write"):
            return self._write(iterator)

    def _write(self, iterator) -> TaskCommit:
        ctx = _task_context()
        query = ctx.getLocalProperty("sql.streaming.queryId")
        run = ctx.getLocalProperty("spark.jobGroup.id")  # Spark's run id for streaming jobs
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        slot = ctx.partitionId()
        if self.options.guarantee == AT_LEAST_ONCE:
            return TaskCommit(query, run, slot, None, _write_at_least_once(self.options, iterator))
        with _client(self.options) as client:
            intent = last_intent(client, query)
            replay = intent is not None and intent.batch == batch_id
            if replay:
                if slot not in intent.slots:
                    raise SluiceSinkError(
                        f"sluice sink: batch {batch_id} of query {query} is replayed with write task "
                        f"{slot}, which it did not have when it was decided (tasks "
                        f"{sorted(intent.slots)}): the query's input is not deterministic")
                decided = intent.slots[slot]
                if decided is None or _settle(client, decided) == _COMMITTED:
                    return TaskCommit(query, run, slot, None, replay=True)
                # The decided transaction was aborted (it outlived transaction.timeout.ms
                # while the driver was down): the slot's rows are written again.
            txn_id = _task_txn_id(f"{query}-{run}", slot, ctx.attemptNumber())
            try:
                writer = _write_slot(self.options, client, iterator, txn_id)
            except KafkaError as exc:
                if exc.code not in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                    raise
                raise _fenced(query, f"write task {slot} of batch {batch_id} lost its transactional id "
                                     f"{txn_id} to a newer producer of it ({exc.code.name})") from None
            return TaskCommit(query, run, slot, writer.written(), writer.rows, replay)

    def commit(self, messages, batchId: int) -> None:
        tasks = _messages(messages)
        if self.options.guarantee == AT_LEAST_ONCE or not tasks:
            return
        with _naming_servers(self.options, "commit"), _client(self.options) as client:
            intent = self._decide(client, tasks, batchId)
            self._complete(client, tasks[0].query, intent)

    def _decide(self, client: Client, tasks: list[TaskCommit], batch_id: int) -> Intent:
        """The intent to complete: the recorded one when the batch was decided before
        (revised where a slot had to be written again), else a new one, recorded.

        Initialising the driver's id at every commit fences any other committer of the
        query between its intent lookup and its append. A fenced append says only that
        another driver initialised since, not that it got further: a driver behind
        initialises before it reads the intent that shows it behind. So the lookup and
        the append are tried again, and only an intent found fences this driver."""
        query = tasks[0].query
        for _ in range(_DECIDE_ROUNDS):
            driver = client.producer.init_transactions(_driver_txn_id(query), self.options.transaction_timeout_ms)
            recorded = last_intent(client, query)
            intent = self._intent(client, tasks, batch_id, recorded)
            if intent is recorded:
                return recorded
            try:
                _record_intent(client, query, driver, intent, first=recorded is None)
                return intent
            except KafkaError as exc:
                if exc.code not in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
                    raise
            # Two drivers at one batch fencing each other's append in turn: one gets through.
            time.sleep(random.uniform(0.1, 0.5))
        _abort_quietly(client, [t.txn for t in tasks if t.txn is not None])
        raise _fenced(query, f"other drivers initialised its transactional id {_driver_txn_id(query)} "
                             f"during each of {_DECIDE_ROUNDS} appends of the intent of batch {batch_id}")

    def _intent(self, client: Client, tasks: list[TaskCommit], batch_id: int,
                recorded: Intent | None) -> Intent:
        """The intent to record for the batch given the last one recorded (that one
        itself when it stands as it is); raises when it shows another driver ahead."""
        query, run = tasks[0].query, tasks[0].run
        own = [t.txn for t in tasks if t.txn is not None]
        if recorded is not None and recorded.batch > batch_id:
            _abort_quietly(client, own)
            raise _fenced(query, f"batch {recorded.batch} was decided by run {recorded.run} while this "
                                 f"run ({run}) is at batch {batch_id}")
        if recorded is not None and recorded.batch == batch_id:
            if not any(t.replay for t in tasks) and recorded.run != run:
                _abort_quietly(client, own)
                raise _fenced(query, f"batch {batch_id} was decided by run {recorded.run} while this "
                                     f"run ({run}) was writing it")
            rewritten = {t.slot: t.txn for t in tasks if t.replay and t.txn is not None}
            if not rewritten:
                return recorded
            self._check_open(client, query, batch_id, list(rewritten.values()))
            return Intent(batch_id, run, {**recorded.slots, **rewritten})
        if len({t.slot for t in tasks}) != len(tasks):
            raise SluiceSinkError(f"sluice sink: batch {batch_id} has two commits for one write task")
        self._check_open(client, query, batch_id, own)
        return Intent(batch_id, run, {t.slot: t.txn for t in tasks})

    def _check_open(self, client: Client, query: str, batch_id: int, txns: list[Txn]) -> None:
        """Before deciding: every transaction must still be open, or the batch would be
        decided with rows the broker already threw away."""
        why = _closed_by(client, txns)
        closed = [t for t in txns if why[t] is not None]
        fenced = [t.transactional_id for t in closed if why[t] == "fenced"]
        if closed:
            _abort_quietly(client, txns)
            if fenced:
                raise _fenced(query, f"another producer took over the transactional ids {', '.join(fenced)} "
                                     f"before batch {batch_id} was decided")
            raise SluiceSinkError(
                f"sluice sink: batch {batch_id} of query {query} took longer than "
                f"kafka.transaction.timeout.ms={self.options.transaction_timeout_ms}: the broker "
                f"aborted {len(closed)} of its {len(txns)} transactions "
                f"({', '.join(t.transactional_id for t in closed)}) before the driver could commit. "
                "Nothing of the batch is visible; restart the query to replay it, and raise "
                "kafka.transaction.timeout.ms above the batch's duration.")

    def _complete(self, client: Client, query: str, intent: Intent) -> None:
        """Commit the intent's transactions one after the other (a driver stopped half way
        leaves the rest open, for the replay to commit), and sweep the query's leftovers,
        listed meanwhile (the sweep spares the intent's transactions)."""
        listed = client.admin.start("list_transactions", ["Ongoing"])
        aborted = [t for t in intent.txns() if self._commit_transaction(client, t) == _ABORTED]
        _abort_leftovers(client, query, {t.transactional_id for t in intent.txns()},
                         self.options.transaction_timeout_ms, listed.result())
        if aborted:
            raise SluiceSinkError(
                f"sluice sink: batch {intent.batch} of query {query} was decided, but the broker "
                f"aborted {len(aborted)} of its transactions ({', '.join(t.transactional_id for t in aborted)}) "
                "before they could be committed (kafka.transaction.timeout.ms="
                f"{self.options.transaction_timeout_ms}). Restart the query: its replay writes "
                "exactly those tasks' rows again, and the batch becomes whole.")

    def _commit_transaction(self, client: Client, txn: Txn) -> str:
        try:
            client.producer.end_txn(txn.transactional_id, txn.producer_id, txn.producer_epoch, commit=True)
            return _COMMITTED
        except KafkaError:
            return _settle(client, txn)  # ended before (a replay) or aborted: find out which

    def abort(self, messages, batchId: int) -> None:
        """Abort what the failed batch wrote, but never a transaction that an intent for
        this batch decided to commit (a replay completes those). The sweep takes this
        run's leftovers only: a run fenced by a driver ahead must not fence the open
        transactions of that driver's next batch."""
        tasks = _messages(messages)
        if self.options.guarantee == AT_LEAST_ONCE or not tasks:
            return
        query, run = tasks[0].query, tasks[0].run
        with contextlib.suppress(ClientError), _client(self.options) as client:  # as above
            recorded = last_intent(client, query)
            decided = ({t.transactional_id for t in recorded.txns()}
                       if recorded is not None and recorded.batch == batchId else set())
            _abort_quietly(client, [t.txn for t in tasks if t.txn is not None
                                    and t.txn.transactional_id not in decided])
            _abort_leftovers(client, f"{query}-{run}", decided, self.options.transaction_timeout_ms)


@message_first
class SluiceBatchWriter(DataSourceArrowWriter):
    """`df.write.format("sluice")`: task transactions committed together by the driver,
    after checking that all of them are still open."""

    def __init__(self, options: SinkOptions):
        self.options = options
        self.job = uuid.uuid4().hex  # made on the driver, shared by every task of the job

    def write(self, iterator) -> TaskCommit:
        ctx = _task_context()
        with _naming_servers(self.options, "write"):
            if self.options.guarantee == AT_LEAST_ONCE:
                return TaskCommit(None, self.job, ctx.partitionId(), None,
                                  _write_at_least_once(self.options, iterator))
            with _client(self.options) as client:
                writer = _write_slot(self.options, client, iterator,
                                     _task_txn_id(self.job, ctx.partitionId(), ctx.attemptNumber()))
                return TaskCommit(None, self.job, ctx.partitionId(), writer.written(), writer.rows)

    def commit(self, messages) -> None:
        txns = [t.txn for t in _messages(messages) if t.txn is not None]
        if not txns:
            return
        with _naming_servers(self.options, "commit"), _client(self.options) as client:
            closed = [t for t, why in _closed_by(client, txns).items() if why is not None]
            if closed:
                _abort_quietly(client, txns)
                raise SluiceSinkError(
                    f"sluice sink: the write took longer than kafka.transaction.timeout.ms="
                    f"{self.options.transaction_timeout_ms}: the broker aborted {len(closed)} of its "
                    f"{len(txns)} transactions. Nothing was written; raise the timeout and write again.")
            commits = [client.producer.start("end_txn", t.transactional_id, t.producer_id, t.producer_epoch,
                                             commit=True) for t in txns]
            for call in commits:
                call.result()
            _abort_leftovers(client, self.job, {t.transactional_id for t in txns},
                             self.options.transaction_timeout_ms)

    def abort(self, messages) -> None:
        tasks = _messages(messages)
        if self.options.guarantee == AT_LEAST_ONCE:
            return
        # Best effort: with the broker out of reach, the transactions time out instead.
        with contextlib.suppress(ClientError), _client(self.options) as client:
            _abort_quietly(client, [t.txn for t in tasks if t.txn is not None])
            _abort_leftovers(client, self.job, set(), self.options.transaction_timeout_ms)
