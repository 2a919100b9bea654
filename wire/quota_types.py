"""Kafka's client quota entity types and DescribeClientQuotas match types, as they travel
in DescribeClientQuotas and AlterClientQuotas. Shared by the broker and the client's
admin commands, so both spell them the same way.

An entity is one or more (entity type, name) pairs; a name of None is the type's
`<default>` (kafka-configs' `--entity-default`). `precedence` is Kafka's order of the
entities whose quotas apply to a connection: the broker resolves quotas by it, the
console finds by it the quota behind a measured rate.
"""

from __future__ import annotations

USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # a name, the default, any name


def precedence(user: str, client_id: str) -> list[tuple[frozenset, tuple[str, str]]]:
    """Kafka's order of the entities (frozensets of (entity type, name or None)) whose
    quotas apply to (user, client id), the most specific first, each with the (user,
    client id) of the rate it shares (Kafka's metric tags; "" for any)."""
    both, by_user, by_client = (user, client_id), (user, ""), ("", client_id)
    return [(frozenset({(USER, user), (CLIENT_ID, client_id)}), both),
            (frozenset({(USER, user), (CLIENT_ID, None)}), both),
            (frozenset({(USER, user)}), by_user),
            (frozenset({(USER, None), (CLIENT_ID, client_id)}), both),
            (frozenset({(USER, None), (CLIENT_ID, None)}), both),
            (frozenset({(USER, None)}), by_user),
            (frozenset({(CLIENT_ID, client_id)}), by_client),
            (frozenset({(CLIENT_ID, None)}), by_client)]
