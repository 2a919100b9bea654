"""Feature levels (KIP-584): what ApiVersions v3+ lists as supported and finalized.

Kafka 4 clients choose protocol behaviour from the finalized levels: a producer uses
transactions v2 (KIP-890 part 2) only when `transaction.version` is finalized at 2 or
more. A Kafka cluster finalizes its levels with kafka-storage.sh format / kafka-features.sh
(UpdateFeatures), which Sluice does not serve: the broker config `transaction.version`
pins the level instead (default: the newest supported, as a new Kafka 4 cluster's; lower
to keep Kafka 4 producers on transactions v1). The coordinator goes by each request's
version, as Kafka's does, so the level only steers what clients choose.

A feature is one line of FEATURES (`group.version` for KIP-848 would be the next); its
broker config comes with it. The levels are fixed for a broker's lifetime: finalized features epoch 0 (Kafka's epoch
is its metadata offset; a client takes the levels of the broker with the highest epoch).
"""

from __future__ import annotations

from dataclasses import dataclass

FINALIZED_FEATURES_EPOCH = 0


@dataclass(frozen=True)
class Feature:
    """A feature as Kafka names it, its supported range, and (broker.config) a broker
    config of the same name pinning its finalized level."""

    name: str
    min_version: int
    max_version: int


FEATURES = (
    Feature("transaction.version", 0, 2),
)


def supported(api_version: int) -> list[tuple[str, int, int]]:
    """(name, min, max) of each supported feature. Below ApiVersions v4 a feature whose
    range starts at 0 is left out, as Kafka leaves it out (KAFKA-17492: older clients
    cannot read a minimum of 0)."""
    return [(f.name, f.min_version, f.max_version) for f in FEATURES
            if api_version >= 4 or f.min_version > 0]


def finalized(config) -> dict[str, int]:
    """The finalized level of each feature, level 0 left out as Kafka leaves it out."""
    levels = {f.name: getattr(config, f.name.replace(".", "_")) for f in FEATURES}
    return {name: level for name, level in levels.items() if level != 0}
