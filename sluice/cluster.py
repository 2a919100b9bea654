"""`sluice cluster`: a development cluster on one machine with one command.

    sluice cluster start --brokers N --data-dir D [--base-port P] [--host H]
                         [--config extra.properties] [--timeout SECONDS]
    sluice cluster status --data-dir D
    sluice cluster stop --data-dir D [--timeout SECONDS]
    sluice cluster add-broker --data-dir D [--timeout SECONDS]

`start` runs a ZooKeeper server (sluice/zookeeper.py, data in D/zookeeper) and N brokers
(ids 0 .. N-1), each a detached `python -m broker` with D/broker-<id>/server.properties,
its data in D/broker-<id>/data and its output in D/broker-<id>/broker.log. It records ports
and process ids in D/cluster.json, waits until a broker's Metadata lists all N brokers and
a controller, and prints the bootstrap servers. Run again on a stopped D, it starts the
same cluster (same ids, ports and data). `stop` sends SIGTERM to each broker in turn, the
controller last (each hands its leaderships over by controlled shutdown), SIGKILL after
the timeout, then stops ZooKeeper. `status` exits 0 when everything runs, 3 when not.
`add-broker` starts one more broker in a running cluster (the next id, the port after the
others' when they are consecutive), records it in D/cluster.json, so that `status`, `stop`
and `start` include it from then on, and waits until Metadata lists it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sluice.broker_process import launch
from sluice.common import (CommandError, fail, fixed_port_number, format_table, positive_float,
                           positive_int)
from sluice.polling import wait_until

__all__ = ["main", "parser"]

STATE_FILE = "cluster.json"
CHROOT = "/sluice"
DEFAULT_TIMEOUT = 60.0
NOT_RUNNING = 3  # status's exit code when something is down (as LSB init scripts say)
# Set by `start` for each broker; an extra properties file may not set them.
MANAGED_KEYS = ("broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs",
                "log.dir", "zookeeper.connect")


@dataclass
class BrokerEntry:
    id: int
    port: int
    pid: int | None = None


@dataclass
class ClusterState:
    """What D/cluster.json records: enough to start the same cluster again and stop it."""

    host: str
    zookeeper_port: int
    brokers: list[BrokerEntry]
    properties: dict[str, str] = field(default_factory=dict)  # the extra broker properties
    zookeeper_pid: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{b.port}" for b in self.brokers)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> "ClusterState":
        raw = json.loads(text)
        return cls(host=raw["host"], zookeeper_port=raw["zookeeper_port"],
                   brokers=[BrokerEntry(**b) for b in raw["brokers"]],
                   properties=dict(raw.get("properties", {})),
                   zookeeper_pid=raw.get("zookeeper_pid"))


def broker_properties(state: ClusterState, broker: BrokerEntry, data_dir: Path) -> str:
    """server.properties of one broker: its identity, listener, log directory and
    ZooKeeper, then the extra properties."""
    lines = ["# Written by `sluice cluster start`; rewritten at every start.",
             f"broker.id={broker.id}",
             f"listeners=PLAINTEXT://{state.host}:{broker.port}",
             f"log.dirs={broker_dir(data_dir, broker.id) / 'data'}",
             f"zookeeper.connect=127.0.0.1:{state.zookeeper_port}{CHROOT}"]
    lines += [f"{key}={value}" for key, value in state.properties.items()]
    return "\n".join(lines) + "\n"


def broker_dir(data_dir: Path, broker_id: int) -> Path:
    return data_dir / f"broker-{broker_id}"


# -- command line -------------------------------------------------------------------------

def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sluice cluster",
                                description="Run a development cluster (ZooKeeper and N brokers) "
                                            "on this machine.")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a cluster, or start a stopped one again")
    start.add_argument("--data-dir", required=True, type=Path, help="the cluster's directory")
    start.add_argument("--brokers", type=positive_int,
                       help="number of brokers (required the first time)")
    start.add_argument("--base-port", type=fixed_port_number,
                       help="broker i listens on BASE_PORT + i (default: free ports, chosen once)")
    start.add_argument("--host", help="address the brokers listen on (default 127.0.0.1)")
    start.add_argument("--config", type=Path, metavar="FILE",
                       help="extra server.properties keys for every broker")
    start.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT,
                       metavar="SECONDS",
                       help=f"wait at most this long for the cluster (default {DEFAULT_TIMEOUT:g})")
    stop = actions.add_parser("stop", help="stop the brokers, then ZooKeeper")
    stop.add_argument("--data-dir", required=True, type=Path, help="the cluster's directory")
    stop.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                      help="SIGKILL a broker still running after this long "
                           f"(default {DEFAULT_TIMEOUT:g})")
    status = actions.add_parser("status", help="which of the cluster's processes run")
    status.add_argument("--data-dir", required=True, type=Path, help="the cluster's directory")
    add = actions.add_parser("add-broker", help="start one more broker in a running cluster")
    add.add_argument("--data-dir", required=True, type=Path, help="the cluster's directory")
    add.add_argument("--timeout", type=positive_float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                     help=f"wait at most this long for the broker to join (default {DEFAULT_TIMEOUT:g})")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return ACTIONS[args.action](args)
    except CommandError as exc:
        return fail(str(exc))
    except KeyboardInterrupt:
        return fail("interrupted", 130)


# -- processes ------------------------------------------------------------------------------

def process_running(pid: int | None, marker: Path) -> bool:
    """Whether `pid` is a live process whose command line names `marker` (its config file):
    a recorded pid may since have been reused by an unrelated process."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] == b"Z":
                return False  # exited, not yet reaped
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            arguments = f.read().split(b"\0")
    except (OSError, IndexError):
        return False
    return os.fsencode(str(marker)) in arguments


