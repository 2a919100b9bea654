"""`sluice groups`: list, describe and delete consumer groups, and reset their offsets,
over the Kafka protocol (the semantics of Kafka's kafka-consumer-groups.sh).

    sluice groups --bootstrap-server H:P list [--state STATE ...]
    sluice groups --bootstrap-server H:P describe GROUP
    sluice groups --bootstrap-server H:P delete GROUP [GROUP ...]
    sluice groups --bootstrap-server H:P reset-offsets --group G
        (--topic T[:P,P...] ... | --all-topics)
        (--to-earliest | --to-latest | --to-offset N | --to-datetime ISO-8601
         | --by-duration PnDTnHnMnS | --shift-by ±N | --from-file CSV)
        (--dry-run | --execute)

`describe` shows the group's type (a consumer group of KIP-848's protocol, or a classic
one), state, protocol and members (with the partitions assigned to each, decoded from the
consumer protocol; for a consumer group, its epochs and each member's epoch, owned and
target partitions), then every partition of the topics the group has committed offsets
for or its members subscribe to: committed offset, log end offset and lag ("-" where
nothing is committed), and the total lag.

`reset-offsets` works only while the group has no active members (state Empty or
Dead). Scopes: `--topic` (all partitions, or those listed) or `--all-topics` (every
partition the group has committed an offset for, as with Kafka's tool). Targets: the log start or end; an offset; the
first offset whose timestamp is at or after an instant (`--to-datetime`, an ISO-8601
time, local time unless it names a zone; `--by-duration`, that long before now), the log
end when there is none; the committed offset shifted by N; or `topic,partition,offset`
lines of a CSV file (which name the partitions themselves; with `--topic`, they must
lie within it). Every new offset is clamped to [log start offset, log end offset].
`--dry-run` prints the plan; `--execute` also commits it (OffsetCommit outside any
generation, as Kafka allows for a group without members).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import datetime as dt
import re
import sys
import time
from dataclasses import dataclass

from sluice_client import (EARLIEST, LATEST, AsyncClient, ConsumerGroupDescription, GroupDescription,
                           UnsupportedVersion)
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.primitives import DecodeError

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, format_table, non_negative, run_command)

__all__ = ["INACTIVE_STATES", "ResetPlan", "ResetTarget", "assignment_text", "committed_offsets",
           "describe_group", "execute_reset", "main", "offsets_at", "parser", "parse_datetime",
           "parse_duration", "partitions_of", "plan_reset"]

CONSUMER_PROTOCOL = "consumer"
INACTIVE_STATES = ("Empty", "Dead")
DEAD = "Dead"


# -- arguments --------------------------------------------------------------------------

def topic_scope(text: str) -> tuple[str, tuple[int, ...] | None]:
    """"T" (every partition) or "T:0,1,2"."""
    topic, colon, partitions = text.rpartition(":") if ":" in text else (text, "", "")
    if not topic:
        raise argparse.ArgumentTypeError(f"{text!r}: the topic name is empty")
    if not colon:
        return topic, None
    try:
        numbers = tuple(sorted({int(p) for p in partitions.split(",") if p.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not TOPIC or TOPIC:PARTITION,PARTITION,...") from None
    if not numbers or min(numbers) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: partitions must be numbers >= 0")
    return topic, numbers


def shift(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer such as 10 or -10") from None


def parse_datetime(text: str) -> int:
    """Epoch milliseconds of an ISO-8601 date-time such as 2024-05-01T12:00:00,
    2024-05-01T12:00:00.250Z or 2024-05-01T14:00:00+02:00 (no zone: local time)."""
    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 date-time such as 2024-05-01T12:00:00 "
            f"or 2024-05-01T12:00:00.000+02:00") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()  # local time, as Kafka's tool reads it
    return int(moment.timestamp() * 1000)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> int:
    """Milliseconds of an ISO-8601 duration as Java's Duration.parse reads it:
    PnDTnHnMn.nS, e.g. P1D, PT1H30M, PT0.5S, -PT10M."""
    match = _DURATION.fullmatch(text.strip())
    if not match or (match.group(3) is not None and match.group(3).upper() == "T") or \
            not any(match.group(i) for i in (2, 4, 5, 6)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an ISO-8601 duration PnDTnHnMnS such as P1D, PT1H30M or PT10M")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    millis = (int(days or 0) * 86_400_000 + int(hours or 0) * 3_600_000
              + int(minutes or 0) * 60_000)
    if seconds:
        whole = int(seconds)
        frac = int((fraction or "").ljust(9, "0")[:9] or 0) // 1_000_000
        millis += whole * 1000 + (-frac if seconds.startswith("-") else frac)
    return -millis if sign == "-" else millis


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice groups",
                                description="Inspect and manage consumer groups.")
    add_connection_options(p, top=True)
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common, top=False)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[common], help="list groups")
    listing.add_argument("--state", action="append", metavar="STATE",
                         help="only groups in this state, e.g. Stable or Empty (repeatable)")

    describe = actions.add_parser("describe", parents=[common],
                                  help="members, committed offsets and lag of a group")
    describe.add_argument("group")

    delete = actions.add_parser("delete", parents=[common],
                                help="delete groups without active members, with their offsets")
    delete.add_argument("groups", nargs="+", metavar="GROUP")

    reset = actions.add_parser(
        "reset-offsets", parents=[common], help="move a group's committed offsets",
        description="Move the committed offsets of a group without active members.")
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", type=topic_scope, action="append", metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions (repeatable)")
    scope.add_argument("--all-topics", action="store_true",
                       help="every partition the group has committed an offset for")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_true", help="the log start offset")
    target.add_argument("--to-latest", action="store_true", help="the log end offset")
    target.add_argument("--to-offset", type=non_negative, metavar="N", help="offset N")
    target.add_argument("--to-datetime", type=parse_datetime, metavar="ISO-8601",
                        help="the first offset at or after this time, e.g. 2024-05-01T12:00:00")
    target.add_argument("--by-duration", type=parse_duration, metavar="PnDTnHnMnS",
                        help="the first offset at or after this long ago, e.g. PT1H")
    target.add_argument("--shift-by", type=shift, metavar="N",
                        help="the committed offset plus N (N may be negative)")
    target.add_argument("--from-file", metavar="CSV",
                        help="offsets from topic,partition,offset lines")
    mode = reset.add_mutually_exclusive_group(required=True)
    mode.add_argument("--dry-run", action="store_true", help="show the new offsets only")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    if args.action == "reset-offsets" and args.from_file is not None:
        try:
            args.file_offsets = read_offsets_file(args.from_file)
        except (OSError, ValueError) as exc:
            p.error(f"--from-file: {exc}")
    return run_command(args, ACTIONS[args.action])


def read_offsets_file(path: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of `topic,partition,offset` lines; blank lines and
    lines starting with # are skipped."""
    offsets: dict[tuple[str, int], int] = {}
    with open(path, newline="") as f:
        for number, row in enumerate(csv.reader(f), 1):
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if len(row) != 3:
                raise ValueError(f"{path}, line {number}: expected topic,partition,offset")
            topic, partition, offset = (v.strip() for v in row)
            try:
                key, value = (topic, int(partition)), int(offset)
            except ValueError:
                raise ValueError(f"{path}, line {number}: partition and offset must be "
                                 f"integers") from None
            if not topic or key[1] < 0 or value < 0:
                raise ValueError(f"{path}, line {number}: expected topic,partition,offset "
                                 f"with partition and offset >= 0")
            if key in offsets and offsets[key] != value:
                raise ValueError(f"{path}, line {number}: {topic}-{key[1]} appears twice")
            offsets[key] = value
    if not offsets:
        raise ValueError(f"{path} has no topic,partition,offset lines")
    return offsets


