"""`sluice configs`: describe and change topic and broker configs and client quotas, as
kafka-configs.sh.

    sluice configs --bootstrap-server H:P --entity-type topics --entity-name NAME --describe [--all]
    sluice configs --bootstrap-server H:P --entity-type brokers (--entity-name ID | --entity-default)
                   --alter [--add-config K=V[,K=V...]] [--delete-config K[,K...]]
    sluice configs --bootstrap-server H:P --entity-type users|clients [--entity-name N | --entity-default]
                   [--entity-type clients [--entity-name N | --entity-default]] --describe | --alter ...

`--describe` shows the configs set on the entity (its overrides; with `--all` every
config and where its value comes from). `--alter` uses IncrementalAlterConfigs: added
keys are SET, deleted keys go back to their defaults, others stay. A list value is
written in brackets, as kafka-configs.sh has it: `cleanup.policy=[delete,compact]`.

Users and clients have client quotas (DescribeClientQuotas, AlterClientQuotas):
`--entity-type users --entity-name alice --entity-type clients --entity-default` is the
(user, client id) entity of alice and the default client; each `--entity-name` or
`--entity-default` names the entity type given in the same place. `--describe` without
a name lists every entity of the types given; `--alter` needs a name or the default for
each, and `--delete-config` only keys the entity has, as kafka-configs.sh checks. A
user's SCRAM credentials are `sluice users`'.
"""

from __future__ import annotations

import argparse
import sys

from sluice_client import (BROKER_RESOURCE, DEFAULT_CONFIG, DELETE_CONFIG, DYNAMIC_BROKER_CONFIG,
                           DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG, SET_CONFIG,
                           STATIC_BROKER_CONFIG, TOPIC_RESOURCE, UNKNOWN_CONFIG, AsyncClient)
from wire.quota_types import CLIENT_ID, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, USER

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, format_table, run_command)

__all__ = ["main", "parser"]

