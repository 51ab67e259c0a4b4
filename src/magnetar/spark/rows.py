"""Stored entries → Arrow record batches with the source's row schema (one row per message).

Both ways of reaching a topic (the data directory, the Pulsar protocol) end up holding raw
entries as the broker stored them, so both hand them to `RowBuilder` and the rows are the
same either way. A batch of the common shape costs Python only a guess of where each
message starts; cutting it, parsing its metadata and proving the guess happen in C, once per
batch (`columns_of_batch`), which keeps a core near two million rows/s. Anything else is
decoded message by message into flat `array.array` buffers, with the same rows.
"""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.wire.batch import (
    BatchMetadata,
    Buffer,
    batch_header_offsets,
    decode_batch,
    decompressed_payload,
    metadata_columns,
)
from magnetar.wire.entry import parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
"""Refuse to inflate a payload beyond this (a corrupt `uncompressed_size` must not OOM a worker)."""

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""Emit a record batch once its entries hold this much, whatever the row count: 65536 rows of
1 MB messages would otherwise be 64 GB in one batch (and overflow Arrow's 32-bit offsets)."""

COLUMNS: tuple[tuple[str, pa.DataType], ...] = (
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("ledger_id", pa.int64()),
    ("entry_id", pa.int64()),
    ("batch_index", pa.int32()),
    ("index", pa.int64()),
    ("broker_time", pa.int64()),
    ("publish_time", pa.int64()),
    ("event_time", pa.int64()),
    ("key", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())),
    ("value", pa.binary()),
    ("producer_name", pa.string()),
    ("sequence_id", pa.int64()),
)
ARROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind in COLUMNS])


def spark_schema() -> object:
    """The Spark StructType of the rows (imported lazily: workers building rows need no JVM types)."""
    from pyspark.sql.types import (  # noqa: PLC0415
        BinaryType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    spark_types = {
        pa.string(): StringType(),
        pa.int32(): IntegerType(),
        pa.int64(): LongType(),
        pa.binary(): BinaryType(),
    }
    fields = [
        StructField(name, MapType(StringType(), StringType()) if name == "properties" else spark_types[kind])
        for name, kind in COLUMNS
    ]
    return StructType(fields)


SCHEMA_DDL = (
    "topic string, partition int, ledger_id bigint, entry_id bigint, batch_index int, index bigint, "
    "broker_time bigint, publish_time bigint, event_time bigint, key string, properties map<string,string>, "
    "value binary, producer_name string, sequence_id bigint"
)


@dataclass(frozen=True, slots=True)
class RowFilter:
    """Row-level bounds a reader applies exactly (pushed filters, offsets): all inclusive, None = open."""

    index_min: int | None = None
    index_max: int | None = None
    time_min: int | None = None
    time_max: int | None = None
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def active(self) -> bool:
        return any(v is not None for v in (self.index_min, self.index_max, self.time_min, self.time_max)) or bool(
            self.properties
        )


_event_time = operator.attrgetter("event_time")
_sequence_id = operator.attrgetter("sequence_id")
_properties = operator.attrgetter("properties")
_key = operator.attrgetter("partition_key")


def _entry_rules_out(metadata: pb.MessageMetadata, wanted: tuple[tuple[str, str], ...]) -> bool:
    """Whether MessageMetadata alone proves that no message of the entry matches `wanted`.

    A non-batched entry's properties are its message's. A batch's MessageMetadata properties
    are batch-level properties (PIP-191): they hold for every message in it, so a key there with
    another value rules the whole entry out; an absent key proves nothing (C++ batches carry
    none), and those entries are decoded and filtered row by row.
    """
    if not wanted:
        return False
    present = {kv.key: kv.value for kv in metadata.properties}
    batched = metadata.HasField("num_messages_in_batch")
    for key, value in wanted:
        found = present.get(key)
        if found is None:
            if not batched:
                return True
        elif found != value:
            return True
    return False


def _int_column(values: array, kind: pa.DataType) -> pa.Array:
    """An int column straight from its buffer, no per-value conversion."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def _zero_as_null(column: pa.Array) -> pa.Array:
    """event_time 0 means unset in Pulsar (the client's getEventTime() is 0 then): null here."""
    zero = pc.equal(column, 0)
    if not pc.any(zero).as_py():
        return column
    return pc.if_else(zero, pa.scalar(None, column.type), column)


def _binary_column(parts: list, kind: pa.DataType) -> pa.Array:
    offsets = array("i", [0])
    offsets.extend(itertools.accumulate(map(len, parts)))
    if offsets[-1] >= 2**31:
        return pa.array([bytes(p) for p in parts], kind)
    return pa.Array.from_buffers(kind, len(parts), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(parts))])


