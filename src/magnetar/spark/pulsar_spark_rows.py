"""`rowFormat=pulsar-spark`: rows laid out as StreamNative's pulsar-spark connector lays them
out, so a job written for it reads the same columns: a record's fields as top-level columns
(a primitive as `value`), then `__key` (binary), `__topic` (the partition's topic name),
`__messageId` (the id's serialized MessageIdData, as `MessageId.toByteArray()` gives it),
`__publishTime`, `__eventTime` and `__messageProperties`.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.spark.value_types import SPARK_TIMESTAMP
from magnetar.wire.proto import pulsar_api_pb2 as pb

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
    """Each row's MessageIdData bytes (partition and batch index only when set, as Pulsar's
    MessageIdImpl writes them)."""
    out = []
    columns = (batch.column(name).to_pylist() for name in ("ledger_id", "entry_id", "partition", "batch_index"))
    for ledger_id, entry_id, partition, batch_index in zip(*columns, strict=True):
        message_id = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)
        if partition >= 0:
            message_id.partition = partition
        if batch_index >= 0:
            message_id.batch_index = batch_index
        out.append(message_id.SerializeToString())
    return pa.array(out, pa.binary())
