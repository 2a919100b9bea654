"""Reading responses: the entry of a response array that answers for a value."""

from __future__ import annotations

from sluice_client.errors import ProtocolViolation

__all__ = ["entry_for"]


def entry_for(items: list, field: str, value, context: str):
    """The entry of a response array that answers for `value`."""
    for item in items:
        if getattr(item, field) == value:
            return item
    raise ProtocolViolation(f"{context}: the response has no entry for {field} {value}")
