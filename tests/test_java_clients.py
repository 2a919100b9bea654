"""Apache Kafka's own Java client (kafka-clients 4.4.0 and 3.9.2) against the real broker.

The Maven project in tests/java (built once per client version and cached by sluice/maven.py)
runs every scenario in one JVM against one broker process and prints what it observed, one
JSON object per scenario; each test below asserts one outcome for each client version:

- the idempotent producer (acks=all) with every codec: every record acknowledged at
  consecutive offsets and read back with its key, value and headers (empty, null and
  repeated keys among them), also recompressed by the broker to the topic's codec; a
  record over the topic's max.message.bytes is refused (unless compression makes it fit);
  acks=0 and acks=1 producers;
- consume-transform-produce transactions with `sendOffsetsToTransaction`: one committed,
  one aborted; read_committed sees the first only, read_uncommitted both, the group's
  committed offset is the committed transaction's; while one is open the last stable
  offset holds at its first record, and the admin describes and lists it; a second
  producer with the same transactional id fences the first, as does the admin's
  fenceProducers (4.4 uses transactions v2, 3.9 v1: tests/test_transactions_v2.py); one left
  open past its timeout is aborted by the coordinator;
- two consumers in a group (the eager RangeAssignor, then CooperativeStickyAssignor, then
  the consumer group protocol of KIP-848, group.protocol=consumer) share a 6-partition topic: each partition held once, each record consumed once, and all of it
  taken over by one when the other leaves; a static member
  (group.instance.id) that closes and comes back gets its partitions back without a
  rebalance, and the admin removes static members by instance id;
- `offsetsForTimes` on record timestamps set by the producer, and a seek to what it found;
  a member resuming from committed offsets; records larger than the fetch sizes; a
  position out of range under each auto.offset.reset;
- the AdminClient: topics (by name and by id, validate-only, refused ones), partitions,
  configs (incremental, and the legacy AlterConfigs where the client still has it: 3.x),
  the cluster, ListOffsets by spec, deleteRecords, consumer groups (their offsets
  altered, listed and deleted);
- client quotas: alterClientQuotas and describeClientQuotas (filters, validateOnly, Kafka's
  refusals), and a producer and a consumer held to 10 KiB/s reporting their throttle time
  (produce-/fetch-throttle-time-avg and -max) without a failed request or a reconnection.

A Maven or Java failure fails these tests (never skips them) with Maven's reason.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

from sluice import maven
from sluice.broker_process import BrokerProcess

PROJECT = pathlib.Path(__file__).resolve().parent / "java"
VERSIONS = [maven.KAFKA_VERSION, maven.KAFKA_3_VERSION]
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
SUITE_TIMEOUT_S = 120  # the JVM bounds every scenario to 60 s itself


@pytest.fixture(scope="module")
def java_broker(tmp_path_factory):
    """One broker for both client versions (scenarios name their topics and groups apart).
    Groups form without the initial rebalance delay, and timed-out transactions are looked
    for twice a second, as a test broker should."""
    base = tmp_path_factory.mktemp("java-clients")
    config = base / "server.properties"
    config.write_text("group.initial.rebalance.delay.ms=0\n"
                      "group.consumer.min.heartbeat.interval.ms=500\n"
                      "group.consumer.heartbeat.interval.ms=500\n"
                      "transaction.abort.timed.out.transaction.cleanup.interval.ms=500\n")
    with BrokerProcess(base / "data", config_file=str(config)) as proc:
        yield proc


@pytest.fixture(scope="module", params=VERSIONS, ids=lambda v: f"kafka-clients-{v}")
def suite(request, java_broker) -> dict[str, dict] | str:
    """Every scenario's observations, by scenario name, from one JVM run; or why there are
    none (Maven's reason, the JVM's failure), for each test to fail with, not skip on."""
    version = request.param
    try:
        entries = maven.build_project(PROJECT, {"kafka.version": version})
        command = maven.java_command(entries, "sluice.compat.CompatSuite", java_broker.bootstrap_servers)
    except maven.MavenUnavailable as exc:
        return str(exc)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        return f"the Java suite ran over {SUITE_TIMEOUT_S} s; its output:\n{exc.stdout}\n{exc.stderr}"
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["scenario"]] = result
    if done.returncode != 0 or not results:
        return f"the Java suite exited with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert {r["client_version"] for r in results.values()} == {version}
    return results


def scenario(suite: dict | str, name: str) -> dict:
    if isinstance(suite, str):
        pytest.fail(suite, pytrace=False)
    result = suite.get(name)
    assert result is not None, f"scenario {name} reported nothing"
    assert "error" not in result, result
    return result


def ok(step):
    """A step the scenario recorded: its value, or the error it failed with."""
    assert not (isinstance(step, dict) and "error" in step), step
    return step


def error_class(step) -> str:
    assert isinstance(step, dict) and "error" in step, f"expected an error, got {step!r}"
    return step["error"].split(":")[0]


# -- producing -----------------------------------------------------------------------------

# The producer's codec, and two where the topic's compression.type makes the broker recompress.
@pytest.mark.parametrize("codec", CODECS + ["gzip_to_zstd", "none_to_lz4"])
def test_idempotent_producer_round_trips_every_codec(suite, codec):
    result = scenario(suite, f"idempotent_{codec}")
    assert result["acked"] == result["sent"] == 40
    assert result["offsets_consecutive"] is True
    assert (result["read"], result["missing"], result["mismatches"]) == (40, 0, [])


def test_record_over_max_message_bytes_is_refused(suite):
    result = scenario(suite, "record_too_large")
    assert error_class(result["large"]) == "RecordTooLargeException"
    assert ok(result["small_after"]) == 0  # nothing of the refused batch was written
    assert ok(result["large_compressible"]) == 1  # the limit is on the stored (compressed) batch
    assert ok(result["acks_0"]) == -1 and ok(result["acks_1"]) == 3  # acks=0: no offset known
    assert result["read"] == ["small", "5000 bytes", "acks=0", "acks=1"]


def test_offsets_for_times_finds_the_set_timestamps(suite):
    result = scenario(suite, "offsets_for_times")
    base = result["base"]
    assert result["found"] == {
        "before_first": [0, base],
        "first": [0, base],
        "between_3_and_4": [4, base + 4000],
        "last": [9, base + 9000],
        "after_last": None,
    }
    assert result["first_after_seek"] == [4, base + 4000, "v4"]


# -- consuming -----------------------------------------------------------------------------

def test_next_member_resumes_from_the_committed_offset(suite):
    result = scenario(suite, "resume")
    assert result["first_starts_at"] == 0
    assert ok(result["never_committed"]) is None
    assert ok(result["committed"])[:2] == [12, "twelve"]
    assert result["next_starts_at"] == 12


def test_records_larger_than_the_fetch_sizes_still_come(suite):
    result = scenario(suite, "small_fetches")
    assert result["offsets"] == list(range(12)) and result["intact_values"] == 12


def test_position_out_of_range_follows_auto_offset_reset(suite):
    result = scenario(suite, "out_of_range")
    assert (ok(result["earliest"]), ok(result["latest"])) == ("record 0", "position 10")
    assert error_class(result["none"]) == "OffsetOutOfRangeException"


# -- transactions --------------------------------------------------------------------------

def test_transaction_read_committed_sees_only_the_committed_one(suite):
    result = scenario(suite, "transactions")
    assert result["consumed_input"] == 10
    assert result["read_committed"] == [f"out-in-{i}" for i in range(5)] + ["from-the-successor"]
    # 11 records and three control records: the last stable offset is the log end.
    assert result["read_committed_end_offset"] == 14


def test_transaction_read_uncommitted_sees_both(suite):
    result = scenario(suite, "transactions")
    assert result["read_uncommitted"] == [f"out-in-{i}" for i in range(10)] + ["from-the-successor"]
    assert result["read_uncommitted_end_offset"] == 14


def test_transaction_open_holds_the_last_stable_offset(suite):
    result = scenario(suite, "transactions")
    # ListOffsets latest: read_committed stops at an open transaction's first record.
    assert (ok(result["open_first_latest_committed"]), ok(result["open_first_latest_uncommitted"])) == (0, 5)
    assert (ok(result["open_second_latest_committed"]), ok(result["open_second_latest_uncommitted"])) == (6, 11)


def test_transaction_described_and_listed_by_the_admin(suite):
    result = scenario(suite, "transactions")
    for label in ("open_first", "open_second"):
        described = ok(result[f"{label}_described"])
        assert (described["state"], described["producer_id_set"], described["timeout_ms"]) == \
            ("ONGOING", True, 30000)
        # The output partition and the group's __consumer_offsets partition (AddOffsetsToTxn).
        assert len(described["partitions"]) == 2, described
        assert described["partitions"][0].startswith("__consumer_offsets-")
        assert described["partitions"][1].startswith("jc-txn-out-")
        assert ok(result[f"{label}_listed"]) == "ONGOING"
    assert ok(result["committed_described"])["state"] == "COMPLETE_COMMIT"
    assert ok(result["aborted_described"])["state"] == "COMPLETE_ABORT"
    assert result["committed_described"]["partitions"] == result["aborted_described"]["partitions"] == []


# A fenced producer's next send: with transactions v2 (kafka-clients 4.4) the partition
# leader adds the partition for it and passes the coordinator's PRODUCER_FENCED on as
# INVALID_PRODUCER_EPOCH, as Kafka's leaders do; with v1 its AddPartitionsToTxn is fenced.
FENCED_SEND = {maven.KAFKA_VERSION: "InvalidProducerEpochException",
               maven.KAFKA_3_VERSION: "ProducerFencedException"}


def fenced_send(result) -> str:
    return FENCED_SEND[result["client_version"]]


def test_transactional_producer_is_fenced_by_its_successor(suite):
    result = scenario(suite, "transactions")
    assert error_class(result["fenced"]) == fenced_send(result)
    assert ok(result["successor_commits"]) == "ok"


def test_transaction_commits_the_group_offset_it_sent(suite):
    result = scenario(suite, "transactions")
    assert result["generation"] >= 1  # sent with a subscribed member's group metadata
    assert result["sent_offset_committed_txn"] == 5 and result["sent_offset_aborted_txn"] == 10
    assert result["group_committed_offset"] == 5


def test_timed_out_transaction_is_aborted_by_the_coordinator(suite):
    result = scenario(suite, "transactions_aborted_for_them")
    assert ok(result["timeout_state"]) == "COMPLETE_ABORT"
    # The coordinator bumped the epoch when it aborted: the producer is fenced.
    assert error_class(result["timeout_commit"]) in ("ProducerFencedException", "InvalidProducerEpochException")
    assert result["read_committed"] == [] and result["read_uncommitted"] == ["timed-out"]


def test_admin_fences_a_transactional_producer(suite):
    result = scenario(suite, "transactions_aborted_for_them")
    assert ok(result["fence_producers"]) == "ok"
    assert error_class(result["fenced_commit"]) == fenced_send(result)


# -- consumer groups -----------------------------------------------------------------------

@pytest.mark.parametrize("assignor", ["eager", "cooperative", "consumer_protocol"])
def test_two_consumers_share_a_topic(suite, assignor):
    result = scenario(suite, f"group_{assignor}")
    assert result["settled"] is True, result
    a, b = result["assignment_a"], result["assignment_b"]
    assert sorted(a + b) == list(range(6)) and a and b
    assert (result["final_assignment_a"], result["final_assignment_b"]) == (a, b)
    assert result["consumed_by_a"] == 10 * len(a) and result["consumed_by_b"] == 10 * len(b)
    assert (result["distinct"], result["duplicates"]) == (60, 0)
    # a leaves (LeaveGroup): b takes every partition and, from the committed offsets, reads nothing again.
    assert result["after_leave_b"] == list(range(6))
    assert result["consumed_after_leave"] == 0


def test_static_member_gets_its_partitions_back_without_a_rebalance(suite):
    result = scenario(suite, "static_membership")
    assert result["settled"] is True and result["resettled"] is True, result
    assert sorted(result["a_before"] + result["b_before"]) == [0, 1, 2, 3]
    assert result["a_after"] == result["a_before"] and result["b_after"] == result["b_before"]
    # Kafka hands a returning static member its assignment in the same generation.
    assert result["generation_after"] == result["generation_before"]


def test_admin_removes_static_members_by_instance_id(suite):
    result = scenario(suite, "static_membership")
    assert ok(result["remove_members"]) == "ok"
    assert ok(result["after_remove"]) == "EMPTY/0"
    assert error_class(result["remove_unknown"]) == "UnknownMemberIdException"


# -- admin ---------------------------------------------------------------------------------

def test_admin_topics(suite):
    result = scenario(suite, "admin_topics")
    topic = ok(result["describe"])["name"]
    assert ok(result["create"]) == "ok"
    assert error_class(result["create_again"]) == "TopicExistsException"
    assert result["describe"] == {"name": topic, "partitions": 2, "leaders": [0, 0], "replicas": 1,
                                  "isr": 1, "internal": False, "topic_id_set": True}
    assert ok(result["listed"]) is True
    assert ok(result["describe_by_id"]) is True
    assert ok(result["create_validate_only"]) is False  # validated, not created
    assert error_class(result["create_replication_3"]) == "InvalidReplicationFactorException"
    assert error_class(result["create_bad_name"]) == "InvalidTopicException"
    assert error_class(result["create_bad_config"]) == "InvalidConfigurationException"
    assert ok(result["create_partitions"]) == "ok" and ok(result["partitions_after"]) == 4
    assert error_class(result["create_partitions_fewer"]) == "InvalidPartitionsException"
    assert ok(result["delete"]) == "ok" and ok(result["listed_after_delete"]) is False
    assert error_class(result["describe_deleted"]) == "UnknownTopicOrPartitionException"


def test_admin_describe_and_incremental_alter_configs(suite):
    result = scenario(suite, "admin_configs")
    assert ok(result["create"]) == "ok"
    assert ok(result["describe"]) == {
        "cleanup.policy": ["delete", "DEFAULT_CONFIG"],
        "max.message.bytes": ["500000", "DYNAMIC_TOPIC_CONFIG"],
        "retention.ms": ["3600000", "DYNAMIC_TOPIC_CONFIG"],
    }
    synonyms = ok(result["synonyms"])
    assert (synonyms["retention.ms.type"], synonyms["max.message.bytes.type"]) == ("LONG", "INT")
    # The topic's override first, then the broker-level key it falls back to.
    assert synonyms["max.message.bytes"] == ["max.message.bytes=500000 DYNAMIC_TOPIC_CONFIG",
                                             "message.max.bytes=1048588 DEFAULT_CONFIG"]
    assert synonyms["retention.ms"][0] == "retention.ms=3600000 DYNAMIC_TOPIC_CONFIG"
    assert synonyms["retention.ms"][1].startswith("log.retention.")
    assert ok(result["describe_broker"]) is True
    assert ok(result["incremental_alter"]) == "ok"
    assert ok(result["after_incremental"]) == {  # SET, DELETE (back to the default), APPEND
        "cleanup.policy": ["delete,compact", "DYNAMIC_TOPIC_CONFIG"],
        "max.message.bytes": ["1048588", "DEFAULT_CONFIG"],
        "retention.ms": ["7200000", "DYNAMIC_TOPIC_CONFIG"],
    }
    assert error_class(result["incremental_alter_unknown_key"]) == "InvalidConfigurationException"


def test_admin_legacy_alter_configs_replaces_every_override(suite):
    result = scenario(suite, "admin_configs")
    if result["client_version"].startswith("4."):
        assert result["legacy_alter"] == "unavailable"  # removed from the 4.x Admin
        return
    assert ok(result["legacy_alter"]) == "ok"
    assert ok(result["after_legacy"]) == {
        "cleanup.policy": ["delete", "DEFAULT_CONFIG"],
        "max.message.bytes": ["400000", "DYNAMIC_TOPIC_CONFIG"],
        "retention.ms": ["604800000", "DEFAULT_CONFIG"],
    }


def test_admin_describe_cluster(suite, java_broker):
    result = scenario(suite, "admin_cluster")
    assert ok(result["cluster_id_set"]) is True
    assert ok(result["nodes"]) == [f"0@{java_broker.bootstrap_servers}"]
    assert ok(result["controller"]) == 0


def test_admin_list_offsets_by_spec(suite):
    result = scenario(suite, "admin_list_offsets")
    base = result["base"]  # records at base + 5, 1, 9, 3, 7 s, in one batch
    assert ok(result["earliest"])[0] == 0
    assert ok(result["latest"])[0] == 5
    assert ok(result["max_timestamp"]) == [2, base + 9000]
    assert ok(result["for_timestamp_6s"]) == [2, base + 9000]
    assert ok(result["for_timestamp_first"]) == [0, base + 5000]
    assert ok(result["for_timestamp_after"]) == [-1, -1]
    assert ok(result["delete_records"]) == 2 and ok(result["earliest_after_delete"]) == 2
    assert error_class(result["delete_records_beyond_end"]) == "OffsetOutOfRangeException"


def test_admin_consumer_groups(suite):
    result = scenario(suite, "admin_groups")
    assert result["joined"] is True
    assert ok(result["listed"]) is True
    active = ok(result["describe_active"])
    assert (active["state"], active["assignor"], active["coordinator_set"]) == ("STABLE", "range", True)
    assert active["members"] == [{"client_id": "admin-groups-member", "assignment": [0, 1]}]
    # Kafka refuses offsets altered under an active member, and deleting a group with members.
    assert error_class(result["alter_offsets_while_active"]) == "UnknownMemberIdException"
    assert error_class(result["delete_while_active"]) == "GroupNotEmptyException"
    assert ok(result["describe_empty"]) == {"state": "EMPTY", "assignor": "", "coordinator_set": True,
                                            "members": []}
    assert ok(result["alter_offsets"]) == "ok"
    offsets = ok(result["list_offsets"])
    assert sorted(offsets.values()) == [[0, ""], [0, "altered"]]
    assert ok(result["delete_offsets"]) == {f"{result['topic']}-0": [0, "altered"]}
    assert ok(result["delete"]) == "ok" and ok(result["listed_after_delete"]) is False
    assert ok(result["list_offsets_after_delete"]) == {}
    assert error_class(result["delete_unknown"]) == "GroupIdNotFoundException"


# -- client quotas (issue 37) --------------------------------------------------------------

def test_admin_alters_and_describes_client_quotas(suite):
    result = scenario(suite, "quotas_admin")
    user, client = result["user"], result["client"]
    by_user = {"consumer_byte_rate": "2097152.0", "producer_byte_rate": "1048576.0"}
    assert ok(result["alter"]) == "ok"
    assert ok(result["describe_user"]) == {  # every entity naming the user
        f"user={user}": by_user,
        f"client-id={client},user={user}": {"request_percentage": "50.5"},
        f"client-id=<default>,user={user}": {"controller_mutation_rate": "10.0"},
    }
    assert ok(result["describe_user_only"]) == {f"user={user}": by_user}
    assert ok(result["describe_user_default_client"]) == {
        f"client-id=<default>,user={user}": {"controller_mutation_rate": "10.0"}}
    assert ok(result["validate_only"]) == {}
    assert result["unknown_key"] == {"error": "InvalidRequestException: Invalid configuration key no_such_quota"}
    assert result["negative_rate"] == {
        "error": "InvalidRequestException: Quota producer_byte_rate must be greater than 0"}
    assert ok(result["remove"]) == {}


def test_producer_and_consumer_report_their_throttle_time_and_stay_connected(suite):
    """Limited to 10 KiB/s, each runs flat out for 3 s: the broker's throttle times show in
    produce-throttle-time-avg/max and fetch-throttle-time-avg/max; no request failed (the
    scenario would say so) and no connection was made after the first request."""
    result = scenario(suite, "quotas_throttle")
    assert result["produced"] > 1 and result["consumed"] > 0
    assert result["produce_throttle_time_avg"] > 0 and result["produce_throttle_time_max"] >= 1000
    assert result["fetch_throttle_time_avg"] > 0 and result["fetch_throttle_time_max"] >= 1000
    assert result["producer_reconnections"] == result["consumer_reconnections"] == 0
