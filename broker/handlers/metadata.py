"""Metadata v0–13.

- v0: an empty topic list means all topics; v1+: null means all, empty means none.
- v4+: `allow_auto_topic_creation` (before v4 it is implicitly true); a topic is only
  auto-created when the broker's `auto.create.topics.enable` also allows it. In a
  cluster the creation goes through ZooKeeper and the controller, and the topic is
  answered LEADER_NOT_AVAILABLE until its leaders are known, as Kafka answers it.
- v10+: topic ids in responses, and topics may be requested by id: a non-zero id is
  looked up by id whatever the name says (null, or "" as the Java client leaves it, as
  Kafka does); a null name with no id too. An unknown id is UNKNOWN_TOPIC_ID, its name
  "" below v12, where names cannot be null.
- Topics, brokers, the controller, and each partition's leader, leader epoch, replicas,
  ISR and offline replicas come from the cluster metadata view (`broker.cluster.metadata`).
- v13+: a top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED is for a broker not of the
  cluster asked for), always NONE, as Kafka's brokers answer.
- `is_internal`: the broker's own topics, and those Sluice's clients own
  (`wire.internal_topics`), so that pattern subscriptions leave them out.

Authorization (broker.security.acls), as Kafka's KafkaApis: DESCRIBE on a topic. An
all-topics request leaves out the topics one may not describe; a topic asked for by name
is TOPIC_AUTHORIZATION_FAILED (whether it exists or not, which is not told), by id
likewise with a null name ("" below v12). Auto-creation also needs CREATE on the cluster
or on the topic (TOPIC_AUTHORIZATION_FAILED otherwise). v8+ authorized operations (the
topics' when asked, v8-10 the cluster's: 0 without DESCRIBE on it) are Kafka's bit
fields; without an authorizer every operation the resource supports.

DescribeTopicPartitions v0 (Kafka 4's kafka-topics.sh --describe), as Kafka's handler:
- The topics asked for, or all with an empty list (leaving out, unnamed, those one may not
  describe), in name order from the cursor's topic on, the cursor's partition first.
- At most min(`response_partition_limit`, `max.request.partition.size.limit`) partitions (at
  least one): where they run out, `next_cursor` names the next topic and partition.
- A named topic not known is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an
  invalid name), one not authorized TOPIC_AUTHORIZATION_FAILED, after the others; a cursor
  whose topic is not among those named, or whose partition is negative, INVALID_REQUEST
  for every topic named. Each topic carries its authorized operations; no eligible leader
  replicas (ELR is KRaft's), so both ELR lists are empty.

A topic's entry is encoded once per version and reused until its partitions' state changes:
building and encoding 10,000 partition entries took 50 ms per request, now about 1 ms.
"""

from __future__ import annotations

from wire.acl_types import CLUSTER_RESOURCE_NAME, Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.internal_topics import CLIENT_INTERNAL_TOPICS
from wire.messages import DESCRIBE_TOPIC_PARTITIONS, METADATA
from wire.primitives import ZERO_UUID

from broker.errors import BrokerError
from broker.security.acls import authorized_operations, permitted, refused
from broker.replica.topics import validate_topic_name

_Resp = METADATA.response
_FIRST_NULLABLE_NAME = 12  # response topic names may be null from Metadata v12
_UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648


def topic_metadata(broker, topic, version, operations: int | None = None):
    """The topic's entry, encoded for `version`; unencoded with the authorized
    `operations` when given."""
    states = broker.metadata.partition_states(topic)
    if operations is not None:
        entry = _topic_entry(topic, states)
        entry.topic_authorized_operations = operations
        return entry
    cached = topic.encoded_metadata.get(version)
    if cached is None or cached[0] != states:
        cached = topic.encoded_metadata[version] = (
            states, _Resp.encode_part(version, _topic_entry(topic, states)))
    return cached[1]


def _is_internal(topic) -> bool:
    return topic.internal or topic.name in CLIENT_INTERNAL_TOPICS


def _topic_entry(topic, states):
    partitions = [_Resp.MetadataResponsePartition(
        error_code=ErrorCode.NONE if s.leader_id >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        partition_index=s.index, leader_id=s.leader_id, leader_epoch=s.leader_epoch,
        replica_nodes=list(s.replicas), isr_nodes=list(s.isr), offline_replicas=list(s.offline_replicas))
        for s in states]
    return _Resp.MetadataResponseTopic(
        error_code=0, name=topic.name, topic_id=topic.topic_id,
        is_internal=_is_internal(topic), partitions=partitions, topic_authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS)


def _error_topic(name, code, topic_id=ZERO_UUID):
    return _Resp.MetadataResponseTopic(error_code=code, name=name, topic_id=topic_id,
                                       partitions=[], topic_authorized_operations=_UNKNOWN_AUTHORIZED_OPERATIONS)


