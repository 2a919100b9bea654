"""Broker configuration: server.properties parsing, flags, the CLI, shutdown and restart,
and what DescribeConfigs reports."""

from __future__ import annotations

import gc
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from broker.config import (LONG_MAX, BrokerConfig, ConfigError, LogConfig, broker_values, build_config,
                           parse_topic_configs, read_properties, reference)
from broker.replica.topics import CLEAN_SHUTDOWN
from sluice.broker_process import BrokerProcess
import sluice_client
from wire.error_codes import ErrorCode

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)


def config_from(tmp_path, text: str, **overrides) -> tuple[BrokerConfig, list[str]]:
    path = tmp_path / "server.properties"
    path.write_text(text)
    overrides.setdefault("data_dir", str(tmp_path / "data"))
    return build_config(read_properties(str(path)), overrides)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- parsing -----------------------------------------------------------------------------

def test_defaults(tmp_path):
    config, warnings = config_from(tmp_path, "")
    assert warnings == []
    assert (config.node_id, config.host, config.port) == (0, "127.0.0.1", 9092)
    assert config.advertised == ("127.0.0.1", 9092)
    assert config.num_partitions == 1 and config.auto_create_topics is True
    assert config.log == LogConfig()
    assert config.log.retention_ms == 7 * 24 * 3600 * 1000 and config.log.retention_bytes == -1
    assert config.log.flush_messages == config.log.flush_ms == LONG_MAX


def test_every_supported_key(tmp_path):
    config, warnings = config_from(tmp_path, """
# A Kafka-style file: comments, blank lines and both separators.
! another comment style

node.id=7
listeners=PLAINTEXT://0.0.0.0:19092
advertised.listeners : PLAINTEXT://broker.example:29092
log.dirs=/var/lib/sluice
num.partitions=4
auto.create.topics.enable=false
log.segment.bytes=65536
log.roll.ms=600000
log.retention.ms=120000
log.retention.bytes=1048576
log.index.interval.bytes=1024
log.flush.interval.messages=1000
log.flush.interval.ms=250
message.max.bytes=2000000
socket.request.max.bytes=5000000
log.retention.check.interval.ms=200
log.message.timestamp.type=LogAppendTime
log.cleanup.policy=delete
""", data_dir=None)
    assert warnings == []
    assert config.node_id == 7
    assert (config.host, config.port) == ("0.0.0.0", 19092)
    assert config.advertised == ("broker.example", 29092)
    assert config.data_dir == "/var/lib/sluice"
    assert config.num_partitions == 4 and config.auto_create_topics is False
    assert config.socket_request_max_bytes == 5_000_000
    assert config.retention_check_interval_ms == 200
    assert config.log == LogConfig(segment_bytes=65536, segment_ms=600_000, retention_ms=120_000,
                                   retention_bytes=1 << 20, index_interval_bytes=1024,
                                   max_message_bytes=2_000_000, message_timestamp_type="LogAppendTime",
                                   flush_messages=1000, flush_ms=250, cleanup_policy="delete")
    assert set(config.static) >= {"node.id", "listeners", "log.segment.bytes", "message.max.bytes"}


def test_the_configs_reference_is_the_table():
    """docs/configs.md is generated from broker.config's tables: after changing a key,
    `python -m broker.config --reference > docs/configs.md`."""
    assert (Path(REPO) / "docs" / "configs.md").read_text() == reference()


@pytest.mark.parametrize("text", ["log.dirs=/b\nlog.dir=/a", "log.dir=/a\nlog.dirs=/b"])
def test_log_dirs_wins_over_log_dir(tmp_path, text):
    """Kafka: log.dir is read only where log.dirs is not set, wherever it stands in the file."""
    config, _ = config_from(tmp_path, text, data_dir=None)
    assert config.data_dir == "/b"


@pytest.mark.parametrize("text, expected", [
    ("log.retention.hours=2", 2 * 3_600_000),
    ("log.retention.minutes=30", 30 * 60_000),
    ("log.retention.ms=1234", 1234),
    ("log.retention.hours=2\nlog.retention.minutes=30", 30 * 60_000),
    ("log.retention.minutes=30\nlog.retention.hours=2", 30 * 60_000),
    ("log.retention.hours=2\nlog.retention.ms=1234", 1234),
    ("log.retention.ms=1234\nlog.retention.minutes=30\nlog.retention.hours=2", 1234),
    ("log.retention.hours=-1", -1),
    ("log.retention.ms=-1\nlog.retention.hours=2", -1),
])
def test_retention_time_precedence(tmp_path, text, expected):
    """Kafka: log.retention.ms wins over .minutes, which wins over .hours."""
    config, _ = config_from(tmp_path, text)
    assert config.log.retention_ms == expected


