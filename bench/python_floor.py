"""The least a micro-batch costs when both ends are PySpark Python data sources.

`format("sluice_floor")` reads nothing from anywhere: each micro-batch gets the rows a
given rate would have produced since the last one (100-byte values, two partitions),
generated in memory by the read tasks; its sink consumes them and commits nothing. What
Spark's micro-batches take with it is what any Python source and sink pay before
reading or writing a record: the Python workers each task needs, the Arrow hops between
them and the JVM, the driver's calls into Python for offsets, partitions and the
commit. bench.spark_latency sets it beside Spark's own Kafka connector (all JVM).
"""

from __future__ import annotations

import time

import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceStreamReader, DataSourceStreamWriter,
                                    InputPartition, WriterCommitMessage)

NAME = "sluice_floor"
PARTITIONS = 2


class _Rows(InputPartition):
    def __init__(self, count: int, value_bytes: int):
        self.count = count
        self.value_bytes = value_bytes


class _Reader(DataSourceStreamReader):
    def __init__(self, rate: int, value_bytes: int):
        self.rate = rate
        self.value_bytes = value_bytes

    def initialOffset(self) -> dict:
        return {"ms": time.time_ns() // 1_000_000}

    def latestOffset(self) -> dict:
        return {"ms": time.time_ns() // 1_000_000}

    def partitions(self, start: dict, end: dict) -> list[_Rows]:
        rows = max(0, (end["ms"] - start["ms"]) * self.rate // 1000)
        return [_Rows(rows // PARTITIONS + (1 if i < rows % PARTITIONS else 0), self.value_bytes)
                for i in range(PARTITIONS)]

    def read(self, partition: _Rows):
        n = partition.count
        if n:
            yield pa.RecordBatch.from_arrays(
                [pa.array([b"%d" % i for i in range(n)], pa.binary()),
                 pa.array([b"x" * partition.value_bytes] * n, pa.binary())], names=["key", "value"])

    def commit(self, end: dict) -> None:
        pass


class _Writer(DataSourceStreamWriter):
    def write(self, iterator) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass


class FloorDataSource(DataSource):
    """Options: `rate` (rows per second, default 1,000), `valueBytes` (default 100)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "key binary, value binary"

    def streamReader(self, schema) -> _Reader:
        return _Reader(int(self.options.get("rate", 1000)), int(self.options.get("valueBytes", 100)))

    def streamWriter(self, schema, overwrite: bool) -> _Writer:
        return _Writer()
