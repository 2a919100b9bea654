"""The Kafka binary protocol without I/O: primitives, message codecs, record batches,
compression, and framing (`wire.frames`, the one frame reader of the broker's listener
and the client). The client is `sluice_client`, the broker `broker`.

The facade most code needs:

    header, body = decode_request(frame)
    frame = encode_request(header, body)
    header, body = decode_response(api_key, api_version, frame)
    frame = encode_response(api_key, api_version, correlation_id, body)

Bodies are built from the schemas in `wire.messages`, e.g. `PRODUCE.request(acks=-1)`.
"""

from wire.error_codes import ErrorCode
from wire.errors import KafkaError
from wire.primitives import DecodeError, EncodeError
from wire.protocol import (RequestHeader, ResponseHeader, UnsupportedRequest, decode_request,
                           decode_response, encode_request, encode_response)

__all__ = [
    "DecodeError", "EncodeError", "ErrorCode", "KafkaError", "RequestHeader", "ResponseHeader",
    "UnsupportedRequest", "decode_request", "decode_response", "encode_request",
    "encode_response",
]
