"""Arrow IPC entries: one Arrow record batch per entry, one row per message.

The payload is an Arrow IPC stream (schema, then one record batch) with a ``value`` binary
column and optional ``key`` (string), ``properties`` (map<string, string>) and
``event_time`` (int64 ms) columns; MessageMetadata says ``entry.format = arrow`` and
``num_messages_in_batch`` = the row count. Row i is message i (batch index i). A columnar
reader gets the columns without a Python object per message; `receive()` gets messages.
Compression is MessageMetadata's, as for any entry, so the payload is the plain stream here.
"""

from __future__ import annotations

import functools
import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.formats.columns import PROPERTIES_TYPE, MessageColumns, int_range
from magnetar.formats.payload import CorruptPayloadError, EntryPayload, PayloadContext, PayloadProcessor
from magnetar.wire.batch import BatchMessage
from magnetar.wire.proto import pulsar_api_pb2 as pb

ARROW_FORMAT = "arrow"

ENTRY_SCHEMA = pa.schema([
    pa.field("value", pa.binary()),
    pa.field("key", pa.string()),
    pa.field("properties", PROPERTIES_TYPE),
    pa.field("event_time", pa.int64()),
])
"""The columns an Arrow entry may have (only ``value`` is required), in their canonical types."""


@functools.lru_cache(maxsize=64)
def _readable_as_is(schema: pa.Schema) -> bool:
    """Whether a read batch of this schema has only known columns, in ENTRY_SCHEMA's order and
    types: then it needs no rebuilding (a third of an entry's decoding). Keyed by schema, which
    writers repeat; equality ignores metadata, which a reader has no use for."""
    names = [field.name for field in ENTRY_SCHEMA if field.name in schema.names]
    return "value" in names and schema.names == names and all(
        schema.field(name).type == ENTRY_SCHEMA.field(name).type for name in names)


def _canonical(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with only the known columns, cast to their canonical types (value required)."""
    if "value" not in batch.schema.names:
        raise ValueError(f"an Arrow entry needs a 'value' column; the batch has {batch.schema.names}")
    unknown = set(batch.schema.names) - set(ENTRY_SCHEMA.names)
    if unknown:
        raise ValueError(f"unknown columns {sorted(unknown)} (an Arrow entry has {ENTRY_SCHEMA.names})")
    fields, columns = [], []
    for field in ENTRY_SCHEMA:
        if field.name in batch.schema.names:
            column = batch.column(field.name)
            if field.name == "event_time" and pa.types.is_timestamp(column.type):
                # Milliseconds as Pulsar's metadata holds them: finer units (Spark's are
                # microseconds) are truncated, time zones kept as they are (epoch-based).
                column = column.cast(pa.timestamp("ms", tz=column.type.tz), safe=False).cast(pa.int64())
            fields.append(field)
            columns.append(column if column.type == field.type else column.cast(field.type))
    return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields))


def encode_arrow_batches(data: pa.Table | pa.RecordBatch, max_rows: int | None = None) -> list[tuple[bytes, int]]:
    """IPC stream payloads, one per record batch (split at `max_rows`), with each one's row count."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    out = []
    for batch in table.to_batches(max_chunksize=max_rows):
        if not batch.num_rows:
            continue
        canonical = _canonical(batch)
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, canonical.schema) as writer:
            writer.write_batch(canonical)
        out.append((sink.getvalue(), canonical.num_rows))
    return out


