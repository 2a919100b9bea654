"""The inter-broker and election APIs: schemas the codec knows, APIs the broker does not serve.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6), ControlledShutdown (7),
ElectLeaders (43) and AlterPartition (56) are in wire/messages.py for the cluster mode of
issue 17. Here:

- Each request and response at its lowest and its highest version, in the non-flexible and
  the flexible encodings (AlterPartition is flexible from v0), with its nested structs,
  against bytes written out by hand from Kafka's definitions (encode gives them, decode
  gives the message back, re-encoding gives them again). ControlledShutdown v0 is framed
  with request header v0, which has no client id. (test_codec_roundtrip covers every
  version with generated bodies; test_schema_reference checks the tables against Kafka's.)
- The single node serves none of them, nor the partition reassignment APIs (45, 46): its
  ApiVersions lists only broker/handlers' HANDLERS, Sluice's client negotiates none of
  them but ControlledShutdown and the reassignment APIs, and a request at one of them is
  refused unread and the connection closed with a log line, as for an API key the codec
  does not know. A cluster broker also serves the controller's requests (CLUSTER_HANDLERS;
  tests/test_cluster*.py), and asks its controller with ControlledShutdown.
"""

from __future__ import annotations

import logging
import uuid

import pytest

import broker.server
from broker import handlers
from broker.embedded import EmbeddedBroker
from broker.security.session import Session
from broker.handler_results import CloseConnection
from broker.throttled_log import ThrottledLog
from tests.test_broker_failures import (api_versions_body, assert_closed_by_broker, connect,
                                        roundtrip)
from wire import RequestHeader, UnsupportedRequest, decode_request, encode_request
from sluice_client import CLIENT_VERSIONS, Client
from wire.messages import (ALTER_PARTITION, ALTER_PARTITION_REASSIGNMENTS, API_VERSIONS, APIS,
                           CONTROLLED_SHUTDOWN, ELECT_LEADERS, LEADER_AND_ISR,
                           LIST_PARTITION_REASSIGNMENTS, STOP_REPLICA, UPDATE_METADATA)
from wire.protocol import decode_response, encode_response

INTER_BROKER = [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN, ELECT_LEADERS,
                ALTER_PARTITION]
# What the single node does not serve (ElectLeaders it answers: nothing to elect).
NOT_SERVED = [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN, ALTER_PARTITION,
              ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS]
# Of those, what clients send to a cluster's brokers.
ASKED_BY_CLIENTS = [CONTROLLED_SHUTDOWN, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS]
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
ID = TOPIC_ID.hex  # its 16 bytes, in the hex strings below


def hexbytes(text: str) -> bytes:
    """Bytes from hex written with spaces, `|` between fields and `#` comments to line end."""
    lines = (line.split("#")[0] for line in text.splitlines())
    return bytes.fromhex("".join(lines).replace("|", ""))


# -- the messages, lowest and highest versions ----------------------------------------------------
# Conventions in the hex: classic strings are an int16 length, compact ones a uvarint of
# length + 1; classic arrays an int32 count, compact ones a uvarint of count + 1; a flexible
# struct ends in its tagged-field section ("00": none). "t" is 74, "h2" 6832, port 9092 2384.

def leader_and_isr_request_v0():
    r = LEADER_AND_ISR.request
    return r(controller_id=1, controller_epoch=3, ungrouped_partition_states=[
        r.LeaderAndIsrPartitionState(topic_name="t", partition_index=0, controller_epoch=3,
                                     leader=2, leader_epoch=5, isr=[2, 1], partition_epoch=7,
                                     replicas=[2, 1, 0])],
        live_leaders=[r.LeaderAndIsrLiveLeader(broker_id=2, host_name="h2", port=9092)])


LEADER_AND_ISR_REQUEST_V0 = """
    00000001 | 00000003                   # controller id, controller epoch
    00000001                              # ungrouped partition states: 1
      0001 74 | 00000000 | 00000003       #   topic name (v0-1 only), partition, controller epoch
      00000002 | 00000005                 #   leader, leader epoch
      00000002 00000002 00000001          #   isr [2, 1]
      00000007                            #   partition epoch
      00000003 00000002 00000001 00000000 #   replicas [2, 1, 0]
    00000001                              # live leaders: 1
      00000002 | 0002 6832 | 00002384     #   broker id, host, port
"""


