"""Payloads -> the typed `value` column, for a topic with a schema.

Fixed-width primitives are cut out of the payload column's buffer in one go (no Python
object per row). AVRO records are read column by column (`avro_columns`), each run of
messages with the schema version it was written with (`MessageMetadata.schema_version`)
resolved to the topic's latest, so a field added since reads null; what that path does not
cover is read with fastavro, message by message. JSON records go through Arrow's JSON reader
when their types allow, else are parsed one by one and take the latest version's fields.
"""

from __future__ import annotations

import base64
import decimal
import io
import itertools
import json
from collections.abc import Callable
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from magnetar.schemas import SchemaData, SchemaType
from magnetar.schemas.definitions import key_value_parts, unpack_pair, writer_definition_for
from magnetar.schemas.errors import InvalidSchemaError
from magnetar.spark.avro_columns import Reader, compile_records, decode_records
from magnetar.spark.value_types import (
    FIXED_WIDTH,
    MS_PER_DAY,
    PRIMITIVE_TYPES,
    UnsupportedSchemaError,
    record_schema,
    union_members,
    union_shape,
    value_type,
)

WriterLookup = Callable[[int], "SchemaData | None"]
"""A schema version -> that version's schema (None when the registry no longer has it)."""
NO_VERSION = -1


class ValueDecoder:
    """Decodes the payloads of one topic's messages into the `value` column's type."""

    def __init__(self, reader: SchemaData, writers: WriterLookup) -> None:
        self.reader = reader
        self.type = value_type(reader)
        self._decode = _decoder(reader, writers)

    def column(self, values: pa.Array, versions: pa.Array, keys: pa.Array) -> pa.Array:
        return self._decode(values, versions, keys)


Decode = Callable[[pa.Array, pa.Array, pa.Array], pa.Array]


def _decoder(reader: SchemaData, writers: WriterLookup) -> Decode:
    kind = reader.type
    if kind in (SchemaType.NONE, SchemaType.BYTES):
        return lambda values, versions, keys: values
    if kind == SchemaType.STRING:
        return lambda values, versions, keys: pc.cast(values, pa.string())
    if kind in FIXED_WIDTH:
        return lambda values, versions, keys: _fixed_width(values, kind)
    if kind in (SchemaType.AVRO, SchemaType.JSON):
        records = RecordDecoder(reader, writers).column
        return lambda values, versions, keys: records(_empty_as_null(values), versions, keys)
    if kind == SchemaType.KEY_VALUE:
        return _key_value_decoder(reader, writers)
    raise UnsupportedSchemaError(f"{kind.name} schemas have no typed value column: use option valueFormat=bytes")


def _empty_as_null(payloads: pa.Array) -> pa.Array:
    """A message without a value (Pulsar's null_value, read as an empty payload) is a null
    record: no record encodes to nothing, except one without fields. Records only: an empty
    payload is a valid STRING or BYTES value."""
    empty = pc.equal(pc.binary_length(payloads), 0)
    return pc.if_else(empty, pa.scalar(None, payloads.type), payloads) if pc.any(empty).as_py() else payloads


