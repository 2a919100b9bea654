"""The `sluice` command: `sluice broker …` runs a broker; more subcommands follow."""

from __future__ import annotations

import sys

USAGE = """usage: sluice COMMAND [ARGS]

commands:
  broker    run a broker (sluice broker --help)
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
    print(f"sluice: unknown command {command!r}\n{USAGE}", file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main())