def leader_and_isr_request_v7():
    r = LEADER_AND_ISR.request
    return r(controller_id=1, is_k_raft_controller=False, controller_epoch=3,
             broker_epoch=0x1122334455, type=1, topic_states=[
                 r.LeaderAndIsrTopicState(topic_name="t", topic_id=TOPIC_ID, partition_states=[
                     r.LeaderAndIsrPartitionState(
                         partition_index=0, controller_epoch=3, leader=2, leader_epoch=5,
                         isr=[2], partition_epoch=7, replicas=[2, 1], adding_replicas=[1],
                         removing_replicas=[], is_new=True, leader_recovery_state=1)])],
             live_leaders=[r.LeaderAndIsrLiveLeader(broker_id=2, host_name="h2", port=9092)])


LEADER_AND_ISR_REQUEST_V7 = f"""
    00000001 | 00 | 00000003              # controller id, is KRaft controller, controller epoch
    0000001122334455 | 01                 # broker epoch, type
    02                                    # topic states: 1
      02 74 | {ID}                        #   topic name, topic id
      02                                  #   partition states: 1
        00000000 | 00000003               #     partition, controller epoch
        00000002 | 00000005               #     leader, leader epoch
        02 00000002 | 00000007            #     isr [2], partition epoch
        03 00000002 00000001              #     replicas [2, 1]
        02 00000001 | 01                  #     adding [1], removing []
        01 | 01 | 00                      #     is new, leader recovery state, tags
      00                                  #   topic state's tags
    02                                    # live leaders: 1
      00000002 | 03 6832 | 00002384 | 00  #   broker id, host, port, tags
    00                                    # tags
"""


def leader_and_isr_response_v0():
    r = LEADER_AND_ISR.response
    return r(error_code=0, partition_errors=[
        r.LeaderAndIsrPartitionError(topic_name="t", partition_index=1, error_code=6)])


LEADER_AND_ISR_RESPONSE_V0 = """
    0000 | 00000001                       # error code, partition errors: 1
      0001 74 | 00000001 | 0006           #   topic, partition, NOT_LEADER_OR_FOLLOWER
"""


def leader_and_isr_response_v7():
    r = LEADER_AND_ISR.response
    return r(error_code=0, topics=[r.LeaderAndIsrTopicError(topic_id=TOPIC_ID, partition_errors=[
        r.LeaderAndIsrPartitionError(partition_index=1, error_code=74)])])


LEADER_AND_ISR_RESPONSE_V7 = f"""
    0000 | 02                             # error code, topics: 1
      {ID} | 02                           #   topic id, partition errors: 1
        00000001 | 004a | 00              #     partition, FENCED_LEADER_EPOCH, tags
      00                                  #   topic's tags
    00                                    # tags
"""


def update_metadata_request_v0():
    r = UPDATE_METADATA.request
    return r(controller_id=1, controller_epoch=3, ungrouped_partition_states=[
        r.UpdateMetadataPartitionState(topic_name="t", partition_index=0, controller_epoch=3,
                                       leader=2, leader_epoch=5, isr=[2, 1], zk_version=7,
                                       replicas=[2, 1])],
        live_brokers=[r.UpdateMetadataBroker(id=2, v0_host="h2", v0_port=9092)])


UPDATE_METADATA_REQUEST_V0 = """
    00000001 | 00000003                   # controller id, controller epoch
    00000001                              # ungrouped partition states: 1
      0001 74 | 00000000 | 00000003       #   topic, partition, controller epoch
      00000002 | 00000005                 #   leader, leader epoch
      00000002 00000002 00000001          #   isr [2, 1]
      00000007                            #   zk version
      00000002 00000002 00000001          #   replicas [2, 1]
    00000001                              # live brokers: 1
      00000002 | 0002 6832 | 00002384     #   id, v0 host, v0 port
"""


def update_metadata_request_v8():
    r = UPDATE_METADATA.request
    return r(controller_id=1, is_k_raft_controller=False, type=2, controller_epoch=3,
             broker_epoch=9, topic_states=[r.UpdateMetadataTopicState(
                 topic_name="t", topic_id=TOPIC_ID, partition_states=[
                     r.UpdateMetadataPartitionState(
                         partition_index=0, controller_epoch=3, leader=2, leader_epoch=5,
                         isr=[2, 1], zk_version=7, replicas=[2, 1, 0], offline_replicas=[0])])],
             live_brokers=[
                 r.UpdateMetadataBroker(id=2, endpoints=[r.UpdateMetadataEndpoint(
                     port=9092, host="h2", listener="PLAINTEXT", security_protocol=0)], rack=None),
                 r.UpdateMetadataBroker(id=1, endpoints=[], rack="r1")])


