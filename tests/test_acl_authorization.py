"""Authorization of every request the broker serves, with ACLs (broker.security.acls),
against real broker processes and real clients (confluent-kafka, kafka-python), raw
frames for what clients do not send on demand.

- Without ACLs a principal can do nothing: produce, fetch and Metadata are refused with
  Kafka's codes (TOPIC_AUTHORIZATION_FAILED; all-topics Metadata leaves the topic out),
  and every other API refuses as Kafka's KafkaApis does (a table, one request each).
- READ on a topic without READ on the group: the consumer cannot join the group.
- ACLs for the principal, or for User:*, make produce (idempotent), consume with a group,
  and transactions work.
- In a ZooKeeper cluster an ACL created through one broker is enforced by another within
  a second, kept at Kafka's znodes, and read by a broker that starts later; two brokers
  writing one pattern at once lose nothing; the inter-broker APIs need CLUSTER_ACTION.

The principal is User:ANONYMOUS on the PLAINTEXT listener, and a SASL PLAIN user on the
SASL_PLAINTEXT one where the test takes it as a parameter; `admin` (super.users) manages
the ACLs.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient

from tests.support.polling import wait_for
from tests.cluster import Cluster
from tests.test_acls import (ADMIN, ALICE_PASSWORD, ANONYMOUS, acl, admin_client, client_settings, create,
                             create_topic, delete, describe, start_broker, to_confluent)
from tests.test_broker_failures import connect, fetch_body, produce_body, records_of, roundtrip
from wire.acl_types import Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode
from wire.messages import (ADD_OFFSETS_TO_TXN, ADD_PARTITIONS_TO_TXN, ALTER_CLIENT_QUOTAS, ALTER_CONFIGS,
                           CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT,
                           ALTER_USER_SCRAM_CREDENTIALS, CONTROLLED_SHUTDOWN, CREATE_PARTITIONS, CREATE_TOPICS,
                           DELETE_GROUPS, DELETE_RECORDS, DELETE_TOPICS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLUSTER,
                           DESCRIBE_CONFIGS, DESCRIBE_GROUPS, DESCRIBE_LOG_DIRS, DESCRIBE_PRODUCERS, DESCRIBE_TOPIC_PARTITIONS,
                           DESCRIBE_TRANSACTIONS,
                           DESCRIBE_USER_SCRAM_CREDENTIALS, ELECT_LEADERS,
                           END_TXN, FETCH, FIND_COORDINATOR, HEARTBEAT, INCREMENTAL_ALTER_CONFIGS, INIT_PRODUCER_ID,
                           JOIN_GROUP, LEADER_AND_ISR, LEAVE_GROUP, LIST_GROUPS, LIST_OFFSETS, LIST_TRANSACTIONS,
                           METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH, OFFSET_FOR_LEADER_EPOCH, PRODUCE,
                           STOP_REPLICA, SYNC_GROUP, TXN_OFFSET_COMMIT, UPDATE_METADATA, WRITE_TXN_MARKERS)
from wire.records import build_batch

pytestmark = pytest.mark.timeout(300)

TOPIC, GROUP, CLUSTER, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
TOPIC_DENIED, GROUP_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED, TXN_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
# (client user, the principal the broker sees): User:ANONYMOUS on PLAINTEXT, alice over SASL.
PRINCIPALS = {"ANONYMOUS": (None, ANONYMOUS), "alice": ("alice", "User:alice")}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = start_broker(tmp_path_factory.mktemp("authorization"))
    try:
        admin = admin_client(process)
        for topic in ("t", "other"):
            create_topic(admin, topic)
        yield process
    finally:
        process.stop()


@pytest.fixture
def admin(broker):
    client = admin_client(broker)
    yield client
    delete(client)


def grant(admin, principal, *grants):
    """ACLs allowing `principal` each (resource type, name, operation), LITERAL from any host."""
    create(admin, [acl(resource_type, name, LITERAL, principal, "*", operation, ALLOW)
                   for resource_type, name, operation in grants])


def kafka_python_settings(broker, user):
    if user is None:
        return dict(bootstrap_servers=broker.bootstrap("PLAINTEXT"))
    return dict(bootstrap_servers=broker.bootstrap("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=ALICE_PASSWORD)


def produce_errors(settings: dict, topic: str, count: int = 3, **extra) -> list:
    """The delivery errors of `count` records produced with confluent-kafka (None: delivered)."""
    from confluent_kafka import Producer

    errors = []
    producer = Producer({**settings, "log_level": 0, "message.timeout.ms": 20_000, **extra})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(30) == 0
    return errors


def consume(settings: dict, topic: str, group: str, count: int, timeout: float = 30.0) -> list:
    """Values read by a confluent-kafka consumer of `group`; an error (other than end of
    partition) is raised."""
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({**settings, "group.id": group, "auto.offset.reset": "earliest", "log_level": 0,
                         "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    values, deadline = [], time.monotonic() + timeout
    try:
        while len(values) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


# -- clients -----------------------------------------------------------------------------------

@pytest.mark.parametrize("who", PRINCIPALS)
def test_nothing_without_acls(broker, admin, who):
    """No ACL for the principal: produce, consume and Metadata refused, as Kafka refuses."""
    from confluent_kafka import KafkaException
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    user, _ = PRINCIPALS[who]
    settings = client_settings(broker, user)
    assert [e.code() for e in produce_errors(settings, "t")] == [TOPIC_DENIED] * 3
    # kafka-python's producer is idempotent: refused the topic's Metadata or InitProducerId
    # (which needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic), whichever first.
    producer = KafkaProducer(max_block_ms=10_000, **kafka_python_settings(broker, user))
    try:
        with pytest.raises(KafkaError, match="(Topic|Cluster)AuthorizationFailed"):
            producer.send("t", b"v").get(20)
    finally:
        producer.close()
    with pytest.raises(KafkaException) as raised:
        consume(settings, "t", f"nothing-{who}", 1)
    assert raised.value.args[0].code() == GROUP_DENIED  # the group is the first thing a consumer needs
    client = admin_client(broker, user)
    assert "t" not in client.list_topics(timeout=30).topics
    assert client.list_topics("t", timeout=30).topics["t"].error.code() == TOPIC_DENIED


@pytest.mark.parametrize("who", PRINCIPALS)
def test_the_group_but_not_the_topic(broker, admin, who):
    from confluent_kafka import KafkaException

    user, principal = PRINCIPALS[who]
    grant(admin, principal, (GROUP, f"only-group-{who}", Operation.READ))
    with pytest.raises(KafkaException) as raised:
        consume(client_settings(broker, user), "t", f"only-group-{who}", 1)
    assert raised.value.args[0].code() == TOPIC_DENIED


@pytest.mark.parametrize("who", PRINCIPALS)
def test_read_on_the_topic_but_not_the_group(broker, admin, who):
    """READ on the topic alone: the consumer cannot join its group (GROUP_AUTHORIZATION_FAILED
    with confluent-kafka and kafka-python); READ on the group too, and it consumes."""
    from confluent_kafka import KafkaException
    from kafka import KafkaConsumer
    from kafka.errors import GroupAuthorizationFailedError

    user, principal = PRINCIPALS[who]
    topic = create_topic(admin, f"read-{who}")
    assert produce_errors(client_settings(broker, ADMIN), topic, 5) == [None] * 5
    grant(admin, principal, (TOPIC, topic, Operation.READ))
    settings = client_settings(broker, user)
    with pytest.raises(KafkaException) as raised:
        consume(settings, topic, f"g-{who}", 5)
    assert raised.value.args[0].code() == GROUP_DENIED
    consumer = KafkaConsumer(topic, group_id=f"g-{who}", consumer_timeout_ms=2000, auto_offset_reset="earliest",
                             **kafka_python_settings(broker, user))
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.poll(10_000)
    finally:
        consumer.close()
    grant(admin, principal, (GROUP, f"g-{who}", Operation.READ))
    assert consume(settings, topic, f"g-{who}", 5) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("grantee", [ANONYMOUS, "User:*"])
def test_acls_make_clients_work(broker, admin, grantee):
    """ACLs for User:ANONYMOUS, or for everyone: an idempotent producer (InitProducerId
    allowed by WRITE on a topic), a consumer group, committed offsets."""
    topic, group = create_topic(admin, f"open-{grantee[5:].strip('*') or 'all'}"), f"open-{uuid.uuid4().hex[:6]}"
    grant(admin, grantee, (TOPIC, topic, Operation.WRITE), (TOPIC, topic, Operation.READ),
          (GROUP, group, Operation.READ))
    settings = client_settings(broker, None)
    assert produce_errors(settings, topic, 10, **{"enable.idempotence": True}) == [None] * 10
    assert consume(settings, topic, group, 10) == [f"v{i}".encode() for i in range(10)]
    from confluent_kafka import ConsumerGroupTopicPartitions

    client = admin_client(broker, None)  # held: its futures end with it
    offsets = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    assert [(tp.topic, tp.offset) for tp in offsets.topic_partitions] == [(topic, 10)]


@pytest.mark.parametrize("who", PRINCIPALS)
def test_transactions_need_the_transactional_id(broker, admin, who):
    from confluent_kafka import KafkaException, Producer

    user, principal = PRINCIPALS[who]
    topic = create_topic(admin, f"txn-{who}")
    grant(admin, principal, (TOPIC, topic, Operation.WRITE))
    settings = {**client_settings(broker, user), "log_level": 0, "transactional.id": f"tx-{who}"}
    producer = Producer(settings)
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    assert raised.value.args[0].code() == TXN_DENIED
    create(admin, [acl(TXN, "tx-", PREFIXED, principal, "*", Operation.WRITE, ALLOW)])
    producer = Producer(settings)
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(topic, f"v{i}".encode())
    producer.commit_transaction(30)
    grant(admin, principal, (TOPIC, topic, Operation.READ), (GROUP, f"tg-{who}", Operation.READ))
    assert consume(client_settings(broker, user), topic, f"tg-{who}", 4) == [f"v{i}".encode() for i in range(4)]


def test_metadata(broker, admin):
    """All topics: the undescribable left out; named: TOPIC_AUTHORIZATION_FAILED whether it
    exists or not; auto-creation needs CREATE; authorized operations as Kafka's bit fields."""
    for topic in ("m-visible", "m-hidden"):
        create_topic(admin, topic)
    grant(admin, ANONYMOUS, (TOPIC, "m-visible", Operation.DESCRIBE), (TOPIC, "m-new", Operation.DESCRIBE))
    Req = METADATA.request
    with connect(broker.port) as sock:
        every = roundtrip(sock, METADATA, 10, Req(topics=None, include_cluster_authorized_operations=True,
                                                  include_topic_authorized_operations=True), 1)
        assert [t.name for t in every.topics] == ["m-visible"]
        assert every.topics[0].topic_authorized_operations == 1 << Operation.DESCRIBE
        assert every.cluster_authorized_operations == 0

        def named(*names, create=False):
            body = Req(topics=[Req.MetadataRequestTopic(name=n) for n in names], allow_auto_topic_creation=create)
            return {t.name: t.error_code for t in roundtrip(sock, METADATA, 12, body, 2).topics}

        assert named("m-visible", "m-hidden", "m-unknown") == {"m-visible": 0, "m-hidden": TOPIC_DENIED,
                                                               "m-unknown": TOPIC_DENIED}
        assert named("m-new", create=True) == {"m-new": TOPIC_DENIED}  # DESCRIBE, but no CREATE
        grant(admin, ANONYMOUS, (TOPIC, "m-new", Operation.CREATE))
        assert named("m-new", create=True) == {"m-new": 0}
        grant(admin, ANONYMOUS, (CLUSTER, "kafka-cluster", Operation.DESCRIBE))
        cluster = roundtrip(sock, METADATA, 10, Req(topics=[], include_cluster_authorized_operations=True), 3)
        assert cluster.cluster_authorized_operations == 1 << Operation.DESCRIBE


