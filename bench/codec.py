"""Codec micro-benchmark: a 1 MiB Produce request and a multi-partition Fetch response.

Decoding a Produce request yields each partition's records as a view into the frame:
the codec parses headers and lengths, never individual records, so its cost does not
depend on how many records a batch holds. The benchmark checks that claim directly
(the decoded records must be views of the frame) before timing anything.

    python -m bench.codec [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import time

from bench.machine import describe_machine, machine_details
from wire import RequestHeader, decode_request, decode_response, encode_request, encode_response
from wire.messages import FETCH, PRODUCE
from wire.records import build_batch

VALUE_SIZE = 100


def one_mib_of_batches(records_per_batch: int = 1000) -> bytes:
    """Concatenated uncompressed batches of 100-byte values totalling about 1 MiB."""
    batches = []
    size = 0
    offset = 0
    while size < 1 << 20:
        records = [(b"key-%d" % (offset + i), bytes(VALUE_SIZE), (), 1_700_000_000_000 + i)
                   for i in range(records_per_batch)]
        batch = build_batch(records, base_offset=offset)
        batches.append(batch)
        size += len(batch)
        offset += records_per_batch
    return b"".join(batches)


def produce_request(records: bytes, version: int = 9) -> bytes:
    body = PRODUCE.request(acks=-1, timeout_ms=30000, topic_data=[
        PRODUCE.request.TopicProduceData(name="bench", partition_data=[
            PRODUCE.request.PartitionProduceData(index=0, records=records)])])
    header = RequestHeader(request_api_key=PRODUCE.key, request_api_version=version,
                           correlation_id=1, client_id="bench")
    return encode_request(header, body)


def fetch_response(records: bytes, partitions: int = 8, version: int = 12):
    per_partition = records[: len(records) // partitions]
    return FETCH.response(responses=[FETCH.response.FetchableTopicResponse(topic="bench", partitions=[
        FETCH.response.PartitionData(partition_index=p, high_watermark=1_000_000,
                                     last_stable_offset=1_000_000, log_start_offset=0,
                                     records=per_partition)
        for p in range(partitions)])])


def rate(fn, seconds: float) -> float:
    """Calls per second of `fn`, measured for about `seconds`."""
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(20):
            fn()
        calls += 20
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)


def run(seconds: float) -> dict:
    records = one_mib_of_batches()
    frame = produce_request(records)
    _, body = decode_request(frame)
    view = body.topic_data[0].partition_data[0].records
    if not (isinstance(view, memoryview) and view.obj is frame):
        raise SystemExit("decoding copied the records: the zero-copy claim does not hold")

    fetch_version = 12
    fetch = fetch_response(records, version=fetch_version)
    fetch_frame = encode_response(FETCH.key, fetch_version, 1, fetch)
    results = {
        "produce_request_bytes": len(frame),
        "produce_decode_per_s": rate(lambda: decode_request(frame), seconds),
        "produce_encode_per_s": rate(lambda: encode_request(*decode_request(frame)), seconds),
        "fetch_response_bytes": len(fetch_frame),
        "fetch_decode_per_s": rate(lambda: decode_response(FETCH.key, fetch_version, fetch_frame),
                                   seconds),
        "fetch_encode_per_s": rate(lambda: encode_response(FETCH.key, fetch_version, 1, fetch),
                                   seconds),
    }
    results["machine"] = machine_details()
    return results


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="time per measurement")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run(args.seconds)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    mib = 1 << 20
    print(f"machine: {describe_machine()}")
    for kind in ("produce", "fetch"):
        size = results[f"{kind}_{'request' if kind == 'produce' else 'response'}_bytes"]
        for op in ("decode", "encode"):
            per_s = results[f"{kind}_{op}_per_s"]
            print(f"{kind:8} {op}  {size / mib:5.2f} MiB frame: {per_s:10.0f}/s  "
                  f"{per_s * size / mib:10.0f} MiB/s")


if __name__ == "__main__":
    main()