def stop_process(pid: int, marker: Path, timeout: float) -> bool:
    """SIGTERM, then SIGKILL if still running after `timeout` seconds; True when it exited
    of itself."""
    if not process_running(pid, marker):
        return True
    os.kill(pid, signal.SIGTERM)
    if wait_until(lambda: not process_running(pid, marker), timeout):
        return True
    if process_running(pid, marker):
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not process_running(pid, marker), 10.0)
    return False


def free_ports(count: int, host: str) -> list[int]:
    """`count` distinct ports free now: all held open until all are chosen."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def check_port_free(host: str, port: int) -> None:
    """Refuse a port something listens on. SO_REUSEADDR, as the servers bind: connections
    of a stopped server left in TIME_WAIT do not hold its port."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no {path})"
    return "\n".join(f"  {line}" for line in text.splitlines()[-lines:])


# -- state ----------------------------------------------------------------------------------

def read_state(data_dir: Path) -> ClusterState | None:
    path = data_dir / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return ClusterState.from_json(text)
    except (ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"{path} is not a cluster's state file ({exc})") from None


def write_state(data_dir: Path, state: ClusterState) -> None:
    path = data_dir / STATE_FILE
    scratch = path.with_suffix(".json.tmp")
    scratch.write_text(state.to_json())
    os.replace(scratch, path)


def existing_state(data_dir: Path) -> ClusterState:
    state = read_state(data_dir)
    if state is None:
        raise CommandError(f"no cluster in {data_dir} (no {STATE_FILE}): "
                           f"run `sluice cluster start --data-dir {data_dir} --brokers N` first")
    return state


def running_processes(data_dir: Path, state: ClusterState) -> dict[str, bool]:
    """"zookeeper" and "broker <id>" -> whether it runs."""
    up = {"zookeeper": process_running(state.zookeeper_pid, data_dir / "zookeeper" / "zoo.cfg")}
    for broker in state.brokers:
        up[f"broker {broker.id}"] = process_running(
            broker.pid, broker_dir(data_dir, broker.id) / "server.properties")
    return up


