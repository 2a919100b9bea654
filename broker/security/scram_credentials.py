"""SCRAM credentials: per user and mechanism, the salt, stored key, server key and iteration
count (RFC 5802), never the password, as Kafka keeps them.

Text form, Kafka's (ScramCredentialUtils): `salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=<n>`. The single node keeps them in `scram-credentials.json` in the data dir
(`{"version": 1, "users": {"alice": {"SCRAM-SHA-256": "<text form>"}}}`), written
atomically; a cluster in ZooKeeper's `/config/users/<user>` (`{"version":1,"config":
{"SCRAM-SHA-256":"<text form>"}}`), each change noted under /config/changes as
`users/<user>` so that every broker re-reads that user (the znode's other keys, the
user's client quotas, are left as they are).

AlterUserScramCredentials sends a salt and a salted password (the client ran Hi()); the
keys are derived from it here: stored key = H(HMAC(salted password, "Client Key")),
server key = HMAC(salted password, "Server Key"). Kafka's rules for changes: mechanism 1
(SCRAM-SHA-256) or 2 (SCRAM-SHA-512), else UNSUPPORTED_SASL_MECHANISM; iterations within
[4096, 16384] and a non-empty user, salt and salted password, else UNACCEPTABLE_CREDENTIAL;
a user's mechanism named twice in one request: DUPLICATE_RESOURCE for the user (its two
mechanisms may change together); deleting what does not exist: RESOURCE_NOT_FOUND. A
user's changes apply together or not at all.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import collections
import hashlib
import hmac
import json
import logging
import os
from dataclasses import dataclass, field

from broker.zookeeper.layout import config_entity_path, config_entity_parts
from broker.storage.checkpoint import write_atomically
from wire.error_codes import ErrorCode

log = logging.getLogger("sluice.security")

FILENAME = "scram-credentials.json"
MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}  # Kafka's ScramMechanism codes
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def to_text(self) -> str:
        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        return (f"salt={b64(self.salt)},stored_key={b64(self.stored_key)},"
                f"server_key={b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_text(cls, text: str) -> "ScramCredential":
        """ValueError for anything but Kafka's four fields."""
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError("expected salt, stored_key, server_key and iterations")
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except binascii.Error:
            raise ValueError("a key is not base64") from None

    @classmethod
    def from_salted_password(cls, mechanism: str, salt: bytes, salted_password: bytes,
                             iterations: int) -> "ScramCredential":
        digest = _HASHES[mechanism]
        client_key = hmac.digest(salted_password, b"Client Key", digest)
        return cls(salt, hashlib.new(digest, client_key).digest(),
                   hmac.digest(salted_password, b"Server Key", digest), iterations)


