"""A blocking face for `AsyncClient`: the asyncio client runs on a private event loop
in a daemon thread, and each method waits for its result at most `call_timeout`. The
roles are blocking too: `client.producer`, `client.consumer`, `client.admin`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from typing import Sequence

from sluice_client.admin import Admin
from sluice_client.client import AsyncClient
from sluice_client.consumer import Consumer
from sluice_client.model import ClusterMetadata
from sluice_client.producer import Producer

__all__ = ["BlockingAdmin", "BlockingConsumer", "BlockingProducer", "Call", "Client"]


def _blocking(async_class: type, name: str):
    """The blocking form of `async_class`'s coroutine method `name`."""
    method = getattr(async_class, name)

    @functools.wraps(method)
    def call(self: _Blocking, *args, **kwargs):
        return self.start(name, *args, **kwargs).result()

    return call


class Call:
    """A call in flight (`Client.start`): `result()` waits for it as the blocking method
    would, at most the client's `call_timeout`, and returns or raises what it does."""

    def __init__(self, future: concurrent.futures.Future, name: str, timeout: float):
        self._future, self._name, self._timeout = future, name, timeout

    def result(self):
        done, _ = concurrent.futures.wait([self._future], self._timeout)
        if not done:
            self._future.cancel()
            raise TimeoutError(f"{self._name} did not finish within {self._timeout:g} s")
        return self._future.result()


class _Blocking:
    """One async object of a client (the client itself or a role) with its methods run on
    the client's loop."""

    def __init__(self, client: Client, target):
        self._client = client
        self._target = target

    def start(self, name: str, *args, **kwargs) -> Call:
        """Begin the method `name` without waiting for it, so that several requests can be
        in flight at once (e.g. produce requests to different partitions); `result()` of
        the returned call waits for it."""
        return self._client._start(getattr(self._target, name)(*args, **kwargs), name)


def _blocking_face(role: type) -> type:
    """A class whose methods are the public coroutine methods of `role`, blocking."""
    methods = {name: _blocking(role, name) for name, method in vars(role).items()
               if not name.startswith("_") and inspect.iscoroutinefunction(method)}
    return type(f"Blocking{role.__name__}", (_Blocking,),
                {"__doc__": f"`{role.__name__}`, blocking.", "__module__": __name__, **methods})


BlockingProducer = _blocking_face(Producer)  # client.producer.produce(...)
BlockingConsumer = _blocking_face(Consumer)  # client.consumer.fetch_records(...)
BlockingAdmin = _blocking_face(Admin)        # client.admin.create_topics(...)


class Client(_Blocking):
    """The synchronous client: `with Client("host:9092") as client: client.metadata()`,
    `client.producer.produce(...)`, `client.admin.create_topics(...)`.

    Keyword options are those of `AsyncClient`. The async client's own bounds (request
    timeouts, retry count and time) end every call; `call_timeout` is a last resort
    that cancels a call still running after it.
    """

    def __init__(self, bootstrap_servers: str | Sequence[str], *, call_timeout: float = 120.0,
                 **options):
        async_client = AsyncClient(bootstrap_servers, **options)
        super().__init__(self, async_client)
        self.call_timeout = call_timeout
        self.producer = BlockingProducer(self, async_client.producer)
        self.consumer = BlockingConsumer(self, async_client.consumer)
        self.admin = BlockingAdmin(self, async_client.admin)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"{async_client.client_id}-loop")
        self._thread.start()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _start(self, coroutine, name: str) -> Call:
        if self._loop.is_closed():
            coroutine.close()
            raise RuntimeError("the client is closed")
        return Call(asyncio.run_coroutine_threadsafe(coroutine, self._loop), name, self.call_timeout)

    def close(self) -> None:
        """Close the connections, then stop the loop and its thread."""
        if self._loop.is_closed():
            return
        try:
            self._start(self._target.close(), "close").result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(self.call_timeout)
            self._loop.close()

    @property
    def cached_metadata(self) -> ClusterMetadata:
        """What the client currently knows of brokers and topics."""
        return self._target.cached_metadata

    negotiated_versions = _blocking(AsyncClient, "negotiated_versions")
    metadata = _blocking(AsyncClient, "metadata")
    find_coordinator = _blocking(AsyncClient, "find_coordinator")
