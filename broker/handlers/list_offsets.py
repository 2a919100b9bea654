"""ListOffsets v1–11 (v0's multi-offset form is not served, nor defined by Kafka 4).

- timestamp -2: the log start offset; -1: the high watermark, or the last stable
  offset for read_committed (v2+); -3 (v7+): the record with the largest timestamp;
  -4 (v8+, earliest local) answers as -2, as every segment is local; -5 (v9+, latest
  tiered) and -6 (v11+, earliest pending upload, KIP-1023) answer offset -1, timestamp
  -1, as Kafka's for a topic without tiered storage.
- v10+'s `timeout_ms` bounds Kafka's wait on remote storage (KIP-1075): nothing to wait
  for here, every offset being local.
- timestamp >= 0: the first record whose timestamp is at or after it, found through
  the time index; offset -1 and timestamp -1 when there is none (or, for
  read_committed, when it lies at or beyond the last stable offset, as in Kafka).
- v4+ checks `current_leader_epoch` and returns the leader epoch, as Kafka does: the
  current one for -1 (latest), else the epoch the returned offset was written under
  (from the leader epoch history), -1 when no offset is found.
- Only the leader answers: NOT_LEADER_OR_FOLLOWER elsewhere.
- Authorization (broker.security.acls): DESCRIBE on each topic, else its partitions are
  TOPIC_AUTHORIZATION_FAILED, as Kafka answers.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import LIST_OFFSETS

from broker.errors import BrokerError
from broker.handlers.fetch import READ_COMMITTED
from broker.security.acls import DENIED, refused

_Resp = LIST_OFFSETS.response
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -2, -1, -3, -4, -5, -6


def _lookup(partition, timestamp: int, committed: bool) -> tuple[int, int]:
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return partition.log_start_offset, -1
    if timestamp == LATEST:
        return (partition.last_stable_offset if committed else partition.high_watermark), -1
    if timestamp == MAX_TIMESTAMP:
        found = partition.max_timestamp()
        return (found[1], found[0]) if found else (-1, -1)
    if timestamp in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return -1, -1
    if timestamp < 0:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"timestamp {timestamp} has no meaning")
    found = partition.offset_for_timestamp(timestamp)
    if found is None or (committed and found[0] >= partition.last_stable_offset):
        return -1, -1
    return found[0], found[1]


def handle(broker, header, request, session):
    committed = request.isolation_level == READ_COMMITTED
    denied = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            out = _Resp.ListOffsetsPartitionResponse(partition_index=wanted.partition_index,
                                                     timestamp=-1, offset=-1, leader_epoch=-1)
            partitions.append(out)
            try:
                if topic.name in denied:
                    raise BrokerError(*DENIED[ResourceType.TOPIC])
                partition = broker.topics.partition(topic.name, wanted.partition_index)
                partition.check_leader_epoch(wanted.current_leader_epoch)
                partition.check_leader()
                out.offset, out.timestamp = _lookup(partition, wanted.timestamp, committed)
                if wanted.timestamp == LATEST:
                    out.leader_epoch = partition.leader_epoch
                elif out.offset >= 0:
                    out.leader_epoch = partition.epoch_at(out.offset)
            except BrokerError as exc:
                out.error_code = exc.code
        topics.append(_Resp.ListOffsetsTopicResponse(name=topic.name, partitions=partitions))
    return _Resp(topics=topics, throttle_time_ms=0)
