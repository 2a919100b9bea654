"""What the console shows, read from the cluster over the Kafka protocol: plain dicts
(the JSON of /api/..., and what the pages render).

- The cluster: Metadata's cluster id, controller and brokers (id, host, port, rack).
- Topics: Metadata's partitions (leader, replicas, ISR; -1 leader: offline) with log
  start and end offsets (ListOffsets EARLIEST and LATEST, asked only of partitions that
  have a leader). A partition is "offline" without a leader and "under-replicated" when
  its ISR is smaller than its replica set, as Kafka's tools count them. A partition being
  reassigned has its adding and removing replicas and the bytes left to copy, as
  `sluice topics describe` finds them (sluice.topics.reassignments_in_progress).
- Recent messages: the last `limit` records below the high watermark of each partition
  (Fetch, READ_UNCOMMITTED, control records left out), newest first; merged over
  partitions, the `limit` newest by timestamp. Keys and values show as UTF-8 text when
  they are printable UTF-8, else as hex, cut to `MAX_SHOWN` characters.
- Groups: ListGroups (state, protocol type) and, per group, DescribeGroups' member count.
"""

from __future__ import annotations

import asyncio

from sluice.topics import NOT_MOVING, existing_topic, reassignments_in_progress
from sluice_client import EARLIEST, LATEST, AsyncClient, TopicInfo
from wire.primitives import ZERO_UUID

__all__ = ["NotFound", "cluster_overview", "groups_overview", "recent_messages", "shown_bytes",
           "topic_detail", "topics_overview"]

MAX_SHOWN = 240  # characters of a key, value or header value on a page
MAX_RECENT = 500  # the largest `limit` of recent messages
_FETCH_BYTES = 1 << 20
_FETCH_ROUNDS = 16  # fetches per partition for its recent messages
_CONCURRENT_PARTITIONS = 8


class NotFound(Exception):
    """A topic or group the cluster does not have (HTTP 404)."""


def shown_bytes(data: bytes | None) -> dict | None:
    """A key, value or header value for people: {"text", "encoding" ("utf-8" or "hex"),
    "size" (bytes), "truncated"}; None stays None."""
    if data is None:
        return None
    data = bytes(data)
    try:
        text = data.decode("utf-8")
        printable = all(c.isprintable() or c in "\t\n\r" for c in text)
    except UnicodeDecodeError:
        printable = False
    if printable:
        return {"text": text[:MAX_SHOWN], "encoding": "utf-8", "size": len(data),
                "truncated": len(text) > MAX_SHOWN}
    limit = MAX_SHOWN // 2
    return {"text": data[:limit].hex(), "encoding": "hex", "size": len(data),
            "truncated": len(data) > limit}


async def cluster_overview(client: AsyncClient) -> dict:
    metadata = await client.metadata()
    partitions = [p for t in metadata.topics.values() if not t.error_code
                  for p in t.partitions.values()]
    return {
        "cluster_id": metadata.cluster_id,
        "controller_id": metadata.controller_id if metadata.controller_id >= 0 else None,
        "brokers": [{"id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack,
                     "controller": b.node_id == metadata.controller_id}
                    for b in sorted(metadata.brokers.values(), key=lambda b: b.node_id)],
        "topic_count": sum(1 for t in metadata.topics.values() if not t.error_code),
        "partition_count": len(partitions),
        **_health(partitions),
    }


async def topics_overview(client: AsyncClient) -> list[dict]:
    metadata = await client.metadata()
    topics = sorted((t for t in metadata.topics.values() if not t.error_code),
                    key=lambda t: t.name)
    return [_topic_summary(t) for t in topics]


async def topic_detail(client: AsyncClient, name: str) -> dict:
    topic = await existing_topic(client, name, NotFound)
    leading = [p.partition for p in topic.partitions.values() if p.leader_id >= 0]
    starts, ends = {}, {}
    if leading:
        first, last = await asyncio.gather(client.consumer.list_offsets(name, leading, EARLIEST),
                                           client.consumer.list_offsets(name, leading, LATEST))
        starts = {p: o.offset for p, o in first.items()}
        ends = {p: o.offset for p, o in last.items()}
    moving = await reassignments_in_progress(client, [topic])
    detail = _topic_summary(topic)
    detail["partitions"] = [{
        "partition": p.partition, "leader": p.leader_id if p.leader_id >= 0 else None,
        "replicas": list(p.replicas), "isr": list(p.isr),
        "offline_replicas": list(p.offline_replicas),
        "log_start_offset": starts.get(p.partition), "log_end_offset": ends.get(p.partition),
        **moving.get((name, p.partition), NOT_MOVING),
        "status": _status(p)}
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition)]
    return detail


