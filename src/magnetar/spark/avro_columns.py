"""Avro records decoded column by column, all messages in lockstep, with numpy.

Avro's binary encoding has no per-field offsets, but every record of one writer schema has
its fields in the same order, so one pass per field over all records at once works: an array
of each record's read position, advanced field by field (varints decoded for every record in
a handful of vector operations, strings gathered with one fancy index). Nested records are
their fields' passes in turn; a union reads each record's branch, then each member for the
records that chose it; arrays and maps read item k of every record still in a block at once
(as many passes as the longest block has items), then put items in record order with one
take. No Python object is made per record.

`compile_records` pairs the writer's schema with the reader's and resolves as Avro does where
that is plain (fields matched by name, a field the writer lacks read as null when its default
is null, numeric promotions, string/bytes); anything else (a non-null default to fill in, a
union the reader reshaped, enum symbols the reader lacks, a decimal wider than 16 bytes)
gives None, and those records are decoded one by one instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from magnetar.spark.value_types import UnsupportedSchemaError, avro_arrow_type, union_shape

Reader = Callable[[np.ndarray, np.ndarray], tuple[pa.Array, np.ndarray]]
"""(buffer, each record's read position) -> the column for those records, and the positions after."""

_PADDING = 16
_FIXED = {"float": (np.dtype("<f4"), pa.float32()), "double": (np.dtype("<f8"), pa.float64())}
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}
_MAX_DEPTH = 64


class NotColumnar(Exception):
    """This pair of schemas, or these payloads, are not for the columnar path."""


def compile_records(writer: Any, reader: Any) -> Reader | None:
    """The columnar reader of records written with `writer`, resolved to `reader` (parsed Avro
    schemas), or None when the pair needs the row path."""
    try:
        return _compile(writer, reader, 0)
    except (NotColumnar, UnsupportedSchemaError):  # UnsupportedSchemaError: a writer-only recursive field
        return None


