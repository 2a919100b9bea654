"""`sluice configs`: describe and change topic and broker configs, as kafka-configs.sh.

    sluice configs --bootstrap-server H:P --entity-type topics --entity-name NAME --describe [--all]
    sluice configs --bootstrap-server H:P --entity-type brokers (--entity-name ID | --entity-default)
                   --alter [--add-config K=V[,K=V...]] [--delete-config K[,K...]]

`--describe` shows the configs set on the entity (its overrides; with `--all` every
config and where its value comes from). `--alter` uses IncrementalAlterConfigs: added
keys are SET, deleted keys go back to their defaults, others stay. A list value is
written in brackets, as kafka-configs.sh has it: `cleanup.policy=[delete,compact]`.
"""

from __future__ import annotations

import argparse
import sys

from wire.client import (BROKER_RESOURCE, DEFAULT_CONFIG, DELETE_CONFIG, DYNAMIC_BROKER_CONFIG,
                         DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG, SET_CONFIG,
                         STATIC_BROKER_CONFIG, TOPIC_RESOURCE, UNKNOWN_CONFIG, AsyncClient)

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, format_table, run_command)

__all__ = ["main", "parser"]

_SOURCES = {UNKNOWN_CONFIG: "UNKNOWN", DYNAMIC_TOPIC_CONFIG: "DYNAMIC_TOPIC_CONFIG",
            DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
            DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG", DEFAULT_CONFIG: "DEFAULT_CONFIG"}
_OVERRIDES = {DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG}


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
                                description="Describe and change topic and broker configs.")
    add_connection_options(p, top=True)
    p.add_argument("--entity-type", choices=["topics", "brokers"], required=True)
    p.add_argument("--entity-name", help="the topic, or the broker's id")
    p.add_argument("--entity-default", action="store_true",
                   help="the cluster-wide default of brokers' configs")
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
    if args.entity_type == "topics" and (args.entity_default or not args.entity_name):
        p.error("topics need --entity-name (and have no --entity-default)")
    if args.entity_type == "brokers" and bool(args.entity_default) == bool(args.entity_name):
        p.error("brokers need either --entity-name or --entity-default")
    if args.alter and not (args.add_config or args.delete_config):
        p.error("--alter needs --add-config or --delete-config")
    if args.describe and (args.add_config or args.delete_config):
        p.error("--add-config and --delete-config go with --alter")
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
    described = (await client.describe_configs([asked]))[asked]
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
    error = (await client.incremental_alter_configs({resource: changes}))[resource]
    if error is not None:
        raise error
    if args.output == "json":
        emit_json({"entity_type": args.entity_type, "entity_name": resource[1],
                   "set": {key: value for key, op, value in changes if op == SET_CONFIG},
                   "deleted": [key for key, op, _ in changes if op == DELETE_CONFIG]})
    else:
        print(f"Completed updating config for {_entity(args)}.")
    return 0
