"""Which version of each API the client speaks, and how that meets a broker's range.

The codec in `wire.messages` may know more versions than the client's logic handles
(a regenerated schema can add versions with new semantics, such as topic ids replacing
names), so the client states its own range per API here. Lower bounds drop versions
whose semantics the client does not implement: Produce before v3 and Fetch before v4
carry pre-v2 message formats, ListOffsets v0 returns offset lists, OffsetFetch before v2
reads ZooKeeper-stored offsets and cannot ask for all partitions, OffsetCommit v0-1 lack
the generation/retention layout, CreateTopics v0 has no validate_only, the ACL APIs' v0
knows literal resource names only.
"""

from __future__ import annotations

from sluice_client.errors import UnsupportedVersion
from wire.messages import (ADD_PARTITIONS_TO_TXN, ALTER_CLIENT_QUOTAS, ALTER_CONFIGS, ALTER_PARTITION_REASSIGNMENTS,
                           LIST_PARTITION_REASSIGNMENTS, ALTER_USER_SCRAM_CREDENTIALS, API_VERSIONS,
                           CREATE_ACLS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_ACLS, DELETE_GROUPS,
                           DESCRIBE_ACLS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS,
                           DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS,
                           DESCRIBE_TRANSACTIONS, ELECT_LEADERS, FETCH, INCREMENTAL_ALTER_CONFIGS,
                           FIND_COORDINATOR, INIT_PRODUCER_ID, LIST_GROUPS, LIST_OFFSETS, LIST_TRANSACTIONS,
                           METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE,
                           END_TXN, OFFSET_COMMIT, OFFSET_FETCH, OFFSET_FOR_LEADER_EPOCH, PRODUCE,
                           CONTROLLED_SHUTDOWN, CONSUMER_GROUP_DESCRIBE)
from wire.schema import Api

__all__ = ["CLIENT_VERSIONS", "choose_version"]

CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    API_VERSIONS.key: (0, 4),
    PRODUCE.key: (3, 11),
    FETCH.key: (4, 17),
    LIST_OFFSETS.key: (1, 10),
    METADATA.key: (1, 12),
    OFFSET_COMMIT.key: (2, 9),
    OFFSET_FETCH.key: (2, 9),
    FIND_COORDINATOR.key: (0, 6),
    CREATE_TOPICS.key: (1, 7),
    DELETE_TOPICS.key: (0, 6),
    INIT_PRODUCER_ID.key: (0, 5),
    # Producers use the single-transaction form (v4+ is for brokers) and EndTxn up to
    # v4 (v5 bumps the epoch at every commit, KIP-890's second transaction version).
    ADD_PARTITIONS_TO_TXN.key: (0, 3),
    END_TXN.key: (0, 4),
    DESCRIBE_GROUPS.key: (0, 5),
    CONSUMER_GROUP_DESCRIBE.key: (0, 1),
    LIST_GROUPS.key: (0, 5),
    DELETE_GROUPS.key: (0, 2),
    CREATE_PARTITIONS.key: (0, 3),
    ELECT_LEADERS.key: (0, 2),
    ALTER_PARTITION_REASSIGNMENTS.key: (0, 0),
    LIST_PARTITION_REASSIGNMENTS.key: (0, 0),
    DESCRIBE_CONFIGS.key: (0, 4),
    ALTER_CONFIGS.key: (0, 2),
    INCREMENTAL_ALTER_CONFIGS.key: (0, 1),
    DESCRIBE_CLUSTER.key: (0, 1),
    DESCRIBE_LOG_DIRS.key: (1, 4),
    DESCRIBE_TRANSACTIONS.key: (0, 0),
    LIST_TRANSACTIONS.key: (0, 1),
    # Followers (replica_id from v3) truncating their logs.
    OFFSET_FOR_LEADER_EPOCH.key: (3, 4),
    # A cluster broker asking its controller to move its leaderships away.
    CONTROLLED_SHUTDOWN.key: (3, 3),
    # SASL tokens travel in SaslAuthenticate (v1 handshake); v0's raw token frames are not spoken.
    SASL_HANDSHAKE.key: (1, 1),
    SASL_AUTHENTICATE.key: (0, 2),
    # ACLs with pattern types.
    DESCRIBE_ACLS.key: (1, 3),
    CREATE_ACLS.key: (1, 3),
    DELETE_ACLS.key: (1, 3),
    DESCRIBE_USER_SCRAM_CREDENTIALS.key: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS.key: (0, 0),
    DESCRIBE_CLIENT_QUOTAS.key: (0, 1),
    ALTER_CLIENT_QUOTAS.key: (0, 1),
}


def choose_version(api: Api, broker_range: tuple[int, int] | None, broker: str,
                   max_version: int | None = None) -> int:
    """The newest version both sides speak, capped at `max_version` when given."""
    client_lo, client_hi = CLIENT_VERSIONS[api.key]
    if max_version is not None:
        client_hi = min(client_hi, max_version)
    if broker_range is None:
        raise UnsupportedVersion(f"broker {broker} does not support {api.name}")
    broker_lo, broker_hi = broker_range
    version = min(client_hi, broker_hi)
    if version < max(client_lo, broker_lo):
        raise UnsupportedVersion(f"{api.name}: broker {broker} supports v{broker_lo}-{broker_hi}, "
                                 f"this client v{client_lo}-{client_hi}")
    return version
