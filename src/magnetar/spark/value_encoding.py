"""The sink's `value` column as payloads: Avro records and Pulsar primitives, column by column.

An Avro record's binary encoding is its fields' encodings one after the other, so a batch of
records is built the same way: every leaf column is encoded at once with numpy (zig-zag
varints, little-endian floats, length-prefixed bytes) into one binary array, and Arrow's
`binary_join_element_wise` / `binary_join` (C loops) concatenate them row by row for records,
unions, arrays and maps. No Python object is made per row; the sink then hands each payload
to its producer. The result equals fastavro's `schemaless_writer` byte for byte
(`encode_rows` below, the per-row path kept as the fallback for an Arrow type this module does
not expect, and as the reference its tests and benchmark compare with).

Primitive schemas are Pulsar's fixed-width big-endian numbers (dates and timestamps as epoch
milliseconds), strings as UTF-8, as Pulsar's Java client writes them.
"""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.schemas import SchemaData, SchemaType
from magnetar.spark.value_types import FIXED_WIDTH, MS_PER_DAY
from magnetar.spark.varint_widths import varint_widths

BYTES = pa.large_binary()
_EMPTY = pa.scalar(b"", BYTES)


class ValueEncoder:
    """Payloads for a `value` column written with `schema` (None: the bytes as they are)."""

    def __init__(self, schema: SchemaData | None) -> None:
        self.schema = schema
        self.definition = json.loads(schema.data) if schema is not None and schema.type == SchemaType.AVRO else None

    def column(self, values: pa.Array) -> pa.Array:
        """One payload per row, null where the value is null (a message with no value)."""
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if self.definition is not None:
            try:
                encoded = _encode(values, self.definition)
            except NotImplementedError:
                return encode_rows(values, self.definition)
        elif self.schema is None or self.schema.type == SchemaType.STRING:
            return values if values.type in (pa.binary(), BYTES) else pc.cast(values, BYTES)
        else:
            encoded = _fixed_width(values, self.schema.type)
        return encoded if not values.null_count else pc.if_else(values.is_valid(), encoded, pa.scalar(None, BYTES))


def encode_rows(values: pa.Array, definition: Any) -> pa.Array:
    """Avro records one row at a time with fastavro (nulls stay null): the fallback."""
    parsed = fastavro.parse_schema(definition)
    out: list[bytes | None] = []
    for row in (_plain(value, values.type) for value in values.to_pylist()):
        if row is None:
            out.append(None)
            continue
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, row)
        out.append(buffer.getvalue())
    return pa.array(out, BYTES)


def _plain(value: Any, arrow_type: pa.DataType) -> Any:
    """Arrow's Python values as fastavro takes them (maps as dicts, not lists of pairs)."""
    if value is None:
        return None
    if pa.types.is_map(arrow_type):
        return {k: _plain(v, arrow_type.item_type) for k, v in value}
    if pa.types.is_struct(arrow_type):
        return {f.name: _plain(value[f.name], f.type) for f in arrow_type}
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return [_plain(v, arrow_type.value_type) for v in value]
    return value


def _fixed_width(values: pa.Array, kind: SchemaType) -> pa.Array:
    """Pulsar's primitive encodings: one big-endian number of a fixed width per row."""
    if kind == SchemaType.DATE:
        numbers = _numbers(values, np.int64) * MS_PER_DAY
    elif kind == SchemaType.TIMESTAMP:
        numbers = _numbers(values, np.int64) // 1000
    else:
        numbers = _numbers(values, None)
    dtype = np.dtype(FIXED_WIDTH[kind])
    return _fixed_binary(np.ascontiguousarray(numbers.astype(dtype)).view(np.uint8), dtype.itemsize)


def _numbers(values: pa.Array, dtype: Any) -> np.ndarray:
    """The column's numbers (nulls as 0), as `dtype` (None: their own)."""
    storage = values.type
    if pa.types.is_date32(storage) or pa.types.is_timestamp(storage):
        values = values.view(pa.int32() if pa.types.is_date32(storage) else pa.int64())
    elif pa.types.is_boolean(storage):
        values = pc.cast(values, pa.uint8())
    filled = pc.fill_null(values, 0) if values.null_count else values
    out = filled.to_numpy(zero_copy_only=False)
    return out if dtype is None else out.astype(dtype)


