"""A real standalone ZooKeeper server for tests: Debian's `zookeeper` package run by `java`
with a zoo.cfg generated in a directory of its own, listening on 127.0.0.1 only.

The port is chosen once, so `stop()` then `start()` brings the same server back, data
included, where its clients reconnect; `pause()`/`resume()` freeze it (SIGSTOP/SIGCONT)
as a hung server would be. Output goes to `log_path`, quoted when it fails to serve.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from tests.polling import wait_for

JARS_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path names the rest (jute, netty, jetty, jackson, ...);
# slf4j-simple, from the same dependency set, gives its logging a destination (stderr).
JARS = ("zookeeper.jar", "slf4j-simple.jar")
SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
TICK_MS = 500  # session expiry is checked once a tick


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ZooKeeperUnavailable(RuntimeError):
    """Java or the package's jars are missing; the message says what to install."""


class ZooKeeperServer:
    def __init__(self, directory):
        self.directory = Path(directory)
        self.data_dir = self.directory / "data"
        self.config_path = self.directory / "zoo.cfg"
        self.log_path = self.directory / "zookeeper.log"
        self.port = free_port()
        self.process: subprocess.Popen | None = None
        self.paused = False

    @property
    def hosts(self) -> str:
        """The connect string, as `zookeeper.connect` takes it (a chroot may follow)."""
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        command = self._command()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            # Sessions from 1 s (failure tests) to Kafka's 18 s default and beyond.
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr",
            # The process dies in tests, never the machine: the page cache is durable enough,
            # and an fsync per write is slow on a shared disk.
            "forceSync=no",
            "",
        ]))
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.directory)
        self.paused = False
        self._wait_serving(timeout)
        return self

    def _command(self) -> list[str]:
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperUnavailable(
                "`java` is not on PATH: ZooKeeper needs a Java runtime "
                "(apt-get install zookeeper brings one; .ci/run installs it)")
        missing = [str(JARS_DIR / jar) for jar in JARS if not (JARS_DIR / jar).is_file()]
        if missing:
            raise ZooKeeperUnavailable(
                f"ZooKeeper's jars are missing ({', '.join(missing)}): install Debian's "
                "`zookeeper` package (apt-get install zookeeper; .ci/run does)")
        classpath = os.pathsep.join(str(JARS_DIR / jar) for jar in JARS)
        return [java, *JVM_OPTIONS, "-cp", classpath, SERVER_MAIN, str(self.config_path)]

    def serving(self) -> bool:
        """Whether the server answers `srvr` as a standalone server that serves requests."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(b"srvr")
                reply = b""
                while chunk := sock.recv(4096):
                    reply += chunk
        except OSError:
            return False
        return b"Mode: standalone" in reply

    def _wait_serving(self, timeout: float) -> None:
        def up() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"ZooKeeper exited with status {self.process.returncode}"
                                     f"\n{self.log_tail()}")
            return self.serving()

        try:
            wait_for(up, timeout, f"ZooKeeper to serve on {self.hosts}", interval=0.1)
        except AssertionError:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            process.terminate()
            if self.paused:
                process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP: connections stay open and nothing answers, as on a hung server."""
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self, timeout: float = 30.0) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.paused = False
        self._wait_serving(timeout)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        return f"---- {self.log_path} (last {chars} characters)\n{text[-chars:]}"

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