# -- actions ----------------------------------------------------------------------------

async def list_groups(client: AsyncClient, args) -> int:
    groups = await client.admin.list_groups(args.state)
    rows = [{"group": g.group_id, "protocol_type": g.protocol_type or None, "state": g.state or None,
             "coordinator": g.coordinator_id} for g in groups]
    if args.output == "json":
        emit_json({"groups": rows})
    elif rows:
        print(format_table(["GROUP", "STATE", "PROTOCOL-TYPE", "COORDINATOR"],
                           [(r["group"], r["state"], r["protocol_type"], r["coordinator"])
                            for r in rows]))
    return 0


async def describe(client: AsyncClient, args) -> int:
    document = await describe_group(client, args.group)
    if args.output == "json":
        emit_json(document)
        return 0
    group, members, offsets = document["group"], document["members"], document["offsets"]
    coordinator = document["coordinator"]
    consumer = document["type"] == "consumer"
    epochs = (f"GroupEpoch: {document['group_epoch']}  AssignmentEpoch: {document['assignment_epoch']}  "
              if consumer else "")
    print(f"Group: {group}  Type: {document['type']}  State: {document['state']}  "
          f"ProtocolType: {document['protocol_type'] or '-'}  "
          f"{'Assignor' if consumer else 'Protocol'}: {document['protocol'] or '-'}  {epochs}"
          f"Coordinator: {coordinator['id']} ({coordinator['host']}:{coordinator['port']})  "
          f"Members: {len(members)}")
    print()
    if members and consumer:  # as kafka-consumer-groups.sh --members --verbose shows them
        print(format_table(["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "EPOCH", "ASSIGNMENT",
                            "TARGET-ASSIGNMENT"], [
            (m["member_id"], m["group_instance_id"], m["client_id"], m["host"], m["member_epoch"],
             assignment_text(m["assignment"]) or None, assignment_text(m["target_assignment"]) or None)
            for m in members]))
    elif members:
        print(format_table(["MEMBER-ID", "GROUP-INSTANCE-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"], [
            (m["member_id"], m["group_instance_id"], m["client_id"], m["host"],
             "?" if m["assignment"] is None else assignment_text(m["assignment"]) or None)
            for m in members]))
    else:
        print("(no active members)")
    print()
    if offsets:
        print(format_table(
            ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "MEMBER-ID",
             "HOST", "CLIENT-ID"],
            [(o["topic"], o["partition"], o["current_offset"], o["log_end_offset"], o["lag"],
              o["member_id"], o["host"], o["client_id"]) for o in offsets]))
        without = sum(1 for o in offsets if o["current_offset"] is None)
        note = f" ({without} partition(s) without a committed offset)" if without else ""
        print(f"\nTotal lag: {document['total_lag']}{note}")
    else:
        print("(no committed offsets)")
    return 0


