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
- After a stall of the event loop (broker.clock.StallWatch) or a lost ZooKeeper session
  this broker may have been deposed without being told yet: the controller moves the
  leaderships of a broker whose session expired. Its coordinated and loading partitions
  are then suspended (COORDINATOR_LOAD_IN_PROGRESS, no writes) until ZooKeeper's state
  of each says whether it still leads it at its epoch (coordination resumes, the state in
  memory kept) or not (the partition is resigned at once, before the controller's
  LeaderAndIsr). The first request or upkeep after a stall notices it, before it acts.
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

from broker.clock import StallWatch
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
                 unload: Callable[[int], None], stalls: StallWatch):
        self.topic = topic
        self._load = load
        self._unload = unload
        self._stalls = stalls
        self._epochs: dict[int, int] = {}              # index -> coordinator epoch, loaded
        self._loading: dict[int, tuple[int, asyncio.Task]] = {}  # index -> (epoch, its load)
        self._suspended: set[int] = set()  # loaded or loading, awaiting `confirm`

    def loaded(self, index: int, epoch: int) -> None:
        """The partition was loaded outside of `elected` (the single node, at start)."""
        self._epochs[index] = epoch

    def epoch(self, index: int) -> int:
        """The coordinator epoch of partition `index`; NOT_COORDINATOR unless it is
        coordinated here, COORDINATOR_LOAD_IN_PROGRESS while it loads or is suspended."""
        self._stalls.check()
        self._check_not_suspended(index)
        epoch = self._epochs.get(index)
        if epoch is not None:
            return epoch
        if index in self._loading:
            raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              f"{self.topic}-{index} is being loaded")
        raise BrokerError(ErrorCode.NOT_COORDINATOR,
                          f"this broker does not coordinate the keys of {self.topic}-{index}")

    def coordinated(self) -> list[int]:
        """The indexes of the loaded partitions, the suspended ones left out."""
        self._stalls.check()
        return sorted(set(self._epochs) - self._suspended)

    def suspend(self) -> None:
        """This broker may have been deposed unawares (a stall, a lost ZooKeeper session):
        stop coordinating every partition loaded or loading here until `confirm`."""
        self._suspended.update(self._epochs, self._loading)

    def suspended(self) -> list[int]:
        return sorted(self._suspended)

    def _check_not_suspended(self, index: int) -> None:
        if index in self._suspended:
            raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              f"{self.topic}-{index}: checking that this broker still leads it")

    def confirm(self, index: int, leads: bool, leader_epoch: int | None) -> None:
        """ZooKeeper's state of suspended partition `index`, read since it was suspended:
        led here (`leads`) or not, at `leader_epoch` (None: it has no state). Coordination
        goes on if that is the epoch of this coordinator (or an older one: a LeaderAndIsr
        newer than the read, which the controller wrote to ZooKeeper first, has moved it
        on since); else the partition is resigned."""
        if index not in self._suspended:
            return
        self._suspended.discard(index)
        epoch = self._epochs[index] if index in self._epochs else self._loading[index][0]
        if leader_epoch is not None and (leader_epoch < epoch or (leads and leader_epoch == epoch)):
            log.info("%s-%d: still led here at epoch %d: coordinating it again", self.topic, index, epoch)
            return
        log.info("%s-%d: no longer led here (epoch %s in ZooKeeper, %d here)", self.topic, index,
                 leader_epoch, epoch)
        self.resigned(index)

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
            self._suspended.discard(index)
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
            self._suspended.discard(index)
            self._unload(index)

    def resigned(self, index: int) -> None:
        """This broker no longer leads partition `index`: its keys' state goes."""
        loading = self._loading.pop(index, None)
        if loading is not None:
            loading[1].cancel()
        self._suspended.discard(index)
        if self._epochs.pop(index, None) is not None or loading is not None:
            self._unload(index)
            log.info("no longer coordinating %s-%d", self.topic, index)

    def check_writable(self, partition, epoch: int) -> None:
        """NOT_COORDINATOR unless this broker leads `partition` at coordinator epoch `epoch`,
        COORDINATOR_LOAD_IN_PROGRESS while the partition is suspended."""
        self._check_not_suspended(partition.index)
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
