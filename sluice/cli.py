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

import sys

USAGE = """usage: sluice COMMAND [ARGS]

commands:
  broker    run a broker (sluice broker --help)
  cluster   start, stop and check a development cluster: ZooKeeper and N brokers (sluice cluster --help)
  topics    create, list, describe, alter and delete topics (sluice topics --help)
  groups    list, describe and delete consumer groups, reset their offsets (sluice groups --help)
  configs   describe and change topic and broker configs (sluice configs --help)
  leader-election
            elect preferred (or unclean) leaders now (sluice leader-election --help)
  reassign  move partitions' replicas between brokers, as kafka-reassign-partitions (sluice reassign --help)
  acls      add, list and remove ACLs (sluice acls --help)
  users     add, list and remove users' SCRAM credentials (sluice users --help)
  console   a web console: brokers, topics, messages, groups and their lag (sluice console --help)
"""


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "broker":
        from broker.cli import main as broker_main
        return broker_main(rest)
    if command == "cluster":
        from sluice.cluster import main as cluster_main
        return cluster_main(rest)
    if command == "topics":
        from sluice.topics import main as topics_main
        return topics_main(rest)
    if command == "groups":
        from sluice.groups import main as groups_main
        return groups_main(rest)
    if command == "configs":
        from sluice.configs import main as configs_main
        return configs_main(rest)
    if command == "leader-election":
        from sluice.leader_election import main as leader_election_main
        return leader_election_main(rest)
    if command == "reassign":
        from sluice.reassign import main as reassign_main
        return reassign_main(rest)
    if command == "acls":
        from sluice.acls import main as acls_main
        return acls_main(rest)
    if command == "users":
        from sluice.users import main as users_main
        return users_main(rest)
    if command == "console":
        from sluice.console import main as console_main
        return console_main(rest)
    print(f"sluice: unknown command {command!r}\n{USAGE}", file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main())
