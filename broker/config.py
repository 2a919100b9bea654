"""Broker and topic configuration under Kafka's key names, declared once.

Every key is one `ConfigKey` of a table, as Kafka's ConfigDef declares its keys: its type,
default, bounds, update mode and one line of doc. `TOPIC_KEYS` holds the topic-level keys
(`retention.ms`, `segment.bytes`, ...), each naming its broker-level default;
`BROKER_KEYS` the broker's, the topic defaults among them. From the tables come the
parsing and validation of `server.properties`, topic overrides and dynamic configs, the
`LogConfig` and `BrokerConfig` attributes, what DescribeConfigs reports, and
docs/configs.md (`python -m broker.config --reference`).

`BrokerConfig` is read from a `server.properties` file and command-line flags (flags
win). Unknown keys are reported back as warnings; invalid values raise `ConfigError`
with a message naming the key. `LogConfig` is the effective configuration of one
topic's logs: the broker's defaults overridden by the topic's own settings.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from broker.features import FEATURES

INT_MAX = (1 << 31) - 1
LONG_MAX = (1 << 63) - 1
INT_MIN, LONG_MIN = -INT_MAX - 1, -LONG_MAX - 1
_JAVA_WHITESPACE = "".join(map(chr, range(0x21)))  # what Java's String.trim() removes
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")


class ConfigError(ValueError):
    pass


def _int(key: str, text: str, minimum: int = INT_MIN, maximum: int = INT_MAX) -> int:
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


def _long(key: str, text: str, minimum: int = LONG_MIN) -> int:
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


def _items(text: str) -> list[str]:
    """A LIST value's items: comma-separated, trimmed, the empty ones dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


# Kafka's default `group.consumer.assignors`, by the names clients choose them with
# (`group.remote.assignor`); Kafka's class names are accepted as their synonyms.
ASSIGNOR_CLASSES = {
    "uniform": "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
    "range": "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
}


def assignor_name(text: str) -> str | None:
    """The assignor named by `text` (a short name or Kafka's class name), or None."""
    if text in ASSIGNOR_CLASSES:
        return text
    return next((name for name, cls in ASSIGNOR_CLASSES.items() if cls == text), None)


def _assignors(key: str, text: str) -> tuple[str, ...]:
    """group.consumer.assignors: Kafka's assignor names or class names, in preference order."""
    names = []
    for item in _items(text):
        name = assignor_name(item)
        if name is None:
            raise ConfigError(f"{key}: {item!r} is not an assignor ({', '.join(ASSIGNOR_CLASSES)})")
        names.append(name)
    if not names:
        raise ConfigError(f"{key}: no assignor given")
    return tuple(names)


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
    parts = _items(text)
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


_LISTENER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _listeners(key: str, value: str) -> list[ListenerConfig]:
    """A Kafka listeners list: NAME://host:port, ... (an IPv6 host in brackets); names
    unique (case-insensitively, as Kafka upper-cases them)."""
    listeners = []
    for item in _items(value):
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
    for item in _items(value):
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or not _LISTENER_NAME.fullmatch(name.strip()) or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{key}: {item!r} is not NAME:PROTOCOL with a protocol among "
                              f"{', '.join(SECURITY_PROTOCOLS)}")
        mapping[name.strip().upper()] = protocol
    return mapping


# Security keys kept for broker.security (listener.name.<name>.* carries per-listener ones).
_SECURITY_PREFIXES = ("ssl.", "sasl.", "listener.name.")


def _per_ip_overrides(key: str, value: str) -> dict[str, int]:
    """Kafka's "host:count,host:count" (an IPv6 host keeps its colons: the last one counts)."""
    overrides = {}
    for item in _items(value):
        host, sep, count = item.rpartition(":")
        if not sep or not host.strip():
            raise ConfigError(f"{key}: {item!r} is not host:count")
        overrides[host.strip().strip("[]")] = _int(key, count, 0)
    return overrides


_KAFKA_VERSION = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?(-IV[0-9]+)?")


def _kafka_version(key: str, value: str) -> str:
    """A Kafka release (`2.8`, `0.10.2`) or metadata version (`3.0-IV1`), as Kafka 3.x's
    message.format.version takes it."""
    text = value.strip()
    if not _KAFKA_VERSION.fullmatch(text):
        raise ConfigError(f"{key}: {value!r} is not a Kafka version (e.g. 2.8 or 3.0-IV1)")
    return text


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


def _log_dirs(key: str, text: str) -> str:
    """The one data directory (a Sluice broker keeps one log directory)."""
    dirs = _items(text)
    if len(dirs) != 1:
        raise ConfigError(f"{key}: exactly one directory is supported, got {text!r}")
    return dirs[0]


def _text(key: str, text: str) -> str:
    return text.strip()


def _text_or_none(key: str, text: str) -> str | None:
    """A string key whose empty value means unset."""
    return text.strip() or None


