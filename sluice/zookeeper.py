"""A standalone ZooKeeper server for a development cluster: Debian's `zookeeper` package
run by `java` with a zoo.cfg generated in a directory of its own, on 127.0.0.1 only.

The port is chosen once (a free one unless given), so `stop()` then `start()` brings the
same server back, data included, where its clients reconnect. Output goes to `log_path`,
quoted when the server fails to come up.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["ZooKeeperServer", "ZooKeeperUnavailable", "free_port", "serving", "zookeeper_command"]

HOST = "127.0.0.1"
JARS_DIR = Path("/usr/share/java")
# zookeeper.jar's manifest Class-Path names the rest (jute, netty, jetty, jackson, ...);
# slf4j-simple, from the same dependency set, gives its logging a destination (stderr).
JARS = ("zookeeper.jar", "slf4j-simple.jar")
SERVER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
# A small heap and a quick start: a development server holds a few thousand znodes.
JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
TICK_MS = 500  # session expiry is checked once a tick


class ZooKeeperUnavailable(RuntimeError):
    """Java or the package's jars are missing, or the server did not come up; the
    message says what to do."""


def free_port(host: str = HOST) -> int:
    """A port nothing listens on now (the kernel's pick; another process may take it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def zookeeper_command(config_path: Path) -> list[str]:
    """The command line that runs Debian's ZooKeeper server on `config_path`."""
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperUnavailable(
            "`java` is not on PATH: ZooKeeper needs a Java runtime "
            "(apt-get install zookeeper brings one)")
    missing = [str(JARS_DIR / jar) for jar in JARS if not (JARS_DIR / jar).is_file()]
    if missing:
        raise ZooKeeperUnavailable(
            f"ZooKeeper's jars are missing ({', '.join(missing)}): install Debian's "
            "`zookeeper` package (apt-get install zookeeper)")
    classpath = os.pathsep.join(str(JARS_DIR / jar) for jar in JARS)
    return [java, *JVM_OPTIONS, "-cp", classpath, SERVER_MAIN, str(config_path)]


def serving(port: int, host: str = HOST) -> bool:
    """Whether a standalone ZooKeeper server answers `srvr` on host:port."""
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"srvr")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
    except OSError:
        return False
    return b"Mode: standalone" in reply


class ZooKeeperServer:
    """One ZooKeeper server: its config, data (`data/`) and log in `directory`.

    `fsync=False` leaves writes in the page cache (zoo.cfg's forceSync=no): quicker on a
    shared disk, durable against the process dying but not the machine. `detached=True`
    starts it in a session of its own, so that it outlives the process that started it.
    """

    def __init__(self, directory, port: int | None = None, *, fsync: bool = True):
        self.directory = Path(directory)
        self.data_dir = self.directory / "data"
        self.config_path = self.directory / "zoo.cfg"
        self.log_path = self.directory / "zookeeper.log"
        self.port = free_port() if port is None else port
        self.fsync = fsync
        self.process: subprocess.Popen | None = None

    @property
    def hosts(self) -> str:
        """The connect string, as `zookeeper.connect` takes it (a chroot may follow)."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={HOST}",
            # Sessions from 1 s to a minute: Kafka's default is 18 s.
            "minSessionTimeout=1000",
            "maxSessionTimeout=60000",
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr",
            f"forceSync={'yes' if self.fsync else 'no'}",
            "",
        ]))

    def start(self, timeout: float = 60.0, *, detached: bool = False) -> "ZooKeeperServer":
        """Start the server and wait (at most `timeout` seconds) until it serves; raises
        ZooKeeperUnavailable, with the end of its log, when it does not."""
        command = zookeeper_command(self.config_path)
        self.write_config()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=self.directory,
                                            start_new_session=detached)
        self._wait_serving(timeout)
        return self

    def serving(self) -> bool:
        return serving(self.port)

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.serving():
            if self.process.poll() is not None:
                status = self.process.returncode
                self.process = None
                raise ZooKeeperUnavailable(f"ZooKeeper exited with status {status}\n"
                                           f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperUnavailable(f"ZooKeeper did not serve on {self.hosts} within "
                                           f"{timeout:g} s\n{self.log_tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)

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
