"""A Sluice broker as a process of its own (`python -m broker`).

`launch` is the one place a broker process is spawned: `sluice cluster start` launches its
brokers detached, with their output in a log file; `BrokerProcess` (what tests and the
benchmarks hold) starts one on a free loopback port, learns the port from its "listening
on" line, restarts it on the same port and data directory, stops it with SIGTERM or kills
it with SIGKILL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

__all__ = ["BrokerProcess", "launch", "pause_process"]

_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
_LISTENER = re.compile(r"(?:on |, )\[?[0-9A-Za-z.:-]*\]?:(\d+) \(([A-Z0-9_.-]+), ")
_METRICS = re.compile(r"Prometheus metrics on http://[^ ]+:(\d+)/metrics")
# The checkout this module is in: its `broker` package is the one `python -m broker` runs there.
_SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def launch(arguments: list[str], *, cwd, log=None, detached: bool = False) -> subprocess.Popen:
    """`python -m broker ARGUMENTS`, run in `cwd`. Its output (stdout and stderr) goes to
    the open file `log`, or to a text pipe when `log` is None; `detached` starts it in a
    session of its own, so that it outlives the process that started it."""
    return subprocess.Popen([sys.executable, "-m", "broker", *arguments], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE if log is None else log, stderr=subprocess.STDOUT,
                            text=log is None, cwd=cwd, start_new_session=detached)


def pause_process(process: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGSTOP `process`, returning once every one of its threads has stopped: the signal
    only asks them to stop, and a thread running meanwhile (on another core, or not yet
    scheduled since) goes on answering a little longer. Raises TimeoutError after
    `timeout` seconds."""
    process.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _all_threads_stopped(process.pid):
        if time.monotonic() > deadline:
            raise TimeoutError(f"process {process.pid} did not stop within {timeout:g} s of SIGSTOP")
        time.sleep(0.005)


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of `pid` is stopped by a signal (state T in /proc)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
        states = []
        for thread in threads:
            with open(f"/proc/{pid}/task/{thread}/stat", "rb") as stat:
                states.append(stat.read().rpartition(b")")[2].split()[0])
    except (FileNotFoundError, ProcessLookupError):
        return False  # a thread ended between the listing and the read: look again
    return all(state == b"T" for state in states)


class BrokerProcess:
    def __init__(self, data_dir, *, port: int = 0, config_file: str | None = None,
                 extra_args: tuple[str, ...] = (), source_dir: str = _SOURCE_DIR):
        """`source_dir`: the tree whose broker runs (another checkout, to compare versions)."""
        self.data_dir = str(data_dir)
        self.source_dir = source_dir
        self.port = port
        self.ports: dict[str, int] = {}  # every listener's port by name, once started
        self.config_file = config_file
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []  # every line of every start, complete once stopped or killed
        self._pump: threading.Thread | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap(self, listener: str) -> str:
        """host:port of a listener by name (its port is the one it bound)."""
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def metrics_port(self) -> int | None:
        """The port of the Prometheus endpoint (metrics.port) as the broker's last start
        logged it, before its "listening on" line; None when it serves none."""
        found = _METRICS.findall("".join(self.output))
        return int(found[-1]) if found else None

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        args = ["--data-dir", self.data_dir, "--host", "127.0.0.1", "--port", str(self.port),
                *self.extra_args]
        if self.config_file:
            args += ["--config", self.config_file]
        self.proc = launch(args, cwd=self.source_dir)
        found = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.output.append(line)
                match = _LISTENING.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    self.ports = {name: int(port) for port, name in _LISTENER.findall(line)}
                    found.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "".join(self.output))
        return self

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait: the broker answers in-flight requests and shuts down cleanly."""
        if self.proc is None:
            return 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        finally:
            self.proc = None
        self._read_to_end()
        return code

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None
            self._read_to_end()

    def _read_to_end(self) -> None:
        """The process has exited: wait (bounded) until its last lines are in `output`."""
        if self._pump is not None:
            self._pump.join(10)
            self._pump = None

    def pause(self) -> None:
        """SIGSTOP, returned once the broker has stopped: its sockets stay open and nothing
        answers, as in a long GC pause or a hung machine."""
        pause_process(self.proc)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, timeout: float = 30.0) -> "BrokerProcess":
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.kill() if exc[0] else self.stop()
