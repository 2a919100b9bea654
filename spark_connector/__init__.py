"""Sluice for PySpark: `format("sluice")` reads and writes Kafka topics, batch or streaming.

    df = (spark.readStream.format("sluice")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events").load())

PySpark finds the format by itself where Sluice is installed (`pyspark_sluice`);
`register(spark)` also adds the save and output modes of Spark's Kafka sink (see
`spark_connector.modes`). Options and the row schema follow Spark's built-in Kafka
source and sink, so switching is a change of format name; see `spark_connector.options`, `spark_connector.source` and
`spark_connector.sink` (exactly-once writes by default). Options that have no effect
are logged as warnings by the `spark_connector` logger, in the Python worker that reads
them: on the driver's stderr, or in `spark.tvf.python_worker_logs()` when
`spark.sql.pyspark.worker.logging.enabled` is true.
"""

from __future__ import annotations

import json
import logging

from pyspark.sql.datasource import DataSource

from spark_connector import modes
from spark_connector.arrow import SPARK_SCHEMA, SPARK_SCHEMA_WITH_HEADERS
from spark_connector.errors import message_first
from spark_connector.options import SluiceOptionError, parse_sink_options, parse_source_options

__all__ = ["SluiceDataSource", "SluiceOptionError", "offsets_behind_latest", "register"]

log = logging.getLogger("spark_connector")


def _warn(messages) -> None:
    for message in messages:
        log.warning("sluice: %s", message)


@message_first
class SluiceDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "sluice"

    def schema(self) -> str:
        """Spark calls this at load(), so option mistakes surface there. Whether the query
        is batch or streaming is not known yet: the few checks that depend on it (e.g.
        endingOffsets in a stream) wait for reader() or streamReader()."""
        options = parse_source_options(self.options, batch=None)
        _warn(options.warnings)
        return SPARK_SCHEMA_WITH_HEADERS if options.include_headers else SPARK_SCHEMA

    def reader(self, schema):
        from spark_connector.source import SluiceBatchReader
        options = parse_source_options(self.options, batch=True)
        if options.streaming_only:
            _warn([f"option '{name}' applies to streaming queries only; this batch query ignores it"
                   for name in options.streaming_only])
        return SluiceBatchReader(options)

    def streamReader(self, schema):
        from spark_connector.source import SluiceStreamReader
        return SluiceStreamReader(self.options)

    def writer(self, schema, overwrite: bool):
        from spark_connector.sink import SluiceBatchWriter
        if overwrite:
            raise SluiceOptionError(
                "save mode Overwrite is not allowed for format(\"sluice\"), as for Spark's Kafka sink: "
                "records are only ever appended to a topic. Allowed save modes are Append and "
                "ErrorIfExists (the default), which both append")
        options = parse_sink_options(self.options, schema)
        _warn(options.warnings)
        return SluiceBatchWriter(options)

    def streamWriter(self, schema, overwrite: bool):
        """`overwrite` is set in Complete mode: every trigger's whole result table is
        appended, as Spark's Kafka sink appends it."""
        from spark_connector.sink import SluiceStreamWriter
        options = parse_sink_options(self.options, schema)
        _warn(options.warnings)
        return SluiceStreamWriter(options)


def offsets_behind_latest(source_progress: dict) -> dict[str, float]:
    """Spark's Kafka source metrics `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
    `avgOffsetsBehindLatest`, from one source's entry of a streaming progress
    (`query.lastProgress["sources"][0]`): per partition, the latest offset the source saw
    minus the batch's end offset. Python sources cannot report metrics themselves (PySpark's
    streaming source runner has no call for them). Empty when the progress has no
    latestOffset yet."""
    latest, end = (_offsets(source_progress.get(key)) for key in ("latestOffset", "endOffset"))
    if not latest or not end:
        return {}
    behind = [offset - end.get(topic, {}).get(partition, 0)
              for topic, partitions in latest.items() for partition, offset in partitions.items()]
    if not behind:
        return {}
    return {"minOffsetsBehindLatest": min(behind), "maxOffsetsBehindLatest": max(behind),
            "avgOffsetsBehindLatest": sum(behind) / len(behind)}


def _offsets(value) -> dict | None:
    """A progress offset: Spark gives JSON text, or the object when it parsed the text."""
    return json.loads(value) if isinstance(value, str) else value


def register(spark) -> None:
    """Make `format("sluice")` available in this Spark session; its batch writes take the
    default save mode as Spark's Kafka sink does, and its streams refuse Update mode at
    start() (see `spark_connector.modes`)."""
    spark.dataSource.register(SluiceDataSource)
    modes.install(spark)
