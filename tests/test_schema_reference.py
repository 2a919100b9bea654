"""The schema tables in wire/messages.py checked against Apache Kafka's own definitions.

The reference data (Kafka's message JSON files and error-code list) lives beside the
repository, in ../shared/kafka-protocol (Kafka 3.9); tests/data/kafka-4.4-messages holds
Kafka 4.4's definitions of what it lacks or has older, read first. Everything the codec relies on is compared:
API keys, valid and flexible versions, and for every field, in order and recursively
(commonStructs expanded): name, type, versions, nullable versions, tag, tagged versions,
field-level flexible versions and default value. Regenerating the tables with
tools/gen_messages.py must reproduce the committed files byte for byte.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

import wire.messages as messages
from wire.error_codes import ErrorCode
from wire.messages import APIS
from wire.primitives import ZERO_UUID
from wire.schema import Api, Data, F

REPO = Path(__file__).resolve().parents[1]
REFERENCE = Path(__file__).resolve().parents[2] / "shared" / "kafka-protocol"
MESSAGES_DIR = REFERENCE / "messages"
NEWER_MESSAGES_DIR = REPO / "tests" / "data" / "kafka-4.4-messages"

needs_reference = pytest.mark.skipif(
    not MESSAGES_DIR.is_dir(),
    reason=f"Kafka's reference message definitions are not available at {REFERENCE}: they live "
           "beside the repository, in ../shared/kafka-protocol, and are not part of it")

# Versions the project has to cover (from the issue): API name -> newest required version.
REQUIRED_API_VERSIONS = {
    "ApiVersions": 4, "Metadata": 13, "Produce": 11, "Fetch": 18, "ListOffsets": 11,
    "OffsetCommit": 9, "OffsetFetch": 9, "FindCoordinator": 6, "JoinGroup": 9, "SyncGroup": 5,
    "Heartbeat": 4, "LeaveGroup": 5, "DescribeGroups": 5, "ListGroups": 5, "DeleteGroups": 2,
    "CreateTopics": 7, "DeleteTopics": 6, "CreatePartitions": 3, "DescribeConfigs": 4,
    "DescribeCluster": 2, "InitProducerId": 5, "AddPartitionsToTxn": 5, "AddOffsetsToTxn": 4,
    "EndTxn": 5, "TxnOffsetCommit": 4, "WriteTxnMarkers": 1, "OffsetForLeaderEpoch": 4,
    "DeleteRecords": 2, "SaslHandshake": 1, "SaslAuthenticate": 2,
    "ConsumerGroupHeartbeat": 1, "ConsumerGroupDescribe": 1,
}
REQUIRED_DATA = [
    "ConsumerProtocolSubscription", "ConsumerProtocolAssignment", "GroupMetadataKey",
    "GroupMetadataValue", "OffsetCommitKey", "OffsetCommitValue", "TransactionLogKey",
    "TransactionLogValue", "ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue",
    "ConsumerGroupMemberMetadataKey", "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupTargetAssignmentMetadataKey", "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupTargetAssignmentMemberKey", "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupCurrentMemberAssignmentKey", "ConsumerGroupCurrentMemberAssignmentValue",
]

DATA_SCHEMAS = {value.name: value for value in vars(messages).values() if isinstance(value, Data)}

_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}
_ZEROS = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "uint32": 0,
          "float64": 0.0, "bool": False, "uuid": ZERO_UUID, "string": "", "bytes": b"",
          "records": None}  # Kafka's generated code defaults records to null
_STRUCT = object()  # "a default instance of the field's struct"


# Kafka 4 removed Produce v0-2 (KIP-896), which Sluice still serves: its schema starts
# below the newer definition's oldest version (tools/gen_messages.py, KEPT_OLDEST_VERSIONS).
KEPT_OLDEST_VERSIONS = {"Produce": 0}


def load(name: str) -> dict:
    """One of Kafka's JSON definitions (Kafka 4.4's when the repository has it), with its
    `//` comment lines removed."""
    newer = NEWER_MESSAGES_DIR / f"{name}.json"
    lines = (newer if newer.is_file() else MESSAGES_DIR / f"{name}.json").read_text().splitlines()
    return json.loads("\n".join(line for line in lines if not line.lstrip().startswith("//")))


def snake_case(name: str) -> str:
    """CamelCase -> snake_case, acronyms kept together: ResultsByTopicV3AndBelow ->
    results_by_topic_v3_and_below, TopicID -> topic_id."""
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def expected_default(field: dict):
    """The value a field takes when absent, by Kafka's rules (explicit default or the type's zero)."""
    ftype = field["type"]
    if "default" not in field:
        if ftype.startswith("[]"):
            return []
        return _ZEROS.get(ftype, _STRUCT)
    text = str(field["default"])
    if field["default"] is None or text == "null":  # JSON's null, or Kafka's "null"
        return None
    if ftype in _INT_TYPES:
        return int(text, 0)
    if ftype == "bool":
        return {"true": True, "false": False}[text.lower()]
    if ftype == "float64":
        return float(text)
    if ftype == "string":
        return text
    raise AssertionError(f"unexpected default {text!r} for {field['name']} ({ftype})")


def compare_fields(schema, where: str, ours: tuple[F, ...], theirs: list[dict], common: dict,
                   struct_cls: type, errors: list[str]) -> None:
    """Append to `errors` every difference between our fields and Kafka's, recursively."""
    names = [f.name for f in ours]
    expected_names = [snake_case(field["name"]) for field in theirs]
    if names != expected_names:
        errors.append(f"{where}: fields {names} != Kafka's {expected_names}")
        return
    defaults = struct_cls()
    for f, field in zip(ours, theirs):
        at = f"{where}.{f.name}"
        versions = field.get("versions", field.get("taggedVersions"))
        facts = {
            "type": (f.type, field["type"]),
            "versions": (f.versions.text, versions),
            "nullableVersions": (f.nullable.text, field.get("nullableVersions", "none")),
            "tag": (f.tag, field.get("tag")),
            "taggedVersions": (f.tagged.text, field.get("taggedVersions", "none")),
            "flexibleVersions": (f.flexible.text if f.flexible is not None else None,
                                 field.get("flexibleVersions")),
        }
        for fact, (mine, kafka) in facts.items():
            if mine != kafka:
                errors.append(f"{at}: {fact} {mine!r} != Kafka's {kafka!r}")
        element = f.element_type
        sub_cls = schema.struct_classes.get(element) if f.fields else None
        default = getattr(defaults, f.name)
        expected = expected_default(field)
        if expected is _STRUCT:
            if sub_cls is None or type(default) is not sub_cls:
                errors.append(f"{at}: default {default!r} is not a {element}")
        elif default != expected or type(default) is not type(expected):
            errors.append(f"{at}: default {default!r} != Kafka's {expected!r}")
        sub = field.get("fields")
        if sub is None and element in common:
            sub = common[element]
        if sub is None:
            if f.fields:
                errors.append(f"{at}: has sub-fields, Kafka's {element} has none")
            continue
        if not f.fields:
            errors.append(f"{at}: no sub-fields, Kafka's {element} has {len(sub)}")
            continue
        compare_fields(schema, at, f.fields, sub, common, sub_cls, errors)


