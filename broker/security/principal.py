"""Kafka principals: "Type:name", as ACLs and `super.users` name them.

A connection nobody authenticated on (PLAINTEXT, or TLS without a client certificate) is
`User:ANONYMOUS`, as in Kafka. The type is compared as written ("User"), the name is
everything after the first colon, so a name may itself hold colons.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"


ANONYMOUS = Principal("User", "ANONYMOUS")


def parse_principal(text: str) -> Principal:
    """"User:alice" -> Principal("User", "alice"); ValueError for a text without a type."""
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise ValueError(f"{text!r} is not a principal (expected Type:name, e.g. User:alice)")
    return Principal(kind, name)
