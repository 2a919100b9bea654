"""The `sluice` source: Kafka topic-partitions read as Spark partitions of Arrow batches.

Offsets are Spark's Kafka JSON, `{topic: {partition: offset}}`, each the next offset to
read. The driver plans one `OffsetRange` per topic-partition (split further to honour
`minPartitions`); each task fetches its range straight from the partition leader and
yields Arrow batches. Planning and reading use only the `wire` client, so any
Kafka-compatible broker works.

Rules:
- A topic named by `subscribe` or `assign` that does not exist fails the query;
  assigned partitions that do not exist are not read (Spark's connector's rules).
- New partitions of a subscribed topic, and new topics matching `subscribePattern`,
  are read from their earliest offset.
- Data loss as Spark's connector sees it (a start offset below the log start, a
  partition gone, a stream's end offset below its start) fails the query naming topic,
  partition and offsets when `failOnDataLoss` is true (the default); otherwise it is a
  warning and reading goes on: from the log start, without the partition, from the
  end offset. A batch whose start is past its end fails either way, as in Spark.
- A topic deleted and created again while a query reads it is data loss too, noticed
  by its topic id: by the stream reader at each trigger, by a task at each fetch. With
  failOnDataLoss false the new topic is read from its earliest offsets.
- `maxOffsetsPerTrigger` is a read limit (admission control), spread over partitions
  as Spark spreads it (see `_limit`); `trigger(availableNow=True)` fixes its target
  when the query starts and honours the limit on the way there.
- `minOffsetsPerTrigger` holds a trigger back while fewer records are new, until
  `maxTriggerDelay` has passed since the last trigger that went ahead (Spark's rule).
  The Python API has no composite read limit, so the source applies it itself, under
  whichever limit Spark passes except ReadAllAvailable (Trigger.Once), as Spark's
  source does; `trigger(availableNow=True)` does not wait for it (the run would end
  with the last records unread).
- `maxRecordsPerPartition` and `minPartitions` cut offset ranges into Spark partitions
  (see `_split`).
- With `kafka.group.id`, every offset Spark reports as processed is committed to that
  consumer group: the start of each `latestOffset` call (Spark makes it at every
  trigger, after the previous batch committed) and each `commit(end)` (which Spark
  makes only when the next batch starts). So the group is current after every batch
  from the trigger that follows it on: `processAllAvailable()` and availableNow runs
  end with it current; a query stopped between a batch and the next trigger leaves it
  one batch behind until the query runs again.
- Spark's Kafka source reports `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
  `avgOffsetsBehindLatest` as source metrics; Python sources cannot (PySpark's
  streaming source runner has no metrics call). The source reports the latest offsets
  it saw as the progress's `latestOffset` instead, and
  `spark_connector.offsets_behind_latest` computes those three numbers from a progress.
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (ReadAllAvailable, ReadMaxRows, ReadMinRows,
                                              SupportsTriggerAvailableNow)

from spark_connector.arrow import arrow_schema, columns_to_batch
from spark_connector.errors import message_first
from spark_connector.options import (EARLIEST, LATEST, Position, SluiceOptionError, SourceOptions,
                                     parse_source_options)
from sluice_client import Client, ClientError
from sluice_client.consumer import visible_batches
from sluice_client.connection import DEFAULT_MAX_RESPONSE_BYTES
from wire.columns import decode_batch_columns
from wire.errors import ErrorCode, KafkaError
from wire.primitives import ZERO_UUID

_MAX_DECOMPRESSED = 256 * 1024 * 1024
_MIN_ARROW_ROWS = 4096  # smaller Kafka batches are merged before Spark sees them
_STALL_PAUSE = 0.05  # seconds between fetches that brought none of a task's records
_RESPONSE_OVERHEAD = 1024 * 1024  # room for a Fetch response's headers around its records
_DRIVER_RETRY_TIMEOUT = 20.0  # seconds the driver retries one query, unless told otherwise
# Retries are bounded by time, not count, as Kafka's clients bound them (retries MAX_INT,
# default.api.timeout.ms): a leader's failover takes up to a ZooKeeper session timeout.
_UNCOUNTED_RETRIES = 2**31 - 1

log = logging.getLogger("spark_connector")


class SluiceDataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deleted topic or partition)."""


