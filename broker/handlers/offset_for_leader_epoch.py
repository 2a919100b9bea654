"""OffsetForLeaderEpoch v0–4 (flexible from v4): where a leader epoch's records end.

Consumers ask it after a leader epoch change to check that their position was not lost
to truncation (KIP-320); followers ask it to find where their log diverges.
- Per partition: the largest epoch at or below the one asked and the end offset of
  that epoch (the log end offset for the latest epoch), by the rules of
  `broker.storage.leader_epochs`; -1/-1 for an epoch above all known ones.
- v2+ `current_leader_epoch` is checked as Fetch checks it (FENCED_LEADER_EPOCH for an
  older one, UNKNOWN_LEADER_EPOCH for a newer one); an unknown topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION. Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere),
  whoever asks: v3+ `replica_id` (-1 consumers, -2 debugging, a broker id for
  followers) changes nothing.
- Authorization (broker.security.acls), as Kafka's KafkaApis: CLUSTER_ACTION on the
  cluster (followers), else DESCRIBE on each topic (consumers, KIP-320);
  TOPIC_AUTHORIZATION_FAILED for the partitions of the others.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import OFFSET_FOR_LEADER_EPOCH

from broker.errors import BrokerError
from broker.security.acls import permitted, refused

_Resp = OFFSET_FOR_LEADER_EPOCH.response


def handle(broker, header, request, session):
    denied = frozenset()
    if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        denied = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, (t.topic for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            out = _Resp.EpochEndOffset(partition=wanted.partition, leader_epoch=-1, end_offset=-1)
            partitions.append(out)
            if topic.topic in denied:
                out.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            try:
                partition = broker.topics.partition(topic.topic, wanted.partition)
                partition.check_leader_epoch(wanted.current_leader_epoch)
                partition.check_leader()
            except BrokerError as exc:
                out.error_code = exc.code
                continue
            out.leader_epoch, out.end_offset = partition.end_offset_for_epoch(wanted.leader_epoch)
        topics.append(_Resp.OffsetForLeaderTopicResult(topic=topic.topic, partitions=partitions))
    return _Resp(throttle_time_ms=0, topics=topics)