class EntryColumnsOfRows(NamedTuple):
    """The columns whose value is the entry's, repeated for each of its rows."""

    ledger_id: pa.Array
    entry_id: pa.Array
    index: pa.Array
    broker_time: pa.Array
    publish_time: pa.Array
    producer_name: pa.Array


_row_numbers = pa.array([], pa.int64())


def _first_rows(count: int) -> pa.Array:
    """0..count-1 (a slice of one array that only grows: flushes are all about the same size)."""
    global _row_numbers  # noqa: PLW0603
    if len(_row_numbers) < count:
        _row_numbers = pa.array(range(max(count, 2 * len(_row_numbers))), pa.int64())
    return _row_numbers.slice(0, count)


class _EntryColumns:
    """One value per entry, repeated per row only at the end, in C (run-end decoding)."""

    def __init__(self) -> None:
        self.row_ends = array("i")
        self.ledger_id = array("q")
        self.entry_id = array("q")
        self.publish_time = array("q")
        self.producer_name: list[str] = []
        self.index_shift: list[int | None] = []
        """First PIP-70 index minus the entry's first row: a row's index is this plus its row number."""
        self.broker_time: list[int | None] = []

    def add(
        self,
        ledger_id: int,
        entry_id: int,
        metadata: pb.MessageMetadata,
        bem: pb.BrokerEntryMetadata | None,
        first_row: int,
        count: int,
    ) -> None:
        self.row_ends.append(first_row + count)
        self.ledger_id.append(ledger_id)
        self.entry_id.append(entry_id)
        self.publish_time.append(metadata.publish_time)
        self.producer_name.append(metadata.producer_name)
        has_index = bem is not None and bem.HasField("index")
        self.index_shift.append(bem.index - count + 1 - first_row if has_index else None)
        self.broker_time.append(bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None)

    def columns(self, rows: int) -> EntryColumnsOfRows:
        ends = _int_column(self.row_ends, pa.int32())

        def per_row(values: pa.Array) -> pa.Array:
            return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, values))

        index = per_row(pa.array(self.index_shift, pa.int64()))
        if index.null_count < rows:
            index = pc.add(index, _first_rows(rows))
        return EntryColumnsOfRows(
            per_row(_int_column(self.ledger_id, pa.int64())),
            per_row(_int_column(self.entry_id, pa.int64())),
            index,
            per_row(pa.array(self.broker_time, pa.int64())),
            per_row(_int_column(self.publish_time, pa.int64())),
            per_row(pa.array(self.producer_name, pa.string())),
        )


def _map_column(offsets: array, keys: list[str], values: list[str]) -> pa.Array:
    count = len(offsets) - 1
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), count + 1, [None, pa.py_buffer(offsets)]),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=ARROW_SCHEMA.field("properties").type,
    )


def _key_column(keys: Iterable[str]) -> pa.Array:
    """An empty key reads as null: presence would cost a HasField per message."""
    column = [key or None for key in keys]
    if column.count(None) == len(column):
        return pa.nulls(len(column), pa.string())
    return pa.array(column, pa.string())


class MessageColumns(NamedTuple):
    """The per-message columns of a run of rows, in schema order (event_time: 0 = unset)."""

    batch_index: pa.Array
    event_time: pa.Array
    key: pa.Array
    properties: pa.Array
    value: pa.Array
    sequence_id: pa.Array


