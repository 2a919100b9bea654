"""Client quotas on the single node (issue 37): DescribeClientQuotas and
AlterClientQuotas against a real broker process, through the project's client (sluice_client) (no
Python Kafka client has them) and Kafka's own kafka-configs (ConfigCommand, kafka-tools).

- Set and described: user, client-id and (user, client-id) entities with `<default>`
  at each level, the four keys; Kafka's filters (exact name, default, any name given,
  `strict`); a removal; `validate_only` stores nothing.
- Every check Kafka makes, answered with its code and message and nothing stored:
  unknown keys, values <= 0, a fractional byte rate, empty or duplicate entity types,
  an unknown type, an empty name, `ip` (not served) alone or with a user; bad filters
  (an unknown or empty entity type, a match type with the wrong match string, a type
  twice, ip with user).
- A restart keeps them (client-quotas.json).
- kafka-configs --alter --add-config / --delete-config and --describe for users,
  clients, a user's client and the defaults; `sluice configs` the same, in Kafka's words,
  bad input one line on stderr.
"""

from __future__ import annotations

import json

import pytest

from sluice.broker_process import BrokerProcess
from sluice_client import Client
from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.quota_types import CLIENT_ID, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, USER

pytestmark = pytest.mark.timeout(180)

ALICE = ((USER, "alice"),)
DEFAULT_USER = ((USER, None),)
ALICE_APP = ((CLIENT_ID, "app"), (USER, "alice"))
ALICE_ANY_CLIENT = ((CLIENT_ID, None), (USER, "alice"))
APP = ((CLIENT_ID, "app"),)
DEFAULT_CLIENT = ((CLIENT_ID, None),)


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("client-quotas") / "data") as proc:
        yield proc
    output = "".join(proc.output)
    assert "Traceback" not in output, output[-5000:]


@pytest.fixture
def client(quota_broker):
    with Client(quota_broker.bootstrap_servers) as c:
        everything = c.admin.describe_client_quotas()
        c.admin.alter_client_quotas({entity: {key: None for key in quotas} for entity, quotas in everything.items()})
        yield c


def test_set_describe_filter_and_remove(client):
    results = client.admin.alter_client_quotas({
        ALICE: {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152},
        DEFAULT_USER: {"request_percentage": 50.5},
        ALICE_APP: {"producer_byte_rate": 4096},
        ALICE_ANY_CLIENT: {"controller_mutation_rate": 2.5},
        APP: {"consumer_byte_rate": 1000},
        DEFAULT_CLIENT: {"producer_byte_rate": 100},
    })
    assert set(results.values()) == {None}
    everything = client.admin.describe_client_quotas()
    assert everything == {
        ALICE: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        DEFAULT_USER: {"request_percentage": 50.5},
        ALICE_APP: {"producer_byte_rate": 4096.0},
        ALICE_ANY_CLIENT: {"controller_mutation_rate": 2.5},
        APP: {"consumer_byte_rate": 1000.0},
        DEFAULT_CLIENT: {"producer_byte_rate": 100.0},
    }
    # Kafka's filters: an exact name, the default, any name given; strict: no other type.
    assert set(client.admin.describe_client_quotas([(USER, MATCH_EXACT, "alice")])) == {ALICE, ALICE_APP, ALICE_ANY_CLIENT}
    assert set(client.admin.describe_client_quotas([(USER, MATCH_EXACT, "alice")], strict=True)) == {ALICE}
    assert set(client.admin.describe_client_quotas([(USER, MATCH_DEFAULT, None)])) == {DEFAULT_USER}
    assert set(client.admin.describe_client_quotas([(USER, MATCH_SPECIFIED, None)], strict=True)) == {ALICE, DEFAULT_USER}
    assert set(client.admin.describe_client_quotas([(CLIENT_ID, MATCH_SPECIFIED, None)])) == {
        ALICE_APP, ALICE_ANY_CLIENT, APP, DEFAULT_CLIENT}
    assert set(client.admin.describe_client_quotas([(CLIENT_ID, MATCH_DEFAULT, None), (USER, MATCH_EXACT, "alice")])) \
        == {ALICE_ANY_CLIENT}
    assert set(client.admin.describe_client_quotas([(CLIENT_ID, MATCH_EXACT, "app")], strict=True)) == {APP}
    assert client.admin.describe_client_quotas([(USER, MATCH_EXACT, "bob")]) == {}
    assert client.admin.describe_client_quotas([], strict=True) == {}
    # A removal drops the key; an entity left with none is gone.
    assert client.admin.alter_client_quotas({ALICE: {"consumer_byte_rate": None}, ALICE_APP: {"producer_byte_rate": None},
                                       APP: {"no_such_key": None}}) == {ALICE: None, ALICE_APP: None, APP: None}
    described = client.admin.describe_client_quotas([(USER, MATCH_EXACT, "alice")])
    assert described == {ALICE: {"producer_byte_rate": 1048576.0}, ALICE_ANY_CLIENT: {"controller_mutation_rate": 2.5}}


