"""The columns of a message as Arrow sees it: one schema for the Spark source and `receive_arrow`.

Every format ends in the same columns, so a consumer (or a Spark job) gets the same row for a
message whatever wrote it. Helpers here build columns from flat buffers (`array.array`, byte
strings) so that no Python object per value is made on the way into Arrow.
"""

from __future__ import annotations

import functools
import itertools
import operator
from array import array
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.wire.proto import pulsar_api_pb2 as pb

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
    ("deliver_at", pa.int64()),
)
ARROW_SCHEMA = pa.schema([pa.field(name, kind) for name, kind in COLUMNS])
PROPERTIES_TYPE = ARROW_SCHEMA.field("properties").type


class MessageColumns(NamedTuple):
    """The per-message columns of a run of rows, in schema order (event_time: 0 or null = unset)."""

    batch_index: pa.Array
    event_time: pa.Array
    key: pa.Array
    properties: pa.Array
    value: pa.Array
    sequence_id: pa.Array


@functools.lru_cache(maxsize=64)
def _counting(count: int, kind: pa.DataType) -> pa.Array:
    """0..count-1, kept: readers ask for the same few lengths (rows per entry) again and again."""
    return pc.cumulative_sum(pa.repeat(pa.scalar(1, kind), count), start=-1)


def int_range(start: int, count: int, kind: pa.DataType) -> pa.Array:
    """start, start + 1, ... (count values), built in C: `pa.array(range(...))` makes and
    converts a Python int per value, which cost a columnar reader more per entry of 10,000
    rows than reading the entry. Shifting a kept 0..count-1 costs a third of building it."""
    counting = _counting(count, kind)
    return counting if start == 0 else pc.add(counting, pa.scalar(start, kind))


def int_column(values: array, kind: pa.DataType) -> pa.Array:
    """An int column straight from its buffer, no per-value conversion."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def binary_column(parts: list, kind: pa.DataType | None = None) -> pa.Array:
    """Values end to end behind offsets: one join, no Arrow scalar per value."""
    kind = kind or pa.binary()
    offsets = array("i", [0])
    offsets.extend(itertools.accumulate(map(len, parts)))
    if offsets[-1] >= 2**31:
        return pa.array([bytes(p) for p in parts], kind)
    return pa.Array.from_buffers(kind, len(parts), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(parts))])


def map_column(offsets: array, keys: list[str], values: list[str]) -> pa.Array:
    count = len(offsets) - 1
    return pa.MapArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), count + 1, [None, pa.py_buffer(offsets)]),
        pa.array(keys, pa.string()),
        pa.array(values, pa.string()),
        type=PROPERTIES_TYPE,
    )


def key_column(keys: Iterable[str]) -> pa.Array:
    """An empty key reads as null: presence would cost a HasField per message."""
    column = [key or None for key in keys]
    if column.count(None) == len(column):
        return pa.nulls(len(column), pa.string())
    return pa.array(column, pa.string())


def zero_as_null(column: pa.Array) -> pa.Array:
    """event_time 0 means unset in Pulsar (the client's getEventTime() is 0 then): null here."""
    zero = pc.equal(column, 0)
    if not pc.any(zero).as_py():
        return column
    return pc.if_else(zero, pa.scalar(None, column.type), column)


_event_time = operator.attrgetter("event_time")
_sequence_id = operator.attrgetter("sequence_id")
_properties = operator.attrgetter("properties")
_key = operator.attrgetter("partition_key")


class PendingColumns:
    """Messages decoded one by one (SingleMessageMetadata + value), gathered into flat buffers.

    Entries that do not come as ready columns (non-batched entries, odd batches, formats
    decoded record by record) land here, column by column with map()/attrgetter rather than
    one Python loop over messages: each pass runs in C, which halves the per-message cost.
    """

    def __init__(self) -> None:
        self.count = 0
        self.batch_index = array("i")
        self.event_time = array("q")
        self.keys: list[str] = []
        self.prop_offsets = array("i", [0])
        self.prop_keys: list[str] = []
        self.prop_values: list[str] = []
        self.values: list = []
        self.sequence_id = array("q")

    def add_batch(self, metadata: pb.MessageMetadata, messages: Sequence) -> int:
        """Messages as (SingleMessageMetadata, value, batch index) tuples; returns how many."""
        count = len(messages)
        if not count:
            return 0
        self.count += count
        smms, values, indexes = zip(*messages, strict=True)
        self.batch_index.extend(indexes)
        self.values.extend(values)
        self.event_time.extend(map(_event_time, smms))
        self.keys.extend(map(_key, smms))
        sequences = list(map(_sequence_id, smms))
        if 0 in sequences:  # absent reads as 0: Java's fallback is the batch's first id + batch index
            first = metadata.sequence_id
            sequences = [smm.sequence_id if smm.HasField("sequence_id") else first + i
                         for smm, i in zip(smms, indexes, strict=True)]
        self.sequence_id.extend(sequences)
        property_lists = list(map(_properties, smms))
        counts = list(map(len, property_lists))
        offsets = self.prop_offsets
        if any(counts):
            for kvs in property_lists:
                for kv in kvs:
                    self.prop_keys.append(kv.key)
                    self.prop_values.append(kv.value)
        offsets.extend(itertools.accumulate(counts, initial=offsets[-1]))
        offsets.pop(len(offsets) - count - 1)
        return count

    def add_whole_entry(self, metadata: pb.MessageMetadata, payload: memoryview) -> None:
        """A non-batched entry: the message's fields are the entry's."""
        self.count += 1
        self.batch_index.append(-1)
        self.event_time.append(metadata.event_time)
        self.keys.append(metadata.partition_key)
        self.values.append(payload)
        self.sequence_id.append(metadata.sequence_id)
        for kv in metadata.properties:
            self.prop_keys.append(kv.key)
            self.prop_values.append(kv.value)
        self.prop_offsets.append(self.prop_offsets[-1] + len(metadata.properties))

    def seal(self) -> MessageColumns:
        return MessageColumns(
            int_column(self.batch_index, pa.int32()),
            int_column(self.event_time, pa.int64()),
            key_column(self.keys),
            map_column(self.prop_offsets, self.prop_keys, self.prop_values),
            binary_column(self.values),
            int_column(self.sequence_id, pa.int64()),
        )


def concat_runs(runs: list[MessageColumns]) -> MessageColumns:
    if len(runs) == 1:
        return runs[0]
    return MessageColumns(*(pa.concat_arrays(list(column)) for column in zip(*runs, strict=True)))