@pytest.mark.parametrize("text, expected", [
    ("log.roll.hours=3", 3 * 3_600_000),
    ("log.roll.ms=500\nlog.roll.hours=3", 500),
    ("log.roll.hours=3\nlog.roll.ms=500", 500),
])
def test_roll_time_precedence(tmp_path, text, expected):
    config, _ = config_from(tmp_path, text)
    assert config.log.segment_ms == expected


@pytest.mark.parametrize("key", ["broker.id", "node.id"])
def test_broker_id_synonyms(tmp_path, key):
    config, _ = config_from(tmp_path, f"{key}=12")
    assert config.node_id == 12


def test_listeners(tmp_path):
    """Every listener is kept, with its protocol; host and port are the first listener's
    (what --host and --port set)."""
    config, _ = config_from(tmp_path, "listeners=SSL://:9093,PLAINTEXT://[::1]:9094")
    assert [(l.name, l.host, l.port, l.security_protocol) for l in config.listeners] == [
        ("SSL", "", 9093, "SSL"), ("PLAINTEXT", "::1", 9094, "PLAINTEXT")]
    assert (config.host, config.port) == ("", 9093)
    assert config.advertised_endpoint("PLAINTEXT") == ("::1", 9094)  # advertised defaults to the listener
    assert config.inter_broker_listener.name == "SSL"
    config, _ = config_from(tmp_path, "listeners=plaintext://localhost:9095")
    assert (config.host, config.port, config.listeners[0].name) == ("localhost", 9095, "PLAINTEXT")


def test_named_listeners_and_their_settings(tmp_path):
    config, _ = config_from(tmp_path, "\n".join([
        "listeners=CLIENT://127.0.0.1:9092,REPLICATION://10.0.0.1:9093",
        "advertised.listeners=CLIENT://kafka.example:19092",
        "listener.security.protocol.map=CLIENT:SASL_SSL,REPLICATION:SSL",
        "inter.broker.listener.name=REPLICATION",
        "ssl.keystore.location=/global.pem",
        "listener.name.client.ssl.keystore.location=/client.pem",
        "listener.name.client.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "ssl.key.password=secret"]))
    assert [(l.name, l.security_protocol) for l in config.listeners] == [("CLIENT", "SASL_SSL"),
                                                                         ("REPLICATION", "SSL")]
    assert config.advertised_endpoint("CLIENT") == ("kafka.example", 19092)
    assert config.advertised_endpoint("REPLICATION") == ("10.0.0.1", 9093)
    assert config.inter_broker_listener.name == "REPLICATION"
    assert config.listener_settings("CLIENT") == {"ssl.keystore.location": "/client.pem",
                                                  "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                                                  "ssl.key.password": "secret"}
    assert config.listener_settings("REPLICATION")["ssl.keystore.location"] == "/global.pem"
    assert "ssl.key.password" not in config.static  # a secret is never described
    values = broker_values(config)
    assert values["listeners"] == "CLIENT://127.0.0.1:9092,REPLICATION://10.0.0.1:9093"
    assert values["advertised.listeners"] == "CLIENT://kafka.example:19092,REPLICATION://10.0.0.1:9093"
    assert "secret" not in str(values)


@pytest.mark.parametrize("text, needle", [
    ("listeners=A://h:1,a://h:2", "given twice"),
    ("listeners=PLAINTEXT://h:1,SSL://h:1", "different port"),
    ("listeners=X://h:1", "no security protocol for listener X"),
    ("listeners=PLAINTEXT://h:1\nadvertised.listeners=SSL://h:2", "not one of the listeners"),
    ("listeners=PLAINTEXT://h:1\ninter.broker.listener.name=SSL", "not one of the listeners"),
    ("listeners=PLAINTEXT://h:1\nsecurity.inter.broker.protocol=TLS", "security.inter.broker.protocol"),
    ("listener.security.protocol.map=A:KERBEROS", "listener.security.protocol.map"),
])
def test_listener_mistakes(tmp_path, text, needle):
    with pytest.raises(ConfigError, match=needle):
        config_from(tmp_path, text)


def test_flags_override_the_file(tmp_path):
    text = "listeners=PLAINTEXT://10.0.0.1:1111\nbroker.id=3\nlog.dirs=/from/file\n"
    config, _ = config_from(tmp_path, text, data_dir="/from/flag", port=2222, host="127.0.0.2", node_id=9)
    assert (config.host, config.port, config.node_id, config.data_dir) == ("127.0.0.2", 2222, 9, "/from/flag")
    config, _ = config_from(tmp_path, text, data_dir=None, port=None, host=None, node_id=None)
    assert (config.host, config.port, config.node_id, config.data_dir) == ("10.0.0.1", 1111, 3, "/from/file")


def test_unknown_keys_warn(tmp_path):
    config, warnings = config_from(tmp_path, "log.cleaner.threads=2\nnum.partitions=2\nfoo=bar")
    assert config.num_partitions == 2
    assert len(warnings) == 2
    assert any("log.cleaner.threads" in w for w in warnings) and any("'foo'" in w for w in warnings)
    assert "foo" not in config.static


def test_cluster_keys(tmp_path):
    """Cluster mode's keys under Kafka's names and defaults; the single node has none set."""
    single, _ = config_from(tmp_path, "num.partitions=1")
    assert not single.cluster_mode
    assert (single.zookeeper_session_timeout_ms, single.log.unclean_leader_election_enable,
            single.auto_leader_rebalance_enable, single.controlled_shutdown_enable) == (18000, False, True, True)
    config, warnings = config_from(tmp_path, "zookeeper.connect=127.0.0.1:2181,127.0.0.1:2182/sluice\n"
                                             "broker.id=3\nbroker.rack=r1\n"
                                             "unclean.leader.election.enable=true\n"
                                             "offsets.topic.replication.factor=1\n"
                                             "replica.fetch.wait.max.ms=50")
    assert not warnings and config.cluster_mode
    assert (config.zookeeper_connect, config.node_id, config.broker_rack) == (
        "127.0.0.1:2181,127.0.0.1:2182/sluice", 3, "r1")
    assert config.log.unclean_leader_election_enable and config.offsets_topic_replication_factor == 1
    assert config.replica_fetch_wait_max_ms == 50


@pytest.mark.parametrize("line", [
    "zookeeper.connect=", "zookeeper.connect=localhost", "zookeeper.connect=localhost:2181/",
    "zookeeper.connect=localhost:2181//x", "zookeeper.connect=localhost:70000",
    "zookeeper.session.timeout.ms=0", "unclean.leader.election.enable=yes",
    "offsets.topic.replication.factor=0", "transaction.state.log.min.isr=0",
])
def test_bad_cluster_values(tmp_path, line):
    with pytest.raises(ConfigError, match=line.split("=")[0]):
        config_from(tmp_path, line)


@pytest.mark.parametrize("line", [
    "num.partitions=zero", "num.partitions=0", "broker.id=-2", "node.id=1.5",
    "auto.create.topics.enable=yes", "log.segment.bytes=10", "log.segment.bytes=1GB",
    "log.roll.ms=0", "log.retention.ms=-5", "log.retention.minutes=abc", "log.retention.hours=1.5",
    "log.retention.bytes=lots", "log.index.interval.bytes=-1", "log.flush.interval.messages=0",
    "log.flush.interval.ms=x", "message.max.bytes=big", "socket.request.max.bytes=0",
    "listeners=localhost:9092", "listeners=PLAINTEXT://host:port",
    "advertised.listeners=nonsense", "log.dirs=/a,/b", "log.dirs=",
    "log.message.timestamp.type=Now", "log.cleanup.policy=keep",
    "log.retention.check.interval.ms=0",
])
def test_invalid_values_name_the_key(tmp_path, line):
    key = line.split("=", 1)[0]
    with pytest.raises(ConfigError) as info:
        config_from(tmp_path, line)
    assert key in str(info.value)


def test_connection_limits(tmp_path):
    config, _ = config_from(tmp_path, "")
    assert config.max_connections == config.max_connections_per_ip == (1 << 31) - 1
    assert config.max_connections_per_ip_overrides == {}
    assert (config.connections_max_idle_ms, config.queued_max_requests) == (600_000, 500)
    config, warnings = config_from(tmp_path, """
max.connections=10
max.connections.per.ip=0
max.connections.per.ip.overrides=127.0.0.1:5, ::1:2,[fe80::1]:3
connections.max.idle.ms=1000
queued.max.requests=7
""")
    assert warnings == []
    assert (config.max_connections, config.max_connections_per_ip) == (10, 0)
    assert config.max_connections_per_ip_overrides == {"127.0.0.1": 5, "::1": 2, "fe80::1": 3}
    assert (config.connections_max_idle_ms, config.queued_max_requests) == (1000, 7)
    for line in ("max.connections=-1", "max.connections.per.ip=0",
                 "max.connections.per.ip.overrides=host", "max.connections.per.ip.overrides=h:x",
                 "connections.max.idle.ms=0", "queued.max.requests=0"):
        with pytest.raises(ConfigError, match=line.split("=")[0]):
            config_from(tmp_path, line)


# Kafka's types: INT keys are 32-bit, LONG keys 64-bit, parsed as Java's parseInt /
# parseLong after trim (a sign and ASCII digits; Python's int() takes more).
@pytest.mark.parametrize("key, value", [
    ("log.segment.bytes", "2147483648"), ("log.index.interval.bytes", "2147483648"),
    ("message.max.bytes", "99999999999"), ("num.partitions", "2147483648"),
    ("socket.request.max.bytes", "4294967296"), ("offsets.topic.num.partitions", "2147483648"),
    ("transaction.state.log.num.partitions", "2147483648"), ("node.id", "2147483648"),
    ("log.retention.ms", "9223372036854775808"), ("log.retention.bytes", "-9223372036854775809"),
    ("log.flush.interval.messages", "9223372036854775808"), ("log.roll.hours", "0"),
    ("log.roll.hours", "-1"), ("log.retention.hours", "2147483648"),
    ("offsets.retention.check.interval.ms", "9223372036854775808"),
    ("listeners", "PLAINTEXT://127.0.0.1:70000"), ("listeners", "PLAINTEXT://127.0.0.1:-1"),
    ("advertised.listeners", "PLAINTEXT://example.com:65536"),
    ("num.partitions", "1_000"), ("num.partitions", "\uff11\uff12"), ("num.partitions", "\u0663"),
    ("num.partitions", ""), ("num.partitions", "   "), ("num.partitions", "1.0"),
    ("num.partitions", "12abc"), ("num.partitions", "0x10"), ("num.partitions", "1e3"),
    ("num.partitions", "++1"), ("num.partitions", "+-1"), ("num.partitions", "1 2"),
    ("num.partitions", "\u00a012"), ("log.retention.ms", "-2"), ("log.segment.bytes", "13"),
])
def test_out_of_range_and_malformed_numbers_name_the_key(tmp_path, key, value):
    with pytest.raises(ConfigError) as info:
        build_config({key: value}, {"data_dir": str(tmp_path)})
    assert str(info.value).startswith(key + ":")


@pytest.mark.parametrize("key, value, attribute, expected", [
    ("num.partitions", "+3", "num_partitions", 3),
    ("num.partitions", "\t 007 \n", "num_partitions", 7),
    ("log.segment.bytes", "2147483647", "segment_bytes", 2147483647),
    ("log.segment.bytes", "14", "segment_bytes", 14),
    ("log.retention.ms", "9223372036854775807", "retention_ms", LONG_MAX),
    ("log.retention.bytes", "-5", "retention_bytes", -5),  # Kafka allows any long
    ("log.retention.bytes", "9223372036854775807", "retention_bytes", LONG_MAX),
    ("log.flush.interval.messages", "1", "flush_messages", 1),
    ("auto.create.topics.enable", "TRUE", "auto_create_topics", True),
    ("auto.create.topics.enable", " False ", "auto_create_topics", False),
    ("listeners", "PLAINTEXT://:65535", "port", 65535),
    ("listeners", "PLAINTEXT://127.0.0.1:0", "port", 0),
])
def test_numbers_kafka_accepts(tmp_path, key, value, attribute, expected):
    config, _ = build_config({key: value}, {"data_dir": str(tmp_path)})
    holder = config.log if hasattr(config.log, attribute) else config
    assert getattr(holder, attribute) == expected


@pytest.mark.parametrize("configs, accepted", [
    ({"segment.bytes": "2147483648"}, None), ({"segment.bytes": "13"}, None),
    ({"segment.ms": "0"}, None), ({"retention.ms": "-2"}, None),
    ({"index.interval.bytes": "-1"}, None), ({"max.message.bytes": "1_000"}, None),
    ({"flush.messages": "0"}, None), ({"flush.ms": "-1"}, None),
    ({"retention.ms": "\uff11"}, None), ({"retention.bytes": "9223372036854775808"}, None),
    ({"retention.bytes": "-7"}, {"retention.bytes": "-7"}),
    ({"retention.ms": "+5"}, {"retention.ms": "5"}),
    ({"segment.bytes": "2147483647"}, {"segment.bytes": "2147483647"}),
])
def test_topic_configs_by_kafka_types(configs, accepted):
    if accepted is not None:
        assert parse_topic_configs(configs) == accepted
        return
    with pytest.raises(ConfigError) as info:
        parse_topic_configs(configs)
    assert str(info.value).startswith(next(iter(configs)) + ":")


def test_create_topics_refuses_out_of_range_configs(broker):
    topics = {"too-big-segments": {"segment.bytes": "2147483648"},
              "underscored": {"retention.ms": "1_000"}, "fine": {"retention.bytes": "-7"}}
    with sluice_client.Client(broker.bootstrap_servers, call_timeout=30) as client:
        created = client.admin.create_topics({name: sluice_client.NewTopic(partitions=1, configs=configs)
                                        for name, configs in topics.items()})
        for name, key in (("too-big-segments", "segment.bytes"), ("underscored", "retention.ms")):
            error = created[name].error
            assert error is not None and error.code == ErrorCode.INVALID_CONFIG, created[name]
            assert key in str(error)
        assert created["fine"].error is None
        assert set(client.metadata().topics) == {"fine"}


def test_malformed_lines_and_missing_files(tmp_path):
    with pytest.raises(ConfigError, match=r"server.properties:2: expected key=value"):
        config_from(tmp_path, "num.partitions=1\njust some words\n")
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_properties(str(tmp_path / "absent.properties"))
    with pytest.raises(ConfigError, match="no data directory"):
        config_from(tmp_path, "num.partitions=1", data_dir=None)


def test_values_may_hold_separators(tmp_path):
    """Java properties split at the first '=' or ':', whichever comes first."""
    props = (tmp_path / "p.properties")
    props.write_text("a=b:c\nd: e=f\ng = h \n")
    assert read_properties(str(props)) == {"a": "b:c", "d": "e=f", "g": "h"}


# -- the command line --------------------------------------------------------------------

def run(args, timeout=20.0) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=REPO)


@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "broker", "--help"],
    [os.path.join(VENV_BIN, "sluice"), "broker", "--help"],
])
def test_help(command):
    if not os.path.exists(command[0]):
        pytest.skip(f"{command[0]} is not installed")
    result = run(command)
    assert result.returncode == 0, result.stderr
    for flag in ("--config", "--data-dir", "--port", "--host", "--node-id"):
        assert flag in result.stdout
    assert "sluice broker" in result.stdout


