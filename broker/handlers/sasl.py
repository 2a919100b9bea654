"""SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2), for authentication and
re-authentication; the rules are those of broker.security.sasl's docstring. A v0
handshake switches the connection to raw tokens, which Broker.handle_frame passes to
`raw_token`."""

from __future__ import annotations

import logging

from wire.error_codes import ErrorCode
from wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

from broker.security.sasl import RefusedExchange, SaslFailure
from broker.handler_results import CloseConnection

log = logging.getLogger("sluice.security")


class AuthenticationFailed(Exception):
    """The answer to a failed SaslAuthenticate, after which the connection closes."""

    def __init__(self, response, reason: str):
        super().__init__(reason)
        self.response = response


def sasl_handshake(broker, header, request, session):
    Resp = SASL_HANDSHAKE.response
    listener = broker.sasl_listeners.get(session.listener)
    mechanisms = list(listener.mechanisms) if listener else []
    reauthenticating = session.authenticated and session.reauthenticates
    if listener is None or session.sasl is not None or (session.authenticated and not reauthenticating):
        return Resp(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms)
    if request.mechanism not in listener.mechanisms:
        if reauthenticating:
            raise AuthenticationFailed(Resp(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms),
                                       f"re-authentication with SASL mechanism {request.mechanism!r}, "
                                       f"which is not enabled")
        return Resp(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    if reauthenticating and request.mechanism != session.mechanism:
        session.sasl = RefusedExchange(request.mechanism, session.mechanism)
    else:
        session.sasl = listener.exchange(request.mechanism)
    session.sasl_raw = header.request_api_version == 0
    return Resp(error_code=ErrorCode.NONE, mechanisms=mechanisms)


def sasl_authenticate(broker, header, request, session):
    Resp = SASL_AUTHENTICATE.response
    if session.sasl is None or session.sasl_raw:
        return Resp(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate is only valid after a SaslHandshake v1 on a SASL "
                                  "listener, before authentication has completed", auth_bytes=b"")
    if not session.authenticated:
        session.reauthenticates = header.request_api_version >= 1
    try:
        challenge = _step(broker, session, request.auth_bytes)
    except SaslFailure as exc:
        raise AuthenticationFailed(Resp(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                        auth_bytes=b""), f"SASL authentication failed: {exc}") from None
    lifetime_ms = 0
    if session.sasl is None and session.expires_at is not None:  # done, with a session lifetime
        lifetime_ms = broker.sasl_listeners[session.listener].lifetimes[session.mechanism] * 1000
    return Resp(error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge,
                session_lifetime_ms=int(lifetime_ms))


def raw_token(broker, session, frame) -> list:
    """A token after a v0 handshake: the next token back, as a raw frame; a failure
    closes the connection without an answer, as Kafka does."""
    try:
        return [_step(broker, session, frame)]
    except SaslFailure as exc:
        raise CloseConnection(f"SASL authentication failed: {exc}") from None


def _step(broker, session, token) -> bytes:
    exchange = session.sasl
    challenge = exchange.step(token)
    if exchange.principal is not None:
        again = session.authenticated
        if again and exchange.principal != session.principal:
            raise SaslFailure(f"Cannot change principals during re-authentication from "
                              f"{session.principal}: {exchange.principal}")
        session.principal = exchange.principal
        session.mechanism = exchange.mechanism
        session.authenticated = True
        session.sasl = None
        session.sasl_raw = False
        lifetime = broker.sasl_listeners[session.listener].lifetimes[exchange.mechanism]
        session.expires_at = broker.clock.monotonic() + lifetime if lifetime > 0 else None
        log.info("%s %s as %s with %s on listener %s", session.client_host,
                 "re-authenticated" if again else "authenticated", session.principal, exchange.mechanism,
                 session.listener)
    return challenge
