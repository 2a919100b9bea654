"""CreateTopics v0–7, DeleteTopics v0–6, CreatePartitions v0–3.

- CreateTopics: -1 partitions / replication factor mean the broker defaults (v4+);
  a replication factor above the number of brokers (one) is INVALID_REPLICATION_FACTOR;
  manual assignments must name this broker, and leave num_partitions and the replication
  factor at -1 (else INVALID_REQUEST, as Kafka). `validate_only` (v1+) checks everything
  and creates nothing. v5+ returns the partition count, replication factor and the
  topic's configs (those it would have, when only validating); v7+ the topic id (zero
  when only validating). A name twice in one request is INVALID_REQUEST.
- DeleteTopics: by name (v0–5) or by name or id (v6+).
- CreatePartitions: the count may only grow.
- The internal topics can be neither deleted nor given partitions: INVALID_TOPIC_EXCEPTION.
- controller_mutation_rate (broker.client_quotas, KIP-599): the partitions each topic
  creates or deletes are recorded once it passed every check, just before the change (not
  when only validating). From CreateTopics v6, CreatePartitions v3 and DeleteTopics v5 a
  topic is refused with THROTTLING_QUOTA_EXCEEDED while the client is over its quota;
  older versions are let through. Either way the response carries the throttle time and
  the connection is muted that long.
- The change is made by the broker's TopicAdmin (broker.topic_admin), the same handler
  code in both modes. In a cluster each change is written to ZooKeeper
  (`broker.cluster.admin`) and answered once this broker's metadata shows it, or
  REQUEST_TIMED_OUT after the request's `timeout_ms`; -1 replication factor is
  default.replication.factor, and replicas are placed as Kafka places them.
- Authorization (broker.security.acls), as Kafka's KafkaApis: CreateTopics CREATE on the
  cluster or on the topic (TOPIC_AUTHORIZATION_FAILED "Authorization failed."), and
  without DESCRIBE_CONFIGS on the topic the result holds no partition count, replication
  factor or configs but `topic_config_error_code` TOPIC_AUTHORIZATION_FAILED (v5+);
  DeleteTopics DELETE on the topic, and for a topic named by id DESCRIBE too (without it
  the answer's name is null); CreatePartitions ALTER on the topic. Refusals come after
  the checks of the request itself (a name twice, an unknown id) and before the topic's
  existence is looked at.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from wire.primitives import ZERO_UUID

from broker.client_quotas import ControllerMutationQuota, throttle_ms
from broker.errors import BrokerError
from broker.handlers.configs import topic_config_entries
from broker.security.acls import DENIED, permitted, refused
from broker.handler_results import Throttled
from broker.replica.topics import INTERNAL_TOPICS

# The versions from which a request over its controller_mutation_rate is refused
# (THROTTLING_QUOTA_EXCEEDED), not only delayed: Kafka's strict mode (KIP-599).
_STRICT_SINCE = {CREATE_TOPICS.key: 6, CREATE_PARTITIONS.key: 3, DELETE_TOPICS.key: 5}


def _mutation_quota(broker, header, session) -> ControllerMutationQuota:
    return broker.mutation_quotas.for_request(session.principal.name, header.client_id or "",
                                              header.request_api_version >= _STRICT_SINCE[header.request_api_key])


def _answer(response, mutations: ControllerMutationQuota):
    """The response with the throttle time its mutations earned, the connection muted that long."""
    seconds = mutations.throttle_time()
    response.throttle_time_ms = throttle_ms(seconds)
    return Throttled.when(response, seconds)


def _check_creation(broker, session, names):
    """(topics one may not create, topics whose configs one may not see)."""
    names = list(names)
    denied = frozenset()
    if not permitted(broker, session, Operation.CREATE, ResourceType.CLUSTER):
        denied = refused(broker, session, Operation.CREATE, ResourceType.TOPIC, names)
    return denied, refused(broker, session, Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC, names)


def _hide_configs(out) -> None:
    """A created topic's result for one who may not describe its configs, as Kafka's."""
    out.num_partitions, out.replication_factor, out.configs = -1, -1, []
    out.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


async def create_topics(broker, header, request, session):
    mutations = _mutation_quota(broker, header, session)
    Resp = CREATE_TOPICS.response
    counts = Counter(t.name for t in request.topics)
    denied, hidden = _check_creation(broker, session, counts)

    async def create(wanted):
        out = Resp.CreatableTopicResult(name=wanted.name, topic_id=ZERO_UUID, num_partitions=-1,
                                        replication_factor=-1, configs=None)
        try:
            if counts[wanted.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {wanted.name!r} is listed twice")
            if wanted.name in denied:
                raise BrokerError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            partitions, factor = wanted.num_partitions, wanted.replication_factor
            if wanted.assignments and (partitions != -1 or factor != -1):
                raise BrokerError(ErrorCode.INVALID_REQUEST, "give either num_partitions and "
                                  "replication_factor or assignments, not both")
            if partitions == -1:
                partitions = broker.config.num_partitions
            assignments = [(a.partition_index, list(a.broker_ids)) for a in wanted.assignments or ()]
            out.topic_id, out.num_partitions, out.replication_factor, overrides = \
                await broker.topic_admin.create_topic(
                    wanted.name, partitions, factor, assignments, {c.name: c.value for c in wanted.configs},
                    request.validate_only, request.timeout_ms, mutations)
            # validate_only too: Kafka answers the would-be topic's configs, and the Java
            # Admin reads them whenever no topic config error is given.
            out.configs = [Resp.CreatableTopicConfigs(name=name, value=value, read_only=False,
                                                      config_source=source, is_sensitive=False)
                           for name, value, source in topic_config_entries(broker, overrides)]
            if wanted.name in hidden:
                _hide_configs(out)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
        return out

    results = await asyncio.gather(*(create(wanted) for wanted in request.topics))
    return _answer(Resp(topics=list(results), throttle_time_ms=0), mutations)


def _check_deletion(broker, session, out, by_id: bool) -> None:
    """DELETE on the topic of `out`; named by id, DESCRIBE too, or its name stays unsaid."""
    name = out.name
    if by_id and not permitted(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, name):
        out.name = None
        raise BrokerError(*DENIED[ResourceType.TOPIC])
    if not permitted(broker, session, Operation.DELETE, ResourceType.TOPIC, name):
        raise BrokerError(*DENIED[ResourceType.TOPIC])


def _refuse_internal(name: str, what: str) -> None:
    if name in INTERNAL_TOPICS:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic {name} is internal: it cannot be {what} by clients")


async def delete_topics(broker, header, request, session):
    Resp = DELETE_TOPICS.response
    if header.request_api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    mutations = _mutation_quota(broker, header, session)

    async def delete(name, topic_id):
        out = Resp.DeletableTopicResult(name=name, topic_id=topic_id)
        by_id = name is None
        try:
            if by_id:
                topic = broker.metadata.topic_by_id(topic_id)
                if topic is None:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
                name = out.name = topic.name
            _check_deletion(broker, session, out, by_id)
            _refuse_internal(name, "deleted")
            out.topic_id = await broker.topic_admin.delete_topic(name, request.timeout_ms, mutations)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
        return out

    results = await asyncio.gather(*(delete(name, topic_id) for name, topic_id in wanted))
    return _answer(Resp(responses=list(results), throttle_time_ms=0), mutations)


async def create_partitions(broker, header, request, session):
    mutations = _mutation_quota(broker, header, session)
    Resp = CREATE_PARTITIONS.response
    counts = Counter(t.name for t in request.topics)

    async def grow(wanted):
        out = Resp.CreatePartitionsTopicResult(name=wanted.name, error_message=None)
        try:
            if counts[wanted.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {wanted.name!r} is listed twice")
            if not permitted(broker, session, Operation.ALTER, ResourceType.TOPIC, wanted.name):
                raise BrokerError(*DENIED[ResourceType.TOPIC])
            _refuse_internal(wanted.name, "given partitions")
            assignments = [list(a.broker_ids) for a in wanted.assignments] if wanted.assignments else None
            await broker.topic_admin.create_partitions(wanted.name, wanted.count, assignments,
                                                       request.validate_only, request.timeout_ms, mutations)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
        return out

    results = await asyncio.gather(*(grow(wanted) for wanted in request.topics))
    return _answer(Resp(results=list(results), throttle_time_ms=0), mutations)
