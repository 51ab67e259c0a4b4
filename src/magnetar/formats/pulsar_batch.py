"""Pulsar's own batch format, decoded into Arrow columns in bulk, and its processor.

A batch of the common shape costs Python only a guess of where each message starts; cutting
it, parsing its metadata and proving the guess happen in C, once per batch
(`columns_of_batch`), which keeps a core near two million rows/s. Anything else is decoded
message by message (`decode_batch`), with the same rows.
"""

from __future__ import annotations

import functools
import itertools
import operator
import struct
from array import array
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.formats.columns import MessageColumns, int_column, int_range, key_column, map_column
from magnetar.formats.payload import EntryPayload, PayloadContext, PayloadProcessor
from magnetar.wire.batch import (
    BatchMessage,
    BatchMetadata,
    Buffer,
    batch_header_offsets,
    metadata_columns,
)
from magnetar.wire.entry import PULSAR_FORMAT
from magnetar.wire.proto import pulsar_api_pb2 as pb

_properties = operator.attrgetter("properties")
_U32 = struct.Struct(">I")


class PulsarProcessor(PayloadProcessor):
    """Pulsar's batch format (the Java client's DEFAULT processor), with a columnar fast path."""

    formats = (PULSAR_FORMAT,)
    name = PULSAR_FORMAT

    def messages(self, entry: EntryPayload, context: PayloadContext) -> Sequence[BatchMessage]:
        return context.default_messages()

    def columns(self, entry: EntryPayload, context: PayloadContext) -> MessageColumns | None:
        metadata = entry.metadata
        if not metadata.HasField("num_messages_in_batch") or not metadata.num_messages_in_batch:
            return None
        return columns_of_batch(metadata, entry.payload, metadata.num_messages_in_batch)

    def count(self, payload: memoryview) -> int | None:
        """A Pulsar batch carries no count of its own: walk it, message by message."""
        offset = count = 0
        while offset < len(payload):
            (size,) = _U32.unpack_from(payload, offset)
            single = pb.SingleMessageMetadata.FromString(payload[offset + 4 : offset + 4 + size])
            offset += 4 + size + single.payload_size
            count += 1
        if offset != len(payload):
            raise ValueError(f"the last message runs {offset - len(payload)} bytes past the payload")
        return count


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
        self.no_properties = map_column(array("i", bytes(4 * (count + 1))), [], [])


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
    starts = int_column(array("i", heads), pa.int32())
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
    return int_column(array("q", values[:]), pa.int64())


def _sequence_column(found: Sequence[int], first: int, count: int) -> pa.Array | None:
    """Absent in every message: the first id plus the batch index, as the Java client reads it."""
    if not found:
        return int_range(first, count, pa.int64())
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
    return map_column(offsets, [kv.key for kv in flat], [kv.value for kv in flat])


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
    if len(sizes) != count or not int_column(array("i", sizes[:]), pa.int32()).equals(pc.binary_length(values)):
        return None
    sequence = _sequence_column(batch.columns.sequence_id, metadata.sequence_id, count)
    if sequence is None:
        return None
    event_times = _per_message(batch, "event_time", count)
    keys = _per_message(batch, "partition_key", count)
    return MessageColumns(
        layout.batch_index,
        _int64(event_times) if event_times else pa.nulls(count, pa.int64()),
        key_column(keys) if keys else pa.nulls(count, pa.string()),
        _properties_column(batch, layout),
        values,
        sequence,
    )


