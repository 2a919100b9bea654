"""`sluice broker` / `python -m broker`: run one broker until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import signal
import sys

from broker.cluster.membership import InconsistentBroker
from broker.config import ConfigError, build_config, read_properties
from broker.failpoints import check_enabled_points


def _port(text: str) -> int:
    """A TCP port, checked here: a bind outside 0-65535 fails with a traceback."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is outside 0-65535")
    return port


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice broker", description="Run a Sluice broker.")
    p.add_argument("--data-dir", help="directory for logs and metadata (Kafka: log.dirs)")
    p.add_argument("--port", type=_port, help="port to listen on (0: any free port)")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--node-id", type=int, help="this broker's id (Kafka: node.id / broker.id)")
    p.add_argument("--config", help="a Kafka-style server.properties file; flags override it")
    p.add_argument("--log-level", default="INFO", type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"],
                   help="logging level (default INFO)")
    return p


def load_config(args):
    props = read_properties(args.config) if args.config else {}
    overrides = {"data_dir": args.data_dir, "port": args.port, "host": args.host,
                 "node_id": args.node_id}
    return build_config(props, overrides)


async def serve(config) -> None:
    from broker.broker import Broker

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before "listening": a stop may follow at once
        loop.add_signal_handler(sig, stop.set)
    broker = Broker(config)
    await broker.start()
    await stop.wait()
    await broker.stop()


def raise_open_files_limit() -> None:
    """Lift the soft RLIMIT_NOFILE to the hard limit, as the JVM does for Kafka: every
    partition's active segment and every connection holds a descriptor, and the common
    soft default (1024) would cap the broker far below what the system allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                hard = int(f.read())
        except (OSError, ValueError):
            return
    if soft != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:
            logging.getLogger("sluice.broker").warning("open files limit stays %d: %s", soft, exc)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config, warnings = load_config(args)
        check_enabled_points()
    except ConfigError as exc:
        print(f"sluice broker: {exc}", file=sys.stderr)
        return 2
    for warning in warnings:
        logging.getLogger("sluice.broker").warning(warning)
    raise_open_files_limit()
    try:
        asyncio.run(serve(config))
    except ConfigError as exc:  # a listener's TLS or SASL settings, checked as the broker is made
        print(f"sluice broker: {exc}", file=sys.stderr)
        return 2
    except (OSError, InconsistentBroker) as exc:
        print(f"sluice broker: {exc}", file=sys.stderr)
        return 1
    return 0
