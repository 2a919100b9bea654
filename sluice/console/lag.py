"""Consumer group lag over time: what the console's lag charts draw.

A group's lag on a partition is its log end offset (the high watermark, ListOffsets
LATEST) less the group's committed offset, as Kafka's kafka-consumer-groups.sh reports
it; partitions the group has committed nothing for have no lag. `LagHistory` keeps the
samples, bounded: at most `max_samples` per group (the oldest go first) and at most
`max_groups` groups. `LagSampler` fills it every `interval` seconds from ListGroups,
OffsetFetch and ListOffsets; a failed round is remembered (shown beside the chart)
and the next round tries again.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from dataclasses import dataclass

from sluice_client import LATEST, AsyncClient, ClientError
from wire.errors import KafkaError

from sluice.common import CommandError
from sluice.groups import committed_offsets, offsets_at, partitions_of

__all__ = ["LagHistory", "LagSample", "LagSampler"]

log = logging.getLogger("sluice.console")

# Groups whose offsets are read at the same time in one sampling round.
_CONCURRENT_GROUPS = 8


@dataclass(frozen=True)
class LagSample:
    at_ms: int
    lags: dict[tuple[str, int], int]  # (topic, partition) -> lag

    @property
    def total(self) -> int:
        return sum(self.lags.values())

    def to_json(self) -> dict:
        return {"t": self.at_ms, "total": self.total,
                "partitions": {f"{t}-{p}": lag for (t, p), lag in sorted(self.lags.items())}}


class LagHistory:
    """The last `max_samples` lag samples of at most `max_groups` groups."""

    def __init__(self, max_samples: int = 360, max_groups: int = 1000):
        self.max_samples = max_samples
        self.max_groups = max_groups
        self._groups: dict[str, collections.deque[LagSample]] = {}

    def record(self, group: str, sample: LagSample) -> None:
        ring = self._groups.get(group)
        if ring is None:
            if len(self._groups) >= self.max_groups:
                return
            ring = self._groups[group] = collections.deque(maxlen=self.max_samples)
        ring.append(sample)

    def keep_only(self, groups) -> None:
        """Forget groups that no longer exist."""
        for group in set(self._groups) - set(groups):
            del self._groups[group]

    def samples(self, group: str) -> list[LagSample]:
        return list(self._groups.get(group, ()))


class LagSampler:
    """Samples every group's lag into a `LagHistory` every `interval` seconds."""

    def __init__(self, client: AsyncClient, history: LagHistory, interval: float):
        self.client = client
        self.history = history
        self.interval = interval
        self.last_error: str | None = None  # of the last round, None when it succeeded
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.sample_once()
                self.last_error = None
            except (KafkaError, ClientError, CommandError, OSError, TimeoutError) as exc:
                self.last_error = str(exc) or type(exc).__name__
                log.warning("lag sampling failed: %s", self.last_error)
            except Exception:  # a bug: logged, and sampling goes on
                self.last_error = "unexpected error; see the console's log"
                log.exception("lag sampling failed")
            await asyncio.sleep(max(0.0, started + self.interval - loop.time()))

    async def sample_once(self) -> None:
        """One round over every group; a group that fails (one not authorized, say) does
        not keep the others from being sampled, and the first failure is raised after."""
        groups = [g.group_id for g in await self.client.admin.list_groups()]
        self.history.keep_only(groups)
        limit = asyncio.Semaphore(_CONCURRENT_GROUPS)

        async def sample(group: str) -> None:
            async with limit:
                lags = await group_lags(self.client, group)
            if lags:
                self.history.record(group, LagSample(int(time.time() * 1000), lags))

        outcomes = await asyncio.gather(*(sample(g) for g in groups[:self.history.max_groups]),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome


async def group_lags(client: AsyncClient, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): lag} of the partitions `group` has committed offsets for in
    topics that still exist."""
    committed = await committed_offsets(client, group)
    if not committed:
        return {}
    keys = sorted(committed)
    existing = await partitions_of(client, sorted({t for t, _ in keys}))
    ends = await offsets_at(client, keys, LATEST, existing)
    return {key: max(0, ends[key] - committed[key]) for key in keys if key in ends}
