"""`sluice reassign --generate`, `--decommission` and `--rebalance`: the plans that grow and
shrink a cluster, placed by broker/cluster/placement.py (imported when they run).

    sluice reassign --bootstrap-server H:P --generate --topics-to-move-json-file F \\
        --broker-list 1,2,3 [--disable-rack-aware]
    sluice reassign --bootstrap-server H:P --decommission BROKER_ID [--wait] [--wait-timeout S]
    sluice reassign --bootstrap-server H:P --rebalance [--wait] [--wait-timeout S]

--generate is kafka-reassign-partitions.sh's: for the topics of F ({"version": 1, "topics":
[{"topic": NAME}, ...]}) it prints the current assignment and a proposal, Kafka's placement
of each topic's partitions over the brokers listed (rack-aware as at creation), to give
to --execute; it starts nothing. --decommission moves every replica off a broker (the
internal topics' too) onto the other live brokers (placement.drain_broker); --rebalance
evens out replicas and preferred leaders over the live brokers, moving as few replicas
as it can (placement.rebalance). Both plan from where each partition is going (the target
of a reassignment in progress, else its replicas) and start only what that leaves to do,
so that running them again is safe; --rebalance refuses to start moves while other
reassignments are in progress. With --wait they wait (at most --wait-timeout seconds,
printing a line when progress is made or every PROGRESS_INTERVAL seconds) until every
partition they started or found moving has its target replicas, then elect the preferred
leaders of their partitions (every partition for --rebalance) whose leader is another
replica, so that leadership follows the plan. --decommission then says whether the broker
can be stopped: it holds no replica, so no partition loses one when it stops; otherwise
it names the partitions the broker still holds or leads. Exit code 0 when done (for
--decommission: the broker can be stopped, or the moves started without --wait), 1 when
a move failed or was not done in time, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Callable

from sluice_client import AsyncClient, ClusterMetadata, OngoingReassignment
from wire.error_codes import ErrorCode

from sluice.common import (CommandError, code_name, emit_json, format_table, non_negative,
                           positive_float)
from sluice.leader_election import run_election
from sluice.reassignment_plans import Plan, partition_name, plan_json, read_json_file

__all__ = ["add_arguments", "check_arguments", "run"]

DEFAULT_WAIT_TIMEOUT = 600.0
PROGRESS_INTERVAL = 10.0  # seconds between progress lines while nothing moves on
POLL_INTERVAL = 1.0
SETTLE_INTERVAL = 0.5  # seconds between two views of the cluster that must agree
SETTLE_ATTEMPTS = 20
NO_RACKS = ("Not all brokers have rack information. Add --disable-rack-aware in command line "
            "to make replica assignment without rack information.")  # Kafka's words


def broker_list(text: str) -> list[int]:
    """--broker-list: broker ids separated by commas, each once."""
    ids = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of broker ids such as 1,2,3")
        ids.append(int(part))
    duplicates = sorted({b for b in ids if ids.count(b) > 1})
    if duplicates:
        raise argparse.ArgumentTypeError(
            f"Broker list contains duplicate entries: {', '.join(map(str, duplicates))}")
    return ids


def add_arguments(p: argparse.ArgumentParser, action) -> None:
    """The actions (in the mutually exclusive group `action`) and their options."""
    action.add_argument("--generate", action="store_true",
                        help="propose where the partitions of some topics go over some brokers "
                             "(starts nothing)")
    action.add_argument("--decommission", type=non_negative, metavar="BROKER_ID",
                        help="move every replica off a broker, so that it can be stopped for good")
    action.add_argument("--rebalance", action="store_true",
                        help="spread replicas and preferred leaders evenly over the live brokers")
    p.add_argument("--topics-to-move-json-file", metavar="FILE",
                   help='with --generate: the topics, {"version": 1, "topics": [{"topic": NAME}, ...]}')
    p.add_argument("--broker-list", type=broker_list, metavar="ID,ID,...",
                   help="with --generate: the brokers to place their partitions on")
    p.add_argument("--disable-rack-aware", action="store_true",
                   help="with --generate, --decommission and --rebalance: ignore the brokers' racks")
    p.add_argument("--wait", action="store_true",
                   help="with --decommission and --rebalance: wait until the moves are done, then "
                        "elect the preferred leaders")
    p.add_argument("--wait-timeout", type=positive_float, metavar="SECONDS",
                   help=f"with --wait: give up waiting after this long (default {DEFAULT_WAIT_TIMEOUT:g})")


def check_arguments(p: argparse.ArgumentParser, args) -> None:
    moving = args.decommission is not None or args.rebalance
    for option, value in (("--topics-to-move-json-file", args.topics_to_move_json_file),
                          ("--broker-list", args.broker_list)):
        if args.generate and value is None:
            p.error(f"--generate needs {option}")
        if value is not None and not args.generate:
            p.error(f"{option} goes with --generate")
    if args.disable_rack_aware and not (args.generate or moving):
        p.error("--disable-rack-aware goes with --generate, --decommission and --rebalance")
    if args.wait and not moving:
        p.error("--wait goes with --decommission and --rebalance")
    if args.wait_timeout is not None and not args.wait:
        p.error("--wait-timeout goes with --wait")


async def run(client: AsyncClient, args) -> int:
    if args.generate:
        return await generate(client, args)
    if args.rebalance:
        return await rebalance(client, args)
    return await decommission(client, args)


# -- --generate -----------------------------------------------------------------------------

def read_topics(path: str) -> list[str]:
    """The topics a kafka-reassign-partitions --topics-to-move-json-file names."""
    option = "--topics-to-move-json-file"
    document = read_json_file(option, path)
    shape = f'{option}: {path} is not {{"version": 1, "topics": [{{"topic": NAME}}, ...]}}'
    if not isinstance(document, dict):
        raise CommandError(shape)
    if document.get("version", 1) != 1:
        raise CommandError(f"{option}: Not supported version field value {document['version']}")
    entries = document.get("topics")
    if not isinstance(entries, list) or not all(
            isinstance(entry, dict) and isinstance(entry.get("topic"), str) for entry in entries):
        raise CommandError(shape)
    topics = [entry["topic"] for entry in entries]
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise CommandError(f"{option}: List of topics to reassign contains duplicate entries: "
                           f"{', '.join(duplicates)}")
    if not topics:
        raise CommandError(f"{option}: {path} names no topic")
    return topics


async def generate(client: AsyncClient, args) -> int:
    from broker.cluster.placement import assign_replicas
    from broker.errors import BrokerError

    topics = read_topics(args.topics_to_move_json_file)
    metadata = await client.metadata(topics)
    for topic in topics:
        info = metadata.topics.get(topic)
        if info is None or info.error_code or not info.partitions:
            raise CommandError(f"Topic {topic} not found.")
    unknown = [b for b in args.broker_list if b not in metadata.brokers]
    if unknown:
        raise CommandError(f"--broker-list: {_ids(unknown)} not among the live brokers "
                           f"({_ids(sorted(metadata.brokers))})")
    brokers = placement_brokers(metadata, args.broker_list, args.disable_rack_aware)
    current: Plan = {}
    proposed: Plan = {}
    for topic in topics:
        partitions = metadata.topics[topic].partitions
        current.update({(topic, p): tuple(info.replicas) for p, info in partitions.items()})
        replication_factor = len(partitions[min(partitions)].replicas)
        try:
            placed = assign_replicas(brokers, len(partitions), replication_factor)
        except BrokerError as exc:
            raise CommandError(f"topic {topic}: {exc}") from None
        proposed.update({(topic, p): replicas for p, replicas in placed.items()})
    if args.output == "json":
        emit_json({"current": plan_json(current), "proposed": plan_json(proposed)})
    else:
        print(f"Current partition replica assignment\n{json.dumps(plan_json(current))}\n\n"
              f"Proposed partition reassignment configuration\n{json.dumps(plan_json(proposed))}")
    return 0


def placement_brokers(metadata: ClusterMetadata, ids, ignore_racks: bool) -> dict[int, str | None]:
    """{broker id: rack} of the brokers `ids` to place on (racks all None when ignored);
    refused, as Kafka refuses it, when some have a rack and others none."""
    brokers = {b: None if ignore_racks else metadata.brokers[b].rack for b in ids}
    if len({rack is None for rack in brokers.values()}) > 1:
        raise CommandError(NO_RACKS)
    return brokers


# -- --decommission and --rebalance ------------------------------------------------------------

async def cluster_targets(client: AsyncClient
                          ) -> tuple[ClusterMetadata, Plan, dict[tuple[str, int], OngoingReassignment]]:
    """Metadata of every topic, where each partition is going (the target of its
    reassignment in progress, else its replicas) and the reassignments in progress.

    The reassignments are listed before and after the Metadata, so that one completing in
    between is known by its target. A reassignment completed just before may still show
    in a broker's Metadata as the replicas it had while moving (the controller's
    UpdateMetadata is on its way): the view is taken until two, SETTLE_INTERVAL apart,
    agree on the replicas of every partition not being reassigned."""
    settled = None
    for _ in range(SETTLE_ATTEMPTS):
        before = await client.admin.list_partition_reassignments()
        metadata = await client.metadata()
        ongoing = await client.admin.list_partition_reassignments()
        targets: Plan = {}
        still = {}
        for topic in metadata.topics.values():
            if topic.error_code:
                continue
            for partition, info in topic.partitions.items():
                tp = (topic.name, partition)
                moving = ongoing.get(tp) or before.get(tp)
                targets[tp] = _target(moving) if moving else tuple(info.replicas)
                if not moving:
                    still[tp] = targets[tp]
        if still == settled:
            return metadata, targets, ongoing
        settled = still
        await asyncio.sleep(SETTLE_INTERVAL)
    raise CommandError(f"partitions kept changing replicas for {SETTLE_ATTEMPTS * SETTLE_INTERVAL:g} s "
                       "while the cluster was looked at: run the command again")


def _target(moving: OngoingReassignment) -> tuple[int, ...]:
    return tuple(r for r in moving.replicas if r not in moving.removing)


async def decommission(client: AsyncClient, args) -> int:
    from broker.cluster.placement import drain_broker
    from broker.errors import BrokerError

    retiring = args.decommission
    metadata, targets, ongoing = await cluster_targets(client)
    left = sorted(b for b in metadata.brokers if b != retiring)
    short = {}
    for (topic, _), replicas in targets.items():
        if retiring in replicas and len(replicas) > len(left):
            short[topic] = max(len(replicas), short.get(topic, 0))
    if short:
        raise CommandError(
            f"cannot move every replica off broker {retiring}: "
            + ", ".join(f"{topic} has {rf} replicas per partition" for topic, rf in sorted(short.items()))
            + f", and {len(left)} other broker(s) are live ({_ids(left) or 'none'}); add a broker "
            "first (sluice cluster add-broker), or lower the replication factor with --execute")
    brokers = placement_brokers(metadata, left, args.disable_rack_aware)
    try:
        proposed = drain_broker(targets, retiring, brokers)
    except BrokerError as exc:
        raise CommandError(f"cannot move every replica off broker {retiring}: {exc}") from None
    plan = {tp: replicas for tp, replicas in proposed.items() if replicas != targets[tp]}
    # Also waited for: the reassignments in progress that take a replica off the broker.
    watched = {**{tp: _target(r) for tp, r in ongoing.items() if retiring in r.replicas}, **plan}
    report = Report(args, {"broker": retiring})
    if plan:
        report.line(f"Moving the replicas of broker {retiring} onto brokers {_ids(left)}:")
    elif retiring not in metadata.brokers and not watched:
        report.line(f"Broker {retiring} is not live and no partition is placed on it.")
    else:
        report.line(f"No partition is to be moved off broker {retiring} any more.")
    if not await report.start(client, targets, proposed, plan, sorted(brokers)):
        return report.finish(1)
    if args.wait:
        if not await report.wait(client, watched, args.wait_timeout or DEFAULT_WAIT_TIMEOUT):
            await report.still_on(client, retiring)
            return report.finish(1)
        await report.elect(client, set(watched))
    elif watched:
        report.line(f"The moves go on in the background: run this command again with --wait to "
                    f"wait until broker {retiring} can be stopped.")
        return report.finish(0)
    return report.finish(0 if await report.still_on(client, retiring) else 1)


async def rebalance(client: AsyncClient, args) -> int:
    from broker.cluster.placement import rebalance as rebalanced

    metadata, targets, ongoing = await cluster_targets(client)
    live = sorted(metadata.brokers)
    offline = sorted({b for replicas in targets.values() for b in replicas} - set(live))
    if offline:
        raise CommandError(f"broker(s) {_ids(offline)} hold replicas but are not live: start them "
                           "again, or move their replicas off with --decommission, then rebalance")
    brokers = placement_brokers(metadata, live, args.disable_rack_aware)
    proposed = rebalanced(targets, brokers)
    plan = {tp: replicas for tp, replicas in proposed.items() if replicas != targets[tp]}
    if plan and ongoing:
        raise CommandError(f"partition reassignments are in progress ({_names(sorted(ongoing))}): "
                           "run --rebalance again once they are done (sluice reassign --list)")
    report = Report(args, {})
    if plan:
        report.line(f"Spreading the replicas and preferred leaders over brokers {_ids(live)}:")
    else:
        report.line(f"The replicas and preferred leaders are spread evenly over brokers "
                    f"{_ids(live)} already.")
    if not await report.start(client, targets, proposed, plan, live):
        return report.finish(1)
    watched = {**{tp: _target(r) for tp, r in ongoing.items()}, **plan}
    if not args.wait:
        if watched:
            report.line("The moves go on in the background: run this command again with --wait "
                        "to wait for them and elect the preferred leaders.")
        return report.finish(0)
    if not await report.wait(client, watched, args.wait_timeout or DEFAULT_WAIT_TIMEOUT):
        return report.finish(1)
    return report.finish(0 if await report.elect(client, None) else 1)


class Report:
    """What --decommission and --rebalance print as they go (table output), or gather into
    one JSON document printed at the end (--output json; progress lines go to stderr)."""

    def __init__(self, args, document: dict):
        self.json = args.output == "json"
        self.document = document

    def line(self, text: str) -> None:
        print(text, file=sys.stderr if self.json else sys.stdout, flush=True)

    def finish(self, code: int) -> int:
        if self.json:
            emit_json(self.document)
        return code

    async def start(self, client: AsyncClient, targets: Plan, proposed: Plan, plan: Plan,
                    brokers: list[int]) -> bool:
        """Show the plan and start it; False when some partition's reassignment was refused."""
        current = {tp: targets[tp] for tp in plan}
        self.document.update(current=plan_json(current), proposed=plan_json(plan),
                             started=[], failed=[])
        if not plan:
            return True
        self.line(format_table(["BROKER", "REPLICAS", "PREFERRED-LEADER-OF"], [
            (b, _change(targets, proposed, lambda r: b in r), _change(targets, proposed, lambda r: r[:1] == (b,)))
            for b in sorted({*brokers, *(b for r in targets.values() for b in r)})]))
        if not self.json:
            print(f"Current partition replica assignment\n\n{json.dumps(plan_json(current))}\n\n"
                  "Save this to use as the --reassignment-json-file option during rollback\n"
                  f"Proposed partition reassignment configuration\n\n{json.dumps(plan_json(plan))}\n")
        results = await client.admin.alter_partition_reassignments(plan)
        started = sorted(tp for tp, error in results.items() if error is None)
        failed = sorted((tp, error) for tp, error in results.items() if error is not None)
        self.document.update(started=[partition_name(tp) for tp in started], failed=[
            {"partition": partition_name(tp), "error": code_name(error.code), "message": error.message}
            for tp, error in failed])
        if started:
            self.line(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} "
                      f"for {','.join(map(partition_name, started))}")
        if failed:
            self.line("Error reassigning partition(s):")
            for tp, error in failed:
                self.line(f"{partition_name(tp)}: {code_name(error.code)}"
                          + (f": {error.message}" if error.message else ""))
        return not failed

    async def wait(self, client: AsyncClient, watched: Plan, timeout: float) -> bool:
        """Until no partition of `watched` is being reassigned and Metadata gives each its
        target replicas, at most `timeout` seconds; whether that came."""
        began = time.monotonic()
        shown, shown_at = None, began
        while True:
            pending = await _pending(client, watched) if watched else []
            now = time.monotonic()
            if not pending:
                if watched:
                    self.line(f"The reassignment of {len(watched)} partition(s) is complete "
                              f"({now - began:.0f} s).")
                self.document["pending"] = []
                return True
            if now - began > timeout:
                self.line(f"Not complete after {timeout:g} s: {_names(pending)} still moving; "
                          "run the command again with --wait to wait more, or --cancel their "
                          "reassignments (sluice reassign --list shows them).")
                self.document["pending"] = [partition_name(tp) for tp in pending]
                return False
            if pending != shown or now - shown_at >= PROGRESS_INTERVAL:
                self.line(f"Waiting for {len(pending)} of {len(watched)} partition reassignment(s) "
                          f"({now - began:.0f} s): {_names(pending, 10)}")
                shown, shown_at = pending, now
            await asyncio.sleep(POLL_INTERVAL)

    async def elect(self, client: AsyncClient, partitions: set | None) -> bool:
        """Preferred leader elections of those of `partitions` (None: every partition) led
        by a replica other than the first; False when one failed."""
        metadata = await client.metadata(None if partitions is None else sorted({t for t, _ in partitions}))
        astray = sorted((topic.name, p) for topic in metadata.topics.values() if not topic.error_code
                        for p, info in topic.partitions.items()
                        if (partitions is None or (topic.name, p) in partitions)
                        and info.replicas and info.leader_id != info.replicas[0])
        if not astray:
            self.document["election"] = None
            return True
        election = await run_election(client, "preferred", astray)
        self.document["election"] = election.as_json()
        if not self.json:
            election.print_lines()
        return not election.failed

    async def still_on(self, client: AsyncClient, broker: int) -> bool:
        """Say whether `broker` can be stopped with no partition losing a replica: it holds
        none (and so leads none); otherwise name those it holds and leads."""
        metadata = await client.metadata()
        held = sorted((t.name, p) for t in metadata.topics.values() if not t.error_code
                      for p, info in t.partitions.items() if broker in info.replicas)
        led = sorted((t.name, p) for t in metadata.topics.values() if not t.error_code
                     for p, info in t.partitions.items() if info.leader_id == broker)
        self.document.update(can_stop=not (held or led), holds=[partition_name(tp) for tp in held],
                             leads=[partition_name(tp) for tp in led])
        if held or led:
            self.line(f"Broker {broker} cannot be stopped yet without partitions losing a replica: "
                      f"it holds {_names(held) or 'no replica'}, and leads {_names(led) or 'nothing'}.")
            return False
        self.line(f"Broker {broker} holds no replica and leads no partition: it can be stopped "
                  "now, and no partition loses a replica.")
        return True


