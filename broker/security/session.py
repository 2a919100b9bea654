"""What the broker knows of one connection: where it came from (client host, listener and
its security protocol) and who is on it (the principal, once authenticated).

The server makes one per accepted connection and every request handler gets it as its
fourth argument. On a SASL listener the principal is ANONYMOUS, and `authenticated` is
False, until a SaslAuthenticate succeeds (broker/security/sasl.py).
"""

from __future__ import annotations

from broker.security.principal import ANONYMOUS, Principal


class Session:
    __slots__ = ("client_host", "listener", "security_protocol", "principal", "authenticated", "sasl",
                 "sasl_raw", "mechanism", "reauthenticates", "expires_at")

    def __init__(self, client_host: str, listener: str = "PLAINTEXT", security_protocol: str = "PLAINTEXT",
                 principal: Principal = ANONYMOUS):
        self.client_host = client_host
        self.listener = listener
        self.security_protocol = security_protocol
        self.principal = principal
        self.authenticated = not security_protocol.startswith("SASL_")
        self.sasl = None  # the SASL exchange under way (broker.security.sasl), if any
        self.sasl_raw = False  # after a v0 SaslHandshake: tokens come as raw frames
        self.mechanism = None  # the SASL mechanism authenticated with
        self.reauthenticates = False  # authenticated with SaslAuthenticate v1+: may do so again
        self.expires_at = None  # the broker clock's monotonic time the SASL session ends, if it does

    def __repr__(self) -> str:
        return (f"Session({self.client_host}, {self.listener}, {self.principal}"
                + ("" if self.authenticated else ", unauthenticated") + ")")
