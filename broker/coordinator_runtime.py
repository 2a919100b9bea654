"""The runtime the group and transaction coordinators share (Kafka's coordinator-common
CoordinatorRuntime): the partitions of a coordinator's internal topic
(`__consumer_offsets` for the group coordinator, `__transaction_state` for the
transaction coordinator) that this broker coordinates, their loading (a replay of the
records through the coordinator's callback) and unloading as their leadership moves,
and the coordinator's writes to them. Kafka's coordinators follow the leadership of
those partitions. The record schemas stay with each coordinator (`groups.offsets_log`,
`transactions.txn_log`); this module reads and writes their batches.

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
from typing import Awaitable, Callable, Iterable

from wire.error_codes import ErrorCode
from wire.primitives import DecodeError
from wire.records import (CONTROL_ABORT, CONTROL_COMMIT, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
                          build_batch, decode_control_record, iter_batches)

from broker.clock import StallWatch
from broker.errors import BrokerError
from broker.throttled_log import ThrottledLog

log = logging.getLogger("sluice.coordinators")

_MAX_DECOMPRESSED = 256 * 1024 * 1024
_RECORDS_PER_BATCH = 500
_LOAD_YIELD_EVERY = 500  # entries replayed between two turns of the event loop

_NOT_COORDINATOR = (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR,
                    ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_COORDINATOR)


def coordinator_error(exc: BrokerError) -> BrokerError:
    """A partition's refusal of a coordinator write, as the coordinator answers it."""
    if exc.code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
        return exc
    code = ErrorCode.NOT_COORDINATOR if exc.code in _NOT_COORDINATOR else ErrorCode.COORDINATOR_NOT_AVAILABLE
    return BrokerError(code, str(exc))


# A failed append of a transactional write (a TxnOffsetCommit) answers as these map;
# other refusals (a fenced producer epoch, ...) are the producer's business and go back
# as they are.
_COORDINATOR_WRITE_ERRORS = frozenset({
    ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_COORDINATOR})


def partition_for(key: str, partitions: int) -> int:
    """Kafka's placement of a group or transactional id: Utils.abs(key.hashCode()) % partitions."""
    units = key.encode("utf-16-be")  # Java's String.hashCode runs over UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    if h >= 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _batches_of(records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
               producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH) -> Iterable[bytearray]:
    """Batches of at most 500 records; transactional ones when a producer is given."""
    for i in range(0, len(records), _RECORDS_PER_BATCH):
        chunk = records[i:i + _RECORDS_PER_BATCH]
        yield bytearray(build_batch([(k, v, (), timestamp_ms) for k, v in chunk],
                                    producer_id=producer_id, producer_epoch=producer_epoch,
                                    transactional=producer_id != NO_PRODUCER_ID))


def read_entries(partition):
    """Everything stored in one partition of an internal topic, in order: ("record", key,
    value, producer id, position) for each keyed record (producer id -1 unless the batch
    is transactional; position: the log end after its batch, which orders writes) and
    ("marker", producer id, committed) for each transaction marker."""
    for header, records in partition.decoded_batches(_MAX_DECOMPRESSED):
        if header.is_control:
            try:
                marker = decode_control_record(records[0]) if records else None
            except DecodeError:
                marker = None
            if marker is not None and marker.type in (CONTROL_COMMIT, CONTROL_ABORT):
                yield "marker", header.producer_id, marker.type == CONTROL_COMMIT
            continue
        producer = header.producer_id if header.is_transactional else NO_PRODUCER_ID
        position = header.last_offset + 1
        for record in records:
            if record.key is not None:
                yield "record", record.key, record.value, producer, position


def append_records(partition, records: list[tuple[bytes, bytes | None]], timestamp_ms: int,
                   producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH) -> int:
    """Append records to a partition of an internal topic (one batch per chunk), as
    part of a producer's transaction when `producer_id` is given; the log end offset
    after them (what the high watermark must reach for them to be committed)."""
    for batch in _batches_of(records, timestamp_ms, producer_id, producer_epoch):
        view = memoryview(batch)
        header = next(iter(iter_batches(view)))[0]
        partition.append_as_leader(header, view, required_acks=-1)
    return partition.log_end_offset


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


