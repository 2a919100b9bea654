"""ApiVersions v0–4.

- Lists every API this broker serves with the version range it serves (a cluster
  broker also the controller's requests to it).
- v1+ carries throttle_time_ms; v3+ is flexible and may list features (we list none).
- A request at a version we do not know is answered (by the broker's dispatcher) with
  UNSUPPORTED_VERSION in the v0 layout, which every client can read, listing our
  ranges so that the client retries at a version we support.
"""

from __future__ import annotations

from wire.error_codes import ErrorCode
from wire.messages import API_VERSIONS, APIS

from broker import handlers
from broker.config import markdown_row


def _api_keys(served):
    return [API_VERSIONS.response.ApiVersion(api_key=key, min_version=handlers.MIN_VERSIONS[key],
                                             max_version=handlers.MAX_VERSIONS[key])
            for key in sorted(served)]


def handle(broker, header, request, session):
    return API_VERSIONS.response(error_code=ErrorCode.NONE, api_keys=_api_keys(broker.served_apis))


def unsupported_version_response(broker):
    return API_VERSIONS.response(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                 api_keys=_api_keys(broker.served_apis))


def reference() -> str:
    """docs/apis.md: the ApiVersions answers of a single node and of a cluster broker, so
    that the documentation of what is served cannot drift from what is."""
    single = {api.api_key: api for api in _api_keys(handlers.SERVED_APIS)}
    cluster = {api.api_key: api for api in _api_keys(handlers.CLUSTER_SERVED_APIS)}
    lines = ["# APIs served", "",
             "The APIs and versions a Sluice broker lists in its ApiVersions answer, generated from it",
             "(`python -m broker.handlers --reference > docs/apis.md`; a test fails when they differ).",
             "As in Kafka, an ApiVersions request at a version not listed gets UNSUPPORTED_VERSION with",
             "these ranges, so that the client retries at one listed; a request for any other API or",
             "version not listed closes the connection.", "",
             f"A single node serves {len(single)} APIs, a broker of a cluster {len(cluster)}.", "",
             markdown_row("Key", "API", "Single node", "Cluster broker"), markdown_row(*["---"] * 4)]
    for key in sorted(single.keys() | cluster.keys()):
        versions = [f"{served[key].min_version}–{served[key].max_version}" if key in served else "not served"
                    for served in (single, cluster)]
        lines.append(markdown_row(str(key), APIS[key].name, *versions))
    unserved = [APIS[key] for key in sorted(APIS) if key not in single and key not in cluster]
    lines += ["", "The protocol code in `wire/` also knows these APIs, which neither serves:",
              ", ".join(f"{api.name} ({api.key})" for api in unserved) + "."]
    return "\n".join(lines) + "\n"
