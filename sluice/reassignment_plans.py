"""Kafka's partition reassignment plans as `sluice reassign` reads and prints them (the
JSON of kafka-reassign-partitions.sh), shared by its moves and by the plans that grow and
shrink a cluster (sluice/scaling.py)."""

from __future__ import annotations

import json

from sluice.common import CommandError

Plan = dict[tuple[str, int], tuple[int, ...]]


def read_json_file(option: str, path: str):
    """The JSON document of the file given to `option`; CommandError naming the line and
    column where it is not JSON."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise CommandError(f"{option}: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{option}: {path} is not UTF-8 (at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option}: {path} is not JSON: {exc.msg} at line "
                           f"{exc.lineno}, column {exc.colno}") from None


def read_plan(path: str) -> Plan:
    """The target replicas a kafka-reassign-partitions JSON file gives each partition."""
    document = read_json_file("--reassignment-json-file", path)
    if not isinstance(document, dict) or document.get("version", 1) != 1 \
            or not isinstance(document.get("partitions"), list):
        raise CommandError(f'--reassignment-json-file: {path} is not {{"version": 1, '
                           f'"partitions": [...]}}')
    plan: Plan = {}
    for entry in document["partitions"]:
        replicas = entry.get("replicas") if isinstance(entry, dict) else None
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and type(entry.get("partition")) is int and entry["partition"] >= 0
                and isinstance(replicas, list) and replicas
                and all(type(r) is int and r >= 0 for r in replicas)):
            raise CommandError(f"--reassignment-json-file: {json.dumps(entry)} is not "
                               f'{{"topic": NAME, "partition": NUMBER, "replicas": [BROKER, ...]}}')
        tp = (entry["topic"], entry["partition"])
        if len(set(replicas)) != len(replicas):
            raise CommandError(f"--reassignment-json-file: the replicas of {partition_name(tp)} name a "
                               f"broker more than once: {replicas}")
        log_dirs = entry.get("log_dirs", ["any"] * len(replicas))
        if log_dirs != ["any"] * len(replicas):
            raise CommandError(f"--reassignment-json-file: log_dirs of {partition_name(tp)} must be \"any\" "
                               f"for each replica (a Sluice broker keeps one log directory)")
        if tp in plan:
            raise CommandError(f"--reassignment-json-file: {partition_name(tp)} is named more than once")
        plan[tp] = tuple(replicas)
    if not plan:
        raise CommandError(f"--reassignment-json-file: {path} names no partition")
    return plan


def plan_json(replicas: dict[tuple[str, int], tuple[int, ...]]) -> dict:
    return {"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": list(ids), "log_dirs": ["any"] * len(ids)}
        for (topic, partition), ids in sorted(replicas.items())]}


def partition_name(tp: tuple[str, int]) -> str:
    return f"{tp[0]}-{tp[1]}"
