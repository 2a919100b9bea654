"""Broker and topic configuration under Kafka's key names.

`BrokerConfig` is read from a `server.properties` file and command-line flags (flags
win). Unknown keys are reported back as warnings; invalid values raise `ConfigError`
with a message naming the key. `LogConfig` is the effective configuration of one
topic's logs: the broker's defaults overridden by the topic's own settings, which use
Kafka's topic-level key names (`retention.ms`, `segment.bytes`, ...).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
_JAVA_WHITESPACE = "".join(map(chr, range(0x21)))  # what Java's String.trim() removes
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConfigError(ValueError):
    pass


def _int(key: str, text: str, minimum: int = -INT_MAX - 1, maximum: int = INT_MAX) -> int:
    """An INT key's value, parsed as Kafka does (Java's parseInt after trim): an optional
    sign and ASCII digits. Python's int() would also take '1_000' and '１２'."""
    digits = text.strip(_JAVA_WHITESPACE)
    if not _JAVA_INTEGER.fullmatch(digits):
        raise ConfigError(f"{key}: {text!r} is not an integer")
    value = int(digits)
    if value < minimum:
        raise ConfigError(f"{key}: {value} is below the minimum {minimum}")
    if value > maximum:
        raise ConfigError(f"{key}: {value} is above the maximum {maximum}")
    return value


def _long(key: str, text: str, minimum: int = -LONG_MAX - 1) -> int:
    """A LONG key's value: as `_int`, in 64 bits."""
    return _int(key, text, minimum, LONG_MAX)


_JAVA_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")


def _double(key: str, text: str, minimum: float, maximum: float) -> float:
    """A DOUBLE key's value, as Java's parseDouble reads a plain decimal (no NaN or
    Infinity), within [minimum, maximum]."""
    digits = text.strip(_JAVA_WHITESPACE)
    if not _JAVA_DOUBLE.fullmatch(digits):
        raise ConfigError(f"{key}: {text!r} is not a number")
    value = float(digits.rstrip("dDfF"))
    if not minimum <= value <= maximum:
        raise ConfigError(f"{key}: {value:g} is not between {minimum:g} and {maximum:g}")
    return value


def _bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}: {text!r} is not true or false")
    return value == "true"


def _timestamp_type(key: str, text: str) -> str:
    value = text.strip()
    if value not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(f"{key}: {text!r} is not CreateTime or LogAppendTime")
    return value


def _cleanup_policy(key: str, text: str) -> str:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ConfigError(f"{key}: {text!r} is not a list of delete/compact")
    return ",".join(parts)


@dataclass(frozen=True)
class ThrottledReplicas:
    """A topic's `leader.replication.throttled.replicas` or
    `follower.replication.throttled.replicas`: `*` (every replica of the topic) or
    partition:broker pairs; `text` is the value as described."""

    text: str = ""
    every: bool = False
    pairs: frozenset[tuple[int, int]] = frozenset()

    def covers(self, partition: int, broker_id: int) -> bool:
        return self.every or (partition, broker_id) in self.pairs

    def __str__(self) -> str:
        return self.text


_THROTTLED_REPLICA = re.compile(r"([0-9]+):([0-9]+)")


