"""What a handler may answer besides a response body, for the network layer
(broker.server) to carry out: close the connection, answer later, or answer and then mute
a client over its quota. Both layers import them from here, below either."""

from __future__ import annotations

from typing import Awaitable


class CloseConnection(Exception):
    """Raised by a handler: the request cannot be answered, so the connection closes;
    with `last_response`, after that response (a failed authentication's answer)."""

    def __init__(self, message: str, last_response: list | None = None):
        super().__init__(message)
        self.last_response = last_response


class ResponseLater:
    """A handler's answer to a request that has taken effect and whose response only
    waits (an acks=all produce, for the followers): the requests behind it are answered
    meanwhile, and the responses still leave in order."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Awaitable):
        self.awaitable = awaitable


class Throttled:
    """A handler's answer to a client over its quota: `answer` (a response, or None for
    none) is sent, then the connection is muted for `seconds` (KIP-219: respond first,
    then mute)."""

    __slots__ = ("answer", "seconds")

    def __init__(self, answer, seconds: float):
        self.answer = answer
        self.seconds = seconds

    @classmethod
    def when(cls, answer, seconds: float):
        """`answer`, throttled if `seconds` > 0."""
        return cls(answer, seconds) if seconds > 0 else answer
