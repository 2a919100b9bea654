"""The broker's one error type: a request refused, with the Kafka error code to answer it
with. Storage, topics, producer state and the coordinators raise it; handlers put its
code (and its message, where the response has a field for one) on the wire."""

from __future__ import annotations

from wire.error_codes import ErrorCode


class BrokerError(Exception):
    def __init__(self, code: ErrorCode, message: str = ""):
        self.code = code
        super().__init__(message or code.name)