UPDATE_METADATA_REQUEST_V8 = f"""
    00000001 | 00 | 00000003              # controller id, is KRaft controller, controller epoch
    0000000000000009                      # broker epoch
    02                                    # topic states: 1
      02 74 | {ID}                        #   topic name, topic id
      02                                  #   partition states: 1
        00000000 | 00000003               #     partition, controller epoch
        00000002 | 00000005               #     leader, leader epoch
        03 00000002 00000001 | 00000007   #     isr [2, 1], zk version
        04 00000002 00000001 00000000     #     replicas [2, 1, 0]
        02 00000000 | 00                  #     offline replicas [0], tags
      00                                  #   topic state's tags
    03                                    # live brokers: 2
      00000002 | 02                       #   id 2, endpoints: 1
        00002384 | 03 6832                #     port, host
        0a 504c41494e54455854 | 0000 | 00 #     listener "PLAINTEXT", security protocol, tags
      00 | 00                             #   rack null, tags
      00000001 | 01 | 03 7231 | 00        #   id 1, no endpoints, rack "r1", tags
    01 | 00 01 02                         # tags: 1, tag 0 (type) of 1 byte: 2 (full)
"""

STOP_REPLICA_REQUEST_V0 = """
    00000001 | 00000003 | 01              # controller id, controller epoch, delete partitions
    00000002                              # ungrouped partitions: 2
      0001 74 | 00000000                  #   topic, partition
      0001 74 | 00000001
"""


def stop_replica_request_v0():
    r = STOP_REPLICA.request
    return r(controller_id=1, controller_epoch=3, delete_partitions=True, ungrouped_partitions=[
        r.StopReplicaPartitionV0(topic_name="t", partition_index=0),
        r.StopReplicaPartitionV0(topic_name="t", partition_index=1)])


def stop_replica_request_v4():
    r = STOP_REPLICA.request
    return r(controller_id=1, is_k_raft_controller=False, controller_epoch=3, broker_epoch=9,
             topic_states=[r.StopReplicaTopicState(topic_name="t", partition_states=[
                 r.StopReplicaPartitionState(partition_index=0, leader_epoch=5,
                                             delete_partition=True),
                 r.StopReplicaPartitionState(partition_index=1, leader_epoch=-2,
                                             delete_partition=False)])])


STOP_REPLICA_REQUEST_V4 = """
    00000001 | 00 | 00000003              # controller id, is KRaft controller, controller epoch
    0000000000000009                      # broker epoch
    02                                    # topic states: 1
      02 74 | 03                          #   topic, partition states: 2
        00000000 | 00000005 | 01 | 00     #     partition, leader epoch, delete, tags
        00000001 | fffffffe | 00 | 00
      00                                  #   topic state's tags
    00                                    # tags
"""


def stop_replica_response_v0():
    r = STOP_REPLICA.response
    return r(error_code=0, partition_errors=[
        r.StopReplicaPartitionError(topic_name="t", partition_index=0, error_code=0)])


STOP_REPLICA_RESPONSE_V0 = """
    0000 | 00000001                       # error code, partition errors: 1
      0001 74 | 00000000 | 0000           #   topic, partition, error code
"""


def stop_replica_response_v4():
    r = STOP_REPLICA.response
    return r(error_code=11, partition_errors=[
        r.StopReplicaPartitionError(topic_name="t", partition_index=0, error_code=74)])


STOP_REPLICA_RESPONSE_V4 = """
    000b | 02                             # STALE_CONTROLLER_EPOCH, partition errors: 1
      02 74 | 00000000 | 004a | 00        #   topic, partition, FENCED_LEADER_EPOCH, tags
    00                                    # tags
"""


def controlled_shutdown_response_v0():
    r = CONTROLLED_SHUTDOWN.response
    return r(error_code=0, remaining_partitions=[
        r.RemainingPartition(topic_name="t", partition_index=0)])


