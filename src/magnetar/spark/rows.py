"""Stored entries → Arrow record batches with the source's row schema (one row per message).

Both ways of reaching a topic (the data directory, the Pulsar protocol) end up holding raw
entries as the broker stored them, so both hand them to `RowBuilder` and the rows are the
same either way. Columns are built from flat `array.array` buffers and handed to Arrow
without a per-value conversion: per message the Python work is one SingleMessageMetadata
parse (in upb) and a handful of appends, which is what keeps a core near a million rows/s.
"""

from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.wire.batch import decode_messages
from magnetar.wire.entry import parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_UNCOMPRESSED_BYTES = 256 * 1024 * 1024
"""Refuse to inflate a payload beyond this (a corrupt `uncompressed_size` must not OOM a worker)."""

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


def _int_column(values: array, nulls: list[bool] | None, kind: pa.DataType) -> pa.Array:
    """An int column straight from its buffer; `nulls` (True = null) only when some are."""
    if nulls is None:
        return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])
    if all(nulls):
        return pa.nulls(len(values), kind)
    return pa.array(values, kind, mask=pa.array(nulls, pa.bool_()))


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


def _constant_string(value: str, count: int) -> pa.Array:
    data = value.encode()
    offsets = array("i", range(0, (count + 1) * len(data), len(data))) if data else array("i", [0] * (count + 1))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data * count)])


class RowBuilder:
    """Accumulates the messages of entries of one topic partition, then emits a RecordBatch."""

    def __init__(self, topic: str, partition: int, row_filter: RowFilter | None = None) -> None:
        self.topic = topic
        self.partition = partition
        self.filter = row_filter or RowFilter()
        self.entries_decoded = 0
        self.entries_skipped = 0
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self._ledger_id = array("q")
        self._entry_id = array("q")
        self._batch_index = array("i")
        self._index = array("q")
        self._index_nulls: list[bool] = []
        self._any_index_null = False
        self._broker_time = array("q")
        self._any_time_null = False
        self._time_nulls: list[bool] = []
        self._publish_time = array("q")
        self._event_time = array("q")
        self._keys: list[str | None] = []
        self._prop_offsets = array("i", [0])
        self._prop_keys: list[str] = []
        self._prop_values: list[str] = []
        self._values: list = []
        self._producers: list[str] = []
        self._sequence_id = array("q")

    def add(self, ledger_id: int, entry_id: int, entry: bytes | memoryview) -> None:
        """Decode one stored entry (prefix, checksum, metadata, maybe a compressed batch)."""
        parsed = parse_entry(entry)
        metadata = parsed.metadata
        if self.filter.properties and _entry_rules_out(metadata, self.filter.properties):
            self.entries_skipped += 1
            return
        self.entries_decoded += 1
        if metadata.encryption_keys:
            # Only the producer's key can open it: one row carrying the ciphertext as stored.
            messages = None
            count = 1
        else:
            messages = decode_messages(metadata, parsed.payload, max_size=MAX_UNCOMPRESSED_BYTES)
            count = len(messages)
        if not count:
            return
        bem = parsed.broker_entry_metadata
        repeat = itertools.repeat
        self._ledger_id.extend(repeat(ledger_id, count))
        self._entry_id.extend(repeat(entry_id, count))
        self._publish_time.extend(repeat(metadata.publish_time, count))
        self._producers.extend(repeat(metadata.producer_name, count))
        if bem is not None and bem.HasField("index"):
            last = bem.index
            self._index.extend(range(last - count + 1, last + 1))
            self._index_nulls.extend(repeat(False, count))
        else:
            self._index.extend(repeat(0, count))
            self._index_nulls.extend(repeat(True, count))
            self._any_index_null = True
        if bem is not None and bem.HasField("broker_timestamp"):
            self._broker_time.extend(repeat(bem.broker_timestamp, count))
            self._time_nulls.extend(repeat(False, count))
        else:
            self._broker_time.extend(repeat(0, count))
            self._time_nulls.extend(repeat(True, count))
            self._any_time_null = True
        self.rows += count
        if messages is None:
            self._add_whole_entry(metadata, parsed.payload)
            return
        self._add_batch(metadata, messages, count)

    def _add_batch(self, metadata: pb.MessageMetadata, messages: list, count: int) -> None:
        # Column by column with map()/attrgetter rather than one Python loop over messages:
        # each pass runs in C, which halves the per-message cost.
        smms, values, _ = zip(*messages, strict=True)
        if messages[0][2] >= 0:
            self._batch_index.extend(range(count))
        else:
            self._batch_index.append(-1)
        self._values.extend(values)
        self._event_time.extend(map(_event_time, smms))
        keys = list(map(_key, smms))
        if any(keys):  # an empty key reads as null: presence would cost a HasField per message
            self._keys.extend(key or None for key in keys)
        else:
            self._keys.extend(itertools.repeat(None, count))
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

    def _add_whole_entry(self, metadata: pb.MessageMetadata, payload: memoryview) -> None:
        self._batch_index.append(-1)
        self._event_time.append(metadata.event_time)
        self._keys.append(metadata.partition_key or None)
        self._values.append(payload)
        self._sequence_id.append(metadata.sequence_id)
        for kv in metadata.properties:
            self._prop_keys.append(kv.key)
            self._prop_values.append(kv.value)
        self._prop_offsets.append(self._prop_offsets[-1] + len(metadata.properties))

    def flush(self) -> pa.RecordBatch | None:
        """The rows added since the last flush (filtered), or None if there are none."""
        if not self.rows:
            return None
        count = self.rows
        properties = pa.MapArray.from_arrays(
            pa.Array.from_buffers(pa.int32(), count + 1, [None, pa.py_buffer(self._prop_offsets)]),
            pa.array(self._prop_keys, pa.string()),
            pa.array(self._prop_values, pa.string()),
            type=ARROW_SCHEMA.field("properties").type,
        )
        keys = self._keys
        key_column = pa.nulls(count, pa.string()) if keys.count(None) == count else pa.array(keys, pa.string())
        columns = [
            _constant_string(self.topic, count),
            pa.Array.from_buffers(pa.int32(), count, [None, pa.py_buffer(array("i", [self.partition]) * count)]),
            _int_column(self._ledger_id, None, pa.int64()),
            _int_column(self._entry_id, None, pa.int64()),
            _int_column(self._batch_index, None, pa.int32()),
            _int_column(self._index, self._index_nulls if self._any_index_null else None, pa.int64()),
            _int_column(self._broker_time, self._time_nulls if self._any_time_null else None, pa.int64()),
            _int_column(self._publish_time, None, pa.int64()),
            _zero_as_null(_int_column(self._event_time, None, pa.int64())),
            key_column,
            properties,
            _binary_column(self._values, pa.binary()),
            pa.array(self._producers, pa.string()),
            _int_column(self._sequence_id, None, pa.int64()),
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
    """Record batches of about `rows_per_batch` rows from (ledger_id, entry_id, entry) triples."""
    builder = RowBuilder(topic, partition, row_filter)
    for ledger_id, entry_id, data in entries:
        builder.add(ledger_id, entry_id, data)
        if builder.rows >= rows_per_batch:
            batch = builder.flush()
            if batch is not None:
                yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch
