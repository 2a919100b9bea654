"""The broker's listeners as the server binds them: each configured listener (`listeners`,
its protocol from `listener.security.protocol.map`) with its TLS context (SSL, SASL_SSL;
broker.security.tls) and, for SASL_PLAINTEXT and SASL_SSL, its SASL configuration
(broker.security.sasl). Every setting is checked here, before anything is bound: a
mistake is a ConfigError naming the key.

A client certificate names the principal on SSL listeners only; on SASL_SSL the SASL
identity does, as in Kafka.
"""

from __future__ import annotations

import dataclasses
import ssl
from typing import Callable

from broker.config import BrokerConfig
from broker.security.sasl import ListenerSasl, listener_sasl
from broker.security.tls import principal_mapper, server_context
from broker.security.principal import Principal


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """A listener as the server binds it: its name and security protocol (which the
    connections' sessions carry), address, and TLS context for SSL and SASL_SSL.
    `principal_of_certificate` names a TLS client by its certificate (SSL listeners
    that ask for one)."""

    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    principal_of_certificate: Callable[[dict], Principal] | None = None


def endpoints(config: BrokerConfig, scram) -> tuple[list[Endpoint], dict[str, ListenerSasl]]:
    """The endpoints to bind, and the SASL configuration of each SASL listener by name."""
    bound, sasl = [], {}
    for listener in config.listeners:
        settings = config.listener_settings(listener.name)
        protocol = listener.security_protocol
        context = server_context(settings, listener.name) if protocol in ("SSL", "SASL_SSL") else None
        mapper = None
        if protocol == "SSL" and settings.get("ssl.client.auth", "none").strip().lower() != "none":
            mapper = principal_mapper(settings.get("ssl.principal.mapping.rules"))
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            sasl[listener.name] = listener_sasl(listener.name, settings, scram, config.connections_max_reauth_ms)
        bound.append(Endpoint(listener.name, listener.host, listener.port, protocol, context, mapper))
    return bound, sasl
