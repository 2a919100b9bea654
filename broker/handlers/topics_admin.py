"""CreateTopics v0–7, DeleteTopics v0–6, CreatePartitions v0–3.

- CreateTopics: -1 partitions / replication factor mean the broker defaults (v4+);
  a replication factor above the number of brokers (one) is INVALID_REPLICATION_FACTOR;
  manual assignments must name this broker. `validate_only` (v1+) checks everything
  and creates nothing. v5+ returns the partition count, replication factor and the
  topic's configs (those it would have, when only validating); v7+ the topic id (zero
  when only validating). A name twice in one request is INVALID_REQUEST.
- DeleteTopics: by name (v0–5) or by name or id (v6+).
- CreatePartitions: the count may only grow.
- The internal topics can be neither deleted nor given partitions: INVALID_TOPIC_EXCEPTION.
"""

from __future__ import annotations

from collections import Counter

from wire.error_codes import ErrorCode
from wire.messages import CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS
from wire.primitives import ZERO_UUID

from broker.errors import BrokerError
from broker.handlers.configs import topic_config_entries
from broker.topics import INTERNAL_TOPICS


def _check_replicas(broker, replication_factor: int, assignments) -> None:
    if not assignments:
        broker.metadata.check_replication_factor(replication_factor)
    for assignment in assignments or ():
        broker.metadata.check_assignment(assignment.broker_ids)


def create_topics(broker, header, request, client_host):
    Resp = CREATE_TOPICS.response
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        out = Resp.CreatableTopicResult(name=wanted.name, topic_id=ZERO_UUID, num_partitions=-1,
                                        replication_factor=-1, configs=None)
        results.append(out)
        try:
            if counts[wanted.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {wanted.name!r} is listed twice")
            _check_replicas(broker, wanted.replication_factor, wanted.assignments)
            partitions = wanted.num_partitions
            if wanted.assignments:
                if partitions != -1:
                    raise BrokerError(ErrorCode.INVALID_REQUEST,
                                      "give either num_partitions or assignments, not both")
                partitions = len(wanted.assignments)
            elif partitions == -1:
                partitions = broker.config.num_partitions
            configs = {c.name: c.value for c in wanted.configs}
            topic = broker.topics.create(wanted.name, partitions, configs,
                                         validate_only=request.validate_only)
            out.num_partitions, out.replication_factor = partitions, 1
            out.topic_id = topic.topic_id  # the zero id when only validating
            # validate_only too: Kafka answers the would-be topic's configs, and the Java
            # Admin reads them whenever no topic config error is given.
            out.configs = [Resp.CreatableTopicConfigs(name=name, value=value, read_only=False,
                                                      config_source=source, is_sensitive=False)
                           for name, value, source in topic_config_entries(broker, topic)]
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Resp(topics=results, throttle_time_ms=0)


def _refuse_internal(name: str, what: str) -> None:
    if name in INTERNAL_TOPICS:
        raise BrokerError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                          f"topic {name} is internal: it cannot be {what} by clients")


def delete_topics(broker, header, request, client_host):
    Resp = DELETE_TOPICS.response
    if header.request_api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, ZERO_UUID) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        out = Resp.DeletableTopicResult(name=name, topic_id=topic_id)
        results.append(out)
        try:
            if name is None:
                topic = broker.topics.by_id.get(topic_id)
                if topic is None:
                    raise BrokerError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {topic_id}")
                name = out.name = topic.name
            topic = broker.topics.topics.get(name)
            if topic is not None:
                out.topic_id = topic.topic_id
            _refuse_internal(name, "deleted")
            broker.topics.delete(name)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Resp(responses=results, throttle_time_ms=0)


def create_partitions(broker, header, request, client_host):
    Resp = CREATE_PARTITIONS.response
    counts = Counter(t.name for t in request.topics)
    results = []
    for wanted in request.topics:
        out = Resp.CreatePartitionsTopicResult(name=wanted.name, error_message=None)
        results.append(out)
        try:
            if counts[wanted.name] > 1:
                raise BrokerError(ErrorCode.INVALID_REQUEST, f"topic {wanted.name!r} is listed twice")
            _refuse_internal(wanted.name, "given partitions")
            _check_replicas(broker, 1, wanted.assignments)
            broker.topics.add_partitions(wanted.name, wanted.count, validate_only=request.validate_only)
        except BrokerError as exc:
            out.error_code, out.error_message = exc.code, str(exc)
    return Resp(results=results, throttle_time_ms=0)