def test_sluice_usage():
    sluice = os.path.join(VENV_BIN, "sluice")
    if not os.path.exists(sluice):
        pytest.skip("sluice is not installed")
    assert run([sluice, "--help"]).returncode == 0
    result = run([sluice])
    assert result.returncode == 2 and "broker" in result.stdout
    result = run([sluice, "frobnicate"])
    assert result.returncode == 2 and "frobnicate" in result.stderr


@pytest.mark.parametrize("content, needle", [
    ("num.partitions=zero\n", "num.partitions"),
    ("log.segment.bytes=-1\n", "log.segment.bytes"),
    ("log.segment.bytes=2147483648\n", "log.segment.bytes"),
    ("num.partitions=1_000\n", "num.partitions"),
    ("listeners=PLAINTEXT://127.0.0.1:70000\n", "listeners"),
    ("log.retention.hours=forever\n", "log.retention.hours"),
    ("auto.create.topics.enable=perhaps\n", "auto.create.topics.enable"),
    ("this line has no separator\n", "expected key=value"),
    (b"num.partitions=\xff\xfe\n", "server.properties"),
    ("group.consumer.session.timeout.ms=1000\n", "group.consumer.session.timeout.ms must be greater"),
    ("group.consumer.min.heartbeat.interval.ms=100\ngroup.consumer.heartbeat.interval.ms=50000\n",
     "group.consumer.heartbeat.interval.ms must be less than or equal"),
    ("group.consumer.min.session.timeout.ms=1000\ngroup.consumer.session.timeout.ms=2000\n",
     "group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms"),
])
def test_invalid_config_file_exits_with_a_message(tmp_path, content, needle):
    path = tmp_path / "server.properties"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = run([sys.executable, "-m", "broker", "--config", str(path),
                  "--data-dir", str(tmp_path / "data"), "--port", "0"])
    assert result.returncode != 0
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("sluice broker:")
    assert not (tmp_path / "data").exists()