class CredentialError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class ScramCredentials:
    """Every user's credentials, as the SASL listeners read them: kept in the data dir
    (single node), or in ZooKeeper once `use_zookeeper` is called (a cluster), where each
    broker keeps a copy refreshed by /config/changes notifications (`refresh`)."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, FILENAME)
        self.users: dict[str, dict[str, ScramCredential]] = {}
        self._zk = None

    def load(self) -> None:
        """Read the file; an invalid one stops the start (RuntimeError), as an invalid
        topic registry does: silently dropping users would lock them out."""
        try:
            with open(self.path, "rb") as f:
                document = json.loads(f.read())
            users = {user: _parse_entries(entries) for user, entries in document["users"].items()}
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"{self.path} is invalid ({type(exc).__name__}); refusing to start") from None
        self.users = {user: entries for user, entries in users.items() if entries}

    async def use_zookeeper(self, zk) -> None:
        """From now on the credentials are /config/users/<user>: read them all."""
        self._zk = zk
        configs = await asyncio.to_thread(zk.entity_configs)
        users = {parts[0][1]: config for entity_path, config in configs.items()
                 if len(parts := config_entity_parts(entity_path)) == 1 and parts[0][0] == "users"}
        self.users = {user: entries for user, config in users.items()
                      if user is not None and (entries := _parse_config(user, config))}

    async def refresh(self, user: str) -> None:
        """Re-read one user after a /config/changes notification named it."""
        entries = _parse_config(user, await asyncio.to_thread(self._zk.entity_config, _entity_path(user)))
        if entries:
            self.users[user] = entries
        else:
            self.users.pop(user, None)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    async def alter(self, deletions: list[tuple[str, int]],
                    upsertions: list[tuple[str, int, int, bytes, bytes]]) -> dict[str, tuple[ErrorCode, str | None]]:
        """Apply a request's deletions (user, mechanism code) and upsertions (user, mechanism
        code, iterations, salt, salted password) with Kafka's checks; the result per user.
        Users with an error are left unchanged."""
        results, changed = self._plan(deletions, upsertions)
        if not changed:
            return results
        if self._zk is None:
            users = {**self.users, **changed}
            users = {user: entries for user, entries in users.items() if entries}
            self._write(users)
            self.users = users
            return results
        for user, entries in changed.items():
            try:
                await asyncio.to_thread(self._zk.change_entity_config, _entity_path(user),
                                        {m: entries[m].to_text() if m in entries else None for m in _HASHES})
            except Exception as exc:  # ZooKeeper unreachable, or a concurrent change
                results[user] = (ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the credentials: {exc}")
                continue
            if entries:
                self.users[user] = entries
            else:
                self.users.pop(user, None)
        return results

    def _plan(self, deletions, upsertions):
        """(result per user, new mechanisms -> credential of each user changed). A user's
        changes apply together, or none of them (the first error is its result)."""
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        pairs = collections.Counter([(user, code) for user, code in deletions]
                                    + [(user, code) for user, code, *_ in upsertions])
        for user, _ in (pair for pair, count in pairs.items() if count > 1):
            results[user] = (ErrorCode.DUPLICATE_RESOURCE,
                             f"user {user!r}: a credential cannot be altered twice in the same request")
        changed: dict[str, dict[str, ScramCredential]] = {}
        changes = [(user, lambda entries, user=user, code=code: _deleted(entries, user, code))
                   for user, code in deletions]
        changes += [(u[0], lambda entries, u=u: _upserted(entries, *u)) for u in upsertions]
        for user, change in changes:
            if results.get(user, (ErrorCode.NONE,))[0] != ErrorCode.NONE:
                continue
            try:
                if not user:
                    raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
                changed[user] = change(changed.get(user, self.users.get(user, {})))
                results[user] = (ErrorCode.NONE, None)
            except CredentialError as exc:
                results[user] = (exc.code, str(exc))
                changed.pop(user, None)
        return results, changed

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        document = {"version": 1, "users": {user: {m: c.to_text() for m, c in entries.items()}
                                            for user, entries in sorted(users.items())}}
        write_atomically(self.path, json.dumps(document, indent=1).encode())
        os.chmod(self.path, 0o600)


def _deleted(entries: dict[str, ScramCredential], user: str, code: int) -> dict[str, ScramCredential]:
    mechanism = _mechanism(code)
    if mechanism not in entries:
        raise CredentialError(ErrorCode.RESOURCE_NOT_FOUND, f"user {user!r} has no {mechanism} credential")
    return {m: c for m, c in entries.items() if m != mechanism}


def _upserted(entries: dict[str, ScramCredential], user: str, code: int, iterations: int, salt: bytes,
              salted_password: bytes) -> dict[str, ScramCredential]:
    mechanism = _mechanism(code)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                              f"iterations {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
    if not salt or not salted_password:
        raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the salt or salted password is empty")
    return {**entries, mechanism: ScramCredential.from_salted_password(
        mechanism, bytes(salt), bytes(salted_password), iterations)}


def _parse_entries(entries: dict[str, str]) -> dict[str, ScramCredential]:
    return {mechanism: ScramCredential.from_text(text) for mechanism, text in entries.items()
            if mechanism in _HASHES}


def _parse_config(user: str, config: dict[str, str]) -> dict[str, ScramCredential]:
    """A /config/users znode's credentials; one that does not parse is left out, logged."""
    try:
        return _parse_entries(config)
    except ValueError as exc:
        log.warning("the SCRAM credentials of user %r in ZooKeeper are invalid (%s): ignored", user, exc)
        return {}


def _entity_path(user: str) -> str:
    return config_entity_path(("users", user))


def _mechanism(code: int) -> str:
    if code not in MECHANISMS:
        raise CredentialError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"mechanism {code} is not SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2)")
    return MECHANISMS[code]
