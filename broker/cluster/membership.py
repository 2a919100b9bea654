"""A broker's membership of a ZooKeeper cluster: its session, its identity, joining and
leaving, as a ZooKeeper-mode Kafka broker does it.

- Start: connect (zookeeper.connection.timeout.ms); the cluster id is /cluster/id's (the
  first broker writes it). meta.properties in the data dir keeps broker.id and cluster.id;
  a data dir of another cluster or another broker id is refused (`InconsistentBroker`).
- Before serving, local replicas the cluster no longer has are removed: a topic deleted
  (or deleted and created again, a new topic id) while this broker was down, or a
  partition no longer assigned to it.
- Join: register the ephemeral /brokers/ids/<id> (its czxid is the broker epoch), start
  the replica manager, claim a first block of producer ids, and campaign for controller.
  Until the controller's first UpdateMetadata, Metadata lists this broker from the moment
  it listens, and the brokers registered in ZooKeeper once it registered
  (`MetadataCache.seed`), never no broker.
  An id registered by another session may be this broker's own before a crash, which
  ZooKeeper drops once the session expires: the broker waits for that, at most
  zookeeper.session.timeout.ms and a margin (saying so), and then registers; an id
  still registered after it is a live broker's (`InconsistentBroker`). (Kafka's broker
  exits at once instead, failing a restart within the session timeout of a crash.)
  When the session expires (ZooKeeper lost us for zookeeper.session.timeout.ms), the
  broker registers again once reconnected, with a new broker epoch; the controller treats
  it as a restarted broker.
- Coordination in doubt: once the session was lost, or the broker stood still (a stall of
  its event loop, broker.clock.StallWatch, such as a SIGSTOP past the session), the
  controller may have moved its leaderships without this broker having heard of it yet.
  Its coordinators suspend their partitions at once and each is checked against its
  state in ZooKeeper (read again every half second while it cannot be): still led
  here at the coordinator's epoch, coordination goes on; else it is resigned without
  waiting for the controller's LeaderAndIsr (broker.coordinator_runtime).
- Topic configs: a local topic's are refreshed from /config/topics at start, and on every
  /config/changes notification naming it; so are users' SCRAM credentials
  (/config/users, broker.security.scram_credentials). The controller hears of every
  topic's change too (unclean.leader.election.enable may now allow a leader). Dynamic
  broker configs (/config/brokers/<default> and /config/brokers/<id>) are read before
  the logs open and again on each notification naming them; keys this broker cannot
  take are logged and left out, as Kafka leaves out invalid dynamic configs.
- Producer ids come in blocks claimed in /latest_producer_id_block; the next block is
  claimed in the background before the current one runs out, so that InitProducerId never
  waits on ZooKeeper (COORDINATOR_LOAD_IN_PROGRESS, retriable, when none could be claimed).
- Leave (SIGTERM): with controlled.shutdown.enable, ask the controller to move this
  broker's leaderships away (ControlledShutdown, up to controlled.shutdown.max.retries
  more times, controlled.shutdown.retry.backoff.ms apart), then stop fetching, resign as
  controller and close the session.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import logging
import uuid
from urllib.parse import unquote

from kazoo.exceptions import KazooException
from kazoo.protocol.states import KazooState
from sluice_client import BrokerConnection, ClientError
from wire.error_codes import ErrorCode
from wire.messages import CONTROLLED_SHUTDOWN

from broker.cluster.admin import broker_entity
from broker.cluster.metadata import BrokerEndpoint
from broker.zookeeper.layout import CONFIG_CHANGES, DEFAULT_ENTITY, BrokerRegistration, Listener
from broker.zookeeper.store import BrokerIdInUse, StaleVersion, ZkStore
from broker.config import ConfigError
from broker.dynamic_configs import CLUSTER_DEFAULT
from broker.errors import BrokerError
from broker.producer_ids import BLOCK_SIZE
from broker.storage.checkpoint import write_atomically
from broker.throttled_log import ThrottledLog
from broker.replica.topics import validate_topic_name

log = logging.getLogger("sluice.cluster")

_CONTROLLED_SHUTDOWN_VERSION = 3
_CONFIRM_RETRY_S = 0.5  # between two attempts to read the coordinator partitions' states
_CONFIG_CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's: /config/changes notifications are purged after it
_KEPT_CREATION_FAILURES = 1024  # auto-creation errors remembered, for that many names at most
# How long past zookeeper.session.timeout.ms a crashed broker's registration may last:
# ZooKeeper expires a session up to a tick (tickTime, 3 s by default) after its timeout.
STALE_REGISTRATION_MARGIN_S = 5.0


class InconsistentBroker(RuntimeError):
    """This broker cannot join: ZooKeeper cannot be reached, the data dir belongs to another
    cluster or another broker id, or a live broker has its id."""


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID, URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class ClusterMembership:
    def __init__(self, broker):
        self._broker = broker
        self._config = config = broker.config
        self.zk = ZkStore(config.zookeeper_connect, config.zookeeper_session_timeout_ms)
        self.controller = None
        self._producer_blocks: list[int] = []  # first ids of claimed, unused blocks
        self._claiming: asyncio.Task | None = None
        self._creating: set[str] = set()  # topics auto-created now
        # name -> the BrokerError of its last failed auto-creation (the newest kept)
        self._creation_failures: collections.OrderedDict[str, BrokerError] = collections.OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._session_lost = False
        self._leaving = False  # set once leave() began: closing the session is no doubt
        self._tasks: set[asyncio.Task] = set()
        self._config_seen = -1  # the last /config/changes notification applied
        self._config_lock = asyncio.Lock()
        self._confirming: asyncio.Task | None = None  # reads the suspended partitions' states
        self._confirm_failures = ThrottledLog(log, logging.WARNING, burst=1, window=60.0)
        broker.stalls.on_stall(self._stood_still)

    # -- start ----------------------------------------------------------------------------
    async def connect(self) -> None:
        self._loop = asyncio.get_running_loop()
        timeout = (self._config.zookeeper_connection_timeout_ms or
                   self._config.zookeeper_session_timeout_ms) / 1000
        try:
            await asyncio.to_thread(self.zk.start, timeout)
        except Exception as exc:  # kazoo's timeout is a bare Exception subclass
            raise InconsistentBroker(f"cannot connect to ZooKeeper at {self._config.zookeeper_connect} "
                                     f"within {timeout:g} s: {exc}") from None
        self.zk.client.add_listener(self._session_state)

    async def read_broker_configs(self) -> None:
        """The dynamic broker configs for every broker and for this one, read once the
        changes noted so far are counted as seen: any later one is applied as it comes."""
        self._config_seen = max((seq for seq, _, _ in await asyncio.to_thread(self.zk.config_changes, -1)),
                                default=-1)
        for level in (CLUSTER_DEFAULT, str(self._config.node_id)):
            await self._apply_broker_configs(level)

    async def _apply_broker_configs(self, level: str) -> None:
        entity = broker_entity(level)
        dynamic, valid = self._broker.dynamic_configs, {}
        for key, value in (await asyncio.to_thread(self.zk.broker_config, entity)).items():
            try:
                valid.update(dynamic.parse({key: value}))
            except ConfigError as exc:
                log.warning("/config/brokers/%s: leaving out %s", entity, exc)
        if valid != dynamic.levels.get(level, {}):
            dynamic.set_level(level, valid)
            self._broker.topics.apply_broker_defaults()
            log.info("dynamic broker configs of %s now %s", entity, valid)

    def check_meta_properties(self, path: str, props: dict[str, str]) -> str:
        """The cluster's id, checked against (or first written to) meta.properties."""
        node_id = self._config.node_id
        cluster_id = self.zk.get_or_create_cluster_id(props.get("cluster.id") or new_cluster_id())
        if props.get("cluster.id") not in (None, cluster_id):
            raise InconsistentBroker(
                f"the data dir {self._config.data_dir} belongs to cluster {props['cluster.id']}, but "
                f"ZooKeeper at {self._config.zookeeper_connect} holds cluster {cluster_id}")
        remembered = props.get("broker.id", props.get("node.id"))
        if remembered is not None and remembered != str(node_id):
            raise InconsistentBroker(f"the data dir {self._config.data_dir} belongs to broker "
                                     f"{remembered}, not broker.id {node_id}")
        if props.get("cluster.id") is None or remembered is None:
            props = {"version": "0", "broker.id": str(node_id), "cluster.id": cluster_id}
            write_atomically(path, "".join(f"{k}={v}\n" for k, v in props.items()).encode())
        return cluster_id

    async def remove_stray_replicas(self) -> None:
        topics = self._broker.topics
        for name, topic in list(topics.topics.items()):
            found = await asyncio.to_thread(self.zk.topic_assignment, name)
            if found is None or found.value.topic_id != topic.topic_id:
                log.info("removing the local logs of topic %s (id %s): the cluster no longer has it",
                         name, topic.topic_id)
                topics.delete(name)
                continue
            for index in list(topic.partitions):
                if self._config.node_id not in found.value.partitions.get(index, ()):
                    log.info("removing the local replica %s-%d: no longer assigned to this broker",
                             name, index)
                    topics.delete_replica(name, index)

    async def _refresh_topic_configs(self) -> None:
        """Local topics take their configs from ZooKeeper (changed while this broker was down)."""
        topics = self._broker.topics
        for name, topic in list(topics.topics.items()):
            configs = await asyncio.to_thread(self.zk.topic_config, name)
            if configs != topic.configs:
                self._apply_topic_configs(name, configs)

    def _apply_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        try:
            self._broker.topics.set_configs(name, configs)
            log.info("topic %s: configs now %s", name, configs)
        except BrokerError as exc:
            log.warning("topic %s: cannot apply its configs %s from ZooKeeper: %s", name, configs, exc)

    def _config_changes_watch(self, children) -> None:
        """kazoo's thread: /config/changes has new children."""
        self._loop.call_soon_threadsafe(self._spawn, self._apply_config_changes())

    async def _apply_config_changes(self) -> None:
        """Apply the config changes (topics, brokers, users' credentials and client quotas)
        noted since the last ones applied, one pass at a time; notifications older than Kafka's 15 minutes are purged on the way."""
        async with self._config_lock:
            try:
                changes = await asyncio.to_thread(self.zk.config_changes, self._config_seen)
                for sequence, change, created_ms in changes:
                    kind, _, name = change.entity_path.partition("/")
                    if kind == "topics":
                        if name in self._broker.topics.topics:
                            self._apply_topic_configs(name, await asyncio.to_thread(self.zk.topic_config, name))
                        if self.controller is not None:
                            self.controller.topic_configs_changed(name)
                    elif kind in ("users", "clients"):
                        await self._broker.client_quotas.refresh(change.entity_path)
                        if kind == "users" and "/" not in name and name != DEFAULT_ENTITY:
                            await self._broker.scram.refresh(unquote(name))
                    elif kind == "brokers" and name in (DEFAULT_ENTITY, str(self._config.node_id)):
                        await self._apply_broker_configs(CLUSTER_DEFAULT if name == DEFAULT_ENTITY else name)
                    self._config_seen = sequence
                    if self._broker.clock.wall_ms() - created_ms > _CONFIG_CHANGE_EXPIRY_MS:
                        await asyncio.to_thread(self.zk.delete_config_change, sequence)
            except KazooException as exc:
                log.warning("cannot read config changes from ZooKeeper: %s", exc)

    async def join(self) -> None:
        await self._refresh_topic_configs()
        self.zk.client.ChildrenWatch(CONFIG_CHANGES, self._config_changes_watch)
        await self._register()
        await self._list_registered_brokers()
        self._broker.replicas.start()
        await self._claim_producer_block()
        from broker.cluster.controller import Controller
        self.controller = Controller(broker_id=self._config.node_id, store=self.zk,
                                     config=self._config, clock=self._broker.clock,
                                     security=self._broker.inter_broker_security)
        self._broker.controller = self.controller
        await self.controller.start()

    def _registration(self) -> BrokerRegistration:
        return BrokerRegistration(
            tuple(Listener(l.name, *self._config.advertised_endpoint(l.name), l.security_protocol)
                  for l in self._config.listeners), self._broker.clock.wall_ms(), self._config.broker_rack)

    def list_itself(self) -> None:
        """The listeners are bound: Metadata lists this broker until the controller speaks."""
        self._broker.metadata.seed({self._config.node_id: _endpoints(self._config.node_id, self._registration())})

    async def _list_registered_brokers(self) -> None:
        """Metadata lists the brokers registered now too, until the controller speaks."""
        live = await asyncio.to_thread(self.zk.live_brokers)
        self._broker.metadata.seed({broker_id: _endpoints(broker_id, found.registration)
                                    for broker_id, found in live.items()})

    async def _register(self) -> None:
        registration = self._registration()
        node_id = self._config.node_id
        bound = self._config.zookeeper_session_timeout_ms / 1000 + STALE_REGISTRATION_MARGIN_S
        for waited in (False, True):
            try:
                self._broker.broker_epoch = await asyncio.to_thread(self.zk.register_broker, node_id,
                                                                    registration)
                break
            except BrokerIdInUse as exc:
                if waited:
                    raise InconsistentBroker(f"{exc}, still after {bound:g} s: another broker runs "
                                             f"with broker.id {node_id}") from None
                log.warning("%s: waiting up to %g s (zookeeper.session.timeout.ms plus %g s) for it "
                            "to expire, as a crashed broker's session does",
                            exc, bound, STALE_REGISTRATION_MARGIN_S)
                await asyncio.to_thread(self.zk.wait_until_unregistered, node_id, bound)
        log.info("registered as broker %d (broker epoch %d)", node_id, self._broker.broker_epoch)

    def _session_state(self, state) -> None:
        """kazoo's thread: a lost session puts coordination in doubt, and means a new
        registration once reconnected."""
        if state == KazooState.LOST:
            self._session_lost = True
            self._loop.call_soon_threadsafe(self.doubt_coordination, "the ZooKeeper session expired")
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self._loop.call_soon_threadsafe(self._spawn, self._reregister())

    def _spawn(self, coroutine) -> asyncio.Task:
        task = self._loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _reregister(self) -> None:
        """Register again with the new session, trying for as long as a session lasts
        (not after finding a live broker with this id)."""
        attempts = max(1, self._config.zookeeper_session_timeout_ms // 1000)
        for attempt in range(1, attempts + 1):
            try:
                await self._register()
                return
            except InconsistentBroker as exc:
                log.error("cannot register again after the ZooKeeper session expired: %s", exc)
                break
            except KazooException as exc:
                log.warning("cannot register again after the ZooKeeper session expired "
                            "(attempt %d of %d): %s", attempt, attempts, exc)
            await self._broker.clock.sleep(1.0)
        log.error("broker %d stays unregistered: the controller will not give it partitions "
                  "until it restarts", self._config.node_id)

    # -- coordination in doubt ---------------------------------------------------------------
    def _stood_still(self, seconds: float) -> None:
        self.doubt_coordination(f"the broker stood still for {seconds:.1f} s")

    def doubt_coordination(self, reason: str) -> None:
        """This broker may have been deposed without being told: its coordinators stop
        answering for their partitions until ZooKeeper confirms that it leads them."""
        if self._leaving:
            return
        coordinators = (self._broker.groups.runtime.coordinated,
                        self._broker.transactions.runtime.coordinated)
        for coordinated in coordinators:
            coordinated.suspend()
        if not any(coordinated.suspended() for coordinated in coordinators):
            return
        log.warning("%s: suspending coordination until ZooKeeper confirms the leadership of %s", reason,
                    ", ".join(f"{c.topic}-{i}" for c in coordinators for i in c.suspended()))
        if self._confirming is not None:
            self._confirming.cancel()  # its reads may predate this doubt
        self._confirming = self._spawn(self._confirm_leadership(coordinators))

    async def _confirm_leadership(self, coordinators) -> None:
        """Read the state of every suspended partition from ZooKeeper and tell its
        coordinator, until none is left suspended."""
        node_id = self._config.node_id
        while pending := [(c, i) for c in coordinators for i in c.suspended()]:
            try:
                for coordinated, index in pending:
                    found = await asyncio.to_thread(self.zk.partition_state, coordinated.topic, index)
                    if found is None:
                        coordinated.confirm(index, False, None)
                    else:
                        coordinated.confirm(index, found.value.leader == node_id, found.value.leader_epoch)
            except KazooException as exc:
                self._confirm_failures("cannot read the coordinator partitions' states from ZooKeeper "
                                       "(%r); trying again every %g s", exc, _CONFIRM_RETRY_S)
                await self._broker.clock.sleep(_CONFIRM_RETRY_S)

    # -- producer ids -----------------------------------------------------------------------
    def claim_producer_ids(self, size: int) -> int:
        """ProducerIdAllocator's reserve: a claimed block's first id, without waiting."""
        if not self._producer_blocks:
            self._prefetch(size)
            raise BrokerError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                              "claiming a block of producer ids in ZooKeeper; try again")
        start = self._producer_blocks.pop(0)
        self._loop.call_later(0, self._prefetch, size)
        return start

    def _prefetch(self, size: int) -> None:
        if self._producer_blocks or (self._claiming and not self._claiming.done()):
            return
        self._claiming = self._loop.create_task(self._claim_producer_block(size))

    async def _claim_producer_block(self, size: int = BLOCK_SIZE) -> None:
        try:
            block = await asyncio.to_thread(self.zk.claim_producer_id_block, self._config.node_id, size)
        except (KazooException, StaleVersion) as exc:
            log.warning("cannot claim a block of producer ids: %s", exc)
            return
        self._producer_blocks.append(block.block_start)

    # -- topics ---------------------------------------------------------------------------
    def create_topic_soon(self, name: str) -> None:
        """Create `name` with the broker's defaults in the background (a Metadata request's
        auto-creation); one attempt at a time per name. Raises the error of the name's last
        attempt while it stands, as Kafka's Metadata answers a failed creation's error (an
        attempt starts again meanwhile: the cause may have gone, e.g. brokers came back)."""
        validate_topic_name(name)
        if name not in self._creating:
            self._creating.add(name)
            self._spawn(self._auto_create(name))
        failed = self._creation_failures.get(name)
        if failed is not None:
            raise failed

    async def _auto_create(self, name: str) -> None:
        cfg = self._config
        failures = self._creation_failures
        try:
            await self._broker.topic_admin.create_topic(name, cfg.num_partitions, cfg.default_replication_factor,
                                                        None, {}, False, 0)
            log.info("auto-created topic %s", name)
            failures.pop(name, None)
        except BrokerError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:
                failures.pop(name, None)
            else:
                log.info("cannot auto-create topic %s: %s", name, exc)
                failures[name] = exc
                failures.move_to_end(name)
                while len(failures) > _KEPT_CREATION_FAILURES:
                    failures.popitem(last=False)
        finally:
            self._creating.discard(name)

    # -- leave ----------------------------------------------------------------------------
    async def leave(self) -> None:
        self._leaving = True
        if self._config.controlled_shutdown_enable and self._broker.broker_epoch >= 0:
            await self._controlled_shutdown()
        await self._broker.replicas.stop()
        if self.controller is not None:
            await self.controller.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.to_thread(self.zk.close)

    async def _controlled_shutdown(self) -> None:
        cfg = self._config
        attempts = cfg.controlled_shutdown_max_retries + 1
        for attempt in range(1, attempts + 1):
            remaining = await self._ask_controller()
            if remaining == []:
                log.info("controlled shutdown: the controller moved every leadership away")
                return
            if remaining and not any(self._movable(topic, index) for topic, index in remaining):
                log.info("controlled shutdown: no other in-sync replica can take over the %d "
                         "partition(s) still led here; shutting down", len(remaining))
                return
            if attempt < attempts:
                await self._broker.clock.sleep(cfg.controlled_shutdown_retry_backoff_ms / 1000)
        log.warning("controlled shutdown did not complete after %d attempt(s); shutting down anyway",
                    attempts)

    def _movable(self, topic: str, index: int) -> bool:
        """Whether another live broker is in the partition's ISR (it could lead it), as this
        broker's metadata view says."""
        state = self._broker.metadata.partition_state(topic, index)
        return state is not None and any(
            r != self._config.node_id and r not in state.offline_replicas for r in state.isr)

    async def _ask_controller(self) -> list | None:
        """The partitions the controller could not move, or None when it could not be asked."""
        metadata = self._broker.metadata
        controller = metadata.broker(metadata.controller_id)
        if controller is None:
            log.info("controlled shutdown: no controller known")
            return None
        connection = BrokerConnection(controller.host, controller.port,
                                      client_id=f"broker-{self._config.node_id}-shutdown",
                                      request_timeout=self._config.controller_socket_timeout_ms / 1000,
                                      security=self._broker.inter_broker_security)
        try:
            response = await connection.request(CONTROLLED_SHUTDOWN, _CONTROLLED_SHUTDOWN_VERSION,
                                                CONTROLLED_SHUTDOWN.request(broker_id=self._config.node_id,
                                                                            broker_epoch=self._broker.broker_epoch))
        except ClientError as exc:
            log.info("controlled shutdown: cannot ask controller %d: %s", controller.node_id, exc)
            return None
        finally:
            await connection.close()
        if response.error_code != ErrorCode.NONE:
            log.info("controlled shutdown: controller %d answered %s", controller.node_id,
                     ErrorCode(response.error_code).name)
            return None
        remaining = [(p.topic_name, p.partition_index) for p in response.remaining_partitions]
        if remaining:
            log.info("controlled shutdown: %d partition(s) still led here", len(remaining))
        return remaining


def _endpoints(broker_id: int, registration: BrokerRegistration) -> dict[str, BrokerEndpoint]:
    """A registered broker's endpoint per listener, as the metadata view keeps them."""
    return {l.name: BrokerEndpoint(broker_id, l.host, l.port, registration.rack)
            for l in registration.listeners}
