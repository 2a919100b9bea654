"""`sluice leader-election`: preferred or unclean leader elections on demand, as
kafka-leader-election.sh runs them (ElectLeaders, sent to the controller).

    sluice leader-election --bootstrap-server H:P --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file F)

The JSON file is Kafka's: {"partitions": [{"topic": "t", "partition": 0}, ...]}. The
output is Kafka's lines: the partitions elected, those whose leader was already the
right one ("Valid replica already elected"), and one line per partition that failed.
Exit code 0 when no partition failed, 1 otherwise (2 for bad usage).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NamedTuple

from sluice_client import PREFERRED_ELECTION, UNCLEAN_ELECTION, AsyncClient
from wire.error_codes import ErrorCode
from wire.errors import KafkaError

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           code_name, emit_json, non_negative, run_command)

__all__ = ["Election", "main", "parser", "run_election"]

_ELECTION_TYPES = {"preferred": PREFERRED_ELECTION, "unclean": UNCLEAN_ELECTION}


def election_type(text: str) -> str:
    if text.lower() not in _ELECTION_TYPES:
        raise argparse.ArgumentTypeError(f"{text!r} is not an election type: "
                                         f"preferred or unclean")
    return text.lower()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sluice leader-election",
        description="Elect the preferred replica (or, for partitions without a live in-sync "
                    "leader, any live replica) as leader.")
    add_connection_options(p, top=True)
    p.add_argument("--election-type", type=election_type, required=True,
                   metavar="preferred|unclean", help="the kind of election")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="the topic of the partition (with --partition)")
    which.add_argument("--all-topic-partitions", action="store_true",
                       help="every partition of the cluster")
    which.add_argument("--path-to-json-file", metavar="FILE",
                       help='partitions as {"partitions": [{"topic": T, "partition": P}, ...]}')
    p.add_argument("--partition", type=non_negative, help="the partition (with --topic)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    if (args.topic is None) != (args.partition is None):
        p.error("--topic and --partition go together")
    return run_command(args, elect)


def partitions_from_file(path: str) -> list[tuple[str, int]]:
    """The partitions a kafka-leader-election JSON file names, each once."""
    try:
        with open(path, encoding="utf-8") as file:
            document = json.load(file)
    except OSError as exc:
        raise CommandError(f"--path-to-json-file: cannot read {path}: {exc.strerror}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandError(f"--path-to-json-file: {path} is not JSON: {exc}") from None
    entries = document.get("partitions") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise CommandError(f'--path-to-json-file: {path} has no "partitions" list')
    partitions = []
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("topic"), str)
                and type(entry.get("partition")) is int and entry["partition"] >= 0):
            raise CommandError(f"--path-to-json-file: {json.dumps(entry)} is not "
                               f'{{"topic": NAME, "partition": NUMBER}}')
        partitions.append((entry["topic"], entry["partition"]))
    duplicates = sorted({tp for tp in partitions if partitions.count(tp) > 1})
    if duplicates:
        raise CommandError(f"--path-to-json-file: partitions named more than once: "
                           f"{_names(duplicates)}")
    if not partitions:
        raise CommandError(f"--path-to-json-file: {path} names no partition")
    return partitions


async def elect(client: AsyncClient, args) -> int:
    if args.all_topic_partitions:
        partitions = None
    elif args.path_to_json_file is not None:
        partitions = partitions_from_file(args.path_to_json_file)
    else:
        partitions = [(args.topic, args.partition)]
    election = await run_election(client, args.election_type, partitions)
    if args.output == "json":
        emit_json(election.as_json())
    else:
        election.print_lines()
    if election.failed:
        print(f"sluice: {len(election.failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


class Election(NamedTuple):
    """What an election did to each partition: elected, not needed (its leader was already
    the one to elect), or failed with an error."""
    election_type: str
    elected: list[tuple[str, int]]
    not_needed: list[tuple[str, int]]
    failed: list[tuple[tuple[str, int], KafkaError]]

    def as_json(self) -> dict:
        return {"election_type": self.election_type, "elected": _listed(self.elected),
                "not_needed": _listed(self.not_needed),
                "failed": [{"topic": t, "partition": p, "error": code_name(e.code),
                            "message": e.message} for (t, p), e in self.failed]}

    def print_lines(self) -> None:
        """Kafka's lines."""
        kind = self.election_type.upper()
        if self.elected:
            print(f"Successfully completed leader election ({kind}) for partitions "
                  f"{_names(self.elected)}")
        if self.not_needed:
            print(f"Valid replica already elected for partitions {_names(self.not_needed)}")
        for (topic, partition), error in self.failed:
            print(f"Error completing leader election ({kind}) for partition: "
                  f"{topic}-{partition}: {code_name(error.code)}"
                  + (f": {error.message}" if error.message else ""))


async def run_election(client: AsyncClient, election_type: str,
                       partitions: list[tuple[str, int]] | None) -> Election:
    """An election ("preferred" or "unclean") of `partitions` (None: every partition)."""
    results = await client.admin.elect_leaders(_ELECTION_TYPES[election_type], partitions)
    return Election(
        election_type,
        sorted(tp for tp, error in results.items() if error is None),
        sorted(tp for tp, error in results.items()
               if error is not None and error.code == ErrorCode.ELECTION_NOT_NEEDED),
        sorted((tp, error) for tp, error in results.items()
               if error is not None and error.code != ErrorCode.ELECTION_NOT_NEEDED))


def _names(partitions) -> str:
    return ", ".join(f"{topic}-{partition}" for topic, partition in partitions)


def _listed(partitions) -> list[dict]:
    return [{"topic": topic, "partition": partition} for topic, partition in partitions]
