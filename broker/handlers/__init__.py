"""Request handlers, one module per API family; each opens with the rules it implements.

A handler is `handler(broker, header, request, session) -> body | None` (None: no
response, as for acks=0 produce); `session` is the connection's (broker.security.session:
client host, listener, principal). A request that must wait (a long-poll Fetch, a group
join) returns an awaitable of the body instead, so that everything else is answered
without a trip through the event loop. An answer to a client over its quota (Produce,
Fetch) comes in a `broker.handler_results.Throttled`, which mutes the connection after it.

Authorization: every handler checks what Kafka's KafkaApis checks, through
broker.security.acls (nothing when no authorizer is configured); each module's docstring
lists its rules. ApiVersions and the SASL APIs need nothing.
"""

from wire.messages import (CONTROLLED_SHUTDOWN, ELECT_LEADERS, LEADER_AND_ISR, STOP_REPLICA,
                           UPDATE_METADATA, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, ALTER_CONFIGS, APIS,
                           API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_GROUPS,
                           DELETE_RECORDS, DELETE_TOPICS, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS,
                           DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS,
                           DESCRIBE_TRANSACTIONS, END_TXN, FETCH, FIND_COORDINATOR, HEARTBEAT,
                           INCREMENTAL_ALTER_CONFIGS, INIT_PRODUCER_ID, JOIN_GROUP, LEAVE_GROUP,
                           LIST_GROUPS, LIST_OFFSETS, LIST_TRANSACTIONS, METADATA, OFFSET_COMMIT,
                           OFFSET_DELETE, OFFSET_FETCH, OFFSET_FOR_LEADER_EPOCH, PRODUCE,
                           SYNC_GROUP, TXN_OFFSET_COMMIT, WRITE_TXN_MARKERS, SASL_HANDSHAKE,
                           SASL_AUTHENTICATE, DESCRIBE_USER_SCRAM_CREDENTIALS, ALTER_USER_SCRAM_CREDENTIALS,
                           DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS, DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS,
                           CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE, DESCRIBE_TOPIC_PARTITIONS)

from broker.config import markdown_row
from broker.handlers import (acls, alter_configs, api_versions, client_quotas, cluster, configs, delete_records,
                             elect_leaders, fetch, groups, inter_broker, list_offsets, metadata,
                             offset_for_leader_epoch, offsets, produce, reassignments, sasl, scram, topics_admin,
                             transactions)

HANDLERS = {
    API_VERSIONS.key: api_versions.handle,
    METADATA.key: metadata.handle,
    DESCRIBE_TOPIC_PARTITIONS.key: metadata.describe_topic_partitions,
    PRODUCE.key: produce.handle,
    FETCH.key: fetch.handle,
    LIST_OFFSETS.key: list_offsets.handle,
    OFFSET_FOR_LEADER_EPOCH.key: offset_for_leader_epoch.handle,
    CREATE_TOPICS.key: topics_admin.create_topics,
    DELETE_TOPICS.key: topics_admin.delete_topics,
    DELETE_RECORDS.key: delete_records.handle,
    CREATE_PARTITIONS.key: topics_admin.create_partitions,
    DESCRIBE_CONFIGS.key: configs.handle,
    ALTER_CONFIGS.key: alter_configs.alter_configs,
    INCREMENTAL_ALTER_CONFIGS.key: alter_configs.incremental_alter_configs,
    DESCRIBE_CLUSTER.key: cluster.describe_cluster,
    DESCRIBE_LOG_DIRS.key: cluster.describe_log_dirs,
    INIT_PRODUCER_ID.key: cluster.init_producer_id,
    FIND_COORDINATOR.key: groups.find_coordinator,
    JOIN_GROUP.key: groups.join_group,
    SYNC_GROUP.key: groups.sync_group,
    HEARTBEAT.key: groups.heartbeat,
    LEAVE_GROUP.key: groups.leave_group,
    DESCRIBE_GROUPS.key: groups.describe_groups,
    LIST_GROUPS.key: groups.list_groups,
    DELETE_GROUPS.key: groups.delete_groups,
    CONSUMER_GROUP_HEARTBEAT.key: groups.consumer_group_heartbeat,
    CONSUMER_GROUP_DESCRIBE.key: groups.consumer_group_describe,
    OFFSET_COMMIT.key: offsets.offset_commit,
    OFFSET_FETCH.key: offsets.offset_fetch,
    OFFSET_DELETE.key: offsets.offset_delete,
    ADD_PARTITIONS_TO_TXN.key: transactions.add_partitions_to_txn,
    ADD_OFFSETS_TO_TXN.key: transactions.add_offsets_to_txn,
    END_TXN.key: transactions.end_txn,
    WRITE_TXN_MARKERS.key: transactions.write_txn_markers,
    TXN_OFFSET_COMMIT.key: transactions.txn_offset_commit,
    DESCRIBE_TRANSACTIONS.key: transactions.describe_transactions,
    LIST_TRANSACTIONS.key: transactions.list_transactions,
    DESCRIBE_PRODUCERS.key: transactions.describe_producers,
    ELECT_LEADERS.key: elect_leaders.handle,
    SASL_HANDSHAKE.key: sasl.sasl_handshake,
    SASL_AUTHENTICATE.key: sasl.sasl_authenticate,
    DESCRIBE_USER_SCRAM_CREDENTIALS.key: scram.describe_user_scram_credentials,
    ALTER_USER_SCRAM_CREDENTIALS.key: scram.alter_user_scram_credentials,
    DESCRIBE_ACLS.key: acls.describe_acls,
    CREATE_ACLS.key: acls.create_acls,
    DELETE_ACLS.key: acls.delete_acls,
    DESCRIBE_CLIENT_QUOTAS.key: client_quotas.describe_client_quotas,
    ALTER_CLIENT_QUOTAS.key: client_quotas.alter_client_quotas,
}

