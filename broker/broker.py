"""The broker: owns topics and logs, decodes requests, runs handlers, schedules upkeep.

Requests are decoded here and handed to the handler of their API family
(`broker/handlers/`), which returns a response body. A request the codec cannot parse
closes its connection, except an ApiVersions request at an unknown version, which gets
UNSUPPORTED_VERSION with the versions we do support (so the client can retry lower).
Bytes after a request body's last field are ignored, as Kafka ignores them.
"""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import logging
import os
from time import perf_counter

from wire.messages import API_VERSIONS, SASL_HANDSHAKE
from wire.primitives import DecodeError
from wire.protocol import UnsupportedRequest, decode_request, encode_response_writer

from broker import handlers
from broker.client_quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, ClientQuotaManager,
                                   ClientQuotas, ControllerMutationQuotaManager, throttle_ms)
from broker.clock import SYSTEM_CLOCK, Clock, StallWatch
from broker.config import BrokerConfig
from broker.dynamic_configs import DynamicBrokerConfigs
from broker.cluster.metadata import LocalMetadata, MetadataCache
from broker.errors import BrokerError
from broker.groups import offsets_log
from broker.groups.coordinator import GroupCoordinator
from broker.metrics import PURGATORIES, BrokerMetrics
from broker.cluster.admin import ClusterTopicAdmin
from broker.cluster.membership import ClusterMembership, new_cluster_id
from broker.producer_ids import ProducerIdAllocator, local_block_reserver
from broker.quota import Quota
from broker.fetch_sessions import FetchSessionCache
from broker.replica.delayed import DelayedOperations
from broker.replica.manager import ReplicaManager
from broker.handlers.sasl import AuthenticationFailed, raw_token
from broker.security.inter_broker import inter_broker_security
from broker.security.acl_store import LocalAcls, ZkAcls
from broker.security.acls import Authorizer
from broker.security.listeners import endpoints
from broker.security.scram_credentials import ScramCredentials
from broker.handler_results import CloseConnection, ResponseLater, Throttled
from broker.server import KafkaServer, Limits
from broker.storage.checkpoint import write_atomically
from broker.storage.cleaner import LogCleaner
from broker.throttled_log import ThrottledLog
from broker.topic_admin import LocalTopicAdmin
from broker.replica.topics import TopicManager
from broker.transactions import txn_log
from broker.transactions.coordinator import TransactionCoordinator

log = logging.getLogger("sluice.broker")

VERSION = "0.1.0"
_CHECKPOINT_INTERVAL_S = 5.0
_FLUSH_CHECK_INTERVAL_S = 1.0
_SESSION_CHECK_INTERVAL_S = 0.25
_STALL_CHECK_INTERVAL_S = 0.25


class DataDirInUse(OSError):
    """Another process runs a broker on this data directory."""


def lock_data_dir(data_dir: str) -> int:
    """An exclusive lock on `<data_dir>/.lock`, as Kafka takes one on each log directory:
    two brokers on one directory would corrupt each other's logs and checkpoints. The
    descriptor holds the lock until it is closed (or the process dies)."""
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise DataDirInUse(f"the data dir {data_dir} is in use by another broker ({path} is locked)") from None
    return fd


class _EncodedLater:
    """A handler's awaitable response, encoded once it is ready. A coroutine wrapping the
    handler's, dropped before it ran (its connection closed while responses ahead of it
    waited), would leave the handler's coroutine never awaited: closing this closes both."""

    __slots__ = ("_encoding", "_response")

    def __init__(self, encoding, response):
        self._encoding = encoding
        self._response = response

    def __await__(self):
        return self._encoding.__await__()

    def close(self) -> None:
        self._encoding.close()
        if inspect.iscoroutine(self._response):
            self._response.close()


