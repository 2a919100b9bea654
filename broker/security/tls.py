"""TLS for SSL and SASL_SSL listeners: Python's `ssl`, configured with Kafka's keys.

Keys (each may be given per listener as `listener.name.<name>.<key>`):
- the broker's key and certificate chain, PEM only, in one of three forms:
  `ssl.keystore.location` (a PEM file holding the private key and the chain; Kafka's
  `ssl.keystore.type=PEM`, which is the only type accepted), `ssl.keystore.key` plus
  `ssl.keystore.certificate.chain` (the PEM text itself, as Kafka allows), or
  `ssl.certificate.location` plus `ssl.key.location` (two files, librdkafka's names);
  `ssl.key.password` decrypts an encrypted key;
- trusted CAs for client certificates: `ssl.truststore.location` (PEM file;
  `ssl.truststore.type=PEM`), `ssl.truststore.certificates` (PEM text) or
  `ssl.ca.location`;
- `ssl.client.auth`: `none` (default), `requested` or `required`;
- `ssl.enabled.protocols` (default TLSv1.2,TLSv1.3): the lowest listed is the minimum;
- `ssl.cipher.suites`: OpenSSL names of the TLS 1.2 suites allowed;
- `ssl.principal.mapping.rules`: how a client certificate's distinguished name becomes
  the principal's name (below).

A client certificate names the principal `User:<DN>`, the subject's distinguished name
in RFC 2253 form (`CN=alice,OU=eng,O=Acme,C=US`), as Kafka's default builder does, then
passed through `ssl.principal.mapping.rules`: `DEFAULT` keeps the DN; `RULE:pattern/
replacement/` (optionally ending `L` or `U` to lower- or upper-case) rewrites a DN that
the whole pattern matches ($1... in the replacement), the first matching rule winning.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from typing import Callable

from broker.config import ConfigError
from broker.security.principal import Principal

_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(settings: dict[str, str], listener: str) -> ssl.SSLContext:
    """The TLS context of one listener; ConfigError naming the key when a setting is
    missing or wrong (never quoting a secret)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name in ("ssl.keystore.type", "ssl.truststore.type"):
        if settings.get(name, "PEM").strip().upper() != "PEM":
            raise ConfigError(f"{name}: only PEM is supported (listener {listener}); convert a JKS or "
                              f"PKCS12 store to PEM")
    password = settings.get("ssl.key.password")
    try:
        if settings.get("ssl.keystore.location"):
            context.load_cert_chain(settings["ssl.keystore.location"], password=password)
        elif settings.get("ssl.keystore.key") or settings.get("ssl.keystore.certificate.chain"):
            _load_inline_chain(context, settings.get("ssl.keystore.certificate.chain", ""),
                               settings.get("ssl.keystore.key", ""), password)
        elif settings.get("ssl.certificate.location"):
            context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                    password=password)
        else:
            raise ConfigError(f"listener {listener} (TLS) needs a key and certificate: set "
                              f"ssl.keystore.location (a PEM file with both), ssl.keystore.key and "
                              f"ssl.keystore.certificate.chain, or ssl.certificate.location and "
                              f"ssl.key.location")
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"listener {listener}: cannot load its key and certificate "
                          f"({_reason(exc)})") from None
    client_auth = settings.get("ssl.client.auth", "none").strip().lower()
    if client_auth not in _CLIENT_AUTH:
        raise ConfigError(f"ssl.client.auth: {client_auth!r} is not none, requested or required")
    context.verify_mode = _CLIENT_AUTH[client_auth]
    trusted = settings.get("ssl.truststore.location") or settings.get("ssl.ca.location")
    try:
        if trusted:
            context.load_verify_locations(cafile=trusted)
        elif settings.get("ssl.truststore.certificates"):
            context.load_verify_locations(cadata=settings["ssl.truststore.certificates"])
        elif client_auth != "none":
            raise ConfigError(f"ssl.client.auth={client_auth} on listener {listener} needs trusted CAs: "
                              f"set ssl.truststore.location")
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"listener {listener}: cannot load the trusted CAs ({_reason(exc)})") from None
    protocols = [p.strip() for p in settings.get("ssl.enabled.protocols", "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    unknown = [p for p in protocols if p not in _PROTOCOLS]
    if not protocols or unknown:
        raise ConfigError(f"ssl.enabled.protocols: {', '.join(unknown) or 'none given'} "
                          f"(supported: {', '.join(_PROTOCOLS)})")
    context.minimum_version = min(_PROTOCOLS[p] for p in protocols)
    context.maximum_version = max(_PROTOCOLS[p] for p in protocols)
    if settings.get("ssl.cipher.suites"):
        try:
            context.set_ciphers(":".join(c.strip() for c in settings["ssl.cipher.suites"].split(",")))
        except ssl.SSLError:
            raise ConfigError(f"ssl.cipher.suites: no usable cipher in "
                              f"{settings['ssl.cipher.suites']!r}") from None
    return context


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """ssl loads keys only from files: the PEM text goes to a private temporary file,
    removed at once."""
    if not chain.strip() or not key.strip():
        raise ConfigError("ssl.keystore.key and ssl.keystore.certificate.chain go together")
    fd, path = tempfile.mkstemp(prefix="sluice-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def _reason(exc: Exception) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)


# -- client certificates to principals ------------------------------------------------------

_ATTRIBUTE_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
                    "countryName": "C", "stateOrProvinceName": "ST", "localityName": "L",
                    "streetAddress": "STREET", "domainComponent": "DC", "userId": "UID",
                    "emailAddress": "EMAILADDRESS"}
_RULE = re.compile(r"RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)")


def distinguished_name(certificate: dict) -> str:
    """The subject of a certificate as `ssl` decodes it, in RFC 2253 form: the most
    specific RDN first, special characters escaped."""
    rdns = []
    for rdn in reversed(certificate.get("subject", ())):
        rdns.append("+".join(f"{_ATTRIBUTE_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def principal_mapper(rules_text: str | None) -> Callable[[dict], Principal]:
    """certificate -> principal, with `ssl.principal.mapping.rules`; ConfigError for a
    rule that does not parse."""
    rules = []
    for item in _split_rules(rules_text or "DEFAULT"):
        if item == "DEFAULT":
            rules.append(None)
            continue
        match = _RULE.fullmatch(item)
        if match is None:
            raise ConfigError(f"ssl.principal.mapping.rules: {item!r} is not DEFAULT or RULE:pattern/replacement/[LU]")
        pattern, replacement, case = match.groups()
        try:
            rules.append((re.compile(pattern.replace("\\/", "/")), replacement.replace("\\/", "/"), case))
        except re.error as exc:
            raise ConfigError(f"ssl.principal.mapping.rules: {item!r}: {exc}") from None

    def principal_of(certificate: dict) -> Principal:
        dn = distinguished_name(certificate)
        for rule in rules:
            if rule is None:
                return Principal("User", dn)
            pattern, replacement, case = rule
            if pattern.fullmatch(dn):
                name = pattern.sub(_java_replacement(replacement), dn, count=1)
                return Principal("User", name.lower() if case == "L" else name.upper() if case == "U" else name)
        return Principal("User", dn)

    return principal_of


def _split_rules(text: str) -> list[str]:
    """Rules are separated by commas or newlines, but a RULE's pattern may hold commas:
    a new rule starts only at `RULE:` or `DEFAULT`."""
    starts = [m.start() for m in re.finditer(r"(?:^|[,\s])\s*(RULE:|DEFAULT)", text)]
    items = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        items.append(text[start:end].strip(" ,\n\t"))
    return [i for i in items if i]


def _java_replacement(replacement: str) -> str:
    """Java's $1 group references, as Python's \\1."""
    return re.sub(r"\$(\d)", r"\\\1", replacement.replace("\\", "\\\\"))