def test_describe_topic_partitions(broker, admin):
    """As Kafka's: all topics leave out the undescribable; one named and not describable is
    TOPIC_AUTHORIZATION_FAILED, existing or not, after the others; operations as bit fields."""
    for topic in ("dtp-visible", "dtp-hidden"):
        create_topic(admin, topic)
    grant(admin, ANONYMOUS, (TOPIC, "dtp-visible", Operation.DESCRIBE))
    Req = DESCRIBE_TOPIC_PARTITIONS.request
    with connect(broker.port) as sock:
        every = roundtrip(sock, DESCRIBE_TOPIC_PARTITIONS, 0, Req(topics=[]), 1).topics
        assert [(t.name, t.topic_authorized_operations) for t in every if t.name.startswith("dtp-")] == [
            ("dtp-visible", 1 << Operation.DESCRIBE)]
        named = roundtrip(sock, DESCRIBE_TOPIC_PARTITIONS, 0, Req(topics=[
            Req.TopicRequest(name=n) for n in ("dtp-unknown", "dtp-hidden", "dtp-visible")]), 2).topics
        assert [(t.name, t.error_code, len(t.partitions)) for t in named] == [
            ("dtp-visible", 0, 1), ("dtp-hidden", TOPIC_DENIED, 0), ("dtp-unknown", TOPIC_DENIED, 0)]


