"""The source's and sink's options, named and interpreted as by Spark's built-in Kafka connector.

Every mistake is reported as `SluiceOptionError` naming the option, before any data is
read. Options Spark's connector documents either work as documented or are errors
saying why not (the Kafka settings Spark itself forbids). TLS and SASL: the
`kafka.security.protocol`, `kafka.ssl.*` and `kafka.sasl.*` options are Sluice's client's
security settings (sluice_client.security: PEM files, PLAIN and SCRAM-SHA-256/512, Kafka's
and librdkafka's names), for the driver and the tasks alike; a setting the client cannot
honour is an error, never a connection less protected than asked. Options the connector does not know are warnings, not
errors, as in Spark (whose Kafka clients only log settings they do not know).

Differences from Spark's connector: `kafka.isolation.level` defaults to read_committed;
`kafka.group.id` makes the query commit its progress to that consumer group;
`startingOffsets` also accepts `group` (the group's committed offsets); `groupIdPrefix`
has no effect, because the source reads without consumer groups (see `_GROUP_ID_PREFIX`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from sluice_client.errors import SecurityConfigError
from sluice_client.security import ClientSecurity

EARLIEST, LATEST = -2, -1
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly_once", "at_least_once"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # index = Kafka's compression id

# Spark's defaults: kafkaConsumer.pollTimeoutMs falls back to spark.network.timeout (120 s).
DEFAULT_POLL_TIMEOUT_MS = 120_000
DEFAULT_MAX_TRIGGER_DELAY = "15m"
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_MAX_PARTITION_FETCH_BYTES = 8 * 1024 * 1024  # Kafka's 1 MiB makes many small fetches
DEFAULT_FETCH_MAX_BYTES = 50 * 1024 * 1024  # Kafka's default


def _seconds(ms: int) -> float:
    return ms / 1000


# kafka.* settings Sluice's client takes, with Kafka's names:
# option -> (client keyword, smallest allowed value, conversion to the client's unit).
_CLIENT_SETTINGS = {
    "kafka.request.timeout.ms": ("request_timeout", 1, _seconds),
    "kafka.socket.connection.setup.timeout.ms": ("connect_timeout", 1, _seconds),
    "kafka.retries": ("retries", 0, int),
    "kafka.retry.backoff.ms": ("retry_backoff", 0, _seconds),
    "kafka.retry.backoff.max.ms": ("retry_backoff_max", 0, _seconds),
}
# The bound on one operation with its retries: a consumer's and a producer's name for it.
_SOURCE_CLIENT_SETTINGS = {**_CLIENT_SETTINGS,
                           "kafka.default.api.timeout.ms": ("retry_timeout", 1, _seconds)}
_SINK_CLIENT_SETTINGS = {**_CLIENT_SETTINGS,
                         "kafka.delivery.timeout.ms": ("retry_timeout", 1, _seconds)}

# Kafka settings Spark's connector refuses, and why (the connector, not a Kafka client, owns these).
_FORBIDDEN = {
    "kafka.auto.offset.reset": "set the source option 'startingOffsets' (earliest, latest, or JSON "
                               "offsets) instead; the query decides which offsets it reads and "
                               "resumes from its checkpoint, not from a consumer's reset policy",
    "kafka.key.deserializer": "keys are read as bytes; deserialize them with DataFrame operations",
    "kafka.value.deserializer": "values are read as bytes; deserialize them with DataFrame operations",
    "kafka.key.serializer": "keys are written from the binary or string 'key' column; serialize "
                            "them with DataFrame operations",
    "kafka.value.serializer": "values are written from the binary or string 'value' column; "
                              "serialize them with DataFrame operations",
    "kafka.enable.auto.commit": "the query tracks its offsets in its checkpoint (and commits them "
                                "to kafka.group.id after each batch when that is set)",
    "kafka.interceptor.classes": "interceptors could change records behind the query's back",
}

_SOURCE_OPTIONS = {name.lower(): name for name in (
    "subscribe", "subscribePattern", "assign", "startingTimestamp", "startingOffsetsByTimestamp",
    "startingOffsets", "startingOffsetsByTimestampStrategy", "endingTimestamp",
    "endingOffsetsByTimestamp", "endingOffsets", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries", "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger", "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition",
    "groupIdPrefix", "includeHeaders")}
_STREAMING_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_SOURCE_KAFKA = {"kafka.bootstrap.servers", "kafka.group.id",
                 "kafka.isolation.level", "kafka.fetch.max.wait.ms", "kafka.max.partition.fetch.bytes",
                 "kafka.fetch.max.bytes", "kafka.client.id", *_SOURCE_CLIENT_SETTINGS}
# checkpointLocation and queryName are Spark's own, handed to every streaming sink.
_SINK_KNOWN = {"topic", "includeheaders", "deliveryguarantee", "checkpointlocation", "queryname",
               "kafka.bootstrap.servers", "kafka.compression.type",
               "kafka.transaction.timeout.ms", "kafka.client.id", *_SINK_CLIENT_SETTINGS}

# Spark names the consumers it creates with group ids made from groupIdPrefix. Sluice's
# source creates no consumers: it sends Metadata, ListOffsets and Fetch requests, which
# carry no group id, so there is nothing for the prefix to name.
_GROUP_ID_PREFIX = ("option 'groupIdPrefix' has no effect: the sluice source reads without consumer "
                    "groups (no request it sends carries a group id); the only group it uses is "
                    "'kafka.group.id', to commit the query's progress")

_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000,
                  "h": 3_600_000, "d": 86_400_000}


class SluiceOptionError(ValueError):
    """A source or sink option is missing, contradictory, malformed or cannot be honoured."""


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topic names, a pattern, or assigned topic-partitions."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """Whether the pattern subscribes `topic`: found anywhere in its name, as Spark's
        connector matches (Scala's findFirstIn); topics Metadata marks internal are left
        out by the caller."""
        return re.search(self.pattern, topic) is not None


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
    min_offsets_per_trigger: int | None
    max_trigger_delay_ms: int
    min_partitions: int | None
    max_records_per_partition: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: int
    group_id: str | None
    client: dict  # Sluice client keywords from kafka.* settings, for the driver and the tasks
    fetch_offset_retry: tuple[int, int] | None  # the driver's (retries, interval ms), if set
    poll_timeout_ms: int
    fetch_max_wait_ms: int
    fetch_bytes: int  # asked for per fetch: one partition per request, so the smaller limit
    warnings: tuple[str, ...]  # options accepted but without effect
    streaming_only: tuple[str, ...]  # given streaming-only options (a batch query ignores them)


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


def _duration_ms(options: dict, name: str, default: str) -> int:
    """A time as Spark writes it: an integer with an optional unit (us, ms, s, m, min, h, d;
    none means ms), e.g. "15m"."""
    text = options.get(name.lower(), default)
    match = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", text.lower())
    if match is None or match.group(2) not in ("", *_TIME_UNITS_MS):
        raise SluiceOptionError(f"option '{name}' must be a duration like 500ms, 30s, 15m or 1h, "
                                f"got {text!r}")
    return int(int(match.group(1)) * _TIME_UNITS_MS.get(match.group(2) or "ms"))


def _servers(options: dict) -> str:
    servers = options.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise SluiceOptionError("option 'kafka.bootstrap.servers' is required (host:port[,host:port])" + (
            "; no option reached the connector at all, as when a table made by CREATE TABLE ... USING "
            "sluice is read or written (PySpark 4.3 gives a Python data source a table's OPTIONS only "
            "when creating it): use CREATE TEMPORARY VIEW ... USING sluice OPTIONS (...) instead"
            if not options else ""))
    for address in servers.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise SluiceOptionError(f"option 'kafka.bootstrap.servers': {address!r} is not host:port")
    return servers


def _check_kafka_settings(options: dict) -> None:
    """Refuse what Spark's connector refuses."""
    for name in sorted(options):
        if name in _FORBIDDEN:
            raise SluiceOptionError(f"Kafka option '{name}' is not supported: {_FORBIDDEN[name]}")


def _is_security_option(name: str) -> bool:
    return name == "kafka.security.protocol" or name.startswith(("kafka.ssl.", "kafka.sasl."))


def _security(options: dict) -> ClientSecurity | None:
    """The client's TLS/SASL from the kafka.security.protocol, kafka.ssl.* and kafka.sasl.*
    options (None: none given). It pickles as its settings, so each task builds its own
    SSL context from the same files."""
    settings = {name[len("kafka."):]: value for name, value in options.items() if _is_security_option(name)}
    if not settings:
        return None
    try:
        return ClientSecurity(settings)
    except SecurityConfigError as exc:
        raise SluiceOptionError(f"option 'kafka.{exc.key}': {exc}") from None


def _client_settings(options: dict, table: dict) -> dict:
    client = {}
    security = _security(options)
    if security is not None:
        client["security"] = security
    if "kafka.client.id" in options:
        client["client_id"] = options["kafka.client.id"]
    for name, (keyword, minimum, convert) in table.items():
        value = _int(options, name, minimum)
        if value is not None:
            client[keyword] = convert(value)
    return client


def _unknown(options: dict, known) -> list[str]:
    return [f"option '{name}' is not a Kafka setting the sluice connector applies; ignored"
            if name.startswith("kafka.") else f"option '{name}' is unknown to the sluice connector; ignored"
            for name in sorted(options) if name not in known and not _is_security_option(name)]


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


def _ending(options: dict, streaming: bool) -> Position:
    names = [n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp")
             if n.lower() in options]
    if names and streaming:
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


def _fetch_offset_retry(options: dict) -> tuple[int, int] | None:
    """fetchOffset.numRetries and fetchOffset.retryIntervalMs, with Spark's defaults (3 and
    10 ms) for the one not given; None when neither is (Sluice's client's own retries)."""
    retries = _int(options, "fetchOffset.numRetries", 0)
    interval = _int(options, "fetchOffset.retryIntervalMs", 0)
    if retries is None and interval is None:
        return None
    return (3 if retries is None else retries, 10 if interval is None else interval)


def parse_source_options(raw, batch: bool | None) -> SourceOptions:
    """The source's options for a batch (True) or streaming (False) query; with None, only
    the checks that hold for both (Spark's schema() at load() does not say which it is)."""
    options = _lower(raw)
    _check_kafka_settings(options)
    servers = _servers(options)
    level = options.get("kafka.isolation.level", "read_committed").lower()
    if level not in ("read_committed", "read_uncommitted"):
        raise SluiceOptionError("option 'kafka.isolation.level' must be read_committed or read_uncommitted")
    starting = _starting(options, batch is True)
    group_id = options.get("kafka.group.id") or None
    if starting.kind == "group" and group_id is None:
        raise SluiceOptionError("option 'startingOffsets' = group needs option 'kafka.group.id'")
    max_offsets = _int(options, "maxOffsetsPerTrigger", 1)
    min_offsets = _int(options, "minOffsetsPerTrigger", 1)
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise SluiceOptionError(f"option 'minOffsetsPerTrigger' ({min_offsets}) is higher than "
                                f"'maxOffsetsPerTrigger' ({max_offsets})")
    poll_timeout = _int(options, "kafkaConsumer.pollTimeoutMs", 1) or DEFAULT_POLL_TIMEOUT_MS
    fetch_wait = _int(options, "kafka.fetch.max.wait.ms", 0)
    fetch_wait = DEFAULT_FETCH_MAX_WAIT_MS if fetch_wait is None else fetch_wait
    if fetch_wait >= poll_timeout:
        raise SluiceOptionError(f"option 'kafka.fetch.max.wait.ms' ({fetch_wait}) must be below "
                                f"'kafkaConsumer.pollTimeoutMs' ({poll_timeout}): a fetch waiting that "
                                "long at the end of a partition would count as a failed poll")
    warnings = _unknown(options, set(_SOURCE_OPTIONS) | _SOURCE_KAFKA)
    if "maxtriggerdelay" in options and min_offsets is None:
        warnings.append("option 'maxTriggerDelay' has no effect without 'minOffsetsPerTrigger'")
    if "groupidprefix" in options:
        warnings.append(_GROUP_ID_PREFIX)
    return SourceOptions(
        bootstrap_servers=servers,
        subscription=_subscription(options),
        starting=starting,
        ending=_ending(options, streaming=batch is False),
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=_duration_ms(options, "maxTriggerDelay", DEFAULT_MAX_TRIGGER_DELAY),
        min_partitions=_int(options, "minPartitions", 1),
        max_records_per_partition=_int(options, "maxRecordsPerPartition", 1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
        isolation_level=READ_COMMITTED if level == "read_committed" else READ_UNCOMMITTED,
        group_id=group_id,
        client=_client_settings(options, _SOURCE_CLIENT_SETTINGS),
        fetch_offset_retry=_fetch_offset_retry(options),
        poll_timeout_ms=poll_timeout,
        fetch_max_wait_ms=fetch_wait,
        fetch_bytes=min(_int(options, "kafka.max.partition.fetch.bytes", 1) or DEFAULT_MAX_PARTITION_FETCH_BYTES,
                        _int(options, "kafka.fetch.max.bytes", 1) or DEFAULT_FETCH_MAX_BYTES),
        warnings=tuple(warnings),
        streaming_only=tuple(name for name in _STREAMING_ONLY if name.lower() in options),
    )


@dataclass(frozen=True)
class SinkOptions:
    bootstrap_servers: str
    topic: str | None
    guarantee: str
    compression: str
    transaction_timeout_ms: int
    client: tuple  # Sluice client keywords, as pairs
    warnings: tuple[str, ...] = ()  # options accepted but without effect


def parse_sink_options(raw, schema) -> SinkOptions:
    options = _lower(raw)
    _check_kafka_settings(options)
    servers = _servers(options)
    guarantee = options.get("deliveryguarantee", EXACTLY_ONCE).lower()
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise SluiceOptionError("option 'deliveryGuarantee' must be exactly_once or at_least_once")
    compression = options.get("kafka.compression.type", "none").lower()
    if compression not in CODECS:
        raise SluiceOptionError(f"option 'kafka.compression.type' must be one of {', '.join(CODECS)}")
    timeout = _int(options, "kafka.transaction.timeout.ms", 1) or 900_000
    _bool(options, "includeHeaders", False)  # as in Spark's sink: a headers column is always written
    _check_columns(schema, options.get("topic"))
    client = {"client_id": "sluice-spark-sink", **_client_settings(options, _SINK_CLIENT_SETTINGS)}
    return SinkOptions(servers, options.get("topic"), guarantee, compression, timeout,
                       tuple(sorted(client.items())), tuple(_unknown(options, _SINK_KNOWN)))


def _check_columns(schema, topic_option) -> None:
    types = {f.name.lower(): f.dataType.simpleString() for f in schema.fields}
    if "value" not in types:
        raise SluiceOptionError("the sink needs a 'value' column (binary or string)")
    for column, allowed in (("value", ("binary", "string")), ("key", ("binary", "string")),
                            ("topic", ("string",)), ("partition", ("int",)),
                            ("headers", ("array<struct<key:string,value:binary>>",)),
                            ("timestamp", ("timestamp", "timestamp_ntz"))):
        if column in types and types[column] not in allowed:
            raise SluiceOptionError(f"column '{column}' must be {' or '.join(allowed)}, not {types[column]}")
    if "topic" not in types and not topic_option:
        raise SluiceOptionError("no 'topic' column: set option 'topic'")