def controlled_shutdown_response_v3():
    r = CONTROLLED_SHUTDOWN.response
    return r(error_code=77, remaining_partitions=[
        r.RemainingPartition(topic_name="t", partition_index=1)])


def elect_leaders_request_v0():
    r = ELECT_LEADERS.request
    return r(topic_partitions=[r.TopicPartitions(topic="t", partitions=[0, 1])], timeout_ms=60000)


ELECT_LEADERS_REQUEST_V0 = """
    00000001                              # topic partitions: 1 (no election type before v1)
      0001 74 | 00000002 00000000 00000001 #  topic, partitions [0, 1]
    0000ea60                              # timeout 60000 ms
"""


def elect_leaders_response_v0():
    r = ELECT_LEADERS.response
    return r(throttle_time_ms=0, replica_election_results=[r.ReplicaElectionResult(
        topic="t", partition_result=[
            r.PartitionResult(partition_id=0, error_code=0, error_message=None),
            r.PartitionResult(partition_id=1, error_code=84, error_message="no")])])


ELECT_LEADERS_RESPONSE_V0 = """
    00000000                              # throttle time (no error code before v1)
    00000001                              # election results: 1
      0001 74 | 00000002                  #   topic, partition results: 2
        00000000 | 0000 | ffff            #     partition, error code, message null
        00000001 | 0054 | 0002 6e6f       #     ELECTION_NOT_NEEDED, "no"
"""


def elect_leaders_response_v2():
    r = ELECT_LEADERS.response
    return r(throttle_time_ms=5, error_code=0, replica_election_results=[r.ReplicaElectionResult(
        topic="t", partition_result=[
            r.PartitionResult(partition_id=0, error_code=83, error_message="no")])])


ELECT_LEADERS_RESPONSE_V2 = """
    00000005 | 0000                       # throttle time, error code
    02                                    # election results: 1
      02 74 | 02                          #   topic, partition results: 1
        00000000 | 0053 | 03 6e6f | 00    #     ELIGIBLE_LEADERS_NOT_AVAILABLE, "no", tags
      00                                  #   result's tags
    00                                    # tags
"""


def alter_partition_request_v0():
    r = ALTER_PARTITION.request
    return r(broker_id=2, broker_epoch=9, topics=[r.TopicData(topic_name="t", partitions=[
        r.PartitionData(partition_index=0, leader_epoch=5, new_isr=[2, 1], partition_epoch=7)])])


ALTER_PARTITION_REQUEST_V0 = """
    00000002 | 0000000000000009           # broker id, broker epoch
    02                                    # topics: 1
      02 74 | 02                          #   topic name (v0-1), partitions: 1
        00000000 | 00000005               #     partition, leader epoch
        03 00000002 00000001              #     new isr [2, 1]
        00000007 | 00                     #     partition epoch, tags
      00                                  #   topic's tags
    00                                    # tags
"""


def alter_partition_request_v3():
    r = ALTER_PARTITION.request
    return r(broker_id=2, broker_epoch=9, topics=[r.TopicData(topic_id=TOPIC_ID, partitions=[
        r.PartitionData(partition_index=0, leader_epoch=5, new_isr_with_epochs=[
            r.BrokerState(broker_id=2, broker_epoch=9), r.BrokerState(broker_id=1)],
            leader_recovery_state=0, partition_epoch=7)])])


ALTER_PARTITION_REQUEST_V3 = f"""
    00000002 | 0000000000000009           # broker id, broker epoch
    02                                    # topics: 1
      {ID} | 02                           #   topic id (v2+), partitions: 1
        00000000 | 00000005               #     partition, leader epoch
        03                                #     new isr with epochs: 2
          00000002 | 0000000000000009 | 00 #      broker id, broker epoch, tags
          00000001 | ffffffffffffffff | 00 #      (epoch -1: not known)
        00 | 00000007 | 00                #     leader recovery state, partition epoch, tags
      00                                  #   topic's tags
    00                                    # tags
"""


def alter_partition_response_v0():
    r = ALTER_PARTITION.response
    return r(throttle_time_ms=0, error_code=0, topics=[r.TopicData(topic_name="t", partitions=[
        r.PartitionData(partition_index=0, error_code=0, leader_id=2, leader_epoch=5, isr=[2, 1],
                        partition_epoch=8)])])


