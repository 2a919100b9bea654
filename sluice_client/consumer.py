"""The consumer role of the client: fetches from partition leaders (and the batches a
consumer sees in them), offsets by time, and a group's committed offsets.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING, Iterable, Mapping

from sluice_client.connection import BrokerConnection
from sluice_client.errors import UnsupportedVersion
from sluice_client.model import (MAX_TIMESTAMP, READ_COMMITTED, READ_UNCOMMITTED, AbortedTransaction,
                                 CommittedOffset, FetchResult, FetchedRecords, OffsetAndTimestamp,
                                 PartitionInfo)
from sluice_client.responses import entry_for
from wire.errors import check
from wire.messages import FETCH, LIST_OFFSETS, OFFSET_COMMIT, OFFSET_FETCH
from wire.primitives import ZERO_UUID
from wire.records import CONTROL_ABORT, decode_batch, decode_control_record, iter_batches

if TYPE_CHECKING:
    from sluice_client.client import AsyncClient

__all__ = ["Consumer", "DEFAULT_MAX_DECOMPRESSED_BYTES", "visible_batches"]

DEFAULT_MAX_DECOMPRESSED_BYTES = 100 * 1024 * 1024

_FIRST_GROUPS_OFFSET_FETCH = 8
_FIRST_TOPIC_ID_FETCH = 13
# The oldest ListOffsets version that understands each special timestamp.
_LIST_OFFSETS_MIN_VERSION = {MAX_TIMESTAMP: 7}
_LIST_OFFSETS_MIN_VERSION_READ_COMMITTED = 2


class Consumer:
    """Fetch and offsets over a client's connections and metadata (`client.consumer`)."""

    def __init__(self, client: AsyncClient):
        self.client = client

    # -- fetch -------------------------------------------------------------------------
    async def fetch(self, topic: str, partition: int, offset: int, *, max_wait_ms: int = 500,
                    min_bytes: int = 1, max_bytes: int = 1024 * 1024,
                    isolation_level: int = READ_UNCOMMITTED) -> FetchResult:
        """Fetch from one partition's leader, without a fetch session.

        The broker waits up to `max_wait_ms` for `min_bytes` to accumulate, and returns
        at most `max_bytes` (though always a first whole batch, however large). Record
        bytes come back undecoded; see `fetch_records`. A long poll holds up the requests
        queued behind it on the same connection, so consumers and producers that must
        not wait for each other should use separate clients.
        """
        context = f"fetch from {topic}-{partition} at offset {offset}"

        async def attempt() -> FetchResult:
            connection, topic_info, info = await self.client.leader_connection(topic, partition)
            topic_id = topic_info.topic_id
            # Topic ids replace names from Fetch v13; without an id, stay below it.
            version = connection.version(
                FETCH, None if topic_id != ZERO_UUID else _FIRST_TOPIC_ID_FETCH - 1)
            body = FETCH.request(
                max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                isolation_level=isolation_level, session_id=0, session_epoch=-1,
                topics=[FETCH.request.FetchTopic(topic=topic, topic_id=topic_id, partitions=[
                    FETCH.request.FetchPartition(
                        partition=partition, current_leader_epoch=info.leader_epoch,
                        fetch_offset=offset, partition_max_bytes=max_bytes)])])
            response = await connection.request(
                FETCH, version, body, timeout=self.client.request_timeout + max_wait_ms / 1000)
            check(response.error_code, context)
            if version >= _FIRST_TOPIC_ID_FETCH:
                answer = entry_for(response.responses, "topic_id", topic_id, context)
            else:
                answer = entry_for(response.responses, "topic", topic, context)
            data = entry_for(answer.partitions, "partition_index", partition, context)
            check(data.error_code, context)
            aborted = tuple(AbortedTransaction(a.producer_id, a.first_offset)
                            for a in data.aborted_transactions or ())
            records = memoryview(data.records if data.records is not None else b"")
            return FetchResult(topic, partition, offset, data.high_watermark,
                               data.last_stable_offset, data.log_start_offset, aborted,
                               data.preferred_read_replica, records)

        return await self.client.retrying(attempt, lambda: self.client.forget_topic(topic))

    async def fetch_records(self, topic: str, partition: int, offset: int, *,
                            max_wait_ms: int = 500, min_bytes: int = 1,
                            max_bytes: int = 1024 * 1024,
                            isolation_level: int = READ_UNCOMMITTED,
                            max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
                            ) -> FetchedRecords:
        """`fetch`, then decode: records at or after `offset`, without control records
        and, under READ_COMMITTED, without those of aborted transactions."""
        result = await self.fetch(topic, partition, offset, max_wait_ms=max_wait_ms,
                                  min_bytes=min_bytes, max_bytes=max_bytes,
                                  isolation_level=isolation_level)
        batches, next_offset = visible_batches(result, isolation_level, max_decompressed_bytes)
        records = [r for _, batch in batches for r in decode_batch(batch, max_decompressed_bytes)
                   if r.offset >= offset]
        return FetchedRecords(result, records, next_offset)

    # -- list offsets --------------------------------------------------------------------
    async def list_offsets(self, topic: str, partitions: Iterable[int], timestamp: int, *,
                           isolation_level: int = READ_UNCOMMITTED) -> dict[int, OffsetAndTimestamp]:
        """The offset for `timestamp` in each partition: EARLIEST (-2), LATEST (-1),
        MAX_TIMESTAMP (-3) or a time in ms (the first offset at or after it)."""
        wanted = list(partitions)
        context = f"list offsets of {topic} at {timestamp}"

        async def attempt() -> dict[int, OffsetAndTimestamp]:
            by_leader: dict[int, list[PartitionInfo]] = collections.defaultdict(list)
            for partition in wanted:
                _, info = await self.client.partition_info(topic, partition)
                by_leader[info.leader_id].append(info)
            answers = await asyncio.gather(*(self._list_offsets_at(node_id, topic, infos, timestamp,
                                                                   isolation_level, context)
                                             for node_id, infos in by_leader.items()))
            return {p: offset for answer in answers for p, offset in answer.items()}

        return await self.client.retrying(attempt, lambda: self.client.forget_topic(topic))

    async def _list_offsets_at(self, node_id: int, topic: str, infos: list[PartitionInfo],
                               timestamp: int, isolation_level: int,
                               context: str) -> dict[int, OffsetAndTimestamp]:
        connection = await self.client.node_connection(node_id)
        version = connection.version(LIST_OFFSETS)
        needed = _LIST_OFFSETS_MIN_VERSION.get(timestamp, 0)
        if isolation_level == READ_COMMITTED:
            needed = max(needed, _LIST_OFFSETS_MIN_VERSION_READ_COMMITTED)
        if version < needed:
            raise UnsupportedVersion(f"{context}: needs ListOffsets v{needed}, "
                                     f"{connection.address} speaks v{version}")
        body = LIST_OFFSETS.request(
            replica_id=-1, isolation_level=isolation_level,
            timeout_ms=int(self.client.request_timeout * 1000),
            topics=[LIST_OFFSETS.request.ListOffsetsTopic(name=topic, partitions=[
                LIST_OFFSETS.request.ListOffsetsPartition(
                    partition_index=info.partition, current_leader_epoch=info.leader_epoch,
                    timestamp=timestamp) for info in infos])])
        response = await connection.request(LIST_OFFSETS, version, body)
        answer = entry_for(response.topics, "name", topic, context)
        offsets = {}
        for info in infos:
            data = entry_for(answer.partitions, "partition_index", info.partition, context)
            check(data.error_code, f"{context}, partition {info.partition}")
            offsets[info.partition] = OffsetAndTimestamp(data.offset, data.timestamp,
                                                         data.leader_epoch)
        return offsets

    async def commit_offsets(self, group: str,
                             offsets: Mapping[tuple[str, int], int | tuple[int, str | None]], *,
                             generation_id: int = -1, member_id: str = "") -> None:
        """Commit `{(topic, partition): offset or (offset, metadata)}` for `group`.

        The defaults commit outside any group membership, as a standalone consumer does.
        """
        by_topic: dict[str, list] = collections.defaultdict(list)
        for (topic, partition), value in offsets.items():
            offset, metadata = value if isinstance(value, tuple) else (value, "")
            by_topic[topic].append(OFFSET_COMMIT.request.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata))
        body = OFFSET_COMMIT.request(
            group_id=group, generation_id_or_member_epoch=generation_id, member_id=member_id,
            topics=[OFFSET_COMMIT.request.OffsetCommitRequestTopic(name=name, partitions=parts)
                    for name, parts in by_topic.items()])

        async def send(connection: BrokerConnection) -> None:
            response = await connection.request(OFFSET_COMMIT, connection.version(OFFSET_COMMIT), body)
            for answer in response.topics:
                for data in answer.partitions:
                    check(data.error_code, f"commit offsets of group {group!r} for "
                                           f"{answer.name}-{data.partition_index}")

        await self.client.with_coordinator(group, send)

    async def fetch_offsets(self, group: str, partitions: Iterable[tuple[str, int]] | None = None,
                            ) -> dict[tuple[str, int], CommittedOffset]:
        """The offsets `group` committed for `partitions` (all it has when None);
        offset -1 where it committed nothing."""
        by_topic: dict[str, list[int]] | None = None
        if partitions is not None:
            by_topic = collections.defaultdict(list)
            for topic, partition in partitions:
                by_topic[topic].append(partition)
        context = f"fetch offsets of group {group!r}"

        async def send(connection: BrokerConnection) -> dict[tuple[str, int], CommittedOffset]:
            version = connection.version(OFFSET_FETCH)
            if version >= _FIRST_GROUPS_OFFSET_FETCH:
                topics = None if by_topic is None else [
                    OFFSET_FETCH.request.OffsetFetchRequestTopics(name=name, partition_indexes=parts)
                    for name, parts in by_topic.items()]
                body = OFFSET_FETCH.request(groups=[OFFSET_FETCH.request.OffsetFetchRequestGroup(
                    group_id=group, topics=topics)])
            else:
                topics = None if by_topic is None else [
                    OFFSET_FETCH.request.OffsetFetchRequestTopic(name=name, partition_indexes=parts)
                    for name, parts in by_topic.items()]
                body = OFFSET_FETCH.request(group_id=group, topics=topics)
            response = await connection.request(OFFSET_FETCH, version, body)
            if version >= _FIRST_GROUPS_OFFSET_FETCH:
                response = entry_for(response.groups, "group_id", group, context)
            check(response.error_code, context)
            committed = {}
            for answer in response.topics:
                for data in answer.partitions:
                    check(data.error_code, f"{context} for {answer.name}-{data.partition_index}")
                    committed[(answer.name, data.partition_index)] = CommittedOffset(
                        data.committed_offset, data.metadata, data.committed_leader_epoch)
            return committed

        return await self.client.with_coordinator(group, send)


