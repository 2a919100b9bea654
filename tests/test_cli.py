"""`sluice topics` and `sluice groups` as subprocesses against a real broker process
(and, for what it offers, librdkafka's mock cluster), checked against the client's and
confluent-kafka's own view of the cluster.

Every subprocess has a timeout and every polling loop a fixed number of rounds.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from sluice_client import (BROKER_RESOURCE, DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, TOPIC_RESOURCE,
                           UNKNOWN_CONFIG, Client, NewTopic, ProducerRecord, UnsupportedVersion)
from wire.error_codes import ErrorCode
from wire.messages import (CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION,
                           DELETE_GROUPS, DESCRIBE_CONFIGS, DESCRIBE_GROUPS, FIND_COORDINATOR,
                           LIST_GROUPS, METADATA)

from sluice.groups import parse_datetime, parse_duration
from tests.test_client_mock_cluster import ScriptedBroker, run, start_scripted

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI_TIMEOUT = 60
HOUR_MS = 3_600_000


def sluice(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "sluice.cli", *args], capture_output=True,
                            text=True, timeout=CLI_TIMEOUT, cwd=ROOT, input=stdin)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result


def ok(*args: str) -> str:
    result = sluice(*args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def ok_json(*args: str):
    return json.loads(ok(*args, "--output", "json"))


def fails(*args: str, code: int | None = None) -> str:
    """The one-line `sluice: ...` error (or argparse usage error) of a failing command."""
    result = sluice(*args)
    assert result.returncode != 0, (args, result.stdout)
    if code is not None:
        assert result.returncode == code, (args, result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines, args
    if result.returncode == 2:  # argparse: usage, then "prog: error: ..."
        assert "error:" in lines[-1], result.stderr
    else:
        assert len(lines) == 1 and lines[0].startswith("sluice: "), result.stderr
    return lines[-1]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- topics -------------------------------------------------------------------------------

def test_topics_lifecycle(broker):
    b = ("topics", "--bootstrap-server", broker.bootstrap_servers)
    assert "Created topic events." in ok(*b, "create", "events", "--partitions", "3",
                                         "--replication-factor", "1",
                                         "--config", "retention.ms=86400000",
                                         "--config", "cleanup.policy=delete")
    created = json.loads(ok("topics", "create", "other", "--bootstrap-server",
                            broker.bootstrap_servers, "--output", "json"))  # options after the action
    assert created["topic"] == "other" and created["created"] and created["partitions"] >= 1

    with Client(broker.bootstrap_servers) as client:
        for partition, count in ((0, 4), (1, 7)):
            client.producer.produce("events", partition, [(b"k", b"v%d" % i) for i in range(count)])
        topic_id = str(client.metadata(["events"]).topics["events"].topic_id)

    table = ok(*b, "list")
    assert table.splitlines()[0].split() == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR", "TOPIC-ID"]
    assert any(line.split() == ["events", "3", "1", topic_id] for line in table.splitlines())
    listed = ok_json(*b, "list")["topics"]
    assert [t["name"] for t in listed] == ["events", "other"]
    assert listed[0] == {"name": "events", "topic_id": topic_id, "partitions": 3,
                         "replication_factor": 1, "internal": False}

    text = ok(*b, "describe", "events")
    assert f"Topic: events  TopicId: {topic_id}  PartitionCount: 3  ReplicationFactor: 1" in text
    assert "Configs: cleanup.policy=delete,retention.ms=86400000" in text
    rows = [line.split() for line in text.splitlines()[1:]]
    assert rows[0] == ["PARTITION", "LEADER", "REPLICAS", "ISR", "LOG-START-OFFSET", "HIGH-WATERMARK"]
    assert rows[1:] == [["0", "0", "0", "0", "0", "4"], ["1", "0", "0", "0", "0", "7"],
                        ["2", "0", "0", "0", "0", "0"]]
    (described,) = ok_json(*b, "describe", "events")["topics"]
    assert described["topic_id"] == topic_id and described["partition_count"] == 3
    assert described["configs"] == {"cleanup.policy": "delete", "retention.ms": "86400000"}
    assert described["partitions"][1] == {"partition": 1, "leader": 0, "replicas": [0], "isr": [0],
                                          "log_start_offset": 0, "high_watermark": 7,
                                          "adding_replicas": [], "removing_replicas": [], "bytes_left": None}
    every = ok_json(*b, "describe")["topics"]
    assert [t["name"] for t in every] == ["events", "other"] and every[1]["configs"] == {}

    assert "3 -> 5 partitions" in ok(*b, "alter", "events", "--partitions", "5")
    (described,) = ok_json(*b, "describe", "events")["topics"]
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2, 3, 4]
    assert described["partitions"][1]["high_watermark"] == 7

    assert "Deleted topic events." in ok(*b, "delete", "events")
    assert ok_json(*b, "delete", "other") == {"deleted": ["other"], "errors": {}}
    assert ok_json(*b, "list") == {"topics": []}


def test_topics_errors(broker):
    b = ("topics", "--bootstrap-server", broker.bootstrap_servers)
    ok(*b, "create", "t", "--partitions", "2")
    assert "already exists" in fails(*b, "create", "t", "--partitions", "2", code=1)
    assert "exists already" in ok(*b, "create", "t", "--if-not-exists")
    assert "INVALID_CONFIG" in fails(*b, "create", "u", "--config", "no.such.config=1", code=1)
    assert "INVALID_CONFIG" in fails(*b, "create", "u", "--config", "retention.ms=soon", code=1)
    assert "'nope' is not KEY=VALUE" in fails(*b, "create", "u", "--config", "nope", code=2)
    assert "not positive" in fails(*b, "create", "u", "--partitions", "0", code=2)
    assert "INVALID_TOPIC_EXCEPTION" in fails(*b, "create", "bad/name", code=1)
    assert "topic 'u' does not exist" in fails(*b, "describe", "u", code=1)
    assert "topic 'u' does not exist" in fails(*b, "delete", "u", code=1)
    assert "topic 'u' does not exist" in fails(*b, "alter", "u", "--partitions", "3", code=1)
    assert "can only be added" in fails(*b, "alter", "t", "--partitions", "1", code=1)
    assert "the following arguments are required: --partitions" in fails(*b, "alter", "t", code=2)
    assert "--bootstrap-server is required" in fails("topics", "list", code=2)
    assert "invalid choice" in fails(*b, "frobnicate", code=2)
    assert "unknown command 'frobnicate'" in sluice("frobnicate").stderr

    port = closed_port()
    for command in (("topics", "describe", "t"), ("groups", "describe", "g")):
        message = fails(command[0], "--bootstrap-server", f"127.0.0.1:{port}", *command[1:], code=1)
        assert "no broker reachable" in message and "Connection refused" in message
    assert "is not host:port" in fails("topics", "--bootstrap-server", "localhost", "list", code=1)
    fails("topics", "--bootstrap-server", "no-such-host.invalid:9092", "list", code=1)


def test_topics_against_another_kafka_implementation(mock_cluster):
    """librdkafka's mock cluster has no DescribeConfigs or DescribeGroups: describe still
    works (configs marked unavailable) and group commands fail with one clear line."""
    with Client(mock_cluster) as client:
        client.metadata(["cli-mock-topic"], allow_auto_topic_creation=True)
        client.producer.produce("cli-mock-topic", 0, [(b"k", b"v")] * 3)
    described = ok_json("topics", "--bootstrap-server", mock_cluster, "describe", "cli-mock-topic")
    (topic,) = described["topics"]
    assert topic["configs"] is None and topic["partitions"][0]["high_watermark"] == 3
    assert "unavailable" in ok("topics", "--bootstrap-server", mock_cluster, "describe",
                               "cli-mock-topic")
    assert "cannot describe groups" in fails("groups", "--bootstrap-server", mock_cluster,
                                             "describe", "g", code=1)


def test_sluice_broker_dispatch_and_admin_without_broker_package(broker):
    result = subprocess.run([sys.executable, "-m", "sluice.cli", "broker", "--help"],
                            capture_output=True, text=True, timeout=CLI_TIMEOUT, cwd=ROOT)
    assert result.returncode == 0 and "--data-dir" in result.stdout
    script = os.path.join(os.path.dirname(sys.executable), "sluice")
    if os.path.exists(script):
        result = subprocess.run([script, "topics", "--bootstrap-server", broker.bootstrap_servers,
                                 "list"], capture_output=True, text=True, timeout=CLI_TIMEOUT)
        assert result.returncode == 0, result.stderr
    check = ("import sys; from sluice.cli import main; "
             f"codes = [main([command, '--bootstrap-server', '{broker.bootstrap_servers}', 'list']) "
             "for command in ('topics', 'groups')]; "
             "assert not [m for m in sys.modules if m == 'broker' or m.startswith('broker.')]; "
             "sys.exit(max(codes))")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            timeout=CLI_TIMEOUT, cwd=ROOT)
    assert result.returncode == 0, result.stderr


# -- the client's admin methods -------------------------------------------------------------

def test_client_admin_methods(broker):
    with Client(broker.bootstrap_servers) as client:
        client.admin.create_topics({"a": NewTopic(2, 1, {"retention.ms": "1000"})})
        grown = client.admin.create_partitions({"a": 4, "missing": 2})
        assert grown["a"] is None and grown["missing"].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert sorted(client.metadata(["a"]).topics["a"].partitions) == [0, 1, 2, 3]
        error = client.admin.create_partitions({"a": 2})["a"]
        assert error.code == ErrorCode.INVALID_PARTITIONS
        configs = client.admin.describe_configs([(TOPIC_RESOURCE, "a"), (BROKER_RESOURCE, "0")])
        entry = configs[(TOPIC_RESOURCE, "a")]["retention.ms"]
        assert entry.value == "1000" and entry.source == DYNAMIC_TOPIC_CONFIG and not entry.is_default
        assert configs[(BROKER_RESOURCE, "0")]
        cluster = client.admin.describe_cluster()
        assert list(cluster.brokers) == [0] and cluster.brokers[0].port == broker.port

        client.consumer.commit_offsets("admin-group", {("a", 0): 1})
        (listed,) = [g for g in client.admin.list_groups() if g.group_id == "admin-group"]
        assert listed.state == "Empty" and listed.coordinator_id == 0
        assert [g.group_id for g in client.admin.list_groups(["Stable"])] == []
        description = client.admin.describe_groups(["admin-group", "unknown-group"])
        assert description["admin-group"].state == "Empty"
        assert description["admin-group"].members == ()
        assert description["unknown-group"].state == "Dead"
        assert client.admin.delete_groups(["admin-group"]) == {"admin-group": None}
        assert client.admin.delete_groups(["admin-group"])["admin-group"].code == ErrorCode.GROUP_ID_NOT_FOUND
        assert client.consumer.fetch_offsets("admin-group") == {}


def test_client_admin_requests_in_older_forms_and_retries():
    """Scripted answers: DescribeConfigs v0 reports only `is_default`; ListGroups below v4
    cannot filter by state; DeleteGroups and DescribeGroups find the coordinator again
    after NOT_COORDINATOR; member bytes decode with the consumer protocol."""
    not_coordinator = {"delete": 1, "describe": 1}

    def find(body):
        host, port = broker.address.rsplit(":", 1)
        return FIND_COORDINATOR.response(node_id=1, host=host, port=int(port))

    def describe_configs(body):
        R = DESCRIBE_CONFIGS.response
        return R(results=[R.DescribeConfigsResult(
            resource_type=r.resource_type, resource_name=r.resource_name, configs=[
                R.DescribeConfigsResourceResult(name="retention.ms", value="5", is_default=False),
                R.DescribeConfigsResourceResult(name="segment.ms", value="9", is_default=True)])
            for r in body.resources])

    def list_groups(body):
        R = LIST_GROUPS.response
        return R(groups=[R.ListedGroup(group_id="g", protocol_type="consumer")])

    def delete_groups(body):
        R = DELETE_GROUPS.response
        code = ErrorCode.NOT_COORDINATOR if not_coordinator["delete"] else ErrorCode.NON_EMPTY_GROUP
        not_coordinator["delete"] = 0
        return R(results=[R.DeletableGroupResult(group_id=g, error_code=code)
                          for g in body.groups_names])

    def describe_groups(body):
        R = DESCRIBE_GROUPS.response
        code = ErrorCode.NOT_COORDINATOR if not_coordinator["describe"] else 0
        not_coordinator["describe"] = 0
        subscription = CONSUMER_PROTOCOL_SUBSCRIPTION.encode_versioned(
            1, CONSUMER_PROTOCOL_SUBSCRIPTION(topics=["t"]))
        assignment = CONSUMER_PROTOCOL_ASSIGNMENT.encode_versioned(3, CONSUMER_PROTOCOL_ASSIGNMENT(
            assigned_partitions=[CONSUMER_PROTOCOL_ASSIGNMENT.TopicPartition(
                topic="t", partitions=[2, 0])]))
        return R(groups=[R.DescribedGroup(
            error_code=code, group_id=g, group_state="Stable", protocol_type="consumer",
            protocol_data="range", members=[R.DescribedGroupMember(
                member_id="m-1", client_id="c", client_host="/10.0.0.1",
                member_metadata=subscription, member_assignment=assignment)])
            for g in body.groups])

    broker = ScriptedBroker({METADATA: 12, FIND_COORDINATOR: 3, DESCRIBE_CONFIGS: 0,
                             LIST_GROUPS: 3, DELETE_GROUPS: 2, DESCRIBE_GROUPS: 4},
                            {FIND_COORDINATOR.key: find, DESCRIBE_CONFIGS.key: describe_configs,
                             LIST_GROUPS.key: list_groups, DELETE_GROUPS.key: delete_groups,
                             DESCRIBE_GROUPS.key: describe_groups})

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            client = await start_scripted(broker, stack)
            configs = await client.admin.describe_configs([(TOPIC_RESOURCE, "t")])
            listed = await client.admin.list_groups()
            with pytest.raises(UnsupportedVersion, match="ListGroups v4"):
                await client.admin.list_groups(["Stable"])
            deleted = await client.admin.delete_groups(["g"])
            described = await client.admin.describe_groups(["g"])
            return configs, listed, deleted, described

    configs, listed, deleted, described = run(main())
    entries = configs[(TOPIC_RESOURCE, "t")]
    assert (entries["retention.ms"].source, entries["retention.ms"].is_default) == (UNKNOWN_CONFIG, False)
    assert (entries["segment.ms"].source, entries["segment.ms"].is_default) == (DEFAULT_CONFIG, True)
    assert [(g.group_id, g.protocol_type, g.state, g.coordinator_id) for g in listed] == [
        ("g", "consumer", "", 1)]
    assert deleted["g"].code == ErrorCode.NON_EMPTY_GROUP
    group = described["g"]
    assert (group.state, group.protocol, group.coordinator.node_id) == ("Stable", "range", 1)
    (member,) = group.members
    assert member.consumer_subscription() == ("t",)
    assert member.consumer_assignment() == {"t": (0, 2)}
    assert len(broker.sent(FIND_COORDINATOR)) >= 3  # found again after each NOT_COORDINATOR
    assert len(broker.sent(DELETE_GROUPS)) == 2 and len(broker.sent(DESCRIBE_GROUPS)) == 2


# -- groups -------------------------------------------------------------------------------

def produce_timed(bootstrap: str, topic: str, partitions: int, count: int, now_ms: int) -> None:
    """`count` records per partition; record i is (count - i) hours old."""
    with Client(bootstrap) as client:
        client.admin.create_topics({topic: NewTopic(partitions, 1)})
        for partition in range(partitions):
            client.producer.produce(topic, partition, [
                ProducerRecord(b"k", b"%d-%d" % (partition, i), (), now_ms - (count - i) * HOUR_MS)
                for i in range(count)])


def confluent_consumer(bootstrap: str, group: str, **extra):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    return confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                     "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                                     **extra})


def commit_with_confluent(bootstrap: str, group: str, offsets: dict) -> None:
    """Commit outside any membership (assign + commit), as a standalone consumer does."""
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(bootstrap, group)
    try:
        consumer.assign([TopicPartition(t, p) for t, p in offsets])
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def confluent_view(bootstrap: str, group: str, topic: str, partitions: int) -> dict:
    """{partition: (committed offset or None, high watermark)} as confluent-kafka sees them."""
    from confluent_kafka import TopicPartition

    consumer = confluent_consumer(bootstrap, group)
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                       timeout=10)
        return {tp.partition: (tp.offset if tp.offset >= 0 else None,
                               consumer.get_watermark_offsets(tp, timeout=10)[1])
                for tp in committed}
    finally:
        consumer.close()


def first_offsets(consumer, partitions: int, rounds: int = 100) -> dict[int, int]:
    """The offset of the first message the (subscribed) consumer gets from each partition."""
    first: dict[int, int] = {}
    for _ in range(rounds):
        if len(first) == partitions:
            break
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            first.setdefault(message.partition(), message.offset())
    return first


def wait_for_assignment(consumer, rounds: int = 100) -> list:
    for _ in range(rounds):
        consumer.poll(0.1)
        if consumer.assignment():
            return consumer.assignment()
    raise AssertionError(f"no assignment after {rounds} polls")


def wait_for_state(bootstrap: str, group: str, state: str, rounds: int = 50) -> None:
    """Until the coordinator reports `group` in `state` (a LeaveGroup may still be in flight)."""
    with Client(bootstrap) as client:
        for _ in range(rounds):
            if client.admin.describe_groups([group])[group].state == state:
                return
            time.sleep(0.1)
    raise AssertionError(f"group {group} not {state} after {rounds} rounds")


def committed_offsets(bootstrap: str, group: str) -> dict:
    with Client(bootstrap) as client:
        return {(t, p): c.offset for (t, p), c in client.consumer.fetch_offsets(group).items()}


def test_group_describe_and_lag_match_confluent(broker):
    b = ("groups", "--bootstrap-server", broker.bootstrap_servers)
    produce_timed(broker.bootstrap_servers, "lagged", 3, 10, int(time.time() * 1000))
    commit_with_confluent(broker.bootstrap_servers, "watchers", {("lagged", 0): 3, ("lagged", 1): 10})

    listed = ok_json(*b, "list")["groups"]
    assert {"group": "watchers", "protocol_type": None, "state": "Empty", "coordinator": 0} in listed
    assert "watchers" in ok(*b, "list")

    described = ok_json(*b, "describe", "watchers")
    assert described["state"] == "Empty" and described["members"] == []
    view = confluent_view(broker.bootstrap_servers, "watchers", "lagged", 3)
    rows = {o["partition"]: o for o in described["offsets"]}
    assert sorted(rows) == [0, 1, 2]
    for partition, (committed, high) in view.items():
        row = rows[partition]
        assert row["current_offset"] == committed and row["log_end_offset"] == high
        assert row["lag"] == (None if committed is None else high - committed)
    assert (rows[0]["lag"], rows[1]["lag"], rows[2]["lag"]) == (7, 0, None)
    assert described["total_lag"] == 7

    text = ok(*b, "describe", "watchers")
    assert "State: Empty" in text and "(no active members)" in text
    table = [line.split() for line in text.splitlines() if line.startswith("lagged")]
    assert table == [["lagged", "0", "3", "10", "7", "-", "-", "-"],
                     ["lagged", "1", "10", "10", "0", "-", "-", "-"],
                     ["lagged", "2", "-", "10", "-", "-", "-", "-"]]
    assert "Total lag: 7" in text
    assert "group 'nobody' does not exist" in fails(*b, "describe", "nobody", code=1)


def test_group_with_active_member_is_described_and_protected(broker):
    b = ("groups", "--bootstrap-server", broker.bootstrap_servers)
    produce_timed(broker.bootstrap_servers, "live", 2, 6, int(time.time() * 1000))
    consumer = confluent_consumer(broker.bootstrap_servers, "readers", **{"client.id": "reader-1"})
    try:
        consumer.subscribe(["live"])
        wait_for_assignment(consumer)
        from confluent_kafka import TopicPartition
        consumer.commit(offsets=[TopicPartition("live", 0, 2)], asynchronous=False)

        described = ok_json(*b, "describe", "readers")
        assert described["state"] == "Stable"
        assert described["protocol_type"] == "consumer" and described["protocol"]
        (member,) = described["members"]
        assert member["client_id"] == "reader-1" and member["host"]
        assert member["subscription"] == ["live"]
        assert member["assignment"] == [{"topic": "live", "partitions": [0, 1]}]
        rows = {o["partition"]: o for o in described["offsets"]}
        view = confluent_view(broker.bootstrap_servers, "readers", "live", 2)
        assert view == {0: (2, 6), 1: (None, 6)}
        assert (rows[0]["current_offset"], rows[0]["lag"]) == (2, 4)
        assert (rows[1]["current_offset"], rows[1]["lag"]) == (None, None)
        assert rows[0]["member_id"] == member["member_id"] and rows[0]["client_id"] == "reader-1"
        assert member["member_id"] in ok(*b, "describe", "readers")

        before = committed_offsets(broker.bootstrap_servers, "readers")
        for mode in ("--dry-run", "--execute"):
            message = fails(*b, "reset-offsets", "--group", "readers", "--all-topics",
                            "--to-earliest", mode, code=1)
            assert "active member" in message and "Stable" in message
        assert committed_offsets(broker.bootstrap_servers, "readers") == before
        assert "has active members" in fails(*b, "delete", "readers", code=1)
    finally:
        consumer.close()  # leaves the group
    wait_for_state(broker.bootstrap_servers, "readers", "Empty")
    assert ok_json(*b, "describe", "readers")["state"] == "Empty"
    assert ok_json(*b, "delete", "readers") == {"deleted": ["readers"], "errors": {}}
    assert "group 'readers' does not exist" in fails(*b, "describe", "readers", code=1)
    assert "group 'readers' does not exist" in fails(*b, "delete", "readers", code=1)


def test_reset_offsets(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    b = ("groups", "--bootstrap-server", bootstrap)
    now_ms = int(time.time() * 1000)
    produce_timed(bootstrap, "r", 3, 10, now_ms)  # offsets 0-9, record i is 10 - i hours old
    produce_timed(bootstrap, "s", 1, 10, now_ms)
    commit_with_confluent(bootstrap, "resets", {("r", 0): 5, ("r", 1): 5, ("s", 0): 5})

    def reset(*args, execute=False):
        document = ok_json(*b, "reset-offsets", "--group", "resets", *args,
                           "--execute" if execute else "--dry-run")
        assert document["executed"] is execute
        return {(o["topic"], o["partition"]): (o["current_offset"], o["new_offset"])
                for o in document["offsets"]}

    # Dry runs of every target change nothing.
    before = committed_offsets(bootstrap, "resets")
    assert reset("--all-topics", "--to-earliest") == {("r", 0): (5, 0), ("r", 1): (5, 0),
                                                      ("s", 0): (5, 0)}
    assert reset("--topic", "r", "--to-latest") == {("r", 0): (5, 10), ("r", 1): (5, 10),
                                                    ("r", 2): (None, 10)}
    assert reset("--topic", "r:1", "--topic", "s", "--to-offset", "7") == {("r", 1): (5, 7),
                                                                        ("s", 0): (5, 7)}
    assert reset("--topic", "r:0,1", "--to-offset", "99") == {("r", 0): (5, 10), ("r", 1): (5, 10)}
    assert reset("--all-topics", "--shift-by", "-2") == {("r", 0): (5, 3), ("r", 1): (5, 3),
                                                         ("s", 0): (5, 3)}
    assert reset("--topic", "s", "--shift-by", "+3") == {("s", 0): (5, 8)}
    assert reset("--topic", "s", "--shift-by", "-50") == {("s", 0): (5, 0)}
    assert reset("--topic", "s", "--shift-by", "50") == {("s", 0): (5, 10)}
    # Record i is (10 - i) hours old: 5.5 hours ago falls between records 4 and 5.
    instant = dt.datetime.fromtimestamp((now_ms - 5.5 * HOUR_MS) / 1000, dt.timezone.utc)
    for text in (instant.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                 instant.astimezone(dt.timezone(dt.timedelta(hours=2))).isoformat(),
                 instant.astimezone().replace(tzinfo=None).isoformat(timespec="milliseconds")):
        assert reset("--topic", "s", "--to-datetime", text) == {("s", 0): (5, 5)}, text
    assert reset("--topic", "s", "--to-datetime", "2000-01-01T00:00:00Z") == {("s", 0): (5, 0)}
    assert reset("--topic", "s", "--to-datetime", "2999-01-01T00:00:00Z") == {("s", 0): (5, 10)}
    assert reset("--topic", "s", "--by-duration", "PT5H30M") == {("s", 0): (5, 5)}
    assert reset("--topic", "s", "--by-duration", "P1DT1S") == {("s", 0): (5, 0)}
    assert reset("--topic", "s", "--by-duration", "PT0S") == {("s", 0): (5, 10)}
    plan = tmp_path / "plan.csv"
    plan.write_text("r,0,7\n\nr,2,1\ns,0,1000\n")
    assert reset("--all-topics", "--from-file", str(plan)) == {("r", 0): (5, 7), ("r", 2): (None, 1),
                                                               ("s", 0): (5, 10)}
    assert committed_offsets(bootstrap, "resets") == before

    text = ok(*b, "reset-offsets", "--group", "resets", "--topic", "s", "--to-earliest", "--dry-run")
    assert text.splitlines()[0].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert text.splitlines()[1].split() == ["s", "0", "5", "0"] and "Dry run" in text
    assert committed_offsets(bootstrap, "resets") == before

    # Executed resets commit; the group's next consumer starts there.
    assert reset("--topic", "r", "--to-offset", "6", execute=True)[("r", 2)] == (None, 6)
    assert reset("--topic", "r:0", "--shift-by", "-4", execute=True) == {("r", 0): (6, 2)}
    assert reset("--topic", "s", "--by-duration", "PT3H30M", execute=True) == {("s", 0): (5, 7)}
    plan.write_text("r,1,8\n")
    assert reset("--topic", "r", "--from-file", str(plan), execute=True) == {("r", 1): (6, 8)}
    assert "Committed the new offsets" in ok(*b, "reset-offsets", "--group", "resets", "--topic",
                                             "r:2", "--to-datetime",
                                             instant.isoformat(), "--execute")
    assert committed_offsets(bootstrap, "resets") == {("r", 0): 2, ("r", 1): 8, ("r", 2): 5,
                                                      ("s", 0): 7}
    consumer = confluent_consumer(bootstrap, "resets")
    try:
        consumer.subscribe(["r"])
        assert first_offsets(consumer, 3) == {0: 2, 1: 8, 2: 5}
    finally:
        consumer.close()


def test_reset_offsets_usage_and_refusals(broker, tmp_path):
    bootstrap = broker.bootstrap_servers
    b = ("groups", "--bootstrap-server", bootstrap)
    produce_timed(bootstrap, "q", 2, 3, int(time.time() * 1000))
    commit_with_confluent(bootstrap, "careful", {("q", 0): 1})
    base = (*b, "reset-offsets", "--group", "careful")

    assert "one of the arguments --topic --all-topics is required" in fails(
        *base, "--to-earliest", "--dry-run", code=2)
    assert "not allowed with argument" in fails(*base, "--topic", "q", "--all-topics",
                                                "--to-earliest", "--dry-run", code=2)
    assert "one of the arguments --to-earliest" in fails(*base, "--topic", "q", "--dry-run", code=2)
    assert "not allowed with argument" in fails(*base, "--topic", "q", "--to-earliest",
                                                "--to-latest", "--dry-run", code=2)
    assert "one of the arguments --dry-run --execute is required" in fails(
        *base, "--topic", "q", "--to-earliest", code=2)
    assert "not allowed with argument" in fails(*base, "--topic", "q", "--to-earliest",
                                                "--dry-run", "--execute", code=2)
    assert "the following arguments are required: --group" in fails(
        *b, "reset-offsets", "--topic", "q", "--to-earliest", "--dry-run", code=2)
    assert "not an ISO-8601 date-time" in fails(*base, "--topic", "q", "--to-datetime", "yesterday",
                                                "--dry-run", code=2)
    assert "not an ISO-8601 duration" in fails(*base, "--topic", "q", "--by-duration", "1h",
                                               "--dry-run", code=2)
    assert "is negative" in fails(*base, "--topic", "q", "--to-offset", "-1", "--dry-run", code=2)
    assert "TOPIC:PARTITION" in fails(*base, "--topic", "q:x", "--to-earliest", "--dry-run", code=2)
    assert "--from-file" in fails(*base, "--all-topics", "--from-file", str(tmp_path / "missing.csv"),
                                  "--dry-run", code=2)
    bad = tmp_path / "bad.csv"
    bad.write_text("q,0,1\nq,one,2\n")
    assert "line 2" in fails(*base, "--all-topics", "--from-file", str(bad), "--dry-run", code=2)

    assert "topic 'nope' does not exist" in fails(*base, "--topic", "nope", "--to-earliest",
                                                  "--dry-run", code=1)
    assert "has no partition 7" in fails(*base, "--topic", "q:7", "--to-earliest", "--dry-run", code=1)
    assert "no committed offset" in fails(*base, "--topic", "q", "--shift-by", "1", "--dry-run", code=1)
    outside = tmp_path / "outside.csv"
    outside.write_text("q,1,1\n")
    assert "outside the --topic scope" in fails(*base, "--topic", "q:0", "--from-file", str(outside),
                                                "--dry-run", code=1)
    assert "no committed offsets" in fails(*b, "reset-offsets", "--group", "fresh", "--all-topics",
                                           "--to-earliest", "--dry-run", code=1)
    # A group that does not exist yet (state Dead) may get offsets, as with Kafka's tool.
    assert ok_json(*b, "reset-offsets", "--group", "fresh", "--topic", "q", "--to-latest",
                   "--execute")["offsets"] == [
        {"topic": "q", "partition": 0, "current_offset": None, "new_offset": 3},
        {"topic": "q", "partition": 1, "current_offset": None, "new_offset": 3}]
    assert committed_offsets(bootstrap, "fresh") == {("q", 0): 3, ("q", 1): 3}


def test_datetime_and_duration_parsing():
    assert parse_datetime("2024-05-01T12:00:00Z") == 1714564800000
    assert parse_datetime("2024-05-01T12:00:00.250Z") == 1714564800250
    assert parse_datetime("2024-05-01T14:00:00+02:00") == 1714564800000
    local = dt.datetime(2024, 5, 1, 12, 0, 0).astimezone()
    assert parse_datetime("2024-05-01T12:00:00") == int(local.timestamp() * 1000)
    assert parse_duration("PT0S") == 0
    assert parse_duration("P1D") == 86_400_000
    assert parse_duration("PT1H30M") == 5_400_000
    assert parse_duration("P2DT3H4M5.5S") == ((2 * 24 + 3) * 60 + 4) * 60_000 + 5500
    assert parse_duration("pt10m") == 600_000
    assert parse_duration("-PT10M") == -600_000
    assert parse_duration("PT-10M") == -600_000
    for bad in ("P", "PT", "1H", "PT1H30", "P1H", "PT1.5H", ""):
        with pytest.raises(Exception, match="ISO-8601 duration"):
            parse_duration(bad)