class _Layout:
    """Take-indices over a batch cut into 4 segments per message, shared by batches of one size.

    Segments of message i: its u32 size's three high bytes (4i), low byte (4i+1), its
    SingleMessageMetadata (4i+2), its value (4i+3); segment 4n is a trailing field-1 tag byte.
    One take in C regroups them, without a Python step per message, into: all high bytes,
    all metadata back to back, the metadata framed as `MetadataList`, then all values.
    """

    def __init__(self, count: int) -> None:
        def every(start: int) -> array:
            return array("i", range(start, 4 * count, 4))

        framed = array("i", [4 * count]) * (3 * count)
        framed[1::3] = every(1)
        framed[2::3] = every(2)
        self.regroup = pa.array(every(0) + every(2) + framed + every(3), pa.int32())
        self.metadata_from = count
        self.framed_from = 2 * count
        self.values_from = 5 * count
        order = array("i", [0]) * (4 * count)
        for part in range(4):
            order[part::4] = array("i", range(part * count, (part + 1) * count))
        self.interleave = pa.array(itertools.chain(order, (4 * count, 4 * count + 1)), pa.int32())
        self.batch_index = pa.array(range(count), pa.int32())
        self.zeros = bytes(3 * count)
        self.no_properties = _map_column(array("i", bytes(4 * (count + 1))), [], [])


@functools.lru_cache(maxsize=64)
def _layout(count: int) -> _Layout:
    return _Layout(count)


def _data(column: pa.Array, start: int, stop: int) -> memoryview:
    """The bytes of elements [start, stop) of a binary column (offset 0), end to end."""
    _, offsets, data = column.buffers()
    first, last = _I32.unpack_from(offsets, 4 * start)[0], _I32.unpack_from(offsets, 4 * stop)[0]
    # Arrow exports its buffers as signed chars: cast, or comparing with bytes fails past 127.
    return memoryview(b"") if data is None else memoryview(data).cast("B")[first:last]


_I32 = struct.Struct("<i")
_THREE = pa.scalar(3, pa.int32())
_FOUR = pa.scalar(4, pa.int32())


def _segments(payload: bytes, heads: list[int], layout: _Layout) -> pa.Array:
    """`payload` + one field-1 tag byte as the binary array of `_Layout`'s segments."""
    data = pa.py_buffer(payload)
    end = len(payload) - 1
    starts = _int_column(array("i", heads), pa.int32())
    low_byte = pc.add(starts, _THREE)
    metadata = pc.add(starts, _FOUR)
    sizes = pc.take(pa.Array.from_buffers(pa.uint8(), len(payload), [None, data]), low_byte)
    boundaries = pa.concat_arrays(
        [starts, low_byte, metadata, pc.add(metadata, sizes), pa.array([end, end + 1], pa.int32())]
    )
    offsets = pc.take(boundaries, layout.interleave)
    return pa.Array.from_buffers(pa.binary(), len(offsets) - 1, [None, offsets.buffers()[1], data])


def _int64(values: Sequence[int]) -> pa.Array:
    # A slice first: a protobuf repeated field copies itself to a list faster than array() iterates it.
    return _int_column(array("q", values[:]), pa.int64())


def _sequence_column(found: Sequence[int], first: int, count: int) -> pa.Array | None:
    """Absent in every message: the first id plus the batch index, as the Java client reads it."""
    if not found:
        return pa.array(range(first, first + count), pa.int64())
    if len(found) == count:
        return _int64(found)
    return None


def _properties_column(batch: BatchMetadata, layout: _Layout) -> pa.Array:
    """Properties are read per message only when some message has one."""
    flat = batch.columns.properties
    if not flat:
        return layout.no_properties
    offsets = array("i", [0])
    offsets.extend(itertools.accumulate(map(len, map(_properties, batch.messages.messages))))
    return _map_column(offsets, [kv.key for kv in flat], [kv.value for kv in flat])


def _per_message(batch: BatchMetadata, name: str, count: int) -> Sequence:
    """A field's values in message order: the column when every message has it, else one by one."""
    column = getattr(batch.columns, name)
    if len(column) == count:
        return column
    if not column:
        return ()
    return list(map(operator.attrgetter(name), batch.messages.messages))


