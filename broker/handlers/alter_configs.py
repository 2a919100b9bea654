"""AlterConfigs v0–2 and IncrementalAlterConfigs v0–1 (flexible from v2 and v1).

- Topics (resource type 2): AlterConfigs replaces the topic's whole override set (keys
  left out go back to the broker's defaults); IncrementalAlterConfigs applies per-key
  SET, DELETE, APPEND and SUBTRACT, the last two only for list-typed keys
  (cleanup.policy), on the current value (the override, else the broker's default).
  Unknown keys and bad values are INVALID_CONFIG naming the key; an unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION. The change reaches the live logs at once and is persisted.
  Internal topics may be altered but keep cleanup.policy=compact (TopicManager.set_configs).
- This broker (type 4), named "" (the cluster default) or by its id: only the topic
  defaults are dynamic (broker.dynamic_configs); any other key is INVALID_REQUEST, as
  Kafka answers for a key it cannot update dynamically. AlterConfigs replaces the
  level's dynamic set, IncrementalAlterConfigs changes it per key.
- Other resource types are INVALID_REQUEST, and so is a resource listed twice (each
  time), as Kafka answers. `validate_only` checks and changes nothing.
  Errors are per resource; one bad resource does not spoil the others.
"""

from __future__ import annotations

from collections import Counter

from wire.error_codes import ErrorCode
from wire.messages import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS

from broker.config import ConfigError, TOPIC_CONFIGS, check_topic_config_key
from broker.dynamic_configs import CLUSTER_DEFAULT, DYNAMIC_KEYS
from broker.errors import BrokerError
from broker.handlers.configs import BROKER, LIST_KEYS, TOPIC

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _topic(broker, name: str):
    topic = broker.topics.topics.get(name)
    if topic is None:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
    return topic


def _broker_level(broker, name: str) -> str:
    if name not in (CLUSTER_DEFAULT, str(broker.node_id)):
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"this is broker {broker.node_id}, not {name!r}")
    return name


def _check_keys(resource_type: int, keys) -> None:
    if resource_type == TOPIC:
        for key in sorted(keys):
            try:
                check_topic_config_key(key)
            except ConfigError as exc:
                raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    else:
        static = sorted(k for k in keys if k not in DYNAMIC_KEYS)
        if static:
            raise BrokerError(ErrorCode.INVALID_REQUEST,
                              f"Cannot update these configs dynamically: {', '.join(static)}")


def _current(broker, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == TOPIC:
        return dict(_topic(broker, name).configs)
    return dict(broker.dynamic_configs.levels.get(_broker_level(broker, name), {}))


def _store(broker, resource_type: int, name: str, configs: dict, validate_only: bool) -> None:
    """Validate the resource's new config set and, unless `validate_only`, make it so."""
    if resource_type == TOPIC:
        broker.topics.set_configs(name, configs, validate_only)
        return
    level = _broker_level(broker, name)
    try:
        parsed = broker.dynamic_configs.parse(configs)
    except ConfigError as exc:
        raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if validate_only:
        return
    try:
        broker.dynamic_configs.set_level(level, parsed)
    except OSError as exc:
        raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist broker configs: {exc}") from None
    broker.topics.apply_broker_defaults()


def _default_value(broker, resource_type: int, key: str) -> str:
    """The value a list key has without an override at this level: the broker's default."""
    topic_key = key if resource_type == TOPIC else DYNAMIC_KEYS[key]
    return str(getattr(broker.config.log, TOPIC_CONFIGS[topic_key][0]))


def _incremental(broker, resource) -> dict[str, str]:
    """The resource's config set after applying its per-key operations."""
    names = [c.name for c in resource.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {duplicates[0]!r} is given twice")
    configs = _current(broker, resource.resource_type, resource.resource_name)
    _check_keys(resource.resource_type, names)
    for change in resource.configs:
        key, op, value = change.name, change.config_operation, change.value
        if op == SET:
            configs[key] = value
        elif op == DELETE:
            configs.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            topic_key = key if resource.resource_type == TOPIC else DYNAMIC_KEYS[key]
            if topic_key not in LIST_KEYS:
                raise BrokerError(ErrorCode.INVALID_CONFIG, f"{key}: APPEND and SUBTRACT are only "
                                  f"for list configs")
            current = configs.get(key) or _default_value(broker, resource.resource_type, key)
            items = [i.strip() for i in current.split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            configs[key] = ",".join(items)
        else:
            raise BrokerError(ErrorCode.INVALID_REQUEST, f"{key}: unknown operation {op}")
    return configs


def _alter(broker, resources, new_configs, validate_only: bool, Response):
    listed = Counter((r.resource_type, r.resource_name) for r in resources)
    results = []
    for resource in resources:
        out = Response.AlterConfigsResourceResponse(
            error_code=ErrorCode.NONE, error_message=None,
            resource_type=resource.resource_type, resource_name=resource.resource_name)
        results.append(out)
        try:
            if listed[(resource.resource_type, resource.resource_name)] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"resource {resource.resource_name!r} is listed more than once")
            if resource.resource_type not in (TOPIC, BROKER):
                raise BrokerError(ErrorCode.INVALID_REQUEST,
                                  f"resource type {resource.resource_type} cannot be altered here")
            configs = new_configs(broker, resource)
            _store(broker, resource.resource_type, resource.resource_name, configs, validate_only)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Response(throttle_time_ms=0, responses=results)


def _replacement(broker, resource) -> dict[str, str | None]:
    _current(broker, resource.resource_type, resource.resource_name)  # the resource must exist
    configs = {c.name: c.value for c in resource.configs}
    _check_keys(resource.resource_type, configs)
    return configs


def alter_configs(broker, header, request, client_host):
    return _alter(broker, request.resources, _replacement, request.validate_only, ALTER_CONFIGS.response)


def incremental_alter_configs(broker, header, request, client_host):
    return _alter(broker, request.resources, _incremental, request.validate_only,
                  INCREMENTAL_ALTER_CONFIGS.response)