ALTER_PARTITION_RESPONSE_V0 = """
    00000000 | 0000                       # throttle time, error code
    02                                    # topics: 1
      02 74 | 02                          #   topic name, partitions: 1
        00000000 | 0000                   #     partition, error code
        00000002 | 00000005               #     leader, leader epoch
        03 00000002 00000001              #     isr [2, 1]
        00000008 | 00                     #     partition epoch, tags
      00                                  #   topic's tags
    00                                    # tags
"""


def alter_partition_response_v3():
    r = ALTER_PARTITION.response
    return r(throttle_time_ms=0, error_code=0, topics=[r.TopicData(topic_id=TOPIC_ID, partitions=[
        r.PartitionData(partition_index=0, error_code=95, leader_id=2, leader_epoch=5, isr=[2],
                        leader_recovery_state=1, partition_epoch=8)])])


ALTER_PARTITION_RESPONSE_V3 = f"""
    00000000 | 0000                       # throttle time, error code
    02                                    # topics: 1
      {ID} | 02                           #   topic id, partitions: 1
        00000000 | 005f                   #     partition, INVALID_UPDATE_VERSION
        00000002 | 00000005               #     leader, leader epoch
        02 00000002 | 01                  #     isr [2], leader recovery state
        00000008 | 00                     #     partition epoch, tags
      00                                  #   topic's tags
    00                                    # tags
"""

MESSAGES = [
    # (schema, version, message, its bytes)
    (LEADER_AND_ISR.request, 0, leader_and_isr_request_v0, LEADER_AND_ISR_REQUEST_V0),
    (LEADER_AND_ISR.request, 7, leader_and_isr_request_v7, LEADER_AND_ISR_REQUEST_V7),
    (LEADER_AND_ISR.response, 0, leader_and_isr_response_v0, LEADER_AND_ISR_RESPONSE_V0),
    (LEADER_AND_ISR.response, 7, leader_and_isr_response_v7, LEADER_AND_ISR_RESPONSE_V7),
    (UPDATE_METADATA.request, 0, update_metadata_request_v0, UPDATE_METADATA_REQUEST_V0),
    (UPDATE_METADATA.request, 8, update_metadata_request_v8, UPDATE_METADATA_REQUEST_V8),
    (UPDATE_METADATA.response, 0, lambda: UPDATE_METADATA.response(error_code=0), "0000"),
    (UPDATE_METADATA.response, 8, lambda: UPDATE_METADATA.response(error_code=11), "000b 00"),
    (STOP_REPLICA.request, 0, stop_replica_request_v0, STOP_REPLICA_REQUEST_V0),
    (STOP_REPLICA.request, 4, stop_replica_request_v4, STOP_REPLICA_REQUEST_V4),
    (STOP_REPLICA.response, 0, stop_replica_response_v0, STOP_REPLICA_RESPONSE_V0),
    (STOP_REPLICA.response, 4, stop_replica_response_v4, STOP_REPLICA_RESPONSE_V4),
    (CONTROLLED_SHUTDOWN.request, 0, lambda: CONTROLLED_SHUTDOWN.request(broker_id=2), "00000002"),
    (CONTROLLED_SHUTDOWN.request, 3,
     lambda: CONTROLLED_SHUTDOWN.request(broker_id=2, broker_epoch=0x100000009),
     "00000002 | 0000000100000009 | 00"),  # broker id, broker epoch (v2+), tags
    (CONTROLLED_SHUTDOWN.response, 0, controlled_shutdown_response_v0,
     "0000 | 00000001 | 0001 74 | 00000000"),  # error code, remaining partitions: ("t", 0)
    (CONTROLLED_SHUTDOWN.response, 3, controlled_shutdown_response_v3,
     "004d | 02 | 02 74 | 00000001 | 00 | 00"),  # STALE_BROKER_EPOCH, [("t", 1)], tags
    (ELECT_LEADERS.request, 0, elect_leaders_request_v0, ELECT_LEADERS_REQUEST_V0),
    (ELECT_LEADERS.request, 2,  # unclean election (1) of every partition (null), 30 s, tags
     lambda: ELECT_LEADERS.request(election_type=1, topic_partitions=None, timeout_ms=30000),
     "01 | 00 | 00007530 | 00"),
    (ELECT_LEADERS.response, 0, elect_leaders_response_v0, ELECT_LEADERS_RESPONSE_V0),
    (ELECT_LEADERS.response, 2, elect_leaders_response_v2, ELECT_LEADERS_RESPONSE_V2),
    (ALTER_PARTITION.request, 0, alter_partition_request_v0, ALTER_PARTITION_REQUEST_V0),
    (ALTER_PARTITION.request, 3, alter_partition_request_v3, ALTER_PARTITION_REQUEST_V3),
    (ALTER_PARTITION.response, 0, alter_partition_response_v0, ALTER_PARTITION_RESPONSE_V0),
    (ALTER_PARTITION.response, 3, alter_partition_response_v3, ALTER_PARTITION_RESPONSE_V3),
]


