"""The real broker as a separate process (`python -m broker`), for tests.

Starts on a free loopback port (the broker reports it in its "listening on" line),
restarts on the same port and data directory, stops with SIGTERM or dies by SIGKILL.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class BrokerProcess:
    def __init__(self, data_dir, *, port: int = 0, config_file: str | None = None,
                 extra_args: tuple[str, ...] = (), source_dir: str = _REPO):
        """`source_dir`: the tree whose broker runs (another checkout, to compare versions)."""
        self.data_dir = str(data_dir)
        self.source_dir = source_dir
        self.port = port
        self.config_file = config_file
        self.extra_args = extra_args
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        args = [sys.executable, "-m", "broker", "--data-dir", self.data_dir,
                "--host", "127.0.0.1", "--port", str(self.port), *self.extra_args]
        if self.config_file:
            args += ["--config", self.config_file]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, cwd=self.source_dir)
        found = threading.Event()

        def pump(proc=self.proc):
            for line in proc.stdout:
                self.output.append(line)
                match = _LISTENING.search(line)
                if match and not found.is_set():
                    self.port = int(match.group(1))
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
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
            return self.proc.wait(timeout)
        finally:
            self.proc = None

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def restart(self, timeout: float = 30.0) -> "BrokerProcess":
        self.stop()
        return self.start(timeout)

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.kill() if exc[0] else self.stop()
