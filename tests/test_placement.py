"""Replica placement (`broker.cluster.placement`): Kafka's own expectations, then the
properties every placement must have, then the errors.

Then the plans of `sluice reassign --decommission` and `--rebalance` (drain_broker,
rebalance, spread_leaders), on clusters placed as Kafka places topics.

The known assignments are the expectations of Apache Kafka 3.8's unit tests
(core/src/test/scala/unit/kafka/admin/AdminRackAwareTest.scala, AddPartitionsTest.scala,
core/src/test/scala/unit/kafka/zk/AdminZkClientTest.scala) and the examples in the
documentation of AdminUtils.assignReplicasToBrokers, restated as inputs and outputs.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from wire.error_codes import ErrorCode

from broker.cluster.placement import (
    add_partitions, assign_rack_unaware, assign_replicas, drain_broker, manual_assignment,
    rack_alternated, rebalance, spread_leaders,
)
from broker.errors import BrokerError

# AdminRackAwareTest's rack maps.
SIX_BROKERS_THREE_RACKS = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
DOC_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
UNEVEN_THREE_RACKS = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}


def no_racks(ids) -> dict[int, None]:
    return {broker_id: None for broker_id in ids}


def leader_counts(assignment) -> Counter:
    return Counter(replicas[0] for replicas in assignment.values())


def replica_counts(assignment) -> Counter:
    return Counter(b for replicas in assignment.values() for b in replicas)


def rejected(code: ErrorCode, call, *args, **kwargs) -> str:
    with pytest.raises(BrokerError) as info:
        call(*args, **kwargs)
    assert info.value.code == code, info.value
    return str(info.value)


# Kafka's expectations.

def test_rack_unaware_as_kafka_places_ten_partitions_on_five_brokers():
    """AdminRackAwareTest.testReplicaAssignment (fixed start index 0): the followers'
    offset grows by one from partition 5, the first multiple of the broker count."""
    assert assign_replicas(no_racks(range(5)), 10, 3, start_index=0, replica_shift=0) == {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }


def test_rack_alternated_list_as_kafka_builds_it():
    assert rack_alternated(DOC_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({b: r for b, r in DOC_RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    # The example in getRackAlternatedBrokerList's documentation.
    three_by_three = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated(three_by_three) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_as_kafka_places_seven_partitions():
    """testGetRackAlternatedBrokerListAndAssignReplicasToBrokers: round-robin over the
    alternated list, then partition 6 shifts its followers (0,4,2, not 0,3,1 again)."""
    assert assign_replicas(DOC_RACKS, 7, 3, start_index=0, replica_shift=0) == {
        0: (0, 3, 1), 1: (3, 1, 5), 2: (1, 5, 4), 3: (5, 4, 2), 4: (4, 2, 0), 5: (2, 0, 3),
        6: (0, 4, 2),
    }


def test_add_partitions_as_kafka_places_them_on_all_servers():
    """AddPartitionsTest.testReplicaPlacementAllServers: 4 brokers, partition 0 on
    (2, 3, 0, 1), increased to 7 partitions: the leaders and replica sets Kafka checks
    (the order, too, is the one Kafka's test lists)."""
    added = add_partitions(no_racks(range(4)), [(2, 3, 0, 1)], 7)
    assert added == {1: (3, 2, 0, 1), 2: (0, 3, 1, 2), 3: (1, 0, 2, 3), 4: (2, 3, 0, 1),
                     5: (3, 0, 1, 2), 6: (0, 1, 2, 3)}
    assert [added[p][0] for p in range(1, 7)] == [3, 0, 1, 2, 3, 0]


def test_add_partitions_as_kafka_places_them_on_some_servers():
    """AddPartitionsTest.testReplicaPlacementPartialServers: partition 0 on (1, 2),
    increased to 3: partition 1 led by 2 on {0, 2}, partition 2 led by 3 on {1, 3}."""
    assert add_partitions(no_racks(range(4)), [(1, 2)], 3) == {1: (2, 0), 2: (3, 1)}


def test_add_partitions_with_kafkas_manual_assignment():
    """AddPartitionsTest.testManualAssignmentOfReplicas."""
    assert add_partitions(no_racks(range(4)), [(1, 2)], 3, assignments=[[0, 1], [2, 3]]) == {
        1: (0, 1), 2: (2, 3)}


def test_manual_assignment_kafka_accepts():
    """AdminZkClientTest.testManualReplicaAssignment's good assignment."""
    assert manual_assignment(range(5), [(0, [0, 1, 2]), (1, [1, 2, 3])]) == {
        0: (0, 1, 2), 1: (1, 2, 3)}


# Kafka's checkReplicaDistribution cases: (racks, partitions, RF, start index or None for
# random, whether partitions must span RF racks, leaders be even, replicas be even).
KAFKA_DISTRIBUTION_CASES = {
    "testAssignmentWithRackAware": (SIX_BROKERS_THREE_RACKS, 6, 3, 2, True, True, True),
    "testAssignmentWithRackAwareWithRandomStartIndex":
        (SIX_BROKERS_THREE_RACKS, 6, 3, None, True, True, True),
    "testAssignmentWithRackAwareWithUnevenReplicas":
        (SIX_BROKERS_THREE_RACKS, 13, 3, 0, True, False, False),
    "testAssignmentWithRackAwareWithUnevenRacks":
        ({0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}, 12, 3, None,
         True, True, False),
    "testAssignmentWith2ReplicasRackAware":
        (SIX_BROKERS_THREE_RACKS, 12, 2, None, True, True, True),
    "testAssignmentWith2ReplicasRackAwareWith6Partitions":
        (SIX_BROKERS_THREE_RACKS, 6, 2, None, True, True, True),
    "testAssignmentWith2ReplicasRackAwareWith6PartitionsAnd3Brokers":
        ({0: "rack1", 1: "rack2", 4: "rack3"}, 3, 2, None, True, True, True),
    "testLargeNumberPartitionsAssignment":
        ({0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1", 6: "rack1",
          7: "rack2", 8: "rack2", 9: "rack3", 10: "rack1", 11: "rack3"}, 96, 3, None,
         True, True, True),
    "testSkipBrokerWithReplicaAlreadyAssigned":
        ({0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}, 6, 4, 2, False, False, False),
}


@pytest.mark.parametrize("case", sorted(KAFKA_DISTRIBUTION_CASES))
def test_kafkas_rack_aware_distribution_cases(case):
    racks, partitions, rf, start, spans_racks, even_leaders, even_replicas = \
        KAFKA_DISTRIBUTION_CASES[case]
    for seed in range(20 if start is None else 1):
        assignment = assign_replicas(racks, partitions, rf, start_index=start,
                                     replica_shift=start, rng=random.Random(seed))
        assert sorted(assignment) == list(range(partitions))
        for replicas in assignment.values():
            assert len(replicas) == len(set(replicas)) == rf
            if spans_racks:
                assert len({racks[b] for b in replicas}) == rf
        if even_leaders:
            assert set(leader_counts(assignment).values()) == {partitions // len(racks)}
        if even_replicas:
            assert set(replica_counts(assignment).values()) == {partitions * rf // len(racks)}


def test_kafkas_rack_aware_expansion_case():
    """testRackAwareExpansion: partitions 12..23 of a topic on brokers 6..11."""
    racks = {6: "rack1", 7: "rack2", 8: "rack2", 9: "rack3", 10: "rack3", 11: "rack1"}
    for seed in range(20):
        assignment = assign_replicas(racks, 12, 2, first_partition=12, rng=random.Random(seed))
        assert sorted(assignment) == list(range(12, 24))
        assert all(racks[a] != racks[b] for a, b in assignment.values())
        assert set(leader_counts(assignment).values()) == {2}
        assert set(replica_counts(assignment).values()) == {4}


@pytest.mark.parametrize("racks, rf, racks_per_partition", [
    (UNEVEN_THREE_RACKS, 5, 3),  # testMoreReplicasThanRacks
    (UNEVEN_THREE_RACKS, 2, 2),  # testLessReplicasThanRacks
    ({b: "rack1" for b in range(6)}, 3, 1),  # testSingleRack
])
def test_kafkas_rack_count_cases(racks, rf, racks_per_partition):
    for seed in range(20):
        assignment = assign_replicas(racks, 6, rf, rng=random.Random(seed))
        assert all(len({racks[b] for b in replicas}) == racks_per_partition
                   for replicas in assignment.values())
        assert set(leader_counts(assignment).values()) == {1}


# Properties.

broker_ids = st.lists(st.integers(0, 1000), min_size=1, max_size=9, unique=True)


@st.composite
def placements(draw, with_racks: bool):
    """(brokers, partitions, RF, start index, shift, first partition)."""
    ids = draw(broker_ids)
    if with_racks:
        names = draw(st.lists(st.sampled_from("abcde"), min_size=len(ids), max_size=len(ids)))
        brokers = dict(zip(ids, names))
    else:
        brokers = no_racks(ids)
    n = len(ids)
    return (brokers, draw(st.integers(1, 40)), draw(st.integers(1, n)),
            draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.integers(0, 30)))


def check_common(brokers, partitions, rf, first_partition, assignment) -> None:
    """Every placement: the partitions asked for, RF distinct known brokers each, and
    leaders dealt round-robin (each broker leads partitions // n or one more)."""
    n = len(brokers)
    assert sorted(assignment) == list(range(first_partition, first_partition + partitions))
    for replicas in assignment.values():
        assert len(replicas) == len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
    leads = leader_counts(assignment)
    assert all(leads[b] in (partitions // n, partitions // n + 1) for b in brokers)


@settings(max_examples=300, deadline=None)
@given(placements(with_racks=False))
def test_rack_unaware_properties(case):
    brokers, partitions, rf, start, shift, first_partition = case
    assignment = assign_replicas(brokers, partitions, rf, start_index=start,
                                 replica_shift=shift, first_partition=first_partition)
    check_common(brokers, partitions, rf, first_partition, assignment)
    assert assignment == assign_rack_unaware(sorted(brokers), partitions, rf, start, shift,
                                             first_partition)
    n = len(brokers)
    if first_partition % n == 0 and partitions % n == 0:
        # Whole rounds of n partitions: each broker holds RF replicas per round.
        assert set(replica_counts(assignment).values()) == {partitions * rf // n}


@settings(max_examples=100, deadline=None)
@given(broker_ids, st.data())
def test_rack_unaware_from_start_zero_is_i_plus_j_mod_n(ids, data):
    """The issue's statement: from start index 0 and shift 0, replica j of partition i
    (i < n) is on broker (i + j) mod n of the sorted ids."""
    n, ordered = len(ids), sorted(ids)
    rf = data.draw(st.integers(1, n))
    assignment = assign_replicas(no_racks(ids), n, rf, start_index=0, replica_shift=0)
    assert assignment == {i: tuple(ordered[(i + j) % n] for j in range(rf)) for i in range(n)}


@settings(max_examples=300, deadline=None)
@given(placements(with_racks=True))
def test_rack_aware_properties(case):
    brokers, partitions, rf, start, shift, first_partition = case
    assignment = assign_replicas(brokers, partitions, rf, start_index=start,
                                 replica_shift=shift, first_partition=first_partition)
    check_common(brokers, partitions, rf, first_partition, assignment)
    racks = set(brokers.values())
    for replicas in assignment.values():
        # Distinct racks while they last, then every rack holds one.
        assert len({brokers[b] for b in replicas}) == min(rf, len(racks))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.data())
def test_rack_aware_spreads_replicas_evenly_over_equal_racks(n_racks, per_rack, rounds, data):
    """With as many brokers on every rack and whole rounds of partitions, every broker
    holds the same number of replicas (what AdminUtils' documentation promises for the
    ideal case, and what Kafka's distribution tests check)."""
    ids = data.draw(st.permutations(range(n_racks * per_rack)))
    brokers = {b: f"rack{i % n_racks}" for i, b in enumerate(ids)}
    n = len(brokers)
    rf = data.draw(st.integers(1, n))
    start, shift = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    assignment = assign_replicas(brokers, n * rounds, rf, start_index=start, replica_shift=shift)
    assert set(replica_counts(assignment).values()) == {rounds * rf}


@settings(max_examples=100, deadline=None)
@given(placements(with_racks=False), st.integers(1, 20))
def test_add_partitions_continues_the_pattern(case, more):
    """A topic placed from start index s (with shift s, as Kafka's fixed start gives both)
    and extended later has the leaders it would have had if created at its final size, and
    the same followers too while it had at most n partitions: Kafka starts the new
    partitions' shift at s again, without the steps taken at multiples of n before them."""
    brokers, partitions, rf, start, _, _ = case
    whole = assign_replicas(brokers, partitions + more, rf, start_index=start, replica_shift=start)
    existing = [whole[p] for p in range(partitions)]
    added = add_partitions(brokers, existing, partitions + more)
    assert {p: replicas[0] for p, replicas in added.items()} == {
        p: whole[p][0] for p in range(partitions, partitions + more)}
    if partitions <= len(brokers):
        assert added == {p: whole[p] for p in range(partitions, partitions + more)}


def test_add_partitions_restarts_the_follower_shift():
    """Four partitions on three brokers from start 0: partition 3 took shift 1; partition 4
    added later is placed with shift 0 again, where a topic created with five partitions
    has (1, 0) for it."""
    brokers = no_racks(range(3))
    existing = list(assign_replicas(brokers, 4, 2, start_index=0, replica_shift=0).values())
    assert existing == [(0, 1), (1, 2), (2, 0), (0, 2)]
    assert assign_replicas(brokers, 5, 2, start_index=0, replica_shift=0)[4] == (1, 0)
    assert add_partitions(brokers, existing, 5) == {4: (1, 2)}


@settings(max_examples=100, deadline=None)
@given(placements(with_racks=True), st.integers(1, 20))
def test_add_partitions_keeps_the_replication_factor(case, more):
    brokers, partitions, rf, start, shift, _ = case
    existing = list(assign_replicas(brokers, partitions, rf, start_index=start,
                                    replica_shift=shift).values())
    added = add_partitions(brokers, existing, partitions + more)
    check_common(brokers, more, rf, partitions, added)


def test_reproducible_with_a_seeded_random():
    """Start index and shift are drawn from the given Random, start first: a seed
    reproduces a placement."""
    brokers = no_racks([3, 1, 4, 9, 7])
    for seed in range(20):
        drawn = random.Random(seed)
        start, shift = drawn.randrange(5), drawn.randrange(5)
        placed = assign_replicas(brokers, 12, 3, rng=random.Random(seed))
        assert placed == assign_replicas(brokers, 12, 3, rng=random.Random(seed))
        assert placed == assign_replicas(brokers, 12, 3, start_index=start, replica_shift=shift)
    leaders = {assign_replicas(brokers, 1, 1, rng=random.Random(seed))[0][0] for seed in range(50)}
    assert leaders == {1, 3, 4, 7, 9}


def test_racks_decide_the_placement():
    """Racks on every broker: rack-aware; on none, or ignored: rack-unaware over the
    sorted ids."""
    unaware = assign_rack_unaware([0, 1, 2, 3, 4, 5], 6, 3, 0, 0)
    assert assign_replicas(no_racks(range(6)), 6, 3, start_index=0, replica_shift=0) == unaware
    assert assign_replicas(DOC_RACKS, 6, 3, start_index=0, replica_shift=0,
                           ignore_racks=True) == unaware
    assert assign_replicas(DOC_RACKS, 6, 3, start_index=0, replica_shift=0) != unaware


# Errors.

def test_partitions_and_replication_factor_out_of_range():
    brokers = no_racks(range(5))
    for partitions in (0, -1):
        rejected(ErrorCode.INVALID_PARTITIONS, assign_replicas, brokers, partitions, 1)
    # AdminRackAwareTest.testReplicaAssignment: 0 and 6 on five brokers.
    for rf in (0, -1, 6):
        rejected(ErrorCode.INVALID_REPLICATION_FACTOR, assign_replicas, brokers, 10, rf)
    rejected(ErrorCode.INVALID_REPLICATION_FACTOR, assign_replicas, {}, 1, 1)
    # Kafka checks the partition count first.
    rejected(ErrorCode.INVALID_PARTITIONS, assign_replicas, brokers, 0, 0)


def test_a_mix_of_brokers_with_and_without_racks_is_refused():
    """Kafka's AdminOperationException, which clients see as UNKNOWN_SERVER_ERROR;
    ignoring racks places the brokers as if none had one."""
    brokers = {0: "rack1", 1: None, 2: "rack2", 3: None}
    message = rejected(ErrorCode.UNKNOWN_SERVER_ERROR, assign_replicas, brokers, 4, 2)
    assert "rack" in message and "[1, 3]" in message
    rejected(ErrorCode.UNKNOWN_SERVER_ERROR, add_partitions, brokers, [(0, 1)], 3)
    assert assign_replicas(brokers, 4, 2, start_index=1, replica_shift=0, ignore_racks=True) == \
        assign_rack_unaware([0, 1, 2, 3], 4, 2, 1, 0)


@pytest.mark.parametrize("assignments", [
    [(0, [0, 0])],                                       # a broker twice
    [(0, [0, 1]), (1, [0])],                             # replication factors differ
    [(1, [1, 2]), (2, [1, 2])],                          # not 0-based
    [(-1, [1, 2]), (1, [1, 2]), (2, [1, 2]), (4, [1, 2])],
    [(1, [0, 1]), (2, [1, 0])],                          # AddPartitionsTest's new-topic6
    [(2, [0, 1]), (3, [1, 0])],                          # and new-topic7
    [(0, [0, 1]), (0, [1, 2])],                          # a partition twice
    [(0, [0, 5])],                                       # an unknown broker
    [(0, [])],                                           # no replicas
    [],                                                  # no partitions
])
def test_manual_assignments_kafka_refuses(assignments):
    """AdminZkClientTest.testManualReplicaAssignment, AddPartitionsTest's
    testMissingPartitionsInCreateTopics, and the checks of Kafka's controller."""
    rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, manual_assignment, range(5), assignments)


def test_add_partitions_refusals():
    brokers = no_racks(range(4))
    existing = [(0, 1)]
    rejected(ErrorCode.INVALID_PARTITIONS, add_partitions, brokers, [(0, 1), (1, 2)], 1)
    rejected(ErrorCode.INVALID_PARTITIONS, add_partitions, brokers, existing, 1)
    rejected(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, add_partitions, brokers, [], 2)
    # AddPartitionsTest.testWrongReplicaCount and testMissingPartitionsInCreatePartitions.
    rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, add_partitions, brokers, existing, 2,
             assignments=[[0, 1, 2]])
    message = rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, add_partitions, brokers, existing,
                       3, assignments=[[0, 1]])
    assert "by 2 but 1" in message
    for replicas in ([0, 9], [1, 1], []):
        rejected(ErrorCode.INVALID_REPLICA_ASSIGNMENT, add_partitions, brokers, existing, 2,
                 assignments=[replicas])
    # The topic's replication factor must still fit the brokers there are.
    rejected(ErrorCode.INVALID_REPLICATION_FACTOR, add_partitions, no_racks([0]), existing, 2)


# Moving existing replicas: draining a broker, rebalancing, spreading preferred leaders.

def cluster_placement(brokers, topics, rng: random.Random) -> dict[tuple[str, int], tuple[int, ...]]:
    """Topics (partitions, RF) placed over `brokers` as Kafka creates them."""
    return {(f"t{i}", p): replicas for i, (partitions, rf) in enumerate(topics)
            for p, replicas in assign_replicas(brokers, partitions, rf, rng=rng).items()}


def spread(counts: Counter, brokers) -> int:
    return max(counts[b] for b in brokers) - min(counts[b] for b in brokers)


def rack_span(brokers, replicas) -> int:
    return len({brokers[b] for b in replicas})


@st.composite
def clusters(draw, min_brokers: int = 2):
    """(brokers {id: rack or None}, topics [(partitions, RF)], seed): every broker with a
    rack (one of as many as there are brokers, at most 3) or none."""
    n = draw(st.integers(min_brokers, 7))
    if draw(st.booleans()):
        brokers = {b: f"rack{draw(st.integers(0, min(n, 3) - 1))}" for b in range(n)}
    else:
        brokers = no_racks(range(n))
    topics = draw(st.lists(st.tuples(st.integers(1, 12), st.integers(1, n - 1)), min_size=1, max_size=4))
    return brokers, topics, draw(st.integers(0, 1 << 32))


def test_draining_a_broker_as_an_operator_expects_it():
    """Four brokers, a topic of 8 partitions with RF 3 placed as Kafka places it: broker 3
    retired, the three others hold 8 replicas each and lead 3, 3 and 2 partitions; a
    partition broker 3 was not on is left alone."""
    before = {("t", p): replicas for p, replicas in
              assign_replicas(no_racks(range(4)), 8, 3, start_index=0, replica_shift=0).items()}
    after = drain_broker(before, 3, no_racks(range(3)))
    assert replica_counts(after) == {0: 8, 1: 8, 2: 8}
    assert sorted(leader_counts(after).values()) == [2, 3, 3]
    assert after[("t", 0)] == before[("t", 0)] == (0, 1, 2)


@settings(max_examples=300, deadline=None)
@given(clusters(), st.data())
def test_drain_broker_properties(cluster, data):
    """Every replica of the retired broker moves to a broker left, one that held no
    replica of the partition, keeping the replication factor and, with racks, spanning
    as many racks as the brokers left allow; nothing else moves, and the order changes
    only in the partitions that moved."""
    brokers, topics, seed = cluster
    before = cluster_placement(brokers, topics, random.Random(seed))
    retiring = data.draw(st.sampled_from(sorted(brokers)))
    left = {b: rack for b, rack in brokers.items() if b != retiring}
    after = drain_broker(before, retiring, left)
    assert set(after) == set(before)
    for tp, replicas in after.items():
        old = before[tp]
        if retiring not in old:
            assert replicas == old
            continue
        assert len(replicas) == len(set(replicas)) == len(old) and set(replicas) <= set(left)
        assert set(old) - set(replicas) == {retiring} and len(set(replicas) - set(old)) == 1
        if brokers[retiring] is not None:
            assert rack_span(brokers, replicas) >= min(rack_span(brokers, old), len(set(left.values())))


@settings(max_examples=300, deadline=None)
@given(clusters(min_brokers=3), st.integers(1, 3))
def test_rebalance_properties(cluster, added):
    """Brokers added to a cluster get its replicas until every broker holds as many as
    any other, give or take one, moving as few as that takes: no broker both gives and
    takes replicas, one that gives keeps at least its fair share and one that takes gets
    at most its fair share. With every replication factor at least 2 the preferred
    leaders are as even. With racks, no partition spans fewer racks (which may leave the
    counts uneven: a broker alone on its rack holds a replica of every partition)."""
    brokers, topics, seed = cluster
    before = cluster_placement(brokers, topics, random.Random(seed))
    grown = {**brokers, **{len(brokers) + i: brokers[0] for i in range(added)}}
    after = rebalance(before, grown)
    assert set(after) == set(before)
    for tp, replicas in after.items():
        assert len(replicas) == len(set(replicas)) == len(before[tp]) and set(replicas) <= set(grown)
        if brokers[0] is not None:
            assert rack_span(grown, replicas) >= rack_span(grown, before[tp])
    if brokers[0] is not None:
        return
    old, new = replica_counts(before), replica_counts(after)
    total = sum(new.values())
    floor, ceiling = total // len(grown), -(-total // len(grown))
    for b in grown:
        held = {tp for tp, replicas in before.items() if b in replicas}
        holds = {tp for tp, replicas in after.items() if b in replicas}
        assert held <= holds or holds <= held, f"broker {b} gave and took replicas"
        if new[b] < old[b]:
            assert new[b] >= floor
        if new[b] > old[b]:
            assert new[b] <= ceiling
    assert spread(new, grown) <= 1
    if all(rf >= 2 for _, rf in topics):
        assert spread(leader_counts(after), grown) <= 1


def test_rebalance_leaves_a_balanced_cluster_alone():
    before = {("t", p): replicas for p, replicas in
              assign_replicas(no_racks(range(4)), 8, 3, start_index=1, replica_shift=2).items()}
    assert rebalance(before, no_racks(range(4))) == before


def test_spread_leaders_hands_over_along_a_chain():
    """Broker 1 leads two partitions and broker 3 none, but no partition broker 1 leads
    has a replica on 3: 2 takes one of 1's and 3 one of 2's."""
    before = {("t", 0): (1, 0), ("t", 1): (2, 3), ("t", 2): (0, 3), ("t", 3): (1, 2)}
    after = spread_leaders(before, range(4))
    assert sorted(leader_counts(after).values()) == [1, 1, 1, 1]
    assert {tp: set(replicas) for tp, replicas in after.items()} == {
        tp: set(replicas) for tp, replicas in before.items()}
    assert spread_leaders(before, range(4), movable=[("t", 0)]) == before  # nowhere to go alone


def test_draining_refuses_a_partition_with_nowhere_to_go():
    message = rejected(ErrorCode.INVALID_REPLICATION_FACTOR, drain_broker,
                       {("t", 0): (0, 1, 2)}, 2, no_racks(range(2)))
    assert "t-0" in message and "broker 2" in message
