"""How the client proves who it is and checks who the broker is: TLS and SASL, configured
with the setting names of Kafka's Java clients and of librdkafka.

Settings (strings; keys other than `security.protocol`, `ssl.*` and `sasl.*` are not
security settings and are ignored here):
- `security.protocol`: PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL.
- TLS (SSL and SASL_SSL), PEM files only:
  - the CAs trusted to sign the broker's certificate: `ssl.ca.location` (librdkafka) or
    `ssl.truststore.location` (Java, `ssl.truststore.type=PEM`); without either, the
    system's CAs;
  - the client's own certificate, for listeners with `ssl.client.auth`:
    `ssl.certificate.location` and `ssl.key.location` (librdkafka), or
    `ssl.keystore.location` (Java, `ssl.keystore.type=PEM`: one file holding the private
    key and the certificate chain); `ssl.key.password` decrypts an encrypted key;
  - `ssl.endpoint.identification.algorithm`: `https` (the default) checks that the
    broker's certificate names the host connected to; empty or `none` does not (the
    chain is verified all the same).
- SASL (SASL_PLAINTEXT and SASL_SSL): `sasl.mechanism` (Java) or `sasl.mechanisms`
  (librdkafka): PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (there is no default: Kafka's,
  GSSAPI, is not supported); the credentials as `sasl.username` and `sasl.password`
  (librdkafka) or `sasl.jaas.config` (Java: a PlainLoginModule or ScramLoginModule entry
  with `username` and `password` options; as in Kafka, either module serves any of the
  three mechanisms).
Everything else is a SecurityConfigError naming the key: other `ssl.*`/`sasl.*` keys,
GSSAPI and OAUTHBEARER, JKS and PKCS12 stores, delegation tokens (`tokenauth`), and
`ssl.*` settings without TLS or `sasl.*` settings without SASL (the connection would be
less protected than its settings suggest). Neither errors nor repr() show a password,
a key or a JAAS configuration.

The SASL mechanisms are sans-I/O exchanges (`BrokerConnection` carries their tokens in
SaslAuthenticate): `start()` is the first token, `step(broker_token)` the next one, or
None once the mechanism is satisfied. PLAIN (RFC 4616) is one token, `authzid NUL
username NUL password` with an empty authzid. SCRAM (RFC 5802, SHA-256/512 per RFC
7677) goes through the scramp library: client-first, then client-final, then the
broker's server signature is verified; one that does not verify fails authentication.
"""

from __future__ import annotations

import ssl
from typing import Mapping

from sluice_client.errors import AuthenticationFailed, SecurityConfigError
from sluice_client.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, JaasError, parse_jaas_config