class SluiceTopicError(RuntimeError):
    """A topic named by 'subscribe' or 'assign' does not exist or cannot be read."""


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    bootstrap_servers: str
    isolation_level: int
    include_headers: bool
    fail_on_data_loss: bool
    fetch_bytes: int
    fetch_max_wait_ms: int
    poll_timeout_ms: int
    client: tuple  # Sluice client keyword arguments, as pairs (hashable, picklable)
    topic_id: str  # of the topic the range was planned in ("" when the broker gives none)


def to_json_offsets(offsets: dict[tuple[str, int], int]) -> dict:
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json_offsets(offsets: dict) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def _driver_client(options: SourceOptions) -> Client:
    """The driver's client. With fetchOffset.* set, its queries retry as Spark's do (that
    many times, a fixed interval apart), the time bound widened by those intervals so
    that every retry can happen."""
    settings = {"client_id": "sluice-spark", "retry_timeout": _DRIVER_RETRY_TIMEOUT,
                "retries": _UNCOUNTED_RETRIES, **options.client}
    if options.fetch_offset_retry is not None:
        retries, interval_ms = options.fetch_offset_retry
        settings.update(retries=retries, retry_backoff=interval_ms / 1000, retry_backoff_max=interval_ms / 1000,
                        retry_timeout=settings["retry_timeout"] + retries * interval_ms / 1000)
    return Client(options.bootstrap_servers, **settings)


