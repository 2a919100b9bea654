"""DescribeUserScramCredentials (50, v0) and AlterUserScramCredentials (51, v0).

Describe: no users (null or empty) lists every user with credentials; a named user
without any is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE. Each user's
mechanisms (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) and iteration counts: never a salt or key.
Alter: the checks of broker.security.scram_credentials, one result per user named.
Authorization (broker.security.acls), as Kafka's KafkaApis: Describe needs DESCRIBE on
the cluster, Alter ALTER on it; CLUSTER_AUTHORIZATION_FAILED otherwise (Describe at the
top level and for each user named, Alter for each user named).
"""

from __future__ import annotations

from wire.acl_types import Operation, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import ALTER_USER_SCRAM_CREDENTIALS, DESCRIBE_USER_SCRAM_CREDENTIALS

from broker.security.acls import DENIED, permitted
from broker.security.scram_credentials import MECHANISMS

_CODES = {name: code for code, name in MECHANISMS.items()}


def describe_user_scram_credentials(broker, header, request, session):
    Resp = DESCRIBE_USER_SCRAM_CREDENTIALS.response
    if not permitted(broker, session, Operation.DESCRIBE, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        return Resp(throttle_time_ms=0, error_code=code, error_message=message, results=[
            Resp.DescribeUserScramCredentialsResult(user=u.name, error_code=code, error_message=message,
                                                    credential_infos=[]) for u in request.users or ()])
    users = broker.scram.users
    names = [u.name for u in request.users] if request.users else sorted(users)
    results = []
    for name in dict.fromkeys(names):
        if names.count(name) > 1:
            results.append(Resp.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message=f"user {name!r} is named more than once", credential_infos=[]))
        elif name not in users:
            results.append(Resp.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"user {name!r} has no SCRAM credentials", credential_infos=[]))
        else:
            results.append(Resp.DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.NONE, error_message=None, credential_infos=[
                    Resp.CredentialInfo(mechanism=_CODES[m], iterations=c.iterations)
                    for m, c in sorted(users[name].items())]))
    return Resp(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None, results=results)


async def alter_user_scram_credentials(broker, header, request, session):
    Resp = ALTER_USER_SCRAM_CREDENTIALS.response
    if not permitted(broker, session, Operation.ALTER, ResourceType.CLUSTER):
        code, message = DENIED[ResourceType.CLUSTER]
        users = sorted({u.name for u in (*request.deletions, *request.upsertions)})
        return Resp(throttle_time_ms=0, results=[
            Resp.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message) for user in users])
    results = await broker.scram.alter(
        [(d.name, d.mechanism) for d in request.deletions],
        [(u.name, u.mechanism, u.iterations, u.salt, u.salted_password) for u in request.upsertions])
    return Resp(throttle_time_ms=0, results=[
        Resp.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
        for user, (code, message) in results.items()])