__all__ = ["ClientSecurity", "PlainExchange", "SASL_MECHANISMS", "SECURITY_PROTOCOLS",
           "ScramExchange"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

_SSL_KEYS = frozenset({
    "ssl.ca.location", "ssl.truststore.location", "ssl.truststore.type",
    "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.endpoint.identification.algorithm"})
_SASL_KEYS = frozenset({"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                        "sasl.jaas.config"})
# Known keys the client does not implement, and what to do instead.
_UNSUPPORTED = {
    "ssl.keystore.password": "a PEM keystore has no store password; an encrypted key takes "
                             "ssl.key.password",
    "ssl.truststore.password": "a PEM trust store has no password",
    "ssl.keystore.key": "put the key and chain in a PEM file named by ssl.keystore.location",
    "ssl.keystore.certificate.chain": "put the key and chain in a PEM file named by "
                                      "ssl.keystore.location",
    "ssl.truststore.certificates": "put the CA certificates in a PEM file named by "
                                   "ssl.truststore.location",
}
_IDENTIFY_HOST = {"https": True, "": False, "none": False}


def _not_supported(key: str) -> SecurityConfigError:
    why = _UNSUPPORTED.get(key, "the sluice client does not implement it")
    return SecurityConfigError(f"{key} is not supported: {why}", key)


class ClientSecurity:
    """The TLS context and SASL credentials one client uses for every broker connection.

    Made from settings with Kafka's and librdkafka's names (see the module); checked, and
    its files read, when made. It pickles as its settings (the SSL context is rebuilt where
    it is unpickled, e.g. in a Spark task), and compares by them.
    """

    def __init__(self, settings: Mapping[str, str] | None = None):
        self._settings = {str(k): str(v) for k, v in (settings or {}).items()
                          if k == "security.protocol" or str(k).startswith(("ssl.", "sasl."))}
        protocol = self._value("security.protocol") or "PLAINTEXT"
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(f"security.protocol={protocol}: not one of "
                                      f"{', '.join(SECURITY_PROTOCOLS)}", "security.protocol")
        self.protocol = protocol.upper()
        self.tls = self.protocol in ("SSL", "SASL_SSL")
        self.sasl = self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        for key in sorted(self._settings):
            if key.startswith("ssl.") and key not in _SSL_KEYS or \
                    key.startswith("sasl.") and key not in _SASL_KEYS:
                raise _not_supported(key)
            if key.startswith("ssl.") and not self.tls or key.startswith("sasl.") and not self.sasl:
                raise SecurityConfigError(
                    f"{key} is set but security.protocol is {self.protocol}: set security.protocol to "
                    f"{'SSL or SASL_SSL' if key.startswith('ssl.') else 'SASL_PLAINTEXT or SASL_SSL'}", key)
        self.ssl_context: ssl.SSLContext | None = self._ssl_context() if self.tls else None
        self.mechanism: str | None = None
        self.username: str | None = None
        self._password: str | None = None
        if self.sasl:
            self.mechanism = self._mechanism()
            self.username, self._password = self._credentials()
            try:
                self.sasl_exchange()  # the credentials must suit the mechanism (SASLprep for SCRAM)
            except ValueError as exc:
                key = "sasl.jaas.config" if self._value("sasl.jaas.config") else "sasl.password"
                raise SecurityConfigError(f"{key}: {exc}", key) from None

    # -- SASL ----------------------------------------------------------------------------
    def sasl_exchange(self) -> PlainExchange | ScramExchange:
        """A fresh exchange of this client's mechanism, for one connection."""
        if self.mechanism == "PLAIN":
            return PlainExchange(self.username, self._password)
        return ScramExchange(self.mechanism, self.username, self._password)

    def _mechanism(self) -> str:
        java, librdkafka = self._value("sasl.mechanism"), self._value("sasl.mechanisms")
        if java and librdkafka and java.upper() != librdkafka.upper():
            raise SecurityConfigError(f"sasl.mechanism={java} and sasl.mechanisms={librdkafka} disagree",
                                      "sasl.mechanism")
        mechanism = java or librdkafka
        key = "sasl.mechanism" if java else "sasl.mechanisms"
        if not mechanism:
            raise SecurityConfigError(f"sasl.mechanism is not set (Kafka's default, GSSAPI, is not "
                                      f"supported): set it to {', '.join(SASL_MECHANISMS)}", "sasl.mechanism")
        if mechanism.upper() not in SASL_MECHANISMS:
            raise SecurityConfigError(f"{key}={mechanism}: not supported (supported: "
                                      f"{', '.join(SASL_MECHANISMS)})", key)
        return mechanism.upper()

    def _credentials(self) -> tuple[str, str]:
        jaas = self._value("sasl.jaas.config")
        username = self._value("sasl.username")
        password = self._settings.get("sasl.password")  # as given: blanks may be part of it
        if jaas and (username or password is not None):
            raise SecurityConfigError("give either sasl.jaas.config or sasl.username and sasl.password, "
                                      "not both", "sasl.jaas.config")
        if jaas:
            return _jaas_credentials(jaas)
        if not username or password is None:
            raise SecurityConfigError(f"SASL {self.mechanism} needs credentials: set sasl.username and "
                                      f"sasl.password, or sasl.jaas.config", "sasl.username")
        return username, password

    # -- TLS -----------------------------------------------------------------------------
    def _ssl_context(self) -> ssl.SSLContext:
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            kind = self._value(key)
            if kind and kind.upper() != "PEM":
                raise SecurityConfigError(f"{key}={kind}: only PEM is supported; convert the JKS or PKCS12 "
                                          f"store to PEM files", key)
        ca_key, ca_file = self._one_of("ssl.ca.location", "ssl.truststore.location")
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except ssl.SSLError:
            raise SecurityConfigError(f"{ca_key}: {ca_file} holds no PEM certificate (JKS and PKCS12 trust "
                                      f"stores are not supported)", ca_key) from None
        except OSError as exc:
            raise SecurityConfigError(f"{ca_key}: cannot read {ca_file}: {exc.strerror}", ca_key) from None
        identification = self._settings.get("ssl.endpoint.identification.algorithm", "https").strip()
        if identification.lower() not in _IDENTIFY_HOST:
            raise SecurityConfigError(f"ssl.endpoint.identification.algorithm={identification}: not https, "
                                      f"none or empty", "ssl.endpoint.identification.algorithm")
        context.check_hostname = _IDENTIFY_HOST[identification.lower()]
        self._load_client_certificate(context)
        return context

    def _load_client_certificate(self, context: ssl.SSLContext) -> None:
        keystore = self._value("ssl.keystore.location")
        certificate, key = self._value("ssl.certificate.location"), self._value("ssl.key.location")
        password = self._settings.get("ssl.key.password")
        if keystore and (certificate or key):
            raise SecurityConfigError("give either ssl.keystore.location or ssl.certificate.location and "
                                      "ssl.key.location, not both", "ssl.keystore.location")
        if key and not certificate:
            raise SecurityConfigError("ssl.key.location is set without ssl.certificate.location",
                                      "ssl.key.location")
        if not (keystore or certificate):
            if password is not None:
                raise SecurityConfigError("ssl.key.password is set but no key is: set ssl.keystore.location "
                                          "or ssl.key.location", "ssl.key.password")
            return
        where = "ssl.keystore.location" if keystore else "ssl.certificate.location/ssl.key.location"
        where_key = "ssl.keystore.location" if keystore else "ssl.certificate.location"

        def no_password():  # instead of OpenSSL's prompt on the terminal
            raise SecurityConfigError(f"{where}: the private key is encrypted: set ssl.key.password",
                                      where_key)

        try:
            context.load_cert_chain(keystore or certificate, key,
                                    password=no_password if password is None else password)
        except ssl.SSLError:
            raise SecurityConfigError(f"{where}: cannot load a private key and its certificate (not PEM, "
                                      f"a key that does not match the certificate, or a wrong "
                                      f"ssl.key.password)", where_key) from None
        except OSError as exc:
            paths = " and ".join(p for p in (keystore, certificate, key) if p)
            raise SecurityConfigError(f"{where}: cannot read {paths}: {exc.strerror}", where_key) from None

    # -- helpers ---------------------------------------------------------------------------
    def _value(self, key: str) -> str | None:
        value = self._settings.get(key, "").strip()
        return value or None

    def _one_of(self, first: str, second: str) -> tuple[str, str | None]:
        """The key and value of two synonyms (librdkafka's and Java's name), which must agree."""
        a, b = self._value(first), self._value(second)
        if a and b and a != b:
            raise SecurityConfigError(f"{first} and {second} name different files; give one", first)
        return (first, a) if a else (second, b)

    def __repr__(self) -> str:
        parts = [self.protocol]
        if self.sasl:
            parts.append(f"{self.mechanism} as {self.username!r}")
        if self.tls:
            ca = self._value("ssl.ca.location") or self._value("ssl.truststore.location")
            parts.append(f"CA {ca}" if ca else "system CAs")
            if self._value("ssl.keystore.location") or self._value("ssl.certificate.location"):
                parts.append("client certificate")
            if not self.ssl_context.check_hostname:
                parts.append("no hostname check")
        return f"ClientSecurity({', '.join(parts)})"

    def __reduce__(self):
        return ClientSecurity, (dict(self._settings),)

    def __eq__(self, other) -> bool:
        return isinstance(other, ClientSecurity) and self._settings == other._settings

    def __hash__(self) -> int:
        return hash(frozenset(self._settings.items()))


def _jaas_credentials(text: str) -> tuple[str, str]:
    """The username and password of a PlainLoginModule or ScramLoginModule entry."""
    def error(message: str) -> SecurityConfigError:
        return SecurityConfigError(f"sasl.jaas.config: {message}", "sasl.jaas.config")

    try:
        entry = parse_jaas_config(text)
    except JaasError as exc:
        raise error(str(exc)) from None
    if entry.login_module not in (PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE):
        raise error(f"login module {entry.login_module} is not supported (use {PLAIN_LOGIN_MODULE} or "
                    f"{SCRAM_LOGIN_MODULE})")
    if entry.options.get("tokenauth", "false").lower() == "true":
        raise error("tokenauth (delegation tokens) is not supported")
    username, password = entry.options.get("username"), entry.options.get("password")
    if not username or password is None:
        raise error(f"the {entry.login_module} entry needs username=\"...\" and password=\"...\" options")
    return username, password


class PlainExchange:
    """SASL PLAIN: one token, `NUL username NUL password` (no authorization id)."""

    mechanism = "PLAIN"

    def __init__(self, username: str, password: str):
        if "\0" in username or "\0" in password:
            raise ValueError("SASL PLAIN: the username and password cannot contain NUL")
        self._token = b"\0" + username.encode() + b"\0" + password.encode()
        self._done = False

    def start(self) -> bytes:
        return self._token

    def step(self, broker_token: bytes) -> None:
        """The broker accepted the token (it answers with nothing): done."""
        if self._done:
            raise AuthenticationFailed("SASL PLAIN: the broker asked for more after the exchange was "
                                       "complete")
        self._done = True
        return None


class ScramExchange:
    """SASL SCRAM-SHA-256/512: client-first, client-final, then the broker's signature."""

    def __init__(self, mechanism: str, username: str, password: str):
        # Imported here, as only SCRAM logins need it: scramp (with asn1crypto) is a tenth
        # of the client's import time, which every Python worker of a Spark query pays.
        import scramp

        self.mechanism = mechanism
        self._refused = scramp.ScramException
        try:
            self._client = scramp.ScramClient([mechanism], username, password)
        except scramp.ScramException:  # its message may quote the password's characters
            raise ValueError(f"SASL {mechanism}: the username or password is not allowed by SASLprep "
                             f"(RFC 4013)") from None
        self._round = 0

    def start(self) -> bytes:
        return self._client.get_client_first().encode()

    def step(self, broker_token: bytes) -> bytes | None:
        self._round += 1
        try:
            message = bytes(broker_token).decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed(f"SASL {self.mechanism}: the broker's message is not UTF-8") from None
        if self._round == 1:
            try:
                self._client.set_server_first(message)
                return self._client.get_client_final().encode()
            except self._refused:
                raise AuthenticationFailed(f"SASL {self.mechanism}: the broker's first message is not a "
                                           f"valid SCRAM server-first message for this client") from None
        if self._round == 2:
            try:
                self._client.set_server_final(message)
            except self._refused:
                raise AuthenticationFailed(
                    f"SASL {self.mechanism}: the broker's final message does not carry the expected server "
                    f"signature, so it did not prove it knows the credentials") from None
            return None
        raise AuthenticationFailed(f"SASL {self.mechanism}: the broker asked for more after the exchange "
                                   f"was complete")
