"""SASL on SASL_PLAINTEXT and SASL_SSL listeners, as Kafka's SaslServerAuthenticator does it.

Connection rules (enforced by Broker.handle_frame and broker/handlers/sasl.py):
- Until it has authenticated, a connection may send only ApiVersions, SaslHandshake and
  SaslAuthenticate; anything else closes it. Its frames are bounded by
  `sasl.server.max.receive.size` (broker/server.py), and it closes when it has not
  authenticated within a bound (TLS handshake included).
- SaslHandshake names a mechanism: an enabled one is answered NONE with the enabled list,
  another UNSUPPORTED_SASL_MECHANISM with the list. After a v1 handshake the tokens travel
  in SaslAuthenticate (v0-2); after a v0 handshake, as raw size-prefixed frames, each
  answered by a raw size-prefixed token (clients from before Kafka 1.0).
- A failed authentication is answered SASL_AUTHENTICATION_FAILED with a message that
  neither names the password nor says whether the user exists, then the connection closes
  (in raw mode it just closes). Any SASL request on a listener without SASL is
  ILLEGAL_SASL_STATE.
- Re-authentication (KIP-368), as Kafka's: with `connections.max.reauth.ms` > 0 (per
  listener and mechanism: `listener.name.<listener>.<mechanism>.connections.max.reauth.ms`)
  a session lasts that long from its authentication, and SaslAuthenticate v1+ tells the
  client so (session_lifetime_ms). A client that authenticated with SaslAuthenticate v1+
  may authenticate again on the same connection, at any time: a SaslHandshake naming the
  same mechanism, then SaslAuthenticate rounds; the principal must not change, and a
  failure closes the connection as a first one does. Meanwhile it sends nothing else. A
  second handshake from a v0 client is ILLEGAL_SASL_STATE. Once its session has expired,
  a connection's next request other than that handshake closes it (a password changed
  since stops working there within the lifetime, as in Kafka).

Mechanisms (`sasl.enabled.mechanisms`, per listener; Kafka's default GSSAPI is refused):
- PLAIN (RFC 4616): one token, authzid NUL authcid NUL password. Users are the
  `user_<name>="<password>"` options of the listener's PlainLoginModule JAAS entry
  (`listener.name.<listener>.plain.sasl.jaas.config`, else `sasl.jaas.config`), compared in
  constant time. An authzid other than empty or the authcid is refused, as in Kafka.
- SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, with the scramp library): two rounds against
  the stored credentials (broker.security.scram_credentials). Kafka's `tokenauth`
  extension (delegation tokens) is refused.
The principal is `User:<name>`.
"""

from __future__ import annotations

import hmac
import logging

import scramp

from broker.config import ConfigError
from broker.security.principal import Principal
from sluice_client.jaas import PLAIN_LOGIN_MODULE, JaasError, parse_jaas_config

log = logging.getLogger("sluice.security")

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_FAILED = "Authentication failed: invalid credentials with SASL mechanism {}"


class SaslFailure(Exception):
    """The exchange failed; the message is what the client is told."""