def assignment_text(assignment: list[dict]) -> str:
    """A member's assigned partitions as `topic:0,1 other:2` ("" when none)."""
    return " ".join(f"{a['topic']}:{','.join(map(str, a['partitions']))}" for a in assignment)


async def describe_group(client: AsyncClient, group: str) -> dict:
    """A group as `describe` shows it (its JSON document): its type ("consumer" for KIP-848's
    protocol, "classic"), state, protocol, coordinator, members with their assignments (and
    for a consumer group the epochs), and per partition the committed offset, log end
    offset, lag and owner. CommandError when the group does not exist."""
    consumer_group = await _describe_consumer_group(client, group)
    if consumer_group is not None:
        document = {"group": group, "type": "consumer", "state": consumer_group.state,
                    "protocol_type": CONSUMER_PROTOCOL, "protocol": consumer_group.assignor or None,
                    "group_epoch": consumer_group.group_epoch,
                    "assignment_epoch": consumer_group.assignment_epoch}
        coordinator = consumer_group.coordinator
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id, "host": m.client_host, "member_epoch": m.member_epoch,
                    "subscription": sorted(m.subscribed_topics), "subscribed_regex": m.subscribed_regex,
                    "assignment": _assignment_list(m.assignment),
                    "target_assignment": _assignment_list(m.target_assignment)}
                   for m in consumer_group.members]
        owned = [(m, m.assignment, m.subscribed_topics) for m in consumer_group.members]
    else:
        description = await _describe_group(client, group)
        document = {"group": group, "type": "classic", "state": description.state,
                    "protocol_type": description.protocol_type or None, "protocol": description.protocol or None}
        coordinator = description.coordinator
        members, owned = [], []
        consumer = description.protocol_type == CONSUMER_PROTOCOL
        for m in description.members:
            assignment, subscription = None, None
            if consumer:  # other protocols' bytes mean nothing here
                with contextlib.suppress(DecodeError):
                    assignment = m.consumer_assignment()
                with contextlib.suppress(DecodeError):
                    subscription = m.consumer_subscription()
            members.append({
                "member_id": m.member_id, "group_instance_id": m.group_instance_id,
                "client_id": m.client_id, "host": m.client_host,
                "subscription": None if subscription is None else sorted(subscription),
                "assignment": None if assignment is None else _assignment_list(assignment)})
            owned.append((m, assignment or {}, subscription or ()))
    committed = await committed_offsets(client, group)
    if document["state"] == DEAD and not committed:
        raise CommandError(f"group {group!r} does not exist")
    owners, wanted_topics = {}, set(t for t, _ in committed)
    for member, assignment, subscription in owned:
        for topic, partitions in assignment.items():
            wanted_topics.add(topic)
            for partition in partitions:
                owners[(topic, partition)] = member
        wanted_topics.update(subscription)

    partitions = await partitions_of(client, sorted(wanted_topics))
    keys = sorted({*committed, *((t, p) for t, ps in partitions.items() for p in ps)})
    ends = await offsets_at(client, keys, LATEST, partitions)
    offsets, total_lag = [], 0
    for topic, partition in keys:
        current, end = committed.get((topic, partition)), ends.get((topic, partition))
        lag = None if current is None or end is None else end - current
        total_lag += lag or 0
        owner = owners.get((topic, partition))
        offsets.append({"topic": topic, "partition": partition, "current_offset": current,
                        "log_end_offset": end, "lag": lag,
                        "member_id": owner.member_id if owner else None,
                        "host": owner.client_host if owner else None,
                        "client_id": owner.client_id if owner else None})
    return {**document, "coordinator": {"id": coordinator.node_id, "host": coordinator.host,
                                        "port": coordinator.port},
            "members": members, "offsets": offsets, "total_lag": total_lag}