class Broker:
    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        self.clock = clock
        self.stalls = StallWatch(clock)  # started with the upkeep tasks, one of them checking it
        self.node_id = config.node_id
        self.dynamic_configs = DynamicBrokerConfigs(config)
        # Replication throttles (the rates are dynamic configs): what this broker sends as
        # the leader of throttled replicas, and what it fetches as their follower.
        self.leader_replication_quota = Quota(clock, lambda: config.leader_replication_throttled_rate)
        self.follower_replication_quota = Quota(clock, lambda: config.follower_replication_throttled_rate)
        self.metrics = BrokerMetrics(self)  # counters always; the endpoint with metrics.port
        self.delayed = DelayedOperations(clock)  # fetches and acks=all produces waiting on partitions
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots, clock)
        self.broker_epoch = -1  # in a cluster: the czxid of this broker's registration
        self.controller = None  # in a cluster: this broker's controller (active or not), once joined
        self.authorizer = Authorizer.from_config(config)  # None: every request is allowed
        if config.cluster_mode:
            self._set_up_cluster_broker()
        else:
            self._set_up_single_node()
        self.served_versions = handlers.served_versions(self.served_apis)  # ApiVersions' answer
        # Log compaction (log.cleaner.enable): one cleaner task over every local log.
        self.cleaner = LogCleaner(config, lambda: [p.log for p in self.topics.all_partitions()], clock) \
            if config.log_cleaner_enable and config.log_cleaner_threads > 0 else None
        self.groups = GroupCoordinator(self)
        self.transactions = TransactionCoordinator(self)
        self.scram = ScramCredentials(config.data_dir)
        self.client_quotas = ClientQuotas(config.data_dir)
        # What producers send and consumers fetch, each within its client quota.
        self.produce_quotas, self.fetch_quotas = (
            ClientQuotaManager(self.client_quotas, key, clock, config.quota_window_num,
                               config.quota_window_size_seconds) for key in (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE))
        # The time spent handling each client's requests (request_percentage: Kafka bounds
        # its throttle time to one window).
        self.request_quotas = ClientQuotaManager(
            self.client_quotas, REQUEST_PERCENTAGE, clock, config.quota_window_num, config.quota_window_size_seconds,
            max_throttle_s=config.quota_window_size_seconds)
        # The partitions created and deleted by CreateTopics, CreatePartitions, DeleteTopics.
        self.mutation_quotas = ControllerMutationQuotaManager(
            self.client_quotas, clock, config.controller_quota_window_num, config.controller_quota_window_size_seconds)
        bound, self.sasl_listeners = endpoints(config, self.scram)  # ConfigError for a bad setting
        self.server = KafkaServer(self.handle_frame, bound, Limits(
            max_request_bytes=config.socket_request_max_bytes,
            max_connections=config.max_connections,
            max_connections_per_ip=config.max_connections_per_ip,
            per_ip_overrides=config.max_connections_per_ip_overrides,
            idle_ms=config.connections_max_idle_ms,
            queued_max_requests=config.queued_max_requests,
            sasl_max_receive_bytes=config.sasl_server_max_receive_size))
        self._tasks: list[asyncio.Task] = []
        self._data_dir_lock = -1
        self.clean_start = False

    def _set_up_cluster_broker(self) -> None:
        """A cluster broker: its replicas follow the controller, its metadata is what the
        controller sends, and topics are administered in ZooKeeper."""
        config = self.config
        self.served_apis = handlers.CLUSTER_SERVED_APIS
        self._handlers = {**handlers.HANDLERS, **handlers.CLUSTER_HANDLERS}
        self.replicas = ReplicaManager(self)
        self.metadata = MetadataCache(config.node_id, config.inter_broker_listener.name)
        self.topics = TopicManager(config, self.delayed, self.clock, self.replicas.admit_to_isr,
                                   lambda topic, p: self.metadata.partition_state(topic, p) is not None)
        self.cluster = ClusterMembership(self)
        self.zk = self.cluster.zk
        self.topic_admin = ClusterTopicAdmin(self)
        self.producer_ids = ProducerIdAllocator(self.cluster.claim_producer_ids)
        self.inter_broker_security = inter_broker_security(config)
        # Where the authorizer's ACLs are kept.
        self.acls = None if self.authorizer is None else ZkAcls(self.zk, self.authorizer, self.clock)

    def _set_up_single_node(self) -> None:
        """The single node: it leads every partition of its own TopicManager."""
        config = self.config
        self.served_apis = handlers.SERVED_APIS
        self._handlers = handlers.HANDLERS
        self.cluster = self.zk = self.replicas = None
        self.topics = TopicManager(config, self.delayed, self.clock)
        self.metadata = LocalMetadata(
            config.node_id, lambda listener: self.config.advertised_endpoint(
                listener or self.config.listeners[0].name), self.topics)
        self.topic_admin = LocalTopicAdmin(self)
        self.producer_ids = ProducerIdAllocator(
            local_block_reserver(os.path.join(config.data_dir, "producer-id-block")))
        self.inter_broker_security = None
        self.acls = None if self.authorizer is None else LocalAcls(config.data_dir, self.authorizer)

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        self._data_dir_lock = lock_data_dir(self.config.data_dir)
        try:
            await self._start()
        except BaseException:
            os.close(self._data_dir_lock)
            raise

    async def _start(self) -> None:
        self.dynamic_configs.load()  # the single node's topic defaults the logs open with
        if self.cluster is not None:
            await self.cluster.connect()  # ZooKeeper first: it says which cluster this is
            await self.cluster.read_broker_configs()  # the topic defaults the logs open with
            await self.scram.use_zookeeper(self.cluster.zk)
            await self.client_quotas.use_zookeeper(self.cluster.zk)
        else:
            self.scram.load()
            self.client_quotas.load()
        if self.acls is not None:
            await self.acls.start()
        self.metadata.cluster_id = self._load_cluster_id()
        self.clean_start = self.topics.load()
        if self.cleaner is not None:
            self.cleaner.load()
        if self.cluster is None:
            await self.groups.load()
            await self.transactions.load()  # after the groups: completing transactions commits their offsets
        else:
            await self.cluster.remove_stray_replicas()
        await self.server.start()
        self.config.bound(self.server.ports)
        if self.cluster is not None:
            self.cluster.list_itself()
        if self.config.metrics_port is not None:
            try:
                await self.metrics.serve(self.config.metrics_host or self.config.listeners[0].host,
                                         self.config.metrics_port)
            except OSError:
                await self.server.stop()
                raise
        if self.cluster is not None:
            await self.cluster.join()
        loop = asyncio.get_running_loop()
        self.stalls.start()
        self._tasks = [loop.create_task(self._every(_STALL_CHECK_INTERVAL_S, self.stalls.check)),
                       loop.create_task(self._every(self.config.retention_check_interval_ms / 1000,
                                                    self.enforce_retention)),
                       loop.create_task(self._every(_CHECKPOINT_INTERVAL_S,
                                                    self.topics.write_checkpoints_in_thread)),
                       loop.create_task(self._every(_FLUSH_CHECK_INTERVAL_S, self._flush_due)),
                       loop.create_task(self._every(_SESSION_CHECK_INTERVAL_S,
                                                    self.groups.expire_sessions)),
                       loop.create_task(self._every(self.config.offsets_retention_check_interval_ms / 1000,
                                                    self.groups.expire_offsets)),
                       loop.create_task(self._every(
                           self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000,
                           self.transactions.abort_timed_out)),
                       loop.create_task(self._every(
                           self.config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000,
                           self.transactions.upkeep))]
        if self.cleaner is not None:
            self._tasks.append(loop.create_task(self.cleaner.run()))
        listening = ", ".join(
            f"{l.host}:{l.port} ({l.name}, " + (f"{l.security_protocol}, " if l.security_protocol != l.name else "")
            + "advertised {}:{})".format(*self.config.advertised_endpoint(l.name)) for l in self.config.listeners)
        log.info("Sluice broker %s (node %d) listening on %s, data dir %s, %s start", VERSION, self.node_id,
                 listening, self.config.data_dir, "clean" if self.clean_start else "recovered")

    async def stop(self) -> None:
        """Answer in-flight requests, stop upkeep, flush and close every log. A cluster
        broker first hands its leaderships over (controlled shutdown) and leaves."""
        if self.acls is not None:
            self.acls.close()
        if self.cluster is not None:
            await self.cluster.leave()
        await self.server.stop()
        await self.metrics.stop()
        await self.transactions.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.topics.close()
        os.close(self._data_dir_lock)
        log.info("Sluice broker (node %d) stopped cleanly", self.node_id)

    def _load_cluster_id(self) -> str:
        """The cluster id in the data dir's meta.properties, written at the first start (as
        Kafka writes it). A cluster broker takes the cluster's id from ZooKeeper and refuses
        a data dir of another cluster or of another broker id."""
        path = os.path.join(self.config.data_dir, "meta.properties")
        os.makedirs(self.config.data_dir, exist_ok=True)
        props = {}
        if os.path.exists(path):
            with open(path) as f:
                props = dict(line.strip().split("=", 1) for line in f if "=" in line)
        if self.cluster is not None:
            return self.cluster.check_meta_properties(path, props)
        if "cluster.id" not in props:
            props = {"version": "1", "cluster.id": new_cluster_id(), "node.id": str(self.node_id)}
            write_atomically(path, "".join(f"{k}={v}\n" for k, v in props.items()).encode())
        return props["cluster.id"]

    async def _every(self, seconds: float, job) -> None:
        write_failures = ThrottledLog(log, logging.WARNING, burst=1, window=60.0)
        while True:
            await self.clock.sleep(seconds)
            try:
                outcome = job()
                if inspect.isawaitable(outcome):
                    await outcome
            except (OSError, BrokerError) as exc:  # e.g. a full disk: the next run tries again
                write_failures("background job %s failed: %s", job.__name__, exc)
            except Exception:
                log.exception("background job %s failed", job.__name__)

    def enforce_retention(self) -> None:
        now = self.clock.wall_ms()
        for partition in list(self.topics.all_partitions()):
            deleted = partition.enforce_retention(now)
            if deleted:
                log.info("retention deleted %d segment(s) of %s-%d; log start offset now %d",
                         deleted, partition.topic, partition.index, partition.log_start_offset)

    def _flush_due(self) -> None:
        for partition in self.topics.all_partitions():
            partition.flush_if_due()

    def coordinated_partitions(self, topic: str):
        """The coordinator's view of its topic's partitions (`broker.coordinator_runtime`) for
        `__consumer_offsets` and `__transaction_state`; None for any other topic."""
        if topic == offsets_log.TOPIC:
            return self.groups.runtime.coordinated
        if topic == txn_log.TOPIC:
            return self.transactions.runtime.coordinated
        return None

    # -- requests ----------------------------------------------------------------------
    def handle_frame(self, frame: bytearray, session):
        """The response chunks to one request frame (None: no response), or an
        awaitable of them when the handler must wait (in a `ResponseLater` when the
        request has taken effect); in a `Throttled` for a client over its quota."""
        if session.sasl_raw:  # a SASL token after a v0 handshake, not a request
            return raw_token(self, session, frame)
        started = perf_counter()
        try:
            header, body = decode_request(frame, allow_trailing_bytes=True, apis=self.served_apis)
        except UnsupportedRequest as exc:
            header = exc.header
            if header.request_api_key == API_VERSIONS.key:
                body = handlers.api_versions.unsupported_version_response(self)
                return encode_response_writer(API_VERSIONS.key, 0, header.correlation_id,
                                              body).getchunks()
            raise CloseConnection(f"{exc} (client {header.client_id!r})") from None
        except DecodeError as exc:
            raise CloseConnection(f"malformed request: {exc}") from None
        handler = self._handlers.get(header.request_api_key)
        if handler is None or header.request_api_version < handlers.MIN_VERSIONS[header.request_api_key]:
            raise CloseConnection(f"API {header.request_api_key} v{header.request_api_version} "
                                  f"is not served (client {header.client_id!r})")
        if (not session.authenticated or session.sasl is not None) \
                and header.request_api_key not in handlers.BEFORE_AUTHENTICATION:
            raise CloseConnection(f"API {header.request_api_key} before SASL "
                                  f"{'re-' if session.authenticated else ''}authentication "
                                  f"(client {header.client_id!r})")
        if session.expires_at is not None and session.sasl is None \
                and self.clock.monotonic() >= session.expires_at \
                and not (header.request_api_key == SASL_HANDSHAKE.key and session.reauthenticates):
            raise CloseConnection(f"the SASL session of {session.principal} expired "
                                  f"(connections.max.reauth.ms; client {header.client_id!r})")
        try:
            response = handler(self, header, body, session)
        except AuthenticationFailed as exc:
            raise CloseConnection(str(exc), last_response=self._encode(header, exc.response)) from None
        throttle = self._request_time(header, body, session, started)
        if isinstance(response, ResponseLater):
            return ResponseLater(_EncodedLater(self._encode_when_done(header, response.awaitable, started, throttle),
                                               response.awaitable))
        if inspect.isawaitable(response):
            return _EncodedLater(self._encode_when_done(header, response, started, throttle), response)
        chunks = self._encode(header, response, throttle)
        self.metrics.request_done(header.request_api_key, header.request_api_version, started)
        return chunks

    def _request_time(self, header, body, session, started: float) -> float:
        """Record the time the request took to handle (until its handler returned, or
        handed over what it waits for) against its client's request_percentage, in
        Kafka's unit (percent of one second): the seconds it is throttled for."""
        if handlers.exempt_from_request_quota(header, body):
            return 0.0
        return self.request_quotas.record(session.principal.name, header.client_id or "",
                                          (perf_counter() - started) * 100.0)

    @staticmethod
    def _encode(header, response, request_throttle: float = 0.0) -> list | Throttled | None:
        """The response's chunks, in a Throttled for the longer of the handler's throttle
        and `request_throttle` (request_percentage's), which the response then carries."""
        seconds = request_throttle
        if isinstance(response, Throttled):
            seconds, response = max(seconds, response.seconds), response.answer
        chunks = None
        if response is not None:
            if seconds > 0 and hasattr(response, "throttle_time_ms"):
                response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle_ms(seconds))
            chunks = encode_response_writer(header.request_api_key, header.request_api_version,
                                            header.correlation_id, response).getchunks()
        return Throttled.when(chunks, seconds)

    async def _encode_when_done(self, header, response, started: float, request_throttle: float) -> list | None:
        """The response once the handler's wait ends, timed from the request's decoding;
        meanwhile a Produce or Fetch counts in its purgatory."""
        api_key = header.request_api_key
        waiting = self.metrics.waiting
        if api_key in PURGATORIES:
            waiting[api_key] += 1
        try:
            chunks = self._encode(header, await response, request_throttle)
        finally:
            if api_key in PURGATORIES:
                waiting[api_key] -= 1
        self.metrics.request_done(api_key, header.request_api_version, started)
        return chunks
