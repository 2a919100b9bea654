"""Produce v0–11.

- acks must be -1 (all in-sync replicas), 0 or 1, else INVALID_REQUIRED_ACKS.
  acks=0 gets no response; if such a produce fails, the connection is closed, as
  Kafka does, so the producer notices.
- Only record batches v2 (magic 2) are stored; older message formats get
  UNSUPPORTED_FOR_MESSAGE_FORMAT. A partition's records must be exactly one batch
  (INVALID_RECORD otherwise), validated from its header alone:
  whole (not truncated), CRC-32C, size within `max.message.bytes` (MESSAGE_TOO_LARGE),
  record count consistent with lastOffsetDelta, not a control batch (INVALID_RECORD),
  timestamps not negative (INVALID_TIMESTAMP). Records are never decoded.
- Idempotent batches (producer id >= 0) are checked by the partition's producer state;
  a duplicate of one of the last five batches is answered with its original offset.
- v2+ returns log_append_time_ms (-1 for CreateTime topics); v5+ log_start_offset;
  v8+ record_errors and error_message.
"""

from __future__ import annotations

from wire.error_codes import ErrorCode
from wire.messages import PRODUCE
from wire.primitives import DecodeError
from wire.records import MAGIC, has_valid_crc, iter_batches

from broker.server import CloseConnection
from broker.storage.log import LogError
from broker.storage.producer_state import ProducerStateError
from broker.topics import TopicError

_Resp = PRODUCE.response
_MAGIC_AT = 16


class _Invalid(Exception):
    def __init__(self, code: ErrorCode, message: str):
        self.code = code
        super().__init__(message)


def validated_batch(records, max_message_bytes: int):
    """(header, view) of the one batch in a partition's produce records, or _Invalid."""
    if records is None or len(records) == 0:
        raise _Invalid(ErrorCode.CORRUPT_MESSAGE, "no record batch")
    try:
        iterator = iter_batches(records)
        batches = list(iterator)
    except DecodeError as exc:
        view = memoryview(records)
        if len(view) > _MAGIC_AT and view[_MAGIC_AT] < MAGIC:
            raise _Invalid(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                           "message format v0/v1 is not supported; use record batches (v2)") from None
        raise _Invalid(ErrorCode.CORRUPT_MESSAGE, str(exc)) from None
    if iterator.remaining:
        raise _Invalid(ErrorCode.CORRUPT_MESSAGE, f"{iterator.remaining} bytes of a truncated batch")
    if len(batches) != 1:
        raise _Invalid(ErrorCode.INVALID_RECORD,
                       f"a partition's produce must hold exactly one record batch, not {len(batches)}")
    header, view = batches[0]
    if header.size > max_message_bytes:
        raise _Invalid(ErrorCode.MESSAGE_TOO_LARGE,
                       f"batch of {header.size} bytes exceeds max.message.bytes {max_message_bytes}")
    if not has_valid_crc(view):
        raise _Invalid(ErrorCode.CORRUPT_MESSAGE, "record batch CRC mismatch")
    if header.is_control:
        raise _Invalid(ErrorCode.INVALID_RECORD, "clients may not produce control batches")
    if header.record_count != header.last_offset_delta + 1 or header.record_count == 0:
        raise _Invalid(ErrorCode.INVALID_RECORD,
                       f"batch holds {header.record_count} records but its last offset delta "
                       f"is {header.last_offset_delta}")
    if header.base_timestamp < -1 or header.max_timestamp < -1:
        raise _Invalid(ErrorCode.INVALID_TIMESTAMP, "negative record timestamp")
    return header, view


def _writable(view):
    """Batches are patched in place; a read-only buffer is copied first."""
    return view if not view.readonly else memoryview(bytearray(view))


async def handle(broker, header, request, client_host):
    acks = request.acks
    responses = []
    failed = None
    for topic_data in request.topic_data:
        partitions = []
        for data in topic_data.partition_data:
            result = _Resp.PartitionProduceResponse(index=data.index, base_offset=-1,
                                                    log_append_time_ms=-1, log_start_offset=-1)
            try:
                if acks not in (-1, 0, 1):
                    raise _Invalid(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
                if request.transactional_id is not None:
                    raise _Invalid(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                   "transactions are not supported by this broker yet")
                log = broker.topics.log(topic_data.name, data.index)
                records = data.records
                if records is not None and isinstance(records, memoryview):
                    records = _writable(records)
                batch_header, batch = validated_batch(records, log.config.max_message_bytes)
                appended = log.append(batch_header, batch)
                result.base_offset = appended.first_offset
                result.log_append_time_ms = appended.log_append_time
                result.log_start_offset = log.log_start_offset
                if not appended.duplicate:
                    broker.notify_append(topic_data.name, data.index)
            except (_Invalid, LogError, ProducerStateError, TopicError) as exc:
                result.error_code = exc.code
                result.error_message = str(exc)
                failed = failed or f"{topic_data.name}-{data.index}: {exc}"
            partitions.append(result)
        responses.append(_Resp.TopicProduceResponse(name=topic_data.name, partition_responses=partitions))
    if acks == 0:
        if failed:
            raise CloseConnection(f"acks=0 produce failed: {failed}")
        return None
    return _Resp(responses=responses, throttle_time_ms=0)
