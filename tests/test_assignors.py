"""The KIP-848 server-side assignors (broker/groups/assignors.py), as pure functions:
`uniform` balances (counts of like-subscribed members differ by at most one) and is
sticky (a member leaving moves only its partitions, one joining takes only what balance
needs); `range` gives each topic's subscribers consecutive ranges in member id order,
the same numbers across co-partitioned topics."""

from __future__ import annotations

import uuid

from broker.config import assignor_name
from broker.groups.assignors import assign

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def owners(assignment) -> dict[tuple[uuid.UUID, int], str]:
    found = {}
    for member, topics in assignment.items():
        for topic_id, indexes in topics.items():
            for index in indexes:
                assert (topic_id, index) not in found, f"{(topic_id, index)} assigned twice"
                found[(topic_id, index)] = member
    return found


def counts(assignment) -> dict[str, int]:
    return {member: sum(len(p) for p in topics.values()) for member, topics in assignment.items()}


def test_uniform_balances_and_moves_only_what_a_leave_or_join_needs():
    members = [f"m{i:02}" for i in range(10)]
    first = assign("uniform", {m: {T1} for m in members}, {T1: 100}, {})
    assert len(owners(first)) == 100 and set(counts(first).values()) == {10}

    # m03 leaves: its 10 partitions go to the others, nobody else's move.
    left = [m for m in members if m != "m03"]
    second = assign("uniform", {m: {T1} for m in left}, {T1: 100}, first)
    before, after = owners(first), owners(second)
    assert len(after) == 100 and set(counts(second).values()) <= {11, 12}
    assert {tp for tp in after if after[tp] != before[tp]} == {tp for tp, m in before.items() if m == "m03"}

    # m10 joins: it takes about a tenth, every other member keeps what it had but that.
    third = assign("uniform", {m: {T1} for m in left + ["m10"]}, {T1: 100}, second)
    assert set(counts(third).values()) <= {9, 10} and counts(third)["m10"] >= 9
    moved = {tp for tp, m in owners(third).items() if m != after[tp]}
    assert all(owners(third)[tp] == "m10" for tp in moved)


def test_uniform_gives_each_partition_to_a_subscriber():
    subscriptions = {"a": {T1}, "b": {T1, T2}, "c": {T2}}
    result = owners(assign("uniform", subscriptions, {T1: 4, T2: 4}, {}))
    assert len(result) == 8
    assert all(topic_id in subscriptions[member] for (topic_id, _), member in result.items())
    assert sorted(counts(assign("uniform", subscriptions, {T1: 4, T2: 4}, {})).values()) == [2, 3, 3]


def test_range_gives_consecutive_ranges_the_same_across_topics():
    result = assign("range", {"b": {T1, T2}, "a": {T1, T2}, "c": {T1, T2}}, {T1: 7, T2: 7}, {})
    expected = {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}
    assert {m: {t: sorted(p) for t, p in topics.items()} for m, topics in result.items()} == \
        {m: {T1: parts, T2: parts} for m, parts in expected.items()}


def test_assignor_names():
    assert assignor_name("uniform") == "uniform" and assignor_name("range") == "range"
    assert assignor_name("org.apache.kafka.coordinator.group.assignor.RangeAssignor") == "range"
    assert assignor_name("sticky") is None
