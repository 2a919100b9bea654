"""`sluice topics`: create, list, describe, delete and grow topics over the Kafka protocol.

    sluice topics --bootstrap-server H:P create NAME [--partitions N] [--replication-factor R]
                                                     [--config KEY=VALUE ...] [--if-not-exists]
    sluice topics --bootstrap-server H:P list [--exclude-internal]
    sluice topics --bootstrap-server H:P describe [NAME] [--exclude-internal]
                  [--under-replicated-partitions] [--under-min-isr-partitions]
                  [--at-min-isr-partitions] [--unavailable-partitions]
    sluice topics --bootstrap-server H:P delete NAME [NAME ...]
    sluice topics --bootstrap-server H:P alter NAME --partitions N

`describe` shows, per partition, leader, replicas, in-sync replicas, log start offset and
high watermark (ListOffsets), and per topic its id and config overrides (DescribeConfigs,
values whose source is the topic itself). A topic with partitions being reassigned gets
kafka-topics.sh's adding and removing replicas (ListPartitionReassignments) and the bytes
left to copy (`reassignments_in_progress`), and its replication factor is that of the
first partition's target, as kafka-topics.sh counts it. `--output json` prints one JSON
document. With kafka-topics.sh's filters (PARTITION_FILTERS) it lists only the partitions
any of them shows, one table (JSON: {"partitions": [...]}) without the topics' lines, as
Kafka does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from sluice_client import (DYNAMIC_TOPIC_CONFIG, EARLIEST, LATEST, TOPIC_RESOURCE,
                           UNKNOWN_CONFIG, AsyncClient, ClientError, NewTopic, TopicInfo, UnsupportedVersion)
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.primitives import ZERO_UUID

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, format_table, positive_int, run_command)

__all__ = ["main", "parser"]


def config_pair(text: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice topics",
                                description="Manage topics of a Kafka-compatible cluster.")
    add_connection_options(p, top=True)
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common, top=False)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=positive_int, default=-1,
                        help="number of partitions (default: the broker's num.partitions)")
    create.add_argument("--replication-factor", type=positive_int, default=-1,
                        help="replicas per partition (default: the broker's default)")
    create.add_argument("--config", type=config_pair, action="append", default=[],
                        metavar="KEY=VALUE", help="a topic config override (repeatable)")
    create.add_argument("--if-not-exists", action="store_true",
                        help="succeed when the topic exists already")

    listing = actions.add_parser("list", parents=[common], help="list topics")
    listing.add_argument("--exclude-internal", action="store_true", help="leave out internal topics")

    describe = actions.add_parser("describe", parents=[common],
                                  help="partitions, offsets and config overrides of topics")
    describe.add_argument("name", nargs="?", help="the topic (default: every topic)")
    describe.add_argument("--exclude-internal", action="store_true",
                          help="leave out internal topics")
    for option, what in PARTITION_FILTERS.items():
        describe.add_argument(option, action="store_true",
                              help=f"only the partitions {what} (with other such options: "
                                   "those any of them shows)")

    delete = actions.add_parser("delete", parents=[common], help="delete topics")
    delete.add_argument("names", nargs="+", metavar="NAME")

    alter = actions.add_parser("alter", parents=[common], help="add partitions to a topic")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=positive_int, required=True,
                       help="the new (larger) number of partitions")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    return run_command(args, ACTIONS[args.action])


# -- actions ----------------------------------------------------------------------------

async def create(client: AsyncClient, args) -> int:
    configs = dict(args.config)
    results = await client.admin.create_topics({args.name: NewTopic(
        args.partitions, args.replication_factor, configs)})
    result = results[args.name]
    existed = result.error is not None and result.error.code == ErrorCode.TOPIC_ALREADY_EXISTS
    if result.error is not None and not (existed and args.if_not_exists):
        raise result.error
    if args.output == "json":
        emit_json({"topic": args.name, "created": not existed,
                   "topic_id": None if existed or result.topic_id == ZERO_UUID else str(result.topic_id),
                   "partitions": None if existed or result.partitions < 0 else result.partitions,
                   "replication_factor": None if existed or result.replication_factor < 0
                   else result.replication_factor,
                   "configs": configs})
    elif existed:
        print(f"Topic {args.name} exists already.")
    else:
        print(f"Created topic {args.name}.")
    return 0


async def list_topics(client: AsyncClient, args) -> int:
    topics = await _all_topics(client, args.exclude_internal)
    rows = [{"name": t.name, "topic_id": _topic_id(t), "partitions": len(t.partitions),
             "replication_factor": _replication_factor(t, None), "internal": t.is_internal}
            for t in topics]
    if args.output == "json":
        emit_json({"topics": rows})
    elif rows:
        print(format_table(["TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "TOPIC-ID"],
                           [(r["name"], r["partitions"], r["replication_factor"], r["topic_id"])
                            for r in rows]))
    return 0


async def describe(client: AsyncClient, args) -> int:
    if args.name is not None:
        topics = [await existing_topic(client, args.name)]
    else:
        topics = await _all_topics(client, args.exclude_internal)
    if any(getattr(args, _dest(option)) for option in PARTITION_FILTERS):
        return await _describe_partitions(client, args, topics)
    configs = await _config_overrides(client, [t.name for t in topics])
    offsets = await asyncio.gather(*(_offsets(client, t) for t in topics))
    moving = await reassignments_in_progress(client, topics)
    described = []
    for topic, (starts, ends) in zip(topics, offsets):
        first = min(topic.partitions, default=None)
        described.append({
            "name": topic.name, "topic_id": _topic_id(topic), "internal": topic.is_internal,
            "partition_count": len(topic.partitions),
            "replication_factor": _replication_factor(topic, moving.get((topic.name, first))),
            "configs": configs.get(topic.name) if configs is not None else None,
            "partitions": [{
                "partition": p.partition, "leader": p.leader_id if p.leader_id >= 0 else None,
                "replicas": list(p.replicas), "isr": list(p.isr),
                "log_start_offset": starts.get(p.partition),
                "high_watermark": ends.get(p.partition),
                **moving.get((topic.name, p.partition), NOT_MOVING)}
                for p in sorted(topic.partitions.values(), key=lambda p: p.partition)]})
    if args.output == "json":
        emit_json({"topics": described})
        return 0
    blocks = []
    for t in described:
        if t["configs"] is None:
            shown = "(unavailable: the broker does not support DescribeConfigs)"
        else:
            shown = ",".join(f"{k}={v}" for k, v in t["configs"].items()) or "-"
        header = (f"Topic: {t['name']}  TopicId: {t['topic_id'] or '-'}  "
                  f"PartitionCount: {t['partition_count']}  "
                  f"ReplicationFactor: {t['replication_factor']}  Configs: {shown}")
        headers = ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "HIGH-WATERMARK"]
        columns = ["partition", "leader", "replicas", "isr", "log_start_offset", "high_watermark"]
        if any(p["adding_replicas"] or p["removing_replicas"] for p in t["partitions"]):
            headers += ["ADDING-REPLICAS", "REMOVING-REPLICAS", "BYTES-LEFT"]
            columns += list(NOT_MOVING)
        table = format_table(headers, [[p[c] for c in columns] for p in t["partitions"]])
        blocks.append(f"{header}\n{table}")
    if blocks:
        print("\n\n".join(blocks))
    return 0


# kafka-topics.sh's filters of --describe, as its TopicCommand applies them.
PARTITION_FILTERS = {
    "--under-replicated-partitions": "with fewer in-sync replicas than replicas (not counting "
                                     "those a reassignment adds)",
    "--under-min-isr-partitions": "with fewer in-sync replicas than the topic's "
                                  "min.insync.replicas, or no leader",
    "--at-min-isr-partitions": "with as many in-sync replicas as the topic's min.insync.replicas",
    "--unavailable-partitions": "whose leader is none or not a live broker",
}


def _dest(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


async def _describe_partitions(client: AsyncClient, args, topics: list[TopicInfo]) -> int:
    """The partitions any of the filters given shows (Kafka's rules: TopicCommand's
    PartitionDescription), without the topics' lines, as kafka-topics.sh lists them."""
    names = [t.name for t in topics]
    live = set((await client.metadata([])).brokers)
    min_isr = {}
    if args.under_min_isr_partitions or args.at_min_isr_partitions:
        min_isr = await _min_insync_replicas(client, names)
    adding = {}
    if args.under_replicated_partitions:  # a partition being reassigned counts its original replicas
        ongoing = await _ongoing_reassignments(client, [(t.name, p) for t in topics for p in t.partitions])
        adding = {tp: len(r.adding) for tp, r in ongoing.items()}
    shown = []
    for topic in topics:
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
            led = p.leader_id >= 0
            isr = len(p.isr)
            if ((args.under_replicated_partitions
                 and len(p.replicas) - adding.get((topic.name, p.partition), 0) > isr)
                    or (args.under_min_isr_partitions and (not led or isr < min_isr[topic.name]))
                    or (args.at_min_isr_partitions and isr == min_isr[topic.name])
                    or (args.unavailable_partitions and (not led or p.leader_id not in live))):
                shown.append({"topic": topic.name, "partition": p.partition,
                              "leader": p.leader_id if led else None,
                              "replicas": list(p.replicas), "isr": list(p.isr)})
    if args.output == "json":
        emit_json({"partitions": shown})
    elif shown:
        print(format_table(["TOPIC", "PARTITION", "LEADER", "REPLICAS", "ISR"],
                           [(p["topic"], p["partition"], p["leader"], p["replicas"], p["isr"])
                            for p in shown]))
    return 0


