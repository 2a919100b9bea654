"""The benchmarks run and report (their figures are judged by reading them, not here)."""

from bench.codec import run


def test_codec_benchmark_runs_and_checks_zero_copy():
    results = run(seconds=0.01)
    assert results["produce_request_bytes"] >= 1 << 20
    assert all(results[k] > 0 for k in ("produce_decode_per_s", "produce_encode_per_s",
                                        "fetch_decode_per_s", "fetch_encode_per_s"))
    assert results["machine"]["cores"] >= 1


def test_spark_read_benchmark_runs(spark):
    from bench.spark_read import run as run_spark_read

    results = run_spark_read(rows=16_000, repeats=1, spark=spark)
    assert results["rows"] == 16_000
    assert results["sluice_rows_per_s"] > 0 and results["ceiling_rows_per_s"] > 0