def _assignment_list(assignment: dict[str, tuple[int, ...]]) -> list[dict]:
    return [{"topic": t, "partitions": list(ps)} for t, ps in sorted(assignment.items())]


async def delete(client: AsyncClient, args) -> int:
    results = await client.admin.delete_groups(args.groups)
    failed = {}
    for group, error in results.items():
        if error is None:
            continue
        failed[group] = error.code.name if isinstance(error.code, ErrorCode) else str(error.code)
        if error.code == ErrorCode.NON_EMPTY_GROUP:
            message = (f"group {group!r} has active members; stop its consumers before "
                       f"deleting it")
        elif error.code == ErrorCode.GROUP_ID_NOT_FOUND:
            message = f"group {group!r} does not exist"
        else:
            message = str(error)
        print(f"sluice: {message}", file=sys.stderr)
    deleted = [g for g in results if results[g] is None]
    if args.output == "json":
        emit_json({"deleted": deleted, "errors": failed})
    else:
        for group in deleted:
            print(f"Deleted group {group}.")
    return 1 if failed else 0


async def reset_offsets(client: AsyncClient, args) -> int:
    if args.to_datetime is not None or args.by_duration is not None:
        at = args.to_datetime if args.to_datetime is not None else \
            int(time.time() * 1000) - args.by_duration
    else:
        at = None
    target = ResetTarget(earliest=args.to_earliest, latest=args.to_latest, offset=args.to_offset,
                         timestamp=at, shift_by=args.shift_by,
                         file_offsets=getattr(args, "file_offsets", None))
    plan = await plan_reset(client, args.group, args.topic, target)
    if args.execute:
        await execute_reset(client, plan)
    rows = plan.rows()
    if args.output == "json":
        emit_json({"group": plan.group, "executed": bool(args.execute), "offsets": rows})
        return 0
    print(format_table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"],
                       [(r["topic"], r["partition"], r["current_offset"], r["new_offset"])
                        for r in rows]))
    print()
    print(f"Committed the new offsets of group {plan.group}." if args.execute else
          "Dry run: nothing was changed (use --execute to commit these offsets).")
    return 0


