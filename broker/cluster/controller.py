"""The cluster's controller, as Kafka's ZooKeeper-era KafkaController: one broker, elected
through /controller, decides every partition's leader and ISR, writes them to ZooKeeper
and tells the brokers with LeaderAndIsr, UpdateMetadata and StopReplica.

- Election: `ZkStore.elect_controller`; /controller is watched, and its deletion starts a
  new campaign. Every write of the controller is conditional on the version of
  /controller_epoch it won, partition states also on the state znode's version: a
  deposed controller's write fails (ControllerMoved) and it resigns at once.
- Events (ZooKeeper watches, the session's state, ControlledShutdown, ElectLeaders, the
  rebalance timer) are processed one at a time, in order, by one task, as Kafka's
  ControllerEventManager does; ZooKeeper calls block, so they run on the controller's
  own worker thread, and kazoo's watch callbacks are handed to the event loop.
- Leader election for a partition without a live leader: the first replica in assignment
  order that is live, in the ISR and not shutting down; failing that, with unclean
  election allowed (the topic's unclean.leader.election.enable, else the broker's), the
  first live replica with an ISR of itself; failing that no leader (-1), the ISR kept.
  A change of a topic's configs runs the election again for its partitions without a
  leader. Each change writes leader_epoch + 1 and this controller's epoch.
- Partition reassignments (AlterPartitionReassignments, /admin/reassign_partitions), as
  Kafka's onPartitionReassignment: the replicas become the target's then the original's,
  with adding_replicas and removing_replicas in the topic znode and a new leader epoch;
  once the ISR holds the whole target (an ISR change tells), the leader moves into it,
  the others leave the ISR and get StopReplica(delete), and the topic znode and
  /admin/reassign_partitions forget the reassignment. A new controller resumes them.
- Requests go through `broker.cluster.channel`: LeaderAndIsr v6 to a partition's live
  replicas, UpdateMetadata v7 to every live broker, StopReplica v3; the event loop does
  not wait for the brokers' answers (topic deletion finishes in a later event).
  UpdateMetadata lists a replica as offline when its broker is not live or is shutting
  down, as Kafka's isReplicaOnline: leaders take no offline replica into an ISR.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Iterable

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from wire.error_codes import ErrorCode
from wire.messages import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA

from broker.clock import SYSTEM_CLOCK, Clock
from broker.config import SECURITY_PROTOCOLS
from broker.cluster.channel import ControllerChannels, listener_endpoint
from broker.zookeeper.layout import NO_LEADER, ControllerRegistration, LeaderAndIsr
from broker.zookeeper.store import (ControllerMoved, Election, LiveBroker, StaleVersion,
                                     Versioned, ZkStore)
from broker.errors import BrokerError
from broker.failpoints import fail_point

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# The versions the cluster fixes for the controller's requests.
LEADER_AND_ISR_VERSION = 6
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3

# LeaderAndIsr's type (Kafka's AbstractControlRequest.Type; 0 is UNKNOWN): incremental,
# or every partition the receiver hosts.
INCREMENTAL, FULL = 1, 2
# Kafka's markers for a topic being deleted: the leader UpdateMetadata names (brokers
# drop the partition from their metadata) and the leader epoch StopReplica names.
LEADER_DURING_DELETE = -2
EPOCH_DURING_DELETE = -2
SECURITY_PROTOCOL_IDS = {name: i for i, name in enumerate(SECURITY_PROTOCOLS)}  # Kafka's ids
# ElectLeaders' election types.
PREFERRED_ELECTION, UNCLEAN_ELECTION = 0, 1
# How long after a failed ZooKeeper call the controller campaigns again.
CAMPAIGN_RETRY_S = 1.0
# How many times a partition state write is tried again after another writer (a leader
# changing its ISR) moved the znode on.
STATE_WRITE_ATTEMPTS = 5

_LAIR = LEADER_AND_ISR.request
_UMR = UPDATE_METADATA.request
_STOP = STOP_REPLICA.request


@dataclass
class _Context:
    """What the controller knows of the cluster while it is active (Kafka's
    ControllerContext): refilled from ZooKeeper at every failover."""

    live: dict[int, LiveBroker] = field(default_factory=dict)
    shutting_down: set[int] = field(default_factory=set)
    assignments: dict = field(default_factory=dict)  # topic -> TopicAssignment
    states: dict[TopicPartition, Versioned] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    # Partitions being reassigned: their target replicas (Kafka's partitionsBeingReassigned).
    reassigning: dict[TopicPartition, tuple[int, ...]] = field(default_factory=dict)

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        return self.assignments[tp[0]].partitions.get(tp[1], ())

    def assigned(self, tp: TopicPartition) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The partition's replicas, those being added and those being removed; all empty
        for a partition the cluster does not have."""
        assignment = self.assignments.get(tp[0])
        if assignment is None or tp[1] not in assignment.partitions:
            return (), (), ()
        return (assignment.partitions[tp[1]], assignment.adding_replicas.get(tp[1], ()),
                assignment.removing_replicas.get(tp[1], ()))

    def partitions(self) -> list[TopicPartition]:
        return sorted((topic, partition) for topic, assignment in self.assignments.items()
                      for partition in assignment.partitions)

    def eligible(self, broker_id: int) -> bool:
        """Whether the broker can lead or join an ISR: live and not shutting down."""
        return broker_id in self.live and broker_id not in self.shutting_down


def elect_offline_leader(replicas: Iterable[int], isr: Iterable[int],
                         eligible: Callable[[int], bool],
                         unclean: bool) -> tuple[int, tuple[int, ...]] | None:
    """(leader, ISR) for a partition without a live leader; None when none can lead."""
    isr = tuple(isr)
    for replica in replicas:
        if replica in isr and eligible(replica):
            return replica, tuple(member for member in isr if eligible(member))
    if unclean:
        for replica in replicas:
            if eligible(replica):
                return replica, (replica,)
    return None


