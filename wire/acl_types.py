"""Kafka's ACL enums as they travel in DescribeAcls, CreateAcls and DeleteAcls (int8 codes),
with the names Kafka prints and stores (ZooKeeper's /kafka-acl JSON, kafka-acls.sh).

Shared by the broker's authorizer and the client's admin commands, so both spell them
the same way. UNKNOWN (0) is what a code this side does not know decodes to.
"""

from __future__ import annotations

from enum import IntEnum


class _Named(IntEnum):
    """An enum whose members have Kafka's display name (`kafka_name`) and parse from it."""

    @property
    def kafka_name(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str):
        """A member from Kafka's name ("Read", "TransactionalId"), its upper-case form
        ("READ", "TRANSACTIONAL_ID") or its code; ValueError otherwise."""
        key = text.strip().replace("-", "_")
        for member in cls:
            if key in (member.kafka_name, member.name) or key.upper() == member.name \
                    or key.lower() == member.kafka_name.lower() or key == str(int(member)):
                return member
        raise ValueError(f"{text!r} is not one of {', '.join(m.kafka_name for m in cls if m > 1)}")

    @classmethod
    def of(cls, code: int):
        """The member for a code read from the wire; UNKNOWN when this side does not know it."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_RESOURCE_NAME = "kafka-cluster"  # the one cluster resource's name
WILDCARD = "*"  # a literal resource name, principal name or host matching every one