def decode_records(values: pa.Array, read: Reader) -> pa.Array | None:
    """Payloads `values` (a null one reads null) decoded; None when a payload does not end
    where its record does (not written with this schema)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4).astype(np.int64)
    data = values.buffers()[2]
    buf = np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    buf = np.concatenate([buf, np.zeros(_PADDING, np.uint8)])
    valid = np.flatnonzero(pc.is_valid(values).to_numpy(zero_copy_only=False))
    pos, end = offsets[:-1][valid] - offsets[0], offsets[1:][valid] - offsets[0]
    try:
        column, pos = read(buf, pos)
    except (NotColumnar, pa.ArrowInvalid):  # ArrowInvalid: bytes read as a string that are not UTF-8
        return None
    if not bool((pos == end).all()):
        return None
    return column if len(valid) == len(values) else _scatter(len(values), [(valid, column)], column.type)


def _compile(writer: Any, reader: Any, depth: int) -> Reader:
    if depth > _MAX_DEPTH:
        raise NotColumnar
    kind = reader.type
    if writer.type == "union" or kind == "union":
        return _union(writer, reader, depth)
    if kind in ("record", "error"):
        return _record(writer, reader, depth) if writer.type == kind else _refuse()
    if kind in ("array", "map"):
        if writer.type != kind:
            raise NotColumnar
        if kind == "array":
            return _blocks(_compile(writer.items, reader.items, depth + 1), avro_arrow_type(reader))
        return _blocks(_map_entry(writer, reader, depth), avro_arrow_type(reader))
    return _primitive(writer, reader)


def _refuse() -> Reader:
    raise NotColumnar


def _record(writer: Any, reader: Any, depth: int) -> Reader:
    wanted = {f.name: f for f in reader.fields}
    steps = [(f.name if f.name in wanted else None,
              _compile(f.type, wanted[f.name].type if f.name in wanted else f.type, depth + 1)) for f in writer.fields]
    written = {f.name for f in writer.fields}
    for field in reader.fields:
        if field.name not in written and not (field.has_default and field.default is None):
            raise NotColumnar  # a default other than null to fill in
    kind = avro_arrow_type(reader)

    def read(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        columns = {}
        for name, step in steps:
            column, pos = step(buf, pos)
            if name is not None:
                columns[name] = column
        arrays = [columns[f.name] if f.name in columns else pa.nulls(len(pos), f.type) for f in kind]
        return pa.StructArray.from_arrays(arrays, fields=list(kind)), pos

    return read


def _map_entry(writer: Any, reader: Any, depth: int) -> Reader:
    key, value = _primitive_reader("string", None), _compile(writer.values, reader.values, depth + 1)
    value_type = avro_arrow_type(reader.values)

    def read(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        keys, pos = key(buf, pos)
        values, pos = value(buf, pos)
        return pa.StructArray.from_arrays([keys, values], fields=[pa.field("key", pa.string()),
                                                                  pa.field("value", value_type)]), pos

    return read


def _blocks(item: Reader, kind: pa.DataType) -> Reader:
    """An array or map: blocks of a count (negative: followed by the block's size) and that
    many items, until a count of 0. Item k of every record still in a block is read at once."""
    def read(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        pos = pos.copy()
        items = np.zeros(len(pos), np.int64)
        chunks: list[tuple[np.ndarray, pa.Array]] = []
        active = np.arange(len(pos))
        while len(active):
            count, at = _varint(buf, pos[active])
            sized = count < 0
            if sized.any():
                count = np.abs(count)
                at[sized] = _varint(buf, at[sized])[1]
            if (count > len(buf)).any():
                raise NotColumnar
            pos[active] = at
            active, count = active[count > 0], count[count > 0]
            rows, left = active, count
            while len(rows):
                column, pos[rows] = item(buf, pos[rows])
                chunks.append((rows, column))
                items[rows] += 1
                left = left - 1
                rows, left = rows[left > 0], left[left > 0]
        offsets = np.zeros(len(pos) + 1, np.int32)
        np.cumsum(items, out=offsets[1:])
        children = _in_record_order(chunks, kind)
        if pa.types.is_map(kind):
            return pa.MapArray.from_arrays(pa.array(offsets), children.field(0), children.field(1)), pos
        return pa.ListArray.from_arrays(pa.array(offsets), children, type=kind), pos

    return read


def _in_record_order(chunks: list[tuple[np.ndarray, pa.Array]], kind: pa.DataType) -> pa.Array:
    """Items read pass by pass (pass k: item k of each record) -> record by record."""
    child = kind.value_type if pa.types.is_list(kind) else pa.struct([kind.key_field, kind.item_field])
    if not chunks:
        return pa.array([], child)
    rows = np.concatenate([r for r, _ in chunks])
    order = np.argsort(rows, kind="stable")
    return pa.concat_arrays([c for _, c in chunks]).take(pa.array(order))


def _union(writer: Any, reader: Any, depth: int) -> Reader:
    """A union: each record's branch, then each member for the records that chose it. The
    writer's union must be the reader's, or a plain writer type one of the reader's members."""
    kind = avro_arrow_type(reader)
    members = reader.schemas if reader.type == "union" else [reader]
    if writer.type != "union":
        match = [i for i, m in enumerate(members) if str(m) == str(writer) or m.type == writer.type != "null"]
        if not match:
            raise NotColumnar
        branch = _compile(writer, members[match[0]], depth + 1)
        combine = _combiner(reader, kind)

        def read_plain(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
            column, pos = branch(buf, pos)
            return combine(len(pos), [(np.arange(len(pos)), column) if i == match[0] else None
                                      for i in range(len(members))]), pos

        return read_plain
    if str(writer) != str(reader):
        raise NotColumnar  # a reshaped union: resolving it is the row path's
    branches = [None if m.type == "null" else _compile(m, m, depth + 1) for m in writer.schemas]
    combine = _combiner(reader, kind)

    def read(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        chosen, pos = _varint(buf, pos)
        if ((chosen < 0) | (chosen >= len(branches))).any():
            raise NotColumnar
        parts: list[tuple[np.ndarray, pa.Array] | None] = []
        for i, branch in enumerate(branches):
            rows = np.flatnonzero(chosen == i)
            if branch is None or not len(rows):
                parts.append(None)
                continue
            column, pos[rows] = branch(buf, pos[rows])
            parts.append((rows, column))
        return combine(len(pos), parts), pos

    return read


Parts = list[tuple[np.ndarray, pa.Array] | None]


def _combiner(reader: Any, kind: pa.DataType) -> Callable[[int, Parts], pa.Array]:
    """How the members' columns (one part per member, null's None) make the reader's column:
    one member (with null) as itself, nullable; int|long and float|double as the wider; other
    unions as a struct of member0, member1, ... (null members left out) with the chosen set."""
    if reader.type != "union" or union_shape(reader) != "members":
        return lambda rows, parts: _scatter(rows, [p for p in parts if p is not None], kind)
    non_null = [i for i, m in enumerate(reader.schemas) if m.type != "null"]

    def combine(rows: int, parts: Parts) -> pa.Array:
        fields = list(kind)
        columns = [_scatter(rows, [parts[i]] if parts[i] is not None else [], f.type) for i, f in zip(
            non_null, fields, strict=True)]
        present = np.zeros(rows, bool)
        for part in parts:
            if part is not None:
                present[part[0]] = True
        return pa.StructArray.from_arrays(columns, fields=fields, mask=pa.array(~present))

    return combine


def _scatter(rows: int, parts: list[tuple[np.ndarray, pa.Array]], kind: pa.DataType) -> pa.Array:
    """A column of `rows` rows: each part's values at its rows, null elsewhere."""
    if not parts:
        return pa.nulls(rows, kind)
    if len(parts) == 1 and len(parts[0][0]) == rows:
        column = parts[0][1]
        return column if column.type == kind else column.cast(kind)
    index = np.full(rows, -1, np.int64)
    base = 0
    for at, column in parts:
        index[at] = base + np.arange(len(column))
        base += len(column)
    values = pa.concat_arrays([c if c.type == kind else c.cast(kind) for _, c in parts])
    return values.take(pa.array(index, mask=index < 0))


def _primitive(writer: Any, reader: Any) -> Reader:
    """A non-union, non-container type; a writer type differing from the reader's only by an
    Avro promotion is read as written, then cast."""
    kind = avro_arrow_type(reader)
    if str(writer) == str(reader):
        return _primitive_reader(writer.type, reader, kind)
    plain = not writer.props.get("logicalType") and not reader.props.get("logicalType")
    if writer.type == reader.type == "enum" and set(writer.symbols) <= set(reader.symbols):
        return _primitive_reader("enum", writer, kind)
    if plain and reader.type in _PROMOTIONS.get(writer.type, ()):
        read = _primitive_reader(writer.type, writer, avro_arrow_type(writer))
        return lambda buf, pos: _cast(read(buf, pos), kind)
    raise NotColumnar


def _cast(read: tuple[pa.Array, np.ndarray], kind: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    column, pos = read
    return column.cast(kind, safe=False), pos  # long -> float rounds, as Avro's promotion does


def _primitive_reader(avro_type: str, schema: Any, kind: pa.DataType | None = None) -> Reader:
    kind = kind if kind is not None else pa.string()
    if pa.types.is_decimal(kind):
        size = schema.size if avro_type == "fixed" else None
        return lambda buf, pos: _decimal(buf, pos, size, kind)
    if avro_type in _FIXED:
        dtype, arrow = _FIXED[avro_type]
        return lambda buf, pos: (_fixed_width(buf, pos, dtype, arrow), pos + dtype.itemsize)
    if avro_type == "boolean":
        return lambda buf, pos: (pa.array(buf[np.minimum(pos, len(buf) - 1)] != 0, pa.bool_()), pos + 1)
    if avro_type in ("string", "bytes"):
        return lambda buf, pos: _binary(buf, pos, kind)
    if avro_type == "fixed":
        size = schema.size
        return lambda buf, pos: _binary(buf, pos, kind, np.full(len(pos), size, np.int64))
    if avro_type == "null":
        return lambda buf, pos: (pa.nulls(len(pos), kind), pos)
    if avro_type in ("int", "long", "enum"):
        return _varint_reader(schema, kind)
    raise NotColumnar


def _varint_reader(schema: Any, kind: pa.DataType) -> Reader:
    symbols = pa.array(schema.symbols, pa.string()) if schema is not None and schema.type == "enum" else None
    logical = schema.props.get("logicalType") if schema is not None else None

    def read(buf: np.ndarray, pos: np.ndarray) -> tuple[pa.Array, np.ndarray]:
        numbers, pos = _varint(buf, pos)
        if symbols is not None:
            if ((numbers < 0) | (numbers >= len(symbols))).any():
                raise NotColumnar
            return symbols.take(pa.array(numbers)), pos
        if pa.types.is_timestamp(kind):
            micros = numbers if logical == "timestamp-micros" else numbers * 1000
            return pa.array(micros, pa.int64()).cast(kind), pos
        if pa.types.is_date(kind):
            return pa.array(numbers.astype(np.int32), pa.int32()).cast(kind), pos
        return pa.array(numbers.astype(kind.to_pandas_dtype(), copy=False), kind), pos

    return read


def _varint(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag varints at `pos` (every record at once): values and the positions after them."""
    result = np.zeros(len(pos), np.uint64)
    length = np.zeros(len(pos), np.int64)
    active = np.ones(len(pos), bool)
    limit = len(buf) - 1
    for k in range(10):
        byte = buf[np.minimum(pos + k, limit)].astype(np.uint64)
        result |= np.where(active, (byte & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        length += active
        active &= (byte & np.uint64(0x80)) != 0
        if not active.any():
            break
    value = (result >> np.uint64(1)).astype(np.int64) ^ -(result & np.uint64(1)).astype(np.int64)
    return value, pos + length


def _fixed_width(buf: np.ndarray, pos: np.ndarray, dtype: np.dtype, arrow: pa.DataType) -> pa.Array:
    index = np.minimum(pos[:, None] + np.arange(dtype.itemsize), len(buf) - 1)
    return pa.array(buf[index].copy().view(dtype).reshape(-1), arrow)


def _spans(buf: np.ndarray, pos: np.ndarray, lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each record's bytes: length-prefixed, or of the given lengths."""
    start = pos
    if lengths is None:
        lengths, start = _varint(buf, pos)
    if (lengths < 0).any() or (start + lengths > len(buf)).any():
        raise NotColumnar
    return start, lengths


def _binary(buf: np.ndarray, pos: np.ndarray, kind: pa.DataType, lengths: np.ndarray | None = None) \
        -> tuple[pa.Array, np.ndarray]:
    """Bytes of every record gathered with one index."""
    start, lengths = _spans(buf, pos, lengths)
    bounds = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    if bounds[-1] >= 2**31:
        raise NotColumnar
    index = np.repeat(start - bounds[:-1], lengths) + np.arange(bounds[-1])
    column = pa.Array.from_buffers(kind, len(pos), [None, pa.py_buffer(bounds.astype(np.int32)),
                                                    pa.py_buffer(buf[index].tobytes())])
    return column, start + lengths


def _decimal(buf: np.ndarray, pos: np.ndarray, size: int | None, kind: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Big-endian two's complement unscaled numbers (bytes, or fixed of `size`) as Arrow's
    16-byte little-endian ones: sign-extended, bytes reversed."""
    start, lengths = _spans(buf, pos, None if size is None else np.full(len(pos), size, np.int64))
    if (lengths > 16).any():
        raise NotColumnar
    first = buf[np.minimum(start, len(buf) - 1)]
    negative = (lengths > 0) & (first >= 0x80)
    out = np.where(negative[:, None], np.uint8(0xFF), np.uint8(0)).repeat(16, axis=1).astype(np.uint8)
    for k in range(int(lengths.max(initial=0))):  # byte k from the end goes to little-endian byte k
        rows = np.flatnonzero(lengths > k)
        out[rows, k] = buf[start[rows] + lengths[rows] - 1 - k]
    return pa.Array.from_buffers(kind, len(pos), [None, pa.py_buffer(out.tobytes())]), start + lengths