def extra_properties(path: Path) -> dict[str, str]:
    """The extra broker properties of `--config`, checked as a broker would check them."""
    from broker.config import ConfigError, build_config, read_properties

    try:
        props = read_properties(str(path))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    managed = [key for key in props if key in MANAGED_KEYS]
    if managed:
        raise CommandError(f"{path}: {', '.join(managed)} set by `sluice cluster start` "
                           "for each broker; leave them out")
    try:
        _, warnings = build_config(props, {"data_dir": "."})
    except ConfigError as exc:
        raise CommandError(f"{path}: {exc}") from None
    for warning in warnings:  # as the brokers will: an unknown key is not an error
        print(f"sluice: warning: {path}: {warning}", file=sys.stderr)
    return props


def planned_state(args, previous: ClusterState | None) -> ClusterState:
    """The cluster to start: a new one from the arguments, or the recorded one (arguments
    given again must agree with it)."""
    properties = None if args.config is None else extra_properties(args.config)
    if previous is None:
        if args.brokers is None:
            raise CommandError(f"no cluster in {args.data_dir} yet: say how many with --brokers N")
        host = args.host or "127.0.0.1"
        if args.base_port is not None:
            if args.base_port + args.brokers - 1 > 65535:
                raise CommandError(f"--base-port {args.base_port} leaves no room for "
                                   f"{args.brokers} brokers below port 65536")
            ports = [args.base_port + i for i in range(args.brokers)]
        else:
            ports = free_ports(args.brokers, host)
        from sluice.zookeeper import free_port
        return ClusterState(host=host, zookeeper_port=free_port(),
                            brokers=[BrokerEntry(i, port) for i, port in enumerate(ports)],
                            properties=properties or {})
    recorded = {"--brokers": (args.brokers, len(previous.brokers)),
                "--host": (args.host, previous.host),
                "--base-port": (args.base_port, previous.brokers[0].port)}
    for option, (given, kept) in recorded.items():
        if given is not None and given != kept:
            raise CommandError(f"{args.data_dir} holds a cluster started with {option} {kept}; "
                               f"start it again without {option}, or use another --data-dir")
    if args.base_port is not None and [b.port for b in previous.brokers] != [
            args.base_port + i for i in range(len(previous.brokers))]:
        raise CommandError(f"{args.data_dir} holds a cluster on ports chosen at its first start; "
                           "start it again without --base-port")
    if properties is not None:
        previous.properties = properties
    return previous


# -- actions --------------------------------------------------------------------------------

def start(args) -> int:
    from sluice.zookeeper import ZooKeeperServer, ZooKeeperUnavailable, zookeeper_command

    data_dir: Path = args.data_dir.resolve()
    if data_dir.exists() and not data_dir.is_dir():
        raise CommandError(f"--data-dir {args.data_dir} is not a directory")
    try:  # before anything is written: java and the jars are there
        zookeeper_command(data_dir / "zookeeper" / "zoo.cfg")
    except ZooKeeperUnavailable as exc:
        raise CommandError(str(exc)) from None
    previous = read_state(data_dir)
    if previous is not None:
        up = [name for name, running in running_processes(data_dir, previous).items() if running]
        if up:
            raise CommandError(f"the cluster in {args.data_dir} is running ({', '.join(up)}): "
                               f"stop it first with `sluice cluster stop --data-dir {args.data_dir}`")
    state = planned_state(args, previous)
    for broker in state.brokers:
        check_port_free(state.host, broker.port)
    check_port_free("127.0.0.1", state.zookeeper_port)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CommandError(f"cannot create {args.data_dir}: {exc.strerror}") from None
    write_state(data_dir, state)

    zookeeper = ZooKeeperServer(data_dir / "zookeeper", state.zookeeper_port)
    try:
        zookeeper.start(args.timeout, detached=True)
    except ZooKeeperUnavailable as exc:
        raise CommandError(str(exc)) from None
    state.zookeeper_pid = zookeeper.pid
    write_state(data_dir, state)
    try:
        processes = {}
        for broker in state.brokers:
            processes[broker.id] = launch_broker(data_dir, state, broker)
            broker.pid = processes[broker.id].pid
            write_state(data_dir, state)
        wait_for_cluster(data_dir, state, processes, args.timeout)
    except BaseException:
        print("sluice: stopping what was started", file=sys.stderr)
        stop_all(data_dir, state, timeout=10.0)
        raise
    print(state.bootstrap_servers)
    return 0


