"""The client quotas the console shows: those set (DescribeClientQuotas) and the clients
each broker throttles now, per quota type, read from the brokers' Prometheus metrics
(`metrics.port`, the same on every broker, as Kafka UI reads Kafka's metrics: the
console's --metrics-port).

Each broker's quota managers export, per quota entity (user and client id as Kafka tags
them, "" for what the entity does not name), its measure and the average throttle time
its clients were given over the quota windows (broker.metrics; NaN when none was). An
entity is throttled now when that average is a number. Its quota is the one Kafka's
precedence finds among those set for the same tags (wire.quota_types.precedence).
"""

from __future__ import annotations

import asyncio
import math
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from sluice_client import AsyncClient
from wire.quota_types import CLIENT_ID, USER, precedence

__all__ = ["QUOTA_TYPES", "client_quotas"]

# (quota key, the Prometheus name of its measure, of its throttle time, what the measure is)
QUOTA_TYPES = [
    ("producer_byte_rate", "kafka_server_produce_byte_rate", "kafka_server_produce_throttle_time", "bytes/s"),
    ("consumer_byte_rate", "kafka_server_fetch_byte_rate", "kafka_server_fetch_throttle_time", "bytes/s"),
    ("request_percentage", "kafka_server_request_request_time", "kafka_server_request_throttle_time", "%"),
    ("controller_mutation_rate", "kafka_server_controllermutation_tokens",
     "kafka_server_controllermutation_throttle_time", "tokens left"),
]
_SCRAPE_TIMEOUT_S = 5.0


async def client_quotas(client: AsyncClient, metrics_port: int | None) -> dict:
    """{"set": [{user, client_id, quotas}], "throttled": [{broker, quota_type, user,
    client_id, measured, unit, quota, throttle_time_ms}], "metrics_port", "unreadable":
    [{broker, error}]}; user and client_id None for `<default>`, "" (throttled) for what
    the entity does not name."""
    configured = {frozenset(entity): quotas for entity, quotas in (await client.admin.describe_client_quotas()).items()}
    document = {"set": [_entity_row(entity, quotas) for entity, quotas in sorted(
                    configured.items(), key=lambda item: sorted((t, n or "") for t, n in item[0]))],
                "throttled": [], "metrics_port": metrics_port, "unreadable": []}
    if metrics_port is None:
        return document
    brokers = sorted((await client.metadata([])).brokers.values(), key=lambda b: b.node_id)
    scraped = await asyncio.gather(*(asyncio.to_thread(_scrape, b.host, metrics_port) for b in brokers),
                                   return_exceptions=True)
    for broker, series in zip(brokers, scraped):
        if isinstance(series, Exception):
            document["unreadable"].append({"broker": broker.node_id, "error": str(series)})
            continue
        for key, measure_name, throttle_name, unit in QUOTA_TYPES:
            measures = series.get(measure_name, {})
            for tags, throttle_ms in sorted(series.get(throttle_name, {}).items()):
                if math.isnan(throttle_ms):
                    continue
                user, client_id = tags
                document["throttled"].append({
                    "broker": broker.node_id, "quota_type": key, "user": user, "client_id": client_id,
                    "measured": measures.get(tags), "unit": unit,
                    "quota": applying_quota(configured, user, client_id, key), "throttle_time_ms": throttle_ms})
    return document


def applying_quota(configured: dict[frozenset, dict[str, float]], user: str, client_id: str, key: str) -> float | None:
    """The quota of `key` behind a rate tagged (user, client id), "" for what its entity
    does not name: the first entity in Kafka's precedence that names the same types,
    shares the same tags and sets the key."""
    named = {entity_type for entity_type, name in ((USER, user), (CLIENT_ID, client_id)) if name}
    for entity, shared in precedence(user, client_id):
        if shared == (user, client_id) and {entity_type for entity_type, _ in entity} == named:
            value = configured.get(entity, {}).get(key)
            if value is not None:
                return value
    return None


def _entity_row(entity: frozenset, quotas: dict[str, float]) -> dict:
    names = dict(entity)
    return {"user": names.get(USER, ""), "client_id": names.get(CLIENT_ID, ""), "quotas": dict(sorted(quotas.items()))}


def _scrape(host: str, port: int) -> dict[str, dict[tuple[str, str], float]]:
    """The broker's client quota series: {name: {(user, client_id): value}}."""
    wanted = {name for _, measure, throttle, _ in QUOTA_TYPES for name in (measure, throttle)}
    address = f"[{host}]" if ":" in host else host
    with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=_SCRAPE_TIMEOUT_S) as response:
        text = response.read().decode("utf-8")
    series: dict[str, dict[tuple[str, str], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                series.setdefault(sample.name, {})[sample.labels["user"], sample.labels["client_id"]] = sample.value
    return series