def _throttled_replicas(key: str, text: str) -> ThrottledReplicas:
    """Kafka's list (items trimmed, empty ones allowed) checked as its
    ThrottledReplicaListValidator checks it: the literal `*` alone, or partition:broker
    items."""
    items = [item.strip(_JAVA_WHITESPACE) for item in text.split(",")] if text.strip(_JAVA_WHITESPACE) else []
    if items == ["*"]:
        return ThrottledReplicas("*", every=True)
    items = [item for item in items if item]
    matches = [_THROTTLED_REPLICA.fullmatch(item) for item in items]
    if not all(matches):
        raise ConfigError(f"{key}: {text!r} is not the literal '*' or a list of replicas in the format "
                          f"[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    return ThrottledReplicas(",".join(items), pairs=frozenset((int(m[1]), int(m[2])) for m in matches))


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")


def _compression_type(key: str, text: str) -> str:
    value = text.strip()
    if value not in COMPRESSION_TYPES:
        raise ConfigError(f"{key}: {text!r} is not one of {', '.join(COMPRESSION_TYPES)}")
    return value


@dataclass(frozen=True)
class LogConfig:
    """The configuration one partition log runs with."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_ms: int = 7 * 24 * 3600 * 1000  # -1: keep forever
    retention_bytes: int = -1
    index_interval_bytes: int = 4096
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    cleanup_policy: str = "delete"
    compression_type: str = "producer"  # "producer": keep the producer's codec
    min_insync_replicas: int = 1
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = 3_600_000  # Kafka 4's default: one hour ahead
    segment_index_bytes: int = 10 * 1024 * 1024
    # Log compaction (broker.storage.cleaner), for cleanup.policy compact.
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    # The controller's, not the log's: whether a replica out of the ISR may be elected
    # when no ISR member is live (a cluster's; on one node there is no other replica).
    unclean_leader_election_enable: bool = False
    # The replicas whose replication the leader's and the follower's throttles limit
    # (broker.replica: leader.replication.throttled.rate, follower.replication.throttled.rate).
    leader_replication_throttled_replicas: ThrottledReplicas = ThrottledReplicas()
    follower_replication_throttled_replicas: ThrottledReplicas = ThrottledReplicas()

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy.split(",")


# Topic-level key -> (LogConfig attribute, broker-level key or None, parser). Types and
# minimums are Kafka 3.9's: INT keys are 32-bit, LONG keys 64-bit. Kafka 4 raised
# segment.bytes' minimum to 1 MiB; 14 (one empty v0 record) is kept so that tests can use
# tiny segments. The throttled replicas have no broker-level default, as in Kafka.
TOPIC_CONFIGS = {
    "segment.bytes": ("segment_bytes", "log.segment.bytes", lambda k, v: _int(k, v, 14)),
    "segment.ms": ("segment_ms", "log.roll.ms", lambda k, v: _long(k, v, 1)),
    "retention.ms": ("retention_ms", "log.retention.ms", lambda k, v: _long(k, v, -1)),
    "retention.bytes": ("retention_bytes", "log.retention.bytes", _long),  # negative: no limit
    "index.interval.bytes": ("index_interval_bytes", "log.index.interval.bytes",
                             lambda k, v: _int(k, v, 0)),
    "max.message.bytes": ("max_message_bytes", "message.max.bytes", lambda k, v: _int(k, v, 0)),
    "message.timestamp.type": ("message_timestamp_type", "log.message.timestamp.type",
                               _timestamp_type),
    "flush.messages": ("flush_messages", "log.flush.interval.messages",
                       lambda k, v: _long(k, v, 1)),
    "flush.ms": ("flush_ms", "log.flush.interval.ms", lambda k, v: _long(k, v, 0)),
    "cleanup.policy": ("cleanup_policy", "log.cleanup.policy", _cleanup_policy),
    "compression.type": ("compression_type", "compression.type", _compression_type),
    "min.insync.replicas": ("min_insync_replicas", "min.insync.replicas", lambda k, v: _int(k, v, 1)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms",
                                        "log.message.timestamp.before.max.ms", lambda k, v: _long(k, v, 0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms",
                                       "log.message.timestamp.after.max.ms", lambda k, v: _long(k, v, 0)),
    "segment.index.bytes": ("segment_index_bytes", "log.index.size.max.bytes", lambda k, v: _int(k, v, 4)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio",
                                  lambda k, v: _double(k, v, 0.0, 1.0)),
    "delete.retention.ms": ("delete_retention_ms", "log.cleaner.delete.retention.ms",
                            lambda k, v: _long(k, v, 0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms",
                              lambda k, v: _long(k, v, 0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", "log.cleaner.max.compaction.lag.ms",
                              lambda k, v: _long(k, v, 1)),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", "unclean.leader.election.enable",
                                       _bool),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", None,
                                              _throttled_replicas),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", None,
                                                _throttled_replicas),
}
# Broker keys that exist only dynamically (Kafka's DynamicConfig.Broker quotas), set
# through AlterConfigs for a broker or the cluster default: key -> (BrokerConfig
# attribute, parser). Not read from server.properties, as in Kafka.
DYNAMIC_ONLY_BROKER_CONFIGS = {
    "leader.replication.throttled.rate": ("leader_replication_throttled_rate", lambda k, v: _long(k, v, 0)),
    "follower.replication.throttled.rate": ("follower_replication_throttled_rate", lambda k, v: _long(k, v, 0)),
}
# Kafka's broker keys this broker does not implement: never set (INVALID_CONFIG naming the
# reason), and deleting them changes nothing (kafka-reassign-partitions deletes them).
NOT_IMPLEMENTED_BROKER_CONFIGS = {
    "replica.alter.log.dirs.io.max.bytes.per.second":
        "a Sluice broker keeps one log directory: no replica moves between log directories",
}
# Kafka 4's other topic configs, which this broker does not implement: refused by name
# (INVALID_CONFIG), never accepted and ignored. The README's "Topic configs" lists them.
NOT_IMPLEMENTED_TOPIC_CONFIGS = {
    "compression.gzip.level": "codecs compress at their default levels",
    "compression.lz4.level": "codecs compress at their default levels",
    "compression.zstd.level": "codecs compress at their default levels",
    "segment.jitter.ms": "segments roll at segment.ms exactly",
    "file.delete.delay.ms": "segments are deleted at once, not after a delay",
    "preallocate": "segment files are not preallocated",
    "max.decompressed.message.bytes": "the decompressed size of a batch has a fixed bound",
    "message.downconversion.enable": "only record batches v2 are served; nothing is down-converted",
    "remote.storage.enable": "tiered storage is not implemented",
    "local.retention.ms": "tiered storage is not implemented",
    "local.retention.bytes": "tiered storage is not implemented",
    "remote.log.copy.disable": "tiered storage is not implemented",
    "remote.log.delete.on.disable": "tiered storage is not implemented",
    "remote.copy.lag.ms": "tiered storage is not implemented",
    "remote.copy.lag.bytes": "tiered storage is not implemented",
    "errors.deadletterqueue.group.enable": "share groups are not implemented",
}


def check_topic_config_key(key: str) -> None:
    """Raise ConfigError unless `key` is a topic config this broker implements."""
    if key in NOT_IMPLEMENTED_TOPIC_CONFIGS:
        raise ConfigError(f"topic config {key!r} is not implemented by this broker "
                          f"({NOT_IMPLEMENTED_TOPIC_CONFIGS[key]})")
    if key not in TOPIC_CONFIGS:
        raise ConfigError(f"unknown topic config {key!r}")


def config_text(value) -> str:
    """A parsed value as Kafka writes it: booleans in lower case."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic-level overrides; returns them normalised. Raises ConfigError."""
    result = {}
    for key, value in configs.items():
        check_topic_config_key(key)
        if value is None:
            raise ConfigError(f"{key}: a value is required")
        result[key] = config_text(TOPIC_CONFIGS[key][2](key, value))
    return result


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class ListenerConfig:
    """One entry of `listeners` (or `advertised.listeners`): NAME://host:port, the name
    upper-cased as Kafka normalises it; its security protocol comes from
    `listener.security.protocol.map`."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass
class BrokerConfig:
    node_id: int = 0
    # The first listener's address (what --host/--port set); `listeners` holds them all.
    host: str = "127.0.0.1"
    port: int = 9092
    listeners: list[ListenerConfig] = field(default_factory=list)
    advertised_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    listener_security_protocol_map: dict[str, str] = field(
        default_factory=lambda: {p: p for p in SECURITY_PROTOCOLS})
    inter_broker_listener_name: str | None = None  # None: the first listener
    # ssl.*, sasl.* and listener.name.* settings, read by broker.security when it builds
    # the listeners (their values may be secrets: never logged or described).
    security_settings: dict[str, str] = field(default_factory=dict)
    sasl_server_max_receive_size: int = 524288
    data_dir: str = ""
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    socket_request_max_bytes: int = 100 * 1024 * 1024
    retention_check_interval_ms: int = 300_000
    producer_id_expiration_ms: int = 86_400_000
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    offsets_topic_num_partitions: int = 50
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    replica_lag_time_max_ms: int = 30_000
    transaction_max_timeout_ms: int = 900_000
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_segment_bytes: int = 100 * 1024 * 1024
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    add_partitions_to_txn_retry_backoff_max_ms: int = 100
    # Connection limits (broker.server.Limits).
    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: dict[str, int] = field(default_factory=dict)
    connections_max_idle_ms: int = 600_000
    connections_max_reauth_ms: int = 0  # 0: SASL sessions never expire (KIP-368)
    queued_max_requests: int = 500
    max_incremental_fetch_session_cache_slots: int = 1000
    # The log cleaner (broker.storage.cleaner): one, as log.cleaner.threads=1.
    log_cleaner_enable: bool = True
    log_cleaner_threads: int = 1
    log_cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    log_cleaner_io_buffer_load_factor: float = 0.9
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308  # Double.MAX_VALUE: no limit
    log_cleaner_backoff_ms: int = 15_000
    # Cluster mode (ZooKeeper): off while zookeeper_connect is None, the single node.
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int | None = None  # None: the session timeout
    broker_rack: str | None = None
    replica_selector_class: str | None = None  # KIP-392: RACK_AWARE_SELECTOR, or None (the leader serves)
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    controlled_shutdown_enable: bool = True
    controlled_shutdown_max_retries: int = 3
    controlled_shutdown_retry_backoff_ms: int = 5000
    offsets_topic_replication_factor: int = 3
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    controller_socket_timeout_ms: int = 30_000
    # Authorization (broker.security.acls): ACLs are enforced once authorizer.class.name is set.
    authorizer_class_name: str = ""
    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False
    # Replication throttles (broker.quota), dynamic only: bytes a second, no limit by default.
    leader_replication_throttled_rate: int = LONG_MAX
    follower_replication_throttled_rate: int = LONG_MAX
    metrics_port: int | None = None  # the Prometheus endpoint (broker.metrics): off while None
    metrics_host: str | None = None  # None: the first listener's host
    log: LogConfig = field(default_factory=LogConfig)
    # Where each setting came from, for DescribeConfigs: key -> value as configured.
    static: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not self.listeners:  # made directly (tests, tools): one PLAINTEXT listener
            self.listeners = [ListenerConfig("PLAINTEXT", self.host, self.port)]

    @property
    def cluster_mode(self) -> bool:
        """Whether this broker is one of a cluster coordinated through ZooKeeper."""
        return self.zookeeper_connect is not None

    @property
    def advertised(self) -> tuple[str, int]:
        """The first listener's advertised address."""
        return self.advertised_endpoint(self.listeners[0].name) if self.listeners else (self.host, self.port)

    def advertised_endpoint(self, listener: str) -> tuple[str, int]:
        """What clients on `listener` are told to connect to: its `advertised.listeners`
        entry, else the listener's own address."""
        if listener in self.advertised_listeners:
            return self.advertised_listeners[listener]
        own = next(l for l in self.listeners if l.name == listener)
        return own.host, own.port

    @property
    def inter_broker_listener(self) -> ListenerConfig:
        name = self.inter_broker_listener_name
        return next((l for l in self.listeners if l.name == name), self.listeners[0])

    def bound(self, ports: dict[str, int]) -> None:
        """The listeners are bound: port 0 became the port the system chose."""
        self.listeners = [dataclasses.replace(l, port=ports.get(l.name, l.port)) for l in self.listeners]
        self.host, self.port = self.listeners[0].host, self.listeners[0].port

    def listener_settings(self, listener: str) -> dict[str, str]:
        """The ssl.* and sasl.* settings of one listener: `listener.name.<name>.<key>`
        (name lower-cased, as Kafka writes it) over the unprefixed `<key>`."""
        prefix = f"listener.name.{listener.lower()}."
        settings = {k: v for k, v in self.security_settings.items() if not k.startswith("listener.name.")}
        settings.update({k[len(prefix):]: v for k, v in self.security_settings.items() if k.startswith(prefix)})
        return settings

    def log_config(self, overrides: dict[str, str]) -> LogConfig:
        """The effective LogConfig of a topic with these (validated) overrides."""
        changes = {TOPIC_CONFIGS[k][0]: TOPIC_CONFIGS[k][2](k, v) for k, v in overrides.items()}
        return dataclasses.replace(self.log, **changes)

    def topic_overrides(self, configs: dict[str, str | None]) -> dict[str, str]:
        """`configs` as a topic's overrides (`parse_topic_configs`), with Kafka's checks
        across keys of the effective config they make with this broker's defaults: the
        one check of what CreateTopics and AlterConfigs set, on one node and in a
        cluster. Raises ConfigError."""
        overrides = parse_topic_configs(configs)
        effective = self.log_config(overrides)
        if effective.min_compaction_lag_ms > effective.max_compaction_lag_ms:
            raise ConfigError(f"conflict topic config setting min.compaction.lag.ms "
                              f"({effective.min_compaction_lag_ms}) > max.compaction.lag.ms "
                              f"({effective.max_compaction_lag_ms})")
        return overrides


def read_properties(path: str) -> dict[str, str]:
    """A Java-style .properties file: `key=value` or `key: value`, `#`/`!` comments."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 ({exc.reason} "
                          f"at byte {exc.start})") from None
    props = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:  # as in Java, the first '=' or ':' separates key from value
            raise ConfigError(f"{path}:{number}: expected key=value, got {raw!r}")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


_LISTENER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _listeners(key: str, value: str) -> list[ListenerConfig]:
    """A Kafka listeners list: NAME://host:port, ... (an IPv6 host in brackets); names
    unique (case-insensitively, as Kafka upper-cases them)."""
    listeners = []
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not _LISTENER_NAME.fullmatch(name):
            raise ConfigError(f"{key}: {item!r} is not NAME://host:port")
        name = name.upper()
        if any(l.name == name for l in listeners):
            raise ConfigError(f"{key}: listener name {name} is given twice")
        listeners.append(ListenerConfig(name, host.strip("[]"), _int(key, port, 0, 65535)))
    if not listeners:
        raise ConfigError(f"{key}: no listener in {value!r}")
    return listeners


def _protocol_map(key: str, value: str) -> dict[str, str]:
    """listener.security.protocol.map: NAME:PROTOCOL, ..."""
    mapping = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name.strip()) or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{key}: {item!r} is not NAME:PROTOCOL with a protocol among "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


# Security keys kept for broker.security (listener.name.<name>.* carries per-listener ones).
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.")


def _resolve_listeners(config: BrokerConfig, listeners: list[ListenerConfig] | None,
                       advertised: list[ListenerConfig] | None, security_inter_broker: str | None) -> None:
    """Give every listener its security protocol and check the listener settings against
    each other as Kafka does: unique ports, advertised names among the listeners, the
    inter-broker listener defined."""
    if listeners is None:
        listeners = [ListenerConfig("PLAINTEXT", config.host, config.port)]
    listeners[0] = dataclasses.replace(listeners[0], host=config.host, port=config.port)
    resolved = []
    for listener in listeners:
        protocol = config.listener_security_protocol_map.get(listener.name)
        if protocol is None:
            raise ConfigError(f"listeners: no security protocol for listener {listener.name} "
                              f"(add it to listener.security.protocol.map)")
        resolved.append(dataclasses.replace(listener, security_protocol=protocol))
    ports = [l.port for l in resolved if l.port]
    if len(ports) != len(set(ports)):
        raise ConfigError("listeners: each listener must have a different port")
    config.listeners = resolved
    names = {l.name for l in resolved}
    for entry in advertised or []:
        if entry.name not in names:
            raise ConfigError(f"advertised.listeners: {entry.name} is not one of the listeners "
                              f"({', '.join(sorted(names))})")
        config.advertised_listeners[entry.name] = (entry.host, entry.port)
    if config.inter_broker_listener_name is not None and security_inter_broker is not None:
        raise ConfigError("set only one of inter.broker.listener.name and security.inter.broker.protocol")
    wanted = config.inter_broker_listener_name or security_inter_broker
    if wanted is not None and wanted not in names:
        raise ConfigError(f"inter.broker.listener.name: {wanted} is not one of the listeners "
                          f"({', '.join(sorted(names))})")
    config.inter_broker_listener_name = wanted or resolved[0].name
    config.host, config.port = resolved[0].host, resolved[0].port


# Group and transaction coordinator settings: key -> (BrokerConfig attribute, minimum,
# maximum: Kafka's type, INT or LONG).
_GROUP_KEYS = {
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 0, INT_MAX),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", 1, INT_MAX),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", 1, INT_MAX),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 1, INT_MAX),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", 14, INT_MAX),
    "offsets.retention.minutes": ("offsets_retention_minutes", 1, INT_MAX),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 1, LONG_MAX),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", 0, INT_MAX),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", 1, LONG_MAX),
    # Transaction coordinator settings.
    "transaction.max.timeout.ms": ("transaction_max_timeout_ms", 1, INT_MAX),
    "transaction.state.log.num.partitions": ("transaction_state_log_num_partitions", 1, INT_MAX),
    "transaction.state.log.segment.bytes": ("transaction_state_log_segment_bytes", 14, INT_MAX),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        ("transaction_abort_timed_out_transaction_cleanup_interval_ms", 1, INT_MAX),
    "transaction.remove.expired.transaction.cleanup.interval.ms":
        ("transaction_remove_expired_transaction_cleanup_interval_ms", 1, INT_MAX),
    "transactional.id.expiration.ms": ("transactional_id_expiration_ms", 1, INT_MAX),
    "add.partitions.to.txn.retry.backoff.max.ms": ("add_partitions_to_txn_retry_backoff_max_ms", 0, INT_MAX),
}

# Cluster mode (ZooKeeper): key -> (BrokerConfig attribute, minimum, maximum), Kafka's
# defaults and bounds; none of them matters to the single node.
_CLUSTER_INT_KEYS = {
    "zookeeper.session.timeout.ms": ("zookeeper_session_timeout_ms", 1, INT_MAX),
    "zookeeper.connection.timeout.ms": ("zookeeper_connection_timeout_ms", 1, INT_MAX),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", 1, LONG_MAX),
    "leader.imbalance.per.broker.percentage": ("leader_imbalance_per_broker_percentage", 0, INT_MAX),
    "controlled.shutdown.max.retries": ("controlled_shutdown_max_retries", 0, INT_MAX),
    "controlled.shutdown.retry.backoff.ms": ("controlled_shutdown_retry_backoff_ms", 0, LONG_MAX),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", 1, 32767),
    "transaction.state.log.replication.factor": ("transaction_state_log_replication_factor", 1, 32767),
    "transaction.state.log.min.isr": ("transaction_state_log_min_isr", 1, INT_MAX),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", 0, INT_MAX),
    "replica.fetch.response.max.bytes": ("replica_fetch_response_max_bytes", 0, INT_MAX),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", 0, INT_MAX),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", 1, INT_MAX),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", 0, INT_MAX),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", 1, INT_MAX),
    "controller.socket.timeout.ms": ("controller_socket_timeout_ms", 1, INT_MAX),
}
_CLUSTER_BOOL_KEYS = {
    "auto.leader.rebalance.enable": "auto_leader_rebalance_enable",
    "controlled.shutdown.enable": "controlled_shutdown_enable",
}

# Connection limits: key -> (BrokerConfig attribute, minimum, maximum).
_CONNECTION_KEYS = {
    "max.connections": ("max_connections", 0, INT_MAX),
    "max.connections.per.ip": ("max_connections_per_ip", 0, INT_MAX),
    "connections.max.idle.ms": ("connections_max_idle_ms", 1, LONG_MAX),
    "connections.max.reauth.ms": ("connections_max_reauth_ms", 0, LONG_MAX),
    "queued.max.requests": ("queued_max_requests", 1, INT_MAX),
    "max.incremental.fetch.session.cache.slots": ("max_incremental_fetch_session_cache_slots", 0, INT_MAX),
    "sasl.server.max.receive.size": ("sasl_server_max_receive_size", 1, INT_MAX),
}


def _per_ip_overrides(key: str, value: str) -> dict[str, int]:
    """Kafka's "host:count,host:count" (an IPv6 host keeps its colons: the last one counts)."""
    overrides = {}
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip():
            raise ConfigError(f"{key}: {item!r} is not host:count")
        overrides[host.strip().strip("[]")] = _int(key, count, 0)
    return overrides


RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _replica_selector(key: str, value: str) -> str | None:
    """KIP-392's selector: Kafka's rack-aware one is the selector there is here."""
    name = value.strip()
    if name and name != RACK_AWARE_SELECTOR:
        raise ConfigError(f"{key}: {name!r} is not available; the one selector here is {RACK_AWARE_SELECTOR}")
    return name or None


def _super_users(key: str, value: str) -> frozenset[str]:
    """super.users: principals (Type:name) separated by semicolons."""
    users = frozenset(user.strip() for user in value.split(";") if user.strip())
    for user in sorted(users):
        kind, sep, _ = user.partition(":")
        if not sep or not kind:
            raise ConfigError(f"{key}: {user!r} is not a principal (expected Type:name, e.g. User:admin)")
    return users


def _zookeeper_connect(key: str, value: str) -> str:
    """Kafka's host:port[,host:port...][/chroot], checked so that kazoo never sees garbage."""
    text = value.strip()
    hosts, slash, chroot = text.partition("/")
    if slash and (not chroot or chroot.endswith("/") or chroot.startswith("/") or "//" in chroot):
        raise ConfigError(f"{key}: {value!r} has an invalid chroot (/path, no trailing '/')")
    if not hosts:
        raise ConfigError(f"{key}: {value!r} names no host:port")
    for item in hosts.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{key}: {item!r} is not host:port")
        _int(key, port, 0, 65535)
    return text


# INT keys in coarser units: key -> (LogConfig attribute, milliseconds per unit, minimum).
_COARSE_UNITS = {
    "log.retention.minutes": ("retention_ms", 60_000, -1),
    "log.retention.hours": ("retention_ms", 3_600_000, -1),
    "log.roll.hours": ("segment_ms", 3_600_000, 1),
}


# The log cleaner's keys: key -> (BrokerConfig attribute, parser). Kafka's types and
# defaults; one cleaner task runs on the event loop whatever log.cleaner.threads says
# above 0 (0: none, as Kafka without cleaner threads).
_CLEANER_KEYS = {
    "log.cleaner.enable": ("log_cleaner_enable", _bool),
    "log.cleaner.threads": ("log_cleaner_threads", lambda k, v: _int(k, v, 0)),
    "log.cleaner.dedupe.buffer.size": ("log_cleaner_dedupe_buffer_size", lambda k, v: _long(k, v, 1)),
    "log.cleaner.io.buffer.load.factor": ("log_cleaner_io_buffer_load_factor",
                                          lambda k, v: _double(k, v, 0.0, 1.0)),
    "log.cleaner.io.max.bytes.per.second": ("log_cleaner_io_max_bytes_per_second",
                                            lambda k, v: _double(k, v, 1.0, 1.7976931348623157e308)),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", lambda k, v: _long(k, v, 0)),
}
# Bytes of Kafka's offset map per key: a 16-byte MD5 of the key and an 8-byte offset.
CLEANER_BYTES_PER_KEY = 24


def _check_cleaner(config: BrokerConfig) -> None:
    """The offset map must hold at least one key, as Kafka's cleaner asserts."""
    keys = config.log_cleaner_dedupe_buffer_size // CLEANER_BYTES_PER_KEY * config.log_cleaner_io_buffer_load_factor
    if keys < 1:
        raise ConfigError(f"log.cleaner.dedupe.buffer.size {config.log_cleaner_dedupe_buffer_size} with "
                          f"log.cleaner.io.buffer.load.factor {config.log_cleaner_io_buffer_load_factor:g} "
                          f"leaves no room for a single key ({CLEANER_BYTES_PER_KEY} bytes each)")


def static_broker_values(config: BrokerConfig) -> dict[str, str]:
    """Every broker-level key (other than the topic defaults) understood here, with its
    effective value as Kafka would print it: what DescribeConfigs reports for the broker."""
    host, port = config.advertised
    def listed(entries):
        return ",".join(f"{name}://[{h}]:{p}" if ":" in h else f"{name}://{h}:{p}" for name, h, p in entries)

    values = {
        "node.id": config.node_id, "broker.id": config.node_id,
        "listeners": listed((l.name, l.host, l.port) for l in config.listeners),
        "advertised.listeners": listed((l.name, *config.advertised_endpoint(l.name)) for l in config.listeners),
        "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in
                                                   config.listener_security_protocol_map.items()),
        "inter.broker.listener.name": config.inter_broker_listener.name,
        "log.dirs": config.data_dir, "num.partitions": config.num_partitions,
        "default.replication.factor": config.default_replication_factor,
        "auto.create.topics.enable": str(config.auto_create_topics).lower(),
        "socket.request.max.bytes": config.socket_request_max_bytes,
        "log.retention.check.interval.ms": config.retention_check_interval_ms,
        "producer.id.expiration.ms": config.producer_id_expiration_ms,
        "max.connections.per.ip.overrides": ",".join(
            f"{ip}:{count}" for ip, count in sorted(config.max_connections_per_ip_overrides.items())),
        "zookeeper.connect": config.zookeeper_connect or "",
        "broker.rack": config.broker_rack or "",
        "replica.selector.class": config.replica_selector_class or "",
    }
    for key, (attr, _, _) in {**_GROUP_KEYS, **_CONNECTION_KEYS, **_CLUSTER_INT_KEYS}.items():
        values[key] = getattr(config, attr)
    values["zookeeper.connection.timeout.ms"] = (config.zookeeper_connection_timeout_ms
                                                 or config.zookeeper_session_timeout_ms)
    for key, attr in _CLUSTER_BOOL_KEYS.items():
        values[key] = getattr(config, attr)
    for key, (attr, _) in _CLEANER_KEYS.items():
        values[key] = getattr(config, attr)
    return {key: config_text(value) for key, value in values.items()}


