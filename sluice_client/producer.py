"""The producer role of the client: records and prebuilt batches to partition leaders,
idempotent when the client is (`enable_idempotence`), and transactions (their
producer ids, partitions and ends, through the transaction coordinator).
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Iterable, Mapping

from sluice_client.connection import BrokerConnection
from sluice_client.model import TRANSACTION_KEY, ProduceResult, ProducerRecord
from sluice_client.responses import entry_for
from wire.compression import CODEC_NAMES
from wire.error_codes import ErrorCode
from wire.errors import check
from wire.messages import ADD_PARTITIONS_TO_TXN, END_TXN, INIT_PRODUCER_ID, PRODUCE
from wire.records import build_batch

if TYPE_CHECKING:
    from sluice_client.client import AsyncClient

__all__ = ["Producer"]

_CODECS = {name: codec for codec, name in CODEC_NAMES.items()}
_SEQUENCE_MASK = 0x7FFFFFFF  # sequence numbers wrap from 2**31 - 1 to 0


class Producer:
    """Produce and transactions over a client's connections and metadata (`client.producer`)."""

    def __init__(self, client: AsyncClient):
        self.client = client
        self._session: _ProducerSession | None = None  # the idempotent producer id, once asked for
        self._session_lock = asyncio.Lock()
        self._partition_locks: dict[tuple[str, int], asyncio.Lock] = {}

    # -- produce -----------------------------------------------------------------------
    async def produce(self, topic: str, partition: int,
                      records: Iterable[ProducerRecord | tuple], *, acks: int = -1,
                      compression: int | str = "none", timeout_ms: int | None = None) -> ProduceResult:
        """Produce `records` as one RecordBatch v2 and return where it was written.

        Records are `ProducerRecord`s or tuples in its field order; `compression` is a
        codec name ("none", "gzip", "snappy", "lz4", "zstd") or id. With
        `enable_idempotence`, the batch carries the producer id and the partition's next
        sequence number; a retry resends the very same batch.
        """
        rows = [_record_row(ProducerRecord(*record)) for record in records]
        codec = _codec(compression)
        if not self.client.enable_idempotence:
            batch = build_batch(rows, compression=codec)
            return await self.produce_batch(topic, partition, batch, acks=acks, timeout_ms=timeout_ms)
        if acks != -1:
            raise ValueError(f"idempotent produce needs acks=-1 (all), not {acks}")
        # One batch in flight per partition: sequence numbers are handed out in the
        # order batches are appended, and an uncertain outcome ends the session.
        lock = self._partition_locks.setdefault((topic, partition), asyncio.Lock())
        async with lock:
            session = await self._producer_session()
            sequence = session.sequences.get((topic, partition), 0)
            batch = build_batch(rows, compression=codec, producer_id=session.producer_id,
                                producer_epoch=session.producer_epoch, base_sequence=sequence)
            try:
                result = await self.produce_batch(topic, partition, batch, acks=acks,
                                                  timeout_ms=timeout_ms)
            except BaseException:
                # Written or not is unknown: the next batch starts over under a new
                # producer id rather than risk a gap or a false duplicate.
                if self._session is session:
                    self._session = None
                raise
            session.sequences[(topic, partition)] = (sequence + len(rows)) & _SEQUENCE_MASK
            return result

    async def produce_batch(self, topic: str, partition: int, batch, *, acks: int = -1,
                            timeout_ms: int | None = None,
                            transactional_id: str | None = None) -> ProduceResult:
        """Produce an already-built record batch as is (inside the transaction of
        `transactional_id` when the batch is transactional)."""
        if acks not in (-1, 0, 1):
            raise ValueError(f"acks must be -1 (all), 0 or 1, not {acks}")
        if timeout_ms is None:
            timeout_ms = int(self.client.request_timeout * 1000)
        context = f"produce to {topic}-{partition}"

        async def attempt() -> ProduceResult:
            connection, _, _ = await self.client.leader_connection(topic, partition)
            body = PRODUCE.request(acks=acks, timeout_ms=timeout_ms, transactional_id=transactional_id,
                                   topic_data=[
                PRODUCE.request.TopicProduceData(name=topic, partition_data=[
                    PRODUCE.request.PartitionProduceData(index=partition, records=batch)])])
            version = connection.version(PRODUCE)
            if acks == 0:
                await connection.send(PRODUCE, version, body)
                return ProduceResult(topic, partition, -1, -1, -1)
            response = await connection.request(
                PRODUCE, version, body, timeout=self.client.request_timeout + timeout_ms / 1000)
            answer = entry_for(entry_for(response.responses, "name", topic, context).partition_responses,
                           "index", partition, context)
            duplicate = answer.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
            if not duplicate:
                check(answer.error_code, context, answer.error_message)
            return ProduceResult(topic, partition, answer.base_offset, answer.log_append_time_ms,
                                 answer.log_start_offset, duplicate)

        return await self.client.retrying(attempt, lambda: self.client.forget_topic(topic))

    async def _producer_session(self) -> _ProducerSession:
        """The current idempotent producer id, from InitProducerId on first need."""
        async with self._session_lock:
            if self._session is None:
                self._session = await self.client.retrying(self._init_producer_id)
            return self._session

    async def _init_producer_id(self) -> _ProducerSession:
        connection = await self.client.any_connection()
        # No transactional id: any broker hands out the id; the timeout is unused.
        response = await connection.request(
            INIT_PRODUCER_ID, connection.version(INIT_PRODUCER_ID),
            INIT_PRODUCER_ID.request(transactional_id=None, transaction_timeout_ms=0x7FFFFFFF))
        check(response.error_code, "InitProducerId")
        return _ProducerSession(response.producer_id, response.producer_epoch)

    # -- transactions ------------------------------------------------------------------
    async def init_transactions(self, transactional_id: str,
                                transaction_timeout_ms: int = 60_000) -> tuple[int, int]:
        """InitProducerId for `transactional_id`: returns (producer id, epoch). The
        coordinator fences every earlier producer of the id and aborts its open
        transaction."""
        context = f"InitProducerId for transactional id {transactional_id!r}"

        async def send(connection: BrokerConnection) -> tuple[int, int]:
            response = await connection.request(
                INIT_PRODUCER_ID, connection.version(INIT_PRODUCER_ID),
                INIT_PRODUCER_ID.request(transactional_id=transactional_id,
                                         transaction_timeout_ms=transaction_timeout_ms,
                                         producer_id=-1, producer_epoch=-1))
            check(response.error_code, context)
            return response.producer_id, response.producer_epoch

        return await self.client.with_coordinator(transactional_id, send, TRANSACTION_KEY)

    async def add_partitions_to_txn(self, transactional_id: str, producer_id: int,
                                    producer_epoch: int, partitions: Mapping[str, Iterable[int]]) -> None:
        """Add topic-partitions to the open transaction (before producing to them)."""
        context = f"AddPartitionsToTxn for {transactional_id!r}"
        topics = [ADD_PARTITIONS_TO_TXN.request.AddPartitionsToTxnTopic(name=t, partitions=sorted(p))
                  for t, p in partitions.items()]

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(
                ADD_PARTITIONS_TO_TXN, connection.version(ADD_PARTITIONS_TO_TXN),
                ADD_PARTITIONS_TO_TXN.request(v3_and_below_transactional_id=transactional_id,
                                              v3_and_below_producer_id=producer_id,
                                              v3_and_below_producer_epoch=producer_epoch,
                                              v3_and_below_topics=topics))
            for topic in response.results_by_topic_v3_and_below:
                for result in topic.results_by_partition:
                    check(result.partition_error_code,
                          f"{context}: {topic.name}-{result.partition_index}")

        await self.client.with_coordinator(transactional_id, send, TRANSACTION_KEY)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> None:
        """Commit or abort the open transaction of (`transactional_id`, producer id,
        epoch). Any client may end a transaction it can name; ending one that already
        ended the same way succeeds again."""
        context = f"EndTxn({'commit' if commit else 'abort'}) for {transactional_id!r}"

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(
                END_TXN, connection.version(END_TXN),
                END_TXN.request(transactional_id=transactional_id, producer_id=producer_id,
                                producer_epoch=producer_epoch, committed=commit))
            check(response.error_code, context)

        await self.client.with_coordinator(transactional_id, send, TRANSACTION_KEY)


class _ProducerSession:
    """An idempotent producer id with the next sequence number of each partition."""

    __slots__ = ("producer_id", "producer_epoch", "sequences")

    def __init__(self, producer_id: int, producer_epoch: int):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.sequences: dict[tuple[str, int], int] = {}

def _codec(compression: int | str) -> int:
    codec = _CODECS.get(compression, compression)
    if codec not in CODEC_NAMES:
        raise ValueError(f"unknown compression {compression!r}; one of {sorted(_CODECS)}")
    return codec

def _record_row(record: ProducerRecord) -> tuple:
    """The (key, value, headers, timestamp) tuple `wire.records.build_batch` takes."""
    timestamp = record.timestamp if record.timestamp is not None else int(time.time() * 1000)
    return record.key, record.value, record.headers, timestamp
