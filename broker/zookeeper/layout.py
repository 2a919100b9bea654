"""Kafka's ZooKeeper-era layout: the znode paths and JSON a ZooKeeper-mode Kafka cluster
writes, so that anyone who knows Kafka can read a Sluice cluster with zkCli.sh.

Sans-I/O: paths are strings and znode data is bytes, both ways; `broker.zookeeper.store`
does the ZooKeeper calls. Each record is a small dataclass with `to_json()` and
`from_json(path, data)`. Kafka writes compact JSON (no spaces) with some numbers as
strings (timestamps, producer id blocks, the cluster id's version); decoding anything
else raises `ZkDataError`, which names the znode, rather than letting a half-read record
through. Keys Kafka added later than the shapes here are ignored when read.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Mapping
from urllib.parse import quote, unquote

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG = "/config"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"

# What a broker makes sure exists when it starts, as Kafka's brokers do; `/controller_epoch`
# comes with the first controller and `/cluster/id` with the first broker.
PERSISTENT_PATHS = (BROKER_IDS, BROKER_TOPICS, BROKER_SEQID, CONFIG_TOPICS, CONFIG_BROKERS,
                    CONFIG_USERS, CONFIG_CLIENTS, CONFIG_CHANGES, DELETE_TOPICS, ISR_CHANGE_NOTIFICATION, PRODUCER_ID_BLOCK)

# Sequential znodes: ZooKeeper appends a 10-digit counter to these prefixes.
CONFIG_CHANGE_PREFIX = CONFIG_CHANGES + "/config_change_"
ISR_CHANGE_PREFIX = ISR_CHANGE_NOTIFICATION + "/isr_change_"

# ACLs (broker.security.acl_store, which keeps their JSON): LITERAL patterns in
# /kafka-acl/<ResourceType>/<name>, PREFIXED ones in
# /kafka-acl-extended/prefixed/<ResourceType>/<prefix>; each change is noted by a
# sequential acl_changes_<seq> under the changes path of its pattern type. Created when
# the authorizer starts, as Kafka's AclAuthorizer creates them.
KAFKA_ACL = "/kafka-acl"
KAFKA_ACL_CHANGES = "/kafka-acl-changes"
PREFIXED_ACL = "/kafka-acl-extended/prefixed"
KAFKA_ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_PATHS = (KAFKA_ACL, KAFKA_ACL_CHANGES, PREFIXED_ACL, KAFKA_ACL_EXTENDED_CHANGES)
ACL_CHANGE_NAME = "acl_changes_"

NO_LEADER = -1
INITIAL_CONTROLLER_EPOCH = 0  # written by the first controller, which then makes it 1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


# An entity's `<default>` (/config/brokers/<default>: every broker; /config/users/<default>:
# every user), never sanitized
DEFAULT_ENTITY = "<default>"


def broker_config_path(entity: str) -> str:
    """/config/brokers/<id>, or /config/brokers/<default> for every broker."""
    return f"{CONFIG_BROKERS}/{entity}"


def sanitized(name: str | None) -> str:
    """An entity name as Kafka's Sanitizer puts it in a znode path (URL-encoded, so that a
    name may hold '/'); None: the `<default>` entity."""
    return DEFAULT_ENTITY if name is None else quote(name, safe="").replace("~", "%7E")


def config_entity_path(*parts: tuple[str, str | None]) -> str:
    """The path below /config of an entity's config, as its change notifications name it:
    ("users", "alice"), ("clients", None) -> "users/alice/clients/<default>"."""
    return "/".join(f"{kind}/{sanitized(name)}" for kind, name in parts)


def config_entity_parts(entity_path: str) -> tuple[tuple[str, str | None], ...]:
    """`config_entity_path`'s parts back; ValueError for a path not made of (kind, name) pairs."""
    pieces = entity_path.split("/")
    if len(pieces) % 2 or not all(pieces):
        raise ValueError(f"{entity_path!r} is not a config entity path")
    return tuple((kind, None if name == DEFAULT_ENTITY else unquote(name))
                 for kind, name in zip(pieces[::2], pieces[1::2]))


def delete_topic_path(topic: str) -> str:
    """An empty znode: the request to delete `topic`, removed once the controller has."""
    return f"{DELETE_TOPICS}/{topic}"


class ZkDataError(ValueError):
    """A znode holds what Kafka's layout does not allow there."""

    def __init__(self, path: str, reason: str):
        self.path = path
        super().__init__(f"{path}: {reason}")


