"""Fetch v4–17 (older versions would need message-format down-conversion).

- Long poll: the response waits until `min_bytes` are available or `max_wait_ms`
  passes, waking as soon as an append lands in one of the requested partitions.
- Limits: `partition_max_bytes` per partition and `max_bytes` (v3+) in total, except
  that the first batch of the first partition with data is always returned whole,
  so a consumer can never get stuck behind a batch larger than its limits.
- Reads stop at the high watermark (read_uncommitted) or the last stable offset
  (read_committed, v4+). read_committed responses list the aborted transactions
  (producer id, first offset) with records between the fetch offset and the end of
  the batches returned, from the segments' transaction indexes (an empty list when
  there are none); `aborted_transactions` is null for read_uncommitted.
- v7+ fetch sessions are declined: a request to open one (id 0, epoch 0) gets a full
  response with session id 0; a request naming a session gets FETCH_SESSION_ID_NOT_FOUND.
- v9+ `current_leader_epoch` is checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH).
- v13+ topics are named by id (UNKNOWN_TOPIC_ID for an unknown one).
- Record bytes are sent from the segment files unchanged (sendfile for large ranges).
"""

from __future__ import annotations

import time

from wire.error_codes import ErrorCode
from wire.messages import FETCH
from wire.primitives import ZERO_UUID
from broker.errors import BrokerError


MIN_VERSION = 4
_Resp = FETCH.response
READ_COMMITTED = 1


def _leader_epoch_error(requested: int, current: int) -> ErrorCode | None:
    if requested < 0 or requested == current:
        return None
    return ErrorCode.FENCED_LEADER_EPOCH if requested < current else ErrorCode.UNKNOWN_LEADER_EPOCH


def _build(broker, request, version):
    """One pass over the requested partitions: (response topics, bytes, partition keys)."""
    budget = request.max_bytes if version >= 3 else 0x7FFFFFFF
    committed = request.isolation_level == READ_COMMITTED
    total = 0
    keys = []
    topics_out = []
    for fetch_topic in request.topics:
        if version >= 13:
            topic = broker.topics.by_id.get(fetch_topic.topic_id)
            name = topic.name if topic else None
        else:
            name = fetch_topic.topic
            topic = broker.topics.topics.get(name)
        partitions_out = []
        for wanted in fetch_topic.partitions:
            out = _Resp.PartitionData(partition_index=wanted.partition, high_watermark=-1,
                                      last_stable_offset=-1, log_start_offset=-1,
                                      aborted_transactions=[] if committed else None,
                                      preferred_read_replica=-1, records=b"")
            partitions_out.append(out)
            if topic is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            try:
                log = broker.topics.log(name, wanted.partition)
            except BrokerError as exc:
                out.error_code = exc.code
                continue
            keys.append((name, wanted.partition))
            epoch_error = _leader_epoch_error(wanted.current_leader_epoch, log.leader_epoch)
            if epoch_error is not None:
                out.error_code = epoch_error
                continue
            stable = log.last_stable_offset
            out.high_watermark = log.high_watermark
            out.last_stable_offset = stable
            out.log_start_offset = log.log_start_offset
            limit = min(wanted.partition_max_bytes, budget - total)
            try:
                if committed:
                    region, aborted = log.read_committed(wanted.fetch_offset, max(limit, 0),
                                                         min_one_batch=(total == 0))
                    out.aborted_transactions = [
                        _Resp.AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                        for a in aborted]
                else:
                    region = log.read(wanted.fetch_offset, max(limit, 0), log.high_watermark,
                                      min_one_batch=(total == 0))
            except BrokerError as exc:
                out.error_code = exc.code
                continue
            if region is not None:
                out.records = region
                total += len(region)
        topics_out.append(_Resp.FetchableTopicResponse(topic=name if version < 13 else None,
                                                       topic_id=fetch_topic.topic_id if version >= 13 else ZERO_UUID,
                                                       partitions=partitions_out))
    return topics_out, total, keys


def handle(broker, header, request, client_host):
    """The response now, or (when it must wait for data) an awaitable of it."""
    version = header.request_api_version
    if version >= 7 and (request.session_id != 0 or request.session_epoch > 0):
        return _Resp(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND, session_id=0, responses=[])
    deadline = time.monotonic() + max(request.max_wait_ms, 0) / 1000
    response, keys = _answer_if_ready(broker, request, version, deadline)
    return response if response is not None else _long_poll(broker, request, version, keys, deadline)


def _answer_if_ready(broker, request, version, deadline):
    """(response, None) once `min_bytes` are there, the deadline passed or nothing can
    arrive; else (None, the partition keys to wait on)."""
    topics_out, total, keys = _build(broker, request, version)
    if total >= request.min_bytes or deadline <= time.monotonic() or not keys:
        return _Resp(error_code=0, session_id=0, responses=topics_out, throttle_time_ms=0), None
    return None, keys


async def _long_poll(broker, request, version, keys, deadline):
    """Wait for appends to the requested partitions until `min_bytes` or the deadline."""
    while True:
        await broker.wait_for_append(keys, deadline - time.monotonic())
        response, keys = _answer_if_ready(broker, request, version, deadline)
        if response is not None:
            return response
