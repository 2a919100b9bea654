"""AlterPartitionReassignments v0 and ListPartitionReassignments v0 (flexible; Kafka's
`kafka-reassign-partitions.sh`, Admin.alterPartitionReassignments): answered by the
controller (broker.cluster.controller carries them out), NOT_CONTROLLER at the top level
from any other broker, as Kafka's ZooKeeper-mode brokers answer; clients then find the
controller in Metadata. The single node does not serve them (it has no replicas to move).

- Alter: per partition the target replicas, or null to cancel a reassignment in
  progress. Per-partition errors as Kafka's controller gives them:
  INVALID_REPLICA_ASSIGNMENT (an empty list, duplicate or negative ids, brokers to add
  that are not live), NO_REASSIGNMENT_IN_PROGRESS (a cancellation with nothing to
  cancel), UNKNOWN_TOPIC_OR_PARTITION (no such partition, or its topic is being deleted).
- List: the partitions being reassigned, among those named (null: all), with their
  replicas and the replicas being added and removed.
- Authorization (broker.security.acls), as Kafka's KafkaApis: ALTER on the cluster for
  Alter, DESCRIBE on it for List; otherwise CLUSTER_AUTHORIZATION_FAILED at the top level.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS

from broker.errors import BrokerError
from broker.handlers.elect_leaders import active_controller
from broker.security.acls import DENIED, permitted

_Alter = ALTER_PARTITION_REASSIGNMENTS.response
_List = LIST_PARTITION_REASSIGNMENTS.response


async def alter_partition_reassignments(broker, header, request, session):
    if not permitted(broker, session, Operation.ALTER, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        return _Alter(error_code=code, error_message=message, responses=[])
    targets = {(topic.name, partition.partition_index):
               None if partition.replicas is None else tuple(partition.replicas)
               for topic in request.topics for partition in topic.partitions}
    try:
        results = await active_controller(broker).alter_partition_reassignments(targets)
    except BrokerError as exc:
        return _Alter(error_code=exc.code, error_message=str(exc), responses=[])
    topics: dict[str, list] = {}
    for (topic, partition), (code, message) in results.items():
        topics.setdefault(topic, []).append(_Alter.ReassignablePartitionResponse(
            partition_index=partition, error_code=code, error_message=message))
    return _Alter(error_code=ErrorCode.NONE, responses=[
        _Alter.ReassignableTopicResponse(name=topic, partitions=partitions)
        for topic, partitions in topics.items()])


async def list_partition_reassignments(broker, header, request, session):
    if not permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        return _List(error_code=code, error_message=message, topics=[])
    partitions = None
    if request.topics is not None:
        partitions = [(topic.name, index) for topic in request.topics
                      for index in topic.partition_indexes]
    try:
        found = await active_controller(broker).list_partition_reassignments(partitions)
    except BrokerError as exc:
        return _List(error_code=exc.code, error_message=str(exc), topics=[])
    topics: dict[str, list] = {}
    for (topic, partition), (replicas, adding, removing) in found.items():
        topics.setdefault(topic, []).append(_List.OngoingPartitionReassignment(
            partition_index=partition, replicas=list(replicas), adding_replicas=list(adding),
            removing_replicas=list(removing)))
    return _List(error_code=ErrorCode.NONE, topics=[
        _List.OngoingTopicReassignment(name=topic, partitions=partitions)
        for topic, partitions in topics.items()])
