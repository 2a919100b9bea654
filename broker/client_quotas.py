"""Client quotas (KIP-13, KIP-55): what each user, client id and (user, client id) may
use, as Kafka keeps, validates, describes and resolves them; producer_byte_rate and
consumer_byte_rate are enforced by a ClientQuotaManager each (broker.handlers.produce
and fetch throttle with it), request_percentage by one the broker records each request's
handling time in, controller_mutation_rate by a ControllerMutationQuotaManager
(broker.handlers.topics_admin).

An entity is a set of (entity type, name) pairs (wire.quota_types): `user`, `client-id`,
or both; a name of None is the type's `<default>`. Its quotas, by Kafka's keys: producer_byte_rate and
consumer_byte_rate (bytes a second, whole numbers), request_percentage and
controller_mutation_rate (numbers); each greater than 0. AlterClientQuotas' checks are
those of Kafka's ClientQuotaControlManager (INVALID_REQUEST with its messages); Kafka's
`ip` entity (connection_creation_rate) is refused, as Sluice has no connection-rate
quota. DescribeClientQuotas filters as Kafka's ClientQuotasImage: per entity type an
exact name, the default, or any name given, and with `strict` nothing but those types.

The single node keeps them in `client-quotas.json` in the data dir (`{"version": 1,
"entities": [{"entity": {"user": "alice", "client-id": null}, "quotas":
{"producer_byte_rate": 1048576}}]}`), written atomically. A cluster keeps them where
Kafka's ZooKeeper mode does (once `use_zookeeper` is called): /config/users/<user>,
/config/users/<user>/clients/<client-id>, /config/clients/<client-id> (`<default>` for
the default, names sanitized as Kafka's), `{"version":1,"config":{"producer_byte_rate":
"1048576","request_percentage":"50.0"}}`, each change noted under /config/changes so that
every broker re-reads that entity (`refresh`).

Resolution, Kafka's DefaultQuotaCallback (per quota key): the first of
  /config/users/<user>/clients/<client-id>, /config/users/<user>/clients/<default>,
  /config/users/<user>, /config/users/<default>/clients/<client-id>,
  /config/users/<default>/clients/<default>, /config/users/<default>,
  /config/clients/<client-id>, /config/clients/<default>
that sets the key; none: unlimited. The match also says who shares the measured rate
(Kafka's quota metric tags): a (user, client-id) row each (user, client id), a user row
every client id of the user, a client-id row every user of the client id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os

from typing import Callable

from broker.clock import SYSTEM_CLOCK, Clock
from broker.zookeeper.layout import config_entity_parts, config_entity_path
from broker.errors import BrokerError
from broker.quota import Quota, TokenBucket
from broker.storage.checkpoint import write_atomically
from wire.error_codes import ErrorCode
from wire.quota_types import CLIENT_ID, IP, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, USER, precedence

FILENAME = "client-quotas.json"
PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE = "producer_byte_rate", "consumer_byte_rate"
REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE = "request_percentage", "controller_mutation_rate"
# What request_percentage can reach: Kafka's 100 per request handler thread, and the broker
# handles requests on one, its event loop. Checked when set; one already stored stays.
MAX_REQUEST_PERCENTAGE = 100.0
# Kafka's quota keys and whether each is a whole number (a LONG, not a DOUBLE, in QuotaConfig)
KEYS = {PRODUCER_BYTE_RATE: True, CONSUMER_BYTE_RATE: True, REQUEST_PERCENTAGE: False,
        CONTROLLER_MUTATION_RATE: False}
_LONG_MAX = float(2 ** 63 - 1)
_CONFIG_KINDS = {USER: "users", CLIENT_ID: "clients"}  # /config/<kind>/<name>, the user's first

log = logging.getLogger("sluice.quotas")

Entity = frozenset  # of (entity type, name or None for the default)


def _invalid(message: str) -> BrokerError:
    return BrokerError(ErrorCode.INVALID_REQUEST, message)


def throttle_ms(seconds: float) -> int:
    """A throttle time as responses carry it (throttle_time_ms, an int32), rounded as Kafka."""
    return min(round(seconds * 1000), 2 ** 31 - 1)


class ClientQuotaManager:
    """One quota key's enforcement, as Kafka's ClientQuotaManager: the bytes of each
    (user, client id) are recorded in the rate its quota's entity shares (a Quota
    measuring as Kafka's Rate, over `quota.window.num` windows of
    `quota.window.size.seconds`), and past the quota the client is throttled for
    Kafka's throttle time. Clients without a quota are not measured. Each entity's rate
    and the throttle times its clients were given (their average over the same windows,
    Kafka's throttle-time) are its metrics (`measured`)."""

    _PRUNE_AT = 1024  # rates kept before idle ones are dropped

    def __init__(self, quotas: ClientQuotas, key: str, clock: Clock, samples: int, window_s: float,
                 max_throttle_s: float = math.inf):
        """`max_throttle_s`: the longest throttle time given (Kafka bounds request_percentage's
        to one window)."""
        self._max_throttle_s = max_throttle_s
        self._quotas = quotas
        self._key = key
        self._clock = clock
        self._samples = samples
        self._window_s = window_s
        self._rates: dict[tuple[str, str], Quota] = {}
        self._bounds: dict[tuple[str, str], float] = {}  # each rate's quota, as last resolved
        self._throttles: dict[tuple[str, str], Quota] = {}  # the throttle times given, in ms
        self._prune_at = self._PRUNE_AT

    def record(self, user: str, client_id: str, amount: float) -> float:
        """Record `amount` for the client: the seconds it is throttled for (0: none)."""
        shared = self._entity(user, client_id)
        if shared is None:
            return 0.0
        rate = self._rates[shared]
        rate.record(amount)
        throttle = min(rate.throttle_time(), self._max_throttle_s)
        if throttle > 0:
            self.throttled(shared, throttle)
        return throttle

    def throttled(self, shared: tuple[str, str], seconds: float) -> None:
        """Count a throttle time given to a client of the entity `shared` (Kafka records
        only those above 0)."""
        self._throttles[shared].record(seconds * 1000)

    def unrecord(self, user: str, client_id: str, amount: float) -> None:
        """Take back what `record` counted (a throttled fetch answers no records)."""
        shared = self._entity(user, client_id)
        if shared is not None:
            self._rates[shared].record(-amount)

    def most_at_once(self, user: str, client_id: str) -> float | None:
        """What the client may take at once without being throttled, from an idle rate
        (Kafka's getMaxValueInQuotaWindow: the quota over all windows but one); None:
        no quota."""
        _, bound = self._quotas.resolve(user, client_id, self._key)
        return None if bound is None else bound * (self._samples - 1) * self._window_s

    def measured(self) -> list[tuple[str, str, float, float]]:
        """(user, client id, the measure, the average throttle time in ms or NaN) of each
        quota entity measured now; the measure is the rate, or for a token bucket what
        it holds. The entity's user or client id is "" where it is not part of it, as
        Kafka's metric tags are."""
        return [(user, client_id, rate.tokens() if isinstance(rate, TokenBucket) else rate.rate(),
                 self._throttles[(user, client_id)].average())
                for (user, client_id), rate in list(self._rates.items())]

    def _entity(self, user: str, client_id: str) -> tuple[str, str] | None:
        """The (user, client id) whose rate the client's counts go into, its rate made
        if new; None: no quota."""
        shared, bound = self._quotas.resolve(user, client_id, self._key)
        if bound is None:
            return None
        self._bounds[shared] = bound
        if shared not in self._rates:
            if len(self._rates) >= self._prune_at:
                for idle in [k for k, r in self._rates.items() if r.idle() and self._throttles[k].idle()]:
                    del self._rates[idle], self._bounds[idle], self._throttles[idle]
                self._prune_at = max(self._PRUNE_AT, 2 * len(self._rates))
            self._rates[shared] = self._new_rate(lambda: self._bounds[shared])
            self._throttles[shared] = Quota(self._clock, lambda: math.inf, self._samples, self._window_s)
        return shared

    def _new_rate(self, bound: Callable[[], float]):
        return Quota(self._clock, bound, self._samples, self._window_s, full_windows=True)


class ControllerMutationQuota:
    """One CreateTopics, CreatePartitions or DeleteTopics request's partitions created or
    deleted, as Kafka's Strict- and PermissiveControllerMutationQuota (KIP-599). Strict: a
    mutation is refused (THROTTLING_QUOTA_EXCEEDED, Kafka's message) while the client's
    bucket is below 0, and admitted otherwise, even if it takes the bucket below 0;
    permissive: every mutation is admitted. Either way `throttle_time` is then what the
    answer carries and the connection is muted for: strict, since a refusal; permissive,
    since a mutation took the bucket below 0 (less the time gone since, as Kafka's)."""

    def __init__(self, bucket: TokenBucket | None, strict: bool, clock: Clock,
                 on_throttle: Callable[[float], None] = lambda seconds: None):
        """`on_throttle(seconds)`: told each throttle time given (the metrics')."""
        self._bucket = bucket  # None: no quota
        self._strict = strict
        self._clock = clock
        self._on_throttle = on_throttle
        self._throttle = self._throttled_at = 0.0

    def record(self, partitions: int) -> None:
        """Count the partitions about to be created or deleted: BrokerError if refused."""
        if self._bucket is None:
            return
        if self._strict:
            throttle = self._bucket.throttle_time()
            if throttle > 0:
                self._throttled(throttle)
                raise BrokerError(ErrorCode.THROTTLING_QUOTA_EXCEEDED, "The throttling quota has been exceeded.")
            self._bucket.record(partitions)
        else:
            self._bucket.record(partitions)
            throttle = self._bucket.throttle_time()
            if throttle > 0:
                self._throttled(throttle)

    def _throttled(self, seconds: float) -> None:
        self._throttle, self._throttled_at = seconds, self._clock.monotonic()
        self._on_throttle(seconds)

    def throttle_time(self) -> float:
        return max(0.0, self._throttle - (self._clock.monotonic() - self._throttled_at))


UNBOUNDED = ControllerMutationQuota(None, False, SYSTEM_CLOCK)  # what the broker's own creations record in


class ControllerMutationQuotaManager(ClientQuotaManager):
    """controller_mutation_rate's enforcement: each (user, client id)'s quota entity shares
    one TokenBucket, as Kafka's ControllerMutationQuotaManager."""

    def __init__(self, quotas: ClientQuotas, clock: Clock, samples: int, window_s: float):
        super().__init__(quotas, CONTROLLER_MUTATION_RATE, clock, samples, window_s)

    def _new_rate(self, bound: Callable[[], float]):
        return TokenBucket(self._clock, bound, self._samples, self._window_s)

    def for_request(self, user: str, client_id: str, strict: bool) -> ControllerMutationQuota:
        """The quota a request records its mutations in: strict for the versions that say so."""
        shared = self._entity(user, client_id)
        if shared is None:
            return ControllerMutationQuota(None, strict, self._clock)
        return ControllerMutationQuota(self._rates[shared], strict, self._clock,
                                       lambda seconds: self.throttled(shared, seconds))


class ClientQuotas:
    _RESOLVED_MAX = 10_000  # resolutions remembered (client ids are the clients' choice)

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, FILENAME)
        self.entities: dict[Entity, dict[str, float]] = {}
        self._zk = None
        # (user, client id, key) -> resolve's answer, as long as the entities stay the same
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float | None]] = {}

    def load(self) -> None:
        """Read the file; an invalid one stops the start (RuntimeError), as an invalid
        credentials file does: dropping quotas silently would lift them."""
        try:
            with open(self.path, "rb") as f:
                document = json.loads(f.read())
            entities = {}
            for item in document["entities"]:
                entity = frozenset(item["entity"].items())
                quotas = {key: float(value) for key, value in item["quotas"].items()}
                for key, value in quotas.items():
                    _check_value(key, value)
                _check_entity(entity)
                entities[entity] = quotas
        except FileNotFoundError:
            return
        except (ValueError, KeyError, TypeError, AttributeError, BrokerError) as exc:
            raise RuntimeError(f"{self.path} is invalid ({type(exc).__name__}: {exc}); refusing to start") from None
        self._set(entities)

    async def use_zookeeper(self, zk) -> None:
        """From now on the quotas are in ZooKeeper's /config/users and /config/clients:
        read them all."""
        self._zk = zk
        entities = {}
        for entity_path, config in (await asyncio.to_thread(zk.entity_configs)).items():
            entity = _entity_of(entity_path)
            if entity is not None and (quotas := _parsed(entity_path, config)):
                entities[entity] = quotas
        self._set(entities)

    async def refresh(self, entity_path: str) -> None:
        """Re-read one entity after a /config/changes notification named it."""
        entity = _entity_of(entity_path)
        if entity is None:
            return
        quotas = _parsed(entity_path, await asyncio.to_thread(self._zk.entity_config, entity_path))
        entities = dict(self.entities)
        if quotas:
            entities[entity] = quotas
        else:
            entities.pop(entity, None)
        self._set(entities)

    def _set(self, entities: dict[Entity, dict[str, float]]) -> None:
        self.entities = entities
        self._resolved.clear()

    def resolve(self, user: str, client_id: str, key: str) -> tuple[tuple[str, str], float | None]:
        """The (user, client id) whose rate counts for this connection's `key`, and the
        quota (None: unlimited), by Kafka's precedence."""
        resolved = self._resolved.get((user, client_id, key))
        if resolved is None:
            resolved = ("", client_id), None
            for entity, shared in precedence(user, client_id) if self.entities else ():
                value = self.entities.get(entity, {}).get(key)
                if value is not None:
                    resolved = shared, value
                    break
            if len(self._resolved) >= self._RESOLVED_MAX:
                self._resolved.clear()
            self._resolved[(user, client_id, key)] = resolved
        return resolved

    def describe(self, components: list[tuple[str, int, str | None]], strict: bool) -> list[tuple[Entity, dict]]:
        """The entities matching the filter (entity type, match type, match) and their
        quotas; BrokerError for a filter Kafka refuses."""
        exact: dict[str, str | None] = {}
        specified: set[str] = set()
        for entity_type, match_type, match in components:
            if not entity_type:
                raise _invalid("Invalid empty entity type.")
            if entity_type in exact or entity_type in specified:
                raise _invalid(f"Entity type {entity_type} cannot appear more than once in the filter.")
            if entity_type not in (USER, CLIENT_ID, IP):
                raise BrokerError(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {entity_type}")
            if match_type == MATCH_EXACT:
                if match is None:
                    raise _invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
                exact[entity_type] = match
            elif match_type == MATCH_DEFAULT:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
                exact[entity_type] = None
            elif match_type == MATCH_SPECIFIED:
                if match is not None:
                    raise _invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
                specified.add(entity_type)
            else:
                raise _invalid(f"Unknown match type {match_type}")
        if IP in exact or IP in specified:
            if {USER, CLIENT_ID} & (set(exact) | specified):
                raise _invalid("Invalid entity filter component combination. IP filter component should "
                               "not be used with user or clientId filter component.")
        found = []
        for entity, quotas in self.entities.items():
            names = dict(entity)
            if strict and len(names) != len(exact) + len(specified):
                continue
            if all(t in names and names[t] == n for t, n in exact.items()) and specified <= names.keys():
                found.append((entity, dict(quotas)))
        return found

    async def alter(self, entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float, bool]]]],
                    validate_only: bool) -> list[tuple[ErrorCode, str | None]]:
        """Apply each entry (entity pairs, ops (key, value, remove)) that passes Kafka's
        checks, in one write of the file (single node) or one of each entity's znode; the
        result of each entry, in order. Nothing is stored with `validate_only`, or for an
        entry that fails."""
        entities = dict(self.entities)
        results, altered = [], []
        for pairs, ops in entries:
            try:
                entity = _validated_entity(pairs)
                quotas = dict(entities.get(entity, {}))
                for key, value, remove in ops:
                    if remove:
                        quotas.pop(key, None)
                        continue
                    if key not in KEYS:
                        raise _invalid(f"Invalid configuration key {key}")
                    _check_value(key, value)
                    if key == REQUEST_PERCENTAGE and value > MAX_REQUEST_PERCENTAGE:
                        raise _invalid(f"Quota {key} must be at most {MAX_REQUEST_PERCENTAGE:g}: 100 for each "
                                       f"of the broker's request handler threads, and it has one (its event loop)")
                    quotas[key] = value
            except BrokerError as exc:
                results.append((exc.code, str(exc)))
                continue
            if quotas:
                entities[entity] = quotas
            else:
                entities.pop(entity, None)
            altered.append((len(results), entity))
            results.append((ErrorCode.NONE, None))
        if validate_only or entities == self.entities:
            return results
        if self._zk is None:
            self._write(entities)
            self._set(entities)
            return results
        for index, entity in altered:
            old, new = self.entities.get(entity, {}), entities.get(entity, {})
            changes = {key: _stored_text(key, new[key]) if key in new else None for key in {*old, *new}}
            try:
                await asyncio.to_thread(self._zk.change_entity_config, _entity_path(entity), changes)
            except Exception as exc:  # ZooKeeper unreachable, or a concurrent change
                results[index] = (ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the quotas: {exc}")
                continue
            self._set({**{e: q for e, q in self.entities.items() if e != entity}, **({entity: new} if new else {})})
        return results

    def _write(self, entities: dict[Entity, dict[str, float]]) -> None:
        items = sorted(entities.items(), key=lambda item: sorted((t, n or "") for t, n in item[0]))
        document = {"version": 1, "entities": [
            {"entity": dict(sorted(entity)), "quotas": {k: _stored(k, v) for k, v in sorted(quotas.items())}}
            for entity, quotas in items]}
        write_atomically(self.path, json.dumps(document, indent=1).encode())


def _stored(key: str, value: float):
    return int(value) if KEYS[key] else value


def _stored_text(key: str, value: float) -> str:
    """A quota as Kafka's ZkAdminManager writes it in ZooKeeper: a LONG's digits, a DOUBLE's
    decimal ("50.0")."""
    return str(_stored(key, value))


def _entity_path(entity: Entity) -> str:
    names = dict(entity)
    return config_entity_path(*((kind, names[t]) for t, kind in _CONFIG_KINDS.items() if t in names))


def _entity_of(entity_path: str) -> Entity | None:
    """The client quota entity of a /config entity path; None for any other (a topic's)."""
    try:
        parts = config_entity_parts(entity_path)
    except ValueError:
        return None
    kinds = {kind: t for t, kind in _CONFIG_KINDS.items()}
    if [kind for kind, _ in parts] not in (["users"], ["clients"], ["users", "clients"]):
        return None
    return frozenset((kinds[kind], name) for kind, name in parts)


def _parsed(entity_path: str, config: dict[str, str]) -> dict[str, float]:
    """The quotas of an entity's config (a user's SCRAM credentials left aside); one that
    is not a valid quota is left out, logged."""
    quotas = {}
    for key, text in config.items():
        if key in KEYS:
            try:
                _check_value(key, float(text))
                quotas[key] = float(text)
            except (ValueError, BrokerError) as exc:
                log.warning("/config/%s: leaving out %s=%r (%s)", entity_path, key, text, exc)
    return quotas


def _validated_entity(pairs: list[tuple[str, str | None]]) -> Entity:
    """Kafka's ClientQuotaControlManager.validateEntity and its combinations."""
    if not pairs:
        raise _invalid("Invalid empty client quota entity")
    names: dict[str, str | None] = {}
    for entity_type, name in pairs:
        if entity_type in names:
            raise _invalid(f"Invalid client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise _invalid(f"Unhandled client quota entity type: {entity_type}")
        if name is not None and not name:
            raise _invalid(f"Empty {entity_type} not supported")
        names[entity_type] = name
    entity = frozenset(names.items())
    _check_entity(entity)
    return entity


def _check_entity(entity: Entity) -> None:
    types = {t for t, _ in entity}
    if IP in types:
        if types != {IP}:
            raise _invalid("Invalid quota entity combination, IP entity should not be combined with "
                           "User or ClientId")
        raise _invalid("ip quotas (connection_creation_rate) are not supported by Sluice")
    if not types or not types <= {USER, CLIENT_ID}:
        raise _invalid("Invalid client quota entity")


def _check_value(key: str, value: float) -> None:
    """Kafka's ClientQuotaControlManager.validateQuotaKeyValue."""
    if key not in KEYS:
        raise _invalid(f"Invalid configuration key {key}")
    if not value > 0.0:  # NaN too
        raise _invalid(f"Quota {key} must be greater than 0")
    if KEYS[key]:
        if value > _LONG_MAX:
            raise _invalid(f"Proposed value for {key} is too large for a LONG.")
        if abs(value % 1.0) > 1e-6:
            raise _invalid(f"{key} cannot be a fractional value.")
