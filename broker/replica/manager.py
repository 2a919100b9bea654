"""A cluster broker's replicas, as Kafka's ReplicaManager keeps them: the controller's
LeaderAndIsr and StopReplica applied to the partitions, one follower fetcher per leader,
and a leader's ISR changes written to ZooKeeper.

- Requests from a controller older than the newest one seen are STALE_CONTROLLER_EPOCH;
  one addressed to an earlier registration of this broker (its broker epoch, the czxid of
  /brokers/ids/<id>) is STALE_BROKER_EPOCH.
- A partition state is applied when its leader epoch is newer than the partition's, or
  equal with a newer partition epoch (the state znode's version: an ISR change the
  controller made without a new leader); else it is STALE_CONTROLLER_EPOCH, as Kafka
  answers it. The first state of a partition in this process is applied at an epoch
  equal to the log's latest. A state that does not list this broker as a replica is
  UNKNOWN_TOPIC_OR_PARTITION.
- StopReplica stops fetching the partition; with delete, the replica leads no more (the
  requests waiting on it are woken and answer NOT_LEADER_OR_FOLLOWER) and its log goes.
- Leader: the partition leads with the given replicas and ISR; it is no longer fetched.
  Follower: it follows the given leader; its fetcher truncates it first. A partition of
  a coordinator's topic is loaded by that coordinator when it starts leading here and
  unloaded when it follows or stops (`broker.coordinator_runtime`).
- A follower the controller's metadata lists as offline for a partition (its broker not
  live, or in controlled shutdown) does not join the partition's ISR here, however
  caught up: Kafka's rule (KIP-841), which its ZooKeeper-era controller enforces.
- ISR changes by a leader go to ZooKeeper before they count where they could lose data:
  a shrink (followers not caught up for replica.lag.time.max.ms) is written first and only
  then applied, since the controller elects new leaders from the ISR it reads there; an
  expansion is applied at once (a larger ISR only holds the high watermark back) and
  written after. Both are conditional on the state znode's version; when another writer
  (the controller) got there first, the state is read again and the change is given up
  if the leadership moved on (the controller's LeaderAndIsr follows).
"""

from __future__ import annotations

import asyncio
import logging

from kazoo.exceptions import KazooException
from wire.error_codes import ErrorCode

from broker.zookeeper.layout import LeaderAndIsr
from broker.zookeeper.store import StaleVersion
from broker.errors import BrokerError
from broker.failpoints import fail_point
from broker.replica.fetcher import ReplicaFetcher

log = logging.getLogger("sluice.replicas")

_ISR_WRITE_BACKOFF_S = 0.5


