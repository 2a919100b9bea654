"""`sluice users`: add, list and remove users' SCRAM credentials over the Kafka protocol
(DescribeUserScramCredentials, AlterUserScramCredentials), with the options kafka-configs.sh
takes for users.

    sluice users --bootstrap-server H:P add --user alice
        --add-config 'SCRAM-SHA-256=[iterations=8192]' --password-file FILE
    sluice users --bootstrap-server H:P add --user alice --add-config 'SCRAM-SHA-512=[password=P]'
    sluice users --bootstrap-server H:P list [--user NAME ...]
    sluice users --bootstrap-server H:P remove --user alice [--delete-config SCRAM-SHA-512]

`--add-config` is Kafka's `MECHANISM=[iterations=N,password=P]` (mechanisms SCRAM-SHA-256
and SCRAM-SHA-512, several separated by commas or given as repeated options; the brackets
and each key in them optional). Iterations default to 4096 and lie within Kafka's bounds,
4096 to 16384. A password on the command line shows in the process list and the shell's
history: `--password-file FILE` (its first line; "-" reads stdin) or, on a terminal, a
prompt keep it out of both. The client sends a random salt and the salted password, never
the password; `list` shows mechanisms and iteration counts only, never salts or keys.
`remove` without `--delete-config` removes every mechanism the user has.
"""

from __future__ import annotations

import argparse
import getpass
import re
import sys

from sluice_client import AsyncClient
from sluice_client.model import (DEFAULT_SCRAM_ITERATIONS, ScramDeletion, ScramMechanism,
                                 ScramUpsertion)
from wire.error_codes import ErrorCode

from sluice.common import (CommandError, add_connection_options, check_connection_options,
                           emit_json, fail, format_table, run_command)

__all__ = ["main", "parser", "parse_add_config"]

MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka's bounds (ScramMechanism, the controller)
_SECRET = re.compile(r"(password=)[^,\]\s]*")


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose usage errors never repeat a password="..." they quote."""

    def error(self, message: str):
        super().error(_SECRET.sub(r"\1***", message))


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sluice users",
                description="Manage users' SCRAM credentials on a Kafka-compatible cluster.")
    add_connection_options(p, top=True)
    common = argparse.ArgumentParser(add_help=False)
    add_connection_options(common, top=False)
    common.add_argument("--entity-type", choices=["users"], default=argparse.SUPPRESS,
                        help="accepted as kafka-configs.sh takes it; users is the only type")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True,
                               parser_class=_Parser)

    add = actions.add_parser("add", parents=[common], help="add or replace a user's credentials")
    add.add_argument("--user", "--entity-name", dest="user", required=True, metavar="NAME",
                     help="the user (its SASL username)")
    add.add_argument("--add-config", action="append", required=True, metavar="SPEC",
                     help="MECHANISM=[iterations=N,password=P] (MECHANISM: SCRAM-SHA-256 or "
                          "SCRAM-SHA-512; repeatable)")
    add.add_argument("--password-file", metavar="FILE",
                     help="read the password from the first line of FILE ('-': stdin)")

    listing = actions.add_parser("list", parents=[common],
                                 help="users with their mechanisms and iterations")
    listing.add_argument("--user", "--entity-name", dest="users", action="append", default=[],
                         metavar="NAME", help="only this user (repeatable; default: every user)")

    remove = actions.add_parser("remove", parents=[common], help="remove a user's credentials")
    remove.add_argument("--user", "--entity-name", dest="user", required=True, metavar="NAME",
                        help="the user")
    remove.add_argument("--delete-config", action="append", default=[], metavar="MECHANISM",
                        help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable, or comma-separated; "
                             "default: every mechanism the user has)")
    return p


def main(argv=None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    check_connection_options(p, args)
    if args.action == "add":
        try:
            args.credentials = parse_add_config(args.add_config)
        except ValueError as exc:
            p.error(f"--add-config: {exc}")
        try:
            args.upsertions = upsertions(args)
        except CommandError as exc:
            return fail(str(exc))
    elif args.action == "remove":
        try:
            args.mechanisms = [ScramMechanism.parse(name) for value in args.delete_config
                               for name in value.split(",")]
        except ValueError as exc:
            p.error(f"--delete-config: {exc}")
    return run_command(args, ACTIONS[args.action])


# -- arguments --------------------------------------------------------------------------------

def parse_add_config(values: list[str]) -> dict[ScramMechanism, tuple[int, str | None]]:
    """{mechanism: (iterations, password or None)} from kafka-configs.sh's
    `SCRAM-SHA-256=[iterations=8192,password=...],SCRAM-SHA-512=[...]`. Errors name keys
    and mechanisms, never a value (it may be a password)."""
    found: dict[ScramMechanism, tuple[int, str | None]] = {}
    for value in values:
        for item in _top_level_items(value):
            name, eq, settings = item.partition("=")
            mechanism = ScramMechanism.parse(name)
            if mechanism in found:
                raise ValueError(f"{mechanism.mechanism_name} is given twice")
            options = {}
            if eq:
                if not (settings.startswith("[") and settings.endswith("]")):
                    raise ValueError(f"the settings of {mechanism.mechanism_name} go in brackets: "
                                     f"{mechanism.mechanism_name}=[iterations=N,password=P]")
                for pair in filter(None, settings[1:-1].split(",")):
                    key, eq, setting = pair.partition("=")
                    key = key.strip()
                    if not eq or key not in ("iterations", "password"):
                        raise ValueError(f"{mechanism.mechanism_name} takes the keys iterations "
                                         f"and password, not {key!r}" if key else "an empty key")
                    if key in options:
                        raise ValueError(f"{key} is given twice for {mechanism.mechanism_name}")
                    options[key] = setting
            found[mechanism] = (_iterations(options.get("iterations"), mechanism),
                                options.get("password"))
    return found


def _top_level_items(value: str) -> list[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(value):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("a ']' without its '['")
        elif char == "," and depth == 0:
            items.append(value[start:i])
            start = i + 1
    if depth:
        raise ValueError("a '[' without its ']'")
    items.append(value[start:])
    if not all(item.strip() for item in items):
        raise ValueError("an empty mechanism (MECHANISM=[iterations=N,password=P], ...)")
    return [item.strip() for item in items]


def _iterations(text: str | None, mechanism: ScramMechanism) -> int:
    if text is None:
        return DEFAULT_SCRAM_ITERATIONS
    if not text.strip().isdigit():
        raise ValueError(f"the iterations of {mechanism.mechanism_name} are not a number")
    iterations = int(text)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"{iterations} iterations for {mechanism.mechanism_name}: Kafka takes "
                         f"{MIN_ITERATIONS} to {MAX_ITERATIONS}")
    return iterations


def upsertions(args) -> list[ScramUpsertion]:
    """The credentials to set, each mechanism without a password in --add-config taking the
    one from --password-file or the terminal."""
    needed = [m for m, (_, password) in args.credentials.items() if password is None]
    shared = read_password(args.password_file, args.user) if needed else None
    result = []
    for mechanism, (iterations, password) in args.credentials.items():
        password = shared if password is None else password
        if not password:
            raise CommandError(f"the {mechanism.mechanism_name} password of user {args.user!r} "
                               f"is empty")
        result.append(ScramUpsertion(args.user, mechanism, password, iterations))
    return result


def read_password(path: str | None, user: str) -> str:
    """The first line of `path` ("-": stdin), or what is typed twice at a prompt."""
    if path is not None:
        try:
            if path == "-":
                text = sys.stdin.readline()
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.readline()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read --password-file {path}: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
        return text.rstrip("\r\n")
    if not sys.stdin.isatty():
        raise CommandError(f"no password for user {user!r}: give --password-file FILE, run on a "
                           f"terminal to be asked, or password=... in --add-config")
    try:
        password = getpass.getpass(f"Password for user {user}: ")
        again = getpass.getpass("The same password again: ")
    except EOFError:
        raise CommandError("no password given") from None
    if password != again:
        raise CommandError("the two passwords differ")
    return password


# -- actions ------------------------------------------------------------------------------------

async def add(client: AsyncClient, args) -> int:
    results = await client.admin.alter_user_scram_credentials(args.upsertions)
    error = results.get(args.user)
    if error is not None:
        raise error
    if args.output == "json":
        emit_json({"user": args.user, "credentials": [
            {"mechanism": u.mechanism.mechanism_name, "iterations": u.iterations}
            for u in args.upsertions]})
    else:
        for u in args.upsertions:
            print(f"Set the {u.mechanism.mechanism_name} credential of user {args.user} "
                  f"({u.iterations} iterations).")
    return 0


async def list_users(client: AsyncClient, args) -> int:
    described = await client.admin.describe_user_scram_credentials(args.users or None)
    errors = {user: d.error for user, d in described.items() if d.error is not None}
    for user, error in sorted(errors.items()):
        print(f"sluice: {_user_error(user, error)}", file=sys.stderr)
    found = sorted((d for d in described.values() if d.error is None), key=lambda d: d.user)
    if args.output == "json":
        emit_json({"users": [{"user": d.user, "credentials": [
            {"mechanism": c.mechanism.mechanism_name, "iterations": c.iterations}
            for c in sorted(d.credentials)]} for d in found],
            "errors": {user: _user_error(user, error) for user, error in sorted(errors.items())}})
    elif found:
        print(format_table(["USER", "MECHANISM", "ITERATIONS"], [
            (d.user, c.mechanism.mechanism_name, c.iterations)
            for d in found for c in sorted(d.credentials)]))
    return 1 if errors else 0


async def remove(client: AsyncClient, args) -> int:
    mechanisms = list(dict.fromkeys(args.mechanisms))
    if not mechanisms:
        described = (await client.admin.describe_user_scram_credentials([args.user]))[args.user]
        if described.error is not None:
            raise CommandError(_user_error(args.user, described.error))
        mechanisms = sorted(c.mechanism for c in described.credentials)
    results = await client.admin.alter_user_scram_credentials(
        deletions=[ScramDeletion(args.user, m) for m in mechanisms])
    error = results.get(args.user)
    if error is not None:
        raise CommandError(_user_error(args.user, error, args.mechanisms))
    if args.output == "json":
        emit_json({"user": args.user, "removed": [m.mechanism_name for m in mechanisms]})
    else:
        for mechanism in mechanisms:
            print(f"Removed the {mechanism.mechanism_name} credential of user {args.user}.")
    return 0


ACTIONS = {"add": add, "list": list_users, "remove": remove}


def _user_error(user: str, error, mechanisms=()) -> str:
    if error.code == ErrorCode.RESOURCE_NOT_FOUND:
        named = " or ".join(m.mechanism_name for m in mechanisms) or "SCRAM"
        return f"user {user!r} has no {named} credentials"
    return str(error)
