"""The `sluice console` command: options, the connection check at start, and serving
until SIGINT or SIGTERM.

The console binds to 127.0.0.1 unless told otherwise (--host): it has no login of its
own, so whoever reaches its port sees the cluster as its --command-config principal
does. It prints its URL once listening (the chosen port with --port 0). An unreachable
bootstrap server at start is one readable line and exit code 1, as for the other
`sluice` commands; once running, cluster failures show on the pages instead.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from sluice_client import AsyncClient, ClientError
from wire.errors import KafkaError
from broker.http import HttpServer

from sluice.common import (CommandError, fixed_port_number, make_client, port_number, positive_float, positive_int,
                           run_command)
from sluice.console.app import ConsoleApp, names_loopback
from sluice.console.lag import LagHistory, LagSampler

__all__ = ["main", "parser"]

DEFAULT_PORT = 8080
DEFAULT_TIMEOUT = 10.0
_MAX_FORM = 64 * 1024


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sluice console",
        description="A web console for a Kafka-compatible cluster: brokers, topics, partitions "
                    "and recent messages, consumer groups with their lag over time. Read-only "
                    "unless --allow-offset-reset is given.")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT...]", required=True,
                   help="brokers to connect to first")
    p.add_argument("--command-config", metavar="FILE",
                   help="a properties file of client security settings (security.protocol, "
                        "ssl.*, sasl.*), as for Kafka's tools")
    p.add_argument("--host", default="127.0.0.1",
                   help="the address to serve on (default 127.0.0.1: this machine only; the "
                        "console has no login of its own)")
    p.add_argument("--port", type=port_number, default=DEFAULT_PORT,
                   help=f"the port to serve on (default {DEFAULT_PORT}; 0: any free port)")
    p.add_argument("--lag-interval-ms", type=positive_int, default=5000, metavar="MS",
                   help="how often every group's lag is sampled for the charts (default 5000)")
    p.add_argument("--lag-samples", type=positive_int, default=360, metavar="N",
                   help="lag samples kept per group (default 360)")
    p.add_argument("--allow-offset-reset", action="store_true",
                   help="offer resetting the offsets of groups without active members (each "
                        "reset shows its plan first and needs a confirmation)")
    p.add_argument("--metrics-port", type=fixed_port_number, metavar="PORT",
                   help="the brokers' metrics.port: the Quotas page then shows the clients each "
                        "broker throttles (read from its Prometheus metrics)")
    p.add_argument("--timeout", type=positive_float, metavar="SECONDS", default=DEFAULT_TIMEOUT,
                   help=f"request timeout and bound on retries (default {DEFAULT_TIMEOUT:g})")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_command(args, serve)


async def serve(client: AsyncClient, args: argparse.Namespace) -> int:
    try:
        await client.metadata([])
    except (ClientError, KafkaError, OSError, TimeoutError) as exc:
        raise CommandError(f"cannot reach the cluster at {args.bootstrap_server}: {exc}") from None
    sampler_client = make_client(args)  # its requests never wait behind a page's
    history = LagHistory(max_samples=args.lag_samples)
    sampler = LagSampler(sampler_client, history, args.lag_interval_ms / 1000)
    app = ConsoleApp(client, history, sampler, lag_interval_ms=args.lag_interval_ms,
                     allow_offset_reset=args.allow_offset_reset,
                     loopback_only=names_loopback(args.host), metrics_port=args.metrics_port)
    server = HttpServer(app.handle, args.host, args.port, max_body=_MAX_FORM)
    try:
        try:
            await server.start()
        except OSError as exc:
            raise CommandError(f"cannot serve on {args.host}:{args.port}: "
                               f"{exc.strerror or exc}") from None
        sampler.start()
        host = f"[{args.host}]" if ":" in args.host else args.host
        if not names_loopback(args.host):
            print(f"sluice: warning: the console has no login of its own: whoever reaches "
                  f"{host}:{server.port} sees the cluster as this console's client does",
                  file=sys.stderr, flush=True)
        mode = "offset reset allowed" if args.allow_offset_reset else "read-only"
        print(f"Sluice console of cluster {client.cached_metadata.cluster_id} on "
              f"http://{host}:{server.port}/ ({mode})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
    finally:
        await sampler.stop()
        await server.stop()
        await sampler_client.close()
    return 0