def check_schema(schema, definition: dict, errors: list[str]) -> None:
    common = {c["name"]: c["fields"] for c in definition.get("commonStructs", [])}
    if schema.name != definition["name"]:
        errors.append(f"{schema.name}: Kafka calls it {definition['name']}")
    if schema.versions.text != definition["validVersions"]:
        errors.append(f"{schema.name}: validVersions {schema.versions.text!r} != "
                      f"{definition['validVersions']!r}")
    if schema.flexible.text != definition["flexibleVersions"]:
        errors.append(f"{schema.name}: flexibleVersions {schema.flexible.text!r} != "
                      f"{definition['flexibleVersions']!r}")
    compare_fields(schema, schema.name, schema.root.fields, definition["fields"], common,
                   schema.cls, errors)


@needs_reference
@pytest.mark.parametrize("api", sorted(APIS.values(), key=lambda a: a.key), ids=lambda a: a.name)
def test_api_matches_kafka(api: Api):
    assert APIS[api.key] is api
    if api.name in _generator().OUTSIDE_REFERENCE and not (MESSAGES_DIR / f"{api.name}Request.json").exists():
        pytest.skip(f"{api.name}: the reference lacks its definition (tools/gen_messages.py, OUTSIDE_REFERENCE)")
    request, response = load(f"{api.name}Request"), load(f"{api.name}Response")
    if api.name in KEPT_OLDEST_VERSIONS:
        for definition in (request, response):
            newest = definition["validVersions"].split("-")[1]
            definition["validVersions"] = f"{KEPT_OLDEST_VERSIONS[api.name]}-{newest}"
    assert request["type"] == "request" and response["type"] == "response"
    assert api.key == request["apiKey"] == response["apiKey"]
    assert api.versions.text == request["validVersions"] == response["validVersions"]
    assert api.flexible.text == request["flexibleVersions"]
    assert api.flexible.text == response["flexibleVersions"]
    errors: list[str] = []
    check_schema(api.request, request, errors)
    check_schema(api.response, response, errors)
    assert not errors, "\n".join(errors)


