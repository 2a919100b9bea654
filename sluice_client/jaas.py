"""Kafka's `sasl.jaas.config` values: one JAAS login module entry.

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

The grammar Kafka accepts (JaasConfig): a login module class name, a control flag
(required, requisite, sufficient, optional), then `name=value` options, the value quoted
with double quotes (a backslash escapes the next character) or a bare word, ending with
`;`. Only one entry is allowed in a `sasl.jaas.config` value. Used by the client (its
username and password) and the broker (its users and its own inter-broker login).
Errors never quote option values: they may be passwords.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_FLAGS = ("required", "requisite", "sufficient", "optional")


class JaasError(ValueError):
    pass


@dataclass(frozen=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(repr=False)

    def __repr__(self) -> str:  # option values may be passwords
        return f"JaasEntry({self.login_module} {self.flag}, options {sorted(self.options)})"


def parse_jaas_config(text: str) -> JaasEntry:
    tokens = _tokens(text)
    if len(tokens) < 3 or tokens[-1] != ";":
        raise JaasError("expected 'LoginModuleClass flag name=\"value\" ... ;'")
    module, flag = tokens[0], tokens[1]
    if flag.lower() not in _FLAGS:
        raise JaasError(f"control flag {flag!r} is not one of {', '.join(_FLAGS)}")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    i = 0
    while i < len(body):
        if i + 2 >= len(body) or body[i + 1] != "=":
            raise JaasError(f"expected name=value after {module} {flag} (option {len(options) + 1})")
        name, value = body[i], body[i + 2]
        if name in options:
            raise JaasError(f"option {name!r} is given twice")
        options[name] = value
        i += 3
    return JaasEntry(module, flag.lower(), options)


def _tokens(text: str) -> list[str]:
    """Words, quoted strings (unquoted), '=' and ';'. Anything after the first ';' but
    blanks is a second entry, which Kafka refuses."""
    tokens: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "=;":
            tokens.append(c)
            i += 1
            if c == ";" and text[i:].strip():
                raise JaasError("only one login module entry is allowed")
        elif c == '"':
            value, i = [], i + 1
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(text[i])
                i += 1
            if i >= n:
                raise JaasError("a quoted value is not closed")
            tokens.append("".join(value))
            i += 1
        else:
            start = i
            while i < n and not text[i].isspace() and text[i] not in '=;"':
                i += 1
            tokens.append(text[start:i])
    return tokens
