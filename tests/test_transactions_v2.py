"""Transactions v2 (KIP-890 part 2) and the feature levels from which clients choose it.

- ApiVersions v3+ lists `transaction.version`: supported 0-1 (left out below v4, whose
  clients cannot read a minimum of 0, as Kafka leaves it out), finalized at the broker's
  `transaction.version` (default the newest; level 0 not listed), epoch 0.
Every wait is bounded; servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import pytest

from tests.test_transactions import Raw, own_broker
from wire.messages import API_VERSIONS

pytestmark = pytest.mark.timeout(120)


def feature_levels(proc, version: int):
    """(supported {name: (min, max)}, finalized {name: level}, epoch) of an ApiVersions answer."""
    raw = Raw(proc.port)
    try:
        body = raw.call(API_VERSIONS, version, client_software_name="txn-v2-test",
                        client_software_version="1")
    finally:
        raw.close()
    assert body.error_code == 0
    supported = {f.name: (f.min_version, f.max_version) for f in body.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in body.finalized_features}
    assert all(lo == hi for lo, hi in finalized.values()), finalized
    return supported, {name: hi for name, (_, hi) in finalized.items()}, body.finalized_features_epoch


def test_api_versions_lists_the_transaction_version_feature(tmp_path):
    for name in ("default", "pinned"):
        (tmp_path / name).mkdir()
    with own_broker(tmp_path / "default") as proc:
        assert feature_levels(proc, 4) == ({"transaction.version": (0, 1)}, {"transaction.version": 1}, 0)
        assert feature_levels(proc, 3) == ({}, {"transaction.version": 1}, 0)
    with own_broker(tmp_path / "pinned", "transaction.version=0\n") as proc:
        assert feature_levels(proc, 4) == ({"transaction.version": (0, 1)}, {}, 0)
