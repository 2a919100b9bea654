"""OffsetCommit v0–9, OffsetFetch v0–9 and OffsetDelete v0.

- OffsetCommit v1+ carries generation and member id (checked by the coordinator; -1
  and no member id for a group without members; for a KIP-848 consumer group the member
  epoch: STALE_MEMBER_EPOCH ahead of the member's, and behind it for each partition the
  member has not held since that epoch, KIP-1251); v7+ the instance id; v6+ the
  committed leader epoch. A metadata string longer than `offset.metadata.max.bytes`
  gets OFFSET_METADATA_TOO_LARGE, an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
- OffsetFetch v9 carries the member id and epoch of a consumer group (KIP-848) member:
  an unknown member is UNKNOWN_MEMBER_ID, another epoch STALE_MEMBER_EPOCH (the group's
  error); without them (the admin's fetch) and for classic groups nothing is checked.
- OffsetFetch v0–7 asks for one group, v8+ for several; null topics (v2+) means every
  partition the group has committed. A partition without a commit answers offset -1
  and empty metadata. v7+ `require_stable`: a partition with transactional offsets
  still pending (committed in a transaction that has not ended) answers
  UNSTABLE_OFFSET_COMMIT with offset -1, so the client retries; without it, the last
  offsets committed outside or by committed transactions are returned. As in Kafka,
  the error is the partition's only: a group-level UNSTABLE_OFFSET_COMMIT (v8+) would
  make the Java consumer and kafka-python give up instead of retrying.
- OffsetDelete (kafka-consumer-groups --delete-offsets): a whole-request error
  (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, INVALID_GROUP_ID) is the top-level error code
  with no topics; otherwise an error per partition (see the coordinator's rules).
- Commits and deletions are answered once committed (replicated). A group coordinated
  by another broker is NOT_COORDINATOR, one whose partition loads
  COORDINATOR_LOAD_IN_PROGRESS: every partition's error for OffsetCommit (and for
  OffsetFetch v0-1, which has no other), the top-level error of OffsetFetch v2-7 and
  OffsetDelete, each group's own from OffsetFetch v8.
- Authorization (broker.security.acls), as Kafka's KafkaApis: OffsetCommit READ on the
  group (else GROUP_AUTHORIZATION_FAILED for every partition) and READ on each topic
  (TOPIC_AUTHORIZATION_FAILED for its partitions, the others committed); OffsetFetch
  DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED where the group's error goes) and
  DESCRIBE on each topic: a topic asked for by name answers TOPIC_AUTHORIZATION_FAILED
  with offset -1, and "all topics" leaves such topics out; OffsetDelete DELETE on the
  group (the top-level error) and READ on each topic (TOPIC_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH

from broker.errors import BrokerError
from broker.groups.offsets_log import CommittedOffset
from broker.security.acls import permitted, refused, require


async def offset_commit(broker, header, request, session):
    Resp = OFFSET_COMMIT.response
    now = broker.clock.wall_ms()
    offsets, codes = {}, {}
    group_allowed = permitted(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
    denied = refused(broker, session, Operation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    for topic in request.topics:
        for p in topic.partitions:
            if not group_allowed:
                codes[(topic.name, p.partition_index)] = ErrorCode.GROUP_AUTHORIZATION_FAILED
                continue
            if topic.name in denied:
                codes[(topic.name, p.partition_index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                continue
            timestamp = p.commit_timestamp if p.commit_timestamp >= 0 else now
            offsets[(topic.name, p.partition_index)] = CommittedOffset(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", timestamp)
    if offsets or not codes:  # as Kafka: a request left with nothing to commit is answered at once
        try:
            codes.update(await broker.groups.offsets.commit(
                request.group_id, request.generation_id_or_member_epoch, request.member_id,
                request.group_instance_id, offsets))
        except BrokerError as exc:
            codes.update({tp: exc.code for tp in offsets})
    return Resp(topics=[Resp.OffsetCommitResponseTopic(name=topic.name, partitions=[
        Resp.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                           error_code=codes[(topic.name, p.partition_index)])
        for p in topic.partitions]) for topic in request.topics])


_UNSTABLE = object()  # a partition whose offset awaits the end of a transaction
_DENIED = object()  # a partition of a topic the principal may not describe


def _fetch_one(broker, session, group_id: str, topics, require_stable: bool, member_id: str | None = None,
               member_epoch: int = -1) -> list[tuple[str, list]]:
    """(topic, [(partition, CommittedOffset | None | _UNSTABLE | _DENIED)]) per topic."""
    require(broker, session, Operation.DESCRIBE, ResourceType.GROUP, group_id)
    committed = broker.groups.offsets.committed(group_id, member_id, member_epoch)
    unstable = broker.groups.offsets.pending_partitions(group_id) if require_stable else set()

    def value(tp):
        return _UNSTABLE if tp in unstable else committed.get(tp)

    if topics is None:
        by_topic: dict[str, list] = {}
        for topic, partition in sorted(set(committed) | unstable):
            by_topic.setdefault(topic, []).append((partition, value((topic, partition))))
        hidden = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, by_topic)
        return [(topic, partitions) for topic, partitions in by_topic.items() if topic not in hidden]
    denied = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
    return [(t.name, [(p, _DENIED if t.name in denied else value((t.name, p))) for p in t.partition_indexes])
            for t in topics]


def _fields(c) -> dict:
    if c is _UNSTABLE:
        return dict(committed_offset=-1, committed_leader_epoch=-1, metadata="",
                    error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT)
    if c is _DENIED:
        return dict(committed_offset=-1, committed_leader_epoch=-1, metadata="",
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return dict(committed_offset=c.offset if c else -1, committed_leader_epoch=c.leader_epoch if c else -1,
                metadata=c.metadata if c else "", error_code=0)


def offset_fetch(broker, header, request, session):
    Resp = OFFSET_FETCH.response
    require_stable = header.request_api_version >= 7 and request.require_stable
    if header.request_api_version >= 8:
        groups = []
        for group in request.groups:
            try:
                found = _fetch_one(broker, session, group.group_id, group.topics, require_stable,
                                   group.member_id, group.member_epoch)
            except BrokerError as exc:
                groups.append(Resp.OffsetFetchResponseGroup(group_id=group.group_id, error_code=exc.code,
                                                            topics=[]))
                continue
            groups.append(Resp.OffsetFetchResponseGroup(group_id=group.group_id, error_code=0, topics=[
                Resp.OffsetFetchResponseTopics(name=topic, partitions=[
                    Resp.OffsetFetchResponsePartitions(partition_index=p, **_fields(c))
                    for p, c in partitions]) for topic, partitions in found]))
        return Resp(groups=groups)
    if not request.group_id:
        return Resp(error_code=ErrorCode.INVALID_GROUP_ID, topics=[])
    try:
        found = _fetch_one(broker, session, request.group_id, request.topics, require_stable)
    except BrokerError as exc:
        if header.request_api_version >= 2:
            return Resp(error_code=exc.code, topics=[])
        return Resp(topics=[Resp.OffsetFetchResponseTopic(name=t.name, partitions=[
            Resp.OffsetFetchResponsePartition(partition_index=p, committed_offset=-1, metadata="",
                                              error_code=exc.code)
            for p in t.partition_indexes]) for t in request.topics or ()])
    return Resp(error_code=0, topics=[Resp.OffsetFetchResponseTopic(name=topic, partitions=[
        Resp.OffsetFetchResponsePartition(partition_index=p, **_fields(c))
        for p, c in partitions]) for topic, partitions in found])


async def offset_delete(broker, header, request, session):
    Resp = OFFSET_DELETE.response
    if not permitted(broker, session, Operation.DELETE, ResourceType.GROUP, request.group_id):
        return Resp(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, topics=[])
    denied = refused(broker, session, Operation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    codes = {(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED
             for t in request.topics if t.name in denied for p in t.partitions}
    partitions = [(t.name, p.partition_index) for t in request.topics if t.name not in denied for p in t.partitions]
    if partitions or not codes:
        try:
            codes.update(await broker.groups.offsets.delete(request.group_id, partitions))
        except BrokerError as exc:
            return Resp(error_code=exc.code, topics=[])
    return Resp(error_code=0, topics=[Resp.OffsetDeleteResponseTopic(name=topic.name, partitions=[
        Resp.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                           error_code=codes[(topic.name, p.partition_index)])
        for p in topic.partitions]) for topic in request.topics])