def add_broker(args) -> int:
    data_dir = args.data_dir.resolve()
    state = existing_state(data_dir)
    down = [name for name, running in running_processes(data_dir, state).items() if not running]
    if down:
        raise CommandError(f"the cluster in {args.data_dir} is not running ({', '.join(down)} "
                           f"stopped): start it first with `sluice cluster start --data-dir "
                           f"{args.data_dir}`")
    broker = BrokerEntry(max(b.id for b in state.brokers) + 1, next_port(state))
    check_port_free(state.host, broker.port)
    state.brokers.append(broker)
    write_state(data_dir, state)
    try:
        process = launch_broker(data_dir, state, broker)
        broker.pid = process.pid
        write_state(data_dir, state)
        wait_for_cluster(data_dir, state, {broker.id: process}, args.timeout)
    except BaseException:
        print(f"sluice: stopping broker {broker.id} and leaving it out of the cluster", file=sys.stderr)
        if broker.pid is not None:
            stop_process(broker.pid, broker_dir(data_dir, broker.id) / "server.properties", 10.0)
        state.brokers.remove(broker)
        write_state(data_dir, state)
        raise
    print(f"Broker {broker.id} joined on {state.host}:{broker.port}. It holds no replica until some "
          f"are moved onto it: sluice reassign --bootstrap-server {state.bootstrap_servers} "
          "--rebalance --wait")
    print(state.bootstrap_servers)
    return 0


def next_port(state: ClusterState) -> int:
    """The port after the brokers' when theirs are consecutive (as --base-port makes them,
    and a start with --base-port checks again) and it is free; else any free port."""
    ports = [b.port for b in state.brokers]
    following = ports[0] + len(ports)
    if ports == list(range(ports[0], following)) and following <= 65535:
        try:
            check_port_free(state.host, following)
            return following
        except CommandError:
            pass
    return free_ports(1, state.host)[0]


def launch_broker(data_dir: Path, state: ClusterState, broker: BrokerEntry) -> subprocess.Popen:
    directory = broker_dir(data_dir, broker.id)
    (directory / "data").mkdir(parents=True, exist_ok=True)
    config = directory / "server.properties"
    config.write_text(broker_properties(state, broker, data_dir))
    with open(directory / "broker.log", "ab") as log:
        return launch(["--config", str(config)], cwd=directory, log=log, detached=True)