async def _pending(client: AsyncClient, watched: Plan) -> list[tuple[str, int]]:
    """The partitions of `watched` being reassigned, or that Metadata does not show with
    their target replicas yet (a partition deleted meanwhile is not waited for)."""
    ongoing = await client.admin.list_partition_reassignments(watched)
    metadata = await client.metadata(sorted({topic for topic, _ in watched}))
    pending = []
    for tp, target in sorted(watched.items()):
        topic = metadata.topics.get(tp[0])
        if topic is None or topic.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION \
                or (not topic.error_code and tp[1] not in topic.partitions):
            continue
        info = None if topic.error_code else topic.partitions[tp[1]]
        if tp in ongoing or info is None or tuple(info.replicas) != target:
            pending.append(tp)
    return pending


def _change(before: Plan, after: Plan, counted: Callable[[tuple[int, ...]], bool]) -> str:
    """"N" or "N -> M": how many partitions `counted` holds for, before and after."""
    old = sum(1 for replicas in before.values() if counted(replicas))
    new = sum(1 for replicas in after.values() if counted(replicas))
    return str(old) if old == new else f"{old} -> {new}"


def _names(partitions, limit: int | None = None) -> str:
    shown = [partition_name(tp) for tp in partitions[:limit]]
    more = len(partitions) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _ids(ids) -> str:
    return ", ".join(str(b) for b in ids)
