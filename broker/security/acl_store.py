"""Where the ACLs live, and how a change reaches the Authorizer of every broker.

- Single node: `acls.json` in the data dir, read at start and written atomically at each
  change; one that cannot be read stops the start (RuntimeError), as dropping ACLs
  silently would open or close access:
  {"version": 1, "acls": [{"resourceType": "Topic", "patternType": "LITERAL",
  "name": "orders", "acls": [<entry>, ...]}, ...]}
- Cluster (ZooKeeper), Kafka's layout (broker.zookeeper.layout): a LITERAL pattern's
  ACLs in /kafka-acl/<ResourceType>/<name>, a PREFIXED one's in
  /kafka-acl-extended/prefixed/<ResourceType>/<prefix>, as {"version":1,"acls":[<entry>,
  ...]}. A change is a write conditional on the znode's version (read again and retried,
  up to 10 times, when another broker wrote first; the znode is deleted with its last
  ACL), in one multi-op with its notification: /kafka-acl-changes/acl_changes_<seq>
  holding "TOPIC:<name>" for a LITERAL pattern, /kafka-acl-extended-changes/
  acl_changes_<seq> holding {"version":1,"resourceType":"TOPIC","name":"<prefix>",
  "patternType":"PREFIXED"} for a PREFIXED one. Every broker watches both paths and reads
  the named pattern's znode again, so a change is in force everywhere within
  ZooKeeper's notification delay; notifications older than 15 minutes are purged, as
  Kafka purges them. At start: the ACL paths are created, the watches set, then every
  ACL read (a znode that does not parse stops the start; later, a change that does not
  parse leaves the pattern's ACLs as they were, with a warning). Resource types this
  side does not know are skipped with a warning, as Kafka skips them.
An entry is Kafka's AclEntry JSON: {"principal": "User:alice", "permissionType": "Allow",
"operation": "Read", "host": "*"}.

CreateAcls adds each binding to its pattern's set (adding one twice changes nothing);
DeleteAcls removes from every pattern a filter matches (those the Authorizer holds, and
those a filter names outright, which another broker may have just written) the entries
it matches. Each deleted binding is reported under the first filter that matched it, as
AclAuthorizer reports it. A pattern whose write fails gives its error to every binding
of it (UNKNOWN_SERVER_ERROR, as Kafka's wrapped exceptions).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Callable, Iterable

from kazoo.exceptions import KazooException

from wire.acl_types import Operation, PatternType, Permission, ResourceType
from wire.error_codes import ErrorCode

from broker.zookeeper.layout import ACL_PATHS, KAFKA_ACL, KAFKA_ACL_CHANGES, KAFKA_ACL_EXTENDED_CHANGES, PREFIXED_ACL
from broker.zookeeper.store import StaleVersion
from broker.errors import BrokerError
from broker.security.acls import (AccessControlEntry, AclBinding, AclBindingFilter, Authorizer, ResourcePattern,
                                  is_principal)
from broker.storage.checkpoint import write_atomically

log = logging.getLogger("sluice.acls")

FILENAME = "acls.json"
_UPDATE_ATTEMPTS = 10  # Kafka's maxUpdateRetries
_CHANGE_EXPIRY_MS = 15 * 60 * 1000  # Kafka's: ACL change notifications are purged after it
_ROOTS = {PatternType.LITERAL: KAFKA_ACL, PatternType.PREFIXED: PREFIXED_ACL}
_CHANGES = {PatternType.LITERAL: KAFKA_ACL_CHANGES, PatternType.PREFIXED: KAFKA_ACL_EXTENDED_CHANGES}

Entries = frozenset[AccessControlEntry]
Change = Callable[[Entries], Entries]


# -- JSON -------------------------------------------------------------------------------------

def _dump(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def entry_json(entry: AccessControlEntry) -> dict:
    return {"principal": entry.principal, "permissionType": entry.permission.kafka_name,
            "operation": entry.operation.kafka_name, "host": entry.host}


def entry_from_json(obj) -> AccessControlEntry:
    """ValueError for anything but a usable entry."""
    if not isinstance(obj, dict) or not all(isinstance(obj.get(k), str)
                                            for k in ("principal", "permissionType", "operation", "host")):
        raise ValueError(f"not an ACL entry: {obj!r}")
    entry = AccessControlEntry(obj["principal"], obj["host"], Operation.parse(obj["operation"]),
                               Permission.parse(obj["permissionType"]))
    if (not is_principal(entry.principal) or entry.operation in (Operation.UNKNOWN, Operation.ANY)
            or entry.permission not in (Permission.ALLOW, Permission.DENY)):
        raise ValueError(f"not an ACL entry: {obj!r}")
    return entry


def acls_json(entries: Iterable[AccessControlEntry]) -> bytes:
    """A znode's data: {"version":1,"acls":[...]}."""
    return _dump({"version": 1, "acls": [entry_json(e) for e in sorted(entries)]})