class PlainExchange:
    mechanism = "PLAIN"

    def __init__(self, users: dict[str, str]):
        self._users = users
        self.principal: Principal | None = None

    def step(self, token: bytes) -> bytes:
        parts = bytes(token).split(b"\0")
        if len(parts) != 3:
            raise SaslFailure("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, authcid, password = (p.decode("utf-8", "replace") for p in parts)
        if not authcid:
            raise SaslFailure("Authentication failed: username not specified")
        if authzid and authzid != authcid:
            raise SaslFailure("Authentication failed: Client requested an authorization id that is "
                              "different from username")
        expected = self._users.get(authcid)
        if not hmac.compare_digest((expected or "\0").encode(), password.encode()) or expected is None:
            raise SaslFailure(_FAILED.format(self.mechanism))
        self.principal = Principal("User", authcid)
        return b""


class ScramExchange:
    def __init__(self, mechanism: str, credentials):
        self.mechanism = mechanism
        self._credentials = credentials
        self._server = scramp.ScramMechanism(mechanism).make_server(self._auth_info)
        self._user: str | None = None
        self._round = 0
        self.principal: Principal | None = None

    def _auth_info(self, user: str):
        credential = self._credentials.get(user, self.mechanism)
        if credential is None:
            raise SaslFailure(_FAILED.format(self.mechanism))
        self._user = user
        return credential.salt, credential.stored_key, credential.server_key, credential.iterations

    def step(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(f"Invalid SCRAM message with SASL mechanism {self.mechanism}") from None
        self._round += 1
        try:
            if self._round == 1:
                if "tokenauth=" in text:
                    raise SaslFailure("Authentication failed: delegation tokens are not supported")
                self._server.set_client_first(text)
                return self._server.get_server_first().encode()
            if self._round == 2:
                self._server.set_client_final(text)
                final = self._server.get_server_final().encode()
                self.principal = Principal("User", self._user)
                return final
        except scramp.ScramException as exc:
            log.info("SCRAM exchange of user %r failed: %s", self._user, exc)
            raise SaslFailure(_FAILED.format(self.mechanism)) from None
        raise SaslFailure(f"Invalid SCRAM exchange with SASL mechanism {self.mechanism}: too many messages")


class RefusedExchange:
    """A re-authentication naming another mechanism than the session's: its handshake is
    answered, its first token refused (Kafka's REAUTH_BAD_MECHANISM)."""

    principal = None

    def __init__(self, mechanism: str, previous: str):
        self.mechanism = mechanism
        self._reason = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                        f"re-authentication of mechanism '{previous}'")

    def step(self, token: bytes) -> bytes:
        raise SaslFailure(self._reason)


class ListenerSasl:
    """One listener's SASL: its enabled mechanisms, their credentials and their session
    lifetimes (seconds, 0 for none)."""

    def __init__(self, listener: str, mechanisms: tuple[str, ...], plain_users: dict[str, str], scram,
                 lifetimes: dict[str, float]):
        self.listener = listener
        self.mechanisms = mechanisms
        self._plain_users = plain_users
        self._scram = scram
        self.lifetimes = lifetimes

    def exchange(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainExchange(self._plain_users)
        return ScramExchange(mechanism, self._scram)


def listener_sasl(listener: str, settings: dict[str, str], scram, max_reauth_ms: int) -> ListenerSasl:
    """A SASL listener's configuration from its settings (broker.config's
    listener_settings) and the broker's connections.max.reauth.ms; ConfigError for what
    cannot be served."""
    mechanisms = tuple(m.strip().upper() for m in settings.get("sasl.enabled.mechanisms", "GSSAPI").split(",")
                       if m.strip())
    unsupported = [m for m in mechanisms if m not in SUPPORTED_MECHANISMS]
    if not mechanisms or unsupported:
        raise ConfigError(f"sasl.enabled.mechanisms of listener {listener}: "
                          f"{', '.join(unsupported) or 'none'} not supported (supported: "
                          f"{', '.join(SUPPORTED_MECHANISMS)}; Kafka's default is GSSAPI)")
    plain_users: dict[str, str] = {}
    if "PLAIN" in mechanisms:
        text = settings.get("plain.sasl.jaas.config") or settings.get("sasl.jaas.config")
        if not text:
            raise ConfigError(f"listener {listener} enables PLAIN: set listener.name.{listener.lower()}."
                              f"plain.sasl.jaas.config to a PlainLoginModule entry with user_<name>=\"...\" options")
        try:
            entry = parse_jaas_config(text)
        except JaasError as exc:
            raise ConfigError(f"plain.sasl.jaas.config of listener {listener}: {exc}") from None
        if entry.login_module != PLAIN_LOGIN_MODULE:
            raise ConfigError(f"plain.sasl.jaas.config of listener {listener}: {entry.login_module} is not "
                              f"{PLAIN_LOGIN_MODULE}")
        plain_users = {k[len("user_"):]: v for k, v in entry.options.items() if k.startswith("user_")}
    lifetimes = {}
    for mechanism in mechanisms:
        key = f"{mechanism.lower()}.connections.max.reauth.ms"
        text = settings.get(key)
        try:
            lifetime_ms = max_reauth_ms if text is None else int(text.strip())
        except ValueError:
            lifetime_ms = -1
        if lifetime_ms < 0:
            raise ConfigError(f"listener.name.{listener.lower()}.{key} must be a whole number of "
                              f"milliseconds, 0 or more, not {text!r}")
        lifetimes[mechanism] = lifetime_ms / 1000
    return ListenerSasl(listener, mechanisms, plain_users, scram, lifetimes)
