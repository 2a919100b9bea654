"""SCRAM credentials: per user and mechanism, the salt, stored key, server key and iteration
count (RFC 5802), never the password, as Kafka keeps them.

Text form, Kafka's (ScramCredentialUtils): `salt=<b64>,stored_key=<b64>,server_key=<b64>,
iterations=<n>`. The single node keeps them in `scram-credentials.json` in the data dir
(`{"version": 1, "users": {"alice": {"SCRAM-SHA-256": "<text form>"}}}`), written
atomically; a cluster in ZooKeeper's `/config/users/<user>`.

AlterUserScramCredentials sends a salt and a salted password (the client ran Hi()); the
keys are derived from it here: stored key = H(HMAC(salted password, "Client Key")),
server key = HMAC(salted password, "Server Key"). Kafka's rules for changes: mechanism 1
(SCRAM-SHA-256) or 2 (SCRAM-SHA-512), else UNSUPPORTED_SASL_MECHANISM; iterations within
[4096, 16384] and a non-empty user, salt and salted password, else UNACCEPTABLE_CREDENTIAL;
a user named twice in one request: DUPLICATE_RESOURCE; deleting what does not exist:
RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field

from broker.storage.checkpoint import write_atomically
from wire.error_codes import ErrorCode

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
    """The single node's credentials, in the data dir."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, FILENAME)
        self.users: dict[str, dict[str, ScramCredential]] = {}

    def load(self) -> None:
        """Read the file; an invalid one stops the start (RuntimeError), as an invalid
        topic registry does: silently dropping users would lock them out."""
        try:
            with open(self.path, "rb") as f:
                document = json.loads(f.read())
            users = {user: {mechanism: ScramCredential.from_text(text) for mechanism, text in entries.items()
                            if mechanism in _HASHES}
                     for user, entries in document["users"].items()}
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"{self.path} is invalid ({type(exc).__name__}); refusing to start") from None
        self.users = {user: entries for user, entries in users.items() if entries}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    def alter(self, deletions: list[tuple[str, int]],
              upsertions: list[tuple[str, int, int, bytes, bytes]]) -> dict[str, tuple[ErrorCode, str | None]]:
        """Apply a request's deletions (user, mechanism code) and upsertions (user, mechanism
        code, iterations, salt, salted password) with Kafka's checks; the result per user.
        Users with an error are left unchanged; the others are written in one go."""
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        named = [user for user, *_ in deletions] + [user for user, *_ in upsertions]
        for user in {u for u in named if named.count(u) > 1}:
            results[user] = (ErrorCode.DUPLICATE_RESOURCE, f"user {user!r} is named more than once")
        changed = {user: dict(entries) for user, entries in self.users.items()}
        for user, code in deletions:
            if user in results:
                continue
            try:
                mechanism = _mechanism(code)
                if not user:
                    raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
                if mechanism not in changed.get(user, {}):
                    raise CredentialError(ErrorCode.RESOURCE_NOT_FOUND,
                                          f"user {user!r} has no {mechanism} credential")
                del changed[user][mechanism]
                results[user] = (ErrorCode.NONE, None)
            except CredentialError as exc:
                results[user] = (exc.code, str(exc))
        for user, code, iterations, salt, salted_password in upsertions:
            if user in results:
                continue
            try:
                mechanism = _mechanism(code)
                if not user:
                    raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the user name is empty")
                if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
                    raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL,
                                          f"iterations {iterations} outside [{MIN_ITERATIONS}, {MAX_ITERATIONS}]")
                if not salt or not salted_password:
                    raise CredentialError(ErrorCode.UNACCEPTABLE_CREDENTIAL, "the salt or salted password is empty")
                changed.setdefault(user, {})[mechanism] = ScramCredential.from_salted_password(
                    mechanism, bytes(salt), bytes(salted_password), iterations)
                results[user] = (ErrorCode.NONE, None)
            except CredentialError as exc:
                results[user] = (exc.code, str(exc))
        failed = {user for user, (code, _) in results.items() if code}
        for user in failed:  # an error leaves the user as it was
            if user in self.users:
                changed[user] = dict(self.users[user])
            else:
                changed.pop(user, None)
        changed = {user: entries for user, entries in changed.items() if entries}
        if changed != self.users:
            self._write(changed)
            self.users = changed
        return results

    def _write(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        document = {"version": 1, "users": {user: {m: c.to_text() for m, c in entries.items()}
                                            for user, entries in sorted(users.items())}}
        write_atomically(self.path, json.dumps(document, indent=1).encode())
        os.chmod(self.path, 0o600)


def _mechanism(code: int) -> str:
    if code not in MECHANISMS:
        raise CredentialError(ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                              f"mechanism {code} is not SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2)")
    return MECHANISMS[code]