class ReplicaManager:
    def __init__(self, broker):
        self._broker = broker
        self._config = broker.config
        self.local_id = broker.config.node_id
        self.controller_epoch = -1
        # Per led or followed partition: (controller epoch, state znode version) of the
        # state last applied or written; absent until the controller's first state.
        self._states: dict[tuple[str, int], tuple[int, int]] = {}
        self._isr_in_zk: dict[tuple[str, int], tuple[int, ...]] = {}  # the ISR ZooKeeper holds
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._isr_pending: set[tuple[str, int]] = set()  # led partitions whose ISR may have to change
        self._isr_wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self.isr_shrinks = self.isr_expands = 0  # made as leader (broker.metrics)

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._write_isr_changes()),
                       loop.create_task(self._check_lagging())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        await asyncio.gather(*(f.close() for f in fetchers), return_exceptions=True)

    # -- the controller's requests --------------------------------------------------------
    def _check_request(self, controller_epoch: int, broker_epoch: int) -> None:
        if controller_epoch < self.controller_epoch:
            raise BrokerError(ErrorCode.STALE_CONTROLLER_EPOCH,
                              f"controller epoch {controller_epoch} is older than {self.controller_epoch}")
        if 0 <= broker_epoch < self._broker.broker_epoch:
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH,
                              f"broker epoch {broker_epoch} is older than this registration's "
                              f"{self._broker.broker_epoch}")
        self.controller_epoch = controller_epoch

    async def become_leader_or_follower(self, controller_epoch: int, broker_epoch: int, states,
                                        leaders: dict[int, tuple[str, int]]) -> dict:
        """Apply LeaderAndIsr partition states, given as (topic, topic id, state); the
        error code per (topic, partition). `leaders`: the live leaders' endpoints."""
        self._check_request(controller_epoch, broker_epoch)
        results = {}
        for topic, topic_id, state in states:
            key = (topic, state.partition_index)
            try:
                results[key] = await self._apply_state(topic, topic_id, state, leaders)
            except BrokerError as exc:
                log.warning("%s-%d: cannot apply the controller's state: %s", topic,
                            state.partition_index, exc)
                results[key] = exc.code
        return results

    async def _apply_state(self, topic: str, topic_id, state, leaders) -> int:
        key = (topic, state.partition_index)
        if self.local_id not in state.replicas:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        partition = await self._open_replica(topic, topic_id, state.partition_index)
        applied = self._states.get(key)
        if applied is None:
            stale = state.leader_epoch < partition.leader_epoch
        else:
            stale = state.leader_epoch < partition.leader_epoch or (
                state.leader_epoch == partition.leader_epoch and state.partition_epoch <= applied[1])
        if stale:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self._states[key] = (state.controller_epoch, state.partition_epoch)
        self._isr_in_zk[key] = tuple(state.isr)
        coordinated = self._broker.coordinated_partitions(topic)
        if state.leader == self.local_id:
            self._stop_following(key)
            partition.make_leader(state.leader_epoch, list(state.replicas), list(state.isr),
                                  adding=state.adding_replicas, removing=state.removing_replicas)
            log.info("%s-%d: leader at epoch %d, replicas %s, ISR %s", topic, state.partition_index,
                     state.leader_epoch, list(state.replicas), list(state.isr))
            if coordinated is not None:
                coordinated.elected(partition)
            return ErrorCode.NONE
        partition.make_follower(state.leader, state.leader_epoch, list(state.replicas), list(state.isr),
                                adding=state.adding_replicas, removing=state.removing_replicas)
        if coordinated is not None:
            coordinated.resigned(state.partition_index)
        self._isr_pending.discard(key)
        if state.leader < 0:  # offline: nothing to follow until a leader is elected
            self._stop_following(key)
            return ErrorCode.NONE
        endpoint = leaders.get(state.leader)
        if endpoint is None:
            known = self._broker.metadata.broker(state.leader)
            endpoint = (known.host, known.port) if known else None
        if endpoint is None:
            log.warning("%s-%d: no endpoint of leader %d is known yet", topic, state.partition_index,
                        state.leader)
            self._stop_following(key)
            return ErrorCode.NONE
        self._follow(partition, state.leader, endpoint)
        log.info("%s-%d: follower of %d at epoch %d", topic, state.partition_index, state.leader,
                 state.leader_epoch)
        return ErrorCode.NONE

    async def _open_replica(self, topic: str, topic_id, index: int):
        """The local replica of topic-index, its log created (with the topic's configs from
        ZooKeeper) when this broker has none yet."""
        topics = self._broker.topics
        partition = topics.replica(topic, topic_id, index)
        if partition is not None:
            return partition
        try:
            configs = await asyncio.to_thread(self._broker.zk.topic_config, topic)
        except KazooException as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR,
                              f"cannot read the configs of {topic!r} from ZooKeeper: {exc!r}") from None
        return topics.replica(topic, topic_id, index) or topics.open_replica(topic, topic_id, index, configs)

    async def stop_replicas(self, controller_epoch: int, broker_epoch: int, partitions) -> dict:
        """Apply StopReplica: (topic, partition, leader epoch, delete) each; the error
        code per (topic, partition)."""
        self._check_request(controller_epoch, broker_epoch)
        results = {}
        for topic, index, leader_epoch, delete in partitions:
            if delete:
                fail_point("replica-stop-before-delete")
            key = (topic, index)
            self._stop_following(key)
            self._isr_pending.discard(key)
            coordinated = self._broker.coordinated_partitions(topic)
            if coordinated is not None:
                coordinated.resigned(index)
            try:
                partition = self._broker.topics.partition(topic, index)
            except BrokerError:
                results[key] = ErrorCode.NONE  # nothing here to stop, as Kafka answers it
                continue
            if 0 <= leader_epoch < partition.leader_epoch:
                results[key] = ErrorCode.FENCED_LEADER_EPOCH
                continue
            if delete:
                partition.stop()
                self._states.pop(key, None)
                self._isr_in_zk.pop(key, None)
                try:
                    self._broker.topics.delete_replica(topic, index)
                except BrokerError as exc:
                    results[key] = exc.code
                    continue
            results[key] = ErrorCode.NONE
        return results

    # -- fetchers -------------------------------------------------------------------------
    def _follow(self, partition, leader_id: int, endpoint: tuple[str, int]) -> None:
        self._stop_following(partition.key, keep_fetcher_of=leader_id)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and fetcher.address != tuple(endpoint):  # the leader moved
            self._close_fetcher(leader_id)
            fetcher = None
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(
                self.local_id, leader_id, endpoint[0], endpoint[1], self._config, self._broker.clock,
                self._broker.metrics, self._broker.follower_replication_quota,
                self._broker.inter_broker_security)
        fetcher.add(partition)

    def _stop_following(self, key, keep_fetcher_of: int | None = None) -> None:
        for leader_id, fetcher in list(self._fetchers.items()):
            if key in fetcher.keys:
                fetcher.remove(key)
                if not fetcher.keys and leader_id != keep_fetcher_of:
                    self._close_fetcher(leader_id)

    def _close_fetcher(self, leader_id: int) -> None:
        fetcher = self._fetchers.pop(leader_id)
        asyncio.get_running_loop().create_task(fetcher.close())

    # -- ISR changes ----------------------------------------------------------------------
    def admit_to_isr(self, partition, replica_id: int) -> bool:
        """Whether a caught-up follower joins a led partition's ISR here (then written):
        not while the controller lists its replica as offline, its broker gone or in
        controlled shutdown, as Kafka refuses those (KIP-841)."""
        state = self._broker.metadata.partition_state(*partition.key)
        if state is not None and replica_id in state.offline_replicas:
            return False
        self.isr_expands += 1
        self.isr_may_change(partition)
        return True

    def isr_may_change(self, partition) -> None:
        """A led partition's ISR grew here, or may have to shrink: write it."""
        self._isr_pending.add(partition.key)
        self._isr_wake.set()

    async def _check_lagging(self) -> None:
        """Every replica.lag.time.max.ms / 2, as Kafka's ISR expiration: led partitions with
        lagging followers get their ISR shrunk."""
        interval = self._config.replica_lag_time_max_ms / 2000
        while True:
            await self._broker.clock.sleep(interval)
            for partition in self._broker.topics.all_partitions():
                if partition.is_leader and partition.lagging_followers():
                    self.isr_may_change(partition)

    async def _write_isr_changes(self) -> None:
        while True:
            await self._isr_wake.wait()
            self._isr_wake.clear()
            pending, self._isr_pending = self._isr_pending, set()
            retry = set()
            for key in sorted(pending):
                try:
                    if not await self._write_isr(key):
                        retry.add(key)
                except (KazooException, StaleVersion, BrokerError) as exc:
                    log.info("%s-%d: ISR change not written yet: %s", key[0], key[1], exc)
                    retry.add(key)
            if retry:
                self._isr_pending |= retry
                await self._broker.clock.sleep(_ISR_WRITE_BACKOFF_S)
                self._isr_wake.set()

    async def _write_isr(self, key) -> bool:
        """Write the ISR the led partition `key` should have; False to try again later."""
        try:
            partition = self._broker.topics.partition(*key)
        except BrokerError:
            return True  # deleted meanwhile
        applied = self._states.get(key)
        if not partition.is_leader or applied is None:
            return True
        lagging = set(partition.lagging_followers())
        isr = tuple(sorted(set(partition.isr) - lagging))
        if isr == self._isr_in_zk.get(key):
            if lagging:
                partition.remove_from_isr(sorted(lagging))
                self.isr_shrinks += 1
            return True
        controller_epoch, version = applied
        epoch = partition.leader_epoch
        state = LeaderAndIsr(self.local_id, epoch, isr, controller_epoch)
        store = self._broker.zk
        try:
            new_version = await asyncio.to_thread(store.change_isr, key[0], key[1], state, version)
        except StaleVersion:
            found = await asyncio.to_thread(store.partition_state, *key)
            if found is None or found.value.leader != self.local_id or found.value.leader_epoch != epoch:
                return True  # the controller moved leadership on: its LeaderAndIsr follows
            if self._states.get(key) == applied:
                self._states[key] = (found.value.controller_epoch, found.zk_version)
            return False
        if partition.leader_epoch != epoch or self._states.get(key) != applied:
            return True  # a new state arrived while writing: it rules
        self._states[key] = (controller_epoch, new_version)
        self._isr_in_zk[key] = isr
        if lagging:
            partition.remove_from_isr(sorted(lagging))
            self.isr_shrinks += 1
        log.info("%s-%d: ISR now %s (leader epoch %d)", key[0], key[1], list(isr), epoch)
        return True