@pytest.mark.parametrize("schema,version,make,expected", [
    pytest.param(*case, id=f"{case[0].name}-v{case[1]}") for case in MESSAGES])
def test_known_bytes(schema, version, make, expected):
    message = make()
    data = hexbytes(expected)
    assert schema.encode(version, message).getvalue() == data
    decoded = schema.decode(version, data)
    assert decoded == message
    assert schema.encode(version, decoded).getvalue() == data


def test_lowest_and_highest_versions_of_every_inter_broker_message():
    covered = {(schema.name, version) for schema, version, *_ in MESSAGES}
    for api in INTER_BROKER:
        for schema in (api.request, api.response):
            assert {(schema.name, api.versions.lo), (schema.name, api.versions.hi)} <= covered
    # both encodings of each API with a non-flexible version (AlterPartition has none)
    for api in INTER_BROKER:
        flexible = {version in api.flexible for version in (api.versions.lo, api.versions.hi)}
        assert flexible == ({True} if api is ALTER_PARTITION else {False, True})


def test_versions_as_kafka_3_9_has_them():
    assert [(api.key, api.versions.text, api.flexible.text) for api in INTER_BROKER] == [
        (4, "0-7", "4+"), (5, "0-4", "2+"), (6, "0-8", "6+"), (7, "0-3", "3+"), (43, "0-2", "2+"),
        (56, "0-3", "0+")]


def test_defaults_follow_kafka():
    """Epochs default to -1 ("not known"), ElectLeaders' timeout to 60 s."""
    assert LEADER_AND_ISR.request().broker_epoch == -1
    assert STOP_REPLICA.request.StopReplicaPartitionState().leader_epoch == -1
    assert CONTROLLED_SHUTDOWN.request().broker_epoch == -1
    assert ELECT_LEADERS.request().timeout_ms == 60000
    assert ALTER_PARTITION.request.BrokerState().broker_epoch == -1
    assert UPDATE_METADATA.request().type == 0  # tagged: left out at its default
    assert UPDATE_METADATA.request.encode(8, UPDATE_METADATA.request()).getvalue().endswith(b"\x01\x01\x00")


# -- frames ---------------------------------------------------------------------------------------

def test_controlled_shutdown_v0_frame_has_no_client_id():
    header = RequestHeader(request_api_key=7, request_api_version=0, correlation_id=42)
    frame = encode_request(header, CONTROLLED_SHUTDOWN.request(broker_id=2))
    assert frame == hexbytes("0007 0000 0000002a | 00000002")  # header v0, then the body
    decoded_header, body = decode_request(frame)
    assert (decoded_header.correlation_id, body.broker_id) == (42, 2)
    assert decoded_header.client_id == ""  # absent from header v0: its default


def test_controlled_shutdown_v1_and_v3_frames_carry_the_client_id():
    body = CONTROLLED_SHUTDOWN.request(broker_id=2, broker_epoch=9)
    header = RequestHeader(request_api_key=7, request_api_version=1, correlation_id=42,
                           client_id="c1")
    assert encode_request(header, body) == hexbytes("0007 0001 0000002a 0002 6331 | 00000002")
    header.request_api_version = 3  # flexible: header v2, its client id still a classic string
    frame = encode_request(header, body)
    assert frame == hexbytes("0007 0003 0000002a 0002 6331 00 | 00000002 0000000000000009 00")
    assert decode_request(frame) == (header, body)


@pytest.mark.parametrize("api", INTER_BROKER, ids=lambda api: api.name)
def test_response_frames(api):
    """Response header v0 (correlation id) before the flexible versions, v1 (plus tags) from them."""
    for version in (api.versions.lo, api.versions.hi):
        body = api.response()
        frame = encode_response(api.key, version, 42, body)
        tags = b"\x00" if version in api.flexible else b""
        assert frame == b"\x00\x00\x00\x2a" + tags + api.response.encode(version, body).getvalue()
        assert decode_response(api.key, version, frame)[1] == body