# What a connection on a SASL listener may send before it has authenticated.
BEFORE_AUTHENTICATION = frozenset((API_VERSIONS.key, SASL_HANDSHAKE.key, SASL_AUTHENTICATE.key))

# A cluster broker's requests from the controller, and those that move replicas between
# brokers; the single node does not serve them.
CLUSTER_HANDLERS = {
    LEADER_AND_ISR.key: inter_broker.leader_and_isr,
    STOP_REPLICA.key: inter_broker.stop_replica,
    UPDATE_METADATA.key: inter_broker.update_metadata,
    CONTROLLED_SHUTDOWN.key: elect_leaders.controlled_shutdown,
    ALTER_PARTITION_REASSIGNMENTS.key: reassignments.alter_partition_reassignments,
    LIST_PARTITION_REASSIGNMENTS.key: reassignments.list_partition_reassignments,
}



def exempt_from_request_quota(header, request) -> bool:
    """Requests whose time counts against no request_percentage, as Kafka's (its cluster
    actions): the controller's, a transaction coordinator's markers and a follower's fetches."""
    api_key = header.request_api_key
    return api_key in CLUSTER_HANDLERS or api_key == WRITE_TXN_MARKERS.key or (
        api_key == FETCH.key and fetch.fetching_replica(request, header.request_api_version) >= 0)


# Oldest versions served: those Kafka defines (Kafka 4 removed some, KIP-896: Fetch
# below v4 would need message-format v0/v1).
MIN_VERSIONS = {key: APIS[key].versions.lo for key in (*HANDLERS, *CLUSTER_HANDLERS)}

# Newest versions served, where wire.messages knows newer ones (Kafka 4.4's topic ids).
MAX_VERSIONS = {key: APIS[key].versions.hi for key in (*HANDLERS, *CLUSTER_HANDLERS)}
MAX_VERSIONS[PRODUCE.key] = produce.MAX_VERSION
MAX_VERSIONS[TXN_OFFSET_COMMIT.key] = transactions.TXN_OFFSET_COMMIT_MAX_VERSION

# The APIs whose requests the broker decodes: the single node's, and a cluster broker's.
# wire.messages also has schemas neither serves: a request at one of those is refused
# unread, as one at an API key nobody knows.
SERVED_APIS = {key: APIS[key] for key in sorted(HANDLERS)}
CLUSTER_SERVED_APIS = {key: APIS[key] for key in sorted({**HANDLERS, **CLUSTER_HANDLERS})}


def served_versions(apis) -> dict[int, tuple[int, int]]:
    """The (oldest, newest) version served of each of `apis` (by key), as ApiVersions lists them."""
    return {key: (MIN_VERSIONS[key], MAX_VERSIONS[key]) for key in apis}


def reference() -> str:
    """docs/apis.md: the ApiVersions answers of a single node and of a cluster broker, so
    that the documentation of what is served cannot drift from what is."""
    single = {api.api_key: api for api in api_versions.api_keys(served_versions(SERVED_APIS))}
    cluster = {api.api_key: api for api in api_versions.api_keys(served_versions(CLUSTER_SERVED_APIS))}
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
