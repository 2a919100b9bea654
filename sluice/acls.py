"""`sluice acls`: add, list and remove ACLs over the Kafka protocol (DescribeAcls,
CreateAcls, DeleteAcls), with the options of Kafka's kafka-acls.sh.

    sluice acls --bootstrap-server H:P --add --allow-principal User:alice --operation Read --topic events
    sluice acls --bootstrap-server H:P --list [--topic T] [--principal User:alice]
    sluice acls --bootstrap-server H:P --remove --topic events [--allow-principal User:alice] [--force]
    sluice acls --bootstrap-server H:P add|list|remove ...     (the same, as a subcommand)

Resources: `--topic`, `--group`, `--transactional-id` (each repeatable) and `--cluster`,
with `--resource-pattern-type` literal (default) or prefixed; `list` and `remove` also take
any (every pattern type, the name exactly) and match (every ACL that applies to the name:
literal, wildcard "*" and prefixes); the cluster's one name is always literal. ACLs: each
of `--allow-principal`/`--deny-principal` ("Type:name") from each of `--allow-host`/
`--deny-host` (default "*") gets each `--operation` (default All). `--producer` stands
for Write, Describe and Create on the topics (Write and Describe on transactional ids;
IdempotentWrite on the cluster with `--idempotent`); `--consumer` for Read and Describe on
the topics and Read on the `--group`s. As kafka-acls.sh checks, an operation must be one
the resource type has.

`--remove` removes the ACLs matching what is given: a left-out principal, host or
operation matches any. It asks for confirmation on a terminal, and refuses without
`--force` when stdin is not one. `list` with no resource lists every ACL; `--principal`
and `--operation` narrow it. `--output json` prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass

from wire.acl_types import (CLUSTER_RESOURCE_NAME, WILDCARD, Operation, PatternType, Permission,
                            ResourceType)
from sluice_client import AsyncClient
from sluice_client.model import AclBinding, AclBindingFilter
from wire.errors import KafkaError

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, fail, format_table, run_command)

__all__ = ["main", "parser"]

ACTIONS = ("add", "list", "remove")
PATTERN_TYPES = {"literal": PatternType.LITERAL, "prefixed": PatternType.PREFIXED,
                 "any": PatternType.ANY, "match": PatternType.MATCH}
# Kafka's AclEntry.supportedOperations, and All on every resource type.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE,
                         Operation.DELETE, Operation.ALTER, Operation.DESCRIBE_CONFIGS,
                         Operation.ALTER_CONFIGS),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE,
                         Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS,
                           Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE, Operation.ALTER,
                           Operation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
}
PRODUCER_TOPIC = (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)
PRODUCER_TRANSACTIONAL_ID = (Operation.WRITE, Operation.DESCRIBE)
CONSUMER_TOPIC = (Operation.READ, Operation.DESCRIBE)
CONSUMER_GROUP = (Operation.READ,)
ANY = "(any)"


def operation(text: str) -> Operation:
    try:
        value = Operation.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value in (Operation.UNKNOWN, Operation.ANY):
        raise argparse.ArgumentTypeError(f"{text!r} is not an operation an ACL can name")
    return value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sluice acls", description="Manage the ACLs of a Kafka-compatible cluster "
        "(the options of Kafka's kafka-acls.sh).")
    add_connection_options(p, top=True)
    p.add_argument("action", nargs="?", choices=ACTIONS, metavar="add|list|remove",
                   help="what to do (or --add, --list, --remove)")
    for name in ACTIONS:
        p.add_argument(f"--{name}", dest="flags", action="append_const", const=name,
                       help=f"{name} ACLs")
    resources = p.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], metavar="TOPIC",
                           help="a topic ('*': every topic; repeatable)")
    resources.add_argument("--group", action="append", default=[], metavar="GROUP",
                           help="a consumer group ('*': every group; repeatable)")
    resources.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                           help="a transactional id ('*': every one; repeatable)")
    resources.add_argument("--cluster", action="store_true", help="the cluster")
    resources.add_argument("--resource-pattern-type", choices=PATTERN_TYPES, metavar="TYPE",
                           help="literal (default) or prefixed; to list or remove also any or "
                                "match (every ACL that applies to the names given)")
    acls = p.add_argument_group("ACLs")
    acls.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="a principal to allow, e.g. User:alice or User:* (repeatable)")
    acls.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME",
                      help="a principal to deny (deny wins over allow; repeatable)")
    acls.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                      help="a host the allowed principals connect from (default *; repeatable)")
    acls.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                      help="a host the denied principals connect from (default *; repeatable)")
    acls.add_argument("--operation", action="append", default=[], type=operation, metavar="OP",
                      help="an operation: " + ", ".join(o.kafka_name for o in Operation if o > 1)
                      + " (default All; repeatable)")
    acls.add_argument("--producer", action="store_true",
                      help="Write, Describe and Create on the topics (and the transactional ids)")
    acls.add_argument("--idempotent", action="store_true",
                      help="with --producer: IdempotentWrite on the cluster too")
    acls.add_argument("--consumer", action="store_true",
                      help="Read and Describe on the topics, Read on the groups (needs --group)")
    p.add_argument("--principal", action="append", default=[], metavar="TYPE:NAME",
                   help="list only the ACLs of this principal (repeatable)")
    p.add_argument("--force", action="store_true", help="remove without asking")
    return p


@dataclass(frozen=True)
class Plan:
    """What the command line asks for: ACLs to add, or filters to list or remove by."""

    action: str
    bindings: tuple[AclBinding, ...] = ()
    filters: tuple[AclBindingFilter, ...] = ()


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    plan = make_plan(p, args)
    if plan.action == "remove" and not args.force:
        try:
            confirm_removal(plan.filters)
        except CommandError as exc:
            return fail(str(exc))
    return run_command(args, lambda client, args: ACTION_RUNNERS[plan.action](client, args, plan))


# -- the command line as ACLs and filters --------------------------------------------------

def make_plan(p: argparse.ArgumentParser, args) -> Plan:
    """kafka-acls.sh's checks and expansions (AclCommand); usage errors exit through `p`."""
    actions = set(args.flags or ()) | ({args.action} if args.action else set())
    if len(actions) != 1:
        p.error("give exactly one action: add, list or remove (or --add, --list, --remove)")
    action = actions.pop()
    role = args.producer or args.consumer
    if action == "list" and (role or args.allow_principal or args.deny_principal
                             or args.allow_host or args.deny_host):
        p.error("list takes no --producer, --consumer, --allow-principal, --deny-principal, "
                "--allow-host or --deny-host (to list a principal's ACLs: --principal)")
    if role and (args.operation or args.deny_principal or args.deny_host):
        p.error("--producer and --consumer take no --operation, --deny-principal or --deny-host")
    if args.principal and action != "list":
        p.error("--principal is only for list (ACLs to add or remove name theirs with "
                "--allow-principal or --deny-principal)")
    if args.producer and not args.topic:
        p.error("with --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        p.error("--idempotent is only for --producer")
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        p.error("with --consumer you must specify a --topic and a --group and no --cluster "
                "or --transactional-id")
    for principal in [*args.allow_principal, *args.deny_principal, *args.principal]:
        check_principal(p, principal)

    pattern = PATTERN_TYPES[args.resource_pattern_type or "literal"]
    if action == "add" and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        p.error(f"--resource-pattern-type {args.resource_pattern_type} is not valid when adding "
                f"ACLs: literal or prefixed")
    resources = resource_patterns(args, pattern)
    if action == "list":
        if not resources:  # every ACL, of every pattern type unless one was asked for
            resources = [(ResourceType.ANY, None, PATTERN_TYPES[args.resource_pattern_type or "any"])]
        return Plan(action, filters=tuple(
            AclBindingFilter(kind, name, pattern_type, principal, operation=op)
            for kind, name, pattern_type in resources
            for principal in args.principal or [None]
            for op in args.operation or [Operation.ANY]))
    if not resources:
        p.error("give at least one resource: --topic, --group, --transactional-id or --cluster")

    entries = resource_entries(args, resources, removing=action == "remove")
    for (kind, name, _), acls in entries.items():
        allowed = (*SUPPORTED_OPERATIONS[kind], Operation.ALL)
        if any(op not in (*allowed, Operation.ANY) for _, _, op, _ in acls):
            p.error(f"ResourceType {kind.kafka_name} only supports operations "
                    f"{', '.join(o.kafka_name for o in allowed)}")
    if action == "add":
        if not any(entries.values()):
            p.error("give --allow-principal or --deny-principal to add ACLs")
        return Plan(action, bindings=tuple(
            AclBinding(kind, name, pattern_type, principal, host, op, permission)
            for (kind, name, pattern_type), acls in entries.items()
            for principal, host, op, permission in acls))
    return Plan(action, filters=tuple(dict.fromkeys(
        AclBindingFilter(kind, name, pattern_type, principal, host, op, permission)
        for (kind, name, pattern_type), acls in entries.items()
        for principal, host, op, permission in acls)))


def check_principal(p: argparse.ArgumentParser, principal: str) -> None:
    """Kafka's principal form, "Type:name" (SecurityUtils.parseKafkaPrincipal)."""
    if ":" not in principal:
        p.error(f"expected a string in format principalType:principalName but got {principal}")


def resource_patterns(args, pattern: PatternType) -> list[tuple[ResourceType, str, PatternType]]:
    """The resources named, with `pattern`; the cluster's (one name) is always literal, but
    for the filters any and match."""
    resources = [(ResourceType.TOPIC, name.strip(), pattern) for name in args.topic]
    if args.cluster or args.idempotent:
        resources.append((ResourceType.CLUSTER, CLUSTER_RESOURCE_NAME,
                          pattern if pattern in (PatternType.ANY, PatternType.MATCH)
                          else PatternType.LITERAL))
    resources += [(ResourceType.GROUP, name.strip(), pattern) for name in args.group]
    resources += [(ResourceType.TRANSACTIONAL_ID, name, pattern) for name in args.transactional_id]
    return list(dict.fromkeys(resources))


# An ACL entry: (principal, host, operation, permission); in removals None and ANY match any.
Entry = tuple[str | None, str | None, Operation, Permission]


def resource_entries(args, resources, removing: bool) -> dict[tuple, list[Entry]]:
    """{resource pattern: ACL entries}, from the options or expanded from --producer and
    --consumer as kafka-acls.sh does. Adding, a left-out host is "*" and a left-out
    operation All; removing, each matches any, and so do left-out principals."""
    default_host = None if removing else WILDCARD

    def entries(operations) -> list[Entry]:
        if removing and not (args.allow_principal or args.deny_principal):
            return [(None, None, op, Permission.ANY) for op in operations]
        found = []
        for principals, hosts, permission in (
                (args.allow_principal, args.allow_host, Permission.ALLOW),
                (args.deny_principal, args.deny_host, Permission.DENY)):
            for principal in dict.fromkeys(x.strip() for x in principals):
                for host in dict.fromkeys([h.strip() for h in hosts] or [default_host]):
                    found += [(principal, host, op, permission) for op in operations]
        return found

    if not (args.producer or args.consumer):
        default = Operation.ANY if removing else Operation.ALL
        return {resource: entries(dict.fromkeys(args.operation or [default]))
                for resource in resources}
    by_resource: dict[tuple, list[Entry]] = {}
    for resource in resources:
        kind = resource[0]
        operations = []
        if args.producer:
            operations += {ResourceType.TOPIC: PRODUCER_TOPIC,
                           ResourceType.TRANSACTIONAL_ID: PRODUCER_TRANSACTIONAL_ID,
                           ResourceType.CLUSTER: (Operation.IDEMPOTENT_WRITE,) if args.idempotent
                           else ()}.get(kind, ())
        if args.consumer:
            operations += {ResourceType.TOPIC: CONSUMER_TOPIC,
                           ResourceType.GROUP: CONSUMER_GROUP}.get(kind, ())
        if operations:
            by_resource[resource] = entries(dict.fromkeys(operations))
    return by_resource


def confirm_removal(filters) -> None:
    """Ask on the terminal; without one, refuse (a script must say --force)."""
    if not sys.stdin.isatty():
        raise CommandError("not removing ACLs without confirmation: stdin is not a terminal "
                           "(add --force to remove them)")
    # The question goes to stderr: stdout carries the result (perhaps JSON).
    sys.stderr.write(f"Remove every ACL that matches:\n{filter_table(filters)}\n"
                     f"Are you sure? (y/n) ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if answer.strip().lower() not in ("y", "yes"):
        raise CommandError("nothing removed")


# -- actions -----------------------------------------------------------------------------

async def add(client: AsyncClient, args, plan: Plan) -> int:
    results = await client.admin.create_acls(plan.bindings)
    added = [b for b in plan.bindings if results[b] is None]
    failed = [(b, results[b]) for b in plan.bindings if results[b] is not None]
    report_errors("create ACLs", [error for _, error in failed], len(plan.bindings))
    if args.output == "json":
        emit_json({"added": [acl_json(b) for b in added],
                   "errors": [{"acl": acl_json(b), **error_json(e)} for b, e in failed]})
    elif added:
        print(f"Added {len(added)} ACL{'s' if len(added) != 1 else ''}:")
        print(acl_table(added))
    return 1 if failed else 0


async def list_acls(client: AsyncClient, args, plan: Plan) -> int:
    found = await asyncio.gather(*(client.admin.describe_acls(f) for f in plan.filters))
    bindings = sorted({b for bindings in found for b in bindings}, key=acl_order)
    if args.output == "json":
        emit_json({"acls": [acl_json(b) for b in bindings]})
    elif bindings:
        print(acl_table(bindings))
    return 0


async def remove(client: AsyncClient, args, plan: Plan) -> int:
    results = await client.admin.delete_acls(plan.filters)
    removed, errors = set(), []
    for result in results.values():
        if result.error is not None:
            errors.append(result.error)
        for match in result.matches:
            if match.error is None:
                removed.add(match.binding)
            else:
                errors.append(match.error)
    removed = sorted(removed, key=acl_order)
    report_errors("delete ACLs", errors, len(plan.filters))
    if args.output == "json":
        emit_json({"removed": [acl_json(b) for b in removed],
                   "errors": [error_json(e) for e in errors]})
    elif removed:
        print(f"Removed {len(removed)} ACL{'s' if len(removed) != 1 else ''}:")
        print(acl_table(removed))
    elif not errors:
        print("No ACL matched.")
    return 1 if errors else 0


ACTION_RUNNERS = {"add": add, "list": list_acls, "remove": remove}


# -- output ------------------------------------------------------------------------------

def report_errors(what: str, errors: list[KafkaError], requested: int) -> None:
    """One line per error; one line in all when every item failed alike (a broker without
    an authorizer, a principal without permission)."""
    alike = {(e.code, e.message) for e in errors}
    if len(errors) == requested and len(alike) == 1 and requested > 1:
        error = errors[0]
        code = getattr(error.code, "name", f"error {error.code}")
        print(f"sluice: {what}: {code}{': ' + error.message if error.message else ''}",
              file=sys.stderr)
        return
    for error in errors:
        print(f"sluice: {error}", file=sys.stderr)


def acl_order(binding: AclBinding) -> tuple:
    return (binding.resource_type, binding.resource_name, binding.pattern_type,
            binding.principal, binding.host, binding.operation, binding.permission)


ACL_HEADERS = ["RESOURCE-TYPE", "RESOURCE-NAME", "PATTERN-TYPE", "PRINCIPAL", "HOST",
               "OPERATION", "PERMISSION"]


def acl_table(bindings) -> str:
    return format_table(ACL_HEADERS, [
        (b.resource_type.kafka_name, b.resource_name, b.pattern_type.kafka_name, b.principal,
         b.host, b.operation.kafka_name, b.permission.kafka_name) for b in bindings])


def filter_table(filters) -> str:
    def named(value) -> str:
        if value is None or getattr(value, "name", None) == "ANY":
            return ANY
        return getattr(value, "kafka_name", value)

    return format_table(ACL_HEADERS, [
        (named(f.resource_type), named(f.resource_name), named(f.pattern_type),
         named(f.principal), named(f.host), named(f.operation), named(f.permission))
        for f in filters])


def acl_json(binding: AclBinding) -> dict:
    return {"resource_type": binding.resource_type.kafka_name,
            "resource_name": binding.resource_name,
            "pattern_type": binding.pattern_type.kafka_name, "principal": binding.principal,
            "host": binding.host, "operation": binding.operation.kafka_name,
            "permission": binding.permission.kafka_name}


def error_json(error: KafkaError) -> dict:
    return {"error": getattr(error.code, "name", str(error.code)), "message": str(error)}
