"""What `sluice topics` and `sluice groups` share: connection options, the client, output
as aligned tables or JSON, and errors as one readable line.

These commands speak only the Kafka protocol, through `sluice_client`: they work against
any Kafka-compatible broker and never import `broker`.

`--command-config FILE`, as in Kafka's tools, is a Java properties file of client
settings; its `security.protocol`, `ssl.*` and `sasl.*` settings (sluice_client.security)
secure every connection, and other keys are ignored with a warning.

Exit codes: 0 success, 1 an operation failed (unreachable broker, unknown topic or group,
a Kafka error code, a refused reset), 2 bad usage (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from typing import Awaitable, Callable, Iterable, Sequence

from sluice_client import AsyncClient, ClientError, ClientSecurity, SecurityConfigError
from wire.error_codes import ErrorCode
from wire.errors import KafkaError

__all__ = ["CommandError", "add_connection_options", "check_connection_options", "emit_json",
           "format_table", "run_command"]

DEFAULT_TIMEOUT = 30.0


class CommandError(Exception):
    """A failure to report as `sluice: <message>` with a non-zero exit code."""


def add_connection_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--bootstrap-server, --output and --timeout, on the command and on each action, so
    they may come before or after the action's name. On actions their default is
    SUPPRESS, which leaves the command-level value in place."""
    def default(value):
        return value if top else argparse.SUPPRESS

    parser.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]",
                        default=default(None), help="brokers to connect to first (required)")
    parser.add_argument("--command-config", metavar="FILE", default=default(None),
                        help="a properties file of client security settings (security.protocol, "
                             "ssl.*, sasl.*), as for Kafka's tools")
    parser.add_argument("--output", choices=["table", "json"], default=default("table"),
                        help="aligned tables for people (default) or JSON for scripts")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                        default=default(DEFAULT_TIMEOUT),
                        help=f"request timeout and bound on retries (default {DEFAULT_TIMEOUT:g})")


def check_connection_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.bootstrap_server:
        parser.error("--bootstrap-server is required")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not positive")
    return value


def _int_at_least(text: str, minimum: int, complaint: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r} is {complaint}")
    return value


def _port_at_least(text: str, minimum: int) -> int:
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number")
    port = int(text)
    if not minimum <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside {minimum}-65535")
    return port


def port_number(text: str) -> int:
    """A TCP port to serve on; 0 asks for any free one."""
    return _port_at_least(text, 0)


def fixed_port_number(text: str) -> int:
    """A TCP port, 0 (any free one) refused: for ports others are told in advance."""
    return _port_at_least(text, 1)


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "not positive")


def non_negative(text: str) -> int:
    return _int_at_least(text, 0, "negative")


def read_properties(path: str) -> dict[str, str]:
    """A Java properties file: `key=value` or `key: value` (the first `=` or `:` ends the
    key), `#` and `!` comment lines, and, as in Java, a line ending in a backslash goes
    on with the next one, its leading blanks dropped (a long sasl.jaas.config is often
    split so). Errors never quote a line: it may hold a password."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as exc:
        raise CommandError(f"--command-config: cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"--command-config: {path} is not UTF-8 (at byte {exc.start})") from None
    props = {}
    logical, first = "", 0
    for number, raw in enumerate(lines, 1):
        line = raw.strip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if not logical:
            first = number
        continued = (len(line) - len(line.rstrip("\\"))) % 2 == 1
        logical += line[:-1] if continued else line
        if continued and number < len(lines):
            continue
        text, logical = logical.strip(), ""
        cut = min((i for i in (text.find("="), text.find(":")) if i >= 0), default=-1)
        if cut < 0:
            raise CommandError(f"--command-config {path}:{first}: expected key=value")
        props[text[:cut].strip()] = text[cut + 1:].strip()
    return props


def client_security(path: str) -> ClientSecurity:
    """The security settings of a --command-config file; other keys are ignored, with a warning."""
    settings = read_properties(path)
    for key in sorted(settings):
        if key != "security.protocol" and not key.startswith(("ssl.", "sasl.")):
            print(f"sluice: --command-config {path}: ignoring {key} (only security.protocol, ssl.* and "
                  f"sasl.* settings apply)", file=sys.stderr)
    try:
        return ClientSecurity(settings)
    except SecurityConfigError as exc:
        raise CommandError(f"--command-config {path}: {exc}") from None


def make_client(args: argparse.Namespace) -> AsyncClient:
    security = client_security(args.command_config) if args.command_config else None
    try:
        return AsyncClient(args.bootstrap_server, client_id="sluice-cli",
                           connect_timeout=min(10.0, args.timeout), request_timeout=args.timeout,
                           retries=3, retry_backoff=0.1, retry_backoff_max=1.0,
                           retry_timeout=args.timeout, security=security)
    except ValueError as exc:  # a malformed bootstrap address
        raise CommandError(f"--bootstrap-server: {exc}") from None


def run_command(args: argparse.Namespace,
                action: Callable[[AsyncClient, argparse.Namespace], Awaitable[int | None]]) -> int:
    """Run `action(client, args)` on a fresh event loop; every failure becomes one line on
    stderr and a non-zero exit code (SLUICE_DEBUG=1 adds the traceback)."""

    async def main() -> int:
        client = make_client(args)
        try:
            return await action(client, args) or 0
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except CommandError as exc:
        return fail(str(exc))
    except KafkaError as exc:
        return fail(str(exc))
    except ClientError as exc:
        return fail(f"{exc} (bootstrap server {args.bootstrap_server})")
    except KeyboardInterrupt:
        return fail("interrupted", 130)
    except TimeoutError as exc:
        return fail(f"timed out: {exc}" if str(exc) else "timed out")
    except OSError as exc:
        return fail(str(exc))
    except Exception as exc:  # a bug; still no traceback unless asked for
        if os.environ.get("SLUICE_DEBUG"):
            traceback.print_exc()
        return fail(f"unexpected error: {type(exc).__name__}: {exc}")


def fail(message: str, code: int = 1) -> int:
    print(f"sluice: {message}", file=sys.stderr)
    return code


def cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) if value else "-"
    return str(value)


def format_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    """Left-aligned columns two spaces apart; None and empty lists show as "-"."""
    texts = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in texts:
        widths = [max(w, len(v)) for w, v in zip(widths, row)]
    lines = ["  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip()
             for line in [list(headers), *texts]]
    return "\n".join(lines)


def code_name(code) -> str:
    """An error code's Kafka name; the number when the client does not know it."""
    return code.name if isinstance(code, ErrorCode) else str(code)


def emit_json(document) -> None:
    print(json.dumps(document, indent=2))
