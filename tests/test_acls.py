"""ACLs: Kafka's authorizer semantics, table-driven, on broker.security.acls (the rules
themselves, without sockets) and through a real broker process (the same tables, each
decision observed on the wire); the ACL APIs (DescribeAcls, CreateAcls, DeleteAcls) with
real clients (confluent-kafka, kafka-python, Apache Kafka's kafka-acls) and raw frames for
what clients never send; their persistence across a restart.

The broker serves two listeners: PLAINTEXT, where the principal is User:ANONYMOUS, and
SASL_PLAINTEXT with PLAIN users `admin` (in super.users: it manages the ACLs) and
`alice`. The principal a test acts as is a parameter where that is easy.
"""

from __future__ import annotations

import json
import os

import pytest

from broker.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, Authorizer, ResourcePattern,
                                  check_new_binding)
from broker.errors import BrokerError
from sluice.broker_process import BrokerProcess
from tests.cluster import free_ports
from tests.test_broker_failures import connect, fetch_body, roundtrip
from wire.acl_types import Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import (CREATE_ACLS, CREATE_TOPICS, DELETE_ACLS, DESCRIBE_ACLS, DESCRIBE_CONFIGS, FETCH,
                           INCREMENTAL_ALTER_CONFIGS, METADATA)

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
R, W, D = Operation.READ, Operation.WRITE, Operation.DESCRIBE
ALICE, BOB, ANYONE = "User:alice", "User:bob", "User:*"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE_PASSWORD = "alice-secret"


def acl(resource_type, name, pattern_type, principal, host, operation, permission) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


def authorizer_with(bindings, super_users=(), allow_if_none=False) -> Authorizer:
    authorizer = Authorizer(super_users, allow_if_none)
    by_pattern: dict = {}
    for pattern, entry in bindings:
        by_pattern.setdefault(pattern, set()).add(entry)
    for pattern, entries in by_pattern.items():
        authorizer.set_acls(pattern, entries)
    return authorizer


# -- the decisions, table-driven ------------------------------------------------------------
# (ACLs, (principal, host, operation, resource type, name), allowed); super.users and
# allow.everyone.if.no.acl.found as given by the case's id.