def test_missing_config_file_and_bad_flags(tmp_path):
    result = run([sys.executable, "-m", "broker", "--config", str(tmp_path / "nope.properties"),
                  "--data-dir", str(tmp_path / "data")])
    assert result.returncode != 0 and "nope.properties" in result.stderr
    assert "Traceback" not in result.stderr
    result = run([sys.executable, "-m", "broker", "--data-dir", str(tmp_path / "data"), "--port", "x"])
    assert result.returncode == 2 and "--port" in result.stderr and "Traceback" not in result.stderr
    result = run([sys.executable, "-m", "broker", "--data-dir", str(tmp_path / "data"),
                  "--port", "70000"])
    assert result.returncode == 2 and "0-65535" in result.stderr and "Traceback" not in result.stderr
    result = run([sys.executable, "-m", "broker", "--data-dir", str(tmp_path / "data"),
                  "--log-level", "LOUD"])
    assert result.returncode == 2 and "LOUD" in result.stderr and "Traceback" not in result.stderr


# -- the broker process ------------------------------------------------------------------

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, ConfigResource, ConfigSource, NewTopic,  # noqa: E402
                                   ResourceType)


class RawBroker:
    """`python -m broker` with exactly the given arguments (BrokerProcess always passes
    --host and --port), its output gathered by a thread."""

    def __init__(self, args):
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", *args], cwd=REPO,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for_line(self, pattern: str, timeout=20.0) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                match = re.search(pattern, line)
                if match:
                    return match
            if self.proc.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in:\n" + "".join(self.lines))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise


