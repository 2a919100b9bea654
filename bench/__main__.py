"""`python -m bench`: run the benchmarks (currently the wire codec micro-benchmark)."""

from bench.codec import main

main()
