"""The request/response facade: header versions, zero-copy records, unsupported requests."""

import pytest

from wire import DecodeError, RequestHeader, UnsupportedRequest, decode_request, encode_request
from wire.messages import API_VERSIONS, FETCH, PRODUCE
from wire.primitives import Writer
from wire.protocol import decode_response, encode_response, encode_response_writer


def produce_frame(records: bytes, version: int = 9) -> bytes:
    body = PRODUCE.request(acks=-1, timeout_ms=1000, topic_data=[
        PRODUCE.request.TopicProduceData(name="t", partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=records)])])
    header = RequestHeader(request_api_key=0, request_api_version=version, correlation_id=7,
                           client_id="c")
    return encode_request(header, body)


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_produce_records_decode_as_a_view_into_the_frame(version):
    records = bytes(range(256)) * 4096  # 1 MiB, opaque to the codec
    frame = bytearray(produce_frame(records, version))
    _, body = decode_request(frame)
    view = body.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view.obj is frame  # no copy was made
    assert view == records


def test_unknown_api_key_reports_its_header():
    frame = Writer()
    for v in (999, 0, 42):
        frame.int16(v) if v != 42 else frame.int32(v)
    frame.string("client")
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame.getvalue())
    header = info.value.header
    assert (header.request_api_key, header.correlation_id, header.client_id) == (999, 42, "client")


def test_future_api_versions_request_is_unsupported_but_answerable():
    # A client newer than us sends ApiVersions v9 with a flexible (v2) header.
    w = Writer()
    w.int16(API_VERSIONS.key), w.int16(9), w.int32(5), w.string("c"), w.uvarint(0)
    w.raw(b"\x00\x00")  # whatever the future body holds
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(w.getvalue())
    assert info.value.header.correlation_id == 5
    assert isinstance(info.value, DecodeError)


def test_trailing_bytes_are_refused():
    with pytest.raises(DecodeError, match="trailing"):
        decode_request(produce_frame(b"") + b"\x00")


def test_api_versions_response_header_has_no_tagged_fields_at_any_version():
    body = API_VERSIONS.response(api_keys=[API_VERSIONS.response.ApiVersion(api_key=0, max_version=11)])
    for version in range(0, 5):
        frame = encode_response(API_VERSIONS.key, version, 1234, body)
        assert frame[:4] == (1234).to_bytes(4, "big")
        header, decoded = decode_response(API_VERSIONS.key, version, frame)
        assert header.correlation_id == 1234 and decoded.api_keys[0].max_version == 11


def test_large_fetch_records_stay_separate_chunks_when_encoding():
    records = b"\x01" * 100_000
    body = FETCH.response(responses=[FETCH.response.FetchableTopicResponse(topic="t", partitions=[
        FETCH.response.PartitionData(partition_index=0, high_watermark=10, records=records)])])
    chunks = encode_response_writer(FETCH.key, 11, 1, body).getchunks()
    assert any(chunk is records for chunk in chunks)
