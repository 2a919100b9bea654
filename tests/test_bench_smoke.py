"""The benchmarks run and report (their figures are judged by reading them, not here)."""

from bench.codec import run


def test_codec_benchmark_runs_and_checks_zero_copy():
    results = run(seconds=0.01)
    assert results["produce_request_bytes"] >= 1 << 20
    assert all(results[k] > 0 for k in ("produce_decode_per_s", "produce_encode_per_s",
                                        "fetch_decode_per_s", "fetch_encode_per_s"))
    assert results["machine"]["cores"] >= 1
