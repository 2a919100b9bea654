"""Request and response frames: header plus body, at a given API version.

A frame is what follows the 4-byte size prefix on the wire. Header versions follow
from the API version: flexible request versions use request header v2 (with tagged
fields), others v1 — except ControlledShutdown v0, whose request header is v0 (no client
id; Kafka's RequestHeader v0 exists for it alone); flexible responses use response header
v1, others v0 — except ApiVersions responses, which always use header v0 so that a
client that does not yet know the broker's versions can read them.
"""

from __future__ import annotations

from collections.abc import Mapping

from wire.messages import API_VERSIONS, APIS, CONTROLLED_SHUTDOWN, REQUEST_HEADER, RESPONSE_HEADER
from wire.primitives import DecodeError, EncodeError, Reader, Writer
from wire.schema import Api, Struct

__all__ = [
    "RequestHeader", "ResponseHeader", "UnsupportedRequest", "api_for",
    "decode_request", "encode_request", "decode_response", "encode_response",
    "encode_response_writer",
    "request_header_version", "response_header_version",
]

RequestHeader = REQUEST_HEADER.cls
_HEADER_V0_API = CONTROLLED_SHUTDOWN.key  # the one request whose v0 uses request header v0
ResponseHeader = RESPONSE_HEADER.cls


class UnsupportedRequest(DecodeError):
    """A request whose API key or version this codec does not know.

    The header was decoded (as far as it can be for an unknown API), so a server can
    still answer with UNSUPPORTED_VERSION under the right correlation id.
    """

    def __init__(self, header: Struct):
        self.header = header
        super().__init__(f"unsupported API key {header.request_api_key} "
                         f"version {header.request_api_version}")


def api_for(api_key: int) -> Api:
    try:
        return APIS[api_key]
    except KeyError:
        raise EncodeError(f"unknown API key {api_key}") from None


def _flexible(api: Api, version: int) -> bool:
    # Versions above the newest known one keep the newest one's flexibility.
    return version in api.flexible or (version > api.versions.hi and api.versions.hi in api.flexible)


def request_header_version(api_key: int, api_version: int) -> int:
    if api_version == 0 and api_key == _HEADER_V0_API:
        return 0  # ControlledShutdown v0: no client id
    api = APIS.get(api_key)
    return 2 if api is not None and _flexible(api, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS.key:
        return 0
    return 1 if _flexible(api_for(api_key), api_version) else 0


def decode_request(frame, *, allow_trailing_bytes: bool = False,
                   apis: Mapping[int, Api] = APIS) -> tuple[Struct, Struct]:
    """(header, body) of a request frame; UnsupportedRequest for unknown APIs/versions.

    Bytes after the body are an error unless `allow_trailing_bytes`: a broker accepts
    them, as Kafka does (librdkafka 2.x sends three in flexible all-topics Metadata
    requests, writing the null topic array's length as four bytes, issue #5049).
    `apis` narrows the APIs whose bodies are decoded (a broker's served ones): a request
    at any other is UnsupportedRequest, its body unread, as for an API the codec lacks."""
    reader = Reader(frame)
    if reader.remaining < 4:
        raise DecodeError("request frame shorter than its API key and version")
    api_key, api_version = reader.int16(), reader.int16()
    reader.pos = 0
    header = REQUEST_HEADER.decode(request_header_version(api_key, api_version), reader)
    api = apis.get(api_key)
    if api is None or api_version not in api.versions:
        raise UnsupportedRequest(header)
    body = api.request.decode(api_version, reader)
    if reader.remaining and not allow_trailing_bytes:
        raise DecodeError(f"{api.name} v{api_version} request: {reader.remaining} trailing bytes")
    return header, body


def encode_request(header: Struct, body: Struct) -> bytes:
    api = api_for(header.request_api_key)
    version = header.request_api_version
    writer = REQUEST_HEADER.encode(request_header_version(api.key, version), header)
    api.request.encode(version, body, writer)
    return writer.getvalue()


def decode_response(api_key: int, api_version: int, frame) -> tuple[Struct, Struct]:
    """(header, body) of a response to a request sent at `api_key`/`api_version`."""
    api = api_for(api_key)
    reader = Reader(frame)
    header = RESPONSE_HEADER.decode(response_header_version(api_key, api_version), reader)
    body = api.response.decode(api_version, reader)
    if reader.remaining:
        raise DecodeError(f"{api.name} v{api_version} response: {reader.remaining} trailing bytes")
    return header, body


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Struct) -> bytes:
    return encode_response_writer(api_key, api_version, correlation_id, body).getvalue()


def encode_response_writer(api_key: int, api_version: int, correlation_id: int,
                           body: Struct) -> Writer:
    """The encoded response as a `Writer`, whose chunks keep record data uncopied."""
    api = api_for(api_key)
    writer = RESPONSE_HEADER.encode(response_header_version(api_key, api_version),
                                    ResponseHeader(correlation_id=correlation_id))
    api.response.encode(api_version, body, writer)
    return writer
