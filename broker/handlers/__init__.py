"""Request handlers, one module per API family; each opens with the rules it implements.

A handler is `async def handler(broker, header, request) -> response body | None`
(None: no response, as for acks=0 produce).
"""

from wire.messages import (APIS, API_VERSIONS, CREATE_PARTITIONS, CREATE_TOPICS, DELETE_TOPICS,
                           DESCRIBE_CLUSTER, DESCRIBE_CONFIGS, FETCH, INIT_PRODUCER_ID,
                           LIST_OFFSETS, METADATA, PRODUCE)

from broker.handlers import (api_versions, cluster, configs, fetch, list_offsets, metadata,
                             produce, topics_admin)

HANDLERS = {
    API_VERSIONS.key: api_versions.handle,
    METADATA.key: metadata.handle,
    PRODUCE.key: produce.handle,
    FETCH.key: fetch.handle,
    LIST_OFFSETS.key: list_offsets.handle,
    CREATE_TOPICS.key: topics_admin.create_topics,
    DELETE_TOPICS.key: topics_admin.delete_topics,
    CREATE_PARTITIONS.key: topics_admin.create_partitions,
    DESCRIBE_CONFIGS.key: configs.handle,
    DESCRIBE_CLUSTER.key: cluster.describe_cluster,
    INIT_PRODUCER_ID.key: cluster.init_producer_id,
}

# Oldest versions served: older Fetch/ListOffsets would need message-format v0/v1.
MIN_VERSIONS = {key: 0 for key in HANDLERS}
MIN_VERSIONS[FETCH.key] = fetch.MIN_VERSION
MIN_VERSIONS[LIST_OFFSETS.key] = list_offsets.MIN_VERSION

MAX_VERSIONS = {key: APIS[key].versions.hi for key in HANDLERS}
