"""AlterConfigs v0–2 and IncrementalAlterConfigs v0–1 (flexible from v2 and v1).

- Topics (resource type 2): AlterConfigs replaces the topic's whole override set (keys
  left out go back to the broker's defaults); IncrementalAlterConfigs applies per-key
  SET, DELETE, APPEND and SUBTRACT, the last two only for list-typed keys
  (cleanup.policy), on the current value (the override, else the broker's default).
  Unknown keys and bad values are INVALID_CONFIG naming the key; an unknown topic is
  UNKNOWN_TOPIC_OR_PARTITION. The change reaches the live logs at once and is persisted.
  Internal topics may be altered but keep cleanup.policy=compact (TopicManager.set_configs).
  In a cluster the topic's configs are read from and written to ZooKeeper
  (/config/topics/<t>, with a /config/changes notification every broker applies).
- This broker (type 4), named "" (the cluster default) or by its id: only the topic
  defaults and the replication throttles' rates are dynamic (broker.dynamic_configs); any
  other key is INVALID_REQUEST, as Kafka answers for a key it cannot update dynamically,
  but for Kafka's keys this broker does not implement (INVALID_CONFIG with the reason;
  deleting one changes nothing). AlterConfigs replaces the level's dynamic set,
  IncrementalAlterConfigs changes it per key. In a cluster the level is read from and
  written to ZooKeeper (/config/brokers/<default> or /config/brokers/<id>, with a
  /config/changes notification every broker applies).
- Other resource types are INVALID_REQUEST, and so is a resource listed twice (each
  time), as Kafka answers. `validate_only` checks and changes nothing.
  Errors are per resource; one bad resource does not spoil the others. Every resource is
  checked before any is changed, through the broker's TopicAdmin (broker.topic_admin).
- Authorization (broker.security.acls), as Kafka's KafkaApis: ALTER_CONFIGS on the topic
  (TOPIC_AUTHORIZATION_FAILED), or for the broker on the cluster
  (CLUSTER_AUTHORIZATION_FAILED), checked after the request's own checks.
"""

from __future__ import annotations

from collections import Counter

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS

from broker.config import (BROKER_KEYS, LIST, NOT_IMPLEMENTED_BROKER_CONFIGS, TOPIC_KEYS, ConfigError,
                           check_topic_config_key)
from broker.dynamic_configs import CLUSTER_DEFAULT, DYNAMIC_KEYS
from broker.errors import BrokerError
from broker.handlers.configs import BROKER, TOPIC
from broker.security.acls import DENIED, permitted

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _parsed_level(broker, configs: dict) -> dict[str, str]:
    try:
        return broker.dynamic_configs.parse(configs)
    except ConfigError as exc:
        raise BrokerError(ErrorCode.INVALID_CONFIG, str(exc)) from None


class _Changes:
    """The request's topic and broker configs: read through the broker's TopicAdmin before
    the request is worked out (`load`), validated, and written after (`commit`)."""

    def __init__(self, broker):
        self._broker = broker
        self._current: dict[tuple[int, str], dict[str, str] | BrokerError] = {}
        self._writes: dict[tuple[int, str], dict] = {}

    async def load(self, resources) -> None:
        admin = self._broker.topic_admin
        for resource_type, name in resources:
            try:
                self._current[(resource_type, name)] = await (
                    admin.topic_configs(name) if resource_type == TOPIC else admin.broker_configs(name))
            except BrokerError as exc:
                self._current[(resource_type, name)] = exc

    def _loaded(self, resource) -> dict[str, str]:
        current = self._current[resource]
        if isinstance(current, BrokerError):
            raise current
        return dict(current)

    def configs(self, name: str) -> dict[str, str]:
        return self._loaded((TOPIC, name))

    def store(self, name: str, configs: dict, validate_only: bool) -> None:
        self._broker.topic_admin.check_topic_configs(name, configs)
        if not validate_only:
            self._writes[(TOPIC, name)] = configs

    def broker_configs(self, level: str) -> dict[str, str]:
        return self._loaded((BROKER, level))

    def store_broker_configs(self, level: str, configs: dict, validate_only: bool) -> None:
        parsed = _parsed_level(self._broker, configs)
        if not validate_only:
            self._writes[(BROKER, level)] = parsed

    async def commit(self, resource_type: int, name: str) -> None:
        configs = self._writes.pop((resource_type, name), None)
        if configs is None:
            return
        if resource_type == TOPIC:
            await self._broker.topic_admin.set_topic_configs(name, configs)
        else:
            await self._broker.topic_admin.set_broker_configs(name, configs)


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
        return
    for key in sorted(keys):
        if key in NOT_IMPLEMENTED_BROKER_CONFIGS:
            raise BrokerError(ErrorCode.INVALID_CONFIG, f"broker config {key!r} is not implemented by this "
                              f"broker ({NOT_IMPLEMENTED_BROKER_CONFIGS[key]})")
    static = sorted(k for k in keys if k not in DYNAMIC_KEYS)
    if static:
        raise BrokerError(ErrorCode.INVALID_REQUEST,
                          f"Cannot update these configs dynamically: {', '.join(static)}")


