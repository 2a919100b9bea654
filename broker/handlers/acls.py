"""DescribeAcls v0–3, CreateAcls v0–3, DeleteAcls v0–3 (flexible from v2), as Kafka's
AclApis answers them.

- DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER on it:
  CLUSTER_AUTHORIZATION_FAILED otherwise. Without an authorizer (`authorizer.class.name`
  unset) everything is allowed but there are no ACLs: SECURITY_DISABLED. Both errors
  come where Kafka puts a whole request's error: DescribeAcls' top level, every creation
  of CreateAcls, every filter of DeleteAcls.
- DescribeAcls: the bindings the filter matches (broker.security.acls' filter rules),
  grouped by resource pattern. A filter with a code this side does not know (UNKNOWN)
  is INVALID_REQUEST.
- CreateAcls: each creation checked as Kafka checks it (broker.security.acls) and
  stored (broker.security.acl_store); an error per creation, INVALID_REQUEST for a
  binding refused. Answered once stored (in a cluster: written to ZooKeeper; the other
  brokers follow its notification).
- DeleteAcls: per filter, the bindings it deleted, each with its own error code; a
  filter with a code this side does not know is INVALID_REQUEST.
- v0 knows LITERAL patterns only: its requests carry no pattern type, which reads as
  LITERAL, so v0 filters match and create LITERAL patterns only.
"""

from __future__ import annotations

from wire.acl_types import Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import CREATE_ACLS, DELETE_ACLS, DESCRIBE_ACLS

from broker.errors import BrokerError
from broker.security.acls import (DENIED, AccessControlEntry, AclBinding, AclBindingFilter, ResourcePattern,
                                  check_new_binding, permitted)

_DISABLED = "No Authorizer is configured on the broker"


def _refusal(broker, session, operation: Operation) -> tuple[ErrorCode, str] | None:
    """What answers a request the cluster check or a missing authorizer refuses."""
    if not permitted(broker, session, operation, ResourceType.CLUSTER):
        return DENIED[ResourceType.CLUSTER]
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, _DISABLED
    return None


def _filter(request) -> AclBindingFilter:
    return AclBindingFilter(ResourceType.of(request.resource_type_filter), request.resource_name_filter,
                            PatternType.of(request.pattern_type_filter), request.principal_filter,
                            request.host_filter, Operation.of(request.operation),
                            Permission.of(request.permission_type))


def describe_acls(broker, header, request, session):
    Resp = DESCRIBE_ACLS.response
    refusal = _refusal(broker, session, Operation.DESCRIBE)
    acl_filter = _filter(request)
    if refusal is None and acl_filter.unknown:
        refusal = ErrorCode.INVALID_REQUEST, acl_filter.unknown
    if refusal is not None:
        return Resp(throttle_time_ms=0, error_code=refusal[0], error_message=refusal[1], resources=[])
    by_pattern: dict[ResourcePattern, list] = {}
    for pattern, entry in broker.authorizer.bindings(acl_filter):
        by_pattern.setdefault(pattern, []).append(Resp.AclDescription(
            principal=entry.principal, host=entry.host, operation=entry.operation,
            permission_type=entry.permission))
    return Resp(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, resources=[
        Resp.DescribeAclsResource(resource_type=pattern.resource_type, resource_name=pattern.name,
                                  pattern_type=pattern.pattern_type, acls=acls)
        for pattern, acls in by_pattern.items()])


async def create_acls(broker, header, request, session):
    Resp = CREATE_ACLS.response
    refusal = _refusal(broker, session, Operation.ALTER)
    if refusal is not None:
        return Resp(throttle_time_ms=0, results=[Resp.AclCreationResult(error_code=refusal[0], error_message=refusal[1])
                                                 for _ in request.creations])
    errors: list[BrokerError | None] = [None] * len(request.creations)
    valid = []
    for index, creation in enumerate(request.creations):
        binding = AclBinding(
            ResourcePattern(ResourceType.of(creation.resource_type), creation.resource_name,
                            PatternType.of(creation.resource_pattern_type)),
            AccessControlEntry(creation.principal, creation.host, Operation.of(creation.operation),
                               Permission.of(creation.permission_type)))
        try:
            check_new_binding(binding)
            valid.append((index, binding))
        except BrokerError as exc:
            errors[index] = exc
    if valid:
        for (index, _), error in zip(valid, await broker.acls.create([binding for _, binding in valid])):
            errors[index] = error
    return Resp(throttle_time_ms=0, results=[
        Resp.AclCreationResult(error_code=error.code if error else ErrorCode.NONE,
                               error_message=str(error) if error else None) for error in errors])


async def delete_acls(broker, header, request, session):
    Resp = DELETE_ACLS.response
    refusal = _refusal(broker, session, Operation.ALTER)
    if refusal is not None:
        return Resp(throttle_time_ms=0, filter_results=[
            Resp.DeleteAclsFilterResult(error_code=refusal[0], error_message=refusal[1], matching_acls=[])
            for _ in request.filters])
    filters = [_filter(f) for f in request.filters]
    results = [Resp.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=f.unknown,
                                           matching_acls=[]) for f in filters]
    usable = [index for index, f in enumerate(filters) if not f.unknown]
    deleted = await broker.acls.delete([filters[index] for index in usable]) if usable else []
    for index, bindings in zip(usable, deleted):
        results[index] = Resp.DeleteAclsFilterResult(error_code=ErrorCode.NONE, error_message=None, matching_acls=[
            Resp.DeleteAclsMatchingAcl(
                error_code=error.code if error else ErrorCode.NONE, error_message=str(error) if error else None,
                resource_type=pattern.resource_type, resource_name=pattern.name, pattern_type=pattern.pattern_type,
                principal=entry.principal, host=entry.host, operation=entry.operation,
                permission_type=entry.permission)
            for (pattern, entry), error in bindings])
    return Resp(throttle_time_ms=0, filter_results=results)