async def _min_insync_replicas(client: AsyncClient, names: list[str]) -> dict[str, int]:
    """Each topic's min.insync.replicas (its own or the broker's default), from DescribeConfigs."""
    if not names:
        return {}
    try:
        described = await client.admin.describe_configs([(TOPIC_RESOURCE, name) for name in names],
                                                  keys=["min.insync.replicas"])
    except UnsupportedVersion:
        raise CommandError("the broker does not support DescribeConfigs, which gives the "
                           "topics' min.insync.replicas") from None
    found = {}
    for (_, name), entries in described.items():
        entry = entries.get("min.insync.replicas")
        try:
            found[name] = int(entry.value)
        except (AttributeError, TypeError, ValueError):
            raise CommandError(f"topic {name!r}: DescribeConfigs gives no min.insync.replicas "
                               f"({entry.value if entry else 'none'!r})") from None
    return found


async def delete(client: AsyncClient, args) -> int:
    results = await client.admin.delete_topics(args.names)
    failed = [(name, error) for name, error in results.items() if error is not None]
    for name, error in failed:
        if error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            print(f"sluice: topic {name!r} does not exist", file=sys.stderr)
        else:
            print(f"sluice: {error}", file=sys.stderr)
    deleted = [name for name in args.names if results.get(name, KafkaError(-1)) is None]
    if args.output == "json":
        emit_json({"deleted": deleted,
                   "errors": {name: error.code.name if isinstance(error.code, ErrorCode)
                              else str(error.code) for name, error in failed}})
    else:
        for name in deleted:
            print(f"Deleted topic {name}.")
    return 1 if failed else 0