def _listener_name(key: str, text: str) -> str | None:
    return text.strip().upper() or None


def _security_protocol(key: str, text: str) -> str:
    protocol = text.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError(f"{key}: {text!r} is not one of {', '.join(SECURITY_PROTOCOLS)}")
    return protocol


# Kafka's config types, by the ids DescribeConfigs v3+ reports.
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
TYPE_NAMES = {BOOLEAN: "boolean", STRING: "string", INT: "int", LONG: "long", DOUBLE: "double", LIST: "list"}
DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE
# Update modes, as Kafka's DynamicBrokerConfig classifies broker keys. Every dynamic key
# here may be set for one broker or as the cluster default (Kafka's per-broker keys,
# which may not be a cluster default, are all listener and TLS keys, not dynamic here).
READ_ONLY, CLUSTER_WIDE = "read-only", "cluster-wide"


@dataclass(frozen=True)
class ConfigKey:
    """One config key, declared once as Kafka's ConfigDef declares it: what parses and
    checks its value, the BrokerConfig (or, for topic keys and their broker defaults,
    LogConfig) attribute that holds it, and what DescribeConfigs and docs/configs.md say
    of it."""

    name: str
    type: int
    default: object  # the parsed value when the key is not set
    doc: str  # one line for docs/configs.md
    parse: Callable[[str, str], object]  # (key, text) -> value; raises ConfigError naming the key
    valid: str = ""  # the values accepted, as docs/configs.md shows them ("": any of the type)
    attr: str | None = ""  # "": the name with dots as underscores; None: none of its own
    update_mode: str = READ_ONLY
    dynamic_only: bool = False  # set only through AlterConfigs, never read from server.properties
    synonym_of: str | None = None  # a broker key this one sets when that one is not set
    broker_key: str | None = None  # a topic key's broker-level default
    topic_key: str | None = None  # a broker key's topic key, of which it is the default
    show: Callable | None = None  # BrokerConfig -> the value described, when not the attribute's

    def __post_init__(self):
        if self.attr == "":
            object.__setattr__(self, "attr", self.name.replace(".", "_"))

    @property
    def dynamic(self) -> bool:
        return self.update_mode != READ_ONLY


def _bounds(minimum, maximum, lowest, highest) -> str:
    """Kafka's way of writing a range: [1,...] or [0,...,65535]."""
    if maximum != highest:
        return f"[{minimum},...,{maximum}]"
    return "" if minimum == lowest else f"[{minimum},...]"


def _int_key(name: str, default, doc: str, minimum: int = INT_MIN, maximum: int = INT_MAX, **more) -> ConfigKey:
    return ConfigKey(name, INT, default, doc, functools.partial(_int, minimum=minimum, maximum=maximum),
                     _bounds(minimum, maximum, INT_MIN, INT_MAX), **more)


def _long_key(name: str, default, doc: str, minimum: int = LONG_MIN, **more) -> ConfigKey:
    return ConfigKey(name, LONG, default, doc, functools.partial(_long, minimum=minimum),
                     _bounds(minimum, LONG_MAX, LONG_MIN, LONG_MAX), **more)


def _double_key(name: str, default: float, doc: str, minimum: float, maximum: float, **more) -> ConfigKey:
    return ConfigKey(name, DOUBLE, default, doc, functools.partial(_double, minimum=minimum, maximum=maximum),
                     _bounds(minimum, maximum, None, DOUBLE_MAX), **more)


def _bool_key(name: str, default: bool, doc: str, **more) -> ConfigKey:
    return ConfigKey(name, BOOLEAN, default, doc, _bool, **more)


def _coarse_key(name: str, of: str, unit_ms: int, default: int, minimum: int, doc: str) -> ConfigKey:
    """An INT key in hours or minutes that sets a milliseconds key when that one is not
    set (-1, no limit, stays -1)."""
    def parse(key: str, text: str) -> int:
        amount = _int(key, text, minimum)
        return -1 if amount < 0 else amount * unit_ms
    return ConfigKey(name, INT, default, doc, parse, _bounds(minimum, INT_MAX, INT_MIN, INT_MAX), attr=None,
                     synonym_of=of)