def _fixed_binary(data: np.ndarray, width: int) -> pa.Array:
    count = len(data) // width
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int64)
    return pa.LargeBinaryArray.from_buffers(BYTES, count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _binary(lengths: np.ndarray, data: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return pa.LargeBinaryArray.from_buffers(BYTES, len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def varints(numbers: np.ndarray) -> pa.Array:
    """Avro's zig-zag varint of each int64, one binary value per number."""
    n = numbers.astype(np.int64)
    zigzag = ((n << 1) ^ (n >> 63)).view(np.uint64)
    lengths = varint_widths(zigzag)
    width = int(lengths.max()) if len(lengths) else 1
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = ((zigzag[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    position = np.arange(width)[None, :]
    groups |= (position < (lengths[:, None] - 1)).astype(np.uint8) << 7
    return _binary(lengths, groups[position < lengths[:, None]])


def _join(parts: list[pa.Array]) -> pa.Array:
    return pc.binary_join_element_wise(*parts, _EMPTY)


def _encode(values: pa.Array, schema: Any) -> pa.Array:
    """Each row's Avro encoding under `schema`; rows that are null where the schema does not
    allow it encode as anything (an enclosing union discards them)."""
    if isinstance(schema, list):
        return _nullable(values, schema)
    kind = schema if isinstance(schema, str) else schema["type"]
    logical = None if isinstance(schema, str) else schema.get("logicalType")
    if logical == "decimal":
        return _decimals(values)
    if kind in ("int", "long"):
        return varints(_numbers(values, np.int64))
    if kind == "boolean":
        return _fixed_binary(_numbers(values, np.uint8), 1)
    if kind in ("float", "double"):
        dtype = np.dtype("<f4" if kind == "float" else "<f8")
        return _fixed_binary(np.ascontiguousarray(_numbers(values, dtype)).view(np.uint8), dtype.itemsize)
    if kind in ("string", "bytes"):
        return _length_prefixed(values)
    if kind == "record":
        return _record(values, schema["fields"])
    if kind == "array":
        return _blocks(values, values.flatten(), lambda items: _encode(items, schema["items"]))
    if kind == "map":
        as_list = values.cast(pa.list_(pa.struct([values.type.key_field, values.type.item_field])))
        return _blocks(as_list, as_list.flatten(), lambda pairs: _join([
            _length_prefixed(pairs.field(0)), _encode(pairs.field(1), schema["values"])]))
    raise NotImplementedError(f"no columnar Avro encoding for {kind}")


def _nullable(values: pa.Array, union: list[Any]) -> pa.Array:
    """`["null", T]`: branch 0 alone for a null, else branch 1 and the value."""
    if len(union) != 2 or union[0] != "null":
        raise NotImplementedError("only [null, T] unions are written")
    inner = _encode(values, union[1])
    if not values.null_count:
        return _join([pa.array([b"\x02"] * len(values), BYTES), inner])
    valid = values.is_valid()
    branch = pc.if_else(valid, pa.scalar(b"\x02", BYTES), pa.scalar(b"\x00", BYTES))
    return _join([branch, pc.if_else(valid, inner, _EMPTY)])


def _length_prefixed(values: pa.Array) -> pa.Array:
    raw = values if values.type == BYTES else pc.cast(values, BYTES)
    if raw.null_count:
        raw = pc.fill_null(raw, _EMPTY)
    lengths = pc.binary_length(raw).to_numpy(zero_copy_only=False)
    return _join([varints(lengths), raw])


def _record(values: pa.Array, fields: list[dict[str, Any]]) -> pa.Array:
    if not fields:
        return pa.array([b""] * len(values), BYTES)
    parts = [_encode(values.field(f["name"]), f["type"]) for f in fields]
    return parts[0] if len(parts) == 1 else _join(parts)


def _blocks(values: pa.Array, items: pa.Array, encode_items: Any) -> pa.Array:
    """An array or map: its count, its items, then 0; an empty one just 0 (fastavro's layout)."""
    counts = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    encoded_items = encode_items(items) if len(items) else pa.array([], BYTES)
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array(offsets), encoded_items), _EMPTY)
    header = pc.if_else(pa.array(counts > 0), varints(counts), _EMPTY)
    return _join([header, joined, pa.array([b"\x00"] * len(values), BYTES)])


def _decimals(values: pa.Array) -> pa.Array:
    """Avro decimals on bytes: the unscaled number in the fewest big-endian two's complement bytes."""
    if not pa.types.is_decimal128(values.type):
        raise NotImplementedError(f"decimals of {values.type}")
    filled = pc.fill_null(values, pa.scalar(0, values.type)) if values.null_count else values
    count, start = len(filled), filled.offset
    raw = np.frombuffer(filled.buffers()[1], dtype=np.uint8, count=16 * (start + count))[16 * start:]
    big_endian = raw.reshape(count, 16)[:, ::-1]
    sign = np.where(big_endian[:, 0] >= 0x80, 0xFF, 0x00).astype(np.uint8)[:, None]
    redundant = (big_endian[:, :15] == sign) & ((big_endian[:, 1:] & 0x80) == (sign & 0x80))
    leading = np.cumprod(redundant, axis=1).sum(axis=1)
    keep = np.arange(16)[None, :] >= leading[:, None]
    return _join([varints(16 - leading), _binary(16 - leading, np.ascontiguousarray(big_endian[keep]))])
