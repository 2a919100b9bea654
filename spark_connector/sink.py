"""The `sluice` sink: Spark rows written to Kafka, exactly once by default.

Columns and options follow Spark's Kafka sink: `value` (binary or string, required),
`key`, `topic`, `partition`, `headers` (array<struct<key string, value binary>>);
options `kafka.bootstrap.servers`, `topic` (when set, it overrides any topic column, as
in Spark's Kafka sink), other `kafka.*`. A row without a partition goes where Kafka's
default partitioner puts it (murmur2 of the key; rows without a key are spread
round-robin).

`deliveryGuarantee`:
- `exactly_once` (default): each write task writes inside its own transaction, left open;
  the driver records its intent to commit a batch, then commits every task's
  transaction. Replays, retries and zombies cannot duplicate or lose a batch. See
  docs/exactly-once-sink.md for the protocol, its invariants and every crash point.
- `at_least_once`: an idempotent producer per task, no transactions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from dataclasses import dataclass, field

from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)

from spark_connector.options import AT_LEAST_ONCE, CODECS, EXACTLY_ONCE, SinkOptions
from wire._columns import murmur2_positive
from wire.client import Client, ClientError, NewTopic
from wire.errors import ErrorCode, KafkaError
from wire.records import build_batch

_BATCH_RECORDS = 5000
_BATCH_BYTES = 900 * 1024
_INTENT_PREFIX = "__sluice_sink_"
_INTENT_RETENTION_MS = 7 * 24 * 3600 * 1000


@dataclass
class TaskCommit(WriterCommitMessage):
    """What a write task hands the driver: its open transaction (if any)."""

    query: str | None
    transactional_id: str | None
    producer_id: int = -1
    producer_epoch: int = -1
    rows: int = 0
    skipped: bool = False


@dataclass
class _Partitioner:
    counts: dict = field(default_factory=dict)
    round_robin: dict = field(default_factory=dict)

    def partition(self, client: Client, topic: str, key: bytes | None) -> int:
        count = self.counts.get(topic)
        if count is None:
            metadata = client.metadata([topic])
            info = metadata.topics.get(topic)
            if info is None or info.error_code or not info.partitions:
                raise RuntimeError(f"sluice sink: topic {topic!r} does not exist")
            count = self.counts[topic] = len(info.partitions)
        if key is None:
            nxt = self.round_robin.get(topic, 0)
            self.round_robin[topic] = nxt + 1
            return nxt % count
        return murmur2_positive(key) % count


def _bytes(value) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


class _TaskWriter:
    """Turns a task's Arrow batches into record batches, per topic-partition."""

    def __init__(self, client: Client, options: SinkOptions, transaction: tuple | None):
        self.client = client
        self.options = options
        self.transaction = transaction  # (transactional id, producer id, epoch) or None
        self.partitioner = _Partitioner()
        self.pending: dict[tuple[str, int], list] = {}
        self.pending_bytes: dict[tuple[str, int], int] = {}
        self.sequences: dict[tuple[str, int], int] = {}
        self.rows = 0

    def write(self, batch) -> None:
        columns = {name.lower(): batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = columns["value"]
        keys = columns.get("key", [None] * n)
        topics = columns.get("topic", [None] * n)
        partitions = columns.get("partition", [None] * n)
        headers = columns.get("headers", [None] * n)
        for i in range(n):
            topic = self.options.topic or topics[i]  # as Spark's Kafka sink: the option wins
            if not topic:
                raise RuntimeError("sluice sink: a row has a null topic and option 'topic' is not set")
            key = _bytes(keys[i])
            partition = partitions[i]
            if partition is None:
                partition = self.partitioner.partition(self.client, topic, key)
            value = _bytes(values[i])
            row_headers = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else ()
            tp = (topic, partition)
            self.pending.setdefault(tp, []).append((key, value, row_headers, None))
            size = self.pending_bytes.get(tp, 0) + len(value or b"") + len(key or b"") + 16
            self.pending_bytes[tp] = size
            if len(self.pending[tp]) >= _BATCH_RECORDS or size >= _BATCH_BYTES:
                self._send(tp)
        self.rows += n

    def flush(self) -> None:
        for tp in list(self.pending):
            self._send(tp)

    def _send(self, tp: tuple[str, int]) -> None:
        rows = self.pending.pop(tp)
        self.pending_bytes.pop(tp, None)
        topic, partition = tp
        codec = CODECS.index(self.options.compression)
        if self.transaction is None:  # at least once: the client's idempotent producer
            self.client.produce(topic, partition, rows, compression=codec)
            return
        txn_id, pid, epoch = self.transaction
        if tp not in self.sequences:
            self.client.add_partitions_to_txn(txn_id, pid, epoch, {topic: [partition]})
            self.sequences[tp] = 0
        batch = build_batch([(k, v, h, _now()) for k, v, h, _ in rows], compression=codec,
                            producer_id=pid, producer_epoch=epoch,
                            base_sequence=self.sequences[tp], transactional=True)
        self.client.produce_batch(topic, partition, batch, transactional_id=txn_id)
        self.sequences[tp] += len(rows)


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
        raise RuntimeError(f"sluice sink: cannot {what} via kafka.bootstrap.servers="
                           f"{options.bootstrap_servers}: {exc}") from None


def _run_task(options: SinkOptions, iterator, transactional_id: str | None, query: str | None,
              batch_id: int | None = None) -> TaskCommit:
    if options.guarantee == AT_LEAST_ONCE:
        with _client(options, idempotent=True) as client:
            writer = _TaskWriter(client, options, None)
            for batch in iterator:
                writer.write(batch)
            writer.flush()
            _test_crash("during-task-writes", batch_id)
            return TaskCommit(query, None, rows=writer.rows)
    with _client(options) as client:
        pid, epoch = client.init_transactions(transactional_id, options.transaction_timeout_ms)
        writer = _TaskWriter(client, options, (transactional_id, pid, epoch))
        try:
            for batch in iterator:
                writer.write(batch)
            writer.flush()
            _test_crash("during-task-writes", batch_id)
            _test_fail_first_attempt()
        except BaseException:
            try:
                client.end_txn(transactional_id, pid, epoch, commit=False)
            except Exception:
                pass  # the transaction times out instead
            raise
        if not writer.sequences:  # wrote nothing: there is no transaction to commit
            return TaskCommit(query, None, rows=0)
        return TaskCommit(query, transactional_id, pid, epoch, writer.rows)


def _end_all(options: SinkOptions, transactions: list, commit: bool,
             batch_id: int | None = None) -> None:
    if not transactions:
        return
    with _client(options) as client:
        for n, (txn_id, pid, epoch) in enumerate(transactions, 1):
            try:
                client.end_txn(txn_id, pid, epoch, commit=commit)
            except KafkaError:
                if commit:
                    raise
            if commit and n < len(transactions):
                _test_crash("mid-commit", batch_id)


def _task_context():
    from pyspark import TaskContext
    return TaskContext.get()


class SluiceBatchWriter(DataSourceArrowWriter):
    """`df.write.format("sluice")`: task transactions committed together by the driver."""

    def __init__(self, options: SinkOptions):
        self.options = options
        self.job = uuid.uuid4().hex  # made on the driver, shared by every task of the job

    def write(self, iterator) -> TaskCommit:
        ctx = _task_context()
        with _naming_servers(self.options, "write"):
            return _run_task(self.options, iterator, f"sluice-{self.job}-{ctx.partitionId()}", None)

    def commit(self, messages) -> None:
        with _naming_servers(self.options, "commit"):
            _end_all(self.options, _transactions(messages), commit=True)

    def abort(self, messages) -> None:
        _end_all(self.options, _transactions(messages), commit=False)


def _transactions(messages) -> list:
    return [(m.transactional_id, m.producer_id, m.producer_epoch) for m in messages
            if isinstance(m, TaskCommit) and m.transactional_id]


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
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        if self.options.guarantee == AT_LEAST_ONCE:
            return _run_task(self.options, iterator, None, query, batch_id)
        with _client(self.options) as client:
            intent = _last_intent(client, query)
        if intent is not None and intent["batch"] == batch_id:
            return TaskCommit(query, None, skipped=True)  # already decided: write nothing
        txn_id = f"sluice-{query}-{batch_id}-{ctx.partitionId()}"
        return _run_task(self.options, iterator, txn_id, query, batch_id)

    def commit(self, messages, batchId: int) -> None:
        with _naming_servers(self.options, "commit"):
            self._commit(messages, batchId)

    def _commit(self, messages, batchId: int) -> None:
        _test_crash("after-task-writes", batchId)
        if self.options.guarantee == AT_LEAST_ONCE:
            _test_crash("after-commit", batchId)
            return
        queries = {m.query for m in messages if isinstance(m, TaskCommit) and m.query}
        if not queries:
            return
        [query] = queries
        with _client(self.options) as client:
            intent = _last_intent(client, query)
            if intent is not None and intent["batch"] == batchId:
                transactions = [tuple(t) for t in intent["transactions"]]  # a replay: finish it
            else:
                transactions = _transactions(messages)
                _record_intent(client, query, batchId, transactions)
                _test_crash("after-intent", batchId)
        _end_all(self.options, transactions, commit=True, batch_id=batchId)
        _test_crash("after-commit", batchId)

    def abort(self, messages, batchId: int) -> None:
        if self.options.guarantee == EXACTLY_ONCE:
            _end_all(self.options, _transactions(messages), commit=False)


def _intent_topic(query: str) -> str:
    return _INTENT_PREFIX + query


def _last_intent(client: Client, query: str) -> dict | None:
    """The last intent record of the query, or None when it has none."""
    topic = _intent_topic(query)
    try:
        end = client.list_offsets(topic, [0], -1)[0].offset
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise
    if end <= 0:
        return None
    fetched = client.fetch_records(topic, 0, end - 1, max_wait_ms=0)
    if not fetched.records:
        raise RuntimeError(f"sluice sink: cannot read the last intent of query {query} in {topic}")
    return json.loads(fetched.records[-1].value)


def _record_intent(client: Client, query: str, batch_id: int, transactions: list) -> None:
    topic = _intent_topic(query)
    created = client.create_topics({topic: NewTopic(1, -1, {"retention.ms": str(_INTENT_RETENTION_MS)})})
    error = created[topic].error
    if error is not None and error.code != ErrorCode.TOPIC_ALREADY_EXISTS:
        raise error
    value = json.dumps({"batch": batch_id, "transactions": [list(t) for t in transactions]}).encode()
    client.produce(topic, 0, [(query.encode(), value, (), None)], acks=-1)


# -- test-only hooks (tests/test_spark_sink.py); inert unless their variables are set -------

def _test_crash(point: str, batch_id: int | None) -> None:
    """SLUICE_TEST_SINK_CRASH=point: SIGKILL the whole Spark application when a streaming
    write reaches `point` (during-task-writes, after-task-writes, after-intent, mid-commit,
    after-commit) in a batch >= SLUICE_TEST_SINK_CRASH_BATCH. Tasks and commit() run in
    Python workers under the JVM, and PySpark's daemon puts its workers in a process group
    of their own, so both the driver's group (SLUICE_TEST_SINK_CRASH_PGID) and this
    worker's group are killed. The point reached is first appended to
    SLUICE_TEST_SINK_CRASH_LOG."""
    if batch_id is None or os.environ.get("SLUICE_TEST_SINK_CRASH") != point:
        return
    if batch_id < int(os.environ.get("SLUICE_TEST_SINK_CRASH_BATCH", "0")):
        return
    log = os.environ.get("SLUICE_TEST_SINK_CRASH_LOG")
    if log:
        with open(log, "a") as out:
            out.write(f"{point} {batch_id} {os.getpid()}\n")
    own = os.getpgrp()
    driver = int(os.environ.get("SLUICE_TEST_SINK_CRASH_PGID", own))
    if driver != own:
        os.killpg(driver, signal.SIGKILL)
    os.killpg(own, signal.SIGKILL)


def _test_fail_first_attempt() -> None:
    """SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT=1: the first attempt of every exactly-once write
    task fails after producing its rows, leaving its transaction open. On an even Spark
    partition the Python worker exits at once (like a lost executor: nothing aborts the
    transaction); on an odd one the task raises (and aborts its own transaction)."""
    if os.environ.get("SLUICE_TEST_SINK_FAIL_FIRST_ATTEMPT") != "1":
        return
    ctx = _task_context()
    if ctx is None or ctx.attemptNumber() != 0:
        return
    if ctx.partitionId() % 2 == 0:
        os._exit(17)
    raise RuntimeError(f"sluice test: first attempt of write task {ctx.partitionId()} fails on purpose")