def test_listeners_from_the_file(tmp_path):
    port = free_port()
    path = tmp_path / "server.properties"
    path.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\n"
                    f"advertised.listeners=PLAINTEXT://localhost:{port}\n"
                    f"log.dirs={tmp_path / 'data'}\nnode.id=5\nmystery.key=1\n")
    broker = RawBroker(["--config", str(path)])
    try:
        match = broker.wait_for_line(r"\(node (\d+)\) listening on ([\d.]+):(\d+) \(PLAINTEXT, advertised "
                                     r"(\S+):(\d+)\), data dir (\S+),")
        assert match.groups() == ("5", "127.0.0.1", str(port), "localhost", str(port), str(tmp_path / "data"))
        assert any("WARNING" in line and "mystery.key" in line for line in broker.lines)
        metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=10)
        assert [(b.id, b.host, b.port) for b in metadata.brokers.values()] == [(5, "localhost", port)]
    finally:
        assert broker.stop() == 0
    assert (tmp_path / "data" / "meta.properties").exists()


def test_flags_override_the_file_in_the_process(tmp_path):
    file_port, flag_port = free_port(), free_port()
    path = tmp_path / "server.properties"
    path.write_text(f"listeners=PLAINTEXT://127.0.0.1:{file_port}\nlog.dirs={tmp_path / 'file-data'}\nbroker.id=3\n")
    broker = RawBroker(["--config", str(path), "--port", str(flag_port), "--node-id", "4",
                        "--data-dir", str(tmp_path / "flag-data")])
    try:
        match = broker.wait_for_line(r"\(node (\d+)\) listening on 127\.0\.0\.1:(\d+) .*data dir (\S+),")
        assert match.groups() == ("4", str(flag_port), str(tmp_path / "flag-data"))
    finally:
        assert broker.stop() == 0
    assert (tmp_path / "flag-data").exists() and not (tmp_path / "file-data").exists()