_SOURCES = {UNKNOWN_CONFIG: "UNKNOWN", DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
            DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
            DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG", DEFAULT_CONFIG: "DEFAULT_CONFIG"}
_OVERRIDES = {DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG}
_QUOTA_TYPES = {"users": USER, "clients": CLIENT_ID}  # --entity-type -> client quota entity type
_QUOTA_NAMES = {USER: "user-principal", CLIENT_ID: "client-id"}  # as kafka-configs.sh says them
_ANY = object()  # an entity type given without a name: --describe lists every one


def _split_outside_brackets(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def config_pairs(text: str) -> list[tuple[str, str]]:
    """`k=v,k=[a,b]` as [(k, v), (k, "a,b")]."""
    pairs = []
    for item in _split_outside_brackets(text):
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise argparse.ArgumentTypeError(f"{item!r} is not KEY=VALUE")
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        pairs.append((key.strip(), value))
    return pairs


def config_keys(text: str) -> list[str]:
    return [key.strip() for key in text.split(",") if key.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice configs",
                                description="Describe and change topic and broker configs and client quotas.")
    add_connection_options(p, top=True)
    p.add_argument("--entity-type", choices=["topics", "brokers", "users", "clients"], action="append",
                   required=True, help="users and clients may be given together: a (user, client id)")
    p.add_argument("--entity-name", dest="entity_names", action="append", default=[],
                   help="the topic, the broker's id, the user or the client id")
    p.add_argument("--entity-default", dest="entity_names", action="append_const", const=None,
                   help="the cluster-wide default of brokers' configs, or the default user or client")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the entity's configs")
    action.add_argument("--alter", action="store_true", help="change the entity's configs")
    p.add_argument("--all", action="store_true",
                   help="with --describe: every config, not only those set on the entity")
    p.add_argument("--add-config", type=config_pairs, action="append", default=[],
                   metavar="K=V[,K=V...]", help="configs to set (repeatable)")
    p.add_argument("--delete-config", type=config_keys, action="append", default=[],
                   metavar="K[,K...]", help="configs to put back to their defaults (repeatable)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    if args.alter and not (args.add_config or args.delete_config):
        p.error("--alter needs --add-config or --delete-config")
    if args.describe and (args.add_config or args.delete_config):
        p.error("--add-config and --delete-config go with --alter")
    types, names = args.entity_type, args.entity_names
    if set(types) & set(_QUOTA_TYPES):
        if sorted(types) not in (["users"], ["clients"], ["clients", "users"]):
            p.error("client quotas are of users, clients, or one user and one client (--entity-type twice)")
        if len(names) > len(types):
            p.error("more --entity-name/--entity-default than --entity-type")
        if args.alter and len(names) != len(types):
            p.error("--alter needs --entity-name or --entity-default with each --entity-type")
        if args.all:
            p.error("--all goes with topics and brokers")
        args.entity = [(_QUOTA_TYPES[t], names[i] if i < len(names) else _ANY) for i, t in enumerate(types)]
        return run_command(args, alter_quotas if args.alter else describe_quotas)
    if len(types) > 1 or len(names) > 1:
        p.error(f"{types[0]} take one --entity-type and one --entity-name or --entity-default")
    args.entity_type, args.entity_name = types[0], names[0] if names else None
    args.entity_default = bool(names) and names[0] is None
    if args.entity_type == "topics" and not args.entity_name:
        p.error("topics need --entity-name (and have no --entity-default)")
    if args.entity_type == "brokers" and not names:
        p.error("brokers need either --entity-name or --entity-default")
    return run_command(args, alter if args.alter else describe)


def _resource(args) -> tuple[int, str]:
    if args.entity_type == "topics":
        return TOPIC_RESOURCE, args.entity_name
    return BROKER_RESOURCE, "" if args.entity_default else args.entity_name


def _entity(args) -> str:
    return "the brokers' default" if args.entity_default else \
        f"{args.entity_type[:-1]} {args.entity_name}"


async def describe(client: AsyncClient, args) -> int:
    resource = _resource(args)
    # The cluster default is described through any broker: its entries say which are dynamic.
    asked = resource if resource[1] else (BROKER_RESOURCE, str(await _any_broker(client)))
    described = (await client.admin.describe_configs([asked]))[asked]
    wanted_sources = {DYNAMIC_DEFAULT_BROKER_CONFIG} if args.entity_default else _OVERRIDES
    rows = [{"name": key, "value": entry.value, "source": _SOURCES.get(entry.source, str(entry.source))}
            for key, entry in sorted(described.items())
            if args.all or entry.source in wanted_sources]
    if args.output == "json":
        emit_json({"entity_type": args.entity_type, "entity_name": resource[1], "configs": rows})
    elif args.all:
        print(format_table(["CONFIG", "VALUE", "SOURCE"],
                           [(r["name"], r["value"], r["source"]) for r in rows]))
    else:
        print(f"Dynamic configs for {_entity(args)} are:")
        for row in rows:
            print(f"  {row['name']}={row['value']}")
    return 0


async def _any_broker(client: AsyncClient) -> int:
    brokers = (await client.metadata([])).brokers
    if not brokers:
        raise CommandError("the cluster lists no brokers")
    return min(brokers)


async def alter(client: AsyncClient, args) -> int:
    resource = _resource(args)
    changes = [(key, SET_CONFIG, value) for pairs in args.add_config for key, value in pairs]
    changes += [(key, DELETE_CONFIG, None) for keys in args.delete_config for key in keys]
    error = (await client.admin.incremental_alter_configs({resource: changes}))[resource]
    if error is not None:
        raise error
    if args.output == "json":
        emit_json({"entity_type": args.entity_type, "entity_name": resource[1],
                   "set": {key: value for key, op, value in changes if op == SET_CONFIG},
                   "deleted": [key for key, op, _ in changes if op == DELETE_CONFIG]})
    else:
        print(f"Completed updating config for {_entity(args)}.")
    return 0


def _quota_entity_text(entity) -> str:
    """kafka-configs.sh's words for a client quota entity: "user-principal 'alice', the
    default client-id"."""
    names = dict(entity)
    return ", ".join(f"{_QUOTA_NAMES[t]} {names[t]!r}" if names[t] is not None else f"the default {_QUOTA_NAMES[t]}"
                     for t in (USER, CLIENT_ID) if t in names)


def _quota_number(value: float):
    return int(value) if float(value).is_integer() else value


async def describe_quotas(client: AsyncClient, args) -> int:
    components = [(t, MATCH_SPECIFIED, None) if name is _ANY else
                  (t, MATCH_DEFAULT, None) if name is None else (t, MATCH_EXACT, name) for t, name in args.entity]
    found = await client.admin.describe_client_quotas(components, strict=True)
    if args.output == "json":
        emit_json({"entities": [{"entity": dict(entity), "quotas": {k: _quota_number(v) for k, v in sorted(q.items())}}
                                for entity, q in sorted(found.items(), key=lambda item: str(item[0]))]})
        return 0
    for entity, quotas in sorted(found.items(), key=lambda item: str(item[0])):
        print(f"Quota configs for {_quota_entity_text(entity)} are "
              + ", ".join(f"{key}={value}" for key, value in sorted(quotas.items())))
    return 0


async def alter_quotas(client: AsyncClient, args) -> int:
    entity = tuple(sorted(args.entity))
    changes: dict[str, float | None] = {}
    for key, text in (pair for pairs in args.add_config for pair in pairs):
        try:
            changes[key] = float(text)
        except ValueError:
            raise CommandError(f"Cannot parse quota configuration value for {key}: {text}") from None
    deleted = [key for keys in args.delete_config for key in keys]
    if deleted:
        components = [(t, MATCH_DEFAULT, None) if name is None else (t, MATCH_EXACT, name) for t, name in entity]
        current = (await client.admin.describe_client_quotas(components, strict=True)).get(entity, {})
        missing = [key for key in deleted if key not in current]
        if missing:
            raise CommandError(f"Invalid config(s): {','.join(missing)}")
        changes.update(dict.fromkeys(deleted))
    error = (await client.admin.alter_client_quotas({entity: changes}))[entity]
    if error is not None:
        raise error
    if args.output == "json":
        emit_json({"entity": dict(entity), "set": {k: _quota_number(v) for k, v in changes.items() if v is not None},
                   "deleted": deleted})
    else:
        print(f"Completed updating config for {_quota_entity_text(entity)}.")
    return 0
