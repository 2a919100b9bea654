"""SaslHandshake (17, v0-1) and SaslAuthenticate (36, v0-2); the rules are those of
broker.security.sasl's docstring. A v0 handshake switches the connection to raw tokens,
which Broker.handle_frame passes to `raw_token`."""

from __future__ import annotations

import logging

from wire.error_codes import ErrorCode
from wire.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE

from broker.security.sasl import SaslFailure
from broker.server import CloseConnection

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
    if listener is None or session.authenticated or session.sasl is not None:
        return Resp(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=mechanisms)
    if request.mechanism not in listener.mechanisms:
        return Resp(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=mechanisms)
    session.sasl = listener.exchange(request.mechanism)
    session.sasl_raw = header.request_api_version == 0
    return Resp(error_code=ErrorCode.NONE, mechanisms=mechanisms)


def sasl_authenticate(broker, header, request, session):
    Resp = SASL_AUTHENTICATE.response
    if session.sasl is None or session.authenticated or session.sasl_raw:
        return Resp(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                    error_message="SaslAuthenticate is only valid after a SaslHandshake v1 on a SASL "
                                  "listener, before authentication has completed", auth_bytes=b"")
    try:
        challenge = _step(session, request.auth_bytes)
    except SaslFailure as exc:
        raise AuthenticationFailed(Resp(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=str(exc),
                                        auth_bytes=b""), f"SASL authentication failed: {exc}") from None
    return Resp(error_code=ErrorCode.NONE, error_message=None, auth_bytes=challenge, session_lifetime_ms=0)


def raw_token(session, frame) -> list:
    """A token after a v0 handshake: the next token back, as a raw frame; a failure
    closes the connection without an answer, as Kafka does."""
    try:
        return [_step(session, frame)]
    except SaslFailure as exc:
        raise CloseConnection(f"SASL authentication failed: {exc}") from None


def _step(session, token) -> bytes:
    exchange = session.sasl
    challenge = exchange.step(token)
    if exchange.principal is not None:
        session.principal = exchange.principal
        session.authenticated = True
        session.sasl = None
        session.sasl_raw = False
        log.info("%s authenticated as %s with %s on listener %s", session.client_host, session.principal,
                 exchange.mechanism, session.listener)
    return challenge
