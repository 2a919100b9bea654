"""ApiVersions v0–5.

- Lists every API this broker serves with the version range it serves (a cluster
  broker also the controller's requests to it).
- v1+ carries throttle_time_ms; v3+ is flexible and lists the feature levels
  (broker.features): supported ranges (below v4 without those starting at 0, as Kafka),
  finalized levels (level 0 left out) and their epoch, from which Kafka 4 clients choose
  transactions v2.
- v5+ (KIP-1242): a client naming the cluster id and node id it means to reach (a
  non-null `cluster_id`) gets REBOOTSTRAP_REQUIRED and no APIs when either is not this
  broker's, as Kafka answers, so that it starts over from its bootstrap servers.
- A request at a version we do not know is answered (by the broker's dispatcher) with
  UNSUPPORTED_VERSION in the v0 layout, which every client can read, listing our
  ranges so that the client retries at a version we support.
"""

from __future__ import annotations

from wire.error_codes import ErrorCode
from wire.messages import API_VERSIONS

from broker import features


def api_keys(versions):
    """ApiVersions' list for `versions` (API key -> (oldest, newest) served)."""
    return [API_VERSIONS.response.ApiVersion(api_key=key, min_version=lo, max_version=hi)
            for key, (lo, hi) in sorted(versions.items())]


def handle(broker, header, request, session):
    Resp = API_VERSIONS.response
    if header.request_api_version >= 5 and request.cluster_id is not None and (
            request.cluster_id != broker.metadata.cluster_id or request.node_id != broker.node_id):
        return Resp(error_code=ErrorCode.REBOOTSTRAP_REQUIRED, api_keys=[])
    return Resp(error_code=ErrorCode.NONE, api_keys=api_keys(broker.served_versions),
                supported_features=[Resp.SupportedFeatureKey(name=name, min_version=lo, max_version=hi)
                                    for name, lo, hi in features.supported(header.request_api_version)],
                finalized_features_epoch=features.FINALIZED_FEATURES_EPOCH,
                finalized_features=[Resp.FinalizedFeatureKey(name=name, min_version_level=level,
                                                             max_version_level=level)
                                    for name, level in features.finalized(broker.config).items()])


def unsupported_version_response(broker):
    return API_VERSIONS.response(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                 api_keys=api_keys(broker.served_versions))
