"""Failures of the client itself, as opposed to error codes a broker returns (those are
`wire.errors.KafkaError`)."""

from __future__ import annotations

__all__ = ["BrokerUnreachable", "ClientError", "ConnectionFailed", "ProtocolViolation",
           "RequestTimedOut", "ResponseTooLarge", "UnsupportedVersion"]


class ClientError(Exception):
    """Base of every client-side failure."""

    retriable = False


class ConnectionFailed(ClientError, ConnectionError):
    """A broker could not be reached, or the connection to it was lost.

    Requests that were in flight on a lost connection fail with this; the next request
    opens a new connection, so it is worth a retry.
    """

    retriable = True


class BrokerUnreachable(ConnectionFailed):
    """A broker the cluster named (a partition's leader, a coordinator) cannot be reached:
    it is down, and the cluster moves its roles elsewhere once it notices (its ZooKeeper
    session ends). Like a moving coordinator, retried until the retry timeout without
    counting against `retries`, as Kafka's clients wait for a node to come back or be
    replaced; a cluster of which no broker is reachable still fails after the retries."""


class RequestTimedOut(ClientError, TimeoutError):
    """No response within the request's timeout; the connection is closed, because every
    request pipelined behind this one is stuck behind it too (Kafka answers in order)."""

    retriable = True


class ProtocolViolation(ClientError):
    """The broker sent bytes that are not a valid response to what was asked: a frame
    size out of bounds, an unknown correlation id, or a body the codec cannot parse."""


class ResponseTooLarge(ProtocolViolation):
    """A response's size prefix exceeds `max_response_bytes`; the connection is closed
    without reading it."""


class UnsupportedVersion(ClientError):
    """The broker and this client share no version of an API."""
