"""The source's and sink's options, named and interpreted as by Spark's built-in Kafka connector.

Every mistake is reported as `SluiceOptionError` naming the option, before any data is
read. Differences from Spark's connector: `kafka.isolation.level` defaults to
read_committed; `kafka.group.id` makes the query commit its progress to that consumer
group; `startingOffsets` also accepts `group` (the group's committed offsets).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly_once", "at_least_once"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # index = Kafka's compression id

# kafka.* settings handed to the wire client: option -> (keyword, conversion to its unit).
_CLIENT_SETTINGS = {
    "kafka.client.id": ("client_id", str),
    "kafka.request.timeout.ms": ("request_timeout", lambda v: int(v) / 1000),
}


class SluiceOptionError(ValueError):
    """A source or sink option is missing, contradictory or malformed."""


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topic names, a pattern, or assigned topic-partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None and not topic.startswith("__")
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics


@dataclass(frozen=True)
class Position:
    """Where to start or end: "earliest", "latest", "group", or per-partition offsets or
    timestamps ({(topic, partition): value}, offsets may be -2/-1)."""

    kind: str
    offsets: dict = field(default_factory=dict)
    timestamps: dict = field(default_factory=dict)
    timestamp: int | None = None  # one timestamp for every partition
    strategy: str = "error"  # what a timestamp without an offset leads to: error | latest


@dataclass(frozen=True)
class SourceOptions:
    bootstrap_servers: str
    subscription: Subscription
    starting: Position
    ending: Position
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: int
    group_id: str | None
    client: dict  # keyword arguments for wire.client
    max_partition_fetch_bytes: int
    fetch_max_wait_ms: int


def _lower(options) -> dict[str, str]:
    return {k.lower(): v for k, v in dict(options).items()}


def _json(name: str, text: str):
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SluiceOptionError(f"option '{name}' is not valid JSON ({exc.msg}): {text!r}") from None


def _partition_map(name: str, text: str, allowed=None) -> dict[tuple[str, int], int]:
    parsed = _json(name, text)
    if not isinstance(parsed, dict) or not parsed:
        raise SluiceOptionError(f"option '{name}' must be a JSON object like "
                                f'{{"topic": {{"0": 23, "1": -2}}}}, got {text!r}')
    result = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise SluiceOptionError(f"option '{name}': topic {topic!r} must map partitions to values")
        for partition, value in partitions.items():
            if not str(partition).lstrip("-").isdigit() or int(partition) < 0:
                raise SluiceOptionError(f"option '{name}': {partition!r} is not a partition number")
            if not isinstance(value, int) or isinstance(value, bool):
                raise SluiceOptionError(f"option '{name}': {topic}/{partition} must be an integer")
            if allowed is not None and not allowed(value):
                raise SluiceOptionError(f"option '{name}': {topic}/{partition} = {value} is not allowed here")
            result[(topic, int(partition))] = value
    return result


def _int(options: dict, name: str, minimum: int) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise SluiceOptionError(f"option '{name}' must be an integer, got {text!r}") from None
    if value < minimum:
        raise SluiceOptionError(f"option '{name}' must be at least {minimum}, got {value}")
    return value


def _bool(options: dict, name: str, default: bool) -> bool:
    text = options.get(name.lower())
    if text is None:
        return default
    if text.lower() not in ("true", "false"):
        raise SluiceOptionError(f"option '{name}' must be true or false, got {text!r}")
    return text.lower() == "true"


def _subscription(options: dict) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if name.lower() in options]
    if len(given) != 1:
        raise SluiceOptionError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' "
                                f"is required, got {given or 'none'}")
    name = given[0]
    value = options[name.lower()].strip()
    if name == "subscribe":
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SluiceOptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if name == "subscribePattern":
        try:
            re.compile(value)
        except re.error as exc:
            raise SluiceOptionError(f"option 'subscribePattern' is not a valid pattern: {exc}") from None
        return Subscription(pattern=value)
    parsed = _json("assign", value)
    if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(p, list) and all(isinstance(i, int) and i >= 0 for i in p) for p in parsed.values()):
        raise SluiceOptionError(f'option \'assign\' must be like {{"topic": [0, 1]}}, got {value!r}')
    return Subscription(assigned=tuple((t, p) for t, parts in parsed.items() for p in parts))


def _starting(options: dict, batch: bool) -> Position:
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise SluiceOptionError("option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest'")
    if "startingtimestamp" in options:
        ts = _int(options, "startingTimestamp", 0)
        return Position("timestamp", timestamp=ts, strategy=strategy)
    if "startingoffsetsbytimestamp" in options:
        return Position("timestamp", timestamps=_partition_map(
            "startingOffsetsByTimestamp", options["startingoffsetsbytimestamp"], lambda v: v >= 0),
            strategy=strategy)
    text = options.get("startingoffsets", "earliest" if batch else "latest").strip()
    if text.lower() in ("earliest", "latest", "group"):
        if batch and text.lower() == "latest":
            raise SluiceOptionError("option 'startingOffsets' cannot be 'latest' for a batch query")
        return Position(text.lower())
    return Position("offsets", offsets=_partition_map(
        "startingOffsets", text, lambda v: v >= EARLIEST and (not batch or v != LATEST)))


def _ending(options: dict, batch: bool) -> Position:
    names = [n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
             if n.lower() in options]
    if names and not batch:
        raise SluiceOptionError(f"option '{names[0]}' is for batch queries only")
    if "endingtimestamp" in options:
        return Position("timestamp", timestamp=_int(options, "endingTimestamp", 0), strategy="latest")
    if "endingoffsetsbytimestamp" in options:
        return Position("timestamp", timestamps=_partition_map(
            "endingOffsetsByTimestamp", options["endingoffsetsbytimestamp"], lambda v: v >= 0),
            strategy="latest")
    text = options.get("endingoffsets", "latest").strip()
    if text.lower() == "latest":
        return Position("latest")
    if text.lower() == "earliest":
        raise SluiceOptionError("option 'endingOffsets' cannot be 'earliest'")
    return Position("offsets", offsets=_partition_map("endingOffsets", text,
                                                      lambda v: v >= 0 or v == LATEST))


def parse_source_options(raw, batch: bool) -> SourceOptions:
    options = _lower(raw)
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise SluiceOptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port])")
    for address in servers.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise SluiceOptionError(f"option 'kafka.bootstrap.servers': {address!r} is not host:port")
    level = options.get("kafka.isolation.level", "read_committed").lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise SluiceOptionError("option 'kafka.isolation.level' must be read_committed or read_uncommitted")
    starting = _starting(options, batch)
    group_id = options.get("kafka.group.id") or None
    if starting.kind == "group" and group_id is None:
        raise SluiceOptionError("option 'startingOffsets' = group needs option 'kafka.group.id'")
    client = {}
    for name, (key, convert) in _CLIENT_SETTINGS.items():
        if name in options:
            try:
                client[key] = convert(options[name])
            except ValueError:
                raise SluiceOptionError(f"option '{name}' is malformed: {options[name]!r}") from None
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=_subscription(options),
        starting=starting,
        ending=_ending(options, batch),
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", 1),
        min_partitions=_int(options, "minPartitions", 1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=READ_COMMITTED if level == "read_committed" else READ_UNCOMMITTED,
        group_id=group_id,
        client=client,
        max_partition_fetch_bytes=_int(options, "kafka.max.partition.fetch.bytes", 1) or 8 * 1024 * 1024,
        fetch_max_wait_ms=_int(options, "kafka.fetch.max.wait.ms", 0) or 500,
    )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    guarantee: str
    compression: str
    transaction_timeout_ms: int
    client: tuple


def parse_sink_options(raw, schema) -> SinkOptions:
    options = {k.lower(): v for k, v in dict(raw).items()}
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise SluiceOptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port])")
    guarantee = options.get("deliveryguarantee", EXACTLY_ONCE).lower()
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise SluiceOptionError("option 'deliveryGuarantee' must be exactly_once or at_least_once")
    compression = options.get("kafka.compression.type", "none").lower()
    if compression not in CODECS:
        raise SluiceOptionError(f"option 'kafka.compression.type' must be one of {', '.join(CODECS)}")
    try:
        timeout = int(options.get("kafka.transaction.timeout.ms", 900_000))
    except ValueError:
        raise SluiceOptionError("option 'kafka.transaction.timeout.ms' must be an integer") from None
    _check_columns(schema, options.get("topic"))
    client = (("client_id", options.get("kafka.client.id", "sluice-spark-sink")),)
    return SinkOptions(servers, options.get("topic"), guarantee, compression, timeout, client)


def _check_columns(schema, topic_option) -> None:
    types = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    if "value" not in types:
        raise SluiceOptionError("the sink needs a 'value' column (binary or string)")
    for column, allowed in (("value", ("binary", "string")), ("key", ("binary", "string")),
                            ("topic", ("string",)), ("partition", ("int",)),
                            ("headers", ("array<struct<key:string,value:binary>>",))):
        if column in types and types[column] not in allowed:
            raise SluiceOptionError(f"column '{column}' must be {' or '.join(allowed)}, not {types[column]}")
    if "topic" not in types and not topic_option:
        raise SluiceOptionError("no 'topic' column: set option 'topic'")