def reassignment(replicas: Iterable[int], adding: Iterable[int], target: Iterable[int]
                 ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Kafka's ReplicaAssignment.reassignTo: (replicas, adding, removing) while a partition
    moves to `target` from its origin replicas (those it has that are not being added):
    the target's replicas first, then the origin's others."""
    adding, target = set(adding), tuple(target)
    origin = [replica for replica in replicas if replica not in adding]
    full = tuple(dict.fromkeys([*target, *origin]))
    return (full, tuple(r for r in full if r not in origin),
            tuple(r for r in full if r not in target))


class _Batch:
    """The requests one event sends (Kafka's ControllerBrokerRequestBatch)."""

    def __init__(self):
        self.leader_and_isr: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)
        self.full_leader_and_isr: set[int] = set()
        self.update_metadata: set[TopicPartition] = set()
        self.update_metadata_all = False
        self.brokers_changed = False  # UpdateMetadata to all even without partitions: the live brokers moved
        self.stop_replica: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)

    def tell_replicas(self, ctx: _Context, tp: TopicPartition, is_new: bool = False,
                      skip: Iterable[int] = ()) -> None:
        """LeaderAndIsr to the partition's live replicas, UpdateMetadata to all."""
        for replica in ctx.replicas(tp):
            if replica in ctx.live and replica not in skip:
                self.leader_and_isr[replica][tp] = is_new
        self.update_metadata.add(tp)