# Topic-level keys, each with its broker-level default (the throttled replicas have none,
# as in Kafka). Types and minimums are Kafka 3.9's: INT keys are 32-bit, LONG keys 64-bit.
# Kafka 4 raised segment.bytes' minimum to 1 MiB; 14 (one empty v0 record) is kept so that
# tests can use tiny segments.
TOPIC_KEYS = {key.name: key for key in (
    _int_key("segment.bytes", 1 << 30, "the size at which a segment is rolled", 14,
             broker_key="log.segment.bytes"),
    _long_key("segment.ms", 7 * 24 * 3600 * 1000, "the age at which a segment is rolled", 1,
              broker_key="log.roll.ms"),
    _long_key("retention.ms", 7 * 24 * 3600 * 1000, "how long records are kept (-1: forever)", -1,
              broker_key="log.retention.ms"),
    _long_key("file.delete.delay.ms", 60_000, "how long a segment's files stay, renamed `.deleted`, once it "
              "leaves the log", 0, broker_key="log.segment.delete.delay.ms"),
    _long_key("retention.bytes", -1, "the size a partition is trimmed to (negative: no limit)",
              broker_key="log.retention.bytes"),
    _int_key("index.interval.bytes", 4096, "the bytes between two offset index entries", 0,
             broker_key="log.index.interval.bytes"),
    _int_key("max.message.bytes", 1048588, "the largest record batch a produce may append", 0,
             broker_key="message.max.bytes"),
    ConfigKey("message.timestamp.type", STRING, "CreateTime", "the producer's timestamps or the append time",
              _timestamp_type, "[CreateTime, LogAppendTime]", broker_key="log.message.timestamp.type"),
    _long_key("flush.messages", LONG_MAX, "the records appended between two fsyncs", 1,
              broker_key="log.flush.interval.messages"),
    _long_key("flush.ms", LONG_MAX, "the time between two fsyncs", 0, broker_key="log.flush.interval.ms"),
    ConfigKey("cleanup.policy", LIST, "delete", "delete old segments, compact keys, or both", _cleanup_policy,
              "[delete, compact]", broker_key="log.cleanup.policy"),
    ConfigKey("compression.type", STRING, "producer", "the codec batches are stored in (producer: as produced)",
              _compression_type, f"[{', '.join(COMPRESSION_TYPES)}]", broker_key="compression.type"),
    _int_key("min.insync.replicas", 1, "the in-sync replicas an acks=all produce needs", 1,
             broker_key="min.insync.replicas"),
    _long_key("message.timestamp.before.max.ms", LONG_MAX,
              "how far behind the broker's clock a CreateTime batch may be", 0,
              broker_key="log.message.timestamp.before.max.ms"),
    _long_key("message.timestamp.after.max.ms", 3_600_000,
              "how far ahead of the broker's clock a CreateTime batch may be", 0,
              broker_key="log.message.timestamp.after.max.ms"),
    _int_key("segment.index.bytes", 10 * 1024 * 1024, "the size of a segment's offset and time indexes", 4,
             broker_key="log.index.size.max.bytes"),
    _double_key("min.cleanable.dirty.ratio", 0.5, "the share of uncleaned log that makes a log cleanable",
                0.0, 1.0, broker_key="log.cleaner.min.cleanable.ratio"),
    _long_key("delete.retention.ms", 86_400_000, "how long a compacted topic keeps tombstones", 0,
              broker_key="log.cleaner.delete.retention.ms"),
    _long_key("min.compaction.lag.ms", 0, "the age below which a record is never compacted", 0,
              broker_key="log.cleaner.min.compaction.lag.ms"),
    _long_key("max.compaction.lag.ms", LONG_MAX, "the age above which a record's segment is compacted", 1,
              broker_key="log.cleaner.max.compaction.lag.ms"),
    _bool_key("unclean.leader.election.enable", False,
              "whether a replica out of the ISR may lead when no ISR member is live",
              broker_key="unclean.leader.election.enable"),
    ConfigKey("leader.replication.throttled.replicas", LIST, ThrottledReplicas(),
              "the replicas whose leader-side replication is throttled", _throttled_replicas,
              "* or [partition]:[broker],..."),
    ConfigKey("follower.replication.throttled.replicas", LIST, ThrottledReplicas(),
              "the replicas whose follower-side replication is throttled", _throttled_replicas,
              "* or [partition]:[broker],..."),
    ConfigKey("message.format.version", STRING, "3.0-IV1", "accepted and ignored, as Kafka 3.x ignores it: "
              "batches are stored in format v2 (legacy produce is converted)", _kafka_version,
              "a Kafka version, e.g. [0.10.2, 2.8, 3.0-IV1]", broker_key="log.message.format.version"),
)}
# Kafka 4's other topic configs, which this broker does not implement: refused by name
# (INVALID_CONFIG), never accepted and ignored.
NOT_IMPLEMENTED_TOPIC_CONFIGS = {
    "compression.gzip.level": "codecs compress at their default levels",
    "compression.lz4.level": "codecs compress at their default levels",
    "compression.zstd.level": "codecs compress at their default levels",
    "segment.jitter.ms": "segments roll at segment.ms exactly",
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


def _compact(log_config) -> bool:
    return "compact" in log_config.cleanup_policy.split(",")


LogConfig = dataclasses.make_dataclass(
    "LogConfig", [(key.attr, type(key.default), field(default=key.default)) for key in TOPIC_KEYS.values()],
    frozen=True, namespace={"compact": property(_compact), "__module__": __name__,
                            "__doc__": "The configuration one partition log runs with: one attribute a "
                                       "topic key (TOPIC_KEYS)."})


def _listed(entries) -> str:
    return ",".join(f"{name}://[{h}]:{p}" if ":" in h else f"{name}://{h}:{p}" for name, h, p in entries)


# Broker-level keys: the topic keys' defaults (dynamic), then the broker's own. Kafka's
# defaults and bounds; the coordinators' internal topics and the cluster's keys matter
# only where those run.
BROKER_KEYS = {key.name: key for key in (
    *(dataclasses.replace(key, name=key.broker_key, broker_key=None, topic_key=key.name,
                          update_mode=CLUSTER_WIDE) for key in TOPIC_KEYS.values() if key.broker_key),
    _coarse_key("log.retention.minutes", "log.retention.ms", 60_000, None, -1,
                "retention.ms's default in minutes"),
    _coarse_key("log.retention.hours", "log.retention.ms", 3_600_000, 7 * 24, -1, "retention.ms's default in hours"),
    _coarse_key("log.roll.hours", "log.roll.ms", 3_600_000, 7 * 24, 1, "segment.ms's default in hours"),
    _long_key("leader.replication.throttled.rate", LONG_MAX,
              "bytes a second a leader sends its throttled replicas", 0, update_mode=CLUSTER_WIDE,
              dynamic_only=True),
    _long_key("follower.replication.throttled.rate", LONG_MAX,
              "bytes a second a follower fetches for its throttled replicas", 0, update_mode=CLUSTER_WIDE,
              dynamic_only=True),
    _int_key("node.id", 0, "this broker's id", 0),
    _int_key("broker.id", 0, "this broker's id (node.id's older name)", 0, attr="node_id"),
    ConfigKey("listeners", STRING, None, "NAME://host:port,...: the listeners' addresses", _listeners,
              attr=None, show=lambda c: _listed((l.name, l.host, l.port) for l in c.listeners)),
    ConfigKey("advertised.listeners", STRING, None, "NAME://host:port,...: what clients are told to connect to",
              _listeners, attr=None,
              show=lambda c: _listed((l.name, *c.advertised_endpoint(l.name)) for l in c.listeners)),
    ConfigKey("listener.security.protocol.map", STRING, {p: p for p in SECURITY_PROTOCOLS},
              "NAME:PROTOCOL,...: each listener's security protocol", _protocol_map,
              show=lambda c: ",".join(f"{n}:{p}" for n, p in c.listener_security_protocol_map.items())),
    ConfigKey("inter.broker.listener.name", STRING, None, "the listener brokers reach each other on",
              _listener_name, show=lambda c: c.inter_broker_listener.name),
    ConfigKey("security.inter.broker.protocol", STRING, None,
              "the inter-broker listener by its protocol (or inter.broker.listener.name)", _security_protocol,
              f"[{', '.join(SECURITY_PROTOCOLS)}]", attr=None,
              show=lambda c: c.inter_broker_listener.security_protocol),
    ConfigKey("log.dirs", STRING, "", "the data directory, exactly one (or --data-dir)", _log_dirs,
              attr="data_dir"),
    ConfigKey("log.dir", STRING, "", "log.dirs' older name", _log_dirs, attr=None, synonym_of="log.dirs"),
    _int_key("num.partitions", 1, "the partitions of a topic created without a count", 1),
    _int_key("default.replication.factor", 1, "the replication factor of a topic created without one", 1),
    _bool_key("auto.create.topics.enable", True, "whether a Metadata request creates the topics it names",
              attr="auto_create_topics"),
    _int_key("max.request.partition.size.limit", 2000,
             "the most partitions a DescribeTopicPartitions answer describes", 1),
    _int_key("socket.request.max.bytes", 100 * 1024 * 1024, "the largest request accepted", 1),
    _long_key("log.retention.check.interval.ms", 300_000, "how often retention is enforced", 1,
              attr="retention_check_interval_ms"),
    _int_key("producer.id.expiration.ms", 86_400_000, "how long an idle producer id's state is kept", 1),
    _int_key("group.initial.rebalance.delay.ms", 3000, "how long a new group waits for more members", 0),
    _int_key("group.min.session.timeout.ms", 6000, "the shortest session timeout a member may ask", 1),
    _int_key("group.max.session.timeout.ms", 1_800_000, "the longest session timeout a member may ask", 1),
    _int_key("group.consumer.session.timeout.ms", 45_000,
             "how long a consumer-protocol member may go without a heartbeat", 1),
    _int_key("group.consumer.min.session.timeout.ms", 45_000,
             "the lowest group.consumer.session.timeout.ms allowed", 1),
    _int_key("group.consumer.max.session.timeout.ms", 60_000,
             "the highest group.consumer.session.timeout.ms allowed", 1),
    _int_key("group.consumer.heartbeat.interval.ms", 5_000,
             "how often consumer-protocol members are told to heartbeat", 1),
    _int_key("group.consumer.min.heartbeat.interval.ms", 5_000,
             "the lowest group.consumer.heartbeat.interval.ms allowed", 1),
    _int_key("group.consumer.max.heartbeat.interval.ms", 15_000,
             "the highest group.consumer.heartbeat.interval.ms allowed", 1),
    _int_key("group.consumer.max.size", INT_MAX, "the most members a consumer group may have", 1),
    ConfigKey("group.consumer.assignors", LIST, ("uniform", "range"),
              "the consumer groups' server-side assignors, the first the default", _assignors,
              "[uniform, range] (or Kafka's class names)", show=lambda c: ",".join(c.group_consumer_assignors)),
    _int_key("offsets.topic.num.partitions", 50, "__consumer_offsets' partitions", 1),
    _int_key("offsets.topic.segment.bytes", 100 * 1024 * 1024, "__consumer_offsets' segment size", 14),
    _int_key("offsets.retention.minutes", 7 * 24 * 60, "how long an empty group's offsets are kept", 1),
    _long_key("offsets.retention.check.interval.ms", 600_000, "how often expired offsets are removed", 1),
    _int_key("offset.metadata.max.bytes", 4096, "the largest metadata a committed offset may carry", 0),
    _long_key("replica.lag.time.max.ms", 30_000, "how long a follower may lag before it leaves the ISR", 1),
    _int_key("transaction.max.timeout.ms", 900_000, "the longest transaction timeout a producer may ask", 1),
    _int_key("transaction.state.log.num.partitions", 50, "__transaction_state's partitions", 1),
    _int_key("transaction.state.log.segment.bytes", 100 * 1024 * 1024, "__transaction_state's segment size",
             14),
    _int_key("transaction.abort.timed.out.transaction.cleanup.interval.ms", 10_000,
             "how often timed-out transactions are aborted", 1),
    _int_key("transaction.remove.expired.transaction.cleanup.interval.ms", 3_600_000,
             "how often expired transactional ids are removed", 1),
    _int_key("transactional.id.expiration.ms", 7 * 24 * 3600 * 1000,
             "how long an idle transactional id is kept", 1),
    # Each feature's finalized level (broker.features), named as the feature.
    *(_int_key(feature.name, feature.max_version,
               f"the finalized {feature.name} feature level listed by ApiVersions (kafka-features.sh's)",
               feature.min_version, feature.max_version) for feature in FEATURES),
    _int_key("add.partitions.to.txn.retry.backoff.max.ms", 100,
             "how long an AddPartitionsToTxn waits for the previous transaction's markers", 0),
    _int_key("max.connections", INT_MAX, "the connections accepted at once", 0),
    _int_key("max.connections.per.ip", INT_MAX, "the connections accepted at once from one address", 0),
    ConfigKey("max.connections.per.ip.overrides", STRING, {}, "host:count,...: max.connections.per.ip by address",
              _per_ip_overrides,
              show=lambda c: ",".join(f"{ip}:{n}" for ip, n in sorted(c.max_connections_per_ip_overrides.items()))),
    _long_key("connections.max.idle.ms", 600_000, "how long an idle connection is kept", 1),
    _long_key("connections.max.reauth.ms", 0, "a SASL session's lifetime, within which the client "
              "authenticates again (0: no limit; KIP-368)", 0),
    _int_key("queued.max.requests", 500, "the requests read ahead of their answers on one connection", 1),
    _int_key("max.incremental.fetch.session.cache.slots", 1000, "the incremental fetch sessions kept", 0),
    _int_key("quota.window.num", 11, "the windows a client quota's rate is measured over", 1),
    _int_key("quota.window.size.seconds", 1, "the length of each of them", 1),
    _int_key("controller.quota.window.num", 11, "controller_mutation_rate: the windows' worth of "
             "mutations a client's bucket holds", 1),
    _int_key("controller.quota.window.size.seconds", 1, "the length of each of them", 1),
    _int_key("sasl.server.max.receive.size", 524288, "the largest SASL token accepted before authentication", 1),
    _bool_key("log.cleaner.enable", True, "whether compacted topics are cleaned"),
    _int_key("log.cleaner.threads", 1, "0: no cleaning; above 0, one cleaner runs", 0),
    _long_key("log.cleaner.dedupe.buffer.size", 128 * 1024 * 1024, "the memory of the cleaner's offset map", 1),
    _double_key("log.cleaner.io.buffer.load.factor", 0.9, "how full the offset map may get", 0.0, 1.0),
    _double_key("log.cleaner.io.max.bytes.per.second", DOUBLE_MAX, "the cleaner's I/O rate (bytes a second)",
                1.0, DOUBLE_MAX),
    _long_key("log.cleaner.backoff.ms", 15_000, "how long the cleaner sleeps with nothing to clean", 0),
    ConfigKey("zookeeper.connect", STRING, None, "host:port,...[/chroot]: set, the broker joins a cluster",
              _zookeeper_connect),
    _int_key("zookeeper.session.timeout.ms", 18_000, "how long a silent broker stays alive to the others", 1),
    _int_key("zookeeper.connection.timeout.ms", None, "how long to wait for ZooKeeper (default: the session "
             "timeout)", 1, show=lambda c: c.zookeeper_connection_timeout_ms or c.zookeeper_session_timeout_ms),
    ConfigKey("broker.rack", STRING, None, "this broker's rack: replicas are spread over racks", _text_or_none),
    ConfigKey("replica.selector.class", STRING, None, "Kafka's RackAwareReplicaSelector: consumers fetch from "
              "a replica in their rack (KIP-392); unset, from the leader", _replica_selector,
              f"[{RACK_AWARE_SELECTOR}]"),
    _bool_key("auto.leader.rebalance.enable", True, "whether leadership moves back to preferred replicas"),
    _long_key("leader.imbalance.check.interval.seconds", 300, "how often leader imbalance is checked", 1),
    _int_key("leader.imbalance.per.broker.percentage", 10, "the imbalance that triggers a rebalance", 0),
    _bool_key("controlled.shutdown.enable", True, "whether a stopping broker hands its leaderships over first"),
    _int_key("controlled.shutdown.max.retries", 3, "the attempts at a controlled shutdown", 0),
    _long_key("controlled.shutdown.retry.backoff.ms", 5000, "the wait between two attempts", 0),
    _int_key("offsets.topic.replication.factor", 3, "__consumer_offsets' replication factor", 1, 32767),
    _int_key("transaction.state.log.replication.factor", 3, "__transaction_state's replication factor", 1,
             32767),
    _int_key("transaction.state.log.min.isr", 2, "__transaction_state's min.insync.replicas", 1),
    _int_key("replica.fetch.max.bytes", 1024 * 1024, "the bytes a follower asks per partition", 0),
    _int_key("replica.fetch.response.max.bytes", 10 * 1024 * 1024, "the bytes a follower asks per fetch", 0),
    _int_key("replica.fetch.wait.max.ms", 500, "how long a follower's fetch may wait at the leader", 0),
    _int_key("replica.fetch.min.bytes", 1, "the bytes a follower's fetch waits for", 1),
    _int_key("replica.fetch.backoff.ms", 1000, "the follower's wait after a failed fetch", 0),
    _int_key("replica.socket.timeout.ms", 30_000, "the follower's socket timeout", 1),
    _int_key("controller.socket.timeout.ms", 30_000, "the controller's socket timeout to brokers", 1),
    ConfigKey("authorizer.class.name", STRING, "", "set (any class name), ACLs are enforced", _text),
    ConfigKey("super.users", STRING, frozenset(), "Type:name;...: principals allowed everything", _super_users,
              show=lambda c: ";".join(sorted(c.super_users))),
    _bool_key("allow.everyone.if.no.acl.found", False, "whether a resource without ACLs is open to all"),
    _int_key("metrics.port", None, "the Prometheus endpoint's port (unset: no endpoint)", 0, 65535),
    ConfigKey("metrics.host", STRING, None, "the Prometheus endpoint's host (default: the first listener's)",
              _text_or_none),
)}
# Kafka's broker keys this broker does not implement: never set (INVALID_CONFIG naming the
# reason), and deleting them changes nothing (kafka-reassign-partitions deletes them).
NOT_IMPLEMENTED_BROKER_CONFIGS = {
    "replica.alter.log.dirs.io.max.bytes.per.second":
        "a Sluice broker keeps one log directory: no replica moves between log directories",
    **dict.fromkeys(("sasl.kerberos.kinit.cmd", "sasl.kerberos.min.time.before.relogin",
                     "sasl.kerberos.principal.to.local.rules", "sasl.kerberos.service.name",
                     "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.ticket.renew.window.factor"),
                    "GSSAPI (Kerberos) is not offered: sasl.enabled.mechanisms takes PLAIN, SCRAM-SHA-256 "
                    "and SCRAM-SHA-512"),
}


@dataclass
class _BrokerSettings:
    """A broker's configuration: one attribute a key of BROKER_KEYS (added to this class
    as BrokerConfig), and these, which are no one key's value: the listeners as resolved
    from their keys and the flags, the ssl.*/sasl.* settings, the topic defaults, and the
    keys set in server.properties."""

    # The first listener's address (what --host/--port set); `listeners` holds them all.
    host: str = "127.0.0.1"
    port: int = 9092
    listeners: list[ListenerConfig] = field(default_factory=list)
    advertised_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    # ssl.*, sasl.* and listener.name.* settings, read by broker.security when it builds
    # the listeners (their values may be secrets: never logged or described).
    security_settings: dict[str, str] = field(default_factory=dict)
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
        changes = {TOPIC_KEYS[k].attr: TOPIC_KEYS[k].parse(k, v) for k, v in overrides.items()}
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


# Bytes of Kafka's offset map per key: a 16-byte MD5 of the key and an 8-byte offset.
CLEANER_BYTES_PER_KEY = 24


def _check_cleaner(config: BrokerConfig) -> None:
    """The offset map must hold at least one key, as Kafka's cleaner asserts."""
    keys = config.log_cleaner_dedupe_buffer_size // CLEANER_BYTES_PER_KEY * config.log_cleaner_io_buffer_load_factor
    if keys < 1:
        raise ConfigError(f"log.cleaner.dedupe.buffer.size {config.log_cleaner_dedupe_buffer_size} with "
                          f"log.cleaner.io.buffer.load.factor {config.log_cleaner_io_buffer_load_factor:g} "
                          f"leaves no room for a single key ({CLEANER_BYTES_PER_KEY} bytes each)")


def _check_consumer_group_timeouts(config: BrokerConfig) -> None:
    """Kafka's GroupCoordinatorConfig checks: each KIP-848 timing within its bounds, the
    heartbeat interval below the session timeout."""
    for what in ("session.timeout", "heartbeat.interval"):
        key, low, high = (f"group.consumer.{bound}{what}.ms" for bound in ("", "min.", "max."))
        value, lowest, highest = (getattr(config, k.replace(".", "_")) for k in (key, low, high))
        if highest < lowest:
            raise ConfigError(f"{high} must be greater than or equal to {low}")
        if value < lowest:
            raise ConfigError(f"{key} must be greater than or equal to {low}")
        if value > highest:
            raise ConfigError(f"{key} must be less than or equal to {high}")
    if config.group_consumer_heartbeat_interval_ms >= config.group_consumer_session_timeout_ms:
        raise ConfigError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")


def check_topic_config_key(key: str) -> None:
    """Raise ConfigError unless `key` is a topic config this broker implements."""
    if key in NOT_IMPLEMENTED_TOPIC_CONFIGS:
        raise ConfigError(f"topic config {key!r} is not implemented by this broker "
                          f"({NOT_IMPLEMENTED_TOPIC_CONFIGS[key]})")
    if key not in TOPIC_KEYS:
        raise ConfigError(f"unknown topic config {key!r}")


def config_text(value) -> str:
    """A parsed value as Kafka writes it: booleans in lower case, an unset value empty."""
    if value is None:
        return ""
    return str(value).lower() if isinstance(value, bool) else str(value)


def parse_topic_configs(configs: dict[str, str | None]) -> dict[str, str]:
    """Validate topic-level overrides; returns them normalised. Raises ConfigError."""
    result = {}
    for key, value in configs.items():
        check_topic_config_key(key)
        if value is None:
            raise ConfigError(f"{key}: a value is required")
        result[key] = config_text(TOPIC_KEYS[key].parse(key, value))
    return result


def _broker_field(key: ConfigKey):
    if isinstance(key.default, dict):  # each BrokerConfig its own
        return field(default_factory=functools.partial(dict, key.default))
    return field(default=key.default)


# The BrokerConfig attributes the broker keys set (broker.id and node.id set one).
_BROKER_FIELDS: dict[str, ConfigKey] = {}
for _key in BROKER_KEYS.values():
    if _key.attr is not None and _key.topic_key is None:
        _BROKER_FIELDS.setdefault(_key.attr, _key)
del _key
BrokerConfig = dataclasses.make_dataclass(
    "BrokerConfig", [(attr, Any, _broker_field(key)) for attr, key in _BROKER_FIELDS.items()],
    bases=(_BrokerSettings,), namespace={"__module__": __name__, "__doc__": _BrokerSettings.__doc__})


def broker_values(config: BrokerConfig) -> dict[str, str]:
    """Every broker key but the topic defaults (described as their topic keys are) and the
    synonyms, with its effective value as Kafka would print it: what DescribeConfigs
    reports for the broker."""
    return {key.name: config_text(key.show(config) if key.show else getattr(config, key.attr))
            for key in BROKER_KEYS.values() if key.topic_key is None and key.synonym_of is None}


def build_config(props: dict[str, str], overrides: dict[str, object]) -> tuple[BrokerConfig, list[str]]:
    """A BrokerConfig from properties plus flag overrides; returns it and warnings."""
    config = BrokerConfig()
    warnings: list[str] = []
    parsed: dict[str, object] = {}
    for key, text in props.items():
        spec = BROKER_KEYS.get(key)
        if spec is None and key.startswith(_SECURITY_PREFIXES):
            config.security_settings[key] = text  # values may be secrets: never described
        elif spec is None:
            warnings.append(f"unknown config key {key!r} ignored")
        elif spec.dynamic_only:
            warnings.append(f"{key} can only be set dynamically (AlterConfigs for a broker or the "
                            f"cluster default): ignored")
        else:
            parsed[key] = spec.parse(key, text)
            config.static[key] = text
    for spec in BROKER_KEYS.values():  # a synonym counts where its key is not set; the first one wins
        if spec.synonym_of is not None and spec.name in parsed:
            parsed.setdefault(spec.synonym_of, parsed.pop(spec.name))
    if parsed.get("log.cleaner.threads", 1) > 1:
        warnings.append(f"log.cleaner.threads={parsed['log.cleaner.threads']}: one log cleaner runs")
    log_changes = {}
    for key, value in parsed.items():  # in the file's order: of broker.id and node.id the later wins
        spec = BROKER_KEYS[key]
        if spec.topic_key is not None:
            log_changes[spec.attr] = value
        elif spec.attr is not None:
            setattr(config, spec.attr, value)
    listeners = parsed.get("listeners")
    if listeners is not None:  # the first listener's address, unless the flags set it
        config.host, config.port = listeners[0].host, listeners[0].port
    for name, value in overrides.items():
        if value is not None:
            setattr(config, name, value)
    _resolve_listeners(config, listeners, parsed.get("advertised.listeners"),
                       parsed.get("security.inter.broker.protocol"))
    config.log = dataclasses.replace(config.log, **log_changes)
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError("max.connections.per.ip: 0 is allowed only with "
                          "max.connections.per.ip.overrides (as in Kafka)")
    if config.metrics_port and config.metrics_port in (l.port for l in config.listeners):
        raise ConfigError(f"metrics.port: {config.metrics_port} is a listener's port")
    if not config.data_dir:
        raise ConfigError("no data directory: pass --data-dir or set log.dirs")
    _check_cleaner(config)
    _check_consumer_group_timeouts(config)
    return config, warnings


def markdown_row(*cells) -> str:
    """A row of a Markdown table, for the reference pages generated from the code."""
    return "| " + " | ".join(cells) + " |"


def reference() -> str:
    """docs/configs.md: the tables as markdown."""
    defaults = broker_values(BrokerConfig())
    lines = ["# Configs", "",
             "Every key the broker understands, generated from the tables of `broker/config.py`",
             "(`python -m broker.config --reference > docs/configs.md`; a test fails when they differ).",
             "Values are checked as Kafka 3.9 checks them: INT keys are 32-bit, LONG keys 64-bit, numbers",
             "as Java parses them. Update mode: read-only keys change with server.properties and a",
             "restart; cluster-wide ones also at runtime (AlterConfigs, for one broker or the cluster",
             "default).", "",
             "## Broker configs", "",
             markdown_row("Key", "Type", "Default", "Valid values", "Update mode", "Description"),
             markdown_row(*["---"] * 6)]
    for key in BROKER_KEYS.values():
        doc = key.doc
        if key.topic_key is not None:
            doc = f"the default of topic config `{key.topic_key}`: {doc}"
        elif key.synonym_of is not None:
            doc = f"sets `{key.synonym_of}` when that is not set: {doc}"
        mode = f"{key.update_mode} (dynamic only)" if key.dynamic_only else key.update_mode
        default = defaults.get(key.name, config_text(key.default))
        lines.append(markdown_row(f"`{key.name}`", TYPE_NAMES[key.type], f"`{default}`" if default else "",
                          key.valid, mode, doc))
    lines += ["", "`ssl.*`, `sasl.*` and `listener.name.<name>.*`: the TLS and SASL settings of the listeners",
              "([Security](security.md)), never described.", "",
              "## Topic configs", "",
              markdown_row("Key", "Type", "Default", "Valid values", "Broker default", "Description"),
              markdown_row(*["---"] * 6)]
    for key in TOPIC_KEYS.values():
        default = config_text(key.default)
        lines.append(markdown_row(f"`{key.name}`", TYPE_NAMES[key.type], f"`{default}`" if default else "", key.valid,
                          f"`{key.broker_key}`" if key.broker_key else "", key.doc))
    lines += ["", "## Not implemented", "",
              "Refused with INVALID_CONFIG naming the key and why.", "",
              markdown_row("Key", "Why"), markdown_row("---", "---")]
    for name, why in {**NOT_IMPLEMENTED_BROKER_CONFIGS, **NOT_IMPLEMENTED_TOPIC_CONFIGS}.items():
        lines.append(markdown_row(f"`{name}`", why))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] != ["--reference"]:
        sys.exit("usage: python -m broker.config --reference  (prints docs/configs.md)")
    sys.stdout.write(reference())
