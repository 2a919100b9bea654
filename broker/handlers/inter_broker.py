"""LeaderAndIsr v0–7, UpdateMetadata v0–8, StopReplica v0–4: the controller's requests to
a cluster broker (the single node does not serve them).

- LeaderAndIsr: partition states grouped by topic from v2 (ungrouped, each naming its
  topic, before), topic ids from v5; applied by the replica manager (see
  `broker.replica.manager` for the epoch rules). Errors per partition, grouped by topic
  id from v5; a stale controller or broker epoch is the top-level error, with no
  partition errors.
- UpdateMetadata: live brokers (v0 a host and port; v1+ endpoints, of which the PLAINTEXT
  listener is the one served), partition states grouped by topic from v5, topic ids from
  v7; they replace this broker's metadata view (`MetadataCache.update`), and every
  request waiting for a metadata change is woken.
- StopReplica: v0–2 one `delete_partitions` for all partitions, v3+ a leader epoch and a
  delete flag per partition; the partitions stop being fetched, and deleted ones lose
  their local log.
- Authorization (broker.security.acls), as Kafka's KafkaApis: each needs CLUSTER_ACTION on
  the cluster; otherwise CLUSTER_AUTHORIZATION_FAILED at the top level and, for
  LeaderAndIsr and StopReplica, on every partition named, and nothing is applied.
"""

from __future__ import annotations

import uuid

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA
from wire.primitives import ZERO_UUID

from broker.cluster.admin import METADATA_CHANGED
from broker.cluster.metadata import BrokerEndpoint
from broker.replica.partition import PartitionState
from broker.config import SECURITY_PROTOCOLS
from broker.errors import BrokerError
from broker.security.acls import permitted

_PROTOCOL_NAMES = dict(enumerate(SECURITY_PROTOCOLS))  # Kafka's security protocol ids


def _grouped(request, version: int, grouped_from: int):
    """(topic name, topic id, partition state) of every state a request carries."""
    if version < grouped_from:
        return [(s.topic_name, ZERO_UUID, s) for s in request.ungrouped_partition_states]
    return [(t.topic_name, getattr(t, "topic_id", ZERO_UUID), s)
            for t in request.topic_states for s in t.partition_states]


async def leader_and_isr(broker, header, request, session):
    Resp = LEADER_AND_ISR.response
    version = header.request_api_version
    states = _grouped(request, version, 2)
    leaders = {b.broker_id: (b.host_name, b.port) for b in request.live_leaders}
    if permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        try:
            results = await broker.replicas.become_leader_or_follower(
                request.controller_epoch, request.broker_epoch, states, leaders)
        except BrokerError as exc:
            return Resp(error_code=exc.code, partition_errors=[], topics=[])
        error = ErrorCode.NONE
    else:
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        results = {(topic, s.partition_index): error for topic, _, s in states}
    if version < 5:
        return Resp(error_code=error, partition_errors=[
            Resp.LeaderAndIsrPartitionError(topic_name=topic, partition_index=p, error_code=code)
            for (topic, p), code in results.items()])
    ids = {topic: topic_id for topic, topic_id, _ in states}
    by_topic: dict[str, list] = {}
    for (topic, p), code in results.items():
        by_topic.setdefault(topic, []).append(Resp.LeaderAndIsrPartitionError(
            topic_name=topic, partition_index=p, error_code=code))
    return Resp(error_code=error, topics=[
        Resp.LeaderAndIsrTopicError(topic_id=ids[topic], partition_errors=errors)
        for topic, errors in by_topic.items()])


def _endpoints(live, version: int, rack) -> dict[str, BrokerEndpoint]:
    """A live broker's endpoint per listener name; before v3 endpoints carry no listener
    name and the security protocol's name stands for it, as in Kafka."""
    if version == 0:
        return {"PLAINTEXT": BrokerEndpoint(live.id, live.v0_host, live.v0_port, None)}
    return {(e.listener if version >= 3 else _PROTOCOL_NAMES.get(e.security_protocol, "")):
            BrokerEndpoint(live.id, e.host, e.port, rack) for e in live.endpoints}


def update_metadata(broker, header, request, session):
    Resp = UPDATE_METADATA.response
    version = header.request_api_version
    if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        return Resp(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    brokers = {b.id: _endpoints(b, version, b.rack if version >= 2 else None) for b in request.live_brokers}
    topics: dict[str, tuple[uuid.UUID, list[PartitionState]]] = {}
    for topic, topic_id, s in _grouped(request, version, 5):
        entry = topics.setdefault(topic, (topic_id, []))
        entry[1].append(PartitionState(s.partition_index, s.leader, s.leader_epoch, tuple(s.replicas),
                                       tuple(s.isr), tuple(s.offline_replicas)))
    try:
        if 0 <= request.broker_epoch < broker.broker_epoch:
            raise BrokerError(ErrorCode.STALE_BROKER_EPOCH,
                              f"broker epoch {request.broker_epoch} is older than {broker.broker_epoch}")
        broker.metadata.update(request.controller_id, request.controller_epoch, brokers,
                               [(name, topic_id, states) for name, (topic_id, states) in topics.items()])
    except BrokerError as exc:
        return Resp(error_code=exc.code)
    broker.delayed.wake(METADATA_CHANGED)
    return Resp(error_code=ErrorCode.NONE)


async def stop_replica(broker, header, request, session):
    Resp = STOP_REPLICA.response
    version = header.request_api_version
    if version == 0:
        partitions = [(p.topic_name, p.partition_index, -1, request.delete_partitions)
                      for p in request.ungrouped_partitions]
    elif version <= 2:
        partitions = [(t.name, p, -1, request.delete_partitions)
                      for t in request.topics for p in t.partition_indexes]
    else:
        partitions = [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
                      for t in request.topic_states for p in t.partition_states]
    if not permitted(broker, session, Operation.CLUSTER_ACTION, ResourceType.CLUSTER):
        error = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        results = {(topic, p): error for topic, p, _, _ in partitions}
    else:
        error = ErrorCode.NONE
        try:
            results = await broker.replicas.stop_replicas(request.controller_epoch, request.broker_epoch,
                                                          partitions)
        except BrokerError as exc:
            return Resp(error_code=exc.code, partition_errors=[])
    return Resp(error_code=error, partition_errors=[
        Resp.StopReplicaPartitionError(topic_name=topic, partition_index=p, error_code=code)
        for (topic, p), code in results.items()])
