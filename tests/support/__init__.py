"""What the tests (and the benchmarks) share."""