def handle(broker, header, request, session):
    version = header.request_api_version
    metadata = broker.metadata
    requested = request.topics
    with_operations = version >= 8 and request.include_topic_authorized_operations

    def entry(topic):
        operations = None
        if with_operations:
            operations = authorized_operations(broker, session, ResourceType.TOPIC, topic.name)
        return topic_metadata(broker, topic, version, operations)

    if requested is None or (version == 0 and not requested):
        topics = metadata.topics()
        if broker.authorizer is not None:
            topics = list(topics)
            hidden = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
            topics = [t for t in topics if t.name not in hidden]
        results = [entry(t) for t in topics]
    else:
        auto_create = broker.config.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
        results = []
        for wanted in requested:
            name = wanted.name
            if name is None or wanted.topic_id != ZERO_UUID:
                topic = metadata.topic_by_id(wanted.topic_id)
                # The response's name is nullable only from v12; below, an unknown id is "".
                unnamed = None if version >= _FIRST_NULLABLE_NAME else ""
                if topic is None:
                    results.append(_error_topic(unnamed, ErrorCode.UNKNOWN_TOPIC_ID, wanted.topic_id))
                elif not permitted(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, topic.name):
                    results.append(_error_topic(unnamed, ErrorCode.TOPIC_AUTHORIZATION_FAILED, wanted.topic_id))
                else:
                    results.append(entry(topic))
                continue
            if not permitted(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, name):
                results.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            topic = metadata.topic(name)
            if topic is None and auto_create and not (
                    permitted(broker, session, Operation.CREATE, ResourceType.CLUSTER)
                    or permitted(broker, session, Operation.CREATE, ResourceType.TOPIC, name)):
                results.append(_error_topic(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if topic is None and auto_create:
                try:
                    topic = broker.topic_admin.auto_create_topic(name)
                except BrokerError as exc:
                    results.append(_error_topic(name, exc.code))
                    continue
                if topic is None:  # being created in the cluster: the client asks again
                    results.append(_error_topic(name, ErrorCode.LEADER_NOT_AVAILABLE))
                    continue
            if topic is None:
                results.append(_error_topic(name, _missing_topic_code(name)))
                continue
            results.append(entry(topic))
    cluster_operations = _UNKNOWN_AUTHORIZED_OPERATIONS
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        cluster_operations = 0
        if permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER):
            cluster_operations = authorized_operations(broker, session, ResourceType.CLUSTER,
                                                       CLUSTER_RESOURCE_NAME)
    return _Resp(
        brokers=[_Resp.MetadataResponseBroker(node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                 for b in metadata.brokers(session.listener)],
        cluster_id=metadata.cluster_id, controller_id=metadata.controller_id, topics=results,
        cluster_authorized_operations=cluster_operations)


_Described = DESCRIBE_TOPIC_PARTITIONS.response


def _missing_topic_code(name: str) -> ErrorCode:
    """A topic the broker does not know: INVALID_TOPIC_EXCEPTION for a name no topic could
    have, else UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers."""
    try:
        validate_topic_name(name)
    except BrokerError as exc:
        return exc.code
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def describe_topic_partitions(broker, header, request, session):
    metadata = broker.metadata
    cursor = request.cursor
    first = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    if every_topic:
        names = {t.name for t in metadata.topics() if t.name >= first}
    else:
        names = {t.name for t in request.topics if t.name >= first}
    if cursor is not None and ((not every_topic and cursor.topic_name not in names) or cursor.partition_index < 0):
        return _Described(topics=[_Described.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.INVALID_REQUEST, name=t.name, partitions=[]) for t in request.topics])
    hidden = refused(broker, session, Operation.DESCRIBE, ResourceType.TOPIC, names)
    remaining = max(min(broker.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    topics, next_cursor = [], None
    for name in sorted(names - hidden):
        if remaining == 0:
            next_cursor = _Described.Cursor(topic_name=name, partition_index=0)
            break
        topic = metadata.topic(name)
        if topic is None:
            entry = _Described.DescribeTopicPartitionsResponseTopic(error_code=_missing_topic_code(name), name=name,
                                                                    partitions=[])
        else:
            start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            states = [s for s in metadata.partition_states(topic) if s.index >= start]
            taken = states[:remaining]
            remaining -= len(taken)
            entry = _Described.DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.NONE, name=name, topic_id=topic.topic_id, is_internal=_is_internal(topic),
                partitions=[_Described.DescribeTopicPartitionsResponsePartition(
                    error_code=ErrorCode.NONE if s.leader_id >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
                    partition_index=s.index, leader_id=s.leader_id, leader_epoch=s.leader_epoch,
                    replica_nodes=list(s.replicas), isr_nodes=list(s.isr), eligible_leader_replicas=[],
                    last_known_elr=[], offline_replicas=list(s.offline_replicas)) for s in taken])
            if len(taken) < len(states):
                next_cursor = _Described.Cursor(topic_name=name, partition_index=states[len(taken)].index)
        entry.topic_authorized_operations = authorized_operations(broker, session, ResourceType.TOPIC, name)
        topics.append(entry)
        if next_cursor is not None:
            break
    if not every_topic:
        topics += [_Described.DescribeTopicPartitionsResponseTopic(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, name=name, partitions=[]) for name in sorted(hidden)]
    return _Described(topics=topics, next_cursor=next_cursor)