def uuid_to_string(value: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def uuid_from_string(path: str, text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text.encode("ascii") + b"==")
    except (UnicodeEncodeError, binascii.Error, ValueError):
        raw = b""
    if len(text) != 22 or len(raw) != 16:
        raise ZkDataError(path, f"{text!r} is not a base64 Uuid of 22 characters")
    return uuid.UUID(bytes=raw)


# Decoding helpers: each names the znode and the key in its error.

_MISSING = object()
_JAVA_LONG = re.compile(r"[+-]?[0-9]+")


def _dump(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _load(path: str, data: bytes):
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(path, f"not JSON: {bytes(data[:80])!r}") from None


def _object(path: str, data: bytes) -> dict:
    value = _load(path, data)
    if not isinstance(value, dict):
        raise ZkDataError(path, f"not a JSON object: {bytes(data[:80])!r}")
    return value


def _get(path: str, obj: dict, key: str, default):
    value = obj.get(key, default)
    if value is _MISSING:
        raise ZkDataError(path, f"no {key!r}")
    return value


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(path: str, obj: dict, key: str, default=_MISSING) -> int:
    value = _get(path, obj, key, default)
    if not _is_int(value):
        raise ZkDataError(path, f"{key!r} is not an integer: {value!r}")
    return value


def _str(path: str, obj: dict, key: str, default=_MISSING) -> str:
    value = _get(path, obj, key, default)
    if not isinstance(value, str):
        raise ZkDataError(path, f"{key!r} is not a string: {value!r}")
    return value


def _optional_str(path: str, obj: dict, key: str) -> str | None:
    return None if obj.get(key) is None else _str(path, obj, key)


def _long_string(path: str, obj: dict, key: str) -> int:
    """An integer Kafka writes as a JSON string (Long.toString)."""
    value = _str(path, obj, key)
    if not _JAVA_LONG.fullmatch(value):
        raise ZkDataError(path, f"{key!r} is not an integer string: {value!r}")
    return int(value)


def _int_list(path: str, what: str, value) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(_is_int(v) for v in value):
        raise ZkDataError(path, f"{what} is not a list of integers: {value!r}")
    return tuple(value)


def _mapping(path: str, obj: dict, key: str, default=_MISSING) -> dict:
    value = _get(path, obj, key, default)
    if not isinstance(value, dict):
        raise ZkDataError(path, f"{key!r} is not a JSON object: {value!r}")
    return value


def _replica_map(path: str, obj: dict, key: str, default=_MISSING) -> dict[int, tuple[int, ...]]:
    """{"<partition>": [broker ids]} with partition numbers as keys."""
    result = {}
    for partition, replicas in _mapping(path, obj, key, default).items():
        if not partition.isascii() or not partition.isdigit():
            raise ZkDataError(path, f"{key!r} has a key that is no partition number: {partition!r}")
        result[int(partition)] = _int_list(path, f"{key!r} of partition {partition}", replicas)
    return result


def _str_map(path: str, obj: dict, key: str) -> dict[str, str]:
    value = _mapping(path, obj, key)
    if not all(isinstance(v, str) for v in value.values()):
        raise ZkDataError(path, f"{key!r} has values that are not strings: {value!r}")
    return value


def _partition_entries(path: str, obj: dict) -> list[tuple[tuple[str, int], dict]]:
    """[{"topic": t, "partition": p, ...}, ...]: each entry's (t, p) and the entry."""
    entries = _get(path, obj, "partitions", _MISSING)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ZkDataError(path, f"'partitions' is not a list of objects: {entries!r}")
    return [((_str(path, e, "topic"), _int(path, e, "partition")), e) for e in entries]


def _partition_list(path: str, obj: dict) -> tuple[tuple[str, int], ...]:
    return tuple(tp for tp, _ in _partition_entries(path, obj))


def _replica_json(assignment: Mapping[int, tuple[int, ...]]) -> dict[str, list[int]]:
    return {str(partition): list(replicas) for partition, replicas in sorted(assignment.items())}


@dataclass(frozen=True)
class ClusterId:
    """/cluster/id: the id every broker of the cluster keeps in its meta.properties."""

    id: str

    def to_json(self) -> bytes:
        return _dump({"version": "1", "id": self.id})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "ClusterId":
        return cls(_str(path, _object(path, data), "id"))


@dataclass(frozen=True)
class Listener:
    """An advertised endpoint: written as `NAME://host:port` with NAME's security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_ENDPOINT = re.compile(r"([^:/]+)://(\[[^\]]*\]|[^:]*):([0-9]+)")


@dataclass(frozen=True)
class BrokerRegistration:
    """/brokers/ids/<id> (ephemeral): how clients and other brokers reach a live broker."""

    listeners: tuple[Listener, ...]
    timestamp_ms: int
    rack: str | None = None
    jmx_port: int = -1
    features: Mapping[str, object] = field(default_factory=dict)

    VERSION = 5

    def to_json(self) -> bytes:
        # The top-level host and port are the first PLAINTEXT listener's, for old clients.
        plaintext = next((l for l in self.listeners if l.security_protocol == "PLAINTEXT"), None)
        value = {
            "version": self.VERSION,
            "host": plaintext.host if plaintext else None,
            "port": plaintext.port if plaintext else -1,
            "jmx_port": self.jmx_port,
            "timestamp": str(self.timestamp_ms),
            "endpoints": [l.connection_string() for l in self.listeners],
            "listener_security_protocol_map": {l.name: l.security_protocol for l in self.listeners},
        }
        if self.rack is not None:
            value["rack"] = self.rack
        value["features"] = dict(self.features)
        return _dump(value)

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "BrokerRegistration":
        obj = _object(path, data)
        endpoints = _get(path, obj, "endpoints", _MISSING)
        if not isinstance(endpoints, list) or not all(isinstance(e, str) for e in endpoints):
            raise ZkDataError(path, f"'endpoints' is not a list of strings: {endpoints!r}")
        protocols = _str_map(path, obj, "listener_security_protocol_map") \
            if "listener_security_protocol_map" in obj else {}
        listeners = []
        for endpoint in endpoints:
            match = _ENDPOINT.fullmatch(endpoint)
            if match is None:
                raise ZkDataError(path, f"endpoint {endpoint!r} is not NAME://host:port")
            name, host, port = match.groups()
            listeners.append(Listener(name, host.strip("[]"), int(port), protocols.get(name, name)))
        return cls(tuple(listeners), _long_string(path, obj, "timestamp"),
                   _optional_str(path, obj, "rack"), _int(path, obj, "jmx_port", -1),
                   _mapping(path, obj, "features", {}))


@dataclass(frozen=True)
class ControllerRegistration:
    """/controller (ephemeral): the broker that won the election."""

    broker_id: int
    timestamp_ms: int

    def to_json(self) -> bytes:
        # kraftControllerEpoch is -1 for a ZooKeeper-elected controller (not a KRaft one
        # in migration).
        return _dump({"version": 2, "brokerid": self.broker_id,
                      "timestamp": str(self.timestamp_ms), "kraftControllerEpoch": -1})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "ControllerRegistration":
        obj = _object(path, data)
        return cls(_int(path, obj, "brokerid"), _long_string(path, obj, "timestamp"))


@dataclass(frozen=True)
class ControllerEpoch:
    """/controller_epoch: a bare integer, one more for each elected controller. Its znode
    version, not this value, is what fences a deposed controller's writes."""

    epoch: int

    def to_json(self) -> bytes:
        return str(self.epoch).encode("ascii")

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "ControllerEpoch":
        value = _load(path, data)
        if not _is_int(value):
            raise ZkDataError(path, f"not an integer: {bytes(data[:80])!r}")
        return cls(value)


@dataclass(frozen=True)
class TopicAssignment:
    """/brokers/topics/<topic>: the topic's id and each partition's replicas, in preference
    order (the first is the preferred leader), with a reassignment's replicas on the way in
    and out."""

    topic_id: uuid.UUID
    partitions: Mapping[int, tuple[int, ...]]
    adding_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    VERSION = 3

    def to_json(self) -> bytes:
        return _dump({
            "version": self.VERSION,
            "topic_id": uuid_to_string(self.topic_id),
            "partitions": _replica_json(self.partitions),
            "adding_replicas": _replica_json(self.adding_replicas),
            "removing_replicas": _replica_json(self.removing_replicas),
        })

    def with_partition(self, partition: int, replicas: tuple[int, ...], adding: tuple[int, ...],
                       removing: tuple[int, ...]) -> "TopicAssignment":
        """This assignment with one partition's replicas, and its replicas being added and
        removed, replaced (a partition is listed there only while they are not empty)."""
        def changed(by_partition: Mapping[int, tuple[int, ...]], value: tuple[int, ...]):
            rest = {p: r for p, r in by_partition.items() if p != partition}
            return {**rest, partition: tuple(value)} if value else rest

        return TopicAssignment(self.topic_id, {**self.partitions, partition: tuple(replicas)},
                               changed(self.adding_replicas, adding),
                               changed(self.removing_replicas, removing))

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "TopicAssignment":
        obj = _object(path, data)
        return cls(uuid_from_string(path, _str(path, obj, "topic_id")),
                   _replica_map(path, obj, "partitions"),
                   _replica_map(path, obj, "adding_replicas", {}),
                   _replica_map(path, obj, "removing_replicas", {}))


@dataclass(frozen=True)
class LeaderAndIsr:
    """/brokers/topics/<topic>/partitions/<p>/state: the partition's leader (NO_LEADER when
    offline), its epoch, the in-sync replicas, and the controller epoch that wrote them."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def to_json(self) -> bytes:
        return _dump({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                      "controller_epoch": self.controller_epoch, "isr": list(self.isr)})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "LeaderAndIsr":
        obj = _object(path, data)
        return cls(_int(path, obj, "leader"), _int(path, obj, "leader_epoch"),
                   _int_list(path, "'isr'", _get(path, obj, "isr", _MISSING)),
                   _int(path, obj, "controller_epoch"))


@dataclass(frozen=True)
class EntityConfig:
    """/config/topics/<topic>, /config/brokers/<id>, /config/users/<user>[/clients/<id>],
    /config/clients/<id>: the overrides (SCRAM credentials, quotas), values as strings.
    A znode Kafka made as the parent of another one has no data: no config."""

    config: Mapping[str, str]

    def to_json(self) -> bytes:
        return _dump({"version": 1, "config": dict(self.config)})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "EntityConfig":
        return cls(_str_map(path, _object(path, data), "config") if data else {})


@dataclass(frozen=True)
class ConfigChange:
    """/config/changes/config_change_<seq>: tells every broker to re-read one entity's
    config, e.g. entity_path "topics/<topic>" for /config/topics/<topic>."""

    entity_path: str

    def to_json(self) -> bytes:
        return _dump({"version": 2, "entity_path": self.entity_path})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "ConfigChange":
        return cls(_str(path, _object(path, data), "entity_path"))


@dataclass(frozen=True)
class IsrChange:
    """/isr_change_notification/isr_change_<seq>: partitions whose ISR a leader changed, for
    the controller to propagate."""

    partitions: tuple[tuple[str, int], ...]

    def to_json(self) -> bytes:
        return _dump({"version": 1, "partitions": [{"topic": topic, "partition": partition}
                                                   for topic, partition in self.partitions]})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "IsrChange":
        return cls(_partition_list(path, _object(path, data)))


@dataclass(frozen=True)
class PartitionReassignment:
    """/admin/reassign_partitions: target replicas per partition, written by an operator's
    tool (Kafka's pre-KIP-455 way); the controller starts each and removes a partition once
    its reassignment is done, the znode with the last."""

    partitions: Mapping[tuple[str, int], tuple[int, ...]]

    def to_json(self) -> bytes:
        return _dump({"version": 1, "partitions": [
            {"topic": topic, "partition": partition, "replicas": list(replicas)}
            for (topic, partition), replicas in sorted(self.partitions.items())]})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "PartitionReassignment":
        return cls({tp: _int_list(path, f"'replicas' of {tp[0]}-{tp[1]}",
                                  _get(path, entry, "replicas", _MISSING))
                    for tp, entry in _partition_entries(path, _object(path, data))})


@dataclass(frozen=True)
class ProducerIdBlock:
    """/latest_producer_id_block: the last block of producer ids a broker claimed (both
    ends included). The znode starts empty: no block claimed yet."""

    broker_id: int
    block_start: int
    block_end: int

    def to_json(self) -> bytes:
        return _dump({"version": 1, "broker": self.broker_id,
                      "block_start": str(self.block_start), "block_end": str(self.block_end)})

    @classmethod
    def from_json(cls, path: str, data: bytes) -> "ProducerIdBlock":
        obj = _object(path, data)
        return cls(_int(path, obj, "broker"), _long_string(path, obj, "block_start"),
                   _long_string(path, obj, "block_end"))
