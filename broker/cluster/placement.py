"""Replica placement as ZooKeeper-mode Kafka does it, without I/O: where the replicas of
new partitions go (AdminUtils.assignReplicasToBrokers), how CreatePartitions extends a
topic (AdminZkClient.createNewPartitionsAssignment), and which manual assignments
CreateTopics and CreatePartitions accept.

An assignment maps each partition to its replicas, the preferred leader first. Brokers
are given as {broker id: rack or None}. Kafka draws a random start index and follower
shift for each placement; here they are arguments (drawn from a `random.Random` when not
given), so that a placement can be reproduced.

Rack-unaware (no broker has a rack, or racks are ignored): over the sorted broker ids,
partition p's first replica is broker (start + p) mod n; its j-th follower (j = 0, 1, ...)
sits 1 + (shift + j) mod (n - 1) brokers further on; the shift grows by one at every
nonzero multiple of n among the ids being placed. From start 0 and shift 0, replica j of
partition p < n is therefore on broker (p + j) mod n.

Rack-aware (every broker has a rack): the same walk over the rack-alternated broker list,
with the follower shift scaled by the number of racks, skipping a broker whose rack
already holds a replica of the partition while some rack holds none, and a broker that
already holds one. A mix of brokers with and without racks is refused unless racks are
ignored.

Moving existing replicas, for `sluice reassign` (Kafka leaves this to its operators'
tools): drain_broker moves every replica off a broker being retired, rebalance evens
the replica counts over the brokers moving as few replicas as it can, and
spread_leaders evens the preferred leaders by reordering replicas (no data moves).
These plans span topics: partitions are keyed (topic, partition).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Collection, Iterable, Iterator, Mapping, Sequence

from wire.error_codes import ErrorCode

from broker.errors import BrokerError

Assignment = dict[int, tuple[int, ...]]


def assign_replicas(brokers: Mapping[int, str | None], partitions: int, replication_factor: int,
                    *, start_index: int | None = None, replica_shift: int | None = None,
                    first_partition: int = 0, ignore_racks: bool = False,
                    rng: random.Random | None = None) -> Assignment:
    """Replicas for partitions first_partition .. first_partition + partitions - 1, as
    Kafka places new partitions over live `brokers`. A start index or shift not given is
    drawn from `rng` (start first, as Kafka draws them)."""
    if partitions <= 0:
        raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                          "number of partitions must be larger than 0")
    if replication_factor <= 0:
        raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          "replication factor must be larger than 0")
    if replication_factor > len(brokers):
        raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                          f"replication factor {replication_factor} larger than available "
                          f"brokers: {len(brokers)}")
    racks = _racks(brokers, ignore_racks)
    if start_index is None or replica_shift is None:
        rng = rng or random.Random()
        start_index = rng.randrange(len(brokers)) if start_index is None else start_index
        replica_shift = rng.randrange(len(brokers)) if replica_shift is None else replica_shift
    if racks is None:
        return assign_rack_unaware(sorted(brokers), partitions, replication_factor,
                                   start_index, replica_shift, first_partition)
    return assign_rack_aware(racks, partitions, replication_factor,
                             start_index, replica_shift, first_partition)


def assign_rack_unaware(broker_ids: Sequence[int], partitions: int, replication_factor: int,
                        start_index: int, replica_shift: int,
                        first_partition: int = 0) -> Assignment:
    """Kafka's round-robin over `broker_ids` (sorted): leaders one after another, followers
    at an offset that changes every len(broker_ids) partitions, so that the partitions a
    broker leads have their followers spread over the other brokers."""
    n = len(broker_ids)
    assignment = {}
    for p, first, shift in _walk(n, partitions, start_index, replica_shift, first_partition):
        followers = (_follower_index(first, shift, j, n) for j in range(replication_factor - 1))
        assignment[p] = tuple(broker_ids[i] for i in (first, *followers))
    return assignment


def assign_rack_aware(brokers: Mapping[int, str], partitions: int, replication_factor: int,
                      start_index: int, replica_shift: int,
                      first_partition: int = 0) -> Assignment:
    """Kafka's rack-aware placement: leaders round-robin over the rack-alternated list;
    followers walk it from the leader, taking a broker only if its rack holds no replica
    yet (or every rack does) and it holds none itself, so that a partition spans
    min(replication factor, racks) racks."""
    ordered = rack_alternated(brokers)
    n, n_racks = len(ordered), len(set(brokers.values()))
    assignment = {}
    for p, first, shift in _walk(n, partitions, start_index, replica_shift, first_partition):
        replicas = [ordered[first]]
        racks_used = {brokers[ordered[first]]}
        step = 0
        while len(replicas) < replication_factor:
            candidate = ordered[_follower_index(first, shift * n_racks, step, n)]
            step += 1
            rack = brokers[candidate]
            if (rack not in racks_used or len(racks_used) == n_racks) and candidate not in replicas:
                replicas.append(candidate)
                racks_used.add(rack)
        assignment[p] = tuple(replicas)
    return assignment


def rack_alternated(brokers: Mapping[int, str]) -> list[int]:
    """The brokers taken one rack at a time, racks in name order and each rack's brokers
    by id (Kafka's getRackAlternatedBrokerList): neighbours sit on different racks for as
    long as more than one rack has brokers left."""
    by_rack: dict[str, list[int]] = {}
    for broker_id in sorted(brokers):
        by_rack.setdefault(brokers[broker_id], []).append(broker_id)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    rounds = max((len(column) for column in columns), default=0)
    return [column[r] for r in range(rounds) for column in columns if r < len(column)]


def add_partitions(brokers: Mapping[int, str | None], existing: Sequence[Sequence[int]],
                   count: int, *, assignments: Sequence[Sequence[int]] | None = None,
                   ignore_racks: bool = False) -> Assignment:
    """The replicas of the partitions CreatePartitions adds to a topic whose partition p
    has replicas existing[p], to reach `count`: the manual `assignments` (one per new
    partition) once checked, or else Kafka's placement continued from the topic's
    pattern, with its replication factor (that of partition 0) and its partition 0's
    first replica as the start index and the shift. The leaders continue the topic's
    round-robin; the followers' shift starts afresh (Kafka does not count the steps it
    took at multiples of n before the new partitions)."""
    if not existing:
        raise BrokerError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "the topic has no partitions")
    added = count - len(existing)
    if added < 0:
        raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                          f"topic currently has {len(existing)} partitions, which is higher "
                          f"than the requested {count}")
    if added == 0:
        raise BrokerError(ErrorCode.INVALID_PARTITIONS,
                          f"topic already has {len(existing)} partitions")
    replication_factor = len(existing[0])
    if assignments is not None:
        unknown = sorted({b for replicas in assignments for b in replicas} - set(brokers))
        if unknown:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"unknown broker(s) in replica assignment: {unknown}")
        if len(assignments) != added:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"increasing the number of partitions by {added} but "
                              f"{len(assignments)} assignments provided")
        new = dict(enumerate((tuple(replicas) for replicas in assignments), len(existing)))
        for partition, replicas in new.items():
            _check_replicas(brokers, partition, replicas, replication_factor)
        return new
    # Kafka takes the first broker, in id order, at or above partition 0's leader; for a
    # rack-aware placement that index is then used in the rack-alternated list all the same.
    ids = sorted(brokers)
    start = next((i for i, b in enumerate(ids) if b >= existing[0][0]), 0)
    return assign_replicas(brokers, added, replication_factor, start_index=start,
                           replica_shift=start, first_partition=len(existing),
                           ignore_racks=ignore_racks)


def manual_assignment(brokers: Collection[int],
                      assignments: Iterable[tuple[int, Sequence[int]]]) -> Assignment:
    """A CreateTopics manual assignment, (partition index, broker ids) pairs, checked as
    Kafka checks it: each partition once, indexes 0 .. n-1, each replica a known broker
    named once, one replication factor for all."""
    assignment: Assignment = {}
    replication_factor = None
    for partition, replicas in assignments:
        if partition in assignment:
            raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                              f"found multiple manual assignments for partition {partition}")
        if replication_factor is None:
            replication_factor = len(replicas)
        _check_replicas(brokers, partition, replicas, replication_factor)
        assignment[partition] = tuple(replicas)
    if not assignment or sorted(assignment) != list(range(len(assignment))):
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          "partitions should be a consecutive 0-based integer sequence")
    return assignment


def _racks(brokers: Mapping[int, str | None], ignore_racks: bool) -> Mapping[int, str] | None:
    """The racks to place by, or None for a rack-unaware placement. Kafka refuses a mix
    with an AdminOperationException, which is no API error: clients see
    UNKNOWN_SERVER_ERROR."""
    if ignore_racks or all(rack is None for rack in brokers.values()):
        return None
    without = sorted(b for b, rack in brokers.items() if rack is None)
    if without:
        raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR,
                          f"not all brokers have rack information (none for {without}): "
                          "set broker.rack on every broker, or on none")
    return brokers


def _walk(n: int, partitions: int, start_index: int, replica_shift: int,
          first_partition: int) -> Iterator[tuple[int, int, int]]:
    """(partition, index of its first replica, follower shift) for each partition placed,
    stepped as Kafka steps them from `first_partition`."""
    shift = replica_shift
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        yield p, (p + start_index) % n, shift


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """Where the j-th follower (0-based) of a partition led from index `first` goes: never
    on `first` itself."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def _check_replicas(brokers: Collection[int], partition: int, replicas: Sequence[int],
                    replication_factor: int) -> None:
    if not replicas:
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"partition {partition} has an empty replica list")
    unknown = sorted(set(replicas) - set(brokers))
    if unknown:
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"partition {partition} names unknown broker(s) {unknown}")
    if len(set(replicas)) != len(replicas):
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"partition {partition} names a broker more than once: {list(replicas)}")
    if len(replicas) != replication_factor:
        raise BrokerError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                          f"partition {partition} has {len(replicas)} replicas, the topic's "
                          f"other partitions {replication_factor}")


