"""Failures of the client itself, as opposed to error codes a broker returns (those are
`wire.errors.KafkaError`)."""

from __future__ import annotations

__all__ = ["AuthenticationFailed", "BrokerUnreachable", "ClientError", "ConnectionFailed",
           "ProtocolViolation", "RequestTimedOut", "ResponseTooLarge", "SecurityConfigError",
           "TlsHandshakeFailed", "UnsupportedVersion"]


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


class SecurityConfigError(ClientError, ValueError):
    """A security setting (security.protocol, ssl.*, sasl.*) is missing, malformed, or asks
    for what the client does not do. The message names the setting (also in `key`) and
    never quotes a password, a key or a JAAS configuration."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


class AuthenticationFailed(ClientError):
    """The broker did not accept the client's identity, or the client did not accept the
    broker's: SASL authentication failed (the broker's SASL_AUTHENTICATION_FAILED with its
    message, a mechanism it does not enable, or a SCRAM server signature that does not
    verify). The connection is closed. Not retried: the same credentials fail the same way
    (Kafka's clients treat authentication errors as fatal too)."""

    def __init__(self, message: str, error_code: int | None = None):
        super().__init__(message)
        self.error_code = error_code  # the broker's Kafka error code, when it sent one


class TlsHandshakeFailed(AuthenticationFailed):
    """The TLS handshake failed: the broker's certificate is not trusted or does not name
    the host, or the broker refused the client's certificate (or its absence)."""