DECISIONS = {
    "no acl: refused": ([], (ALICE, HOST, R, TOPIC, "t"), False),
    "no acl, allow.everyone: allowed": ([], (ALICE, HOST, R, TOPIC, "t"), True),
    "acls elsewhere, allow.everyone: allowed": (
        [acl(TOPIC, "other", LITERAL, BOB, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), True),
    "acls on it for others, allow.everyone: refused": (
        [acl(TOPIC, "t", LITERAL, BOB, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "literal allow": ([acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), True),
    "allow is for one operation": ([acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, W, TOPIC, "t"), False),
    "read implies describe": ([acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, D, TOPIC, "t"), True),
    "write implies describe": ([acl(TOPIC, "t", LITERAL, ALICE, "*", W, ALLOW)], (ALICE, HOST, D, TOPIC, "t"), True),
    "delete implies describe": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.DELETE, ALLOW)], (ALICE, HOST, D, TOPIC, "t"), True),
    "alter implies describe": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALTER, ALLOW)], (ALICE, HOST, D, TOPIC, "t"), True),
    "alter_configs implies describe_configs": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALTER_CONFIGS, ALLOW)],
        (ALICE, HOST, Operation.DESCRIBE_CONFIGS, TOPIC, "t"), True),
    "describe implies no read": ([acl(TOPIC, "t", LITERAL, ALICE, "*", D, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "create implies no describe": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.CREATE, ALLOW)], (ALICE, HOST, D, TOPIC, "t"), False),
    "all allows anything": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALL, ALLOW)], (ALICE, HOST, Operation.ALTER, TOPIC, "t"), True),
    "deny beats allow": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), False),
    "deny all beats allow": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALL, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), False),
    "deny read leaves an implied describe": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, "*", R, DENY)],
        (ALICE, HOST, D, TOPIC, "t"), True),
    "deny for User:* beats allow": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ANYONE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), False),
    "deny from the host beats allow": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, HOST, R, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), False),
    "deny from another host": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, OTHER_HOST, R, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), True),
    "User:* allow": ([acl(TOPIC, "t", LITERAL, ANYONE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), True),
    "allow from the host": ([acl(TOPIC, "t", LITERAL, ALICE, HOST, R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), True),
    "allow from another host": (
        [acl(TOPIC, "t", LITERAL, ALICE, OTHER_HOST, R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "another principal's allow": ([acl(TOPIC, "t", LITERAL, BOB, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "another principal type": (
        [acl(TOPIC, "t", LITERAL, "Group:alice", "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "another resource type": ([acl(GROUP, "t", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "t"), False),
    "literal * allows every name": (
        [acl(TOPIC, "*", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "anything"), True),
    "deny on * beats a literal allow": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "*", LITERAL, ALICE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "t"), False),
    "prefixed allow": ([acl(TOPIC, "orders-", PREFIXED, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "orders-eu"), True),
    "prefixed allow of the whole name": (
        [acl(TOPIC, "orders-", PREFIXED, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "orders-"), True),
    "prefixed allow of a longer name": (
        [acl(TOPIC, "orders-", PREFIXED, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "orders"), False),
    "a literal is no prefix": ([acl(TOPIC, "orders", LITERAL, ALICE, "*", R, ALLOW)], (ALICE, HOST, R, TOPIC, "orders-eu"), False),
    "prefixed deny beats a literal allow": (
        [acl(TOPIC, "orders-eu", LITERAL, ALICE, "*", R, ALLOW), acl(TOPIC, "orders", PREFIXED, ALICE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "orders-eu"), False),
    "a longer prefixed deny": (
        [acl(TOPIC, "a", PREFIXED, ALICE, "*", R, ALLOW), acl(TOPIC, "abc", PREFIXED, ALICE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "abcd"), False),
    "a longer prefixed deny that does not apply": (
        [acl(TOPIC, "a", PREFIXED, ALICE, "*", R, ALLOW), acl(TOPIC, "abc", PREFIXED, ALICE, "*", R, DENY)],
        (ALICE, HOST, R, TOPIC, "abx"), True),
    "super user despite a deny": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALL, DENY)], (ALICE, HOST, R, TOPIC, "t"), True),
    "cluster action": (
        [acl(CLUSTER, "kafka-cluster", LITERAL, ALICE, "*", Operation.CLUSTER_ACTION, ALLOW)],
        (ALICE, HOST, Operation.CLUSTER_ACTION, CLUSTER, "kafka-cluster"), True),
    "transactional id": (
        [acl(TXN, "tx-", PREFIXED, ALICE, "*", W, ALLOW)], (ALICE, HOST, D, TXN, "tx-1"), True),
}


def _settings(case: str):
    return (ALICE,) if case.startswith("super user") else (), "allow.everyone" in case


@pytest.mark.parametrize("case", DECISIONS)
def test_decision(case):
    bindings, request, allowed = DECISIONS[case]
    super_users, allow_if_none = _settings(case)
    assert authorizer_with(bindings, super_users, allow_if_none).authorize(*request) is allowed


BY_RESOURCE_TYPE = {
    "no acl": ([], False),
    "no acl, allow.everyone": ([], True),
    "a literal allow": ([acl(TOPIC, "t", LITERAL, ALICE, "*", W, ALLOW)], True),
    "a prefixed allow": ([acl(TOPIC, "p", PREFIXED, ALICE, "*", W, ALLOW)], True),
    "an allow for all": ([acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ALL, ALLOW)], True),
    "an allow for another operation": ([acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW)], False),
    "an allow for another principal": ([acl(TOPIC, "t", LITERAL, BOB, "*", W, ALLOW)], False),
    "an allow on another resource type": ([acl(GROUP, "t", LITERAL, ALICE, "*", W, ALLOW)], False),
    "a deny on *": ([acl(TOPIC, "t", LITERAL, ALICE, "*", W, ALLOW), acl(TOPIC, "*", LITERAL, ALICE, "*", W, DENY)],
                    False),
    "a deny on * with allow.everyone": ([acl(TOPIC, "*", LITERAL, ANYONE, "*", W, DENY)], False),
    "the literal allowed is denied": (
        [acl(TOPIC, "t", LITERAL, ALICE, "*", W, ALLOW), acl(TOPIC, "t", LITERAL, ALICE, "*", W, DENY)], False),
    "the literal allowed is denied by a prefix": (
        [acl(TOPIC, "abc", LITERAL, ALICE, "*", W, ALLOW), acl(TOPIC, "ab", PREFIXED, ALICE, "*", W, DENY)], False),
    "the prefix allowed is denied by a shorter one": (
        [acl(TOPIC, "ab", PREFIXED, ALICE, "*", W, ALLOW), acl(TOPIC, "a", PREFIXED, ALICE, "*", W, DENY)], False),
    "the prefix allowed is wider than the one denied": (
        [acl(TOPIC, "a", PREFIXED, ALICE, "*", W, ALLOW), acl(TOPIC, "ab", PREFIXED, ALICE, "*", W, DENY)], True),
    "another literal stays allowed": (
        [acl(TOPIC, "x", LITERAL, ALICE, "*", W, ALLOW), acl(TOPIC, "y", LITERAL, ALICE, "*", W, ALLOW),
         acl(TOPIC, "x", LITERAL, ALICE, "*", W, DENY)], True),
    "literal * allowed despite other denies": (
        [acl(TOPIC, "*", LITERAL, ALICE, "*", W, ALLOW), acl(TOPIC, "x", LITERAL, ALICE, "*", W, DENY)], True),
    "super user": ([acl(TOPIC, "*", LITERAL, ALICE, "*", W, DENY)], True),
}


@pytest.mark.parametrize("case", BY_RESOURCE_TYPE)
def test_decision_by_resource_type(case):
    """InitProducerId without a transactional id: may the principal write to some topic?"""
    bindings, allowed = BY_RESOURCE_TYPE[case]
    super_users, allow_if_none = _settings(case)
    authorizer = authorizer_with(bindings, super_users, allow_if_none)
    assert authorizer.authorize_by_resource_type(ALICE, HOST, W, TOPIC) is allowed


def test_a_change_replaces_cached_decisions():
    authorizer = Authorizer()
    pattern = ResourcePattern(TOPIC, "t", LITERAL)
    assert not authorizer.authorize(ALICE, HOST, R, TOPIC, "t")
    authorizer.set_acls(pattern, {AccessControlEntry(ALICE, "*", R, ALLOW)})
    assert authorizer.authorize(ALICE, HOST, R, TOPIC, "t")
    authorizer.set_acls(ResourcePattern(TOPIC, "t", PREFIXED), {AccessControlEntry(ALICE, "*", R, DENY)})
    assert not authorizer.authorize(ALICE, HOST, R, TOPIC, "t")
    authorizer.set_acls(ResourcePattern(TOPIC, "t", PREFIXED), ())
    authorizer.set_acls(pattern, ())
    assert not authorizer.authorize(ALICE, HOST, R, TOPIC, "t") and authorizer.patterns() == []


# -- filters ----------------------------------------------------------------------------------

PATTERNS = [ResourcePattern(TOPIC, "orders", LITERAL), ResourcePattern(TOPIC, "*", LITERAL),
            ResourcePattern(TOPIC, "ord", PREFIXED), ResourcePattern(TOPIC, "orders", PREFIXED),
            ResourcePattern(TOPIC, "x", PREFIXED), ResourcePattern(GROUP, "orders", LITERAL)]

PATTERN_FILTERS = [
    ((ResourceType.ANY, None, PatternType.ANY), PATTERNS),
    ((TOPIC, "orders", LITERAL), [PATTERNS[0]]),
    ((TOPIC, "orders", PREFIXED), [PATTERNS[3]]),
    ((TOPIC, "orders", PatternType.ANY), [PATTERNS[0], PATTERNS[3]]),
    ((TOPIC, "orders", PatternType.MATCH), PATTERNS[:4]),
    ((ResourceType.ANY, "orders", PatternType.MATCH), PATTERNS[:4] + [PATTERNS[5]]),
    ((TOPIC, None, PREFIXED), PATTERNS[2:5]),
    ((TOPIC, "*", LITERAL), [PATTERNS[1]]),
    ((TOPIC, "*", PatternType.MATCH), [PATTERNS[1]]),
    ((GROUP, None, PatternType.ANY), [PATTERNS[5]]),
]


@pytest.mark.parametrize("pattern_filter,matched", PATTERN_FILTERS, ids=str)
def test_pattern_filter(pattern_filter, matched):
    acl_filter = AclBindingFilter(*pattern_filter, None, None, Operation.ANY, Permission.ANY)
    assert [p for p in PATTERNS if acl_filter.matches_pattern(p)] == matched


ENTRIES = [AccessControlEntry(ALICE, "*", R, ALLOW), AccessControlEntry(ALICE, HOST, W, DENY),
           AccessControlEntry(BOB, "*", R, ALLOW)]


@pytest.mark.parametrize("entry_filter,matched", [
    ((None, None, Operation.ANY, Permission.ANY), ENTRIES),
    ((ALICE, None, Operation.ANY, Permission.ANY), ENTRIES[:2]),
    ((None, "*", Operation.ANY, Permission.ANY), [ENTRIES[0], ENTRIES[2]]),
    ((None, None, R, Permission.ANY), [ENTRIES[0], ENTRIES[2]]),
    ((None, None, Operation.ANY, DENY), [ENTRIES[1]]),
    ((ANYONE, None, Operation.ANY, Permission.ANY), []),  # a filter's User:* is that principal only
], ids=str)
def test_entry_filter(entry_filter, matched):
    acl_filter = AclBindingFilter(ResourceType.ANY, None, PatternType.ANY, *entry_filter)
    assert [e for e in ENTRIES if acl_filter.matches_entry(e)] == matched


@pytest.mark.parametrize("binding,message", [
    (acl(ResourceType.ANY, "t", LITERAL, ALICE, "*", R, ALLOW), "Invalid resourceType ANY"),
    (acl(ResourceType.UNKNOWN, "t", LITERAL, ALICE, "*", R, ALLOW), "Invalid resourceType UNKNOWN"),
    (acl(TOPIC, "t", PatternType.MATCH, ALICE, "*", R, ALLOW), "Invalid patternType MATCH"),
    (acl(TOPIC, "t", PatternType.ANY, ALICE, "*", R, ALLOW), "Invalid patternType ANY"),
    (acl(TOPIC, "t", LITERAL, ALICE, "*", Operation.ANY, ALLOW), "Invalid operation ANY"),
    (acl(TOPIC, "t", LITERAL, ALICE, "*", R, Permission.ANY), "Invalid permissionType ANY"),
    (acl(CLUSTER, "my-cluster", LITERAL, ALICE, "*", R, ALLOW),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(TOPIC, "", LITERAL, ALICE, "*", R, ALLOW), "Invalid empty resource name"),
    (acl(TOPIC, "a/b", LITERAL, ALICE, "*", R, ALLOW), "ACL binding contains invalid resource name: a/b"),
    (acl(TOPIC, "t", LITERAL, "alice", "*", R, ALLOW),
     "expected a string in format principalType:principalName but got alice"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_new_binding_checks(binding, message):
    with pytest.raises(BrokerError) as raised:
        check_new_binding(binding)
    assert raised.value.code == ErrorCode.INVALID_REQUEST and str(raised.value) == message


# -- a real broker ------------------------------------------------------------------------------

def server_properties(ports: dict[str, int], extra: str = "") -> str:
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{ADMIN}="{ADMIN_PASSWORD}" user_alice="{ALICE_PASSWORD}";')
    return (f"listeners=PLAINTEXT://127.0.0.1:{ports['PLAINTEXT']},SASL_PLAINTEXT://127.0.0.1:{ports['SASL_PLAINTEXT']}\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            "sasl.enabled.mechanisms=PLAIN\n"
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={jaas}\n"
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer\n"
            f"super.users=User:{ADMIN}\n"
            "num.partitions=1\n" + extra)


def start_broker(directory, extra: str = "") -> BrokerProcess:
    ports = dict(zip(("PLAINTEXT", "SASL_PLAINTEXT"), free_ports(2)))
    os.makedirs(directory, exist_ok=True)
    config = os.path.join(directory, "server.properties")
    with open(config, "w") as f:
        f.write(server_properties(ports, extra))
    return BrokerProcess(os.path.join(directory, "data"), port=ports["PLAINTEXT"], config_file=config).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("acls"))
    try:
        yield process
    finally:
        process.stop()


def client_settings(broker, user: str | None) -> dict:
    """confluent-kafka settings for a user over SASL PLAIN, or User:ANONYMOUS over PLAINTEXT."""
    if user is None:
        return {"bootstrap.servers": broker.bootstrap("PLAINTEXT")}
    password = {ADMIN: ADMIN_PASSWORD, "alice": ALICE_PASSWORD}[user]
    return {"bootstrap.servers": broker.bootstrap("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password}


def admin_client(broker, user: str | None = ADMIN):
    from confluent_kafka.admin import AdminClient

    return AdminClient({**client_settings(broker, user), "log_level": 3})


def kafka_python_admin(broker, user: str | None = ADMIN):
    from kafka.admin import KafkaAdminClient

    if user is None:
        return KafkaAdminClient(bootstrap_servers=broker.bootstrap("PLAINTEXT"), request_timeout_ms=30_000)
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                            sasl_mechanism="PLAIN", sasl_plain_username=user,
                            sasl_plain_password={ADMIN: ADMIN_PASSWORD, "alice": ALICE_PASSWORD}[user],
                            request_timeout_ms=30_000)


def to_confluent(binding: AclBinding):
    from confluent_kafka.admin import AclBinding as Binding, AclOperation, AclPermissionType
    from confluent_kafka.admin import ResourcePatternType, ResourceType as Type

    pattern, entry = binding
    return Binding(Type(pattern.resource_type), pattern.name, ResourcePatternType(pattern.pattern_type),
                   entry.principal, entry.host, AclOperation(entry.operation), AclPermissionType(entry.permission))


def confluent_filter(resource_type=ResourceType.ANY, name=None, pattern_type=PatternType.ANY, principal=None,
                     host=None, operation=Operation.ANY, permission=Permission.ANY):
    from confluent_kafka.admin import AclBindingFilter as Filter, AclOperation, AclPermissionType
    from confluent_kafka.admin import ResourcePatternType, ResourceType as Type

    return Filter(Type(resource_type), name, ResourcePatternType(pattern_type), principal, host,
                  AclOperation(operation), AclPermissionType(permission))


def from_confluent(binding) -> AclBinding:
    return acl(ResourceType(binding.restype.value), binding.name, PatternType(binding.resource_pattern_type.value),
               binding.principal, binding.host, Operation(binding.operation.value),
               Permission(binding.permission_type.value))


def create(admin, bindings) -> None:
    if not bindings:
        return
    for future in admin.create_acls([to_confluent(b) for b in bindings]).values():
        future.result(30)


def describe(admin, **filter_fields) -> set[AclBinding]:
    return {from_confluent(b) for b in admin.describe_acls(confluent_filter(**filter_fields)).result(30)}


def delete(admin, **filter_fields) -> set[AclBinding]:
    [future] = admin.delete_acls([confluent_filter(**filter_fields)]).values()
    return {from_confluent(b) for b in future.result(30)}


@pytest.fixture
def admin(broker):
    """The super user's admin client; every ACL is deleted after the test."""
    client = admin_client(broker)
    yield client
    delete(client)


def create_topic(admin, name: str) -> str:
    """The topic, created unless it exists (the module's tests share one broker)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    for future in admin.create_topics([NewTopic(name, 1, 1)]).values():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return name


# What each operation of the decision table is observed through: a request as
# User:ANONYMOUS (PLAINTEXT, from 127.0.0.1) on topic "t" and the error code it gets.

def _metadata(sock, topic):
    body = METADATA.request(topics=[METADATA.request.MetadataRequestTopic(name=topic)],
                            allow_auto_topic_creation=False)
    return roundtrip(sock, METADATA, 12, body, 1).topics[0].error_code


def _fetch(sock, topic):
    return roundtrip(sock, FETCH, 12, fetch_body([(topic, 0, 0)]), 2).responses[0].partitions[0].error_code


def _describe_configs(sock, topic):
    body = DESCRIBE_CONFIGS.request(resources=[DESCRIBE_CONFIGS.request.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=["retention.ms"])])
    return roundtrip(sock, DESCRIBE_CONFIGS, 4, body, 3).results[0].error_code


def _alter_configs(sock, topic):
    Req = INCREMENTAL_ALTER_CONFIGS.request
    body = Req(validate_only=True, resources=[Req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        Req.AlterableConfig(name="retention.ms", config_operation=0, value="1000")])])
    return roundtrip(sock, INCREMENTAL_ALTER_CONFIGS, 1, body, 4).responses[0].error_code


PROBES = {R: _fetch, D: _metadata, Operation.DESCRIBE_CONFIGS: _describe_configs,
          Operation.ALTER_CONFIGS: _alter_configs}
ANONYMOUS = "User:ANONYMOUS"


def _as_anonymous(binding: AclBinding) -> AclBinding:
    """ALICE from HOST becomes User:ANONYMOUS from 127.0.0.1, what the broker sees of a
    PLAINTEXT test connection."""
    pattern, entry = binding
    return AclBinding(pattern, entry._replace(principal=ANONYMOUS if entry.principal == ALICE else entry.principal,
                                              host="127.0.0.1" if entry.host == HOST else entry.host))


# The cases a broker can show: on topics, for ALICE from HOST, an operation with a probe.
WIRE_CASES = [case for case, (_, (principal, host, operation, resource_type, _), _) in DECISIONS.items()
              if not case.startswith("super user") and "allow.everyone" not in case
              and (principal, host, resource_type) == (ALICE, HOST, TOPIC) and operation in PROBES]


def test_decisions_on_the_wire(broker, admin):
    """Every case of the table a broker can show, shown: its ACLs created with CreateAcls,
    its decision read from the refusal (or not) of a real request on the case's topic."""
    assert len(WIRE_CASES) >= 25
    with connect(broker.port) as sock:
        for case in WIRE_CASES:
            bindings, (_, _, operation, _, topic), allowed = DECISIONS[case]
            create_topic(admin, topic)
            bindings = [_as_anonymous(b) for b in bindings]
            create(admin, bindings)
            assert describe(admin) == set(bindings), case
            code = PROBES[operation](sock, topic)
            assert code == (ErrorCode.NONE if allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED), \
                f"{case}: {ErrorCode(code).name}"
            assert delete(admin) == set(bindings), case


def test_prefixed_decisions_on_the_wire(broker, admin):
    """The prefix rules with real topic names: orders-eu readable through a PREFIXED
    allow, orders not; a PREFIXED deny overriding a LITERAL allow."""
    for name in ("orders", "orders-eu", "orders-us"):
        create_topic(admin, name)
    create(admin, [acl(TOPIC, "orders-", PREFIXED, ANONYMOUS, "*", R, ALLOW),
                   acl(TOPIC, "orders", LITERAL, ANONYMOUS, "*", R, ALLOW),
                   acl(TOPIC, "orders-us", PREFIXED, ANYONE, "*", R, DENY)])
    with connect(broker.port) as sock:
        assert _fetch(sock, "orders-eu") == ErrorCode.NONE
        assert _metadata(sock, "orders-eu") == ErrorCode.NONE  # READ implies DESCRIBE
        assert _fetch(sock, "orders") == ErrorCode.NONE
        assert _fetch(sock, "orders-us") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert _metadata(sock, "orders-us") == ErrorCode.NONE  # a READ deny is no DESCRIBE deny
        assert _describe_configs(sock, "orders-eu") == ErrorCode.TOPIC_AUTHORIZATION_FAILED


# -- the ACL APIs ---------------------------------------------------------------------------

SAMPLE = [acl(TOPIC, "orders", LITERAL, ALICE, "*", R, ALLOW),
          acl(TOPIC, "orders", LITERAL, BOB, "10.1.1.1", W, DENY),
          acl(TOPIC, "ord", PREFIXED, ALICE, "*", D, ALLOW),
          acl(TOPIC, "*", LITERAL, ANYONE, "*", D, ALLOW),
          acl(GROUP, "billing", LITERAL, ALICE, "*", R, ALLOW),
          acl(CLUSTER, "kafka-cluster", LITERAL, ALICE, "*", Operation.IDEMPOTENT_WRITE, ALLOW),
          acl(TXN, "tx-", PREFIXED, ALICE, "*", W, ALLOW)]


def test_create_describe_delete_with_filters(broker, admin):
    create(admin, SAMPLE)
    create(admin, SAMPLE[:2])  # again: nothing changes
    assert describe(admin) == set(SAMPLE)
    assert describe(admin, resource_type=TOPIC, name="orders", pattern_type=LITERAL) == set(SAMPLE[:2])
    assert describe(admin, resource_type=TOPIC, name="orders", pattern_type=PatternType.MATCH) == set(SAMPLE[:4])
    assert describe(admin, resource_type=TOPIC, pattern_type=PREFIXED) == {SAMPLE[2]}
    assert describe(admin, principal=ALICE) == {b for b in SAMPLE if b.entry.principal == ALICE}
    assert describe(admin, host="10.1.1.1") == {SAMPLE[1]}
    assert describe(admin, operation=W, permission=Permission.ANY) == {SAMPLE[1], SAMPLE[6]}
    assert describe(admin, permission=DENY) == {SAMPLE[1]}
    # MATCH on any resource type: the group's LITERAL name, and the topics' LITERAL "*"
    assert describe(admin, resource_type=ResourceType.ANY, name="billing", pattern_type=PatternType.MATCH) == {
        SAMPLE[3], SAMPLE[4]}
    assert delete(admin, resource_type=TOPIC, name="nothing-here", pattern_type=LITERAL) == set()
    assert delete(admin, principal=BOB) == {SAMPLE[1]}
    assert delete(admin, resource_type=TOPIC, name="orders", pattern_type=PatternType.MATCH) == {SAMPLE[0], SAMPLE[2],
                                                                                                SAMPLE[3]}
    assert describe(admin) == {SAMPLE[4], SAMPLE[5], SAMPLE[6]}


def test_acls_with_kafka_python(broker, admin):
    """kafka-python's admin client over SASL PLAIN: its own encoding of the three APIs."""
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern as Pattern, ResourcePatternFilter, ResourceType as Type)
    from kafka.errors import NoError

    client = kafka_python_admin(broker)
    try:
        created = ACL(principal=ALICE, host="*", operation=ACLOperation.READ,
                      permission_type=ACLPermissionType.ALLOW,
                      resource_pattern=Pattern(Type.TOPIC, "py-", ACLResourcePatternType.PREFIXED))
        result = client.create_acls([created])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        found, error = client.describe_acls(ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(Type.TOPIC, "py-topic", ACLResourcePatternType.MATCH)))
        assert error is NoError and [(a.principal, a.resource_pattern.resource_name) for a in found] == [(ALICE, "py-")]
        [(_, deleted, error)] = client.delete_acls([ACLFilter(
            principal=ALICE, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(Type.ANY, None, ACLResourcePatternType.ANY))])
        assert error is NoError and [a.resource_pattern.resource_name for a in deleted] == ["py-"]
    finally:
        client.close()
    assert describe(admin) == set()


@pytest.mark.parametrize("user", [None, "alice"], ids=["ANONYMOUS", "alice"])
def test_acl_apis_need_the_cluster(broker, admin, user):
    """DescribeAcls needs DESCRIBE on the cluster, CreateAcls and DeleteAcls ALTER."""
    from kafka.errors import ClusterAuthorizationFailedError

    principal = f"User:{user}" if user else ANONYMOUS
    create(admin, [acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW)])
    client = kafka_python_admin(broker, user)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            client.describe_acls(_python_any_filter())
        create(admin, [acl(CLUSTER, "kafka-cluster", LITERAL, principal, "*", D, ALLOW)])
        found, _ = client.describe_acls(_python_any_filter())
        assert len(found) == 2
        assert client.create_acls([_python_acl(principal)])["failed"] == [ClusterAuthorizationFailedError]
        create(admin, [acl(CLUSTER, "kafka-cluster", LITERAL, principal, "*", Operation.ALTER, ALLOW)])
        assert client.create_acls([_python_acl(principal)])["failed"] == []
    finally:
        client.close()


def _python_any_filter():
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePatternFilter, ResourceType as Type)

    return ACLFilter(principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
                     resource_pattern=ResourcePatternFilter(Type.ANY, None, ACLResourcePatternType.ANY))


def _python_acl(principal):
    from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePattern as Pattern, ResourceType as Type)

    return ACL(principal=principal, host="*", operation=ACLOperation.WRITE, permission_type=ACLPermissionType.ALLOW,
               resource_pattern=Pattern(Type.TOPIC, "self-made", ACLResourcePatternType.LITERAL))


def _creation(resource_type=2, name="t", pattern_type=3, principal=ALICE, host="*", operation=3, permission=3):
    return CREATE_ACLS.request.AclCreation(resource_type=resource_type, resource_name=name,
                                           resource_pattern_type=pattern_type, principal=principal, host=host,
                                           operation=operation, permission_type=permission)


def _sasl_admin_socket(broker):
    """A raw connection authenticated as the super user (SASL PLAIN, v1 handshake)."""
    from wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

    sock = connect(broker.ports["SASL_PLAINTEXT"])
    assert roundtrip(sock, SASL_HANDSHAKE, 1, SASL_HANDSHAKE.request(mechanism="PLAIN"), 1).error_code == 0
    token = f"\0{ADMIN}\0{ADMIN_PASSWORD}".encode()
    assert roundtrip(sock, SASL_AUTHENTICATE, 2, SASL_AUTHENTICATE.request(auth_bytes=token), 2).error_code == 0
    return sock


def test_creation_errors_per_binding(broker, admin):
    """What clients check before sending, refused by the broker with Kafka's messages,
    each creation on its own: the good ones are created."""
    creations = [_creation(), _creation(resource_type=1), _creation(resource_type=99), _creation(pattern_type=2),
                 _creation(operation=1), _creation(permission=1), _creation(resource_type=4, name="mine"),
                 _creation(name=""), _creation(name="a/b"), _creation(principal="alice"),
                 _creation(name="u", pattern_type=4, principal="Group:ops", host="10.0.0.9", operation=2,
                           permission=2)]
    with _sasl_admin_socket(broker) as sock:
        for version in (1, 3):
            response = roundtrip(sock, CREATE_ACLS, version, CREATE_ACLS.request(creations=creations), 10 + version)
            assert [(r.error_code, r.error_message) for r in response.results] == [
                (0, None), (42, "Invalid resourceType ANY"), (42, "Invalid resourceType UNKNOWN"),
                (42, "Invalid patternType MATCH"), (42, "Invalid operation ANY"), (42, "Invalid permissionType ANY"),
                (42, "The only valid name for the CLUSTER resource is kafka-cluster"),
                (42, "Invalid empty resource name"), (42, "ACL binding contains invalid resource name: a/b"),
                (42, "expected a string in format principalType:principalName but got alice"), (0, None)]
    assert describe(admin) == {acl(TOPIC, "t", LITERAL, ALICE, "*", R, ALLOW),
                               acl(TOPIC, "u", PREFIXED, "Group:ops", "10.0.0.9", Operation.ALL, DENY)}


def test_unknown_filters_and_v0(broker, admin):
    """A filter with a code this side does not know is INVALID_REQUEST; v0 has no pattern
    type and sees LITERAL patterns only."""
    create(admin, SAMPLE)
    any_filter = dict(resource_type_filter=1, resource_name_filter=None, principal_filter=None, host_filter=None,
                      operation=1, permission_type=1)
    with _sasl_admin_socket(broker) as sock:
        bad = roundtrip(sock, DESCRIBE_ACLS, 1, DESCRIBE_ACLS.request(**{**any_filter, "operation": 77},
                                                                      pattern_type_filter=1), 20)
        assert (bad.error_code, bad.error_message, bad.resources) == (42, "Unknown entryFilter.", [])
        v0 = roundtrip(sock, DESCRIBE_ACLS, 0, DESCRIBE_ACLS.request(**any_filter), 21)
        assert v0.error_code == 0 and {r.pattern_type for r in v0.resources} == {3}
        assert sum(len(r.acls) for r in v0.resources) == sum(b.pattern.pattern_type == LITERAL for b in SAMPLE)
        deleted = roundtrip(sock, DELETE_ACLS, 2, DELETE_ACLS.request(filters=[
            DELETE_ACLS.request.DeleteAclsFilter(**{**any_filter, "resource_type_filter": 0}, pattern_type_filter=1),
            DELETE_ACLS.request.DeleteAclsFilter(**any_filter, pattern_type_filter=4)]), 22)
        assert [(r.error_code, r.error_message) for r in deleted.filter_results] == [(42, "Unknown patternFilter."),
                                                                                   (0, None)]
        assert {m.resource_name for m in deleted.filter_results[1].matching_acls} == {"ord", "tx-"}
        assert all(m.error_code == 0 for m in deleted.filter_results[1].matching_acls)
    assert describe(admin) == {b for b in SAMPLE if b.pattern.pattern_type == LITERAL}


def test_a_binding_deleted_once_under_its_first_filter(broker, admin):
    create(admin, SAMPLE[:2])
    [first, second] = admin.delete_acls([confluent_filter(principal=ALICE), confluent_filter()]).values()
    assert {from_confluent(b) for b in first.result(30)} == {SAMPLE[0]}
    assert {from_confluent(b) for b in second.result(30)} == {SAMPLE[1]}


def test_security_disabled_without_an_authorizer(tmp_path):
    """No authorizer.class.name: everything is allowed, and the ACL APIs answer
    SECURITY_DISABLED where Kafka puts the error."""
    with BrokerProcess(tmp_path / "data") as plain, connect(plain.port) as sock:
        response = roundtrip(sock, DESCRIBE_ACLS, 1, DESCRIBE_ACLS.request(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1), 1)
        assert (response.error_code, response.error_message) == (ErrorCode.SECURITY_DISABLED,
                                                                 "No Authorizer is configured on the broker")
        created = roundtrip(sock, CREATE_ACLS, 1, CREATE_ACLS.request(creations=[_creation(), _creation()]), 2)
        assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED] * 2
        deleted = roundtrip(sock, DELETE_ACLS, 1, DELETE_ACLS.request(filters=[DELETE_ACLS.request.DeleteAclsFilter(
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1, principal_filter=None,
            host_filter=None, operation=1, permission_type=1)]), 3)
        assert [r.error_code for r in deleted.filter_results] == [ErrorCode.SECURITY_DISABLED]
        body = CREATE_TOPICS.request(topics=[CREATE_TOPICS.request.CreatableTopic(
            name="free", num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=10_000)
        assert roundtrip(sock, CREATE_TOPICS, 5, body, 4).topics[0].error_code == 0
        assert _fetch(sock, "free") == ErrorCode.NONE


def test_kafka_acl_command(broker, admin, tmp_path):
    """Apache Kafka's own kafka-acls (org.apache.kafka.tools.AclCommand, Java AdminClient)
    over SASL PLAIN: add, list with a MATCH filter, remove."""
    import subprocess

    from sluice import maven

    classpath = os.pathsep.join(str(p) for p in maven.classpath(["org.apache.kafka:kafka-tools:"
                                                                 + maven.KAFKA_VERSION]))
    config = tmp_path / "admin.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
                      "org.apache.kafka.common.security.plain.PlainLoginModule required "
                      f'username="{ADMIN}" password="{ADMIN_PASSWORD}";\n')

    def kafka_acls(*args: str) -> str:
        done = subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.AclCommand", "--bootstrap-server",
                               broker.bootstrap("SASL_PLAINTEXT"), "--command-config", str(config), *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    kafka_acls("--add", "--allow-principal", ALICE, "--operation", "Read", "--operation", "Write", "--topic", "orders")
    kafka_acls("--add", "--deny-principal", BOB, "--operation", "All", "--topic", "pay-",
               "--resource-pattern-type", "prefixed")
    assert describe(admin) == {acl(TOPIC, "orders", LITERAL, ALICE, "*", R, ALLOW),
                               acl(TOPIC, "orders", LITERAL, ALICE, "*", W, ALLOW),
                               acl(TOPIC, "pay-", PREFIXED, BOB, "*", Operation.ALL, DENY)}
    listed = kafka_acls("--list", "--topic", "pay-now", "--resource-pattern-type", "match")
    assert "name=pay-, patternType=PREFIXED" in listed and "(principal=User:bob, host=*, operation=ALL, " \
        "permissionType=DENY)" in listed and "orders" not in listed
    kafka_acls("--remove", "--force", "--topic", "orders")
    assert describe(admin) == {acl(TOPIC, "pay-", PREFIXED, BOB, "*", Operation.ALL, DENY)}


# -- persistence ------------------------------------------------------------------------------

def test_acls_survive_a_restart(tmp_path):
    process = start_broker(tmp_path)
    try:
        admin = admin_client(process)
        create(admin, SAMPLE)
        create_topic(admin, "kept")
        create(admin, [acl(TOPIC, "kept", LITERAL, ANONYMOUS, "*", R, ALLOW)])
        delete(admin, principal=BOB)
        with open(tmp_path / "data" / "acls.json") as f:
            stored = json.load(f)
        assert stored["version"] == 1
        orders = next(p for p in stored["acls"] if p["name"] == "orders")
        assert orders == {"resourceType": "Topic", "patternType": "LITERAL", "name": "orders", "acls": [
            {"principal": ALICE, "permissionType": "Allow", "operation": "Read", "host": "*"}]}
        process.restart()
        admin = admin_client(process)
        expected = {b for b in SAMPLE if b.entry.principal != BOB} | {acl(TOPIC, "kept", LITERAL, ANONYMOUS, "*", R,
                                                                          ALLOW)}
        assert describe(admin) == expected
        with connect(process.port) as sock:
            assert _fetch(sock, "kept") == ErrorCode.NONE
            assert _fetch(sock, "elsewhere") == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            # User:* may DESCRIBE every topic: the unknown one is told to be unknown
            assert _metadata(sock, "elsewhere") == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        process.stop()


def test_an_unreadable_acl_file_stops_the_start(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "acls.json").write_text('{"version": 1, "acls": [{"resourceType": "Topic"}]}')
    with pytest.raises(RuntimeError, match="acls.json is invalid"):
        start_broker(tmp_path)

