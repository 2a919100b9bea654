"""OffsetCommit v0–9 and OffsetFetch v0–9.

- OffsetCommit v1+ carries generation and member id (checked by the coordinator; -1
  and no member id for a group without members); v7+ the instance id; v6+ the
  committed leader epoch. A metadata string longer than `offset.metadata.max.bytes`
  gets OFFSET_METADATA_TOO_LARGE, an unknown partition UNKNOWN_TOPIC_OR_PARTITION.
- OffsetFetch v0–7 asks for one group, v8+ for several; null topics (v2+) means every
  partition the group has committed. A partition without a commit answers offset -1
  and empty metadata. v7+ `require_stable` needs no waiting here yet: no offsets are
  pending in transactions.
"""

from __future__ import annotations

import time

from wire.error_codes import ErrorCode
from wire.messages import OFFSET_COMMIT, OFFSET_FETCH

from broker.groups.coordinator import GroupError
from broker.groups.offsets_log import CommittedOffset


async def offset_commit(broker, header, request, client_host):
    Resp = OFFSET_COMMIT.response
    now = int(time.time() * 1000)
    offsets = {}
    for topic in request.topics:
        for p in topic.partitions:
            timestamp = p.commit_timestamp if p.commit_timestamp >= 0 else now
            offsets[(topic.name, p.partition_index)] = CommittedOffset(
                p.committed_offset, p.committed_leader_epoch, p.committed_metadata or "", timestamp)
    try:
        codes = broker.groups.commit(request.group_id, request.generation_id_or_member_epoch,
                                     request.member_id, request.group_instance_id, offsets)
    except GroupError as exc:
        codes = {tp: exc.code for tp in offsets}
    return Resp(topics=[Resp.OffsetCommitResponseTopic(name=topic.name, partitions=[
        Resp.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                           error_code=codes[(topic.name, p.partition_index)])
        for p in topic.partitions]) for topic in request.topics])


def _fetch_one(broker, group_id: str, topics) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
    committed = broker.groups.committed(group_id)
    if topics is None:
        by_topic: dict[str, list] = {}
        for (topic, partition), value in sorted(committed.items()):
            by_topic.setdefault(topic, []).append((partition, value))
        return list(by_topic.items())
    return [(t.name, [(p, committed.get((t.name, p))) for p in t.partition_indexes]) for t in topics]


async def offset_fetch(broker, header, request, client_host):
    Resp = OFFSET_FETCH.response
    if header.request_api_version >= 8:
        groups = []
        for group in request.groups:
            found = _fetch_one(broker, group.group_id, group.topics)
            groups.append(Resp.OffsetFetchResponseGroup(group_id=group.group_id, error_code=0, topics=[
                Resp.OffsetFetchResponseTopics(name=topic, partitions=[
                    Resp.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=c.offset if c else -1,
                        committed_leader_epoch=c.leader_epoch if c else -1,
                        metadata=c.metadata if c else "", error_code=0)
                    for p, c in partitions]) for topic, partitions in found]))
        return Resp(groups=groups)
    if not request.group_id:
        return Resp(error_code=ErrorCode.INVALID_GROUP_ID, topics=[])
    found = _fetch_one(broker, request.group_id, request.topics)
    return Resp(error_code=0, topics=[Resp.OffsetFetchResponseTopic(name=topic, partitions=[
        Resp.OffsetFetchResponsePartition(
            partition_index=p, committed_offset=c.offset if c else -1,
            committed_leader_epoch=c.leader_epoch if c else -1,
            metadata=c.metadata if c else "", error_code=0)
        for p, c in partitions]) for topic, partitions in found])
