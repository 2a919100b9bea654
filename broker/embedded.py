"""A broker running in this process, on a thread of its own, for tests and examples.

    with EmbeddedBroker(data_dir) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
"""

from __future__ import annotations

import asyncio
import threading

from broker.broker import Broker
from broker.config import build_config
from broker.failpoints import check_enabled_points


class EmbeddedBroker:
    def __init__(self, data_dir: str, port: int = 0, host: str = "127.0.0.1",
                 properties: dict[str, str] | None = None):
        self.config, self.warnings = build_config(properties or {}, {"data_dir": str(data_dir),
                                                                     "port": port, "host": host})
        self.broker: Broker | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.config.host}:{self.broker.server.port}"

    def start(self) -> "EmbeddedBroker":
        check_enabled_points()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                self.broker = Broker(self.config)
                loop.run_until_complete(self.broker.start())
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.broker.stop())
            loop.close()

        self._thread = threading.Thread(target=run, name="sluice-broker", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
        self._thread = None

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