def build_config(props: dict[str, str], overrides: dict[str, object]) -> tuple[BrokerConfig, list[str]]:
    """A BrokerConfig from properties plus flag overrides; returns it and warnings."""
    config = BrokerConfig()
    warnings: list[str] = []
    log_changes: dict[str, object] = {}
    coarse: dict[str, int] = {}  # hours/minutes forms, applied after their _ms forms
    listeners = advertised = security_inter_broker = None
    broker_keys = {broker_key: (attr, parse) for attr, broker_key, parse in TOPIC_CONFIGS.values() if broker_key}
    for key, value in props.items():
        if key in broker_keys:
            attr, parse = broker_keys[key]
            log_changes[attr] = parse(key, value)
        elif key in _COARSE_UNITS:
            amount = _int(key, value, _COARSE_UNITS[key][2])
            coarse[key] = -1 if amount < 0 else amount * _COARSE_UNITS[key][1]
        elif key in ("broker.id", "node.id"):
            config.node_id = _int(key, value, 0)
        elif key == "listeners":
            listeners = _listeners(key, value)
        elif key == "advertised.listeners":
            advertised = _listeners(key, value)
        elif key == "listener.security.protocol.map":
            config.listener_security_protocol_map = _protocol_map(key, value)
        elif key == "inter.broker.listener.name":
            config.inter_broker_listener_name = value.strip().upper() or None
        elif key == "security.inter.broker.protocol":
            protocol = value.strip().upper()
            if protocol not in SECURITY_PROTOCOLS:
                raise ConfigError(f"{key}: {value!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
            security_inter_broker = protocol
        elif key.startswith(_SECURITY_PREFIXES) and key not in _CONNECTION_KEYS:
            config.security_settings[key] = value
            continue  # values may be secrets: not kept among the static values described
        elif key in ("log.dirs", "log.dir"):
            dirs = [d.strip() for d in value.split(",") if d.strip()]
            if len(dirs) != 1:
                raise ConfigError(f"{key}: exactly one directory is supported, got {value!r}")
            config.data_dir = dirs[0]
        elif key == "num.partitions":
            config.num_partitions = _int(key, value, 1)
        elif key == "default.replication.factor":
            config.default_replication_factor = _int(key, value, 1)
        elif key == "auto.create.topics.enable":
            config.auto_create_topics = _bool(key, value)
        elif key == "socket.request.max.bytes":
            config.socket_request_max_bytes = _int(key, value, 1)
        elif key == "log.retention.check.interval.ms":
            config.retention_check_interval_ms = _long(key, value, 1)
        elif key == "producer.id.expiration.ms":
            config.producer_id_expiration_ms = _int(key, value, 1)
        elif key in _GROUP_KEYS:
            attr, minimum, maximum = _GROUP_KEYS[key]
            setattr(config, attr, _int(key, value, minimum, maximum))
        elif key in _CONNECTION_KEYS:
            attr, minimum, maximum = _CONNECTION_KEYS[key]
            setattr(config, attr, _int(key, value, minimum, maximum))
        elif key == "max.connections.per.ip.overrides":
            config.max_connections_per_ip_overrides = _per_ip_overrides(key, value)
        elif key == "zookeeper.connect":
            config.zookeeper_connect = _zookeeper_connect(key, value)
        elif key == "broker.rack":
            config.broker_rack = value.strip() or None
        elif key == "replica.selector.class":
            config.replica_selector_class = _replica_selector(key, value)
        elif key in _CLUSTER_INT_KEYS:
            attr, minimum, maximum = _CLUSTER_INT_KEYS[key]
            setattr(config, attr, _int(key, value, minimum, maximum))
        elif key in _CLUSTER_BOOL_KEYS:
            setattr(config, _CLUSTER_BOOL_KEYS[key], _bool(key, value))
        elif key == "metrics.port":
            config.metrics_port = _int(key, value, 0, 65535)
        elif key == "metrics.host":
            config.metrics_host = value.strip() or None
        elif key in _CLEANER_KEYS:
            attr, parse = _CLEANER_KEYS[key]
            setattr(config, attr, parse(key, value))
            if key == "log.cleaner.threads" and config.log_cleaner_threads > 1:
                warnings.append(f"log.cleaner.threads={config.log_cleaner_threads}: one log cleaner runs")
        elif key == "authorizer.class.name":  # any class name: Kafka's AclAuthorizer or StandardAuthorizer
            config.authorizer_class_name = value.strip()
        elif key == "super.users":
            config.super_users = _super_users(key, value)
        elif key == "allow.everyone.if.no.acl.found":
            config.allow_everyone_if_no_acl_found = _bool(key, value)
        elif key in DYNAMIC_ONLY_BROKER_CONFIGS:
            warnings.append(f"{key} can only be set dynamically (AlterConfigs for a broker or the "
                            f"cluster default): ignored")
            continue
        else:
            warnings.append(f"unknown config key {key!r} ignored")
            continue
        config.static[key] = value
    if listeners is not None:  # the first listener's address, unless the flags set it
        config.host, config.port = listeners[0].host, listeners[0].port
    for name, value in overrides.items():
        if value is not None:
            setattr(config, name, value)
    _resolve_listeners(config, listeners, advertised, security_inter_broker)
    for key, (attr, _, _) in _COARSE_UNITS.items():  # minutes before hours: the finer one wins
        if key in coarse:
            log_changes.setdefault(attr, coarse[key])
    config.log = dataclasses.replace(config.log, **log_changes)
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError("max.connections.per.ip: 0 is allowed only with "
                          "max.connections.per.ip.overrides (as in Kafka)")
    if config.metrics_port and config.metrics_port in (l.port for l in config.listeners):
        raise ConfigError(f"metrics.port: {config.metrics_port} is a listener's port")
    if not config.data_dir:
        raise ConfigError("no data directory: pass --data-dir or set log.dirs")
    _check_cleaner(config)
    return config, warnings
