"""ACLs with Apache Kafka's authorizer semantics (AclAuthorizer, StandardAuthorizer), and
the checks request handlers make with them.

Model: an ACL binding is a resource pattern (resource type, name, LITERAL or PREFIXED)
and an entry (principal "Type:name", host, operation, ALLOW or DENY); the enums are
wire.acl_types'. A LITERAL name "*" is every resource of its type; "User:*" every
principal; host "*" every host (hosts are IP addresses as the broker sees them).

`Authorizer.authorize(principal, host, operation, resource type, name)`:
- `super.users` (principals separated by semicolons) may do anything;
- the ACLs that apply to a resource are those of its LITERAL name, of the LITERAL "*" and
  of every PREFIXED pattern its name starts with; with none at all,
  `allow.everyone.if.no.acl.found` (default false) decides;
- a DENY naming the principal or User:*, the host or *, the operation or ALL refuses,
  whatever allows;
- otherwise an ALLOW matching likewise allows, where DESCRIBE is also allowed by READ,
  WRITE, DELETE or ALTER, and DESCRIBE_CONFIGS by ALTER_CONFIGS; else refused.
`authorize_by_resource_type` (InitProducerId without a transactional id: may the
principal WRITE to any topic?) follows AclAuthorizer's: a literal "*" DENY refuses; then
`allow.everyone.if.no.acl.found` allows; then an ALLOW allows unless the DENYs cover it
(a LITERAL allow by a DENY of the same name or a PREFIXED DENY of a prefix of it, a
PREFIXED allow by a PREFIXED DENY of a prefix of it).

Decisions are cached per (principal, host, operation, resource) and the ACLs that apply
per resource, both dropped at every ACL change: a produce or fetch costs one dictionary
lookup per topic.

Filters (DescribeAcls, DeleteAcls) match as Kafka's AclBindingFilter: ANY and a null
name, principal or host match anything; pattern type ANY matches LITERAL and PREFIXED
patterns of exactly the name; MATCH matches the LITERAL name, the LITERAL "*" and every
PREFIXED pattern the name starts with; LITERAL and PREFIXED match exactly.

New bindings are checked as Kafka checks them, INVALID_REQUEST with Kafka's messages: no
UNKNOWN or ANY resource type, operation or permission; pattern type LITERAL or PREFIXED;
a non-empty name, "kafka-cluster" for the cluster, without "/" (AclAuthorizer's rule:
names become ZooKeeper paths); a principal "Type:name".
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

from wire.acl_types import CLUSTER_RESOURCE_NAME, WILDCARD, Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode

from broker.errors import BrokerError

WILDCARD_PRINCIPAL = "User:*"
_CACHE_LIMIT = 100_000  # cached decisions (and resources); beyond it the cache starts over

# An ALLOW for any of these operations allows the key's.
_IMPLIED_BY = {Operation.DESCRIBE: frozenset((Operation.DESCRIBE, Operation.READ, Operation.WRITE,
                                              Operation.DELETE, Operation.ALTER)),
               Operation.DESCRIBE_CONFIGS: frozenset((Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS))}

# Kafka's AclEntry.supportedOperations: the bits of an "authorized operations" field.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
                         Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}

# The error a refusal answers, and Kafka's message for it.
DENIED = {
    ResourceType.TOPIC: (ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed."),
    ResourceType.GROUP: (ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed."),
    ResourceType.CLUSTER: (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."),
    ResourceType.TRANSACTIONAL_ID: (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                    "Transactional Id authorization failed."),
}


class ResourcePattern(NamedTuple):
    resource_type: ResourceType
    name: str
    pattern_type: PatternType


class AccessControlEntry(NamedTuple):
    principal: str
    host: str
    operation: Operation
    permission: Permission


class AclBinding(NamedTuple):
    pattern: ResourcePattern
    entry: AccessControlEntry


class AclBindingFilter(NamedTuple):
    """None for the name, principal or host: any."""

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: Operation
    permission: Permission

    @property
    def unknown(self) -> str | None:
        """What makes the filter unusable (a field this side cannot read), or None."""
        if self.resource_type == ResourceType.UNKNOWN or self.pattern_type == PatternType.UNKNOWN:
            return "Unknown patternFilter."
        if self.operation == Operation.UNKNOWN or self.permission == Permission.UNKNOWN:
            return "Unknown entryFilter."
        return None

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD
        return self.name.startswith(pattern.name)

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and self.operation in (Operation.ANY, entry.operation)
                and self.permission in (Permission.ANY, entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def patterns_named(self) -> tuple[ResourcePattern, ...]:
        """The patterns this filter names outright (Kafka's matchesAtMostOne): a concrete
        resource type, a name and a pattern type LITERAL, PREFIXED or ANY (both)."""
        if self.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN) or self.name is None:
            return ()
        if self.pattern_type == PatternType.ANY:
            return (ResourcePattern(self.resource_type, self.name, PatternType.LITERAL),
                    ResourcePattern(self.resource_type, self.name, PatternType.PREFIXED))
        if self.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            return (ResourcePattern(self.resource_type, self.name, self.pattern_type),)
        return ()


def is_principal(text: str) -> bool:
    """Kafka's SecurityUtils.parseKafkaPrincipal accepts it: "Type:name", a type before
    the first colon."""
    kind, sep, _ = text.partition(":")
    return bool(sep and kind)


def check_new_binding(binding: AclBinding) -> None:
    """BrokerError(INVALID_REQUEST) with Kafka's message for a binding CreateAcls refuses."""
    pattern, entry = binding

    def invalid(message: str):
        raise BrokerError(ErrorCode.INVALID_REQUEST, message)

    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        invalid(f"Invalid resourceType {pattern.resource_type.name}")
    if pattern.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        invalid(f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation in (Operation.UNKNOWN, Operation.ANY):
        invalid(f"Invalid operation {entry.operation.name}")
    if entry.permission not in (Permission.ALLOW, Permission.DENY):
        invalid(f"Invalid permissionType {entry.permission.name}")
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_RESOURCE_NAME:
        invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}")
    if not pattern.name:
        invalid("Invalid empty resource name")
    if "/" in pattern.name:
        invalid(f"ACL binding contains invalid resource name: {pattern.name}")
    if not is_principal(entry.principal):
        invalid(f"expected a string in format principalType:principalName but got {entry.principal}")


class Authorizer:
    """The ACLs in force on this broker (as the store last loaded them) and the decisions
    made with them. Changed only through `set_acls`, on the event loop."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._acls: dict[ResourcePattern, frozenset[AccessControlEntry]] = {}
        # By resource type and pattern type: name -> entries; and the lengths of the
        # prefixes in use per resource type, shortest first.
        self._by_name: dict[tuple[ResourceType, PatternType], dict[str, frozenset[AccessControlEntry]]] = {}
        self._prefix_lengths: dict[ResourceType, tuple[int, ...]] = {}
        self._applicable: dict[tuple[ResourceType, str], tuple[AccessControlEntry, ...]] = {}
        self._decisions: dict[tuple, bool] = {}

    @classmethod
    def from_config(cls, config) -> "Authorizer | None":
        """None unless `authorizer.class.name` is set: then every request is allowed."""
        if not config.authorizer_class_name:
            return None
        return cls(config.super_users, config.allow_everyone_if_no_acl_found)

    # -- the ACLs ------------------------------------------------------------------------
    def set_acls(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """The pattern's ACLs are now `entries` (none: the pattern is gone)."""
        entries = frozenset(entries)
        if entries == self._acls.get(pattern, frozenset()):
            return
        index = self._by_name.setdefault((pattern.resource_type, pattern.pattern_type), {})
        if entries:
            self._acls[pattern] = index[pattern.name] = entries
        else:
            self._acls.pop(pattern, None)
            index.pop(pattern.name, None)
        if pattern.pattern_type == PatternType.PREFIXED:
            self._prefix_lengths[pattern.resource_type] = tuple(sorted({len(name) for name in index}))
        self._applicable.clear()
        self._decisions.clear()

    def acls_of(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        return self._acls.get(pattern, frozenset())

    def patterns(self) -> list[ResourcePattern]:
        return list(self._acls)

    def bindings(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Every binding the filter matches, by resource type, pattern type and name."""
        return [AclBinding(pattern, entry)
                for pattern in sorted(self._acls) if acl_filter.matches_pattern(pattern)
                for entry in sorted(self._acls[pattern]) if acl_filter.matches_entry(entry)]

    # -- decisions -------------------------------------------------------------------------
    def authorize(self, principal: str, host: str, operation: Operation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            self._remember(self._decisions, key, decision)
        return decision

    def _decide(self, principal, host, operation, resource_type, name) -> bool:
        if principal in self.super_users:
            return True
        entries = self._applicable_entries(resource_type, name)
        if not entries:
            return self.allow_everyone_if_no_acl_found
        principals, hosts = (principal, WILDCARD_PRINCIPAL), (host, WILDCARD)
        allowing = _IMPLIED_BY.get(operation, (operation,))
        allowed = False
        for entry in entries:
            if entry.principal not in principals or entry.host not in hosts:
                continue
            if entry.permission == Permission.DENY:
                if entry.operation == operation or entry.operation == Operation.ALL:
                    return False
            elif entry.operation == Operation.ALL or entry.operation in allowing:
                allowed = True
        return allowed

    def _applicable_entries(self, resource_type: ResourceType, name: str) -> tuple[AccessControlEntry, ...]:
        key = (resource_type, name)
        found = self._applicable.get(key)
        if found is None:
            literal = self._by_name.get((resource_type, PatternType.LITERAL), {})
            collected = list(literal.get(name, ()))
            if name != WILDCARD:
                collected.extend(literal.get(WILDCARD, ()))
            prefixed = self._by_name.get((resource_type, PatternType.PREFIXED))
            if prefixed:
                for length in self._prefix_lengths[resource_type]:
                    if length > len(name):
                        break
                    collected.extend(prefixed.get(name[:length], ()))
            found = tuple(collected)
            self._remember(self._applicable, key, found)
        return found

    def authorize_by_resource_type(self, principal: str, host: str, operation: Operation,
                                   resource_type: ResourceType) -> bool:
        key = (principal, host, operation, resource_type, None)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide_by_resource_type(principal, host, operation, resource_type)
            self._remember(self._decisions, key, decision)
        return decision

    def _decide_by_resource_type(self, principal, host, operation, resource_type) -> bool:
        if principal in self.super_users:
            return True
        principals, hosts, operations = (principal, WILDCARD_PRINCIPAL), (host, WILDCARD), (operation, Operation.ALL)

        def names(pattern_type: PatternType, permission: Permission) -> set[str]:
            return {name for name, entries in self._by_name.get((resource_type, pattern_type), {}).items()
                    if any(e.permission == permission and e.principal in principals and e.host in hosts
                           and e.operation in operations for e in entries)}

        deny_literals = names(PatternType.LITERAL, Permission.DENY)
        if WILDCARD in deny_literals:
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(PatternType.PREFIXED, Permission.DENY)

        def denied_by_prefix(name: str) -> bool:
            return any(name[:length] in deny_prefixes for length in range(1, len(name) + 1))

        return (any(not denied_by_prefix(prefix) for prefix in names(PatternType.PREFIXED, Permission.ALLOW))
                or any(name == WILDCARD or (name not in deny_literals and not denied_by_prefix(name))
                       for name in names(PatternType.LITERAL, Permission.ALLOW)))

    @staticmethod
    def _remember(cache: dict, key, value) -> None:
        if len(cache) >= _CACHE_LIMIT:
            cache.clear()
        cache[key] = value


# -- the checks request handlers make ---------------------------------------------------------

def permitted(broker, session, operation: Operation, resource_type: ResourceType,
              name: str = CLUSTER_RESOURCE_NAME) -> bool:
    """Whether the connection's principal may; always, without an authorizer."""
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(str(session.principal), session.client_host, operation,
                                                      resource_type, name)


def require(broker, session, operation: Operation, resource_type: ResourceType,
            name: str = CLUSTER_RESOURCE_NAME) -> None:
    """BrokerError with the resource type's authorization error unless permitted."""
    if not permitted(broker, session, operation, resource_type, name):
        raise BrokerError(*DENIED[resource_type])


def refused(broker, session, operation: Operation, resource_type: ResourceType, names: Iterable[str]) -> frozenset:
    """The names (one check each) the principal may not; none without an authorizer."""
    authorizer = broker.authorizer
    if authorizer is None:
        return frozenset()
    principal, host = str(session.principal), session.client_host
    return frozenset(name for name in set(names)
                     if not authorizer.authorize(principal, host, operation, resource_type, name))


def permitted_on_some(broker, session, operation: Operation, resource_type: ResourceType) -> bool:
    """Whether the principal may `operation` on some resource of the type (Kafka's
    authorizeByResourceType); always, without an authorizer."""
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize_by_resource_type(str(session.principal), session.client_host,
                                                                       operation, resource_type)


def authorized_operations(broker, session, resource_type: ResourceType, name: str) -> int:
    """Kafka's "authorized operations" bit field: bit n for operation code n, over the
    operations the resource type supports (all of them without an authorizer)."""
    bits = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if permitted(broker, session, operation, resource_type, name):
            bits |= 1 << operation
    return bits
