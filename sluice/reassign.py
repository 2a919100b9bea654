"""`sluice reassign`: partition reassignments, as kafka-reassign-partitions.sh runs them
(AlterPartitionReassignments and ListPartitionReassignments, sent to the controller).

    sluice reassign --bootstrap-server H:P --execute --reassignment-json-file F [--additional]
                    [--throttle BYTES/S]
    sluice reassign --bootstrap-server H:P --verify --reassignment-json-file F [--preserve-throttles]
    sluice reassign --bootstrap-server H:P --cancel --reassignment-json-file F
    sluice reassign --bootstrap-server H:P --list
    sluice reassign --bootstrap-server H:P --generate | --decommission BROKER_ID | --rebalance
        (the plans that grow and shrink a cluster: sluice/scaling.py)

The file is Kafka's: {"version": 1, "partitions": [{"topic": "t", "partition": 0,
"replicas": [1, 2], "log_dirs": ["any", "any"]}, ...]} (log_dirs optional; a broker keeps
one log directory, so "any" is the only one). The lines printed are Kafka's: --execute
prints the current assignment (to roll back with) and starts the reassignments, refusing
partitions already being reassigned unless --additional; --verify says of each partition
whether its reassignment is completed, still in progress, or gone elsewhere; --cancel
moves the partitions being reassigned back to their original replicas.
--throttle sets, as Kafka's tool does, the replication throttles of every partition moving
(those of the file and those already moving): leader.replication.throttled.replicas =
its existing replicas, follower.replication.throttled.replicas = the replicas it gains,
and the leader and follower rates on every broker they name; --verify removes them once
no reassignment is left in the cluster (unless --preserve-throttles).
--replica-alter-log-dirs-throttle is refused: a broker keeps one log directory, there is
nothing to move between. Exit code 0, 1 when a partition failed or a reassignment is not
complete (--verify), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from sluice_client import BROKER_RESOURCE, DELETE_CONFIG, SET_CONFIG, TOPIC_RESOURCE, AsyncClient

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           code_name, emit_json, run_command)
from sluice.reassignment_plans import Plan, partition_name, plan_json, read_plan
from sluice.scaling import add_arguments, check_arguments, run as run_scaling

__all__ = ["main", "parser"]

# Per partition moving: (its existing replicas, the replicas it gains), as Kafka's tool sees it.
Moves = dict[tuple[str, int], tuple[frozenset[int], frozenset[int]]]
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = ("leader.replication.throttled.replicas",
                                      "follower.replication.throttled.replicas")


def _rate(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes a second")
    return int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sluice reassign",
        description="Move partitions' replicas between brokers, follow and cancel the moves.")
    add_connection_options(p, top=True)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--execute", action="store_true", help="start the reassignments of the file")
    action.add_argument("--verify", action="store_true", help="say whether they are done")
    action.add_argument("--cancel", action="store_true", help="cancel those still in progress")
    action.add_argument("--list", action="store_true", help="list every reassignment in progress")
    add_arguments(p, action)  # --generate, --decommission, --rebalance
    p.add_argument("--reassignment-json-file", metavar="FILE",
                   help="the reassignments, in Kafka's JSON (with --execute, --verify, --cancel)")
    p.add_argument("--additional", action="store_true",
                   help="with --execute: also when some of its partitions are being reassigned")
    p.add_argument("--throttle", metavar="BYTES/S", type=_rate,
                   help="with --execute: throttle the moves' replication to this rate")
    p.add_argument("--preserve-throttles", action="store_true",
                   help="with --verify: keep the throttles once the moves are done")
    p.add_argument("--replica-alter-log-dirs-throttle", metavar="BYTES/S",
                   help="refused: a broker keeps one log directory")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    if args.replica_alter_log_dirs_throttle is not None:
        p.error("--replica-alter-log-dirs-throttle: a Sluice broker keeps one log directory, "
                "there is nothing to move between log directories")
    if (args.execute or args.verify or args.cancel) != (args.reassignment_json_file is not None):
        p.error("--reassignment-json-file goes with --execute, --verify and --cancel, and only with them")
    check_arguments(p, args)
    if (args.additional or args.throttle is not None) and not args.execute:
        p.error("--additional and --throttle go with --execute")
    if args.preserve_throttles and not args.verify:
        p.error("--preserve-throttles goes with --verify")
    return run_command(args, reassign)


async def reassign(client: AsyncClient, args) -> int:
    if args.list:
        return await _list(client, args)
    if not (args.execute or args.verify or args.cancel):
        return await run_scaling(client, args)
    plan = read_plan(args.reassignment_json_file)
    if args.execute:
        return await _execute(client, args, plan)
    if args.verify:
        return await _verify(client, args, plan)
    return await _cancel(client, args, plan)


async def _current_replicas(client: AsyncClient, plan: Plan) -> dict[tuple[str, int], tuple[int, ...]]:
    """The replicas the cluster's Metadata gives each partition of the plan; CommandError
    naming those it does not have."""
    metadata = await client.metadata(sorted({topic for topic, _ in plan}))
    current, missing = {}, []
    for tp in plan:
        topic = metadata.topics.get(tp[0])
        info = None if topic is None or topic.error_code else topic.partitions.get(tp[1])
        if info is None:
            missing.append(tp)
        else:
            current[tp] = tuple(info.replicas)
    if missing:
        raise CommandError(f"Topic or partition not found: {', '.join(map(partition_name, sorted(missing)))}")
    return current


async def _execute(client: AsyncClient, args, plan: Plan) -> int:
    current = await _current_replicas(client, plan)
    ongoing = await client.admin.list_partition_reassignments(plan)
    if ongoing and not args.additional:
        raise CommandError("Cannot execute because there is an existing partition assignment. "
                           "Use --additional to override this and create a new partition "
                           f"assignment in addition to the existing one ({', '.join(map(partition_name, sorted(ongoing)))})")
    if args.throttle is not None:
        moving = await client.admin.list_partition_reassignments()
        await _throttle(client, _moves(moving, plan, current), args.throttle)
    results = await client.admin.alter_partition_reassignments(plan)
    started = sorted(tp for tp, error in results.items() if error is None)
    failed = sorted((tp, error) for tp, error in results.items() if error is not None)
    if args.output == "json":
        emit_json({"current": plan_json(current), "throttle": args.throttle,
                   "started": [partition_name(tp) for tp in started],
                   "failed": [{"partition": partition_name(tp), "error": code_name(error.code),
                               "message": error.message} for tp, error in failed]})
    else:
        print(f"Current partition replica assignment\n\n{json.dumps(plan_json(current))}\n\n"
              f"Save this to use as the --reassignment-json-file option during rollback")
        if args.throttle is not None:
            print("Warning: You must run --verify periodically, until the reassignment completes, to "
                  f"ensure the throttle is removed.\nThe inter-broker throttle limit was set to "
                  f"{args.throttle} B/s")
        if started:
            print(f"Successfully started partition reassignment{'s' if len(started) > 1 else ''} "
                  f"for {','.join(map(partition_name, started))}")
        if failed:
            print("Error reassigning partition(s):")
            for tp, error in failed:
                print(f"{partition_name(tp)}: {code_name(error.code)}" + (f": {error.message}" if error.message else ""))
    return 1 if failed else 0


async def _verify(client: AsyncClient, args, plan: Plan) -> int:
    current = await _current_replicas(client, plan)
    ongoing = await client.admin.list_partition_reassignments()  # the whole cluster's: see the throttles below
    states = {}
    for tp, target in sorted(plan.items()):
        if tp in ongoing:
            states[tp] = "in progress", f"Reassignment of partition {partition_name(tp)} is still in progress."
        elif current[tp] == target:
            states[tp] = "completed", f"Reassignment of partition {partition_name(tp)} is completed."
        else:
            states[tp] = "elsewhere", (
                f"There is no active reassignment of partition {partition_name(tp)}, but replica set is "
                f"{list(current[tp])} rather than {list(target)}.")
    if args.output == "json":
        emit_json([{"partition": partition_name(tp), "state": state, "replicas": list(current[tp]),
                    "target": list(plan[tp])} for tp, (state, _) in states.items()])
    else:
        print("Status of partition reassignment:")
        for _, line in states.values():
            print(line)
    if not ongoing and not args.preserve_throttles:
        await _clear_throttles(client, args, plan)
    return 0 if all(state == "completed" for state, _ in states.values()) else 1


async def _cancel(client: AsyncClient, args, plan: Plan) -> int:
    ongoing = sorted(await client.admin.list_partition_reassignments(plan))
    results = await client.admin.alter_partition_reassignments({tp: None for tp in ongoing}) if ongoing else {}
    cancelled = sorted(tp for tp, error in results.items() if error is None)
    failed = sorted((tp, error) for tp, error in results.items() if error is not None)
    if args.output == "json":
        emit_json({"cancelled": [partition_name(tp) for tp in cancelled],
                   "failed": [{"partition": partition_name(tp), "error": code_name(error.code),
                               "message": error.message} for tp, error in failed]})
    else:
        if cancelled:
            print(f"Successfully cancelled partition reassignments for: {','.join(map(partition_name, cancelled))}")
        elif not failed:
            print("None of the specified partition reassignments are active.")
        for tp, error in failed:
            print(f"Error cancelling the reassignment of {partition_name(tp)}: {code_name(error.code)}"
                  + (f": {error.message}" if error.message else ""))
    return 1 if failed else 0


async def _list(client: AsyncClient, args) -> int:
    ongoing = await client.admin.list_partition_reassignments()
    if args.output == "json":
        emit_json([{"partition": partition_name(tp), "replicas": list(r.replicas), "adding": list(r.adding),
                    "removing": list(r.removing)} for tp, r in sorted(ongoing.items())])
    elif not ongoing:
        print("No partition reassignments found.")
    else:
        print("Current partition reassignments:")
        for tp, r in sorted(ongoing.items()):
            print(f"{partition_name(tp)}: replicas: {_ids(r.replicas)}. adding: {_ids(r.adding)}. "
                  f"removing: {_ids(r.removing)}.")
    return 0


def _moves(moving, plan: Plan, current: dict[tuple[str, int], tuple[int, ...]]) -> Moves:
    """What Kafka's tool throttles: the partitions being reassigned (their original
    replicas, the ones being added) and those of the plan (their existing replicas, or
    the original ones when already moving, and the target's others)."""
    moves: Moves = {tp: (frozenset(r.replicas) - frozenset(r.adding), frozenset(r.adding))
                    for tp, r in moving.items()}
    for tp, target in plan.items():
        existing = moves[tp][0] if tp in moves else frozenset(current[tp])
        moves[tp] = existing, frozenset(target) - existing
    return moves


async def _throttle(client: AsyncClient, moves: Moves, rate: int) -> None:
    """Kafka's throttles for `moves`: per topic, its moving partitions' existing replicas
    as leader throttled replicas and their new ones as follower throttled replicas; the
    rate, leader and follower, on every broker named."""
    replicas: dict[str, tuple[list[str], list[str]]] = {}
    for (topic, partition), (existing, added) in sorted(moves.items()):
        leader, follower = replicas.setdefault(topic, ([], []))
        leader += [f"{partition}:{b}" for b in sorted(existing)]
        follower += [f"{partition}:{b}" for b in sorted(added)]
    changes = {(TOPIC_RESOURCE, topic): [(LEADER_REPLICAS, SET_CONFIG, ",".join(leader)),
                                         (FOLLOWER_REPLICAS, SET_CONFIG, ",".join(follower))]
               for topic, (leader, follower) in replicas.items()}
    brokers = sorted(set().union(*(existing | added for existing, added in moves.values())))
    changes.update({(BROKER_RESOURCE, str(b)): [(LEADER_RATE, SET_CONFIG, str(rate)),
                                                (FOLLOWER_RATE, SET_CONFIG, str(rate))] for b in brokers})
    await _alter_configs(client, changes)


async def _clear_throttles(client: AsyncClient, args, plan: Plan) -> None:
    """Remove the throttles, as Kafka's tool does once nothing moves: the rates on every
    live broker and every broker the plan names, the replicas of the plan's topics."""
    brokers = sorted(set((await client.metadata([])).brokers) | {b for target in plan.values() for b in target})
    topics = sorted({topic for topic, _ in plan})
    changes = {(BROKER_RESOURCE, str(b)): [(LEADER_RATE, DELETE_CONFIG, None),
                                           (FOLLOWER_RATE, DELETE_CONFIG, None)] for b in brokers}
    changes.update({(TOPIC_RESOURCE, topic): [(LEADER_REPLICAS, DELETE_CONFIG, None),
                                              (FOLLOWER_REPLICAS, DELETE_CONFIG, None)] for topic in topics})
    await _alter_configs(client, changes)
    if args.output != "json":
        print(f"Clearing broker-level throttles on broker{'s' if len(brokers) > 1 else ''} "
              f"{','.join(map(str, brokers))}\nClearing topic-level throttles on topic"
              f"{'s' if len(topics) > 1 else ''} {','.join(topics)}")


async def _alter_configs(client: AsyncClient, changes) -> None:
    """IncrementalAlterConfigs; the first resource's error raised."""
    for error in (await client.admin.incremental_alter_configs(changes)).values():
        if error is not None:
            raise error


def _ids(ids) -> str:
    return ",".join(str(i) for i in ids)
