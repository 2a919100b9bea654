"""DeleteRecords v0–2 (flexible from v2): `kafka-delete-records.sh`, AdminClient.deleteRecords.

- Each partition's log start offset moves up to the requested offset (never back);
  -1 means the high watermark. Whole segments below it are deleted; reads below it are
  then OFFSET_OUT_OF_RANGE. The answer's low_watermark is the new log start offset.
- An offset beyond the high watermark, or below -1, is OFFSET_OUT_OF_RANGE; an unknown
  topic or partition UNKNOWN_TOPIC_OR_PARTITION; an internal topic
  INVALID_TOPIC_EXCEPTION; a topic without `delete` in cleanup.policy
  POLICY_VIOLATION, as Kafka answers; a partition this broker does not lead
  NOT_LEADER_OR_FOLLOWER. Errors are per partition.
- The new log start offsets are checkpointed before the answer, so that a crash does
  not bring deleted records back.
- Authorization (broker.security.acls): DELETE on each topic, else its partitions are
  TOPIC_AUTHORIZATION_FAILED, as Kafka answers.
"""

from __future__ import annotations

import logging

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import DELETE_RECORDS

from broker.errors import BrokerError
from broker.security.acls import DENIED, refused
from broker.replica.topics import INTERNAL_TOPICS

log = logging.getLogger(__name__)
_Resp = DELETE_RECORDS.response
HIGH_WATERMARK = -1


def _delete(broker, topic: str, partition: int, offset: int) -> int:
    if topic in INTERNAL_TOPICS:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"cannot delete records of internal topic {topic}")
    replica = broker.topics.partition(topic, partition)
    replica.check_leader()
    if "delete" not in replica.config.cleanup_policy.split(","):
        raise BrokerError(ErrorCode.POLICY_VIOLATION, f"records of {topic}-{partition} cannot be deleted: "
                                                     f"cleanup.policy is {replica.config.cleanup_policy}")
    if offset == HIGH_WATERMARK:
        offset = replica.high_watermark
    if offset < 0:
        raise BrokerError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is negative")
    replica.delete_records_before(offset)
    return replica.log_start_offset


def handle(broker, header, request, session):
    topics = []
    moved = False
    denied = refused(broker, session, Operation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            out = _Resp.DeleteRecordsPartitionResult(partition_index=part.partition_index,
                                                     low_watermark=-1)
            try:
                if topic.name in denied:
                    raise BrokerError(*DENIED[ResourceType.TOPIC])
                out.low_watermark = _delete(broker, topic.name, part.partition_index, part.offset)
                moved = True
            except BrokerError as exc:
                out.error_code = exc.code
            partitions.append(out)
        topics.append(_Resp.DeleteRecordsTopicResult(name=topic.name, partitions=partitions))
    if moved:
        try:
            broker.topics.write_checkpoints()
        except OSError as exc:  # moved in memory, but not yet safe from a crash: say so
            for topic in topics:
                for out in topic.partitions:
                    if out.error_code == ErrorCode.NONE:
                        out.error_code, out.low_watermark = ErrorCode.KAFKA_STORAGE_ERROR, -1
            log.warning("DeleteRecords: cannot checkpoint log start offsets: %s", exc)
    return _Resp(throttle_time_ms=0, topics=topics)