def columns_of_batch(metadata: pb.MessageMetadata, payload: Buffer, count: int) -> MessageColumns | None:
    """A batch's message columns with no Python step per message beyond guessing its offsets.

    None when the batch is not of the common shape `batch_header_offsets` guesses, or its
    metadata repeats or reorders fields (then columns could pair values with the wrong
    message); the caller decodes it message by message instead, with the same result.
    """
    tagged = b"".join((payload, b"\n"))
    heads = batch_header_offsets(tagged, count, len(payload))
    if heads is None:
        return None
    layout = _layout(count)
    regrouped = pc.take(_segments(tagged, heads, layout), layout.regroup)
    batch = metadata_columns(
        _data(regrouped, layout.metadata_from, layout.framed_from),
        _data(regrouped, layout.framed_from, layout.values_from),
        count,
    )
    if batch is None or not batch.canonical or _data(regrouped, 0, layout.metadata_from) != layout.zeros:
        return None
    values = regrouped.slice(layout.values_from)
    sizes = batch.columns.payload_size
    if len(sizes) != count or not _int_column(array("i", sizes[:]), pa.int32()).equals(pc.binary_length(values)):
        return None
    sequence = _sequence_column(batch.columns.sequence_id, metadata.sequence_id, count)
    if sequence is None:
        return None
    event_times = _per_message(batch, "event_time", count)
    keys = _per_message(batch, "partition_key", count)
    return MessageColumns(
        layout.batch_index,
        _int64(event_times) if event_times else pa.nulls(count, pa.int64()),
        _key_column(keys) if keys else pa.nulls(count, pa.string()),
        _properties_column(batch, layout),
        values,
        sequence,
    )