def acls_from_json(data: bytes) -> Entries:
    """ValueError for anything but Kafka's version 1 shape."""
    document = json.loads(bytes(data).decode("utf-8"))
    if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("acls"), list):
        raise ValueError("expected {\"version\": 1, \"acls\": [...]}")
    return frozenset(entry_from_json(obj) for obj in document["acls"])


def znode_path(pattern: ResourcePattern) -> str:
    return f"{_ROOTS[pattern.pattern_type]}/{pattern.resource_type.kafka_name}/{pattern.name}"


def change_note(pattern: ResourcePattern) -> bytes:
    """What a change notification of the pattern holds."""
    if pattern.pattern_type == PatternType.LITERAL:
        return f"{pattern.resource_type.name}:{pattern.name}".encode("utf-8")
    return _dump({"version": 1, "resourceType": pattern.resource_type.name, "name": pattern.name,
                  "patternType": pattern.pattern_type.name})


def pattern_of_note(pattern_type: PatternType, data: bytes) -> ResourcePattern:
    """The pattern a change notification names; ValueError for anything else."""
    text = bytes(data).decode("utf-8")
    if pattern_type == PatternType.LITERAL:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"expected ResourceType:name, got {text!r}")
        return ResourcePattern(_concrete(ResourceType.parse(kind)), name, PatternType.LITERAL)
    event = json.loads(text)
    if not isinstance(event, dict) or not all(isinstance(event.get(k), str)
                                              for k in ("resourceType", "name", "patternType")):
        raise ValueError(f"not an ACL change event: {text!r}")
    found = PatternType.parse(event["patternType"])
    if found not in _ROOTS:
        raise ValueError(f"pattern type {event['patternType']!r} is not LITERAL or PREFIXED")
    return ResourcePattern(_concrete(ResourceType.parse(event["resourceType"])), event["name"], found)


def _concrete(resource_type: ResourceType) -> ResourceType:
    if resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise ValueError(f"{resource_type.name} is not a resource type ACLs are kept for")
    return resource_type


# -- changes, whatever the storage --------------------------------------------------------------

