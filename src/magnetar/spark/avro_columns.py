"""Flat Avro records decoded column by column, all messages in lockstep, with numpy.

Avro's binary encoding has no per-field offsets, but every record of one writer schema has
its fields in the same order, so one pass per field over all records at once works: an array
of each record's read position, advanced field by field (varints decoded for every record in
a handful of vector operations, strings gathered with one fancy index). No Python object is
made per record. Records of a shape this does not cover (nested records, arrays, maps, unions
other than with null, logical types other than date and timestamps) return None and are
decoded one by one instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_PADDING = 16
_FIXED = {"float": np.dtype("<f4"), "double": np.dtype("<f8")}
_VARINT = {"int": pa.int32(), "long": pa.int64()}
_LOGICAL = {"date", "timestamp-millis", "timestamp-micros"}


def flat_fields(schema: Any) -> list[tuple[str, Any, int]] | None:
    """(name, value schema, union index of it or -1) per field, None when the record is not flat."""
    if schema.type != "record":
        return None
    out = []
    for f in schema.fields:
        kind, branch = f.type, -1
        if kind.type == "union":
            others = [i for i, s in enumerate(kind.schemas) if s.type != "null"]
            if len(others) != 1 or len(kind.schemas) != 2:
                return None
            branch = others[0]
            kind = kind.schemas[branch]
        logical = kind.props.get("logicalType")
        if (logical is not None and logical not in _LOGICAL) or kind.type not in (
                "boolean", "int", "long", "float", "double", "string", "bytes", "enum"):
            return None
        out.append((f.name, kind, branch))
    return out


def decode_flat(values: pa.Array, fields: list[tuple[str, Any, int]]) -> dict[str, pa.Array] | None:
    """Each field's column for payloads `values` (no nulls), or None when a payload does not
    end where its record does (not written with these fields)."""
    offsets = np.frombuffer(values.buffers()[1], np.int32, len(values) + 1, values.offset * 4).astype(np.int64)
    data = values.buffers()[2]
    buf = np.frombuffer(data, np.uint8)[offsets[0]:offsets[-1]] if data is not None else np.zeros(0, np.uint8)
    buf = np.concatenate([buf, np.zeros(_PADDING, np.uint8)])
    pos = offsets[:-1] - offsets[0]
    end = offsets[1:] - offsets[0]
    out = {}
    for name, kind, branch in fields:
        present = None
        if branch >= 0:
            chosen, pos = _varint(buf, pos)
            present = chosen == branch
        out[name], pos = _column(buf, pos, kind, present)
        if (pos > end).any():
            return None
    return out if bool((pos == end).all()) else None


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


def _column(buf: np.ndarray, pos: np.ndarray, kind: Any, present: np.ndarray | None) -> tuple[pa.Array, np.ndarray]:
    mask = None if present is None else ~present
    here = pos if present is None else pos[present]
    avro_type = kind.type
    if avro_type in _FIXED:
        dtype = _FIXED[avro_type]
        index = np.minimum(here[:, None] + np.arange(dtype.itemsize), len(buf) - 1)
        decoded = buf[index].copy().view(dtype).reshape(-1)
        after = here + dtype.itemsize
        arrow = pa.float32() if avro_type == "float" else pa.float64()
    elif avro_type == "boolean":
        decoded, after, arrow = buf[np.minimum(here, len(buf) - 1)] != 0, here + 1, pa.bool_()
    elif avro_type in ("string", "bytes"):
        return _binary(buf, pos, present, pa.string() if avro_type == "string" else pa.binary())
    else:
        decoded, after = _varint(buf, here)
        arrow = pa.int32() if avro_type in ("int", "enum") else pa.int64()
    column = _scatter(decoded, present, arrow, mask)
    if avro_type == "enum":
        column = pa.array(kind.symbols, pa.string()).take(column)
    elif kind.props.get("logicalType") in _LOGICAL:
        column = _logical(column, kind.props["logicalType"])
    if present is None:
        return column, after
    moved = pos.copy()
    moved[present] = after
    return column, moved


def _scatter(decoded: np.ndarray, present: np.ndarray | None, arrow: pa.DataType, mask: np.ndarray | None) -> pa.Array:
    if present is None:
        return pa.array(decoded.astype(arrow.to_pandas_dtype(), copy=False), arrow)
    full = np.zeros(len(present), arrow.to_pandas_dtype())
    full[present] = decoded
    return pa.array(full, arrow, mask=mask)


def _logical(column: pa.Array, logical: str) -> pa.Array:
    if logical == "date":
        return column.cast(pa.date32())
    micros = column if logical == "timestamp-micros" else pc.multiply(column, 1000)
    return micros.cast(pa.timestamp("us", tz="UTC"))


def _binary(buf: np.ndarray, pos: np.ndarray, present: np.ndarray | None, arrow: pa.DataType) \
        -> tuple[pa.Array, np.ndarray]:
    """Length-prefixed bytes of every record, gathered with one index; absent ones empty."""
    if present is None:
        lengths, start = _varint(buf, pos)
    else:
        lengths = np.zeros(len(pos), np.int64)
        start = pos.copy()
        lengths[present], start[present] = _varint(buf, pos[present])
    if (lengths < 0).any() or (start + lengths > len(buf)).any():
        return pa.nulls(len(pos), arrow), pos + len(buf)  # not this layout: the end check fails it
    bounds = np.zeros(len(pos) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    index = np.repeat(start - bounds[:-1], lengths) + np.arange(bounds[-1])
    validity = None if present is None else pa.array(present).buffers()[1]
    if bounds[-1] >= 2**31:
        return pa.nulls(len(pos), arrow), pos + len(buf)
    column = pa.Array.from_buffers(arrow, len(pos), [validity, pa.py_buffer(bounds.astype(np.int32)),
                                                     pa.py_buffer(buf[index].tobytes())])
    return column, start + lengths