def exit_description(returncode: int) -> str:
    """How a process ended, from its Popen returncode (negative: the signal that ended it)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "an unknown signal"
        return f"was killed by signal {-returncode} ({name})"
    return f"exited with status {returncode}"


def wait_for_cluster(data_dir: Path, state: ClusterState, processes: dict[int, subprocess.Popen],
                     timeout: float) -> None:
    """Until a broker's Metadata lists every broker and a controller; a broker that exits
    meanwhile (`processes`, by broker id, are the ones just launched) ends the wait with how
    it ended and the end of its log."""
    from sluice_client import AsyncClient, ClientError
    from wire.errors import KafkaError

    wanted = {b.id for b in state.brokers}

    async def poll() -> None:
        deadline = time.monotonic() + timeout
        last = "no broker answered"
        while True:
            for broker_id, process in processes.items():
                if process.poll() is not None:
                    log = broker_dir(data_dir, broker_id) / "broker.log"
                    raise CommandError(f"broker {broker_id} {exit_description(process.returncode)}; "
                                       f"the end of {log}:\n{log_tail(log)}")
            client = AsyncClient(state.bootstrap_servers, client_id="sluice-cluster",
                                 connect_timeout=2.0, request_timeout=5.0, retries=0)
            try:
                metadata = await client.metadata([])
                listed = set(metadata.brokers)
                if listed == wanted and metadata.controller_id in wanted:
                    return
                last = (f"Metadata lists brokers {sorted(listed)}, controller "
                        f"{metadata.controller_id}")
            except (ClientError, KafkaError, OSError, TimeoutError) as exc:
                last = str(exc) or type(exc).__name__
            finally:
                await client.close()
            if time.monotonic() > deadline:
                raise CommandError(f"the cluster did not form within {timeout:g} s ({last}); "
                                   f"see the brokers' logs, {data_dir}/broker-*/broker.log")
            await asyncio.sleep(0.25)

    asyncio.run(poll())


def controller_id(state: ClusterState) -> int | None:
    """The controller's id from Metadata, or None when no broker says within a few seconds."""
    from sluice_client import AsyncClient, ClientError
    from wire.errors import KafkaError

    async def ask() -> int | None:
        client = AsyncClient(state.bootstrap_servers, client_id="sluice-cluster",
                             connect_timeout=2.0, request_timeout=3.0, retries=0)
        try:
            metadata = await client.metadata([])
            return metadata.controller_id if metadata.controller_id >= 0 else None
        except (ClientError, KafkaError, OSError, TimeoutError):
            return None
        finally:
            await client.close()

    return asyncio.run(ask())


def stop_all(data_dir: Path, state: ClusterState, timeout: float) -> list[int]:
    """Stop the brokers one at a time, the controller last, then ZooKeeper; the ids of
    brokers that had to be killed."""
    controller = controller_id(state)
    killed = []
    for broker in sorted(state.brokers, key=lambda b: (b.id == controller, b.id)):
        marker = broker_dir(data_dir, broker.id) / "server.properties"
        if broker.pid is not None and not stop_process(broker.pid, marker, timeout):
            killed.append(broker.id)
    if state.zookeeper_pid is not None:
        stop_process(state.zookeeper_pid, data_dir / "zookeeper" / "zoo.cfg", 10.0)
    return killed


def stop(args) -> int:
    data_dir = args.data_dir.resolve()
    state = existing_state(data_dir)
    if not any(running_processes(data_dir, state).values()):
        print(f"The cluster in {args.data_dir} is not running.")
        return 0
    killed = stop_all(data_dir, state, args.timeout)
    if killed:
        print(f"sluice: broker(s) {', '.join(map(str, killed))} did not stop within "
              f"{args.timeout:g} s and were killed", file=sys.stderr)
    print(f"Stopped the cluster in {args.data_dir}.")
    return 0


def status(args) -> int:
    data_dir = args.data_dir.resolve()
    state = existing_state(data_dir)
    up = running_processes(data_dir, state)
    rows = [("zookeeper", f"127.0.0.1:{state.zookeeper_port}", state.zookeeper_pid,
             "running" if up["zookeeper"] else "stopped")]
    rows += [(f"broker {b.id}", f"{state.host}:{b.port}", b.pid,
              "running" if up[f"broker {b.id}"] else "stopped") for b in state.brokers]
    print(format_table(["PROCESS", "ADDRESS", "PID", "STATE"], rows))
    if any(up[f"broker {b.id}"] for b in state.brokers):
        controller = controller_id(state)
        print(f"controller: {'unknown' if controller is None else f'broker {controller}'}")
        print(f"bootstrap servers: {state.bootstrap_servers}")
    return 0 if all(up.values()) else NOT_RUNNING


ACTIONS = {"start": start, "stop": stop, "status": status, "add-broker": add_broker}