def visible_batches(result: FetchResult, isolation_level: int,
                    max_decompressed_bytes: int) -> tuple[list, int]:
    """The data batches a consumer sees in `result`, as (header, batch view) pairs, and
    the offset to fetch next.

    Control batches are never returned, nor batches wholly before the fetch offset (the
    first one returned may still start before it: brokers return whole batches). Under
    READ_COMMITTED, data batches of a producer are skipped from the first offset of each
    aborted transaction up to its ABORT marker.
    """
    batches = []
    next_offset = result.fetch_offset
    pending_aborts = collections.deque(sorted(result.aborted_transactions,
                                              key=lambda a: a.first_offset))
    aborting: set[int] = set()
    read_committed = isolation_level == READ_COMMITTED
    for header, batch in iter_batches(result.records):
        next_offset = max(next_offset, header.last_offset + 1)
        if read_committed:
            while pending_aborts and pending_aborts[0].first_offset <= header.last_offset:
                aborting.add(pending_aborts.popleft().producer_id)
        if header.is_control:
            if read_committed and header.producer_id in aborting:
                markers = decode_batch(batch, max_decompressed_bytes)
                if any(decode_control_record(m).type == CONTROL_ABORT for m in markers):
                    aborting.discard(header.producer_id)
            continue
        if header.last_offset < result.fetch_offset:
            continue
        if read_committed and header.is_transactional and header.producer_id in aborting:
            continue
        batches.append((header, batch))
    return batches, next_offset