# -- every API, refused ----------------------------------------------------------------------

def _topic_codes(topics, partitions="partitions", code="error_code"):
    return {getattr(p, code) for t in topics for p in getattr(t, partitions)}


def _batch(count=2):
    return build_batch(records_of(count, "authz"))


def _offset_commit(group="g", topic="t"):
    Req = OFFSET_COMMIT.request
    return Req(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[Req.OffsetCommitRequestTopic(
        name=topic, partitions=[Req.OffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                                 committed_metadata="")])])


def _offset_fetch(group="g", topics=("t",)):
    Req = OFFSET_FETCH.request
    return Req(groups=[Req.OffsetFetchRequestGroup(group_id=group, topics=None if topics is None else [
        Req.OffsetFetchRequestTopics(name=t, partition_indexes=[0]) for t in topics])])


def _txn_offset_commit():
    Req = TXN_OFFSET_COMMIT.request
    return Req(transactional_id="tx", group_id="g", producer_id=1, producer_epoch=0, topics=[
        Req.TxnOffsetCommitRequestTopic(name="t", partitions=[Req.TxnOffsetCommitRequestPartition(
            partition_index=0, committed_offset=1, committed_metadata="")])])


def _configs(api, resource_type, name):
    Req = api.request
    if api is DESCRIBE_CONFIGS:
        return Req(resources=[Req.DescribeConfigsResource(resource_type=resource_type, resource_name=name,
                                                          configuration_keys=None)])
    config = (Req.AlterableConfig(name="retention.ms", value="1000") if api is ALTER_CONFIGS else
              Req.AlterableConfig(name="log.retention.ms", config_operation=0, value="1000"))
    if resource_type == 2 and api is INCREMENTAL_ALTER_CONFIGS:
        config.name = "retention.ms"
    return Req(validate_only=True, resources=[Req.AlterConfigsResource(
        resource_type=resource_type, resource_name=name, configs=[config])])