class _Planner:
    """Driver-side knowledge of the subscribed partitions and their offsets."""

    def __init__(self, options: SourceOptions):
        self.options = options
        self._client: Client | None = None
        self.topic_ids: dict[str, uuid.UUID] = {}  # of the topics `partitions` last found

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = _driver_client(self.options)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ClientError as exc:
            raise RuntimeError(f"sluice: cannot {what} via kafka.bootstrap.servers="
                               f"{self.options.bootstrap_servers}: {exc}") from None

    def partitions(self) -> list[tuple[str, int]]:
        """The topic-partitions the query reads now. As in Spark's connector: a topic
        named by 'subscribe' or 'assign' that does not exist is an error; assigned
        partitions that do not exist are not read; a pattern reads what matches."""
        sub = self.options.subscription
        if sub.pattern is not None:
            metadata = self._call("read metadata", self.client.metadata, None)
            topics = [t for t in metadata.topics.values()
                      if not t.error_code and not t.is_internal and sub.matches(t.name)]
        elif sub.topics:
            topics = self._named_topics("subscribe", sub.topics)
        else:
            topics = self._named_topics("assign", sorted({topic for topic, _ in sub.assigned}))
        self.topic_ids = {topic.name: topic.topic_id for topic in topics}
        found = [(topic.name, p) for topic in topics for p in topic.partitions]
        if sub.assigned:
            found = [tp for tp in found if tp in sub.assigned]
        return sorted(found)

    def _named_topics(self, option: str, names) -> list:
        """The metadata of topics the query names. One that is unknown or has no leader
        yet (just created) is asked for again as the driver retries (see
        `_driver_client`); one still missing then fails the query, as in Spark's
        connector (UnknownTopicOrPartitionException)."""
        try:
            metadata = self._call("read metadata", self.client.metadata, names, require_topics=True)
        except KafkaError as exc:
            missing = exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            raise SluiceTopicError(
                f"sluice: option '{option}' names {'topics that do not exist' if missing else 'topics it cannot read'}"
                f" at kafka.bootstrap.servers={self.options.bootstrap_servers}: {exc}") from None
        return [metadata.topics[name] for name in names]

    def offsets(self, partitions: list[tuple[str, int]], timestamp: int) -> dict[tuple[str, int], int]:
        """ListOffsets for `timestamp` (-2 earliest, -1 latest/LSO, or ms) per partition;
        -1 where no offset answers a timestamp."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        result = {}
        for topic, parts in by_topic.items():
            answers = self._call("list offsets", self.client.consumer.list_offsets, topic, parts, timestamp,
                                 isolation_level=self.options.isolation_level)
            for partition, answer in answers.items():
                result[(topic, partition)] = answer.offset
        return result

    def resolve(self, position: Position, partitions: list[tuple[str, int]],
                what: str) -> dict[tuple[str, int], int]:
        """Concrete offsets of a starting or ending position."""
        if position.kind in ("earliest", "latest"):
            return self.offsets(partitions, EARLIEST if position.kind == "earliest" else LATEST)
        if position.kind == "group":
            committed = self._call("fetch the group's offsets", self.client.consumer.fetch_offsets,
                                   self.options.group_id, partitions)
            earliest = self.offsets(partitions, EARLIEST)
            return {tp: (committed[tp].offset if tp in committed and committed[tp].offset >= 0
                         else earliest[tp]) for tp in partitions}
        if position.kind == "offsets":
            _check_partitions_named(what, position.offsets, partitions, "-2: earliest, -1: latest")
            result = dict(position.offsets)
            for special in (EARLIEST, LATEST):
                named = [tp for tp, offset in result.items() if offset == special]
                if named:
                    result.update(self.offsets(named, special))
            return result
        timestamp_option = _option_name(position, what)
        if position.timestamp is None:
            _check_partitions_named(timestamp_option, position.timestamps, partitions, "a time in ms")
        result = {}
        for tp in partitions:
            ts = position.timestamp if position.timestamp is not None else position.timestamps[tp]
            offset = self.offsets([tp], ts)[tp]
            if offset < 0:
                if position.strategy == "error":
                    raise SluiceOptionError(f"option '{timestamp_option}': no record of {tp[0]}/{tp[1]} has a "
                                            f"timestamp at or after {ts}")
                offset = self.offsets([tp], LATEST)[tp]
            result[tp] = offset
        return result

    def from_log_start(self, start: dict[tuple[str, int], int], earliest: dict[tuple[str, int], int],
                       latest: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Start offsets below the log start, whose records retention or DeleteRecords
        removed, are data loss: an error, or with failOnDataLoss false, the log start."""
        checked = dict(start)
        for tp, offset in start.items():
            if offset < earliest[tp]:
                _data_loss(self.options.fail_on_data_loss,
                           f"{tp[0]}-{tp[1]}: offset {offset} is no longer available, the partition holds "
                           f"[{earliest[tp]}, {latest[tp]}] (older records were deleted, by retention or "
                           "DeleteRecords)", "continue from the earliest available offset")
                checked[tp] = earliest[tp]
        return checked

    def plan(self, start: dict[tuple[str, int], int], end: dict[tuple[str, int], int]) -> list[OffsetRange]:
        ranges = [(tp, start.get(tp, 0), until) for tp, until in sorted(end.items())
                  if until > start.get(tp, 0)]
        o = self.options
        ranges = _split(ranges, o.min_partitions, o.max_records_per_partition)
        client = tuple(sorted(o.client.items()))
        return [OffsetRange(topic, partition, low, high, o.bootstrap_servers, o.isolation_level,
                            o.include_headers, o.fail_on_data_loss, o.fetch_bytes,
                            o.fetch_max_wait_ms, o.poll_timeout_ms, client, _id_text(self.topic_ids.get(topic)))
                for (topic, partition), low, high in ranges]


def _id_text(topic_id: uuid.UUID | None) -> str:
    return "" if topic_id in (None, ZERO_UUID) else str(topic_id)


def _check_partitions_named(option: str, given: dict, partitions: list[tuple[str, int]], values: str) -> None:
    """Offsets or timestamps per partition must name exactly the partitions the query
    reads, as Spark's connector requires: one left out or one not read is an error."""
    left_out = sorted(set(partitions) - set(given))
    not_read = sorted(set(given) - set(partitions))
    if left_out or not_read:
        problems = ([f"it leaves out {', '.join(f'{t}-{p}' for t, p in left_out)}"] if left_out else []) + \
            ([f"it names {', '.join(f'{t}-{p}' for t, p in not_read)}, which the query does not read "
              "(no such topic or partition, or not subscribed)"] if not_read else [])
        raise SluiceOptionError(f"option '{option}' must give a value ({values}) for each partition the "
                                f"query reads, and for no other: {'; '.join(problems)}")