# -- moving existing replicas (sluice reassign --decommission, --rebalance) ------------------

Placement = dict[tuple[str, int], tuple[int, ...]]  # (topic, partition) -> replicas, leader first


def drain_broker(placement: Mapping[tuple[str, int], Sequence[int]], retiring: int,
                 brokers: Mapping[int, str | None], *, ignore_racks: bool = False) -> Placement:
    """`placement` with every replica on `retiring` moved to one of `brokers` (the ones
    to keep: `retiring` is not among them) that holds no replica of that partition:
    rack-aware, to a rack the partition's other replicas are not on while there is one,
    and to the broker holding the fewest replicas (then the fewest of the topic's).
    The moved replica keeps its place in the list; then the partitions moved have their
    preferred leaders spread (spread_leaders). Nothing else moves."""
    racks = _racks(brokers, ignore_racks)
    moved = dict(placement)
    replicas_of = _replica_counts(moved, brokers)
    for tp in sorted(tp for tp, replicas in placement.items() if retiring in replicas):
        replicas = tuple(placement[tp])
        others = [b for b in replicas if b != retiring]
        candidates = [b for b in brokers if b not in others]
        if not candidates:
            raise BrokerError(ErrorCode.INVALID_REPLICATION_FACTOR,
                              f"no broker to take the replica of {tp[0]}-{tp[1]} off broker {retiring}: "
                              f"its other replicas are on {sorted(others)}, the brokers left are "
                              f"{sorted(brokers)}")
        target = min(_rack_spreading(candidates, others, racks),
                     key=lambda b: (replicas_of[b], replicas_of[(tp[0], b)], b))
        moved[tp] = tuple(target if b == retiring else b for b in replicas)
        replicas_of.update((target, (tp[0], target)))
    return spread_leaders(moved, brokers,
                          movable={tp for tp, replicas in placement.items() if retiring in replicas})