@dataclass(frozen=True)
class ResetTarget:
    """Where `plan_reset` moves each offset; exactly one is set: the log start or end, an
    offset, the first offset at or after a time (epoch ms; the log end when there is
    none), the committed offset shifted by N, or {(topic, partition): offset}."""

    earliest: bool = False
    latest: bool = False
    offset: int | None = None
    timestamp: int | None = None
    shift_by: int | None = None
    file_offsets: dict[tuple[str, int], int] | None = None


@dataclass(frozen=True)
class ResetPlan:
    """The offsets a reset would commit, each clamped to [log start, log end], beside
    the group's committed ones."""

    group: str
    committed: dict[tuple[str, int], int]
    new_offsets: dict[tuple[str, int], int]

    def rows(self) -> list[dict]:
        return [{"topic": t, "partition": p, "current_offset": self.committed.get((t, p)),
                 "new_offset": offset} for (t, p), offset in sorted(self.new_offsets.items())]


async def plan_reset(client: AsyncClient, group: str,
                     topics: list[tuple[str, tuple[int, ...] | None]] | None,
                     target: ResetTarget) -> ResetPlan:
    """The new offsets of `group` for `topics` (each with all its partitions, or the
    ones listed); None: the partitions of `target.file_offsets`, or else every partition
    the group has committed an offset for. CommandError when the group has active
    members or the scope names nothing that exists."""
    await _ensure_inactive(client, group)
    committed = await committed_offsets(client, group)

    # The partitions to reset.
    file_offsets = target.file_offsets
    if topics:
        named: dict[str, set[int] | None] = {}  # None: every partition
        for topic, partitions in topics:
            if partitions is None or (topic in named and named[topic] is None):
                named[topic] = None
            else:
                named.setdefault(topic, set()).update(partitions)
        existing = await partitions_of(client, sorted(named), strict=True)
        scope = set()
        for topic, wanted in named.items():
            have = existing[topic]
            for partition in (have if wanted is None else sorted(wanted)):
                if partition not in have:
                    raise CommandError(f"topic {topic!r} has no partition {partition} "
                                       f"(it has {len(have)})")
                scope.add((topic, partition))
        if file_offsets is not None:
            outside = sorted(k for k in file_offsets if k not in scope)
            if outside:
                raise CommandError(f"--from-file names {_tp(outside[0])}, which is outside the "
                                   f"--topic scope")
            scope = set(file_offsets)
    elif file_offsets is not None:
        scope = set(file_offsets)
    else:
        scope = set(committed)
        if not scope:
            raise CommandError(f"group {group!r} has no committed offsets, so --all-topics "
                               f"names nothing; name topics with --topic")
    keys = sorted(scope)
    existing = await partitions_of(client, sorted({t for t, _ in keys}), strict=True)
    for topic, partition in keys:
        if partition not in existing[topic]:
            raise CommandError(f"topic {topic!r} has no partition {partition}")

    starts, ends = await asyncio.gather(offsets_at(client, keys, EARLIEST, existing),
                                        offsets_at(client, keys, LATEST, existing))
    if target.earliest:
        targets = dict(starts)
    elif target.latest:
        targets = dict(ends)
    elif target.offset is not None:
        targets = {k: target.offset for k in keys}
    elif target.timestamp is not None:
        at = target.timestamp
        found = await offsets_at(client, keys, at, existing) if at >= 0 else {}
        targets = {k: found[k] if found.get(k, -1) >= 0 else ends[k] for k in keys}
    elif target.shift_by is not None:
        missing = [k for k in keys if k not in committed]
        if missing:
            raise CommandError(f"cannot shift the offset of {_tp(missing[0])}: group {group!r} "
                               f"has no committed offset for it")
        targets = {k: committed[k] + target.shift_by for k in keys}
    else:
        targets = {k: file_offsets[k] for k in keys}
    return ResetPlan(group, committed,
                     {k: min(max(targets[k], starts[k]), ends[k]) for k in keys})


