"""--quotas: what client quota accounting costs clients that never reach their quotas.

A fourth broker, "sluice-quotas", runs beside the others in the produce and consume
sections, taking turns with them in every configuration: Sluice as "sluice" is, but with
producer_byte_rate, consumer_byte_rate and request_percentage set for the default user
and client id (every connection's entity, row 5 of Kafka's precedence) far above what a
client reaches, so every request is measured and none throttled. The issue's target:
produce and consume throughput with those quotas >= 0.97x without any quota configured,
in every configuration (`quota_cost`).
"""

from __future__ import annotations

from bench.common import SluiceTarget
from wire.quota_types import CLIENT_ID, USER

__all__ = ["QUOTA_TARGET", "QuotedSluiceTarget", "quota_cost"]

QUOTA_TARGET = 0.97
# request_percentage 100: the whole time of the broker's one handler (its event loop), which
# no client's requests can take more of.
UNREACHED = {"producer_byte_rate": 10 ** 12, "consumer_byte_rate": 10 ** 12, "request_percentage": 100.0}


class QuotedSluiceTarget(SluiceTarget):
    name = "sluice-quotas"

    def start(self) -> "QuotedSluiceTarget":
        super().start()
        results = self.client.admin.alter_client_quotas({((USER, None), (CLIENT_ID, None)): UNREACHED})
        failed = {entity: error for entity, error in results.items() if error is not None}
        if failed:
            raise RuntimeError(f"sluice-quotas: setting the quotas failed: {failed}")
        return self


def quota_cost(results: dict) -> list[dict]:
    """Per produce and consume configuration: records/s with the quotas set and without,
    and their ratio."""
    rows = []
    for section, keys in (("produce", ("client", "acks", "partitions", "compression")), ("consume", ("client",))):
        measured = results.get(section) or []
        for quoted in (r for r in measured if r["broker"] == QuotedSluiceTarget.name):
            configuration = {key: quoted[key] for key in keys}
            plain = next((r for r in measured if r["broker"] == "sluice"
                          and all(r[key] == value for key, value in configuration.items())), None)
            if plain is not None:
                rows.append({"section": section, **configuration, "with_quotas": quoted["records_per_s"],
                             "without": plain["records_per_s"],
                             "ratio": quoted["records_per_s"] / plain["records_per_s"]})
    return rows