class AclStore:
    """CreateAcls and DeleteAcls on top of `_apply`, which a storage implements: make each
    pattern's ACLs what its change makes of them, then tell the Authorizer."""

    def __init__(self, authorizer: Authorizer):
        self.authorizer = authorizer

    async def start(self) -> None:
        """Load the ACLs into the Authorizer, before the broker serves anything."""
        raise NotImplementedError

    def close(self) -> None:
        """The broker stops: no more changes are applied."""

    async def _apply(self, changes: dict[ResourcePattern, Change]) -> dict[ResourcePattern, tuple | BrokerError]:
        """Per pattern: (ACLs before, ACLs after), or the error that left them unchanged."""
        raise NotImplementedError

    async def create(self, bindings: list[AclBinding]) -> list[BrokerError | None]:
        """Per binding (checked already): None, or the error that kept it out."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for pattern, entry in bindings:
            by_pattern.setdefault(pattern, set()).add(entry)
        outcomes = await self._apply({pattern: (lambda current, new=frozenset(new): current | new)
                                      for pattern, new in by_pattern.items()})
        return [outcomes[pattern] if isinstance(outcomes[pattern], BrokerError) else None
                for pattern, _ in bindings]

    async def delete(self, filters: list[AclBindingFilter]) -> list[list[tuple[AclBinding, BrokerError | None]]]:
        """Per filter (usable ones): the bindings it deleted, each with None or the error
        that kept it."""
        candidates = set(self.authorizer.patterns()).union(*(f.patterns_named() for f in filters))
        matching = {}
        for pattern in sorted(candidates):
            indexes = [i for i, f in enumerate(filters) if f.matches_pattern(pattern)]
            if indexes:
                matching[pattern] = indexes

        def first_match(entry, indexes):
            return next((i for i in indexes if filters[i].matches_entry(entry)), None)

        def remove(current, indexes):
            return frozenset(e for e in current if first_match(e, indexes) is None)

        outcomes = await self._apply({pattern: (lambda current, indexes=indexes: remove(current, indexes))
                                      for pattern, indexes in matching.items()})
        results: list[list] = [[] for _ in filters]
        for pattern, indexes in matching.items():
            outcome = outcomes[pattern]
            if isinstance(outcome, BrokerError):
                current = self.authorizer.acls_of(pattern)
                removed, error = current - remove(current, indexes), outcome
            else:
                removed, error = outcome[0] - outcome[1], None
            for entry in sorted(removed):
                results[first_match(entry, indexes)].append((AclBinding(pattern, entry), error))
        return results


class LocalAcls(AclStore):
    """The single node's ACLs, in the data dir."""

    def __init__(self, data_dir: str, authorizer: Authorizer):
        super().__init__(authorizer)
        self.path = os.path.join(data_dir, FILENAME)

    async def start(self) -> None:
        try:
            with open(self.path, "rb") as f:
                document = json.loads(f.read())
            if not isinstance(document, dict) or document.get("version") != 1:
                raise ValueError("not version 1")
            loaded = {}
            for item in document["acls"]:
                pattern = ResourcePattern(_concrete(ResourceType.parse(item["resourceType"])), item["name"],
                                          PatternType.parse(item["patternType"]))
                if pattern.pattern_type not in _ROOTS or not isinstance(pattern.name, str):
                    raise ValueError(f"invalid pattern {item!r}")
                loaded[pattern] = frozenset(entry_from_json(obj) for obj in item["acls"])
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RuntimeError(f"{self.path} is invalid ({type(exc).__name__}: {exc}); refusing to start") from None
        for pattern, entries in loaded.items():
            self.authorizer.set_acls(pattern, entries)

    async def _apply(self, changes):
        outcomes, changed = {}, {}
        for pattern, change in changes.items():
            before = self.authorizer.acls_of(pattern)
            outcomes[pattern] = before, change(before)
            if outcomes[pattern][1] != before:
                changed[pattern] = outcomes[pattern][1]
        if not changed:
            return outcomes
        everything = {pattern: self.authorizer.acls_of(pattern) for pattern in self.authorizer.patterns()}
        everything.update(changed)
        document = {"version": 1, "acls": [
            {"resourceType": p.resource_type.kafka_name, "patternType": p.pattern_type.name, "name": p.name,
             "acls": [entry_json(e) for e in sorted(entries)]}
            for p, entries in sorted(everything.items()) if entries]}
        try:
            write_atomically(self.path, json.dumps(document, indent=1).encode())
        except OSError as exc:
            error = BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot write {FILENAME}: {exc.strerror}")
            return {pattern: error if pattern in changed else outcome for pattern, outcome in outcomes.items()}
        for pattern, entries in changed.items():
            self.authorizer.set_acls(pattern, entries)
        return outcomes