class Controller:
    def __init__(self, broker_id: int, store: ZkStore, config, clock: Clock = SYSTEM_CLOCK, security=None):
        """`security`: how to reach the brokers' inter-broker listener (None: PLAINTEXT)."""
        self.broker_id = broker_id
        self.security = security
        self.store = store
        self.config = config
        self.clock = clock
        self.is_active = False
        self.epoch = -1
        self._election: Election | None = None
        self._ctx: _Context | None = None
        self._channels: ControllerChannels | None = None
        self._events: asyncio.Queue = asyncio.Queue()
        self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"controller-{broker_id}-zk")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._processor: asyncio.Task | None = None
        self._stopped = False
        self._session_lost = False
        # Leader changes this controller wrote, and the ms their writes took (broker.metrics).
        self.leader_elections = 0
        self.leader_election_ms = 0.0
        self._rebalance_timer = None
        self._deletions: set[asyncio.Task] = set()
        # One watch callable per znode, so that a watch set twice fires once.
        self._topic_watches: dict[str, Callable] = {}
        self._controller_watch = self._watch(self._campaign)
        self._brokers_watch = self._watch(self._on_brokers_change)
        self._topics_watch = self._watch(self._on_topics_change)
        self._delete_topics_watch = self._watch(self._on_delete_requests)
        self._isr_change_watch = self._watch(self._on_isr_changes)
        self._reassign_watch = self._watch(self._on_reassign_partitions)

    # -- the interface ---------------------------------------------------------------
    async def start(self) -> None:
        """Starts processing events and campaigns for /controller; returns at once."""
        self._loop = asyncio.get_running_loop()
        self._processor = self._loop.create_task(self._process_events())
        self.store.add_session_listener(self._on_session_state)
        self._submit(self._campaign)

    async def stop(self) -> None:
        """Resigns and stops; /controller is freed for another broker when this session
        holds it. The ZooKeeper session itself belongs to the broker."""
        if self._stopped:
            return
        self._stopped = True
        self.store.remove_session_listener(self._on_session_state)
        if self._processor is not None:
            self._processor.cancel()
            await asyncio.gather(self._processor, return_exceptions=True)
        was_active = self.is_active
        await self._resign()
        if was_active:
            try:
                await self._zk(self.store.resign_controller)
            except KazooException as exc:  # the broker's session is gone already
                log.info("controller %d: cannot free /controller: %r", self.broker_id, exc)
        while not self._events.empty():
            _, _, reply = self._events.get_nowait()
            if reply is not None and not reply.done():
                reply.set_exception(BrokerError(ErrorCode.NOT_CONTROLLER, "controller stopped"))
        self._worker.shutdown(wait=False)

    def offline_partitions(self) -> int:
        """Partitions without a live leader, as this controller knows them (0 unless active)."""
        ctx = self._ctx
        if not self.is_active or ctx is None:
            return 0
        return sum(1 for versioned in ctx.states.values() if versioned.value.leader not in ctx.live)

    def topic_configs_changed(self, topic: str) -> None:
        """A topic's configs changed (a /config/changes notification): as Kafka's
        controller does when unclean.leader.election.enable is turned on, the partitions
        of the topic without a live leader get one if the configs now allow it."""
        self._submit(self._on_topic_configs_change, topic)

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """Moves leadership off a broker about to stop; the partitions it still leads."""
        return await self._call(self._controlled_shutdown, broker_id, broker_epoch)

    async def elect_leaders(self, election_type: int, partitions: Iterable[TopicPartition] | None
                            ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """ElectLeaders: preferred (0) or unclean (1) elections; None: every partition."""
        return await self._call(self._elect_leaders, election_type,
                                None if partitions is None else list(partitions))

    async def alter_partition_reassignments(
            self, targets: dict[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """AlterPartitionReassignments: each partition's target replicas, None to cancel."""
        return await self._call(self._alter_reassignments, dict(targets))

    async def list_partition_reassignments(
            self, partitions: Iterable[TopicPartition] | None
    ) -> dict[TopicPartition, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """ListPartitionReassignments: (replicas, adding, removing) of the partitions being
        reassigned, among `partitions` (None: all)."""
        return await self._call(self._list_reassignments,
                                None if partitions is None else list(partitions))

    # -- events ----------------------------------------------------------------------
    def _submit(self, handler, *args, reply: asyncio.Future | None = None) -> None:
        if not self._stopped:
            self._events.put_nowait((handler, args, reply))

    async def _call(self, handler, *args):
        """Runs `handler` as an event and returns its result; NOT_CONTROLLER unless active."""
        if not self.is_active or self._stopped:
            raise BrokerError(ErrorCode.NOT_CONTROLLER,
                              f"broker {self.broker_id} is not the controller")
        reply = self._loop.create_future()
        self._submit(handler, *args, reply=reply)
        return await reply

    def _watch(self, handler) -> Callable:
        """A kazoo watch callback that queues `handler` as an event on the event loop."""
        def fire(_event) -> None:
            self._to_loop(self._submit, handler)
        return fire

    def _to_loop(self, *call) -> None:
        """From kazoo's thread: `call` on the event loop, unless stopped."""
        if self._stopped or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(*call)
        except RuntimeError:  # the loop has closed
            pass

    def _topic_watch(self, topic: str) -> Callable:
        watch = self._topic_watches.get(topic)
        if watch is None:
            watch = self._topic_watches[topic] = self._watch(
                partial(self._on_assignment_change, topic))
        return watch

    def _on_session_state(self, state: KazooState) -> None:
        """On kazoo's thread. A lost session took /controller and every watch with it."""
        if state == KazooState.LOST:
            self._session_lost = True
            self._to_loop(self._submit, self._resign)
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._to_loop(self._submit, self._campaign)

    async def _process_events(self) -> None:
        while not self._stopped:  # (3.11's wait_for can swallow a cancellation)
            handler, args, reply = await self._events.get()
            try:
                result = await handler(*args)
            except ControllerMoved as exc:
                log.warning("controller %d: fenced (%s): resigning", self.broker_id, exc)
                await self._resign()
                self._submit(self._campaign)
                if reply is not None and not reply.done():
                    reply.set_exception(BrokerError(ErrorCode.NOT_CONTROLLER, str(exc)))
                continue
            except KazooException as exc:
                # ZooKeeper unreachable mid-event: what this controller knows may be
                # half applied. Resign; a new campaign, once ZooKeeper may answer again,
                # re-reads everything.
                log.warning("controller %d: ZooKeeper failed during %s (%r): resigning",
                            self.broker_id, getattr(handler, "__name__", handler), exc)
                await self._resign()
                self.clock.call_later(CAMPAIGN_RETRY_S, partial(self._submit, self._campaign))
                if reply is not None and not reply.done():
                    reply.set_exception(BrokerError(ErrorCode.NOT_CONTROLLER, repr(exc)))
                continue
            except BrokerError as exc:
                if reply is not None and not reply.done():
                    reply.set_exception(exc)
                continue
            except Exception as exc:
                log.exception("controller %d: event %s failed", self.broker_id,
                              getattr(handler, "__name__", handler))
                if reply is not None and not reply.done():
                    reply.set_exception(BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, repr(exc)))
                continue
            if reply is not None and not reply.done():
                reply.set_result(result)

    async def _zk(self, call, *args, **kwargs):
        """A blocking ZkStore call, on the controller's worker thread (in order)."""
        return await self._loop.run_in_executor(self._worker, partial(call, *args, **kwargs))

    # -- election ----------------------------------------------------------------------
    async def _campaign(self) -> None:
        """Kafka's elect(): become the controller if /controller is free; resign if another
        broker holds it."""
        for _ in range(2):
            holder = await self._zk(self.store.watch_controller, self._controller_watch)
            if holder is None:
                registration = ControllerRegistration(self.broker_id, self.clock.wall_ms())
                election = await self._zk(self.store.elect_controller, registration)
                if election is not None:
                    await self._become_controller(election)
                    return
                holder = await self._zk(self.store.controller_id)
            if holder == self.broker_id and self.is_active:
                return
            if holder == self.broker_id:
                # Left from a term this controller gave up (fenced, ZooKeeper failure):
                # free it and run the election again, for a new epoch.
                await self._zk(self.store.resign_controller)
                continue
            if self.is_active:
                log.info("controller %d: broker %s is the controller now: resigning",
                         self.broker_id, holder)
                await self._resign()
            return

    async def _resign(self) -> None:
        """Kafka's onControllerResignation: forget the cluster, stop the timers, close
        the channels."""
        if not self.is_active:
            return
        log.info("controller %d: resigning (epoch %d)", self.broker_id, self.epoch)
        self.is_active = False
        self.epoch = -1
        self._election = None
        self._ctx = None
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        for task in self._deletions:
            task.cancel()
        self._deletions.clear()
        channels, self._channels = self._channels, None
        if channels is not None:
            await channels.close()

    async def _become_controller(self, election: Election) -> None:
        """Kafka's onControllerFailover: read the cluster, give partitions without a state
        one and those without a live leader a new leader, then tell every broker."""
        log.info("controller %d: elected, epoch %d", self.broker_id, election.epoch)
        self._election = election
        self.epoch = election.epoch
        self.is_active = True
        ctx = self._ctx = _Context()
        self._channels = ControllerChannels(self.broker_id, self.config.inter_broker_listener.name,
                                            self.config.controller_socket_timeout_ms / 1000,
                                            self.clock, self.security)
        ctx.live = await self._zk(self.store.live_brokers, self._brokers_watch)
        log.info("controller %d: live brokers %s", self.broker_id, sorted(ctx.live))
        for broker_id, live in ctx.live.items():
            self._channels.add_broker(broker_id, live.registration)
        for topic in await self._zk(self.store.watch_topics, self._topics_watch):
            await self._load_topic(topic)
        for tp in ctx.partitions():
            replicas, adding, removing = ctx.assigned(tp)
            if adding or removing:
                ctx.reassigning[tp] = tuple(r for r in replicas if r not in removing)
        batch = _Batch()
        await self._bring_partitions_online(ctx.partitions(), batch)
        batch.update_metadata_all = True
        batch.full_leader_and_isr.update(ctx.live)
        self._send(batch)
        self._schedule_rebalance()
        await self._on_delete_requests()
        await self._on_isr_changes()
        await self._resume_reassignments()

    async def _load_topic(self, topic: str) -> bool:
        """Reads a topic's assignment (watching it) and its partitions' states."""
        def read():
            assignment = self.store.watch_topic_assignment(topic, self._topic_watch(topic))
            if assignment is None:
                return None, {}
            return assignment.value, {partition: self.store.partition_state(topic, partition)
                                      for partition in assignment.value.partitions}

        assignment, states = await self._zk(read)
        if assignment is None:
            return False
        ctx = self._ctx
        ctx.assignments[topic] = assignment
        for partition, state in states.items():
            if state is not None:
                ctx.states[(topic, partition)] = state
        return True

    # -- partition states --------------------------------------------------------------
    async def _bring_partitions_online(self, partitions: Iterable[TopicPartition],
                                       batch: _Batch) -> None:
        """Initial states for partitions without one; new leaders for those whose leader
        is not live (Kafka's triggerOnlinePartitionStateChange)."""
        ctx = self._ctx
        for tp in partitions:
            if tp[0] in ctx.deleting:
                continue
            state = ctx.states.get(tp)
            if state is None:
                if await self._initialize(tp):
                    batch.tell_replicas(ctx, tp, is_new=True)
            elif state.value.leader not in ctx.live and \
                    await self._elect_offline(tp, only_if_leader_found=state.value.leader == NO_LEADER):
                batch.tell_replicas(ctx, tp)

    async def _initialize(self, tp: TopicPartition) -> bool:
        """A new partition's first state: the first live replica leads, the live replicas
        are the ISR. False while no replica is live (tried again when one starts)."""
        ctx = self._ctx
        live = [replica for replica in ctx.replicas(tp) if ctx.eligible(replica)]
        if not live:
            log.warning("controller %d: no live replica for new partition %s-%d",
                        self.broker_id, *tp)
            return False
        state = LeaderAndIsr(live[0], 0, tuple(live), self.epoch)
        created = await self._zk(self.store.create_partition_state, *tp, state,
                                 controller_epoch_version=self._election.epoch_zk_version)
        if created:
            ctx.states[tp] = Versioned(state, 0)
        else:  # written by an earlier controller meanwhile
            existing = await self._zk(self.store.partition_state, *tp)
            if existing is None:
                return False
            ctx.states[tp] = existing
        return True

    async def _write_state(self, tp: TopicPartition,
                           decide: Callable[[LeaderAndIsr], tuple[int, tuple[int, ...]] | None]
                           ) -> bool:
        """Writes the (leader, ISR) that `decide` makes of the current state, with the next
        leader epoch and this controller's epoch; False if `decide` says no change. A
        state that moved on since read is read again and decided again."""
        ctx = self._ctx
        for _ in range(STATE_WRITE_ATTEMPTS):
            current = ctx.states[tp]
            decided = decide(current.value)
            if decided is None:
                return False
            leader, isr = decided
            new = LeaderAndIsr(leader, current.value.leader_epoch + 1, tuple(isr), self.epoch)
            started = time.perf_counter()
            try:
                version = await self._zk(
                    self.store.set_partition_state, *tp, new, current.zk_version,
                    controller_epoch_version=self._election.epoch_zk_version)
            except StaleVersion:
                fresh = await self._zk(self.store.partition_state, *tp)
                if fresh is None:
                    return False
                ctx.states[tp] = fresh
                continue
            ctx.states[tp] = Versioned(new, version)
            if leader != current.value.leader:
                self.leader_elections += 1
                self.leader_election_ms += (time.perf_counter() - started) * 1000
            return True
        log.warning("controller %d: %s-%d's state kept changing: not written",
                    self.broker_id, *tp)
        return False

    async def _unclean_allowed(self, topic: str) -> bool:
        config = await self._zk(self.store.topic_config, topic)
        value = config.get("unclean.leader.election.enable")
        if value is None:
            return self.config.log.unclean_leader_election_enable
        return value.strip().lower() == "true"

    async def _elect_offline(self, tp: TopicPartition, *, unclean: bool | None = None,
                             only_if_leader_found: bool = False) -> bool:
        """OfflinePartition election; without an eligible replica the leader becomes -1,
        the ISR kept (unless it was -1 already: then nothing is written)."""
        ctx = self._ctx
        replicas = ctx.replicas(tp)
        if unclean is None:
            unclean = False
            current = ctx.states[tp].value
            if elect_offline_leader(replicas, current.isr, ctx.eligible, False) is None:
                unclean = await self._unclean_allowed(tp[0])

        def decide(current: LeaderAndIsr):
            if current.leader in ctx.live:
                return None  # a leader came meanwhile
            chosen = elect_offline_leader(replicas, current.isr, ctx.eligible, unclean)
            if chosen is not None:
                return chosen
            if only_if_leader_found or current.leader == NO_LEADER:
                return None
            return NO_LEADER, current.isr

        return await self._write_state(tp, decide)

    async def _remove_from_isr(self, tp: TopicPartition, removed: set[int]) -> bool:
        """Drops `removed` from the ISR, the leader kept; the last member stays."""
        def decide(current: LeaderAndIsr):
            isr = tuple(member for member in current.isr if member not in removed)
            if isr == current.isr:
                return None
            return current.leader, isr or current.isr[-1:]

        return await self._write_state(tp, decide)

    async def _elect_preferred(self, tp: TopicPartition) -> ErrorCode:
        ctx = self._ctx
        replicas = ctx.replicas(tp)
        preferred = replicas[0] if replicas else NO_LEADER

        def decide(current: LeaderAndIsr):
            if current.leader == preferred or preferred not in current.isr \
                    or not ctx.eligible(preferred):
                return None
            return preferred, current.isr

        if ctx.states[tp].value.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED
        if await self._write_state(tp, decide):
            return ErrorCode.NONE
        if ctx.states[tp].value.leader == preferred:
            return ErrorCode.ELECTION_NOT_NEEDED
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE

    # -- brokers -----------------------------------------------------------------------
    async def _on_brokers_change(self) -> None:
        """Children of /brokers/ids changed: brokers gone, new, or bounced (registered
        again: a new epoch)."""
        if not self.is_active:
            return
        ctx = self._ctx
        current = await self._zk(self.store.live_brokers, self._brokers_watch)
        dead = {broker_id for broker_id, live in ctx.live.items()
                if broker_id not in current or current[broker_id].epoch != live.epoch}
        started = {broker_id for broker_id, live in current.items()
                   if broker_id not in ctx.live or broker_id in dead}
        if dead:
            log.info("controller %d: brokers gone: %s", self.broker_id, sorted(dead))
            for broker_id in dead:
                del ctx.live[broker_id]
                ctx.shutting_down.discard(broker_id)
                await self._channels.remove_broker(broker_id)
            await self._on_brokers_failure(dead)
        if started:
            log.info("controller %d: brokers started: %s", self.broker_id, sorted(started))
            for broker_id in started:
                ctx.live[broker_id] = current[broker_id]
                self._channels.add_broker(broker_id, current[broker_id].registration)
            await self._on_brokers_startup(started)

    async def _on_brokers_failure(self, dead: set[int]) -> None:
        ctx = self._ctx
        batch = _Batch()
        batch.brokers_changed = True
        for tp in ctx.partitions():
            replicas = ctx.replicas(tp)
            state = ctx.states.get(tp)
            if state is None or tp[0] in ctx.deleting or not dead.intersection(replicas):
                continue
            batch.update_metadata.add(tp)  # offline replicas changed
            if state.value.leader in dead:
                changed = await self._elect_offline(tp)
            else:
                changed = await self._remove_from_isr(tp, dead)
            if changed:
                batch.tell_replicas(ctx, tp)
        self._send(batch)

    async def _on_brokers_startup(self, started: set[int]) -> None:
        ctx = self._ctx
        batch = _Batch()
        await self._bring_partitions_online(ctx.partitions(), batch)
        batch.update_metadata_all = True
        batch.full_leader_and_isr.update(started)
        self._send(batch)

    # -- topics ------------------------------------------------------------------------
    async def _on_topics_change(self) -> None:
        if not self.is_active:
            return
        ctx = self._ctx
        topics = await self._zk(self.store.watch_topics, self._topics_watch)
        for gone in set(ctx.assignments) - set(topics):
            self._forget_topic(gone)
        batch = _Batch()
        for topic in topics:
            if topic not in ctx.assignments and await self._load_topic(topic):
                log.info("controller %d: new topic %s", self.broker_id, topic)
                await self._bring_partitions_online(
                    [tp for tp in ctx.partitions() if tp[0] == topic], batch)
        self._send(batch)

    async def _on_assignment_change(self, topic: str) -> None:
        """/brokers/topics/<topic> changed: new partitions get their first state."""
        if not self.is_active or topic not in self._ctx.assignments:
            return
        ctx = self._ctx
        before = set(ctx.assignments[topic].partitions)
        if not await self._load_topic(topic):
            return  # deleted: the topics watch tells
        added = [(topic, partition) for partition in sorted(ctx.assignments[topic].partitions)
                 if partition not in before]
        if added:
            log.info("controller %d: %s has new partitions %s", self.broker_id, topic,
                     [partition for _, partition in added])
        batch = _Batch()
        await self._bring_partitions_online(added, batch)
        self._send(batch)

    async def _on_topic_configs_change(self, topic: str) -> None:
        if not self.is_active or topic not in self._ctx.assignments:
            return
        batch = _Batch()
        await self._bring_partitions_online([tp for tp in self._ctx.partitions() if tp[0] == topic], batch)
        self._send(batch)

    def _forget_topic(self, topic: str) -> None:
        ctx = self._ctx
        assignment = ctx.assignments.pop(topic, None)
        for partition in (assignment.partitions if assignment else ()):
            ctx.states.pop((topic, partition), None)
            ctx.reassigning.pop((topic, partition), None)
        ctx.deleting.discard(topic)
        self._topic_watches.pop(topic, None)

    async def _on_delete_requests(self) -> None:
        """Children of /admin/delete_topics: UpdateMetadata marking the partitions as
        being deleted, StopReplica(delete) to the live replicas; once they answered (or
        left), the topic's znodes go (in a later event)."""
        if not self.is_active:
            return
        ctx = self._ctx
        for topic in await self._zk(self.store.watch_delete_topic_requests,
                                    self._delete_topics_watch):
            if topic in ctx.deleting:
                continue
            if topic not in ctx.assignments and not await self._load_topic(topic):
                log.info("controller %d: no topic %s to delete", self.broker_id, topic)
                await self._zk(self.store.remove_delete_topic_request, topic)
                continue
            log.info("controller %d: deleting topic %s", self.broker_id, topic)
            ctx.deleting.add(topic)
            for tp in [tp for tp in ctx.reassigning if tp[0] == topic]:
                del ctx.reassigning[tp]  # its replicas, those being added included, are deleted
            partitions = [tp for tp in ctx.partitions() if tp[0] == topic]
            batch = _Batch()
            batch.update_metadata.update(partitions)
            for tp in partitions:
                for replica in ctx.replicas(tp):
                    if replica in ctx.live:
                        batch.stop_replica[replica][tp] = True
            sent = self._send(batch)
            task = self._loop.create_task(self._after_stop_replicas(topic, sent))
            self._deletions.add(task)
            task.add_done_callback(self._deletions.discard)

    async def _after_stop_replicas(self, topic: str, sent: list[asyncio.Future]) -> None:
        await asyncio.gather(*sent)
        self._submit(self._finish_deletion, topic)

    async def _finish_deletion(self, topic: str) -> None:
        if not self.is_active or topic not in self._ctx.deleting:
            return
        await self._zk(self.store.delete_topic, topic,
                       controller_epoch_version=self._election.epoch_zk_version)
        self._forget_topic(topic)
        log.info("controller %d: topic %s deleted", self.broker_id, topic)

    async def _on_isr_changes(self) -> None:
        """Leaders changed ISRs: re-read those states, tell every broker, and delete the
        notifications."""
        if not self.is_active:
            return
        ctx = self._ctx

        def read():
            names = self.store.watch_isr_change_notifications(self._isr_change_watch)
            changed = set()
            for name in names:
                change = self.store.isr_change(name)
                changed.update(change.partitions if change else ())
            known = [tp for tp in sorted(changed) if tp[0] in ctx.assignments
                     and tp[1] in ctx.assignments[tp[0]].partitions]
            return names, {tp: self.store.partition_state(*tp) for tp in known}

        names, states = await self._zk(read)
        if not names:
            return
        batch = _Batch()
        for tp, state in states.items():
            if state is not None and tp in ctx.states:
                ctx.states[tp] = state
                batch.update_metadata.add(tp)
        self._send(batch)
        for tp in sorted(states):
            if tp in ctx.reassigning and self._reassignment_done(tp):
                await self._complete_reassignment(tp)
        await self._zk(self.store.delete_isr_change_notifications, names)

    # -- requests from brokers and clients ---------------------------------------------
    async def _controlled_shutdown(self, broker_id: int, broker_epoch: int
                                   ) -> list[TopicPartition]:
        """Kafka's doControlledShutdown: leadership moves to other live ISR members; as a
        follower the broker leaves the ISR and is told to stop its replicas. Its replicas
        are offline from then on, until it registers again."""
        if not self.is_active:
            raise BrokerError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not "
                                                        f"the controller")
        ctx = self._ctx
        live = ctx.live.get(broker_id)
        if live is None:
            raise BrokerError(ErrorCode.BROKER_NOT_AVAILABLE, f"broker {broker_id} is not live")
        if broker_epoch != -1 and broker_epoch < live.epoch:  # from an earlier registration
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH,
                              f"broker {broker_id}'s epoch is {live.epoch}, not {broker_epoch}")
        log.info("controller %d: broker %d shutting down", self.broker_id, broker_id)
        if broker_id not in ctx.shutting_down:
            ctx.shutting_down.add(broker_id)
            # Every broker hears that its replicas are offline before any leader hears
            # of the ISRs without it (each broker's requests go in order), so that no
            # leader takes it back into an ISR (KIP-841; Kafka's controller refuses it).
            notice = _Batch()
            notice.update_metadata.update(tp for tp in ctx.partitions() if broker_id in ctx.replicas(tp)
                                          and tp[0] not in ctx.deleting)
            self._send(notice)
        batch = _Batch()
        for tp in ctx.partitions():
            replicas = ctx.replicas(tp)
            state = ctx.states.get(tp)
            if broker_id not in replicas or len(replicas) < 2 or state is None \
                    or tp[0] in ctx.deleting:
                continue
            if state.value.leader == broker_id:
                def decide(current: LeaderAndIsr):
                    if current.leader != broker_id:
                        return None
                    for replica in replicas:
                        if replica in current.isr and ctx.eligible(replica):
                            return replica, tuple(m for m in current.isr
                                                  if m not in ctx.shutting_down)
                    return None

                if await self._write_state(tp, decide):
                    batch.tell_replicas(ctx, tp)
            else:
                if await self._remove_from_isr(tp, {broker_id}):
                    batch.tell_replicas(ctx, tp, skip=(broker_id,))
                batch.stop_replica[broker_id][tp] = False
        self._send(batch)
        return [tp for tp in ctx.partitions() if len(ctx.replicas(tp)) > 1
                and tp in ctx.states and ctx.states[tp].value.leader == broker_id]

    async def _elect_leaders(self, election_type: int, partitions: list | None
                             ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        if not self.is_active:
            raise BrokerError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not "
                                                        f"the controller")
        if election_type not in (PREFERRED_ELECTION, UNCLEAN_ELECTION):
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"unknown election type {election_type}")
        ctx = self._ctx
        if partitions is None:
            partitions = [tp for tp in ctx.partitions() if tp[0] not in ctx.deleting]
        results = {}
        batch = _Batch()
        for tp in partitions:
            tp = (tp[0], tp[1])
            if tp not in ctx.states or tp[0] in ctx.deleting:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"{tp[0]}-{tp[1]} is not a partition of the cluster")
                continue
            if election_type == PREFERRED_ELECTION:
                code = await self._elect_preferred(tp)
            elif ctx.states[tp].value.leader in ctx.live:
                code = ErrorCode.ELECTION_NOT_NEEDED
            elif await self._elect_offline(tp, unclean=True, only_if_leader_found=True):
                code = ErrorCode.NONE
            else:
                code = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            if code == ErrorCode.NONE:
                batch.tell_replicas(ctx, tp)
            results[tp] = (code, None if code in (ErrorCode.NONE,) else _ELECTION_MESSAGES[code])
        self._send(batch)
        return results

    # -- partition reassignments (KIP-455, as Kafka's ZooKeeper-mode controller) ---------
    def _invalid_target(self, tp: TopicPartition, target: tuple[int, ...]) -> str | None:
        """Kafka's validateReassignment: why `target` cannot be the partition's replicas."""
        ctx = self._ctx
        if not target:
            return "the replica list of a partition reassignment is empty"
        if len(set(target)) != len(target):
            return f"duplicate replica ids in the partition reassignment {list(target)}"
        if any(replica < 0 for replica in target):
            return f"invalid broker id in the replica list {list(target)}"
        replicas, adding, _ = ctx.assigned(tp)
        _, new, _ = reassignment(replicas, adding, target)
        live = sorted(b for b in ctx.live if ctx.eligible(b))  # Kafka's liveBrokerIds
        if not set(new) <= set(live):
            return (f"the replica assignment has brokers that are not live: {list(new)} to add, "
                    f"live brokers {live}")
        return None

    async def _alter_reassignments(self, targets: dict[TopicPartition, tuple[int, ...] | None],
                                   requested_in_zk: bool = False
                                   ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """Kafka's handleApiReassignments: each target checked, then carried out; a
        cancellation (None) moves the partition back to its origin replicas. A request
        through the API overrides what /admin/reassign_partitions asks for the partition;
        what that znode asks and is refused leaves it."""
        ctx = self._ctx
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        started: dict[TopicPartition, tuple[int, ...]] = {}
        for tp, target in targets.items():
            replicas, adding, removing = ctx.assigned(tp)
            problem = None if target is None else self._invalid_target(tp, tuple(target))
            if problem is not None:
                results[tp] = (ErrorCode.INVALID_REPLICA_ASSIGNMENT, problem)
            elif target is None and not (adding or removing):
                results[tp] = (ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                               f"{tp[0]}-{tp[1]} has no reassignment in progress to cancel")
            elif not replicas or tp[0] in ctx.deleting:
                results[tp] = (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                               f"{tp[0]}-{tp[1]} is not a partition of the cluster")
            else:
                started[tp] = tuple(target) if target is not None else tuple(
                    r for r in replicas if r not in adding)
        if requested_in_zk and results:
            log.warning("controller %d: reassignments in /admin/reassign_partitions refused: %s",
                        self.broker_id, {f"{t}-{p}": message for (t, p), (_, message) in results.items()})
        dropped = set(results) if requested_in_zk else set(started)
        if dropped:
            await self._zk(self.store.remove_partition_reassignments, lambda tp, _: tp in dropped,
                           controller_epoch_version=self._election.epoch_zk_version)
        batch = _Batch()
        for tp, target in started.items():
            await self._reassign(tp, target, batch)
            results[tp] = (ErrorCode.NONE, None)
        self._send(batch)
        return results

    async def _list_reassignments(self, partitions: list | None):
        ctx = self._ctx
        found = {}
        for tp in sorted(ctx.reassigning) if partitions is None else partitions:
            replicas, adding, removing = ctx.assigned(tp)
            if adding or removing:
                found[tp] = (replicas, adding, removing)
        return found

    async def _on_reassign_partitions(self) -> set[TopicPartition]:
        """/admin/reassign_partitions created or changed: the partitions it lists with a
        target other than the one being carried out start as through the API; the
        partitions started."""
        if not self.is_active:
            return set()
        ctx = self._ctx
        requested = await self._zk(self.store.watch_partition_reassignment, self._reassign_watch)
        targets = {tp: target for tp, target in requested.items() if ctx.reassigning.get(tp) != target}
        if not targets:
            return set()
        log.info("controller %d: reassignments requested in /admin/reassign_partitions: %s",
                 self.broker_id, {f"{t}-{p}": list(r) for (t, p), r in targets.items()})
        results = await self._alter_reassignments(targets, requested_in_zk=True)
        return {tp for tp, (code, _) in results.items() if code == ErrorCode.NONE}

    async def _resume_reassignments(self) -> None:
        """At failover, as Kafka's initializePartitionReassignments: what
        /admin/reassign_partitions asks, then the reassignments the topic znodes hold."""
        started = await self._on_reassign_partitions()
        batch = _Batch()
        for tp, target in sorted(self._ctx.reassigning.items()):
            if tp not in started:
                await self._reassign(tp, target, batch)
        self._send(batch)

    async def _reassign(self, tp: TopicPartition, target: tuple[int, ...], batch: _Batch) -> None:
        """Kafka's onPartitionReassignment: the partition's replicas become the target's
        and the origin's (adding and removing replicas noted in the topic znode), replicas
        no longer in either are dropped, and a new leader epoch tells every replica,
        the new ones starting as followers; done at once if the target is in the ISR."""
        ctx = self._ctx
        replicas, adding, removing = ctx.assigned(tp)
        moving = reassignment(replicas, adding, target)
        ctx.reassigning[tp] = target
        if moving != (replicas, adding, removing):
            log.info("controller %d: reassigning %s-%d to %s: replicas %s, adding %s, removing %s",
                     self.broker_id, *tp, list(target), *map(list, moving))
            await self._write_replicas(tp, *moving)
            unneeded = set(replicas) - set(moving[0])
            if unneeded:
                await self._drop_replicas(tp, unneeded, batch)
        if self._reassignment_done(tp):
            await self._complete_reassignment(tp)
            return
        if tp in ctx.states:
            await self._write_state(tp, lambda current: (current.leader, current.isr))
        batch.tell_replicas(ctx, tp)
        for replica in moving[1]:
            if replica in ctx.live:
                batch.leader_and_isr[replica][tp] = True

    def _reassignment_done(self, tp: TopicPartition) -> bool:
        """Every target replica is in the ISR (Kafka's isReassignmentComplete)."""
        state = self._ctx.states.get(tp)
        return state is not None and set(self._ctx.reassigning[tp]) <= set(state.value.isr)

    async def _complete_reassignment(self, tp: TopicPartition) -> None:
        """The target replicas are in sync: they become the partition's replicas (the
        leader moved among them if it is not), the others leave the ISR and are stopped
        and deleted; then the topic znode drops the adding and removing replicas and
        /admin/reassign_partitions the partition. Each step is done again by a controller
        that takes over before the last."""
        ctx = self._ctx
        fail_point("reassignment-before-completion")
        target = ctx.reassigning.pop(tp)
        replicas, _, _ = ctx.assigned(tp)
        # In memory first, as Kafka's: the requests name the target replicas.
        ctx.assignments[tp[0]] = ctx.assignments[tp[0]].with_partition(tp[1], target, (), ())
        batch = _Batch()
        await self._drop_replicas(tp, set(replicas) - set(target), batch)
        self._send(batch)
        await self._write_replicas(tp, target, (), ())
        await self._zk(self.store.remove_partition_reassignments,
                       lambda done, asked: done == tp and tuple(asked) == target,
                       controller_epoch_version=self._election.epoch_zk_version)
        log.info("controller %d: %s-%d reassigned to %s", self.broker_id, *tp, list(target))

    async def _write_replicas(self, tp: TopicPartition, replicas: tuple[int, ...],
                              adding: tuple[int, ...], removing: tuple[int, ...]) -> None:
        ctx = self._ctx
        ctx.assignments[tp[0]] = ctx.assignments[tp[0]].with_partition(tp[1], replicas, adding, removing)
        await self._zk(self.store.set_partition_replicas, *tp, replicas, adding, removing,
                       controller_epoch_version=self._election.epoch_zk_version)

    async def _drop_replicas(self, tp: TopicPartition, dropped: set[int], batch: _Batch) -> None:
        """Replicas no longer assigned to the partition leave its ISR, with a new leader
        epoch (the leader replaced by the first assigned replica in the ISR when it is
        dropped or not live), and are stopped and deleted (Kafka's OfflineReplica and
        ReplicaDeletionStarted); the replicas left are told."""
        ctx = self._ctx
        replicas = ctx.replicas(tp)

        def decide(current: LeaderAndIsr):
            isr = tuple(member for member in current.isr if member not in dropped)
            if not isr:
                log.warning("controller %d: %s-%d would have no in-sync replica without %s: "
                            "its state is kept", self.broker_id, *tp, sorted(dropped))
                return None
            leader = current.leader
            if leader not in replicas or not ctx.eligible(leader):
                leader = next((r for r in replicas if r in isr and ctx.eligible(r)), NO_LEADER)
            return leader, isr

        if tp in ctx.states:
            await self._write_state(tp, decide)
        batch.tell_replicas(ctx, tp)
        for replica in dropped:
            if replica in ctx.live:
                batch.stop_replica[replica][tp] = True

    # -- automatic preferred leader elections ------------------------------------------
    def _schedule_rebalance(self) -> None:
        if not self.config.auto_leader_rebalance_enable:
            return
        self._rebalance_timer = self.clock.call_later(
            self.config.leader_imbalance_check_interval_seconds, self._rebalance_due)

    def _rebalance_due(self) -> None:
        self._rebalance_timer = None
        if self.is_active and not self._stopped:
            self._submit(self._rebalance)
            self._schedule_rebalance()

    async def _rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per broker, when more than
        leader.imbalance.per.broker.percentage of the partitions it is preferred for are
        led by others, preferred elections for those."""
        if not self.is_active:
            return
        ctx = self._ctx
        batch = _Batch()
        for broker_id in sorted(ctx.live):
            if not ctx.eligible(broker_id):
                continue
            preferred = [tp for tp in ctx.partitions() if tp in ctx.states and tp[0] not in ctx.deleting
                         and tp not in ctx.reassigning and ctx.replicas(tp)[:1] == (broker_id,)]
            imbalanced = [tp for tp in preferred if ctx.states[tp].value.leader != broker_id]
            if not preferred or len(imbalanced) * 100 <= \
                    self.config.leader_imbalance_per_broker_percentage * len(preferred):
                continue
            log.info("controller %d: broker %d leads %d of its %d preferred partitions: "
                     "rebalancing", self.broker_id, broker_id,
                     len(preferred) - len(imbalanced), len(preferred))
            for tp in imbalanced:
                if await self._elect_preferred(tp) == ErrorCode.NONE:
                    batch.tell_replicas(ctx, tp)
        self._send(batch)

    # -- requests to brokers -----------------------------------------------------------
    def _send(self, batch: _Batch) -> list[asyncio.Future]:
        """Queues the batch's requests; the futures of its StopReplicas."""
        ctx = self._ctx
        for broker_id in batch.full_leader_and_isr:
            hosted = {tp: batch.leader_and_isr[broker_id].get(tp, False)
                      for tp in ctx.partitions()
                      if broker_id in ctx.replicas(tp) and tp in ctx.states
                      and tp[0] not in ctx.deleting}
            batch.leader_and_isr[broker_id] = hosted
        for broker_id, partitions in sorted(batch.leader_and_isr.items()):
            if broker_id in ctx.live and (partitions or broker_id in batch.full_leader_and_isr):
                full = broker_id in batch.full_leader_and_isr
                self._channels.send(broker_id, LEADER_AND_ISR, LEADER_AND_ISR_VERSION,
                                    self._leader_and_isr(broker_id, partitions, full))
        if batch.update_metadata_all:
            partitions = ctx.partitions()
        else:
            partitions = sorted(batch.update_metadata)
        if partitions or batch.update_metadata_all or batch.brokers_changed:
            for broker_id in sorted(ctx.live):
                self._channels.send(broker_id, UPDATE_METADATA, UPDATE_METADATA_VERSION,
                                    self._update_metadata(broker_id, partitions))
        stops = []
        for broker_id, partitions in sorted(batch.stop_replica.items()):
            if broker_id in ctx.live:
                stops.append(self._channels.send(broker_id, STOP_REPLICA, STOP_REPLICA_VERSION,
                                                 self._stop_replica(broker_id, partitions)))
        return stops

    def _leader_and_isr(self, broker_id: int, partitions: dict[TopicPartition, bool],
                        full: bool):
        ctx = self._ctx
        topics: dict[str, list] = defaultdict(list)
        leaders = set()
        for (topic, partition), is_new in sorted(partitions.items()):
            state, zk_version = ctx.states[(topic, partition)]
            assignment = ctx.assignments[topic]
            leaders.add(state.leader)
            topics[topic].append(_LAIR.LeaderAndIsrPartitionState(
                partition_index=partition, controller_epoch=state.controller_epoch,
                leader=state.leader, leader_epoch=state.leader_epoch, isr=list(state.isr),
                partition_epoch=zk_version, replicas=list(assignment.partitions[partition]),
                adding_replicas=list(assignment.adding_replicas.get(partition, ())),
                removing_replicas=list(assignment.removing_replicas.get(partition, ())),
                is_new=is_new))
        live_leaders = []
        for leader in sorted(leaders):
            live = ctx.live.get(leader)
            endpoint = live and listener_endpoint(live.registration, self.config.inter_broker_listener.name)
            if endpoint:
                live_leaders.append(_LAIR.LeaderAndIsrLiveLeader(
                    broker_id=leader, host_name=endpoint[0], port=endpoint[1]))
        return _LAIR(
            controller_id=self.broker_id, controller_epoch=self.epoch,
            broker_epoch=ctx.live[broker_id].epoch, type=FULL if full else INCREMENTAL,
            topic_states=[_LAIR.LeaderAndIsrTopicState(
                topic_name=topic, topic_id=ctx.assignments[topic].topic_id,
                partition_states=states) for topic, states in topics.items()],
            live_leaders=live_leaders)

    def _update_metadata(self, broker_id: int, partitions: list[TopicPartition]):
        ctx = self._ctx
        topics: dict[str, list] = defaultdict(list)
        for topic, partition in partitions:
            if (topic, partition) not in ctx.states:
                continue
            state, zk_version = ctx.states[(topic, partition)]
            replicas = ctx.assignments[topic].partitions[partition]
            topics[topic].append(_UMR.UpdateMetadataPartitionState(
                partition_index=partition, controller_epoch=state.controller_epoch,
                leader=LEADER_DURING_DELETE if topic in ctx.deleting else state.leader,
                leader_epoch=state.leader_epoch, isr=list(state.isr), zk_version=zk_version,
                replicas=list(replicas),
                offline_replicas=[replica for replica in replicas if not ctx.eligible(replica)]))
        live_brokers = []
        for live_id, live in sorted(ctx.live.items()):
            live_brokers.append(_UMR.UpdateMetadataBroker(
                id=live_id, rack=live.registration.rack,
                endpoints=[_UMR.UpdateMetadataEndpoint(
                    port=listener.port, host=listener.host, listener=listener.name,
                    security_protocol=SECURITY_PROTOCOL_IDS.get(listener.security_protocol, 0))
                    for listener in live.registration.listeners]))
        return _UMR(
            controller_id=self.broker_id, controller_epoch=self.epoch,
            broker_epoch=ctx.live[broker_id].epoch,
            topic_states=[_UMR.UpdateMetadataTopicState(
                topic_name=topic, topic_id=ctx.assignments[topic].topic_id,
                partition_states=states) for topic, states in topics.items()],
            live_brokers=live_brokers)

    def _stop_replica(self, broker_id: int, partitions: dict[TopicPartition, bool]):
        ctx = self._ctx
        topics: dict[str, list] = defaultdict(list)
        for (topic, partition), delete in sorted(partitions.items()):
            state = ctx.states.get((topic, partition))
            epoch = EPOCH_DURING_DELETE if delete or state is None else state.value.leader_epoch
            topics[topic].append(_STOP.StopReplicaPartitionState(
                partition_index=partition, leader_epoch=epoch, delete_partition=delete))
        return _STOP(controller_id=self.broker_id, controller_epoch=self.epoch,
                     broker_epoch=ctx.live[broker_id].epoch,
                     topic_states=[_STOP.StopReplicaTopicState(topic_name=topic,
                                                               partition_states=states)
                                   for topic, states in topics.items()])


_ELECTION_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "the partition's leader is already the one this "
                                   "election would choose",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "the preferred replica is not live or not "
                                              "in the ISR",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "no replica of the partition is live",
}