@needs_reference
@pytest.mark.parametrize("name", sorted(DATA_SCHEMAS))
def test_data_schema_matches_kafka(name: str):
    definition = load(name)
    # Kafka 4's __consumer_offsets records are typed: the key's apiKey is its record type.
    assert definition["type"] in ("data", "header", "coordinator-key", "coordinator-value")
    assert ("apiKey" in definition) == definition["type"].startswith("coordinator-")
    errors: list[str] = []
    check_schema(DATA_SCHEMAS[name], definition, errors)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("name,newest", sorted(REQUIRED_API_VERSIONS.items()))
def test_required_api_versions_are_covered(name: str, newest: int):
    by_name = {api.name: api for api in APIS.values()}
    assert name in by_name, f"{name} is not in wire.messages.APIS"
    api = by_name[name]
    assert api.versions.hi >= newest, f"{name} covers {api.versions.text}, needs up to {newest}"
    for version in range(api.versions.lo, newest + 1):  # from the oldest Kafka 4.4 defines
        assert version in api.versions
        api.request.codec(version)
        api.response.codec(version)


@pytest.mark.parametrize("name", REQUIRED_DATA + ["RequestHeader", "ResponseHeader"])
def test_required_data_schemas_are_covered(name: str):
    assert name in DATA_SCHEMAS
    schema = DATA_SCHEMAS[name]
    for version in range(schema.versions.lo, schema.versions.hi + 1):
        schema.codec(version)


def test_snake_case_conversion():
    assert snake_case("ResultsByTopicV3AndBelow") == "results_by_topic_v3_and_below"
    assert snake_case("V3AndBelowProducerId") == "v3_and_below_producer_id"
    assert snake_case("TopicID") == "topic_id"
    assert snake_case("ZkMigrationReady") == "zk_migration_ready"


@needs_reference
def test_error_codes_match_kafka():
    entries = json.loads((NEWER_MESSAGES_DIR / "error-codes.json").read_text())
    older = json.loads((REFERENCE / "error-codes.json").read_text())
    assert {e["code"]: e["name"] for e in older}.items() <= {e["code"]: e["name"] for e in entries}.items()
    assert {e["name"]: e["code"] for e in entries} == {e.name: e.value for e in ErrorCode}


def _generator():
    spec = importlib.util.spec_from_file_location("_sluice_gen_messages",
                                                  REPO / "tools" / "gen_messages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_reference
def test_regenerated_messages_match_committed_file():
    committed = (REPO / "wire" / "messages.py").read_text()
    generated = _generator().generate(MESSAGES_DIR, committed=committed)
    assert generated == committed, \
        "wire/messages.py differs from what tools/gen_messages.py generates; regenerate it"


@needs_reference
def test_regenerated_error_codes_match_committed_file():
    generated = _generator().generate_error_codes(NEWER_MESSAGES_DIR / "error-codes.json")
    committed = (REPO / "wire" / "error_codes.py").read_text()
    assert generated == committed, \
        "wire/error_codes.py differs from what tools/gen_messages.py generates; regenerate it"


def test_generator_covers_every_table():
    gen = _generator()
    assert sorted(gen.API_NAMES) == sorted(api.name for api in APIS.values())
    assert sorted(gen.DATA_NAMES) == sorted(DATA_SCHEMAS)
