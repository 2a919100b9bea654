"""The controller's connections to the live brokers (Kafka's ControllerChannelManager).

Each live broker has one ordered queue of requests, sent one at a time over a
`BrokerConnection` to the endpoint the broker registered for the inter-broker listener
(`inter.broker.listener.name`), at the version the cluster fixes for it. A request that cannot be delivered (no connection, timeout) is sent
again after a backoff, until it is answered or the broker leaves the live set (its channel
closes). The controller gets a future per request: it awaits the answer only when it must
(topic deletion), never on its event loop's path otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from sluice_client.connection import BrokerConnection
from sluice_client.errors import ConnectionFailed, ProtocolViolation, RequestTimedOut
from wire.errors import KafkaError
from wire.primitives import EncodeError
from wire.schema import Api, Struct

from broker.clock import Clock
from broker.zookeeper.layout import BrokerRegistration

log = logging.getLogger(__name__)

# Retries back off from the first to the last, doubling.
FIRST_RETRY_BACKOFF_S = 0.05
LAST_RETRY_BACKOFF_S = 1.0


def listener_endpoint(registration: BrokerRegistration, listener: str) -> tuple[str, int] | None:
    """The host and port a broker registered for `listener` (the inter-broker listener,
    which every broker of a cluster has under the same name)."""
    for registered in registration.listeners:
        if registered.name == listener:
            return registered.host, registered.port
    return None


class BrokerChannel:
    """The ordered queue of one broker's requests and the task that sends them."""

    def __init__(self, broker_id: int, host: str, port: int, *, controller_id: int,
                 request_timeout: float, clock: Clock, security=None):
        self.broker_id = broker_id
        self.clock = clock
        self.connection = BrokerConnection(host, port, client_id=f"controller-{controller_id}",
                                           connect_timeout=request_timeout,
                                           request_timeout=request_timeout, security=security)
        self._queue: asyncio.Queue = asyncio.Queue()
        self._current: asyncio.Future | None = None  # the request being delivered
        # Besides cancelling the sender: Python 3.11's wait_for (inside the connection)
        # swallows a cancellation that comes with the response it waited for.
        self._closed = False
        self._sender = asyncio.get_running_loop().create_task(self._send_all())

    def send(self, api: Api, version: int, body: Struct) -> asyncio.Future:
        """Queues a request; the future gets its response, or None if the channel closed
        before the broker answered."""
        future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((api, version, body, future))
        return future

    async def _send_all(self) -> None:
        while not self._closed:
            api, version, body, self._current = await self._queue.get()
            response = await self._deliver(api, version, body)
            if not self._current.done():
                self._current.set_result(response)
            self._current = None

    async def _deliver(self, api: Api, version: int, body: Struct) -> Struct | None:
        backoff = FIRST_RETRY_BACKOFF_S
        while not self._closed:
            try:
                response = await self.connection.request(api, version, body, negotiated=False)
            except (ConnectionFailed, RequestTimedOut, ProtocolViolation, KafkaError,
                    OSError) as exc:
                log.info("controller: %s v%d to broker %d failed (%s); retrying in %.2f s",
                         api.name, version, self.broker_id, exc, backoff)
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, LAST_RETRY_BACKOFF_S)
                continue
            except EncodeError:
                log.exception("controller: cannot encode %s v%d for broker %d",
                              api.name, version, self.broker_id)
                return None
            if getattr(response, "error_code", 0):
                log.warning("controller: broker %d answered %s with error %d", self.broker_id,
                            api.name, response.error_code)
            return response
        return None

    async def close(self) -> None:
        """Stops sending: queued requests' futures get None."""
        self._closed = True
        self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sender
        await self.connection.close()
        pending = [self._current] if self._current is not None else []
        while not self._queue.empty():
            pending.append(self._queue.get_nowait()[-1])
        for future in pending:
            if not future.done():
                future.set_result(None)


class ControllerChannels:
    """A channel per live broker, opened and closed as brokers come and go."""

    def __init__(self, controller_id: int, listener: str, request_timeout: float, clock: Clock,
                 security=None):
        """`listener` and `security`: the inter-broker listener's name and client security."""
        self.controller_id = controller_id
        self.listener = listener
        self.security = security
        self.request_timeout = request_timeout
        self.clock = clock
        self._channels: dict[int, BrokerChannel] = {}

    def add_broker(self, broker_id: int, registration: BrokerRegistration) -> None:
        endpoint = listener_endpoint(registration, self.listener)
        if endpoint is None:
            log.warning("controller: broker %d registered no %s listener (inter.broker.listener.name): "
                        "it will get no requests", broker_id, self.listener)
            return
        self._channels[broker_id] = BrokerChannel(
            broker_id, *endpoint, controller_id=self.controller_id,
            request_timeout=self.request_timeout, clock=self.clock, security=self.security)

    async def remove_broker(self, broker_id: int) -> None:
        channel = self._channels.pop(broker_id, None)
        if channel is not None:
            await channel.close()

    def send(self, broker_id: int, api: Api, version: int, body: Struct) -> asyncio.Future:
        """The request's future (None as result when the broker has no channel or leaves)."""
        channel = self._channels.get(broker_id)
        if channel is None:
            future = asyncio.get_running_loop().create_future()
            future.set_result(None)
            return future
        return channel.send(api, version, body)

    async def close(self) -> None:
        for broker_id in list(self._channels):
            await self.remove_broker(broker_id)