class CoordinatorRuntime:
    """One coordinator's internal topic: where a key lives, which partitions are
    coordinated here (`coordinated`), their loads (`replay` feeds each entry to the
    coordinator's callback) and the coordinator's writes (`append`, then `committed`).

    `load(partition, epoch)` is the coordinator's: it replays one partition through
    `replay` and takes its state in; `unload(index)` drops the state of that
    partition's keys. The single node creates its topic on first use, with every
    partition coordinated here at once, and loads the partitions it has at start
    (`load_local`)."""

    def __init__(self, broker, topic: str, partitions: int, segment_bytes: int,
                 load: Callable[[object, int], Awaitable[None]], unload: Callable[[int], None]):
        self.broker = broker
        self.topic = topic
        self.partitions = partitions  # the topic's partitions when it is created
        self._segment_bytes = segment_bytes
        self._load = load
        self.coordinated = CoordinatedPartitions(topic, load, unload, broker.stalls)
        self._write_failures = ThrottledLog(log, logging.WARNING, burst=1, window=60.0)

    # -- where a key lives -----------------------------------------------------------
    def local_topic(self, create: bool):
        """The single node's topic (None when it does not exist and not `create`),
        created on first use as Kafka creates it (compacted), every partition coordinated
        here at once."""
        topics = self.broker.topics
        topic = topics.topics.get(self.topic)
        if topic is None and create:
            topic = topics.create(self.topic, self.partitions, {
                "cleanup.policy": "compact", "segment.bytes": str(self._segment_bytes)})
            for index, partition in topic.partitions.items():
                self.coordinated.loaded(index, partition.leader_epoch)
        return topic

    def partition_for(self, key: str, create: bool = True) -> int:
        """The partition of the topic that holds `key`. The single node creates the topic
        when `create`; a cluster counts the partitions of the topic in its metadata view.
        Either counts the configured partitions while the topic does not exist (as Kafka)."""
        if not self.broker.config.cluster_mode:
            topic = self.local_topic(create)
        else:
            topic = self.broker.metadata.topic(self.topic)
        count = len(topic.partitions) if topic is not None and topic.partitions else self.partitions
        return partition_for(key, count)

    def leads(self, index: int) -> bool:
        """Whether partition `index` is coordinated here and led at its coordinator epoch."""
        try:
            partition = self.broker.topics.partition(self.topic, index)
            self.coordinated.check_writable(partition, self.coordinated.epoch(index))
        except BrokerError:
            return False
        return True

    # -- loading ---------------------------------------------------------------------
    async def load_local(self) -> None:
        """The single node at start: load every partition of the topic (when it exists)
        and coordinate them all."""
        topic = self.local_topic(create=False)
        for index, partition in sorted(topic.partitions.items()) if topic is not None else ():
            await self._load(partition, partition.leader_epoch)
            self.coordinated.loaded(index, partition.leader_epoch)

    @staticmethod
    async def replay(partition, apply: Callable[[tuple], None]) -> None:
        """Feed every entry of `partition` (see `read_entries`) to `apply`, in log order,
        letting other requests run now and then."""
        for count, entry in enumerate(read_entries(partition), 1):
            apply(entry)
            if count % _LOAD_YIELD_EVERY == 0:
                await asyncio.sleep(0)

    # -- writing ---------------------------------------------------------------------
    def append(self, index: int, epoch: int, records: list, producer_id: int = NO_PRODUCER_ID,
               producer_epoch: int = NO_PRODUCER_EPOCH):
        """Append to partition `index` as its coordinator at `epoch`; (the partition, the
        log end after the records). BrokerError with the code the coordinator answers:
        Kafka's mapping of the partition's refusals (a transactional write's producer
        errors pass unchanged)."""
        try:
            partition = self.broker.topics.partition(self.topic, index)
            self.coordinated.check_writable(partition, epoch)
            end = append_records(partition, records, self.broker.clock.wall_ms(), producer_id,
                                 producer_epoch)
        except BrokerError as exc:
            if producer_id != NO_PRODUCER_ID and exc.code not in _COORDINATOR_WRITE_ERRORS:
                raise
            self._write_failures("cannot write to %s-%d: %s", self.topic, index, exc)
            raise coordinator_error(exc) from None
        return partition, end

    async def committed(self, partition, end_offset: int, timeout_s: float) -> None:
        """Wait until the high watermark of `partition` reaches `end_offset` (the log end
        after a coordinator's append); BrokerError with the coordinator's code if this
        broker stops leading it, the ISR falls below min.insync.replicas, or `timeout_s`
        passes first."""
        code = await partition.until_replicated(end_offset, timeout_s)
        if code != ErrorCode.NONE:
            self._write_failures("a write to %s-%d was not committed: %s", self.topic,
                                 partition.index, code.name)
            raise coordinator_error(BrokerError(code, f"{partition.topic}-{partition.index}: the write "
                                                      f"ending at offset {end_offset} was not "
                                                      f"replicated ({code.name})"))

    async def write(self, index: int, epoch: int, records: list, timeout_s: float) -> int:
        """Append to partition `index` as its coordinator at `epoch` and wait until the
        records are committed; the log end after them."""
        partition, end = self.append(index, epoch, records)
        await self.committed(partition, end, timeout_s)
        return end
