"""Generate wire/messages.py and wire/error_codes.py from Apache Kafka's definitions.

Only structural facts are carried over: names (turned into snake_case), types, version
ranges, nullable versions, tags and defaults; error codes with their names. Usage:

    python tools/gen_messages.py [PATH/TO/kafka-protocol [MORE/MESSAGE/DIRS ...]]
    # default: ../shared/kafka-protocol; a definition is taken from the first directory holding
    # it, tests/data/kafka-4.4-messages before all; the error codes are Kafka 4.4's, from there
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# APIs whose request/response pairs are generated, in API-key order on output.
API_NAMES = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "OffsetForLeaderEpoch", "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn",
    "WriteTxnMarkers", "TxnOffsetCommit", "DescribeConfigs", "AlterConfigs", "SaslAuthenticate",
    "DescribeLogDirs", "CreatePartitions", "DeleteGroups", "IncrementalAlterConfigs", "OffsetDelete",
    "DescribeCluster",
    "DescribeProducers", "DescribeTransactions", "ListTransactions",
    # Security: ACLs and SCRAM credentials.
    "DescribeAcls", "CreateAcls", "DeleteAcls", "DescribeUserScramCredentials",
    "AlterUserScramCredentials",
    # Client quotas (OUTSIDE_REFERENCE).
    "DescribeClientQuotas", "AlterClientQuotas",
    # Inter-broker and election APIs of a ZooKeeper-era cluster (controller to brokers, a
    # leader's ISR change, a broker's controlled shutdown). A schema here is not an API
    # served: the broker serves, and ApiVersions lists, only broker.handlers.HANDLERS.
    "LeaderAndIsr", "StopReplica", "UpdateMetadata", "ControlledShutdown", "ElectLeaders",
    "AlterPartition",
    # Partition reassignments, carried out by the controller.
    "AlterPartitionReassignments", "ListPartitionReassignments",
    # KIP-848 consumer groups, at Kafka 4.4's versions (NEWER_MESSAGES).
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    # Kafka 4's topic description in pages (NEWER_MESSAGES), which kafka-topics.sh --describe uses.
    "DescribeTopicPartitions",
]
# APIs whose definitions ../shared/kafka-protocol lacks: generated from Kafka 3.9's,
# found in an apache/kafka checkout (clients/src/main/resources/common/message) given as a
# further directory; without it, their tables are kept as wire/messages.py has them.
OUTSIDE_REFERENCE = {"DescribeClientQuotas", "AlterClientQuotas"}
DATA_NAMES = [
    "RequestHeader", "ResponseHeader", "ConsumerProtocolSubscription",
    "ConsumerProtocolAssignment", "GroupMetadataKey", "GroupMetadataValue", "OffsetCommitKey",
    "OffsetCommitValue", "TransactionLogKey", "TransactionLogValue",
    # A consumer group's records in __consumer_offsets (NEWER_MESSAGES).
    "ConsumerGroupMetadataKey", "ConsumerGroupMetadataValue", "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue", "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue", "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue", "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
]
# Kafka 4.4's definitions of what the 3.9 reference lacks or has older (its README says
# where they come from): searched before the directories given.
NEWER_MESSAGES = Path(__file__).resolve().parent.parent / "tests" / "data" / "kafka-4.4-messages"
# Versions older than a newer definition's oldest that Sluice still serves: Kafka 4
# removed Produce v0-2 (KIP-896), whose layout its fields still describe.
KEPT_OLDEST_VERSIONS = {"Produce": 0}
_INT_TYPES = {"int8", "int16", "int32", "int64", "uint16", "uint32"}


def load(path: Path) -> dict:
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)
    return json.loads(text)


def snake(name: str) -> str:
    """CamelCase -> snake_case, a run of capitals kept together as one word until the
    capital that starts the next: TopicID -> topic_id, isKRaftController ->
    is_k_raft_controller."""
    name = re.sub(r"(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def constant(name: str) -> str:
    return snake(name).upper()


def default_literal(field: dict) -> str | None:
    if "default" not in field:
        return None
    value = str(field["default"])
    ftype = field["type"]
    if field["default"] is None or value == "null":  # JSON's null, or Kafka's "null"
        return "None"
    if ftype in _INT_TYPES:
        return str(int(value, 0))
    if ftype == "bool":
        return "True" if value.lower() == "true" else "False"
    if ftype == "float64":
        return repr(float(value))
    if ftype == "string":
        return repr(value)
    raise ValueError(f"unsupported default {value!r} for {field['name']} ({ftype})")


def emit_field(field: dict, common: dict, indent: int, out: list[str]) -> None:
    pad = " " * indent
    versions = field.get("versions", field.get("taggedVersions"))
    args = [repr(snake(field["name"])), repr(field["type"]), repr(versions)]
    kwargs = []
    if field.get("nullableVersions", "none") != "none":
        kwargs.append(f"nullable={field['nullableVersions']!r}")
    if "tag" in field:
        kwargs.append(f"tag={field['tag']}")
        if field.get("taggedVersions", versions) != versions:
            kwargs.append(f"tagged={field['taggedVersions']!r}")
    if "flexibleVersions" in field:
        kwargs.append(f"flexible={field['flexibleVersions']!r}")
    default = default_literal(field)
    if default is not None:
        kwargs.append(f"default={default}")
    subfields = field.get("fields")
    element = field["type"][2:] if field["type"].startswith("[]") else field["type"]
    if subfields is None and element in common:
        subfields = common[element]
    head = f"{pad}F({', '.join(args + kwargs)}"
    if not subfields:
        out.append(head + "),")
        return
    out.append(head + ", fields=(")
    for sub in subfields:
        emit_field(sub, common, indent + 4, out)
    out.append(f"{pad})),")


def emit_fields(definition: dict, indent: int, out: list[str]) -> None:
    common = {c["name"]: c["fields"] for c in definition.get("commonStructs", [])}
    for field in definition["fields"]:
        emit_field(field, common, indent, out)


def _find(name: str, sources: tuple[Path, ...]) -> Path | None:
    return next((source / name for source in (NEWER_MESSAGES, *sources) if (source / name).is_file()), None)


def _committed_api(name: str, committed: str) -> tuple[int, str]:
    """(API key, table) of `name` as `committed` (wire/messages.py's text) has it."""
    found = re.search(rf"^{constant(name)} = Api\((\d+), .*?^\)$", committed, flags=re.M | re.S)
    if found is None:
        raise FileNotFoundError(f"no definition of {name} in the given directories, nor in wire/messages.py")
    return int(found.group(1)), found.group(0)


def generate(*sources: Path, committed: str = "") -> str:
    """wire/messages.py from the definitions in `sources`; an API of OUTSIDE_REFERENCE
    that none holds keeps its table from `committed`."""
    out = [
        '"""Kafka message schemas: names, types and versions of every field.',
        "",
        "Generated by tools/gen_messages.py from Apache Kafka's message definitions",
        "(structural facts only). Do not edit by hand; regenerate instead.",
        '"""',
        "",
        "from wire.schema import Api, Data, F",
        "",
    ]
    apis = []
    for name in API_NAMES:
        request, response = _find(f"{name}Request.json", sources), _find(f"{name}Response.json", sources)
        if request is None and name in OUTSIDE_REFERENCE:
            key, table = _committed_api(name, committed)
            apis.append((key, name, table, None))
            continue
        req, resp = load(request), load(response)
        assert req["validVersions"] == resp["validVersions"], name
        if name in KEPT_OLDEST_VERSIONS:
            req["validVersions"] = f"{KEPT_OLDEST_VERSIONS[name]}-{req['validVersions'].split('-')[1]}"
        apis.append((req["apiKey"], name, req, resp))
    apis.sort()
    for key, name, req, resp in apis:
        if resp is None:  # kept as committed
            out.extend(req.splitlines())
            out.append("")
            continue
        out.append(f"{constant(name)} = Api({key}, {name!r}, {req['validVersions']!r}, "
                   f"flexible={req['flexibleVersions']!r},")
        out.append("    request=(")
        emit_fields(req, 8, out)
        out.append("    ),")
        out.append("    response=(")
        emit_fields(resp, 8, out)
        out.append("    ),")
        out.append(")")
        out.append("")
    for name in DATA_NAMES:
        data = load(_find(f"{name}.json", sources))
        out.append(f"{constant(name)} = Data({name!r}, {data['validVersions']!r}, "
                   f"flexible={data['flexibleVersions']!r}, fields=(")
        emit_fields(data, 4, out)
        out.append("))")
        out.append("")
    out.append("APIS = {api.key: api for api in (")
    for _, name, _, _ in apis:
        out.append(f"    {constant(name)},")
    out.append(")}")
    return "\n".join(out) + "\n"


def generate_error_codes(source: Path) -> str:
    out = [
        '"""Kafka error codes by name.',
        "",
        "Generated by tools/gen_messages.py from Apache Kafka's error code list.",
        '"""',
        "",
        "import enum",
        "",
        "",
        "class ErrorCode(enum.IntEnum):",
    ]
    for entry in sorted(json.loads(source.read_text()), key=lambda e: e["code"]):
        out.append(f"    {entry['name']} = {entry['code']}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    repo = Path(__file__).resolve().parent.parent
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else repo.parent / "shared" / "kafka-protocol"
    messages = repo / "wire" / "messages.py"
    messages.write_text(generate(source / "messages", *map(Path, sys.argv[2:]), committed=messages.read_text()))
    (repo / "wire" / "error_codes.py").write_text(generate_error_codes(NEWER_MESSAGES / "error-codes.json"))