# -- known, not served ------------------------------------------------------------------------------

def test_none_is_served_listed_or_negotiated():
    for api in NOT_SERVED:
        assert APIS[api.key] is api
        assert api.key not in handlers.HANDLERS
        assert api.key not in handlers.SERVED_APIS
        assert api.key not in CLIENT_VERSIONS or api in ASKED_BY_CLIENTS
    assert sorted(handlers.SERVED_APIS) == sorted(handlers.HANDLERS)
    assert sorted(handlers.CLUSTER_SERVED_APIS) == sorted({**handlers.HANDLERS, **handlers.CLUSTER_HANDLERS})
    assert {LEADER_AND_ISR.key, STOP_REPLICA.key, UPDATE_METADATA.key, CONTROLLED_SHUTDOWN.key,
            ALTER_PARTITION_REASSIGNMENTS.key, LIST_PARTITION_REASSIGNMENTS.key} == set(handlers.CLUSTER_HANDLERS)
    assert ELECT_LEADERS.key in handlers.HANDLERS


def request_frame(api, version: int, correlation_id: int) -> bytes:
    header = RequestHeader(request_api_key=api.key, request_api_version=version,
                           correlation_id=correlation_id, client_id="controller")
    return encode_request(header, api.request())


@pytest.mark.parametrize("api", NOT_SERVED, ids=lambda api: api.name)
def test_the_served_apis_refuse_them_unread(api):
    for version in (api.versions.lo, api.versions.hi):
        frame = request_frame(api, version, 9)
        assert decode_request(frame)[0].request_api_key == api.key  # the codec knows it
        with pytest.raises(UnsupportedRequest) as info:
            decode_request(frame, apis=handlers.SERVED_APIS)
        assert info.value.header.correlation_id == 9
        assert info.value.header.client_id == ("" if (api, version) == (CONTROLLED_SHUTDOWN, 0)
                                               else "controller")
        with pytest.raises(UnsupportedRequest):  # the body is not read: garbage is no different
            decode_request(frame + b"\xff" * 8, apis=handlers.SERVED_APIS)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("inter-broker") / "data") as running:
        yield running


def test_api_versions_lists_only_the_served_apis(embedded):
    with connect(embedded.broker.server.port) as sock:
        response = roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 1)
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == {key: (handlers.MIN_VERSIONS[key], handlers.MAX_VERSIONS[key])
                      for key in handlers.HANDLERS}
    assert not listed.keys() & {api.key for api in NOT_SERVED}
    with Client(embedded.bootstrap_servers) as client:
        negotiated = client.negotiated_versions()
    assert not negotiated.keys() & {api.key for api in NOT_SERVED}


def test_a_request_at_one_closes_the_connection_with_a_log_line(embedded, caplog, monkeypatch):
    # A fresh throttle: the broker logs at most 5 closings per 10 s, and other tests may
    # have spent them.
    monkeypatch.setattr(broker.server, "_log_closing",
                        ThrottledLog(broker.server.log, logging.WARNING, burst=100))
    caplog.set_level(logging.WARNING, logger="sluice.broker")
    port = embedded.broker.server.port
    sent = []
    for api in NOT_SERVED:
        for version in (api.versions.lo, api.versions.hi):
            frame = request_frame(api, version, 5)
            with connect(port) as sock:
                sock.sendall(len(frame).to_bytes(4, "big") + frame)
                assert_closed_by_broker(sock)
            sent.append(f"unsupported API key {api.key} version {version}")
    # the broker still serves
    with connect(port) as sock:
        assert roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 2).error_code == 0
    logged = [record.getMessage() for record in caplog.records if record.name == "sluice.broker"]
    for what in sent:
        assert any(what in line and line.startswith("closing") for line in logged), (what, logged)


def test_handle_frame_raises_close_connection(embedded):
    """The dispatcher's own word: CloseConnection, whose message is the line logged."""
    with pytest.raises(CloseConnection, match=r"unsupported API key 4 version 7 \(client 'controller'\)"):
        embedded.broker.handle_frame(bytearray(request_frame(LEADER_AND_ISR, 7, 1)), Session("127.0.0.1"))