def test_validate_only_stores_nothing(client):
    assert client.admin.alter_client_quotas({ALICE: {"producer_byte_rate": 1024}}, validate_only=True) == {ALICE: None}
    assert client.admin.describe_client_quotas() == {}
    errors = client.admin.alter_client_quotas({ALICE: {"producer_byte_rate": -1}}, validate_only=True)
    assert errors[ALICE].code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("entity, ops, message", [
    (ALICE, {"producer_byte_rate": 1024, "fetch_byte_rate": 10}, "Invalid configuration key fetch_byte_rate"),
    (ALICE, {"producer_byte_rate": -1024}, "Quota producer_byte_rate must be greater than 0"),
    (DEFAULT_CLIENT, {"consumer_byte_rate": 0}, "Quota consumer_byte_rate must be greater than 0"),
    (DEFAULT_USER, {"request_percentage": -0.5}, "Quota request_percentage must be greater than 0"),
    (DEFAULT_USER, {"request_percentage": 100.5}, "Quota request_percentage must be at most 100"),
    (ALICE_APP, {"controller_mutation_rate": float("nan")}, "Quota controller_mutation_rate must be greater than 0"),
    (ALICE, {"consumer_byte_rate": 1024.5}, "consumer_byte_rate cannot be a fractional value."),
    (ALICE, {"producer_byte_rate": 1e19}, "Proposed value for producer_byte_rate is too large for a LONG."),
    ((), {"producer_byte_rate": 1024}, "Invalid empty client quota entity"),
    ((("group", "g"),), {"producer_byte_rate": 1024}, "Unhandled client quota entity type: group"),
    (((USER, ""),), {"producer_byte_rate": 1024}, "Empty user not supported"),
    (((CLIENT_ID, ""),), {"producer_byte_rate": 1024}, "Empty client-id not supported"),
    ((("ip", "127.0.0.1"),), {"connection_creation_rate": 10}, "ip quotas (connection_creation_rate) are not"),
    ((("ip", "127.0.0.1"), (USER, "alice")), {"producer_byte_rate": 1024},
     "Invalid quota entity combination, IP entity should not be combined with User or ClientId"),
])
def test_invalid_alterations_are_refused_with_kafkas_message(client, entity, ops, message):
    results = client.admin.alter_client_quotas({entity: ops, APP: {"producer_byte_rate": 5000}})
    error = results[tuple(sorted(entity))]
    assert isinstance(error, KafkaError) and error.code == ErrorCode.INVALID_REQUEST, error
    assert message in str(error), error
    assert results[APP] is None  # each entry on its own
    assert client.admin.describe_client_quotas() == {APP: {"producer_byte_rate": 5000.0}}