async def recent_messages(client: AsyncClient, name: str, limit: int,
                          partition: int | None = None) -> dict:
    """The last `limit` messages of a topic (of one partition, or merged over all)."""
    topic = await existing_topic(client, name, NotFound)
    if partition is not None and partition not in topic.partitions:
        raise NotFound(f"topic {name!r} has no partition {partition}")
    wanted = [partition] if partition is not None else sorted(topic.partitions)
    readable = [p for p in wanted if topic.partitions[p].leader_id >= 0]
    limit = max(1, min(limit, MAX_RECENT))
    gate = asyncio.Semaphore(_CONCURRENT_PARTITIONS)

    async def last_of(p: int) -> list[dict]:
        async with gate:
            return await _last_records(client, name, p, limit)

    found = await asyncio.gather(*(last_of(p) for p in readable))
    merged = sorted((m for ms in found for m in ms),
                    key=lambda m: (m["timestamp"], m["offset"]), reverse=True)
    return {"topic": name, "partition": partition, "limit": limit,
            "unavailable_partitions": [p for p in wanted if p not in readable],
            "messages": merged[:limit]}


async def groups_overview(client: AsyncClient) -> list[dict]:
    listed = sorted(await client.admin.list_groups(), key=lambda g: g.group_id)
    described = await client.admin.describe_groups([g.group_id for g in listed]) if listed else {}
    rows = []
    for g in listed:
        description = described.get(g.group_id)
        state = description.state if description else g.state
        rows.append({"group": g.group_id, "state": state or None,
                     "protocol_type": g.protocol_type or None,
                     "members": len(description.members) if description else None,
                     "coordinator": g.coordinator_id})
    return rows


# -- helpers ----------------------------------------------------------------------------

def _status(partition) -> str:
    if partition.leader_id < 0:
        return "offline"
    if len(partition.isr) < len(partition.replicas):
        return "under-replicated"
    return "ok"


def _health(partitions) -> dict:
    """How many of `partitions` are under-replicated and offline."""
    statuses = [_status(p) for p in partitions]
    return {"under_replicated": statuses.count("under-replicated"), "offline": statuses.count("offline")}


def _topic_summary(topic: TopicInfo) -> dict:
    partitions = list(topic.partitions.values())
    return {"name": topic.name, "internal": topic.is_internal,
            "topic_id": None if topic.topic_id == ZERO_UUID else str(topic.topic_id),
            "partition_count": len(partitions),
            "replication_factor": len(partitions[0].replicas) if partitions else None,
            **_health(partitions)}


async def _last_records(client: AsyncClient, topic: str, partition: int, limit: int) -> list[dict]:
    """The last `limit` records below the high watermark, newest first."""
    first = (await client.consumer.list_offsets(topic, [partition], EARLIEST))[partition].offset
    end = (await client.consumer.list_offsets(topic, [partition], LATEST))[partition].offset
    offset = max(first, end - limit)
    shown: list[dict] = []  # only what is shown is kept, never whole large values
    for _ in range(_FETCH_ROUNDS):
        if offset >= end:
            break
        fetched = await client.consumer.fetch_records(topic, partition, offset, max_wait_ms=0,
                                             max_bytes=_FETCH_BYTES)
        shown += [{"partition": partition, "offset": r.offset, "timestamp": r.timestamp,
                   "key": shown_bytes(r.key), "value": shown_bytes(r.value),
                   "headers": [{"key": k, "value": shown_bytes(v)} for k, v in r.headers]}
                  for r in fetched.records if r.offset < end]
        del shown[:-limit]
        if fetched.next_offset <= offset:
            break
        offset = fetched.next_offset
    return shown[::-1]
