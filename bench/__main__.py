"""`python -m bench [--quick]`: every benchmark, each side by side with its baseline."""

import sys

from bench import broker, codec, spark_read, spark_write

quick = "--quick" in sys.argv[1:]
codec.main(["--seconds", "0.5" if quick else "2"])
print()
spark_read.main(["--quick"] if quick else [])
print()
spark_write.main(["--quick"] if quick else [])
print()
broker.main(["--quick"] if quick else [])