def create_topic(bootstrap, name, config=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        admin.create_topics([NewTopic(name, 1, 1, config=config or {})])[name].result(timeout=15)
    finally:
        del admin
        gc.collect()  # no client left to reconnect to a stopped broker


def produce(bootstrap, topic, count):
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(10) == 0


def watermarks(bootstrap, topic):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()


def since(output: list[str], start: int) -> str:
    return "".join(output[start:])


def test_sigterm_is_clean_and_sigkill_is_recovered(tmp_path):
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    try:
        assert "clean start" in since(broker.output, 0)  # a fresh data directory
        create_topic(broker.bootstrap_servers, "durable")
        produce(broker.bootstrap_servers, "durable", 20)
        assert not (data / CLEAN_SHUTDOWN).exists()  # removed while running

        assert broker.stop() == 0
        assert (data / CLEAN_SHUTDOWN).exists()
        assert "stopped cleanly" in since(broker.output, 0)

        mark = len(broker.output)
        broker.start()
        assert re.search(r"listening on .* clean start", since(broker.output, mark))
        assert not (data / CLEAN_SHUTDOWN).exists()
        assert watermarks(broker.bootstrap_servers, "durable") == (0, 20)
        produce(broker.bootstrap_servers, "durable", 5)

        broker.kill()
        assert not (data / CLEAN_SHUTDOWN).exists()
        mark = len(broker.output)
        broker.start()
        assert re.search(r"listening on .* recovered start", since(broker.output, mark))
        assert watermarks(broker.bootstrap_servers, "durable") == (0, 25)
        produce(broker.bootstrap_servers, "durable", 1)
        assert watermarks(broker.bootstrap_servers, "durable") == (0, 26)
    finally:
        if broker.proc is not None:
            assert broker.stop() == 0


def test_sigint_is_clean_too(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    create_topic(broker.bootstrap_servers, "t")
    broker.proc.send_signal(signal.SIGINT)
    assert broker.proc.wait(20) == 0
    broker.proc = None
    assert (tmp_path / "data" / CLEAN_SHUTDOWN).exists()


def describe(admin, resource) -> dict:
    return admin.describe_configs([resource])[resource].result(timeout=15)


def test_describe_configs(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text("log.segment.bytes=2097152\nlog.retention.hours=48\nnum.partitions=2\n"
                    "message.max.bytes=500000\nauto.create.topics.enable=false\n")
    with BrokerProcess(tmp_path / "data", config_file=str(path)) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        create_topic(broker.bootstrap_servers, "tuned",
                     {"retention.ms": "60000", "message.timestamp.type": "LogAppendTime",
                      "max.message.bytes": "1000"})
        create_topic(broker.bootstrap_servers, "default")

        tuned = describe(admin, ConfigResource(ResourceType.TOPIC, "tuned"))
        for name, value in (("retention.ms", "60000"), ("message.timestamp.type", "LogAppendTime"),
                            ("max.message.bytes", "1000")):
            assert tuned[name].value == value
            assert tuned[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            assert not tuned[name].is_default
        assert tuned["segment.bytes"].value == "2097152"
        assert tuned["segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert tuned["index.interval.bytes"].value == "4096"
        assert tuned["index.interval.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        assert tuned["index.interval.bytes"].is_default

        default = describe(admin, ConfigResource(ResourceType.TOPIC, "default"))
        assert default["retention.ms"].value == str(48 * 3_600_000)
        assert default["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert default["max.message.bytes"].value == "500000"
        assert default["message.timestamp.type"].value == "CreateTime"

        node = describe(admin, ConfigResource(ResourceType.BROKER, "0"))
        assert node["log.segment.bytes"].value == "2097152"
        assert node["log.segment.bytes"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert node["log.retention.ms"].value == str(48 * 3_600_000)
        assert node["num.partitions"].value == "2"
        assert node["auto.create.topics.enable"].value == "false"
        assert node["message.max.bytes"].value == "500000"
        assert node["log.index.interval.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

        with pytest.raises(ck.KafkaException):
            describe(admin, ConfigResource(ResourceType.TOPIC, "absent"))
        del admin
