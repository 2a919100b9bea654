"""Record batches decoded into columns (Arrow's buffer layouts) instead of objects.

A consumer that hands records on in bulk (the Spark connector) gets, per batch, flat
buffers for offsets, timestamps, keys, values and headers, decoded by a C routine
(`wire/_columns.c`) without creating a Python object per record. `decode_batch` in
`wire.records` remains the record-by-record form.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from wire._columns import decode_columns
from wire.primitives import DecodeError
from wire.records import LOG_APPEND_TIME_BIT, BatchHeader, records_section


class BatchColumns(NamedTuple):
    header: BatchHeader
    count: int
    offsets: bytes  # int64 per record
    timestamps_us: bytes  # int64 microseconds per record
    key_offsets: bytes  # int32, count + 1 entries
    key_data: bytes
    key_validity: bytes  # bitmap, bit set = key present
    value_offsets: bytes
    value_data: bytes
    value_validity: bytes
    header_offsets: bytes  # int32, count + 1 (with headers only)
    header_key_offsets: bytes
    header_key_data: bytes
    header_value_offsets: bytes
    header_value_data: bytes
    header_value_validity: bytes

    @property
    def header_count(self) -> int:
        return len(self.header_key_offsets) // 4 - 1


def decode_batch_columns(batch, max_decompressed_size: int, with_headers: bool) -> BatchColumns:
    """Columns of one whole batch (CRC checked, decompressed within the bound)."""
    header, data = records_section(batch, max_decompressed_size)
    try:
        buffers = list(decode_columns(data, header.record_count, header.base_offset,
                                      header.base_timestamp, with_headers))
    except ValueError as exc:
        raise DecodeError(f"batch at offset {header.base_offset}: {exc}") from None
    count = len(buffers[0]) // 8
    if header.attributes & LOG_APPEND_TIME_BIT:  # every record carries the append time
        buffers[1] = struct.pack("<q", header.max_timestamp * 1000) * count
    return BatchColumns(header, count, *buffers)