class RowBuilder:
    """Accumulates the messages of entries of one topic partition, then emits a RecordBatch.

    Per-entry columns (ids, times, producer) grow by repetition; per-message columns come in
    runs: a batch of the common shape arrives as ready Arrow columns (`columns_of_batch`),
    anything else is decoded message by message into lists that become a run when sealed.
    """

    def __init__(self, topic: str, partition: int, row_filter: RowFilter | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.filter = row_filter or RowFilter()
        self.entries_decoded = 0
        self.entries_skipped = 0
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self.bytes = 0
        self._entries = _EntryColumns()
        self._runs: list[MessageColumns] = []
        self._reset_pending()

    def _reset_pending(self) -> None:
        self._pending = 0
        self._batch_index = array("i")
        self._event_time = array("q")
        self._keys: list[str] = []
        self._prop_offsets = array("i", [0])
        self._prop_keys: list[str] = []
        self._prop_values: list[str] = []
        self._values: list = []
        self._sequence_id = array("q")

    def add(self, ledger_id: int, entry_id: int, entry: bytes | memoryview) -> None:
        """Decode one stored entry (prefix, checksum, metadata, maybe a compressed batch)."""
        parsed = parse_entry(entry)
        metadata = parsed.metadata
        if self.filter.properties and _entry_rules_out(metadata, self.filter.properties):
            self.entries_skipped += 1
            return
        self.entries_decoded += 1
        count = self._add_messages(metadata, parsed.payload)
        if not count:
            return
        self._entries.add(ledger_id, entry_id, metadata, parsed.broker_entry_metadata, self.rows, count)
        self.rows += count
        self.bytes += max(len(entry), metadata.uncompressed_size)

    def _add_messages(self, metadata: pb.MessageMetadata, payload: memoryview) -> int:
        """The entry's per-message columns; returns how many messages it holds."""
        if metadata.encryption_keys:
            # Only the producer's key can open it: one row carrying the ciphertext as stored.
            self._add_whole_entry(metadata, payload)
            return 1
        payload = decompressed_payload(metadata, payload, max_size=MAX_UNCOMPRESSED_BYTES)
        if not metadata.HasField("num_messages_in_batch"):
            self._add_whole_entry(metadata, memoryview(payload))
            return 1
        count = metadata.num_messages_in_batch
        run = columns_of_batch(metadata, payload, count) if count else None
        if run is None:
            return self._add_batch(metadata, decode_batch(payload, count))
        self._seal()
        self._runs.append(run)
        return count

    def _add_batch(self, metadata: pb.MessageMetadata, messages: list) -> int:
        # Column by column with map()/attrgetter rather than one Python loop over messages:
        # each pass runs in C, which halves the per-message cost.
        count = len(messages)
        if not count:
            return 0
        self._pending += count
        smms, values, _ = zip(*messages, strict=True)
        self._batch_index.extend(range(count))
        self._values.extend(values)
        self._event_time.extend(map(_event_time, smms))
        self._keys.extend(map(_key, smms))
        sequences = list(map(_sequence_id, smms))
        if 0 in sequences:  # absent reads as 0: Java's fallback is the batch's first id + batch index
            first = metadata.sequence_id
            sequences = [smm.sequence_id if smm.HasField("sequence_id") else first + i for i, smm in enumerate(smms)]
        self._sequence_id.extend(sequences)
        property_lists = list(map(_properties, smms))
        counts = list(map(len, property_lists))
        offsets = self._prop_offsets
        if any(counts):
            for kvs in property_lists:
                for kv in kvs:
                    self._prop_keys.append(kv.key)
                    self._prop_values.append(kv.value)
        offsets.extend(itertools.accumulate(counts, initial=offsets[-1]))
        offsets.pop(len(offsets) - count - 1)
        return count

    def _add_whole_entry(self, metadata: pb.MessageMetadata, payload: memoryview) -> None:
        self._pending += 1
        self._batch_index.append(-1)
        self._event_time.append(metadata.event_time)
        self._keys.append(metadata.partition_key)
        self._values.append(payload)
        self._sequence_id.append(metadata.sequence_id)
        for kv in metadata.properties:
            self._prop_keys.append(kv.key)
            self._prop_values.append(kv.value)
        self._prop_offsets.append(self._prop_offsets[-1] + len(metadata.properties))

    def _seal(self) -> None:
        """Turn the messages decoded one by one since the last run into a run of their own."""
        if not self._pending:
            return
        self._runs.append(
            MessageColumns(
                _int_column(self._batch_index, pa.int32()),
                _int_column(self._event_time, pa.int64()),
                _key_column(self._keys),
                _map_column(self._prop_offsets, self._prop_keys, self._prop_values),
                _binary_column(self._values, pa.binary()),
                _int_column(self._sequence_id, pa.int64()),
            )
        )
        self._reset_pending()

    def _message_columns(self) -> MessageColumns:
        self._seal()
        runs = self._runs
        if len(runs) == 1:
            return runs[0]
        return MessageColumns(*(pa.concat_arrays(list(column)) for column in zip(*runs, strict=True)))

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last flush (filtered), or None if there are none."""
        if not self.rows:
            return None
        count = self.rows
        messages = self._message_columns()
        entries = self._entries.columns(count)
        columns = [
            pa.repeat(pa.scalar(self.topic, pa.string()), count),
            pa.repeat(pa.scalar(self.partition, pa.int32()), count),
            entries.ledger_id,
            entries.entry_id,
            messages.batch_index,
            entries.index,
            entries.broker_time,
            entries.publish_time,
            _zero_as_null(messages.event_time),
            messages.key,
            messages.properties,
            messages.value,
            entries.producer_name,
            messages.sequence_id,
        ]
        batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
        self._reset()
        return apply_row_filter(batch, self.filter)


def _property_equals(batch: pa.RecordBatch, key: str, value: str) -> pa.Array:
    looked_up = pc.map_lookup(batch.column("properties"), pa.scalar(key, pa.string()), "first")
    return pc.fill_null(pc.equal(looked_up, pa.scalar(value, pa.string())), False)


def apply_row_filter(batch: pa.RecordBatch, row_filter: RowFilter) -> pa.RecordBatch | None:
    """Exactly the rows Spark's own evaluation of the pushed filters would keep (nulls fail)."""
    if not row_filter.active:
        return batch
    masks = []
    bounds = (
        ("index", row_filter.index_min, pc.greater_equal),
        ("index", row_filter.index_max, pc.less_equal),
        ("broker_time", row_filter.time_min, pc.greater_equal),
        ("broker_time", row_filter.time_max, pc.less_equal),
    )
    for column, bound, compare in bounds:
        if bound is not None:
            masks.append(pc.fill_null(compare(batch.column(column), pa.scalar(bound, pa.int64())), False))
    masks.extend(_property_equals(batch, key, value) for key, value in row_filter.properties)
    mask = masks[0]
    for other in masks[1:]:
        mask = pc.and_(mask, other)
    filtered = batch.filter(mask)
    return filtered if filtered.num_rows else None


def rows_of_entries(
    entries: Iterable[tuple[int, int, bytes]],
    topic: str,
    partition: int,
    row_filter: RowFilter | None = None,
    rows_per_batch: int = 65536,
) -> Iterable[pa.RecordBatch]:
    """Record batches of about `rows_per_batch` rows (or MAX_BATCH_BYTES of entries) from
    (ledger_id, entry_id, entry) triples."""
    builder = RowBuilder(topic, partition, row_filter)
    for ledger_id, entry_id, data in entries:
        builder.add(ledger_id, entry_id, data)
        if builder.rows >= rows_per_batch or builder.bytes >= MAX_BATCH_BYTES:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch
