"""Kafka's client quota entity types and DescribeClientQuotas match types, as they travel
in DescribeClientQuotas and AlterClientQuotas. Shared by the broker and the client's
admin commands, so both spell them the same way.

An entity is one or more (entity type, name) pairs; a name of None is the type's
`<default>` (kafka-configs' `--entity-default`).
"""

from __future__ import annotations

USER, CLIENT_ID, IP = "user", "client-id", "ip"
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # a name, the default, any name
