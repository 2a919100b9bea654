"""The broker-side assignors of KIP-848 consumer groups (Kafka's `uniform` and `range`):
given each member's subscribed topics, the partitions of those topics and the group's
previous target assignment, a new target assignment per member. The coordinator
(`groups.consumer_group`) reconciles members towards it; an assignor only decides who
should own what.

- `uniform` (the default, Kafka's UniformAssignor): every partition of a subscribed topic
  goes to one of its subscribers, the counts of members with the same subscriptions
  differing by at most one where the subscriptions allow it, and a partition stays with
  its previous owner whenever balance permits (fewer revocations, faster rebalances).
- `range` (Kafka's server-side RangeAssignor): per topic, its subscribers in member id
  order take consecutive ranges, the first `partitions % subscribers` one more; the same
  members get the same partition numbers of co-partitioned topics.
"""

from __future__ import annotations

import uuid

# topic id -> partition indexes: a member's share of a target assignment.
Assignment = dict[uuid.UUID, frozenset[int]]

def assign(assignor: str, subscriptions: dict[str, set[uuid.UUID]], partitions: dict[uuid.UUID, int],
           previous: dict[str, Assignment]) -> dict[str, Assignment]:
    """The target assignment of every member of `subscriptions` (member id -> subscribed
    topic ids) over `partitions` (topic id -> partition count; topics absent there are
    ignored), `previous` being the last target assignment (for stickiness)."""
    owners = _range(subscriptions, partitions) if assignor == "range" else \
        _uniform(subscriptions, partitions, previous)
    result: dict[str, dict[uuid.UUID, set[int]]] = {member: {} for member in subscriptions}
    for (topic_id, index), member in owners.items():
        result[member].setdefault(topic_id, set()).add(index)
    return {member: {t: frozenset(p) for t, p in topics.items()} for member, topics in result.items()}


def _range(subscriptions, partitions) -> dict[tuple[uuid.UUID, int], str]:
    owners = {}
    for topic_id, count in partitions.items():
        members = sorted(m for m, topics in subscriptions.items() if topic_id in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = share + (1 if i < extra else 0)
            for index in range(start, start + size):
                owners[(topic_id, index)] = member
            start += size
    return owners


def _uniform(subscriptions, partitions, previous) -> dict[tuple[uuid.UUID, int], str]:
    """Keep previous owners, give out the rest to the least loaded subscribers, then move
    partitions from the most to the least loaded eligible member until no move narrows
    the gap (each move strictly lowers the spread, so the loop ends)."""
    every = sorted((t, i) for t, count in partitions.items() for i in range(count)
                   if any(t in topics for topics in subscriptions.values()))
    eligible = {tp: sorted(m for m, topics in subscriptions.items() if tp[0] in topics) for tp in every}
    counts = {member: 0 for member in subscriptions}
    owners: dict[tuple[uuid.UUID, int], str] = {}
    fair = -(-len(every) // max(len(subscriptions), 1))  # nobody keeps more than the ceiling
    for member in sorted(previous):
        if member not in subscriptions:
            continue
        for topic_id, indexes in sorted(previous[member].items()):
            for index in sorted(indexes):
                tp = (topic_id, index)
                if tp in eligible and tp not in owners and counts[member] < fair \
                        and topic_id in subscriptions[member]:
                    owners[tp] = member
                    counts[member] += 1
    for tp in every:
        if tp not in owners:
            member = min(eligible[tp], key=lambda m: (counts[m], m))
            owners[tp] = member
            counts[member] += 1
    for _ in range(len(every) * max(len(subscriptions), 1)):
        moved = False
        for tp in every:
            current = owners[tp]
            target = min(eligible[tp], key=lambda m: (counts[m], m))
            if counts[current] - counts[target] >= 2:
                owners[tp] = target
                counts[current] -= 1
                counts[target] += 1
                moved = True
        if not moved:
            break
    return owners
