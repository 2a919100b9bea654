"""DescribeClientQuotas (48, v0–1) and AlterClientQuotas (49, v0–1).

The checks, filters and storage (a file, or ZooKeeper in a cluster) are
broker.client_quotas'. Describe answers a filter
Kafka refuses with its error and message at the top level (entries null); Alter answers
each entry with its own result, `validate_only` storing nothing.
Authorization (broker.security.acls), as Kafka's KafkaApis: Describe needs
DESCRIBE_CONFIGS on the cluster, Alter ALTER_CONFIGS on it; CLUSTER_AUTHORIZATION_FAILED
otherwise (Describe at the top level, Alter for each entry).
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import ALTER_CLIENT_QUOTAS, DESCRIBE_CLIENT_QUOTAS

from broker.errors import BrokerError
from broker.security.acls import DENIED, permitted


def describe_client_quotas(broker, header, request, session):
    Resp = DESCRIBE_CLIENT_QUOTAS.response
    if not permitted(broker, session, Operation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        return Resp(throttle_time_ms=0, error_code=code, error_message=message, entries=None)
    try:
        found = broker.client_quotas.describe(
            [(c.entity_type, c.match_type, c.match) for c in request.components], request.strict)
    except BrokerError as exc:
        return Resp(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), entries=None)
    entries = [Resp.EntryData(
        entity=[Resp.EntityData(entity_type=t, entity_name=n) for t, n in sorted(entity)],
        values=[Resp.ValueData(key=k, value=v) for k, v in sorted(quotas.items())])
        for entity, quotas in sorted(found, key=lambda item: sorted((t, n or "") for t, n in item[0]))]
    return Resp(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, entries=entries)


async def alter_client_quotas(broker, header, request, session):
    Resp = ALTER_CLIENT_QUOTAS.response
    if permitted(broker, session, Operation.ALTER_CONFIGS, ResourceType.CLUSTER):
        results = await broker.client_quotas.alter(
            [([(e.entity_type, e.entity_name) for e in entry.entity],
              [(op.key, op.value, op.remove) for op in entry.ops]) for entry in request.entries],
            request.validate_only)
    else:
        results = [DENIED[ResourceType.CLUSTER]] * len(request.entries)
    return Resp(throttle_time_ms=0, entries=[
        Resp.EntryData(error_code=code, error_message=message, entity=[
            Resp.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
        for entry, (code, message) in zip(request.entries, results)])