def test_an_entity_type_twice_is_refused(quota_broker):
    """Two pairs of one type cannot be written as a client mapping: a raw request."""
    from tests.test_broker_failures import connect, roundtrip
    from wire.messages import ALTER_CLIENT_QUOTAS

    Req = ALTER_CLIENT_QUOTAS.request
    body = Req(validate_only=False, entries=[Req.EntryData(
        entity=[Req.EntityData(entity_type=USER, entity_name="a"), Req.EntityData(entity_type=USER, entity_name="b")],
        ops=[Req.OpData(key="producer_byte_rate", value=1024.0, remove=False)])])
    with connect(quota_broker.port) as sock:
        response = roundtrip(sock, ALTER_CLIENT_QUOTAS, 0, body, 1)
    assert [(e.error_code, e.error_message) for e in response.entries] == [
        (ErrorCode.INVALID_REQUEST, "Invalid client quota entity, duplicate entity entry user")]


@pytest.mark.parametrize("components, code, message", [
    ([(USER, 3, None)], ErrorCode.INVALID_REQUEST, "Unknown match type 3"),
    ([(USER, MATCH_EXACT, None)], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ([(USER, MATCH_DEFAULT, "alice")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ([(USER, MATCH_SPECIFIED, "alice")], ErrorCode.INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ([(USER, MATCH_SPECIFIED, None), (USER, MATCH_EXACT, "a")], ErrorCode.INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ([("", MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST, "Invalid empty entity type."),
    ([("group", MATCH_SPECIFIED, None)], ErrorCode.UNSUPPORTED_VERSION, "Unsupported entity type group"),
    ([("ip", MATCH_SPECIFIED, None), (USER, MATCH_SPECIFIED, None)], ErrorCode.INVALID_REQUEST,
     "IP filter component should not be used with user or clientId filter component."),
])
def test_invalid_filters_are_refused_with_kafkas_message(client, components, code, message):
    with pytest.raises(KafkaError) as info:
        client.admin.describe_client_quotas(components)
    assert info.value.code == code and message in str(info.value), info.value


def test_quotas_survive_a_restart(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        with Client(broker.bootstrap_servers) as client:
            assert set(client.admin.alter_client_quotas({
                ALICE: {"producer_byte_rate": 1048576}, DEFAULT_CLIENT: {"consumer_byte_rate": 2048},
                ALICE_ANY_CLIENT: {"request_percentage": 12.5}}).values()) == {None}
        broker.restart()
        with Client(broker.bootstrap_servers) as client:
            assert client.admin.describe_client_quotas() == {
                ALICE: {"producer_byte_rate": 1048576.0}, DEFAULT_CLIENT: {"consumer_byte_rate": 2048.0},
                ALICE_ANY_CLIENT: {"request_percentage": 12.5}}
        stored = json.loads((tmp_path / "data" / "client-quotas.json").read_text())
        assert {"entity": {"user": "alice"}, "quotas": {"producer_byte_rate": 1048576}} in stored["entities"]
        assert {"entity": {"client-id": None}, "quotas": {"consumer_byte_rate": 2048}} in stored["entities"]
    finally:
        broker.stop()


def test_kafka_configs_alters_and_describes_quotas(quota_broker, client):
    from tests.test_kafka_tools import CONFIGS, tool

    bootstrap = ["--bootstrap-server", quota_broker.bootstrap_servers]
    tool(CONFIGS, *bootstrap, "--entity-type", "users", "--entity-name", "alice", "--alter",
         "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")
    tool(CONFIGS, *bootstrap, "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
         "--entity-name", "app", "--alter", "--add-config", "request_percentage=40")
    tool(CONFIGS, *bootstrap, "--entity-type", "clients", "--entity-default", "--alter",
         "--add-config", "consumer_byte_rate=1024")
    assert client.admin.describe_client_quotas() == {
        ALICE: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        ALICE_APP: {"request_percentage": 40.0},
        DEFAULT_CLIENT: {"consumer_byte_rate": 1024.0}}
    described = tool(CONFIGS, *bootstrap, "--entity-type", "users", "--entity-name", "alice", "--describe").stdout
    assert "user-principal 'alice'" in described, described
    assert "producer_byte_rate=1048576.0" in described and "consumer_byte_rate=2097152.0" in described, described
    described = tool(CONFIGS, *bootstrap, "--entity-type", "clients", "--entity-default", "--describe").stdout
    assert "consumer_byte_rate=1024.0" in described, described
    tool(CONFIGS, *bootstrap, "--entity-type", "users", "--entity-name", "alice", "--alter",
         "--delete-config", "consumer_byte_rate")
    assert client.admin.describe_client_quotas([(USER, MATCH_EXACT, "alice")], strict=True) == {
        ALICE: {"producer_byte_rate": 1048576.0}}


def test_sluice_configs_alters_and_describes_quotas_as_kafka_configs(quota_broker, client):
    """`sluice configs` in kafka-configs.sh's shape: users, clients, the two combined,
    defaults; Kafka's output lines; bad input is one line and a non-zero exit."""
    from tests.test_cli import ok, sluice

    configs = ["configs", "--bootstrap-server", quota_broker.bootstrap_servers]
    alice_app = ["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "app"]
    assert ok(*configs, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
              "producer_byte_rate=1048576,consumer_byte_rate=2097152") == \
        "Completed updating config for user-principal 'alice'.\n"
    ok(*configs, *alice_app, "--alter", "--add-config", "request_percentage=40.5")
    ok(*configs, "--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-default",
       "--alter", "--add-config", "controller_mutation_rate=10")
    ok(*configs, "--entity-type", "clients", "--entity-default", "--alter", "--add-config", "consumer_byte_rate=1024")
    assert client.admin.describe_client_quotas() == {
        ALICE: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        ALICE_APP: {"request_percentage": 40.5},
        ((CLIENT_ID, None), (USER, None)): {"controller_mutation_rate": 10.0},
        DEFAULT_CLIENT: {"consumer_byte_rate": 1024.0}}
    assert ok(*configs, "--entity-type", "users", "--entity-name", "alice", "--describe") == (
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n")
    assert ok(*configs, *alice_app, "--describe") == (
        "Quota configs for user-principal 'alice', client-id 'app' are request_percentage=40.5\n")
    assert json.loads(ok(*configs, "--entity-type", "clients", "--describe", "--output", "json")) == {
        "entities": [{"entity": {"client-id": None}, "quotas": {"consumer_byte_rate": 1024}}]}

    ok(*configs, "--entity-type", "users", "--entity-name", "alice", "--alter", "--delete-config", "consumer_byte_rate")
    assert client.admin.describe_client_quotas([(USER, MATCH_EXACT, "alice")], strict=True) == {
        ALICE: {"producer_byte_rate": 1048576.0}}
    for args, message in [
            (["--entity-type", "users", "--entity-name", "alice", "--alter", "--delete-config", "consumer_byte_rate"],
             "sluice: Invalid config(s): consumer_byte_rate\n"),
            (["--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "producer_byte_rate=fast"],
             "sluice: Cannot parse quota configuration value for producer_byte_rate: fast\n"),
            (["--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "producer_byte_rate=-1"],
             "Quota producer_byte_rate must be greater than 0"),
            (["--entity-type", "clients", "--entity-name", "c", "--alter", "--add-config", "bogus=1"],
             "Invalid configuration key bogus")]:
        result = sluice(*configs, *args)
        assert result.returncode == 1 and result.stdout == "", (args, result)
        assert message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    result = sluice(*configs, "--entity-type", "users", "--entity-type", "topics", "--describe")
    assert result.returncode == 2 and "client quotas are of users, clients" in result.stderr
    assert client.admin.describe_client_quotas([(CLIENT_ID, MATCH_EXACT, "c")]) == {}
