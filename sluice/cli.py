"""The `sluice` command: `sluice broker …` runs a broker, `sluice cluster …` a development
cluster (ZooKeeper and N brokers); `sluice topics …`, `sluice groups …`, `sluice configs …`,
`sluice leader-election …`, `sluice reassign …`, `sluice acls …` and `sluice users …` administer any
Kafka-compatible cluster over the wire protocol, and `sluice console …` serves a web
console of one.

Each command's module is imported only when it runs: the admin commands never import
`broker`, except the replica placement of Kafka (broker.cluster.placement, without I/O)
that `sluice reassign` plans its moves with.
"""

from __future__ import annotations

import importlib
import sys

USAGE = """usage: sluice COMMAND [ARGS]

commands:
  broker    run a broker (sluice broker --help)
  cluster   start, stop and check a development cluster: ZooKeeper and N brokers (sluice cluster --help)
  topics    create, list, describe, alter and delete topics (sluice topics --help)
  groups    list, describe and delete consumer groups, reset their offsets (sluice groups --help)
  configs   describe and change topic and broker configs and client quotas (sluice configs --help)
  leader-election
            elect preferred (or unclean) leaders now (sluice leader-election --help)
  reassign  move partitions' replicas between brokers, as kafka-reassign-partitions (sluice reassign --help)
  acls      add, list and remove ACLs (sluice acls --help)
  users     add, list and remove users' SCRAM credentials (sluice users --help)
  console   a web console: brokers, topics, messages, groups and their lag (sluice console --help)
"""


# Each command's module, with its `parser()` and `main(argv)`, imported only when it runs.
COMMANDS = {
    "broker": "broker.cli",
    "cluster": "sluice.cluster",
    "topics": "sluice.topics",
    "groups": "sluice.groups",
    "configs": "sluice.configs",
    "leader-election": "sluice.leader_election",
    "reassign": "sluice.reassign",
    "acls": "sluice.acls",
    "users": "sluice.users",
    "console": "sluice.console.command",
}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"sluice: unknown command {command!r}\n{USAGE}", file=sys.stderr, end="")
        return 2
    return importlib.import_module(COMMANDS[command]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
