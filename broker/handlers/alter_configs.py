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
  defaults are dynamic (broker.dynamic_configs); any other key is INVALID_REQUEST, as
  Kafka answers for a key it cannot update dynamically. AlterConfigs replaces the
  level's dynamic set, IncrementalAlterConfigs changes it per key.
- Other resource types are INVALID_REQUEST, and so is a resource listed twice (each
  time), as Kafka answers. `validate_only` checks and changes nothing.
  Errors are per resource; one bad resource does not spoil the others.
- Authorization (broker.security.acls), as Kafka's KafkaApis: ALTER_CONFIGS on the topic
  (TOPIC_AUTHORIZATION_FAILED), or for the broker on the cluster
  (CLUSTER_AUTHORIZATION_FAILED), checked after the request's own checks.
"""

from __future__ import annotations

from collections import Counter

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS

from broker.config import ConfigError, TOPIC_CONFIGS, check_topic_config_key
from broker.dynamic_configs import CLUSTER_DEFAULT, DYNAMIC_KEYS
from broker.errors import BrokerError
from broker.handlers.configs import BROKER, LIST_KEYS, TOPIC
from broker.security.acls import DENIED, permitted

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class _LocalTopics:
    """The single node's topic configs: its TopicManager."""

    def __init__(self, broker):
        self._topics = broker.topics

    def configs(self, name: str) -> dict[str, str]:
        topic = self._topics.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return dict(topic.configs)

    def store(self, name: str, configs: dict, validate_only: bool) -> None:
        self._topics.set_configs(name, configs, validate_only)


class _ClusterTopics:
    """A cluster's topic configs: read from ZooKeeper before the request is worked out
    (`load`), validated as the single node validates them, and written after (`commit`)."""

    def __init__(self, broker):
        self._broker = broker
        self._current: dict[str, dict[str, str] | BrokerError] = {}
        self._writes: dict[str, tuple[dict, bool]] = {}

    async def load(self, names) -> None:
        for name in names:
            try:
                self._current[name] = await self._broker.admin.topic_configs(name)
            except BrokerError as exc:
                self._current[name] = exc

    def configs(self, name: str) -> dict[str, str]:
        current = self._current[name]
        if isinstance(current, BrokerError):
            raise current
        return dict(current)

    def store(self, name: str, configs: dict, validate_only: bool) -> None:
        self._broker.admin.check_topic_configs(name, configs)
        if not validate_only:
            self._writes[name] = configs

    async def commit(self, name: str) -> None:
        if name in self._writes:
            await self._broker.admin.set_topic_configs(name, self._writes.pop(name))


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


def _current(broker, topics, resource_type: int, name: str) -> dict[str, str]:
    if resource_type == TOPIC:
        return topics.configs(name)
    return dict(broker.dynamic_configs.levels.get(_broker_level(broker, name), {}))


def _store(broker, topics, resource_type: int, name: str, configs: dict, validate_only: bool) -> None:
    """Validate the resource's new config set and, unless `validate_only`, make it so."""
    if resource_type == TOPIC:
        topics.store(name, configs, validate_only)
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


def _incremental(broker, topics, resource) -> dict[str, str]:
    """The resource's config set after applying its per-key operations."""
    names = [c.name for c in resource.configs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BrokerError(ErrorCode.INVALID_REQUEST, f"config {duplicates[0]!r} is given twice")
    configs = _current(broker, topics, resource.resource_type, resource.resource_name)
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


def _alter(broker, topics, resources, new_configs, validate_only: bool, Response, denied):
    """The response, and the topic resources whose changes `topics` still has to commit;
    the resources `denied` are refused."""
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
            configs = new_configs(broker, topics, resource)
            _store(broker, topics, resource.resource_type, resource.resource_name, configs, validate_only)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Response(throttle_time_ms=0, responses=results)


async def _alter_in_cluster(broker, resources, new_configs, validate_only: bool, Response, denied):
    topics = _ClusterTopics(broker)
    await topics.load(sorted({r.resource_name for r in resources
                              if r.resource_type == TOPIC and (TOPIC, r.resource_name) not in denied}))
    response = _alter(broker, topics, resources, new_configs, validate_only, Response, denied)
    for out in response.responses:
        if out.resource_type == TOPIC and out.error_code == ErrorCode.NONE:
            try:
                await topics.commit(out.resource_name)
            except BrokerError as exc:
                out.error_code, out.error_message = exc.code, str(exc)
    return response


def _replacement(broker, topics, resource) -> dict[str, str | None]:
    _current(broker, topics, resource.resource_type, resource.resource_name)  # the resource must exist
    configs = {c.name: c.value for c in resource.configs}
    _check_keys(resource.resource_type, configs)
    return configs


def _altered(broker, request, session, new_configs, Response):
    denied = {(r.resource_type, r.resource_name) for r in request.resources
              if (r.resource_type == TOPIC and not permitted(broker, session, Operation.ALTER_CONFIGS,
                                                             ResourceType.TOPIC, r.resource_name))
              or (r.resource_type == BROKER and not permitted(broker, session, Operation.ALTER_CONFIGS,
                                                              ResourceType.CLUSTER))}
    if broker.admin is not None:
        return _alter_in_cluster(broker, request.resources, new_configs, request.validate_only, Response, denied)
    return _alter(broker, _LocalTopics(broker), request.resources, new_configs, request.validate_only,
                  Response, denied)


def alter_configs(broker, header, request, session):
    return _altered(broker, request, session, _replacement, ALTER_CONFIGS.response)


def incremental_alter_configs(broker, header, request, session):
    return _altered(broker, request, session, _incremental, INCREMENTAL_ALTER_CONFIGS.response)
