"""Topic administration behind one interface: what CreateTopics, DeleteTopics,
CreatePartitions, the config requests and a Metadata auto-creation change, done by the
single node on its own TopicManager (`LocalTopicAdmin`) or by a cluster in ZooKeeper
(`broker.cluster.admin.ClusterTopicAdmin`). The broker picks one when it is built; the
handlers check the request (Kafka's checks, once) and call it without knowing the mode.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from wire.error_codes import ErrorCode

from broker.client_quotas import UNBOUNDED, ControllerMutationQuota
from broker.errors import BrokerError


class TopicAdmin(Protocol):
    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           assignments: list[tuple[int, list[int]]] | None,
                           configs: dict[str, str | None], validate_only: bool,
                           timeout_ms: int, mutations: ControllerMutationQuota = UNBOUNDED
                           ) -> tuple[uuid.UUID, int, int, dict[str, str]]:
        """(topic id, partitions, replication factor, overrides) of the created topic (the
        zero id when only validating); -1 replication factor is the default, and manual
        `assignments` (partition, replicas) give the partitions."""

    async def delete_topic(self, name: str, timeout_ms: int,
                           mutations: ControllerMutationQuota = UNBOUNDED) -> uuid.UUID:
        """The deleted topic's id."""

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                                validate_only: bool, timeout_ms: int,
                                mutations: ControllerMutationQuota = UNBOUNDED) -> None: ...

    def auto_create_topic(self, name: str):
        """A topic a Metadata request names, created with the broker's defaults: the topic,
        or None while it is being created; BrokerError with Kafka's code when it cannot be."""

    def ensure_internal_topic(self, name: str) -> None:
        """Have the internal topic `name` created if it does not exist yet."""

    async def topic_configs(self, name: str) -> dict[str, str]:
        """The topic's overrides (UNKNOWN_TOPIC_OR_PARTITION when it does not exist)."""

    def check_topic_configs(self, name: str, configs: dict[str, str | None]) -> dict[str, str]:
        """The overrides `configs` would be (INVALID_CONFIG when they cannot)."""

    async def set_topic_configs(self, name: str, configs: dict[str, str | None]) -> None:
        """Replace the topic's overrides; its logs follow."""

    async def broker_configs(self, level: str) -> dict[str, str]:
        """A level's dynamic broker configs: "" the cluster default, else a broker id."""

    async def set_broker_configs(self, level: str, configs: dict[str, str]) -> None:
        """Replace a level's (validated) dynamic broker configs; the logs follow."""


class LocalTopicAdmin:
    """The single node: its TopicManager, and its dynamic broker configs file. A change is
    made before the request is answered, so there is nothing to wait for (`timeout_ms`)."""

    def __init__(self, broker):
        self._broker = broker

    async def create_topic(self, name, partitions, replication_factor, assignments, configs,
                           validate_only, timeout_ms, mutations=UNBOUNDED):
        metadata = self._broker.metadata
        if assignments:
            for _, replicas in assignments:
                metadata.check_assignment(replicas)
            partitions = len(assignments)
        else:
            metadata.check_replication_factor(replication_factor)
        topic = self._broker.topics.create(name, partitions, configs, validate_only=validate_only,
                                           mutations=mutations)
        return topic.topic_id, partitions, 1, topic.configs

    async def delete_topic(self, name, timeout_ms, mutations=UNBOUNDED):
        topic_id = self._topic(name).topic_id
        self._broker.topics.delete(name, mutations)
        return topic_id

    async def create_partitions(self, name, count, assignments, validate_only, timeout_ms,
                                mutations=UNBOUNDED):
        for replicas in assignments or ():
            self._broker.metadata.check_assignment(replicas)
        self._broker.topics.add_partitions(name, count, validate_only=validate_only, mutations=mutations)

    def auto_create_topic(self, name):
        return self._broker.topics.create(name, self._broker.config.num_partitions, {})

    def ensure_internal_topic(self, name):
        """Nothing to do: the single node's coordinators create their topics themselves."""

    def _topic(self, name: str):
        topic = self._broker.topics.topics.get(name)
        if topic is None:
            raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        return topic

    async def topic_configs(self, name):
        return dict(self._topic(name).configs)

    def check_topic_configs(self, name, configs):
        return self._broker.topics.check_configs(name, configs)

    async def set_topic_configs(self, name, configs):
        self._broker.topics.set_configs(name, configs)

    async def broker_configs(self, level):
        return dict(self._broker.dynamic_configs.levels.get(level, {}))

    async def set_broker_configs(self, level, configs):
        try:
            self._broker.dynamic_configs.set_level(level, configs)
        except OSError as exc:
            raise BrokerError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot persist broker configs: {exc}") from None
        self._broker.topics.apply_broker_defaults()
