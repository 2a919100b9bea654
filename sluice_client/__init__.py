"""A Kafka client on `wire`'s codec: `AsyncClient` for asyncio, `Client` to block.

    async with AsyncClient("localhost:9092") as client:
        result = await client.producer.produce("events", 0, [(b"key", b"value")])
        fetched = await client.consumer.fetch_records("events", 0, result.base_offset)

Broker error codes raise `wire.errors.KafkaError`; failures of the client itself
(connections, timeouts, malformed responses, no common version, refused authentication)
raise `ClientError`. TLS and SASL: `AsyncClient(..., security=ClientSecurity({...}))` with
Kafka's setting names (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config`,
`ssl.ca.location`, ...; see `sluice_client.security`).
"""

from sluice_client.client import AsyncClient
from sluice_client.connection import DEFAULT_MAX_RESPONSE_BYTES, BrokerConnection
from sluice_client.consumer import DEFAULT_MAX_DECOMPRESSED_BYTES
from sluice_client.errors import (AuthenticationFailed, BrokerUnreachable, ClientError, ConnectionFailed,
                                  ProtocolViolation, RequestTimedOut, ResponseTooLarge, SecurityConfigError,
                                  TlsHandshakeFailed, UnsupportedVersion)
from sluice_client.model import (APPEND_CONFIG, BROKER_RESOURCE, DEFAULT_CONFIG, DELETE_CONFIG,
                                 DYNAMIC_BROKER_CONFIG, SET_CONFIG, SUBTRACT_CONFIG,
                                 DYNAMIC_DEFAULT_BROKER_CONFIG, DYNAMIC_TOPIC_CONFIG, EARLIEST, LATEST,
                                 MAX_TIMESTAMP, PREFERRED_ELECTION, READ_COMMITTED,
                                 READ_UNCOMMITTED, UNCLEAN_ELECTION,
                                 STATIC_BROKER_CONFIG, TOPIC_RESOURCE, UNKNOWN_CONFIG,
                                 AbortedTransaction, BrokerInfo, ClusterDescription, ClusterMetadata,
                                 CommittedOffset, ConfigEntry, ConfigSynonym, Coordinator,
                                 ConsumerGroupDescription, ConsumerGroupMember, CreatedTopic, FetchedRecords,
                                 FetchResult, GroupDescription,
                                 GroupMember, ListedGroup, ListedTransaction, NewTopic, OffsetAndTimestamp,
                                 OngoingReassignment, PartitionInfo, ProduceResult, ProducerRecord, TopicInfo,
                                 TransactionDescription)
from sluice_client.security import ClientSecurity
from sluice_client.sync import Client
from sluice_client.versions import CLIENT_VERSIONS

__all__ = [
    "AsyncClient", "Client", "BrokerConnection", "ClientSecurity", "CLIENT_VERSIONS",
    "DEFAULT_MAX_DECOMPRESSED_BYTES", "DEFAULT_MAX_RESPONSE_BYTES",
    "AuthenticationFailed", "BrokerUnreachable", "ClientError", "ConnectionFailed", "ProtocolViolation",
    "RequestTimedOut", "ResponseTooLarge", "SecurityConfigError", "TlsHandshakeFailed",
    "UnsupportedVersion",
    "EARLIEST", "LATEST", "MAX_TIMESTAMP", "READ_COMMITTED", "READ_UNCOMMITTED",
    "TOPIC_RESOURCE", "BROKER_RESOURCE", "UNKNOWN_CONFIG", "DYNAMIC_TOPIC_CONFIG",
    "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG",
    "PREFERRED_ELECTION", "UNCLEAN_ELECTION",
    "DEFAULT_CONFIG", "SET_CONFIG", "DELETE_CONFIG", "APPEND_CONFIG", "SUBTRACT_CONFIG",
    "AbortedTransaction", "BrokerInfo", "ClusterDescription", "ClusterMetadata",
    "CommittedOffset", "ConfigEntry", "ConfigSynonym", "Coordinator", "CreatedTopic",
    "ConsumerGroupDescription", "ConsumerGroupMember", "FetchedRecords", "FetchResult", "GroupDescription",
    "GroupMember", "ListedGroup",
    "ListedTransaction", "TransactionDescription",
    "NewTopic", "OffsetAndTimestamp", "OngoingReassignment", "PartitionInfo", "ProduceResult", "ProducerRecord",
    "TopicInfo",
]