def rebalance(placement: Mapping[tuple[str, int], Sequence[int]],
              brokers: Mapping[int, str | None], *, ignore_racks: bool = False) -> Placement:
    """`placement` with replicas moved until every broker of `brokers` holds as many as
    any other, give or take one, and then preferred leaders likewise (spread_leaders).
    A replica moves only off a broker holding at least two more than the one it moves
    to, so that brokers not over their fair share keep theirs: from the fullest broker
    to the emptiest that can take it (holds no replica of the partition, and spans the
    partition over no fewer racks), choosing the partition of the topic the first holds
    most more of than the second, a follower before a leader. Replicas on brokers not in
    `brokers` stay where they are."""
    racks = _racks(brokers, ignore_racks)
    moved = {tp: tuple(replicas) for tp, replicas in placement.items()}
    replicas_of = _replica_counts(moved, brokers)

    def move() -> bool:
        for full in sorted(brokers, key=lambda b: (-replicas_of[b], b)):
            for empty in sorted(brokers, key=lambda b: (replicas_of[b], b)):
                if replicas_of[full] - replicas_of[empty] < 2:
                    break
                movable = [tp for tp, replicas in moved.items() if full in replicas and empty not in replicas
                           and _racks_kept(replicas, full, empty, racks)]
                if movable:
                    tp = min(movable, key=lambda tp: (replicas_of[(tp[0], empty)] - replicas_of[(tp[0], full)],
                                                      moved[tp][0] == full, tp))
                    moved[tp] = tuple(empty if b == full else b for b in moved[tp])
                    replicas_of.subtract((full, (tp[0], full)))
                    replicas_of.update((empty, (tp[0], empty)))
                    return True
        return False

    while move():  # each move lowers the sum of the squared counts: it ends
        pass
    return spread_leaders(moved, brokers)


