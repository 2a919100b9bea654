"""The inter-broker and election APIs: schemas the codec knows, APIs the broker does not serve.

LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6), ControlledShutdown (7),
ElectLeaders (43) and AlterPartition (56) are in wire/messages.py for the cluster mode of
issue 17. Here:

- Each request and response at its lowest and its highest version, in the non-flexible and
  the flexible encodings (AlterPartition is flexible from v0), with its nested structs,
  against bytes written out by hand from Kafka's definitions (encode gives them, decode
  gives the message back, re-encoding gives them again). ControlledShutdown v0 is framed
  with request header v0, which has no client id. (test_codec_roundtrip covers every
  version with generated bodies; test_schema_reference checks the tables against Kafka's.)
- Knowing a schema serves nothing: ApiVersions lists only what broker/handlers serves, the
  wire client negotiates none of them, and a request at one of them is refused unread and
  the connection closed with a log line, as for an API key the codec does not know.
"""

from __future__ import annotations

import logging
import uuid

import pytest

import broker.server
from broker import handlers
from broker.embedded import EmbeddedBroker
from broker.server import CloseConnection
from broker.throttled_log import ThrottledLog
from tests.test_broker_failures import (api_versions_body, assert_closed_by_broker, connect,
                                        roundtrip)
from wire import RequestHeader, UnsupportedRequest, decode_request, encode_request
from wire.client import CLIENT_VERSIONS, Client
from wire.messages import (ALTER_PARTITION, API_VERSIONS, APIS, CONTROLLED_SHUTDOWN,
                           ELECT_LEADERS, LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA)

INTER_BROKER = [LEADER_AND_ISR, STOP_REPLICA, UPDATE_METADATA, CONTROLLED_SHUTDOWN, ELECT_LEADERS,
                ALTER_PARTITION]
TOPIC_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
ID = TOPIC_ID.hex  # its 16 bytes, in the hex strings below


def hexbytes(text: str) -> bytes:
    """Bytes from hex written with spaces, `|` between fields and `#` comments to line end."""
    lines = (line.split("#")[0] for line in text.splitlines())
    return bytes.fromhex("".join(lines).replace("|", ""))


# -- known, not served ------------------------------------------------------------------------------

def test_none_is_served_listed_or_negotiated():
    for api in INTER_BROKER:
        assert APIS[api.key] is api
        assert api.key not in handlers.HANDLERS
        assert api.key not in handlers.SERVED_APIS
        assert api.key not in handlers.MIN_VERSIONS and api.key not in handlers.MAX_VERSIONS
        assert api.key not in CLIENT_VERSIONS
    assert sorted(handlers.SERVED_APIS) == sorted(handlers.HANDLERS)


def request_frame(api, version: int, correlation_id: int) -> bytes:
    header = RequestHeader(request_api_key=api.key, request_api_version=version,
                           correlation_id=correlation_id, client_id="controller")
    return encode_request(header, api.request())


@pytest.mark.parametrize("api", INTER_BROKER, ids=lambda api: api.name)
def test_the_served_apis_refuse_them_unread(api):
    for version in (api.versions.lo, api.versions.hi):
        frame = request_frame(api, version, 9)
        assert decode_request(frame)[0].request_api_key == api.key  # the codec knows it
        with pytest.raises(UnsupportedRequest) as info:
            decode_request(frame, apis=handlers.SERVED_APIS)
        assert info.value.header.correlation_id == 9
        assert info.value.header.client_id == ("" if (api, version) == (CONTROLLED_SHUTDOWN, 0)
                                               else "controller")
        with pytest.raises(UnsupportedRequest):  # the body is not read: garbage is no different
            decode_request(frame + b"\xff" * 8, apis=handlers.SERVED_APIS)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("inter-broker") / "data") as running:
        yield running


def test_api_versions_lists_only_the_served_apis(embedded):
    with connect(embedded.broker.server.port) as sock:
        response = roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 1)
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == {key: (handlers.MIN_VERSIONS[key], handlers.MAX_VERSIONS[key])
                      for key in handlers.HANDLERS}
    assert not listed.keys() & {api.key for api in INTER_BROKER}
    with Client(embedded.bootstrap_servers) as client:
        negotiated = client.negotiated_versions()
    assert not negotiated.keys() & {api.key for api in INTER_BROKER}


def test_a_request_at_one_closes_the_connection_with_a_log_line(embedded, caplog, monkeypatch):
    # A fresh throttle: the broker logs at most 5 closings per 10 s, and other tests may
    # have spent them.
    monkeypatch.setattr(broker.server, "_log_closing",
                        ThrottledLog(broker.server.log, logging.WARNING, burst=100))
    caplog.set_level(logging.WARNING, logger="sluice.broker")
    port = embedded.broker.server.port
    sent = []
    for api in INTER_BROKER:
        for version in (api.versions.lo, api.versions.hi):
            frame = request_frame(api, version, 5)
            with connect(port) as sock:
                sock.sendall(len(frame).to_bytes(4, "big") + frame)
                assert_closed_by_broker(sock)
            sent.append(f"unsupported API key {api.key} version {version}")
    # the broker still serves
    with connect(port) as sock:
        assert roundtrip(sock, API_VERSIONS, 3, api_versions_body(), 2).error_code == 0
    logged = [record.getMessage() for record in caplog.records if record.name == "sluice.broker"]
    for what in sent:
        assert any(what in line and line.startswith("closing") for line in logged), (what, logged)


def test_handle_frame_raises_close_connection(embedded):
    """The dispatcher's own word: CloseConnection, whose message is the line logged."""
    with pytest.raises(CloseConnection, match=r"unsupported API key 4 version 7 \(client 'controller'\)"):
        embedded.broker.handle_frame(bytearray(request_frame(LEADER_AND_ISR, 7, 1)), "127.0.0.1")