class ZkAcls(AclStore):
    """A cluster's ACLs, in ZooKeeper (broker.zookeeper.store's session); every call to
    ZooKeeper runs off the event loop."""

    def __init__(self, zk, authorizer: Authorizer, clock):
        super().__init__(authorizer)
        self._zk = zk
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._seen = {pattern_type: -1 for pattern_type in _CHANGES}  # last notification applied
        self._locks = {pattern_type: asyncio.Lock() for pattern_type in _CHANGES}
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._watch)
        for pattern, entries in await asyncio.to_thread(self._read_all):
            self.authorizer.set_acls(pattern, entries)

    def close(self) -> None:
        """Stop applying notifications (the session closes after)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()

    def _watch(self) -> None:
        """kazoo's calls: the ACL paths, the notifications so far (not replayed: every ACL
        is read next), the watches."""
        for path in ACL_PATHS:
            self._zk.client.ensure_path(path)
        for pattern_type, changes in _CHANGES.items():
            self._seen[pattern_type] = max((seq for seq, _, _ in self._zk.acl_changes(changes, -1)), default=-1)
            self._zk.client.ChildrenWatch(changes, lambda _, pattern_type=pattern_type: self._noticed(pattern_type))

    def _read_all(self) -> list[tuple[ResourcePattern, Entries]]:
        found = []
        for pattern_type, root in _ROOTS.items():
            for type_name in self._zk.children(root):
                try:
                    resource_type = _concrete(ResourceType.parse(type_name))
                except ValueError:
                    log.warning("ignoring ACLs of unknown resource type %r in %s", type_name, root)
                    continue
                for name in self._zk.children(f"{root}/{type_name}"):
                    path = f"{root}/{type_name}/{name}"
                    data = self._zk.data(path)
                    try:
                        found.append((ResourcePattern(resource_type, name, pattern_type),
                                      acls_from_json(data[0]) if data else frozenset()))
                    except ValueError as exc:
                        raise RuntimeError(f"{path} holds invalid ACLs ({exc}); refusing to start") from None
        return found

    def _read(self, pattern: ResourcePattern) -> Entries:
        found = self._zk.data(znode_path(pattern))
        return acls_from_json(found[0]) if found else frozenset()

    # -- notifications --------------------------------------------------------------------
    def _noticed(self, pattern_type: PatternType):
        """kazoo's thread: a changes path has new children. False ends the watch."""
        if self._closed:
            return False
        self._loop.call_soon_threadsafe(self._spawn, pattern_type)
        return True

    def _spawn(self, pattern_type: PatternType) -> None:
        if self._closed:
            return
        task = self._loop.create_task(self._apply_notifications(pattern_type))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _apply_notifications(self, pattern_type: PatternType) -> None:
        """Read again the patterns the notifications since the last applied name."""
        changes_path = _CHANGES[pattern_type]
        async with self._locks[pattern_type]:
            try:
                changes = await asyncio.to_thread(self._zk.acl_changes, changes_path, self._seen[pattern_type])
                for sequence, data, created_ms in changes:
                    try:
                        pattern = pattern_of_note(pattern_type, data)
                        self.authorizer.set_acls(pattern, await asyncio.to_thread(self._read, pattern))
                    except ValueError as exc:
                        log.warning("ACL change %s/%010d not applied: %s", changes_path, sequence, exc)
                    self._seen[pattern_type] = sequence
                    if self._clock.wall_ms() - created_ms > _CHANGE_EXPIRY_MS:
                        await asyncio.to_thread(self._zk.delete_acl_change, changes_path, sequence)
            except KazooException as exc:
                log.warning("cannot read ACL changes from ZooKeeper: %s", exc)

    # -- writes -----------------------------------------------------------------------------
    async def _apply(self, changes):
        outcomes = {}
        for pattern, change in changes.items():
            try:
                outcomes[pattern] = await self._update(pattern, change)
            except BrokerError as exc:
                outcomes[pattern] = exc
        return outcomes

    async def _update(self, pattern: ResourcePattern, change: Change) -> tuple[Entries, Entries]:
        path = znode_path(pattern)
        for _ in range(_UPDATE_ATTEMPTS):
            try:
                found = await asyncio.to_thread(self._zk.data, path)
                before = acls_from_json(found[0]) if found else frozenset()
                after = change(before)
                if after != before:
                    await asyncio.to_thread(self._zk.write_acls, path, acls_json(after) if after else None,
                                            found[1] if found else None, _CHANGES[pattern.pattern_type],
                                            change_note(pattern))
            except StaleVersion:
                continue
            except ValueError as exc:
                raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{path} holds invalid ACLs: {exc}") from None
            except KazooException as exc:
                raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                  f"cannot write {path} in ZooKeeper: {type(exc).__name__}") from None
            self.authorizer.set_acls(pattern, after)
            return before, after
        raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR,
                          f"{path} changed {_UPDATE_ATTEMPTS} times while being written; try again")