def read_arrow_entry(payload: memoryview | bytes, expected_rows: int | None) -> pa.RecordBatch:
    """The record batch of an Arrow entry, fully validated (bad offsets must not reach C readers)."""
    reader = pa.ipc.open_stream(pa.py_buffer(payload))
    batches = list(reader)
    if len(batches) != 1:
        raise CorruptPayloadError(ARROW_FORMAT, f"{len(batches)} record batches in one entry, expected 1")
    batch = batches[0]
    batch.validate(full=True)
    if "value" not in batch.schema.names:
        raise CorruptPayloadError(ARROW_FORMAT, f"no 'value' column (columns: {batch.schema.names})")
    if expected_rows is not None and batch.num_rows != expected_rows:
        raise CorruptPayloadError(ARROW_FORMAT, f"{batch.num_rows} rows, MessageMetadata says "
                                                f"num_messages_in_batch={expected_rows}")
    return batch if _readable_as_is(batch.schema) else _canonical(batch)


@functools.lru_cache(maxsize=32)
def _no_properties(count: int) -> pa.Array:
    offsets = pa.py_buffer(bytes(4 * (count + 1)))
    return pa.MapArray.from_arrays(pa.Array.from_buffers(pa.int32(), count + 1, [None, offsets]),
                                   pa.array([], pa.string()), pa.array([], pa.string()), type=PROPERTIES_TYPE)


@functools.lru_cache(maxsize=64)
def _nulls(count: int, kind: pa.DataType) -> pa.Array:
    return pa.nulls(count, kind)


def _column(batch: pa.RecordBatch, name: str, kind: pa.DataType) -> pa.Array:
    index = batch.schema.get_field_index(name)
    return _nulls(batch.num_rows, kind) if index < 0 else batch.column(index)


def arrow_columns(batch: pa.RecordBatch, first_sequence_id: int) -> MessageColumns:
    """The message columns of an Arrow entry's batch, all in C."""
    count = batch.num_rows
    value = batch.column("value")
    if value.null_count:
        value = pc.fill_null(value, b"")  # a null value reads as empty, as Pulsar's null_value messages do
    properties = _column(batch, "properties", PROPERTIES_TYPE) if "properties" in batch.schema.names else (
        _no_properties(count))
    if properties.null_count:
        properties = pc.fill_null(properties, _no_properties(1)[0])
    sequence = int_range(first_sequence_id, count, pa.int64())
    return MessageColumns(int_range(0, count, pa.int32()), _column(batch, "event_time", pa.int64()),
                          _column(batch, "key", pa.string()), properties, value, sequence)


def _single(value: bytes | None, key: str | None, properties: Any, event_time: int | None
            ) -> pb.SingleMessageMetadata:
    single = pb.SingleMessageMetadata(payload_size=len(value or b""))
    if key is not None:
        single.partition_key = key
    if event_time:
        single.event_time = event_time
    if value is None:
        single.null_value = True
    for name, text in properties or ():
        single.properties.add(key=name, value=text or "")
    return single


class ArrowProcessor(PayloadProcessor):
    """Reads entries holding one Arrow record batch (``entry.format = arrow``)."""

    formats = (ARROW_FORMAT,)
    name = ARROW_FORMAT

    def _batch(self, entry: EntryPayload, context: PayloadContext) -> pa.RecordBatch:
        return read_arrow_entry(entry.payload, context.num_messages if context.is_batch else None)

    def messages(self, entry: EntryPayload, context: PayloadContext) -> Sequence[BatchMessage]:
        batch = self._batch(entry, context)
        count = batch.num_rows
        values = batch.column("value").to_pylist()
        keys = _column(batch, "key", pa.string()).to_pylist()
        properties = _column(batch, "properties", PROPERTIES_TYPE).to_pylist()
        times = _column(batch, "event_time", pa.int64()).to_pylist()
        new = tuple.__new__
        return [new(BatchMessage, (_single(*fields), memoryview(fields[0] or b""), i))
                for i, fields in zip(range(count), zip(values, keys, properties, times, strict=True), strict=True)]

    def columns(self, entry: EntryPayload, context: PayloadContext) -> MessageColumns | None:
        return arrow_columns(self._batch(entry, context), entry.metadata.sequence_id)

    def count(self, payload: memoryview) -> int | None:
        return read_arrow_entry(payload, None).num_rows