def _data_loss(fail: bool, message: str, instead: str) -> None:
    """Spark's failOnDataLoss: fail naming the loss, or log it and go on (`instead` says how)."""
    if fail:
        raise SluiceDataLossError(f"sluice: data loss: {message}. Set option 'failOnDataLoss' to false to "
                                  f"{instead} instead.")
    log.warning("sluice: data loss: %s; failOnDataLoss is false, so the query goes on: it will %s",
                message, instead)


def _option_name(position: Position, what: str) -> str:
    """The option a starting or ending position comes from (`what`: startingOffsets or
    endingOffsets)."""
    if position.kind != "timestamp":
        return what
    return what.replace("Offsets", "Timestamp") if position.timestamp is not None else what + "ByTimestamp"


def _cut(tp, low: int, high: int, parts: int) -> list:
    """[low, high) in `parts` pieces whose sizes differ by at most one."""
    bounds = [low + (high - low) * i // parts for i in range(parts + 1)]
    return [(tp, a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def _split(ranges: list, min_partitions: int | None, max_records: int | None) -> list:
    """Spark partitions for offset ranges, as Spark's Kafka source plans them: ranges of
    more than `max_records` (maxRecordsPerPartition) are cut into equal pieces of at most
    that many; then, if there are fewer than `min_partitions`, each range is cut into
    pieces in proportion to its size, for about that many in all."""
    if max_records:
        ranges = [piece for tp, low, high in ranges
                  for piece in _cut(tp, low, high, math.ceil((high - low) / max_records))]
    if not min_partitions or len(ranges) >= min_partitions or not ranges:
        return ranges
    total = sum(high - low for _, low, high in ranges)
    return [piece for tp, low, high in ranges
            for piece in _cut(tp, low, high, max(1, math.ceil((high - low) * min_partitions / total)))]


def _merged(batches: list, schema: pa.Schema) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches, schema).combine_chunks().to_batches()[0]


def _within(arrow: pa.RecordBatch, columns, low: int, high: int) -> pa.RecordBatch:
    """The rows of a Kafka batch whose offsets lie in [low, high)."""
    first, last = columns.header.base_offset, columns.header.last_offset
    if first >= low and last < high:
        return arrow
    offsets = memoryview(columns.offsets).cast("q")
    start = next((i for i, o in enumerate(offsets) if o >= low), len(offsets))
    stop = next((i for i, o in enumerate(offsets) if o >= high), len(offsets))
    return arrow.slice(start, max(stop - start, 0))


def _poll_timeout(part: OffsetRange, offset: int, why: str) -> RuntimeError:
    return RuntimeError(f"sluice: {part.topic}-{part.partition}: no records from offset {offset} "
                        f"(reading up to {part.until_offset}) within kafkaConsumer.pollTimeoutMs="
                        f"{part.poll_timeout_ms}: {why}")


def read_range(part: OffsetRange):
    """Fetch [from_offset, until_offset) of one partition, as Arrow batches.

    kafkaConsumer.pollTimeoutMs bounds the wait for the next records the task needs:
    each fetch (its retries included), and a run of fetches that bring none of them.
    """
    schema = arrow_schema(part.include_headers)
    settings = {"client_id": "sluice-spark-task",
                "max_response_bytes": max(DEFAULT_MAX_RESPONSE_BYTES, part.fetch_bytes + _RESPONSE_OVERHEAD),
                "retries": _UNCOUNTED_RETRIES, **dict(part.client)}
    client = Client(part.bootstrap_servers, call_timeout=part.poll_timeout_ms / 1000, **settings)
    try:
        offset = part.from_offset
        waiting_since = None  # monotonic time of the first fetch in a row that brought nothing
        while offset < part.until_offset:
            try:
                result = client.consumer.fetch(part.topic, part.partition, offset,
                                      max_wait_ms=part.fetch_max_wait_ms,
                                      max_bytes=part.fetch_bytes,
                                      isolation_level=part.isolation_level)
            except TimeoutError as exc:
                if isinstance(exc, ClientError):  # the client's own request timeout, retries spent
                    raise
                raise _poll_timeout(part, offset, "the broker did not answer") from None
            except KafkaError as exc:
                if exc.code not in (ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                    raise
                _data_loss(part.fail_on_data_loss,
                           f"{part.topic}-{part.partition}: offsets [{offset}, {part.until_offset}) "
                           f"can no longer be read ({exc.code.name})",
                           "read on from the earliest offset still available, if any")
                if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    return
                earliest = client.consumer.list_offsets(part.topic, [part.partition], EARLIEST)[part.partition].offset
                if earliest <= offset:
                    return
                offset = earliest
                continue
            now_id = _id_text(client.cached_metadata.topics[part.topic].topic_id
                              if part.topic in client.cached_metadata.topics else None)
            if part.topic_id and now_id and now_id != part.topic_id:
                _data_loss(part.fail_on_data_loss,
                           f"topic {part.topic!r} was deleted and created again while a task read it (topic id "
                           f"{part.topic_id}, now {now_id}): offsets [{offset}, {part.until_offset}) of "
                           f"{part.topic}-{part.partition} are gone", "read on without them")
                return
            batches, next_offset = visible_batches(result, part.isolation_level, _MAX_DECOMPRESSED)
            small: list[pa.RecordBatch] = []  # Kafka batches too small to hand over alone
            for header, batch in batches:
                columns = decode_batch_columns(batch, _MAX_DECOMPRESSED, part.include_headers)
                arrow = _within(columns_to_batch(part.topic, part.partition, columns,
                                                 part.include_headers, schema),
                                columns, offset, part.until_offset)
                if arrow.num_rows >= _MIN_ARROW_ROWS:
                    yield arrow
                elif arrow.num_rows:
                    small.append(arrow)
                    if sum(b.num_rows for b in small) >= _MIN_ARROW_ROWS:
                        yield _merged(small, schema)
                        small = []
            if small:
                yield _merged(small, schema)
            if next_offset > offset:
                offset, waiting_since = next_offset, None
                continue
            # Nothing readable yet, e.g. an open transaction holds the stable offset back.
            # Every such round sleeps, so the time bound also bounds their number.
            now = time.monotonic()
            waiting_since = now if waiting_since is None else waiting_since
            if now - waiting_since > part.poll_timeout_ms / 1000:
                raise _poll_timeout(part, offset, f"fetches brought nothing (high watermark "
                                                  f"{result.high_watermark}, last stable offset "
                                                  f"{result.last_stable_offset})")
            time.sleep(_STALL_PAUSE)
    finally:
        client.close()


@message_first
class SluiceStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, raw_options):
        self._raw_options = raw_options
        self._planner: _Planner | None = None
        self._topic_ids: dict[str, uuid.UUID] = {}  # of the topics as this reader first saw them
        self._restarted: dict[tuple[str, int], int] = {}  # recreated topics' partitions: read from here
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow's end
        self._latest: dict[tuple[str, int], int] = {}  # the latest offsets seen, for progress
        self._last_trigger: float | None = None  # when a trigger last went ahead (minOffsetsPerTrigger)
        self._committed: dict | None = None

    @functools.cached_property
    def options(self) -> SourceOptions:
        """The options, checked at the reader's first use rather than when it is made:
        PySpark's stream runner reports an error raised while it makes the reader as its
        own failure to stop the reader it did not get (an UnboundLocalError), which hides
        the message."""
        return parse_source_options(self._raw_options, batch=False)

    @property
    def planner(self) -> _Planner:
        if self._planner is None:
            self._planner = _Planner(self.options)
        return self._planner

    def _partitions(self, begin: dict[tuple[str, int], int]) -> list[tuple[str, int]]:
        """The partitions read now, after a check of the topics' ids: a topic deleted and
        created again since this reader first saw it is data loss (Spark's connector
        notices only when offsets go back); with failOnDataLoss false the new topic is
        read from its earliest offsets, as a new partition is. `begin`: the offsets read
        so far, for the message."""
        partitions = self.planner.partitions()
        for topic, topic_id in self.planner.topic_ids.items():
            seen = self._topic_ids.setdefault(topic, topic_id)
            if topic_id == seen or ZERO_UUID in (topic_id, seen):
                continue
            read = {p: offset for (t, p), offset in sorted(begin.items()) if t == topic}
            _data_loss(self.options.fail_on_data_loss,
                       f"topic {topic!r} was deleted and created again while the query read it (topic id "
                       f"{seen}, now {topic_id}); records of the old topic after the offsets read, {read}, "
                       "if any, are gone", "read the new topic from its earliest offsets")
            self._topic_ids[topic] = topic_id
            again = [tp for tp in partitions if tp[0] == topic]
            self._restarted.update(self.planner.offsets(again, EARLIEST))
            if self._target is not None:
                self._target.update(self.planner.offsets(again, LATEST))
        return partitions

    def initialOffset(self) -> dict:
        partitions = self._partitions({})
        return to_json_offsets(self.planner.resolve(self.options.starting, partitions, "startingOffsets"))

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self._partitions({})
        self._target = self.planner.offsets(partitions, LATEST)

    def getDefaultReadLimit(self):
        """maxOffsetsPerTrigger, else minOffsetsPerTrigger (no composite limit exists in
        Python: with both, the minimum is applied in latestOffset under the maximum)."""
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        """The offsets the next batch ends at: the latest offset of every partition read
        now (under availableNow, of those there were when the run began), as in Spark's
        connector. A partition gone since `start` is left out, and an end below its start
        kept: `partitions` reports either as data loss."""
        self._commit_to_group(start)
        begin = from_json_offsets(start)
        partitions = self._partitions(begin)
        begin.update(self._restarted)
        if self._target is not None:
            latest = {tp: self._target[tp] for tp in partitions if tp in self._target}
        else:
            latest = self.planner.offsets(partitions, LATEST)
        appeared = [tp for tp in latest if tp not in begin]  # read from their earliest offset
        if appeared:
            begin.update(self.planner.offsets(appeared, EARLIEST))
        self._latest = end = latest
        if isinstance(limit, ReadAllAvailable):  # as in Spark, it overrides the source's limits
            return to_json_offsets(end)
        if self.options.min_offsets_per_trigger and self._target is None and self._holds_back(begin, end):
            return start
        if isinstance(limit, ReadMaxRows):
            end = _limit(begin, end, limit.max_rows)
        return to_json_offsets(end)

    def _holds_back(self, begin: dict, end: dict) -> bool:
        """Spark's rule for minOffsetsPerTrigger: skip this trigger while fewer records are
        new, unless maxTriggerDelay has passed since the last trigger that went ahead."""
        now = time.monotonic()
        overdue = (self._last_trigger is None
                   or (now - self._last_trigger) * 1000 >= self.options.max_trigger_delay_ms)
        if not overdue and sum(end[tp] - begin[tp] for tp in end) < self.options.min_offsets_per_trigger:
            return True
        self._last_trigger = now
        return False

    def reportLatestOffset(self):
        """The latest offsets the last latestOffset call saw (the progress's `latestOffset`)."""
        return to_json_offsets(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict):
        """The batch's offset ranges, with Spark's connector's data loss checks: a
        partition gone, an end below the start, a start below the log start."""
        begin, until = from_json_offsets(start), from_json_offsets(end)
        live = set(self._partitions(begin))
        begin.update((tp, self._restarted.pop(tp)) for tp in until if tp in self._restarted)
        for tp in sorted(tp for tp in begin.keys() | until.keys() if tp not in live):
            _data_loss(self.options.fail_on_data_loss,
                       f"{tp[0]}-{tp[1]} no longer exists (deleted while the query read it, at offset "
                       f"{begin.get(tp, until.get(tp))})", "read on without it")
        known = [tp for tp in until if tp in live]
        earliest = self.planner.offsets(known, EARLIEST) if known else {}
        latest = self.planner.offsets(known, LATEST) if known else {}
        start_at = {}
        for tp in known:
            offset = begin.get(tp, earliest[tp])
            if until[tp] < offset:
                _data_loss(self.options.fail_on_data_loss,
                           f"{tp[0]}-{tp[1]}: the offset to read from, {offset}, is beyond the partition's "
                           f"end, {until[tp]}: a start offset set past the end ('startingOffsets'), or records "
                           "lost since, e.g. the topic deleted and created again",
                           f"read on from offset {until[tp]}")
                continue
            start_at[tp] = offset
        start_at = self.planner.from_log_start(start_at, earliest, latest)
        return self.planner.plan(start_at, {tp: until[tp] for tp in start_at})

    def read(self, partition: OffsetRange):
        return read_range(partition)

    def commit(self, end: dict) -> None:
        self._commit_to_group(end)

    def _commit_to_group(self, offsets: dict) -> None:
        if self.options.group_id is None or offsets == self._committed:
            return
        try:
            self.planner.client.consumer.commit_offsets(self.options.group_id, from_json_offsets(offsets))
        except (ClientError, KafkaError) as exc:
            raise RuntimeError(f"sluice: cannot commit offsets to group "
                               f"{self.options.group_id!r} (kafka.group.id): {exc}") from None
        self._committed = offsets

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


def _limit(begin: dict, end: dict, max_rows: int) -> dict:
    """maxOffsetsPerTrigger spread as Spark's Kafka source spreads it: each partition with
    new records gets a share of `max_rows` in proportion to its backlog, rounded down but
    at least one record, so a small partition beside a busy one advances every trigger.
    Spark stops there; here the records rounding leaves over also go to the largest
    backlogs, so that a trigger reads the whole limit. With more such partitions than
    `max_rows`, their one record each takes a trigger past the limit, as in Spark."""
    backlog = {tp: end[tp] - begin[tp] for tp in end if end[tp] > begin[tp]}
    total = sum(backlog.values())
    if total <= max_rows:
        return end
    limited = dict(end)
    for tp, lag in backlog.items():
        limited[tp] = begin[tp] + min(lag, max(1, lag * max_rows // total))
    spare = max_rows - sum(limited[tp] - begin[tp] for tp in backlog)
    for tp in sorted(backlog, key=lambda t: -backlog[t]):
        if spare <= 0:
            break
        if limited[tp] < end[tp]:
            limited[tp] += 1
            spare -= 1
    return limited


@message_first
class SluiceBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self):
        planner = _Planner(self.options)
        try:
            partitions = planner.partitions()
            start = planner.resolve(self.options.starting, partitions, "startingOffsets")
            end = planner.resolve(self.options.ending, partitions, "endingOffsets")
            earliest = planner.offsets(partitions, EARLIEST)
            latest = planner.offsets(partitions, LATEST)
            for tp, offset in end.items():
                if offset > latest[tp]:
                    raise SluiceOptionError(f"option 'endingOffsets': {tp[0]}/{tp[1]} ends at {offset}, "
                                            f"beyond the latest offset {latest[tp]}")
                if start[tp] > offset:  # whatever failOnDataLoss says, as in Spark's connector
                    raise SluiceOptionError(
                        f"{tp[0]}-{tp[1]}: the resolved start offset {start[tp]} is greater than the resolved "
                        f"end offset {offset} (options '{_option_name(self.options.starting, 'startingOffsets')}'"
                        f" and '{_option_name(self.options.ending, 'endingOffsets')}')")
            start = planner.from_log_start(start, earliest, latest)
            ranges = planner.plan(start, end)
            return ranges or [OffsetRange("", 0, 0, 0, self.options.bootstrap_servers, 0,
                                          self.options.include_headers, True, 1, 0, 1, (), "")]
        finally:
            planner.close()

    def read(self, partition: OffsetRange):
        if partition.until_offset <= partition.from_offset:
            return iter(())
        return read_range(partition)