def _current(broker, kept, resource_type: int, name: str) -> dict[str, str]:
    """The resource's configs as `kept` (_Changes) has them."""
    if resource_type == TOPIC:
        return kept.configs(name)
    return kept.broker_configs(_broker_level(broker, name))


def _store(broker, kept, resource_type: int, name: str, configs: dict, validate_only: bool) -> None:
    """Validate the resource's new config set and, unless `validate_only`, make it so."""
    if resource_type == TOPIC:
        kept.store(name, configs, validate_only)
    else:
        kept.store_broker_configs(_broker_level(broker, name), configs, validate_only)


def _default_value(broker, resource_type: int, key: str) -> str:
    """The value a list key has without an override at this level: the broker's default."""
    topic_key = key if resource_type == TOPIC else BROKER_KEYS[key].topic_key
    return str(getattr(broker.config.log, TOPIC_KEYS[topic_key].attr))


def _incremental(broker, kept, resource) -> dict[str, str]:
    """The resource's config set after applying its per-key operations."""
    names = [c.name for c in resource.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {duplicates[0]!r} is given twice")
    configs = _current(broker, kept, resource.resource_type, resource.resource_name)
    changes = [c for c in resource.configs if not (  # never set: nothing to delete
        resource.resource_type == BROKER and c.name in NOT_IMPLEMENTED_BROKER_CONFIGS
        and c.config_operation == DELETE)]
    _check_keys(resource.resource_type, [c.name for c in changes])
    for change in changes:
        key, op, value = change.name, change.config_operation, change.value
        if op == SET:
            configs[key] = value
        elif op == DELETE:
            configs.pop(key, None)
        elif op in (APPEND, SUBTRACT):
            if (TOPIC_KEYS if resource.resource_type == TOPIC else BROKER_KEYS)[key].type != LIST:
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


def _alter(broker, kept, resources, new_configs, validate_only: bool, Response, denied):
    """The response (`kept` then holds the changes to commit); the resources `denied`
    are refused."""
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
            if (resource.resource_type, resource.resource_name) in denied:
                raise BrokerError(*DENIED[ResourceType.TOPIC if resource.resource_type == TOPIC
                                          else ResourceType.CLUSTER])
            configs = new_configs(broker, kept, resource)
            _store(broker, kept, resource.resource_type, resource.resource_name, configs, validate_only)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Response(throttle_time_ms=0, responses=results)


def _replacement(broker, kept, resource) -> dict[str, str | None]:
    _current(broker, kept, resource.resource_type, resource.resource_name)  # the resource must exist
    configs = {c.name: c.value for c in resource.configs}
    _check_keys(resource.resource_type, configs)
    return configs


async def _altered(broker, request, session, new_configs, Response):
    """Read the resources' configs, work the request out, then write each change that
    passed."""
    resources = request.resources
    denied = {(r.resource_type, r.resource_name) for r in resources
              if (r.resource_type == TOPIC and not permitted(broker, session, Operation.ALTER_CONFIGS,
                                                             ResourceType.TOPIC, r.resource_name))
              or (r.resource_type == BROKER and not permitted(broker, session, Operation.ALTER_CONFIGS,
                                                              ResourceType.CLUSTER))}
    kept = _Changes(broker)
    await kept.load(sorted({(r.resource_type, r.resource_name) for r in resources
                               if (r.resource_type, r.resource_name) not in denied and (
                                   r.resource_type == TOPIC or (r.resource_type == BROKER and r.resource_name in (
                                       CLUSTER_DEFAULT, str(broker.node_id))))}))
    response = _alter(broker, kept, resources, new_configs, request.validate_only, Response, denied)
    for out in response.responses:
        if out.error_code == ErrorCode.NONE:
            try:
                await kept.commit(out.resource_type, out.resource_name)
            except BrokerError as exc:
                out.error_code, out.error_message = exc.code, str(exc)
    return response


def alter_configs(broker, header, request, session):
    return _altered(broker, request, session, _replacement, ALTER_CONFIGS.response)


def incremental_alter_configs(broker, header, request, session):
    return _altered(broker, request, session, _incremental, INCREMENTAL_ALTER_CONFIGS.response)
