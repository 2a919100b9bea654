"""The error a Kafka error code becomes in Python, and which codes are worth a retry."""

from __future__ import annotations

from wire.error_codes import ErrorCode

__all__ = ["ErrorCode", "KafkaError", "RETRIABLE", "check"]

# Codes Kafka's clients treat as transient: the same request may succeed later, usually
# after refreshing metadata or finding the coordinator again.
RETRIABLE = frozenset({
    ErrorCode.CORRUPT_MESSAGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.NOT_CONTROLLER,
    ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    ErrorCode.LISTENER_NOT_FOUND, ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.OFFSET_NOT_AVAILABLE,
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE,
    ErrorCode.UNSTABLE_OFFSET_COMMIT, ErrorCode.THROTTLING_QUOTA_EXCEEDED,
    ErrorCode.UNKNOWN_TOPIC_ID,
})


class KafkaError(Exception):
    """A non-zero error code in a response, with where it came from."""

    def __init__(self, code: int, context: str = "", message: str | None = None):
        try:
            self.code = ErrorCode(code)
            name = self.code.name
        except ValueError:
            self.code = code
            name = f"error {code}"
        self.retriable = self.code in RETRIABLE
        self.message = message  # the broker's own words, when it sent any
        detail = f": {message}" if message else ""
        super().__init__(f"{context + ': ' if context else ''}{name}{detail}")


def check(code: int, context: str = "", message: str | None = None) -> None:
    """Raise `KafkaError` unless `code` is NONE."""
    if code:
        raise KafkaError(code, context, message)
