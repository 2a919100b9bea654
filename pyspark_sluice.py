"""`format("sluice")` with no registration call: PySpark registers, in every session, each
installed top-level module named `pyspark_*` that has a `DefaultSource`, under
`DefaultSource.name()`. The connector itself is `spark_connector`."""

from spark_connector import SluiceDataSource as DefaultSource

__all__ = ["DefaultSource"]
