"""DescribeConfigs v0–4 for topics (resource type 2) and this broker (type 4).

- A topic's configs are its overrides (source DYNAMIC_TOPIC_CONFIG) and, for every
  other topic-level key, the broker's value (DYNAMIC_BROKER_CONFIG or
  DYNAMIC_DEFAULT_BROKER_CONFIG when altered at runtime for this broker or the cluster,
  STATIC_BROKER_CONFIG when set in server.properties, else DEFAULT_CONFIG). v0 reports `is_default` instead of a source.
- The broker's configs are those topic defaults and the replication throttles' rates
  (dynamic), and every other broker key it understands (read-only: they change only with
  server.properties and a restart).
- `configuration_keys` null means all keys. v1+ synonyms list the topic override and
  the broker-level key behind it when `include_synonyms` is set. v3+ adds the type.
- Authorization (broker.security.acls), as Kafka's ConfigHelper: DESCRIBE_CONFIGS on the
  topic (TOPIC_AUTHORIZATION_FAILED), or for the broker on the cluster
  (CLUSTER_AUTHORIZATION_FAILED), before anything is looked up.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import DESCRIBE_CONFIGS

from broker.config import BROKER_KEYS, TOPIC_KEYS, broker_values, config_text
from broker.dynamic_configs import CLUSTER_DEFAULT
from broker.errors import BrokerError
from broker.security.acls import DENIED, permitted

_Resp = DESCRIBE_CONFIGS.response
TOPIC, BROKER = 2, 4
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5


def _dynamic_source(broker, broker_key: str) -> int | None:
    level = broker.dynamic_configs.source(broker_key)
    if level is None:
        return None
    return DYNAMIC_DEFAULT_BROKER_CONFIG if level == CLUSTER_DEFAULT else DYNAMIC_BROKER_CONFIG


def _broker_value(broker, key: str) -> tuple[str, int]:
    """A topic key's value and source without a topic override: the broker's default."""
    spec = TOPIC_KEYS[key]
    value = config_text(getattr(broker.config.log, spec.attr))
    if spec.broker_key is None:  # no broker-level default: Kafka's
        return value, DEFAULT_CONFIG
    source = _dynamic_source(broker, spec.broker_key)
    if source is not None:
        return value, source
    # log.retention.ms may have been set as log.retention.minutes or .hours instead.
    configured = any(k.name in broker.config.static for k in BROKER_KEYS.values()
                     if spec.broker_key in (k.name, k.synonym_of))
    return value, STATIC_BROKER_CONFIG if configured else DEFAULT_CONFIG


def topic_config_entries(broker, overrides: dict[str, str]):
    """(key, value, source) of every topic-level config of a topic with these overrides."""
    entries = []
    for key in sorted(TOPIC_KEYS):
        if key in overrides:
            entries.append((key, overrides[key], DYNAMIC_TOPIC_CONFIG))
        else:
            entries.append((key, *_broker_value(broker, key)))
    return entries


def _broker_entries(broker):
    entries = [(key.name, *_broker_value(broker, key.topic_key)) for key in BROKER_KEYS.values()
               if key.topic_key is not None]
    for key, value in broker_values(broker.config).items():
        source = _dynamic_source(broker, key) if BROKER_KEYS[key].dynamic else None
        if source is None:
            source = STATIC_BROKER_CONFIG if key in broker.config.static else DEFAULT_CONFIG
        entries.append((key, value, source))
    return sorted(entries)


def _describe(broker, entries, keys, include_synonyms: bool, table):
    """`table`: TOPIC_KEYS (all alterable, per topic) or BROKER_KEYS."""
    configs = []
    for key, value, source in entries:
        read_only = table is BROKER_KEYS and not table[key].dynamic  # as Kafka: what cannot change at runtime
        if keys is not None and key not in keys:
            continue
        synonyms = []
        if include_synonyms:
            synonyms.append(_Resp.DescribeConfigsSynonym(name=key, value=value, source=source))
            if source == DYNAMIC_TOPIC_CONFIG and table[key].broker_key is not None:
                broker_value, broker_source = _broker_value(broker, key)
                synonyms.append(_Resp.DescribeConfigsSynonym(name=table[key].broker_key, value=broker_value,
                                                             source=broker_source))
        configs.append(_Resp.DescribeConfigsResourceResult(
            name=key, value=value, read_only=read_only, is_default=source == DEFAULT_CONFIG,
            config_source=source, is_sensitive=False, synonyms=synonyms,
            config_type=table[key].type, documentation=None))
    return configs


_RESOURCE_TYPES = {TOPIC: ResourceType.TOPIC, BROKER: ResourceType.CLUSTER}  # what DESCRIBE_CONFIGS is checked on


def handle(broker, header, request, session):
    denied = {(r.resource_type, r.resource_name) for r in request.resources if r.resource_type in _RESOURCE_TYPES
              and not permitted(broker, session, Operation.DESCRIBE_CONFIGS, _RESOURCE_TYPES[r.resource_type],
                                r.resource_name)}
    return _described(broker, header, request, denied)


async def _topic_configs(broker, request, denied) -> dict[str, dict[str, str] | None]:
    """The overrides of each topic the request may describe, None for one that does not
    exist; read through the TopicAdmin (in a cluster, the topic may have no replica here)."""
    configs = {}
    for resource in request.resources:
        if (resource.resource_type == TOPIC and resource.resource_name not in configs
                and (TOPIC, resource.resource_name) not in denied):
            try:
                configs[resource.resource_name] = await broker.topic_admin.topic_configs(resource.resource_name)
            except BrokerError:
                configs[resource.resource_name] = None
    return configs


async def _described(broker, header, request, denied):
    """The response; the resources `denied` are refused."""
    topic_configs = (await _topic_configs(broker, request, denied)).get
    version = header.request_api_version
    results = []
    for resource in request.resources:
        out = _Resp.DescribeConfigsResult(resource_type=resource.resource_type,
                                          resource_name=resource.resource_name,
                                          error_message=None, configs=[])
        results.append(out)
        keys = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        if (resource.resource_type, resource.resource_name) in denied:
            out.error_code, out.error_message = DENIED[_RESOURCE_TYPES[resource.resource_type]]
            continue
        if resource.resource_type == TOPIC:
            overrides = topic_configs(resource.resource_name)
            if overrides is None:
                out.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                out.error_message = f"topic {resource.resource_name!r} does not exist"
                continue
            entries, table = topic_config_entries(broker, overrides), TOPIC_KEYS
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                out.error_code = ErrorCode.INVALID_REQUEST
                out.error_message = f"this is broker {broker.node_id}, not {resource.resource_name!r}"
                continue
            entries, table = _broker_entries(broker), BROKER_KEYS
        else:
            out.error_code = ErrorCode.INVALID_REQUEST
            out.error_message = f"resource type {resource.resource_type} is not described here"
            continue
        out.configs = _describe(broker, entries, keys, version >= 1 and request.include_synonyms, table)
    return _Resp(results=results, throttle_time_ms=0)
