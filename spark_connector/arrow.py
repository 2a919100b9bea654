"""Kafka record batches as Arrow batches whose schema is exactly the source's.

Arrays are assembled from the column buffers of `wire.columns` (no Python object per
record); constant columns (topic, partition, timestamp type) are filled in bulk.
"""

from __future__ import annotations

import struct

import pyarrow as pa

from wire.columns import BatchColumns

HEADER_STRUCT = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADER_TYPE = pa.list_(HEADER_STRUCT)
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
SPARK_SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
                "timestamp timestamp, timestampType int")
SPARK_SCHEMA_WITH_HEADERS = SPARK_SCHEMA + ", headers array<struct<key: string, value: binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [pa.field("key", pa.binary()), pa.field("value", pa.binary()),
              pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
              pa.field("offset", pa.int64()), pa.field("timestamp", TIMESTAMP_TYPE),
              pa.field("timestampType", pa.int32())]
    if include_headers:
        fields.append(pa.field("headers", HEADER_TYPE))
    return pa.schema(fields)


def _binary(kind, n: int, validity: bytes, offsets: bytes, data: bytes) -> pa.Array:
    return pa.Array.from_buffers(kind, n, [pa.py_buffer(validity), pa.py_buffer(offsets),
                                           pa.py_buffer(data)])


def _constant_int32(value: int, n: int) -> pa.Array:
    return pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(struct.pack("<i", value) * n)])


def _constant_string(value: str, n: int) -> pa.Array:
    indices = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))])
    return pa.DictionaryArray.from_arrays(indices, pa.array([value], pa.string())).cast(pa.string())


def columns_to_batch(topic: str, partition: int, columns: BatchColumns, include_headers: bool,
                     schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch holding every record of one Kafka batch."""
    n = columns.count
    arrays = [
        _binary(pa.binary(), n, columns.key_validity, columns.key_offsets, columns.key_data),
        _binary(pa.binary(), n, columns.value_validity, columns.value_offsets, columns.value_data),
        _constant_string(topic, n),
        _constant_int32(partition, n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(columns.offsets)]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(columns.timestamps_us)]),
        _constant_int32(columns.header.timestamp_type, n),
    ]
    if include_headers:
        h = columns.header_count
        entries = pa.StructArray.from_arrays(
            [_binary(pa.string(), h, b"\xff" * ((h + 7) // 8), columns.header_key_offsets,
                     columns.header_key_data),
             _binary(pa.binary(), h, columns.header_value_validity, columns.header_value_offsets,
                     columns.header_value_data)],
            fields=list(HEADER_STRUCT))
        offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(columns.header_offsets)])
        arrays.append(pa.ListArray.from_arrays(offsets, entries))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
