"""The Arrow (hence Spark) type of a schema'd topic's `value` column.

Mapped the way StreamNative's pulsar-spark connector maps Pulsar schemas (its SchemaUtils), so
jobs moving over see the same types: primitives to their Spark type; AVRO and JSON records to a
struct of their fields, with unions with null as nullable members, `int|long` as long,
`float|double` as double, enums as strings, the decimal/date/timestamp logical types as
Spark's, and other unions as a struct of `member0`, `member1`, ...; KEY_VALUE (which the
connector does not read) as a struct of `key` and `value`. Recursive records have no Spark
type and are refused, as there.
"""

from __future__ import annotations

from typing import Any

import avro.schema
import pyarrow as pa

from magnetar.schemas import SchemaData, SchemaType
from magnetar.schemas.definitions import is_legacy_json_schema, key_value_parts, parse_avro

#: Pulsar's primitive schemas as the Java client writes them: fixed-width big-endian numbers,
#: dates and timestamps as epoch milliseconds (numpy dtypes; a Spark date is days).
FIXED_WIDTH = {
    SchemaType.BOOLEAN: ">u1", SchemaType.INT8: ">i1", SchemaType.INT16: ">i2", SchemaType.INT32: ">i4",
    SchemaType.INT64: ">i8", SchemaType.FLOAT: ">f4", SchemaType.DOUBLE: ">f8", SchemaType.DATE: ">i8",
    SchemaType.TIMESTAMP: ">i8",
}
MS_PER_DAY = 86_400_000

SPARK_TIMESTAMP = pa.timestamp("us", tz="UTC")
PRIMITIVE_TYPES: dict[SchemaType, pa.DataType] = {
    SchemaType.NONE: pa.binary(),
    SchemaType.BYTES: pa.binary(),
    SchemaType.STRING: pa.string(),
    SchemaType.BOOLEAN: pa.bool_(),
    SchemaType.INT8: pa.int8(),
    SchemaType.INT16: pa.int16(),
    SchemaType.INT32: pa.int32(),
    SchemaType.INT64: pa.int64(),
    SchemaType.FLOAT: pa.float32(),
    SchemaType.DOUBLE: pa.float64(),
    SchemaType.DATE: pa.date32(),
    SchemaType.TIMESTAMP: SPARK_TIMESTAMP,
}
_AVRO_PRIMITIVES = {
    "boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
    "string": pa.string(), "bytes": pa.binary(), "fixed": pa.binary(), "enum": pa.string(),
}
_LOGICAL = {
    ("int", "date"): pa.date32(),
    ("long", "timestamp-millis"): SPARK_TIMESTAMP,
    ("long", "timestamp-micros"): SPARK_TIMESTAMP,
}


class UnsupportedSchemaError(ValueError):
    """A topic's schema has no typed `value` column (read it with valueFormat=bytes)."""


def value_type(schema: SchemaData) -> pa.DataType:
    """The `value` column's type for messages of `schema` (the topic's latest version)."""
    kind = schema.type
    if kind in PRIMITIVE_TYPES:
        return PRIMITIVE_TYPES[kind]
    if kind in (SchemaType.AVRO, SchemaType.JSON):
        return avro_arrow_type(record_schema(schema))
    if kind == SchemaType.KEY_VALUE:
        parts = key_value_parts(schema)
        return pa.struct([pa.field("key", value_type(parts.key)), pa.field("value", value_type(parts.value))])
    raise UnsupportedSchemaError(
        f"{kind.name} schemas have no typed value column here: read the topic with option valueFormat=bytes")


def record_schema(schema: SchemaData) -> avro.schema.Schema:
    """An AVRO or JSON schema's definition, parsed (JSON schemas' definitions are Avro schemas)."""
    if schema.type == SchemaType.JSON and is_legacy_json_schema(schema.data):
        raise UnsupportedSchemaError("this topic's JSON schema is a legacy JSON-Schema definition, not an Avro one: "
                                     "read it with option valueFormat=bytes")
    return parse_avro(schema.data, schema.type)


def avro_arrow_type(schema: avro.schema.Schema, enclosing: frozenset[str] = frozenset()) -> pa.DataType:
    """The Arrow type of an Avro schema; `enclosing` are the records around it (recursion check)."""
    kind = schema.type
    logical = _LOGICAL.get((kind, schema.props.get("logicalType")))
    if logical is not None:
        return logical
    if schema.props.get("logicalType") == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema.props["precision"]), int(schema.props.get("scale", 0)))
    if kind in _AVRO_PRIMITIVES:
        return _AVRO_PRIMITIVES[kind]
    if kind in ("record", "error"):
        return _record_type(schema, enclosing)
    if kind == "array":
        return pa.list_(avro_arrow_type(schema.items, enclosing))
    if kind == "map":
        return pa.map_(pa.string(), avro_arrow_type(schema.values, enclosing))
    if kind == "union":
        return _union_type(schema, enclosing)
    raise UnsupportedSchemaError(f"Avro type {kind!r} has no Spark type: read the topic with option valueFormat=bytes")


def _record_type(schema: Any, enclosing: frozenset[str]) -> pa.DataType:
    name = schema.fullname
    if name in enclosing:
        raise UnsupportedSchemaError(
            f"record {name} contains itself (a recursive Avro schema), which has no Spark type: "
            "read the topic with option valueFormat=bytes")
    inner = enclosing | {name}
    return pa.struct([pa.field(f.name, avro_arrow_type(f.type, inner)) for f in schema.fields])


def union_members(schema: Any) -> list[avro.schema.Schema]:
    """The union's members other than null."""
    return [s for s in schema.schemas if s.type != "null"]


def union_shape(schema: Any) -> str:
    """How a union reads: `single` (one member besides null), `widened` (int|long or
    float|double, read as the wider) or `members` (a struct of member0, member1, ...)."""
    members = union_members(schema)
    if len(members) == 1:
        return "single"
    if {m.type for m in members} in ({"int", "long"}, {"float", "double"}) and len(members) == 2 and not any(
            m.props.get("logicalType") for m in members):
        return "widened"
    return "members"


def _union_type(schema: Any, enclosing: frozenset[str]) -> pa.DataType:
    members = union_members(schema)
    if not members:
        raise UnsupportedSchemaError("an Avro union of null alone has no Spark type")
    shape = union_shape(schema)
    if shape == "single":
        return avro_arrow_type(members[0], enclosing)
    if shape == "widened":
        return pa.float64() if "double" in {m.type for m in members} else pa.int64()
    return pa.struct([pa.field(f"member{i}", avro_arrow_type(m, enclosing)) for i, m in enumerate(members)])
