"""Sluice for PySpark: `format("sluice")` reads and writes Kafka topics, batch or streaming.

    import spark_connector
    spark_connector.register(spark)
    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

Options and the row schema follow Spark's built-in Kafka source and sink, so switching
is a change of format name; see `spark_connector.source` and `spark_connector.sink`
(exactly-once writes by default).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource

from spark_connector.arrow import SPARK_SCHEMA, SPARK_SCHEMA_WITH_HEADERS
from spark_connector.options import SluiceOptionError, parse_source_options

__all__ = ["SluiceDataSource", "SluiceOptionError", "register"]


class SluiceDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", self.options.get("includeheaders", "false")))
        return SPARK_SCHEMA_WITH_HEADERS if include.lower() == "true" else SPARK_SCHEMA

    def reader(self, schema):
        from spark_connector.source import SluiceBatchReader
        return SluiceBatchReader(parse_source_options(self.options, batch=True))

    def streamReader(self, schema):
        from spark_connector.source import SluiceStreamReader
        return SluiceStreamReader(parse_source_options(self.options, batch=False))

    def writer(self, schema, overwrite: bool):
        from spark_connector.options import parse_sink_options
        from spark_connector.sink import SluiceBatchWriter
        return SluiceBatchWriter(parse_sink_options(self.options, schema))

    def streamWriter(self, schema, overwrite: bool):
        from spark_connector.options import parse_sink_options
        from spark_connector.sink import SluiceStreamWriter
        return SluiceStreamWriter(parse_sink_options(self.options, schema))


def register(spark) -> None:
    """Make `format("sluice")` available in this Spark session."""
    spark.dataSource.register(SluiceDataSource)