# name: (api, version, body, what of the response, expected). Each is sent by User:ANONYMOUS
# with no ACL at all; topic "t" exists.
REFUSED = {
    "Produce": (PRODUCE, 9, lambda: produce_body("t", 0, _batch()),
                lambda r: _topic_codes(r.responses, "partition_responses"), {TOPIC_DENIED}),
    "Produce transactional": (PRODUCE, 9, lambda: PRODUCE.request(
        acks=-1, timeout_ms=10_000, transactional_id="tx", topic_data=produce_body("t", 0, _batch()).topic_data),
                              lambda r: _topic_codes(r.responses, "partition_responses"), {TXN_DENIED}),
    "Produce transactional, transactions v2": (PRODUCE, 12, lambda: PRODUCE.request(
        acks=-1, timeout_ms=10_000, transactional_id="tx", topic_data=produce_body(
            "t", 0, build_batch([(None, b"v", (), 0)], producer_id=1, producer_epoch=0, base_sequence=0,
                                transactional=True)).topic_data),
        lambda r: _topic_codes(r.responses, "partition_responses"), {TXN_DENIED}),
    "Fetch": (FETCH, 12, lambda: fetch_body([("t", 0, 0), ("other", 0, 0), ("unknown", 0, 0)]),
              lambda r: _topic_codes(r.responses), {TOPIC_DENIED}),
    "Fetch from a follower": (FETCH, 12, lambda: _follower(fetch_body([("t", 0, 0)])),
                              lambda r: _topic_codes(r.responses), {TOPIC_DENIED}),
    "ListOffsets": (LIST_OFFSETS, 7, lambda: LIST_OFFSETS.request(replica_id=-1, topics=[
        LIST_OFFSETS.request.ListOffsetsTopic(name="t", partitions=[
            LIST_OFFSETS.request.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
                    lambda r: _topic_codes(r.topics), {TOPIC_DENIED}),
    "OffsetForLeaderEpoch": (OFFSET_FOR_LEADER_EPOCH, 4, lambda: OFFSET_FOR_LEADER_EPOCH.request(topics=[
        OFFSET_FOR_LEADER_EPOCH.request.OffsetForLeaderTopic(topic="t", partitions=[
            OFFSET_FOR_LEADER_EPOCH.request.OffsetForLeaderPartition(partition=0, leader_epoch=0)])]),
                             lambda r: _topic_codes(r.topics), {TOPIC_DENIED}),
    "CreateTopics": (CREATE_TOPICS, 5, lambda: CREATE_TOPICS.request(topics=[CREATE_TOPICS.request.CreatableTopic(
        name="created", num_partitions=1, replication_factor=1, assignments=[], configs=[])], timeout_ms=10_000),
                     lambda r: {(t.error_code, t.error_message) for t in r.topics},
                     {(TOPIC_DENIED, "Authorization failed.")}),
    "DeleteTopics": (DELETE_TOPICS, 5, lambda: DELETE_TOPICS.request(topic_names=["t", "unknown"], timeout_ms=10_000),
                     lambda r: {t.error_code for t in r.responses}, {TOPIC_DENIED}),
    "CreatePartitions": (CREATE_PARTITIONS, 1, lambda: CREATE_PARTITIONS.request(topics=[
        CREATE_PARTITIONS.request.CreatePartitionsTopic(name="t", count=2, assignments=None)], timeout_ms=10_000,
        validate_only=True), lambda r: {t.error_code for t in r.results}, {TOPIC_DENIED}),
    "DeleteRecords": (DELETE_RECORDS, 1, lambda: DELETE_RECORDS.request(topics=[
        DELETE_RECORDS.request.DeleteRecordsTopic(name="t", partitions=[
            DELETE_RECORDS.request.DeleteRecordsPartition(partition_index=0, offset=0)])], timeout_ms=10_000),
                      lambda r: _topic_codes(r.topics), {TOPIC_DENIED}),
    "DescribeConfigs of a topic": (DESCRIBE_CONFIGS, 4, lambda: _configs(DESCRIBE_CONFIGS, 2, "t"),
                                   lambda r: {x.error_code for x in r.results}, {TOPIC_DENIED}),
    "DescribeConfigs of the broker": (DESCRIBE_CONFIGS, 4, lambda: _configs(DESCRIBE_CONFIGS, 4, "0"),
                                      lambda r: {x.error_code for x in r.results}, {CLUSTER_DENIED}),
    "AlterConfigs of a topic": (ALTER_CONFIGS, 1, lambda: _configs(ALTER_CONFIGS, 2, "t"),
                                lambda r: {x.error_code for x in r.responses}, {TOPIC_DENIED}),
    "AlterConfigs of the broker": (ALTER_CONFIGS, 1, lambda: _configs(ALTER_CONFIGS, 4, ""),
                                   lambda r: {x.error_code for x in r.responses}, {CLUSTER_DENIED}),
    "IncrementalAlterConfigs of a topic": (INCREMENTAL_ALTER_CONFIGS, 1,
                                           lambda: _configs(INCREMENTAL_ALTER_CONFIGS, 2, "t"),
                                           lambda r: {x.error_code for x in r.responses}, {TOPIC_DENIED}),
    "IncrementalAlterConfigs of the broker": (INCREMENTAL_ALTER_CONFIGS, 1,
                                              lambda: _configs(INCREMENTAL_ALTER_CONFIGS, 4, ""),
                                              lambda r: {x.error_code for x in r.responses}, {CLUSTER_DENIED}),
    "DescribeLogDirs": (DESCRIBE_LOG_DIRS, 3, lambda: DESCRIBE_LOG_DIRS.request(topics=None),
                        lambda r: (r.error_code, len(r.results)), (CLUSTER_DENIED, 0)),
    "DescribeCluster": (DESCRIBE_CLUSTER, 0, lambda: DESCRIBE_CLUSTER.request(include_cluster_authorized_operations=True),
                        lambda r: (r.error_code, r.cluster_authorized_operations), (0, 0)),
    "InitProducerId, idempotent": (INIT_PRODUCER_ID, 4, lambda: INIT_PRODUCER_ID.request(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1),
                                   lambda r: (r.error_code, r.producer_id), (CLUSTER_DENIED, -1)),
    "InitProducerId, transactional": (INIT_PRODUCER_ID, 4, lambda: INIT_PRODUCER_ID.request(
        transactional_id="tx", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1),
                                      lambda r: (r.error_code, r.producer_id), (TXN_DENIED, -1)),
    "FindCoordinator v3, a group": (FIND_COORDINATOR, 3, lambda: FIND_COORDINATOR.request(key="g", key_type=0),
                                    lambda r: (r.error_code, r.node_id), (GROUP_DENIED, -1)),
    "FindCoordinator v4, groups and ids": (FIND_COORDINATOR, 4, lambda: FIND_COORDINATOR.request(
        key_type=1, coordinator_keys=["tx", "ty"]), lambda r: {c.error_code for c in r.coordinators}, {TXN_DENIED}),
    "JoinGroup": (JOIN_GROUP, 5, lambda: JOIN_GROUP.request(
        group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000, member_id="", protocol_type="consumer",
        protocols=[JOIN_GROUP.request.JoinGroupRequestProtocol(name="range", metadata=b"")]),
                  lambda r: r.error_code, GROUP_DENIED),
    "SyncGroup": (SYNC_GROUP, 3, lambda: SYNC_GROUP.request(group_id="g", generation_id=1, member_id="m",
                                                             assignments=[]), lambda r: r.error_code, GROUP_DENIED),
    "Heartbeat": (HEARTBEAT, 3, lambda: HEARTBEAT.request(group_id="g", generation_id=1, member_id="m"),
                  lambda r: r.error_code, GROUP_DENIED),
    "ConsumerGroupHeartbeat": (CONSUMER_GROUP_HEARTBEAT, 1, lambda: CONSUMER_GROUP_HEARTBEAT.request(
        group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=5000, subscribed_topic_names=["t"],
        topic_partitions=[]), lambda r: r.error_code, GROUP_DENIED),
    "ConsumerGroupDescribe": (CONSUMER_GROUP_DESCRIBE, 1, lambda: CONSUMER_GROUP_DESCRIBE.request(group_ids=["g"]),
                              lambda r: [(g.group_id, g.error_code) for g in r.groups], [("g", GROUP_DENIED)]),
    "LeaveGroup v1": (LEAVE_GROUP, 1, lambda: LEAVE_GROUP.request(group_id="g", member_id="m"),
                      lambda r: r.error_code, GROUP_DENIED),
    "LeaveGroup v3": (LEAVE_GROUP, 3, lambda: LEAVE_GROUP.request(group_id="g", members=[
        LEAVE_GROUP.request.MemberIdentity(member_id="m")]), lambda r: (r.error_code, r.members), (GROUP_DENIED, [])),
    "DescribeGroups": (DESCRIBE_GROUPS, 3, lambda: DESCRIBE_GROUPS.request(groups=["g", "h"],
                                                                            include_authorized_operations=True),
                       lambda r: {(g.error_code, g.authorized_operations) for g in r.groups},
                       {(GROUP_DENIED, -2147483648)}),
    "DeleteGroups": (DELETE_GROUPS, 1, lambda: DELETE_GROUPS.request(groups_names=["g", "h"]),
                     lambda r: {g.error_code for g in r.results}, {GROUP_DENIED}),
    "OffsetCommit": (OFFSET_COMMIT, 8, _offset_commit, lambda r: _topic_codes(r.topics), {GROUP_DENIED}),
    "OffsetFetch v5": (OFFSET_FETCH, 5, lambda: OFFSET_FETCH.request(group_id="g", topics=[
        OFFSET_FETCH.request.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]),
                       lambda r: (r.error_code, r.topics), (GROUP_DENIED, [])),
    "OffsetFetch v1": (OFFSET_FETCH, 1, lambda: OFFSET_FETCH.request(group_id="g", topics=[
        OFFSET_FETCH.request.OffsetFetchRequestTopic(name="t", partition_indexes=[0])]),
                       lambda r: _topic_codes(r.topics), {GROUP_DENIED}),
    "OffsetFetch v8": (OFFSET_FETCH, 8, _offset_fetch, lambda r: {(g.error_code, len(g.topics)) for g in r.groups},
                       {(GROUP_DENIED, 0)}),
    "OffsetDelete": (OFFSET_DELETE, 0, lambda: OFFSET_DELETE.request(group_id="g", topics=[
        OFFSET_DELETE.request.OffsetDeleteRequestTopic(name="t", partitions=[
            OFFSET_DELETE.request.OffsetDeleteRequestPartition(partition_index=0)])]),
                     lambda r: (r.error_code, r.topics), (GROUP_DENIED, [])),
    "AddPartitionsToTxn v3": (ADD_PARTITIONS_TO_TXN, 3, lambda: ADD_PARTITIONS_TO_TXN.request(
        v3_and_below_transactional_id="tx", v3_and_below_producer_id=1, v3_and_below_producer_epoch=0,
        v3_and_below_topics=[ADD_PARTITIONS_TO_TXN.request.AddPartitionsToTxnTopic(name="t", partitions=[0, 1])]),
                              lambda r: _topic_codes(r.results_by_topic_v3_and_below, "results_by_partition",
                                                     "partition_error_code"), {TXN_DENIED}),
    "AddPartitionsToTxn v4 (brokers)": (ADD_PARTITIONS_TO_TXN, 4, lambda: ADD_PARTITIONS_TO_TXN.request(
        transactions=[ADD_PARTITIONS_TO_TXN.request.AddPartitionsToTxnTransaction(
            transactional_id="tx", producer_id=1, producer_epoch=0, verify_only=True, topics=[])]),
                                        lambda r: (r.error_code, r.results_by_transaction), (CLUSTER_DENIED, [])),
    "AddOffsetsToTxn": (ADD_OFFSETS_TO_TXN, 3, lambda: ADD_OFFSETS_TO_TXN.request(
        transactional_id="tx", producer_id=1, producer_epoch=0, group_id="g"), lambda r: r.error_code, TXN_DENIED),
    "EndTxn": (END_TXN, 3, lambda: END_TXN.request(transactional_id="tx", producer_id=1, producer_epoch=0,
                                                    committed=True), lambda r: r.error_code, TXN_DENIED),
    "TxnOffsetCommit": (TXN_OFFSET_COMMIT, 3, _txn_offset_commit, lambda r: _topic_codes(r.topics), {TXN_DENIED}),
    "WriteTxnMarkers": (WRITE_TXN_MARKERS, 1, lambda: WRITE_TXN_MARKERS.request(markers=[
        WRITE_TXN_MARKERS.request.WritableTxnMarker(producer_id=1, producer_epoch=0, transaction_result=True,
                                                    coordinator_epoch=0, topics=[
                WRITE_TXN_MARKERS.request.WritableTxnMarkerTopic(name="t", partition_indexes=[0])])]),
                        lambda r: {p.error_code for m in r.markers for t in m.topics for p in t.partitions},
                        {CLUSTER_DENIED}),
    "DescribeTransactions": (DESCRIBE_TRANSACTIONS, 0, lambda: DESCRIBE_TRANSACTIONS.request(
        transactional_ids=["tx"]), lambda r: {s.error_code for s in r.transaction_states}, {TXN_DENIED}),
    "ListTransactions": (LIST_TRANSACTIONS, 0, lambda: LIST_TRANSACTIONS.request(state_filters=[],
                                                                                 producer_id_filters=[]),
                         lambda r: (r.error_code, [s.transactional_id for s in r.transaction_states
                                                   if s.transactional_id.startswith("authz-")]), (0, [])),
    "DescribeProducers": (DESCRIBE_PRODUCERS, 0, lambda: DESCRIBE_PRODUCERS.request(topics=[
        DESCRIBE_PRODUCERS.request.TopicRequest(name="t", partition_indexes=[0])]),
                          lambda r: _topic_codes(r.topics), {TOPIC_DENIED}),
    "ElectLeaders": (ELECT_LEADERS, 1, lambda: ELECT_LEADERS.request(election_type=0, topic_partitions=[
        ELECT_LEADERS.request.TopicPartitions(topic="t", partitions=[0])]),
                     lambda r: (r.error_code, _topic_codes(r.replica_election_results, "partition_result")),
                     (CLUSTER_DENIED, {CLUSTER_DENIED})),
    "DescribeUserScramCredentials": (DESCRIBE_USER_SCRAM_CREDENTIALS, 0, lambda: DESCRIBE_USER_SCRAM_CREDENTIALS.request(
        users=[DESCRIBE_USER_SCRAM_CREDENTIALS.request.UserName(name="alice")]),
                                     lambda r: (r.error_code, {x.error_code for x in r.results}),
                                     (CLUSTER_DENIED, {CLUSTER_DENIED})),
    "AlterUserScramCredentials": (ALTER_USER_SCRAM_CREDENTIALS, 0, lambda: ALTER_USER_SCRAM_CREDENTIALS.request(
        deletions=[ALTER_USER_SCRAM_CREDENTIALS.request.ScramCredentialDeletion(name="alice", mechanism=1)],
        upsertions=[]), lambda r: [(x.user, x.error_code) for x in r.results], [("alice", CLUSTER_DENIED)]),
    "DescribeClientQuotas": (DESCRIBE_CLIENT_QUOTAS, 1, lambda: DESCRIBE_CLIENT_QUOTAS.request(components=[],
                                                                                              strict=False),
                             lambda r: (r.error_code, r.entries), (CLUSTER_DENIED, None)),
    "AlterClientQuotas": (ALTER_CLIENT_QUOTAS, 1, lambda: ALTER_CLIENT_QUOTAS.request(entries=[
        ALTER_CLIENT_QUOTAS.request.EntryData(entity=[ALTER_CLIENT_QUOTAS.request.EntityData(
            entity_type="user", entity_name="alice")], ops=[ALTER_CLIENT_QUOTAS.request.OpData(
                key="producer_byte_rate", value=1024.0, remove=False)])], validate_only=False),
                          lambda r: [(x.entity[0].entity_name, x.error_code) for x in r.entries],
                          [("alice", CLUSTER_DENIED)]),
}


def _follower(body):
    body.replica_id = 1
    return body


def test_every_api_refused_without_acls(broker, admin):
    with connect(broker.port) as sock:
        for correlation_id, (name, (api, version, body, what, expected)) in enumerate(REFUSED.items()):
            assert what(roundtrip(sock, api, version, body(), correlation_id)) == expected, name


def test_list_groups_shows_what_one_may_describe(broker, admin):
    with _admin_socket(broker) as admin_sock:
        for group in ("lg-a", "lg-b"):  # an offset commit outside any generation makes an empty group
            assert _topic_codes(roundtrip(admin_sock, OFFSET_COMMIT, 8, _offset_commit(group), 1).topics) == {0}
    with connect(broker.port) as sock:
        def listed():
            response = roundtrip(sock, LIST_GROUPS, 4, LIST_GROUPS.request(states_filter=[]), 2)
            return sorted(g.group_id for g in response.groups if g.group_id.startswith("lg-"))

        assert listed() == []
        grant(admin, ANONYMOUS, (GROUP, "lg-b", Operation.DESCRIBE))
        assert listed() == ["lg-b"]
        grant(admin, ANONYMOUS, (CLUSTER, "kafka-cluster", Operation.DESCRIBE))
        assert listed() == ["lg-a", "lg-b"]


def test_offsets_filtered_per_topic(broker, admin):
    """The group allowed, a topic not: its partitions refused, the others committed;
    fetching all offsets leaves the topic out."""
    grant(admin, ANONYMOUS, (GROUP, "of", Operation.READ), (TOPIC, "other", Operation.READ))
    Req = OFFSET_COMMIT.request
    body = _offset_commit("of")
    body.topics.append(Req.OffsetCommitRequestTopic(name="other", partitions=[
        Req.OffsetCommitRequestPartition(partition_index=0, committed_offset=0, committed_metadata="")]))
    with _admin_socket(broker) as admin_sock:
        committed = roundtrip(admin_sock, OFFSET_COMMIT, 8, body, 1)
        assert _topic_codes(committed.topics) == {0}
    with connect(broker.port) as sock:
        response = roundtrip(sock, OFFSET_COMMIT, 8, body, 2)
        assert {t.name: _topic_codes([t]) for t in response.topics} == {"t": {TOPIC_DENIED}, "other": {0}}
        fetched = roundtrip(sock, OFFSET_FETCH, 8, _offset_fetch("of", ("t", "other")), 3).groups[0]
        assert {t.name: [(p.error_code, p.committed_offset) for p in t.partitions] for t in fetched.topics} == {
            "t": [(TOPIC_DENIED, -1)], "other": [(0, 0)]}
        every = roundtrip(sock, OFFSET_FETCH, 8, _offset_fetch("of", None), 4).groups[0]
        assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == [("other", 0)]


def test_delete_topic_by_id_keeps_its_name_unsaid(broker, admin):
    topic = create_topic(admin, "by-id")
    with connect(broker.port) as sock:
        metadata = roundtrip(sock, METADATA, 12, METADATA.request(topics=[METADATA.request.MetadataRequestTopic(
            name=topic)]), 1)
        assert metadata.topics[0].error_code == TOPIC_DENIED
    with _admin_socket(broker) as admin_sock:
        topic_id = roundtrip(admin_sock, METADATA, 12, METADATA.request(topics=[
            METADATA.request.MetadataRequestTopic(name=topic)]), 1).topics[0].topic_id
    body = DELETE_TOPICS.request(topics=[DELETE_TOPICS.request.DeleteTopicState(topic_id=topic_id)], timeout_ms=10_000)
    with connect(broker.port) as sock:
        [result] = roundtrip(sock, DELETE_TOPICS, 6, body, 2).responses
        assert (result.name, result.error_code) == (None, TOPIC_DENIED)
        grant(admin, ANONYMOUS, (TOPIC, topic, Operation.DESCRIBE))
        [result] = roundtrip(sock, DELETE_TOPICS, 6, body, 3).responses
        assert (result.name, result.error_code) == (topic, TOPIC_DENIED)
        grant(admin, ANONYMOUS, (TOPIC, topic, Operation.DELETE))
        [result] = roundtrip(sock, DELETE_TOPICS, 6, body, 4).responses
        assert (result.name, result.error_code) == (topic, 0)


def test_create_topics_without_describe_configs(broker, admin):
    """CREATE without DESCRIBE_CONFIGS: created, but its configs are not shown (v5+)."""
    grant(admin, ANONYMOUS, (TOPIC, "made-blind", Operation.CREATE), (TOPIC, "made-seen", Operation.CREATE),
          (TOPIC, "made-seen", Operation.DESCRIBE_CONFIGS))
    body = CREATE_TOPICS.request(topics=[CREATE_TOPICS.request.CreatableTopic(
        name=name, num_partitions=2, replication_factor=1, assignments=[], configs=[])
        for name in ("made-blind", "made-seen")], timeout_ms=10_000)
    with connect(broker.port) as sock:
        blind, seen = roundtrip(sock, CREATE_TOPICS, 5, body, 1).topics
    assert (blind.error_code, blind.topic_config_error_code, blind.num_partitions, blind.configs) == (
        0, TOPIC_DENIED, -1, [])
    assert (seen.error_code, seen.topic_config_error_code, seen.num_partitions) == (0, 0, 2) and seen.configs


def _admin_socket(broker):
    from tests.test_acls import _sasl_admin_socket

    return _sasl_admin_socket(broker)


# -- a ZooKeeper cluster -------------------------------------------------------------------------

def _metadata_code(port: int, topic: str) -> int:
    with connect(port) as sock:
        return roundtrip(sock, METADATA, 12, METADATA.request(topics=[METADATA.request.MetadataRequestTopic(
            name=topic)], allow_auto_topic_creation=False), 1).topics[0].error_code


def test_cluster_acls(tmp_path, zookeeper):
    """Two brokers, ACLs in ZooKeeper: created through one, enforced by the other within a
    second; deleted likewise; kept at Kafka's znodes; read by a broker starting later.
    allow.everyone.if.no.acl.found lets the brokers (User:ANONYMOUS, PLAINTEXT) talk to
    each other while no ACL names the cluster."""
    from confluent_kafka.admin import AdminClient

    properties = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                  "allow.everyone.if.no.acl.found": "true", "offsets.topic.replication.factor": "2",
                  "transaction.state.log.replication.factor": "2", "transaction.state.log.min.isr": "1",
                  "zookeeper.session.timeout.ms": "6000"}
    with Cluster(tmp_path, zookeeper, brokers=2, properties=properties) as cluster:
        cluster.create_topic("guarded", replication_factor=2)
        first, second = (cluster.processes[b] for b in cluster.ids)
        via_first = AdminClient({"bootstrap.servers": first.bootstrap_servers, "log_level": 0})
        via_second = AdminClient({"bootstrap.servers": second.bootstrap_servers, "log_level": 0})
        assert _metadata_code(second.port, "guarded") == 0

        denied = [acl(TOPIC, "guarded", LITERAL, "User:*", "*", Operation.DESCRIBE, DENY),
                  acl(TOPIC, "secret-", PREFIXED, ANONYMOUS, "*", Operation.ALL, DENY)]
        started = time.monotonic()
        create(via_first, denied)
        wait_for(lambda: _metadata_code(second.port, "guarded") == TOPIC_DENIED, timeout=1.0,
                 what="broker 1 refusing the topic its ACL now denies")
        wait_for(lambda: _metadata_code(second.port, "secret-x") == TOPIC_DENIED, timeout=1.0,
                 what="broker 1 applying a prefixed ACL")
        assert time.monotonic() - started < 5
        assert _metadata_code(second.port, "open") in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, 0)

        zk = KazooClient(hosts=f"{zookeeper.hosts}{cluster.chroot}")
        zk.start(30)
        try:
            data, _ = zk.get("/kafka-acl/Topic/guarded")
            assert json.loads(data) == {"version": 1, "acls": [
                {"principal": "User:*", "permissionType": "Deny", "operation": "Describe", "host": "*"}]}
            data, _ = zk.get("/kafka-acl-extended/prefixed/Topic/secret-")
            assert json.loads(data)["acls"][0]["operation"] == "All"
            literal_notes = [zk.get(f"/kafka-acl-changes/{n}")[0] for n in zk.get_children("/kafka-acl-changes")]
            assert b"TOPIC:guarded" in literal_notes
            extended = [json.loads(zk.get(f"/kafka-acl-extended-changes/{n}")[0])
                        for n in zk.get_children("/kafka-acl-extended-changes")]
            assert {"version": 1, "resourceType": "TOPIC", "name": "secret-", "patternType": "PREFIXED"} in extended
        finally:
            zk.stop()
            zk.close()

        # Both brokers writing one pattern at once: conditional writes, none lost.
        racing = [acl(GROUP, "shared", LITERAL, f"User:u{i}", "*", Operation.READ, ALLOW) for i in range(16)]
        futures = [future for i, b in enumerate(racing)
                   for future in (via_first, via_second)[i % 2].create_acls([to_confluent(b)]).values()]
        for future in futures:
            future.result(30)
        wait_for(lambda: describe(via_first, resource_type=GROUP) == describe(via_second, resource_type=GROUP)
                 == set(racing), timeout=1.0, what="both brokers holding every ACL written at once")

        assert delete(via_second, resource_type=TOPIC, name="guarded", pattern_type=LITERAL) == {denied[0]}
        wait_for(lambda: _metadata_code(first.port, "guarded") == 0, timeout=1.0,
                 what="broker 0 forgetting a deleted ACL")
        cluster.restart(cluster.ids[1])
        second = cluster.processes[cluster.ids[1]]
        assert _metadata_code(second.port, "secret-y") == TOPIC_DENIED  # read from ZooKeeper at start

        # The controller's requests to brokers need CLUSTER_ACTION (here: refused to everyone).
        create(via_first, [acl(CLUSTER, "kafka-cluster", LITERAL, "User:*", "*", Operation.CLUSTER_ACTION, DENY)])
        wait_for(lambda: _inter_broker_codes(second.port) == {CLUSTER_DENIED}, timeout=1.0,
                 what="inter-broker requests refused")


def _inter_broker_codes(port: int) -> set[int]:
    with connect(port) as sock:
        return {roundtrip(sock, UPDATE_METADATA, 7, UPDATE_METADATA.request(
                    controller_id=0, controller_epoch=1, topic_states=[], live_brokers=[]), 1).error_code,
                roundtrip(sock, LEADER_AND_ISR, 5, LEADER_AND_ISR.request(
                    controller_id=0, controller_epoch=1, type=0, topic_states=[], live_leaders=[]), 2).error_code,
                roundtrip(sock, STOP_REPLICA, 3, STOP_REPLICA.request(
                    controller_id=0, controller_epoch=1, topic_states=[]), 3).error_code,
                roundtrip(sock, CONTROLLED_SHUTDOWN, 3, CONTROLLED_SHUTDOWN.request(
                    broker_id=9, broker_epoch=1), 4).error_code}
