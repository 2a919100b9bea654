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
"""

from __future__ import annotations

import random
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