async def execute_reset(client: AsyncClient, plan: ResetPlan) -> None:
    """Commit a plan's offsets (OffsetCommit outside any generation), once more only if
    the group is still without active members."""
    await _ensure_inactive(client, plan.group)
    await client.consumer.commit_offsets(plan.group, plan.new_offsets)


ACTIONS = {"list": list_groups, "describe": describe, "delete": delete,
           "reset-offsets": reset_offsets}


# -- helpers ----------------------------------------------------------------------------

def _tp(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


async def _describe_consumer_group(client: AsyncClient, group: str) -> ConsumerGroupDescription | None:
    """The group if it is a consumer group of KIP-848's protocol; None when it is not one,
    or the broker serves no ConsumerGroupDescribe (a classic group for sure)."""
    try:
        return (await client.admin.describe_consumer_groups([group]))[group]
    except UnsupportedVersion:
        return None


async def _describe_group(client: AsyncClient, group: str) -> GroupDescription:
    try:
        return (await client.admin.describe_groups([group]))[group]
    except UnsupportedVersion as exc:
        raise CommandError(f"the broker cannot describe groups: {exc}") from None


async def _ensure_inactive(client: AsyncClient, group: str) -> None:
    description = await _describe_consumer_group(client, group) or await _describe_group(client, group)
    if description.state not in INACTIVE_STATES:
        raise CommandError(
            f"group {group!r} has {len(description.members)} active member(s) (state "
            f"{description.state}); offsets can only be reset while the group is inactive: "
            f"stop its consumers first")


async def committed_offsets(client: AsyncClient, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): offset} of the partitions `group` has committed offsets for."""
    return {key: c.offset for key, c in (await client.consumer.fetch_offsets(group)).items()
            if c.offset >= 0}


async def partitions_of(client: AsyncClient, topics: list[str], *,
                         strict: bool = False) -> dict[str, list[int]]:
    """{topic: its partition ids}; topics that do not exist are left out, or, when
    `strict`, refused."""
    if not topics:
        return {}
    metadata = await client.metadata(topics)
    found = {}
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if strict:
                raise CommandError(f"topic {topic!r} does not exist")
            continue
        if info.error_code:
            raise KafkaError(info.error_code, f"topic {topic!r}")
        found[topic] = sorted(info.partitions)
    return found


async def offsets_at(client: AsyncClient, keys: list[tuple[str, int]], timestamp: int,
                      existing: dict[str, list[int]]) -> dict[tuple[str, int], int]:
    """ListOffsets at `timestamp` for the partitions of `keys` that exist."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in keys:
        if partition in existing.get(topic, ()):
            by_topic.setdefault(topic, []).append(partition)
    answers = await asyncio.gather(*(client.consumer.list_offsets(topic, partitions, timestamp)
                                     for topic, partitions in by_topic.items()))
    return {(topic, p): o.offset for topic, answer in zip(by_topic, answers)
            for p, o in answer.items()}