async def alter(client: AsyncClient, args) -> int:
    before = await existing_topic(client, args.name)
    error = (await client.admin.create_partitions({args.name: args.partitions}))[args.name]
    if error is not None:
        if error.code == ErrorCode.INVALID_PARTITIONS and args.partitions <= len(before.partitions):
            raise CommandError(f"topic {args.name!r} has {len(before.partitions)} partitions; "
                               f"partitions can only be added, so --partitions must be more "
                               f"than {len(before.partitions)}")
        raise error
    if args.output == "json":
        emit_json({"topic": args.name, "partitions_before": len(before.partitions),
                   "partitions": args.partitions})
    else:
        print(f"Topic {args.name}: {len(before.partitions)} -> {args.partitions} partitions.")
    return 0


ACTIONS = {"create": create, "list": list_topics, "describe": describe, "delete": delete,
           "alter": alter}


# -- helpers ----------------------------------------------------------------------------

async def _all_topics(client: AsyncClient, exclude_internal: bool) -> list[TopicInfo]:
    metadata = await client.metadata()
    return sorted((t for t in metadata.topics.values()
                   if not t.error_code and not (exclude_internal and t.is_internal)),
                  key=lambda t: t.name)


async def existing_topic(client: AsyncClient, name: str, missing: type[Exception] = CommandError) -> TopicInfo:
    """The topic's metadata; `missing` (CommandError for the CLI) when it does not exist."""
    info = (await client.metadata([name])).topics.get(name)
    if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        raise missing(f"topic {name!r} does not exist")
    if info.error_code:
        raise KafkaError(info.error_code, f"topic {name!r}")
    return info


