"""How this broker connects to the others (replica fetches, the controller's requests,
transaction markers, controlled shutdown): over the inter-broker listener, with that
listener's protocol, as Kafka's brokers do.

- TLS: the listener's trusted CAs verify the other broker's certificate, whose name is
  checked against the host unless `ssl.endpoint.identification.algorithm` is empty; the
  broker's own key and certificate (`ssl.keystore.location`, or `ssl.certificate.location`
  with `ssl.key.location`) go with it, for listeners that require client certificates.
- SASL: `sasl.mechanism.inter.broker.protocol` (Kafka's default, GSSAPI, is not
  supported: it must be set), authenticating with the `username` and `password` options
  of the listener's JAAS entry for that mechanism
  (`listener.name.<listener>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`).
"""

from __future__ import annotations

from broker.config import BrokerConfig, ConfigError
from sluice_client.errors import SecurityConfigError
from sluice_client.security import ClientSecurity

_PASSED_SSL_KEYS = ("ssl.truststore.location", "ssl.truststore.type", "ssl.ca.location", "ssl.keystore.location",
                    "ssl.keystore.type", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
                    "ssl.endpoint.identification.algorithm")


def inter_broker_security(config: BrokerConfig) -> ClientSecurity | None:
    """The security of this broker's connections to the others; None for PLAINTEXT."""
    listener = config.inter_broker_listener
    protocol = listener.security_protocol
    if protocol == "PLAINTEXT":
        return None
    settings = config.listener_settings(listener.name)
    client = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        client.update({key: settings[key] for key in _PASSED_SSL_KEYS if key in settings})
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        mechanism = config.security_settings.get("sasl.mechanism.inter.broker.protocol", "").strip().upper()
        if not mechanism:
            raise ConfigError(f"the inter-broker listener {listener.name} is {protocol}: set "
                              f"sasl.mechanism.inter.broker.protocol (Kafka's default, GSSAPI, is not supported)")
        jaas = settings.get(f"{mechanism.lower()}.sasl.jaas.config") or settings.get("sasl.jaas.config")
        if not jaas:
            raise ConfigError(f"the inter-broker listener {listener.name} authenticates with {mechanism}: set "
                              f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config "
                              f"with this broker's username and password")
        client.update({"sasl.mechanism": mechanism, "sasl.jaas.config": jaas})
    try:
        return ClientSecurity(client)
    except SecurityConfigError as exc:
        raise ConfigError(f"inter-broker listener {listener.name}: {exc}") from None