def _fixed_width(values: pa.Array, kind: SchemaType) -> pa.Array:
    """Big-endian numbers of one width each (Pulsar's primitive encodings), from the payload
    buffer at once; a null value stays null, a payload of the wrong size reads as null."""
    dtype = np.dtype(FIXED_WIDTH[kind])
    width = dtype.itemsize
    lengths = pc.binary_length(values)
    good = pc.fill_null(pc.equal(lengths, width), False)
    kept = values if pc.all(good).as_py() else pc.if_else(good, values, pa.scalar(b"\0" * width, pa.binary()))
    kept = kept.combine_chunks() if isinstance(kept, pa.ChunkedArray) else kept
    offsets = np.frombuffer(kept.buffers()[1], dtype=np.int32, count=len(kept) + 1, offset=kept.offset * 4)
    data = np.frombuffer(kept.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    numbers = data.view(dtype).astype(dtype.newbyteorder("="))
    mask = pc.invert(good).to_numpy(zero_copy_only=False)
    if kind == SchemaType.BOOLEAN:
        return pa.array(numbers != 0, pa.bool_(), mask=mask)
    if kind == SchemaType.DATE:
        return pa.array(numbers // MS_PER_DAY, pa.int32(), mask=mask).cast(pa.date32())
    if kind == SchemaType.TIMESTAMP:
        return pa.array(numbers * 1000, pa.int64(), mask=mask).cast(PRIMITIVE_TYPES[kind])
    return pa.array(numbers, PRIMITIVE_TYPES[kind], mask=mask)


class RecordDecoder:
    """AVRO or JSON records, each message read with its writer's version."""

    def __init__(self, reader: SchemaData, writers: WriterLookup) -> None:
        self.reader = reader
        self.writers = writers
        self.type = value_type(reader)
        self.parsed = record_schema(reader)
        self.json = reader.type == SchemaType.JSON
        self.shape = _shaper(self.parsed, self.json) or (lambda v: v)
        self.reader_definition = json.loads(reader.data)
        self.reader_avro = fastavro.parse_schema(self.reader_definition)
        self._writer_avro: dict[int, Any] = {}
        self._columnar: dict[int, Reader | None] = {}

    def _writer(self, version: int) -> Any:
        found = self._writer_avro.get(version)
        if found is None:
            schema = self.writers(version) if version != NO_VERSION else None
            found = self._writer_avro[version] = (
                self.reader_avro if schema is None or schema.data == self.reader.data
                else fastavro.parse_schema(writer_definition_for(schema.data, self.reader_definition)))
        return found

    def column(self, values: pa.Array, versions: pa.Array, keys: pa.Array) -> pa.Array:
        if self.json and _json_columnar(self.type):
            parsed = _parsed_json(values, self.type)
            if parsed is not None:
                return parsed
        if not self.json and len(values):
            columns = self._columnar_runs(values, versions)
            if columns is not None:
                return columns
        return pa.array(self.records(values.to_pylist(), versions.to_pylist()), self.type)

    def _columnar_runs(self, values: pa.Array, versions: pa.Array) -> pa.Array | None:
        """Records decoded column by column (`avro_columns`), a run of one writer version at a
        time; None sends the batch down the row path."""
        numbers = versions.to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(np.diff(numbers)) + 1
        bounds = [0, *starts.tolist(), len(numbers)]
        runs = []
        for begin, end in itertools.pairwise(bounds):
            read = self._columnar_reader(int(numbers[begin]))
            run = None if read is None else decode_records(values.slice(begin, end - begin), read)
            if run is None:
                return None
            runs.append(run if run.type == self.type else run.cast(self.type))
        return runs[0] if len(runs) == 1 else pa.concat_arrays(runs)

    def _columnar_reader(self, version: int) -> Reader | None:
        """The columnar reader of one writer version resolved to the reader's schema (None:
        that version takes the row path)."""
        if version not in self._columnar:
            writer = self.writers(version) if version != NO_VERSION else None
            self._columnar[version] = compile_records(
                self.parsed if writer is None else record_schema(writer), self.parsed)
        return self._columnar[version]

    def records(self, payloads: list[bytes | None], versions: list[int | None]) -> list[Any]:
        shape = self.shape
        if self.json:
            return [None if p is None else shape(json.loads(p)) for p in payloads]
        reader = self.reader_avro
        out = []
        for payload, version in zip(payloads, versions, strict=True):
            if payload is None:
                out.append(None)
                continue
            writer = self._writer(NO_VERSION if version is None else version)
            out.append(shape(fastavro.schemaless_reader(io.BytesIO(payload), writer, reader)))
        return out


def _json_columnar(kind: pa.DataType) -> bool:
    """Whether Arrow's JSON reader gives this type from JSON text as the Python client writes
    it (maps, unions of members, logical types and bytes need the row path)."""
    if pa.types.is_struct(kind):
        return all(_json_columnar(f.type) for f in kind)
    if pa.types.is_list(kind):
        return _json_columnar(kind.value_type)
    return pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind) or (
        pa.types.is_string(kind))


def _parsed_json(values: pa.Array, kind: pa.StructType) -> pa.Array | None:
    """JSON payloads parsed by Arrow's reader in one call, one line each; None when they do not
    come out one record a line (a payload with a raw newline, say), for the row path."""
    valid = pc.is_valid(values)
    lines = pc.binary_join_element_wise(pc.fill_null(values, pa.scalar(b"{}", pa.binary())), b"", b"\n")
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    text = lines.buffers()[2][int(offsets[0]):int(offsets[-1])]
    try:
        table = pa_json.read_json(pa.BufferReader(text), parse_options=pa_json.ParseOptions(
            explicit_schema=pa.schema(list(kind)), unexpected_field_behavior="ignore", newlines_in_values=False))
    except pa.ArrowInvalid:
        return None
    if table.num_rows != len(values):
        return None
    columns = [table.column(f.name).combine_chunks().cast(f.type) for f in kind]
    return pa.StructArray.from_arrays(columns, fields=list(kind), mask=pc.invert(valid))


def _shaper(schema: Any, from_json: bool) -> Callable[[Any], Any] | None:
    """What turns a decoded value into what Arrow takes for the column's type; None when it
    already is (fastavro gives dates, datetimes, Decimals and enum names as Arrow takes them;
    JSON carries the logical types' numbers)."""
    kind = schema.type
    logical = schema.props.get("logicalType")
    if from_json and logical in ("timestamp-millis", "date", "decimal"):
        return _json_logical(logical, schema)
    if kind in ("record", "error"):
        fields = [(f.name, _shaper(f.type, from_json)) for f in schema.fields]
        if not from_json and all(s is None for _, s in fields):
            return None
        return lambda d: None if d is None else {n: (d.get(n) if s is None else s(d.get(n))) for n, s in fields}
    if kind == "array":
        item = _shaper(schema.items, from_json)
        return None if item is None else (lambda xs: None if xs is None else [item(x) for x in xs])
    if kind == "map":
        value = _shaper(schema.values, from_json) or (lambda v: v)
        return lambda m: None if m is None else [(k, value(v)) for k, v in m.items()]
    if kind == "union":
        return _union_shaper(schema, from_json)
    return None


def _json_logical(logical: str, schema: Any) -> Callable[[Any], Any]:
    if logical == "timestamp-millis":
        return lambda v: None if v is None else v * 1000
    if logical == "date":
        return lambda v: v
    scale = int(schema.props.get("scale", 0))
    return lambda v: None if v is None else decimal.Decimal(v).scaleb(0).quantize(decimal.Decimal(1).scaleb(-scale))


def _union_shaper(schema: Any, from_json: bool) -> Callable[[Any], Any] | None:
    members = union_members(schema)
    shape = union_shape(schema)
    if shape == "single":
        return _shaper(members[0], from_json)
    if shape == "widened":
        return None
    shapers = [_shaper(m, from_json) or (lambda v: v) for m in members]
    names = [f"member{i}" for i in range(len(members))]
    tests = [_member_test(m) for m in members]

    def as_members(value: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        for name, test, shaper in zip(names, tests, shapers, strict=True):
            if test(value):
                return {name: shaper(value)}
        return None

    return as_members


_PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "boolean": (bool,), "int": (int,), "long": (int,), "float": (float, int), "double": (float, int),
    "string": (str,), "enum": (str,), "bytes": (bytes, decimal.Decimal), "fixed": (bytes, decimal.Decimal),
    "record": (dict,), "error": (dict,), "map": (dict,), "array": (list,),
}


def _member_test(member: Any) -> Callable[[Any], bool]:
    """Whether a decoded value belongs to this union member (fastavro gives the value, not the
    branch: the first member whose Python type fits is taken)."""
    accepted = _PYTHON_TYPES.get(member.type, (object,))
    if member.props.get("logicalType") in ("timestamp-millis", "timestamp-micros", "date"):
        accepted = (object,)
    if bool not in accepted:
        return lambda v: isinstance(v, accepted) and not isinstance(v, bool)
    return lambda v: isinstance(v, accepted)


def _key_value_decoder(reader: SchemaData, writers: WriterLookup) -> Decode:
    """KEY_VALUE: INLINE payloads hold `[int32 size][key][int32 size][value]`; SEPARATED ones
    hold the value, the key travelling base64-encoded as the message key."""
    parts = key_value_parts(reader)
    key_decode = _decoder(parts.key, _side(writers, "key"))
    value_decode = _decoder(parts.value, _side(writers, "value"))
    kind = value_type(reader)

    def decode(values: pa.Array, versions: pa.Array, keys: pa.Array) -> pa.Array:
        if parts.encoding == "SEPARATED":
            key_bytes = [None if k is None else base64.b64decode(k) for k in keys.to_pylist()]
            value_bytes = values
        else:
            split = [_split_inline(p) for p in values.to_pylist()]
            key_bytes = [s[0] for s in split]
            value_bytes = pa.array([s[1] for s in split], pa.binary())
        key_column = key_decode(pa.array(key_bytes, pa.binary()), versions, keys)
        value_column = value_decode(value_bytes, versions, keys)
        return pa.StructArray.from_arrays([key_column, value_column], fields=list(kind))

    return decode


def _side(writers: WriterLookup, side: str) -> WriterLookup:
    def lookup(version: int) -> SchemaData | None:
        schema = writers(version)
        if schema is None or schema.type != SchemaType.KEY_VALUE:
            return None
        parts = key_value_parts(schema)
        return parts.key if side == "key" else parts.value

    return lookup


def _split_inline(payload: bytes | None) -> tuple[bytes | None, bytes | None]:
    """The two sides of an INLINE payload; a payload that is not one reads as null, null."""
    if payload is None:
        return None, None
    try:
        return unpack_pair(payload)
    except InvalidSchemaError:
        return None, None
