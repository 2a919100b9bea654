"""FindCoordinator v0–6, JoinGroup v0–9, SyncGroup v0–5, Heartbeat v0–4,
LeaveGroup v0–5, DescribeGroups v0–5, ListGroups v0–5, DeleteGroups v0–2,
ConsumerGroupHeartbeat v0–1, ConsumerGroupDescribe v0–1.

- FindCoordinator: the leader of the key's partition of `__consumer_offsets` (key type
  0, a group) or `__transaction_state` (1, a transactional id): this broker on the
  single node. In a cluster the topic is created on the first lookup, and a key whose
  partition has no live leader (or no topic yet) is COORDINATOR_NOT_AVAILABLE. v4+
  answers a batch of keys; other key types are INVALID_REQUEST.
- JoinGroup: v4+ new members must rejoin with the id sent back in MEMBER_ID_REQUIRED;
  v5+ static membership (group_instance_id); v7+ returns the protocol type; v9
  `skip_assignment` is always false (the leader computes the assignment).
- SyncGroup v5 checks protocol type and name; LeaveGroup v3+ removes a batch of
  members (by member id or instance id) with an error per member.
- DescribeGroups reports a group that does not exist as Dead with no members.
- ListGroups lists the groups this broker coordinates (each broker of a cluster its
  own); v4+ filters by state, v5+ by type ("classic", or "consumer" for KIP-848 groups),
  both whatever their case.
- ConsumerGroupHeartbeat (KIP-848, the rules in `broker.groups.consumer_group`) answers
  its errors with a message; ConsumerGroupDescribe describes consumer groups, a classic
  or unknown group GROUP_ID_NOT_FOUND; its v1 member type is 1 (consumer protocol).
- DeleteGroups removes empty groups and their offsets (NON_EMPTY_GROUP otherwise),
  answered once the deletion is committed.
- A group coordinated by another broker is NOT_COORDINATOR, one whose partition is
  loading COORDINATOR_LOAD_IN_PROGRESS: the request's error code (LeaveGroup v3+ its
  top-level one), each group's own for DescribeGroups and DeleteGroups.
The membership rules themselves live in `broker.groups.coordinator`.

Authorization (broker.security.acls), as Kafka's KafkaApis: FindCoordinator DESCRIBE on
the group or transactional id (GROUP_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED per key);
JoinGroup, SyncGroup, Heartbeat, LeaveGroup and ConsumerGroupHeartbeat READ on the group
(GROUP_AUTHORIZATION_FAILED for the request); DescribeGroups and ConsumerGroupDescribe
DESCRIBE per group (authorized operations when asked); ListGroups every group with DESCRIBE on the cluster,
else only the groups one may DESCRIBE; DeleteGroups DELETE per group.
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import (CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS, DESCRIBE_GROUPS,
                           FIND_COORDINATOR, HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, SYNC_GROUP)

from broker.cluster.metadata import COORDINATOR_TOPICS
from broker.errors import BrokerError
from broker.groups.coordinator import DEAD
from broker.security.acls import DENIED, authorized_operations, permitted, require

_GROUP_KEY, _TRANSACTION_KEY = 0, 1
_KEY_RESOURCES = {_GROUP_KEY: ResourceType.GROUP, _TRANSACTION_KEY: ResourceType.TRANSACTIONAL_ID}
_CONSUMER_MEMBER = 1  # ConsumerGroupDescribe v1's member type of a consumer-protocol member


def find_coordinator(broker, header, request, session):
    Resp = FIND_COORDINATOR.response
    version = header.request_api_version
    keys = request.coordinator_keys if version >= 4 else [request.key]
    answers = []  # (key, code, message, endpoint)
    for key in keys:
        if request.key_type not in (_GROUP_KEY, _TRANSACTION_KEY):
            answers.append((key, ErrorCode.INVALID_REQUEST, f"unknown key type {request.key_type}", None))
            continue
        resource_type = _KEY_RESOURCES[request.key_type]
        if not permitted(broker, session, Operation.DESCRIBE, resource_type, key):
            answers.append((key, *DENIED[resource_type], None))
            continue
        endpoint = broker.metadata.coordinator(request.key_type, key, session.listener)
        if endpoint is None:
            broker.topic_admin.ensure_internal_topic(COORDINATOR_TOPICS[request.key_type])
            answers.append((key, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                            f"the coordinator of {key!r} has no leader", None))
        else:
            answers.append((key, ErrorCode.NONE, None, endpoint))
    if version >= 4:
        return Resp(coordinators=[Resp.Coordinator(
            key=key, node_id=endpoint.node_id if endpoint else -1, host=endpoint.host if endpoint else "",
            port=endpoint.port if endpoint else -1, error_code=code, error_message=message)
            for key, code, message, endpoint in answers])
    _, code, message, endpoint = answers[0]
    return Resp(error_code=code, error_message=message, node_id=endpoint.node_id if endpoint else -1,
                host=endpoint.host if endpoint else "", port=endpoint.port if endpoint else -1)


async def join_group(broker, header, request, session):
    Resp = JOIN_GROUP.response
    version = header.request_api_version
    try:
        require(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
        result = await broker.groups.join(
            request.group_id, request.member_id, request.group_instance_id, header.client_id or "",
            session.client_host, request.session_timeout_ms, request.rebalance_timeout_ms,
            request.protocol_type, [(p.name, bytes(p.metadata)) for p in request.protocols],
            require_known_member_id=version >= 4)
    except BrokerError as exc:
        return Resp(error_code=exc.code, generation_id=-1, protocol_name=None if version >= 7 else "",
                    leader="", member_id=request.member_id, members=[])
    members = [Resp.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
               for m, i, meta in result.members]
    protocol_name = result.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""
    return Resp(error_code=result.error, generation_id=result.generation,
                protocol_type=result.protocol_type, protocol_name=protocol_name,
                leader=result.leader, member_id=result.member_id, members=members)


async def sync_group(broker, header, request, session):
    Resp = SYNC_GROUP.response
    try:
        require(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
        protocol_type, protocol_name, assignment = await broker.groups.sync(
            request.group_id, request.generation_id, request.member_id, request.group_instance_id,
            request.protocol_type, request.protocol_name,
            {a.member_id: bytes(a.assignment) for a in request.assignments})
    except BrokerError as exc:
        return Resp(error_code=exc.code, assignment=b"")
    return Resp(error_code=0, protocol_type=protocol_type, protocol_name=protocol_name,
                assignment=assignment)


def heartbeat(broker, header, request, session):
    try:
        require(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
        broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                request.group_instance_id)
    except BrokerError as exc:
        return HEARTBEAT.response(error_code=exc.code)
    return HEARTBEAT.response(error_code=0)


def leave_group(broker, header, request, session):
    Resp = LEAVE_GROUP.response
    if not permitted(broker, session, Operation.READ, ResourceType.GROUP, request.group_id):
        return Resp(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, members=[])
    if header.request_api_version < 3:
        try:
            [code] = broker.groups.leave(request.group_id, [(request.member_id, None)])
        except BrokerError as exc:
            code = exc.code
        return Resp(error_code=code)
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    try:
        codes = broker.groups.leave(request.group_id, members)
    except BrokerError as exc:
        return Resp(error_code=exc.code, members=[])
    return Resp(error_code=0, members=[
        Resp.MemberResponse(member_id=m, group_instance_id=i, error_code=code)
        for (m, i), code in zip(members, codes)])


def describe_groups(broker, header, request, session):
    Resp = DESCRIBE_GROUPS.response
    with_operations = header.request_api_version >= 3 and request.include_authorized_operations
    described = []
    for group_id in request.groups:
        try:
            require(broker, session, Operation.DESCRIBE, ResourceType.GROUP, group_id)
            group = broker.groups.describe(group_id)
        except BrokerError as exc:
            described.append(Resp.DescribedGroup(error_code=exc.code, group_id=group_id, group_state="",
                                                 protocol_type="", protocol_data="", members=[]))
            continue
        if group is None:
            described.append(Resp.DescribedGroup(error_code=0, group_id=group_id, group_state=DEAD,
                                                 protocol_type="", protocol_data="", members=[]))
            continue
        protocol = group.protocol_name or ""
        described.append(Resp.DescribedGroup(
            error_code=0, group_id=group_id, group_state=group.state,
            protocol_type=group.protocol_type or "", protocol_data=protocol,
            members=[Resp.DescribedGroupMember(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=f"/{m.client_host}", member_assignment=m.assignment,
                member_metadata=m.metadata_for(protocol) if protocol else b"")
                for m in group.members.values()]))
    if with_operations:
        for out in described:
            if out.error_code == ErrorCode.NONE:
                out.authorized_operations = authorized_operations(broker, session, ResourceType.GROUP,
                                                                  out.group_id)
    return Resp(groups=described)


def list_groups(broker, header, request, session):
    Resp = LIST_GROUPS.response
    version = header.request_api_version
    # As Kafka, states match whatever their case (v4+), and so do types (v5+).
    states = {s.lower() for s in request.states_filter} if version >= 4 and request.states_filter else None
    types = {t.lower() for t in request.types_filter} if version >= 5 and request.types_filter else None
    listed = []
    try:
        groups = broker.groups.listed()
    except BrokerError as exc:
        return Resp(error_code=exc.code, groups=[])
    every_group = permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER)
    for group_id, protocol_type, state, group_type in groups:
        if (states and state.lower() not in states) or (types and group_type not in types):
            continue
        if not every_group and not permitted(broker, session, Operation.DESCRIBE, ResourceType.GROUP, group_id):
            continue
        listed.append(Resp.ListedGroup(group_id=group_id, protocol_type=protocol_type, group_state=state,
                                       group_type=group_type))
    return Resp(error_code=0, groups=listed)


async def consumer_group_heartbeat(broker, header, request, session):
    Resp = CONSUMER_GROUP_HEARTBEAT.response
    try:
        require(broker, session, Operation.READ, ResourceType.GROUP, request.group_id)
        result = await broker.groups.consumer_groups.heartbeat(
            request, header.request_api_version, header.client_id or "", f"/{session.client_host}")
    except BrokerError as exc:
        return Resp(error_code=exc.code, error_message=str(exc) or None)
    assignment = None
    if result.assignment is not None:
        assignment = Resp.Assignment(topic_partitions=[
            Resp.TopicPartitions(topic_id=topic_id, partitions=sorted(indexes))
            for topic_id, indexes in sorted(result.assignment.items())])
    return Resp(error_code=0, member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval_ms=broker.groups.consumer_groups.heartbeat_interval_ms, assignment=assignment)


def consumer_group_describe(broker, header, request, session):
    Resp = CONSUMER_GROUP_DESCRIBE.response
    described = []
    for group_id in request.group_ids:
        try:
            require(broker, session, Operation.DESCRIBE, ResourceType.GROUP, group_id)
            group = broker.groups.describe_consumer_group(group_id)
        except BrokerError as exc:
            described.append(Resp.DescribedGroup(error_code=exc.code, error_message=str(exc) or None,
                                                 group_id=group_id))
            continue
        described.append(_described_consumer_group(broker, Resp, group))
        if request.include_authorized_operations:
            described[-1].authorized_operations = authorized_operations(broker, session, ResourceType.GROUP,
                                                                        group_id)
    return Resp(groups=described)


def _described_consumer_group(broker, Resp, group):
    def assignment(partitions):
        topics = []
        for topic_id, indexes in sorted(partitions.items()):
            topic = broker.metadata.topic_by_id(topic_id)
            topics.append(Resp.TopicPartitions(topic_id=topic_id, topic_name=topic.name if topic else "",
                                               partitions=sorted(indexes)))
        return Resp.Assignment(topic_partitions=topics)
    groups = broker.groups.consumer_groups
    return Resp.DescribedGroup(
        group_id=group.group_id, group_state=group.state, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch, assignor_name=groups.preferred_assignor(group.members.values()),
        members=[Resp.Member(
            member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
            client_id=m.client_id, client_host=m.client_host, subscribed_topic_names=list(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=assignment(m.assigned), target_assignment=assignment(group.target.get(m.member_id, {})),
            member_type=_CONSUMER_MEMBER) for m in group.members.values()])


async def delete_groups(broker, header, request, session):
    Resp = DELETE_GROUPS.response
    results = []
    for group_id in request.groups_names:
        try:
            require(broker, session, Operation.DELETE, ResourceType.GROUP, group_id)
            await broker.groups.delete_group(group_id)
            results.append(Resp.DeletableGroupResult(group_id=group_id, error_code=0))
        except BrokerError as exc:
            results.append(Resp.DeletableGroupResult(group_id=group_id, error_code=exc.code))
    return Resp(results=results)
