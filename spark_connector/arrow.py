"""Kafka records as Arrow batches whose schema is exactly the source's Spark schema."""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
SPARK_SCHEMA_WITH_HEADERS = SPARK_SCHEMA + ", headers array<struct<key: string, value: binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def records_to_batch(topic: str, partition: int, records: list, include_headers: bool,
                     schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch of decoded `wire.records.Record`s of one partition."""
    n = len(records)
    columns = [
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.DictionaryArray.from_arrays(pa.array([0] * n, pa.int32()), pa.array([topic])).cast(pa.string())
        if n else pa.array([], pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([(r.attributes >> 3) & 1 for r in records], pa.int32()),
    ]
    if include_headers:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                                HEADER_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
