"""`rowFormat=pulsar-spark`: rows laid out as StreamNative's pulsar-spark connector lays them
out, so a job written for it reads the same columns: a record's fields as top-level columns
(a primitive as `value`), then `__key` (binary), `__topic` (the partition's topic name),
`__messageId` (the id's serialized MessageIdData, byte for byte what `MessageId.toByteArray()`
and the official Python client's `MessageId.serialize()` give),
`__publishTime`, `__eventTime` and `__messageProperties`.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.formats.table import BATCH_SIZE
from magnetar.spark.value_types import SPARK_TIMESTAMP
from magnetar.spark.varint_widths import varint_widths

PROPERTIES = pa.map_(pa.string(), pa.string())
META_FIELDS = [
    pa.field("__key", pa.binary()),
    pa.field("__topic", pa.string()),
    pa.field("__messageId", pa.binary()),
    pa.field("__publishTime", SPARK_TIMESTAMP),
    pa.field("__eventTime", SPARK_TIMESTAMP),
    pa.field("__messageProperties", PROPERTIES),
]


def pulsar_spark_fields(value_type: pa.DataType) -> list[pa.Field]:
    """The row's fields for a `value` of this type (binary for a topic without a schema)."""
    values = list(value_type) if pa.types.is_struct(value_type) else [pa.field("value", value_type)]
    clashing = sorted({f.name for f in values} & {f.name for f in META_FIELDS})
    if clashing:
        raise ValueError(f"rowFormat=pulsar-spark: record field(s) {', '.join(clashing)} clash with its metadata "
                         "columns")
    return values + META_FIELDS


def pulsar_spark_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch of the source's rows (timestamps already Spark's) in pulsar-spark's layout."""
    value = batch.column("value")
    if pa.types.is_struct(value.type):
        values = [pc.struct_field(value, [i]) for i in range(value.type.num_fields)]
        if value.null_count:  # a null record (a null-value message): every field null
            values = [pc.if_else(pc.is_valid(value), column, pa.nulls(len(column), column.type)) for column in values]
    else:
        values = [value]
    meta = [
        pc.cast(batch.column("key"), pa.binary()),
        _partition_topics(batch.column("topic"), batch.column("partition")),
        _message_ids(batch),
        batch.column("publish_time"),
        batch.column("event_time"),
        batch.column("properties"),
    ]
    return pa.RecordBatch.from_arrays(values + meta, schema=pa.schema(pulsar_spark_fields(value.type)))


def _partition_topics(topics: pa.Array, partitions: pa.Array) -> pa.Array:
    suffix = pc.binary_join_element_wise("-partition-", pc.cast(partitions, pa.string()), "")
    partitioned = pc.binary_join_element_wise(topics, suffix, "")
    return pc.if_else(pc.greater_equal(partitions, 0), partitioned, topics)


def _message_ids(batch: pa.RecordBatch) -> pa.Array:
    """Each row's MessageIdData bytes, as the clients serialize a received message's id:
    ledgerId, entryId, then partition, batch_index and batch_size only when set (not -1, -1
    and 0), each a varint field. Built column-wise for all rows at once."""
    def column(name: str) -> np.ndarray:
        return batch.column(name).to_numpy(zero_copy_only=False).astype(np.int64)

    partition, batch_index, batch_size = column("partition"), column("batch_index"), column(BATCH_SIZE)
    return varint_messages([
        (1, column("ledger_id"), None),
        (2, column("entry_id"), None),
        (3, partition, partition >= 0),
        (4, batch_index, batch_index >= 0),
        (6, batch_size, batch_size > 0),
    ])


def varint_messages(fields: list[tuple[int, np.ndarray, np.ndarray | None]]) -> pa.Array:
    """Protobuf messages of varint fields, one a row: (field number, non-negative values, which
    rows have it (None: all)) in field order. Lengths first, then each field's bytes written
    into all rows' places at once, seven bits a pass."""
    rows = len(fields[0][1])
    present = [np.ones(rows, bool) if has is None else has for _number, _values, has in fields]
    values = [v.astype(np.uint64) for _number, v, _has in fields]
    widths = [varint_widths(v) for v in values]
    sizes = [np.where(has, 1 + width, 0) for has, width in zip(present, widths, strict=True)]
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(np.sum(sizes, axis=0), out=offsets[1:])
    out = np.zeros(int(offsets[-1]), np.uint8)
    at = offsets[:-1].copy()
    for (number, _v, _h), has, value, width, size in zip(fields, present, values, widths, sizes, strict=True):
        out[at[has]] = number << 3  # wire type 0: varint
        for k in range(int(width.max(initial=0))):
            writing = has & (width > k)
            more = np.where(width[writing] > k + 1, 0x80, 0).astype(np.uint8)
            out[at[writing] + 1 + k] = ((value[writing] >> np.uint64(7 * k)) & np.uint64(0x7F)).astype(np.uint8) | more
        at += size
    return pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(out)])

