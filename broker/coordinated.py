"""The partitions of a coordinator's topic (`__consumer_offsets` for the group
coordinator, `__transaction_state` for the transaction coordinator) that this broker
coordinates: Kafka's coordinators follow the leadership of those partitions.

- The coordinator of a key (a group id, a transactional id) is the leader of partition
  abs(javaHash(key)) % partitions of the topic. On the single node every partition is
  led here and loaded at start. In a cluster a partition is loaded when this broker
  becomes its leader (its keys answer COORDINATOR_LOAD_IN_PROGRESS until the load is
  done) and unloaded when it stops leading (NOT_COORDINATOR from then on).
- The coordinator epoch of a partition is its leader epoch, taken when the load began
  and moved on by each later LeaderAndIsr that keeps this broker leading (the state in
  memory stays valid: a leader's log is never truncated). A coordinator writes only
  while this broker leads the partition at that epoch, so a coordinator deposed and
  elected again reloads and never writes from the state of its old term.
- A coordinator's write is done when it is committed in Kafka's sense: appended as
  leader (acks=all: refused while the ISR is below min.insync.replicas) and passed by
  the high watermark. Failures get the codes Kafka's coordinators answer with: a lost
  leadership or a storage error NOT_COORDINATOR (the client looks for the coordinator
  again); too few replicas or a timeout COORDINATOR_NOT_AVAILABLE (it retries).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from wire.error_codes import ErrorCode

from broker.errors import BrokerError

log = logging.getLogger("sluice.coordinators")

_NOT_COORDINATOR = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
                    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_COORDINATOR)


def coordinator_error(exc: BrokerError) -> BrokerError:
    """A partition's refusal of a coordinator write, as the coordinator answers it."""
    if exc.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return exc
    code = ErrorCode.NOT_COORDINATOR if exc.code in _NOT_COORDINATOR else ErrorCode.COORDINATOR_NOT_AVAILABLE
    return BrokerError(code, str(exc))


class CoordinatedPartitions:
    """Which partitions of `topic` this broker coordinates, and at which epoch.

    `load(partition, epoch)` replays one partition into the coordinator's state (a
    coroutine that yields now and then, so that other requests go on); `unload(index)`
    drops the state of that partition's keys."""

    def __init__(self, topic: str, load: Callable[[object, int], Awaitable[None]],
                 unload: Callable[[int], None]):
        self.topic = topic
        self._load = load
        self._unload = unload
        self._epochs: dict[int, int] = {}              # index -> coordinator epoch, loaded
        self._loading: dict[int, tuple[int, asyncio.Task]] = {}  # index -> (epoch, its load)

    def loaded(self, index: int, epoch: int) -> None:
        """The partition was loaded outside of `elected` (the single node, at start)."""
        self._epochs[index] = epoch

    def epoch(self, index: int) -> int:
        """The coordinator epoch of partition `index`; NOT_COORDINATOR unless it is
        coordinated here, COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        epoch = self._epochs.get(index)
        if epoch is not None:
            return epoch
        if index in self._loading:
            raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              f"{self.topic}-{index} is being loaded")
        raise BrokerError(ErrorCode.NOT_COORDINATOR,
                          f"this broker does not coordinate the keys of {self.topic}-{index}")

    def coordinated(self) -> list[int]:
        """The indexes of the loaded partitions."""
        return sorted(self._epochs)

    def elected(self, partition) -> None:
        """The partition's leadership changed here (a LeaderAndIsr): load it when this
        broker starts leading it, take the new epoch when it goes on leading it, unload it
        when it follows."""
        index = partition.index
        if not partition.is_leader:
            self.resigned(index)
            return
        epoch = partition.leader_epoch
        if index in self._epochs:
            # Led here throughout (a follower term would have unloaded it): the log is
            # the one loaded, so only the epoch moves (the controller bumps it when it
            # shrinks the ISR), as Kafka keeps a group partition it goes on leading.
            self._epochs[index] = epoch
            return
        if index in self._loading and self._loading[index][0] == epoch:
            return
        self.resigned(index)
        task = asyncio.get_running_loop().create_task(self._load_partition(partition, epoch))
        self._loading[index] = (epoch, task)

    async def _load_partition(self, partition, epoch: int) -> None:
        index = partition.index
        started = asyncio.get_running_loop().time()
        try:
            await self._load(partition, epoch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cannot load %s-%d: its keys stay without a coordinator here", self.topic, index)
            self._unload(index)
            return
        finally:
            if self._loading.get(index, (None, None))[1] is asyncio.current_task():
                del self._loading[index]
        if partition.is_leader and partition.leader_epoch == epoch:
            self._epochs[index] = epoch
            log.info("coordinating %s-%d at epoch %d (loaded in %.3f s)", self.topic, index, epoch,
                     asyncio.get_running_loop().time() - started)
        else:
            self._unload(index)

    def resigned(self, index: int) -> None:
        """This broker no longer leads partition `index`: its keys' state goes."""
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading[1].cancel()
        if self._epochs.pop(index, None) is not None or loading is not None:
            self._unload(index)
            log.info("no longer coordinating %s-%d", self.topic, index)

    def check_writable(self, partition, epoch: int) -> None:
        """NOT_COORDINATOR unless this broker leads `partition` at coordinator epoch `epoch`."""
        if not partition.is_leader or partition.leader_epoch != epoch \
                or self._epochs.get(partition.index) != epoch:
            raise BrokerError(ErrorCode.NOT_COORDINATOR,
                              f"this broker no longer coordinates {self.topic}-{partition.index} "
                              f"at epoch {epoch}")

    @staticmethod
    async def committed(partition, end_offset: int, timeout_s: float) -> None:
        """Wait until the high watermark of `partition` reaches `end_offset` (the log end
        after a coordinator's append); BrokerError with the coordinator's code if this
        broker stops leading it, the ISR falls below min.insync.replicas, or `timeout_s`
        passes first."""
        code = await partition.until_replicated(end_offset, timeout_s)
        if code != ErrorCode.NONE:
            raise coordinator_error(BrokerError(code, f"{partition.topic}-{partition.index}: the write "
                                                      f"ending at offset {end_offset} was not "
                                                      f"replicated ({code.name})"))
