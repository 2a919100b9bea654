"""The ZooKeeper server of the tests: sluice/zookeeper.py's launcher, plus what only tests
do to it. `pause()`/`resume()` freeze it (SIGSTOP/SIGCONT) as a hung server would be;
`stop()` then `start()` brings the same server back on its port, data included. Writes
are not fsynced: the process dies in tests, never the machine.
"""

from __future__ import annotations

import signal

from sluice.broker_process import pause_process
from sluice.zookeeper import ZooKeeperServer as _Launcher
from sluice.zookeeper import ZooKeeperUnavailable, free_port

__all__ = ["ZooKeeperServer", "ZooKeeperUnavailable", "free_port"]


class ZooKeeperServer(_Launcher):
    def __init__(self, directory, port: int | None = None):
        super().__init__(directory, port, fsync=False)
        self.paused = False

    def start(self, timeout: float = 60.0) -> "ZooKeeperServer":
        self.paused = False
        return super().start(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (after SIGCONT when paused), then SIGKILL after `timeout` seconds."""
        if self.process is not None and self.paused:
            self.process.send_signal(signal.SIGCONT)
        self.paused = False
        super().stop(timeout)

    def pause(self) -> None:
        """SIGSTOP, returned once the server has stopped: connections stay open and
        nothing answers, as on a hung server."""
        pause_process(self.process)
        self.paused = True

    def resume(self, timeout: float = 30.0) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.paused = False
        self._wait_serving(timeout)

    def restart(self, timeout: float = 60.0) -> "ZooKeeperServer":
        """Stop, then start on the same port with the same data."""
        self.stop()
        return self.start(timeout)