def spread_leaders(placement: Mapping[tuple[str, int], Sequence[int]], brokers: Collection[int],
                   movable: Collection[tuple[str, int]] | None = None) -> Placement:
    """`placement` with the preferred leaders (first replicas) of the `movable` partitions
    (None: all) changed so that each topic's, then all partitions', are spread over
    `brokers` as evenly as their replicas allow. A broker leading at least two more than
    another hands one over along a chain: it gives a partition it leads to one of that
    partition's replicas, which gives one of its own to the next, ..., up to the broker
    leading fewer (the new leader goes first, the other replicas keep their order)."""
    moved = {tp: tuple(replicas) for tp, replicas in placement.items()}
    movable = set(moved if movable is None else movable)
    for topic in sorted({topic for topic, _ in movable}):
        _shift_leaders(moved, brokers, {tp for tp in moved if tp[0] == topic},
                       {tp for tp in movable if tp[0] == topic})
    _shift_leaders(moved, brokers, moved, movable)
    return moved


def _shift_leaders(placement: Placement, brokers: Collection[int], counted: Collection[tuple[str, int]],
                   movable: Collection[tuple[str, int]]) -> None:
    """spread_leaders over the preferred leaderships of the `counted` partitions, in place."""
    leaders_of = Counter({b: 0 for b in brokers})
    leaders_of.update(placement[tp][0] for tp in counted if placement[tp])
    led_by: dict[int, list[tuple[str, int]]] = {}
    for tp in sorted(movable):
        led_by.setdefault(placement[tp][0], []).append(tp)

    def shift() -> bool:
        for busy in sorted(brokers, key=lambda b: (-leaders_of[b], b)):
            reached = {busy: None}  # broker -> (the partition it would take, from whom)
            frontier = [busy]
            for giver in frontier:  # breadth first: the shortest chains
                for tp in led_by.get(giver, ()):
                    for taker in placement[tp][1:]:
                        if taker in brokers and taker not in reached:
                            reached[taker] = (tp, giver)
                            frontier.append(taker)
            idle = min(reached, key=lambda b: (leaders_of[b], b))
            if leaders_of[busy] - leaders_of[idle] >= 2:
                taker = idle
                while taker != busy:
                    tp, giver = reached[taker]
                    placement[tp] = (taker, *(b for b in placement[tp] if b != taker))
                    led_by[giver].remove(tp)
                    led_by.setdefault(taker, []).append(tp)
                    taker = giver
                leaders_of[busy] -= 1
                leaders_of[idle] += 1
                return True
        return False

    while shift():  # each chain lowers the sum of the squared counts: it ends
        pass


def _replica_counts(placement: Mapping[tuple[str, int], Sequence[int]],
                    brokers: Collection[int]) -> Counter:
    """How many replicas each of `brokers` holds (key: broker id) and holds of each topic
    (key: (topic, broker id))."""
    counts: Counter = Counter({b: 0 for b in brokers})
    counts.update(key for (topic, _), replicas in placement.items() for b in replicas if b in brokers
                  for key in (b, (topic, b)))
    return counts


def _rack_spreading(candidates: Sequence[int], others: Iterable[int],
                    racks: Mapping[int, str] | None) -> Sequence[int]:
    """The candidates on a rack none of `others` is on; all of them when there is none (or
    no racks)."""
    if racks is None:
        return candidates
    used = {racks.get(b) for b in others}
    return [b for b in candidates if racks[b] not in used] or candidates


def _racks_kept(replicas: Sequence[int], leaving: int, joining: int,
                racks: Mapping[int, str] | None) -> bool:
    """Whether replacing `leaving` by `joining` spans the partition over as many racks."""
    if racks is None:
        return True
    others = [b for b in replicas if b != leaving]
    return (len({racks.get(b) for b in (*others, joining)})
            >= len({racks.get(b) for b in (*others, leaving)}))