async def _config_overrides(client: AsyncClient, names: list[str]) -> dict[str, dict] | None:
    """{topic: {key: value}} of the configs set on each topic; None when the broker does
    not speak DescribeConfigs."""
    if not names:
        return {}
    try:
        described = await client.admin.describe_configs([(TOPIC_RESOURCE, name) for name in names])
    except UnsupportedVersion:
        return None
    overrides = {}
    for (_, name), entries in described.items():
        overrides[name] = {key: entry.value for key, entry in sorted(entries.items())
                           if entry.source == DYNAMIC_TOPIC_CONFIG
                           # DescribeConfigs v0 only says whether a value is the default
                           or (entry.source == UNKNOWN_CONFIG and not entry.is_default)}
    return overrides


async def _offsets(client: AsyncClient, topic: TopicInfo) -> tuple[dict, dict]:
    """({partition: log start offset}, {partition: high watermark}) of partitions with a leader."""
    partitions = [p.partition for p in topic.partitions.values() if p.leader_id >= 0]
    if not partitions:
        return {}, {}
    starts, ends = await asyncio.gather(client.consumer.list_offsets(topic.name, partitions, EARLIEST),
                                        client.consumer.list_offsets(topic.name, partitions, LATEST))
    return ({p: o.offset for p, o in starts.items()}, {p: o.offset for p, o in ends.items()})


def _topic_id(topic: TopicInfo) -> str | None:
    return None if topic.topic_id == ZERO_UUID else str(topic.topic_id)


# What `reassignments_in_progress` says of a partition not being reassigned.
NOT_MOVING = {"adding_replicas": (), "removing_replicas": (), "bytes_left": None}


async def reassignments_in_progress(client: AsyncClient, topics: list[TopicInfo]) -> dict[tuple[str, int], dict]:
    """{(topic, partition): {"adding_replicas", "removing_replicas", "bytes_left"}} of
    the partitions of `topics` being reassigned, as kafka-topics.sh finds them
    (ListPartitionReassignments; none when the cluster does not serve it or refuses it,
    and none for a partition whose replicas in `topics` no longer show the move: it
    completed meanwhile). `bytes_left` is what the adding replicas still lack: the size of
    the leader's replica less each adding one's (0 for one not created yet), summed, from
    DescribeLogDirs; None when a broker concerned does not tell."""
    found = await _ongoing_reassignments(client, [(t.name, p) for t in topics for p in t.partitions])
    infos = {(t.name, p): info for t in topics for p, info in t.partitions.items()}
    moving = {tp: (infos[tp], ongoing) for tp, ongoing in found.items()
              if tp in infos and set(infos[tp].replicas) & {*ongoing.adding, *ongoing.removing}}
    brokers = sorted({b for info, ongoing in moving.values() for b in (info.leader_id, *ongoing.adding) if b >= 0})
    answers = await asyncio.gather(*(_replica_sizes(client, b, list(moving)) for b in brokers))
    sizes = dict(zip(brokers, answers))
    return {tp: {"adding_replicas": list(ongoing.adding), "removing_replicas": list(ongoing.removing),
                 "bytes_left": _bytes_left(tp, info.leader_id, ongoing.adding, sizes)}
            for tp, (info, ongoing) in sorted(moving.items())}


async def _ongoing_reassignments(client: AsyncClient, wanted: list[tuple[str, int]]) -> dict:
    """ListPartitionReassignments of `wanted`; none when the cluster does not serve it or
    refuses it to this principal, as kafka-topics.sh takes it."""
    if not wanted:
        return {}
    try:
        return await client.admin.list_partition_reassignments(wanted)
    except UnsupportedVersion:
        return {}
    except KafkaError as exc:
        if exc.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
            return {}
        raise


async def _replica_sizes(client: AsyncClient, broker_id: int, partitions) -> dict[tuple[str, int], int] | None:
    """The sizes of the replicas of `partitions` the broker holds; None when it does not tell."""
    try:
        return await client.admin.describe_log_dirs(broker_id, partitions)
    except (ClientError, KafkaError):
        return None


def _bytes_left(tp: tuple[str, int], leader: int, adding, sizes: dict) -> int | None:
    held = sizes.get(leader)
    if held is None or tp not in held:
        return None
    left = 0
    for replica in adding:
        copied = sizes.get(replica)
        if copied is None:
            return None
        left += max(held[tp] - copied.get(tp, 0), 0)
    return left


def _replication_factor(topic: TopicInfo, moving: dict | None) -> int | None:
    """The first partition's replicas, those being added left out, as kafka-topics.sh counts."""
    if not topic.partitions:
        return None
    replicas = len(topic.partitions[min(topic.partitions)].replicas)
    return replicas - len(moving["adding_replicas"]) if moving else replicas
