"""The schema a sink's `value` column registers: the inverse of the read mapping (value_types).

A struct becomes an AVRO schema whose record has the struct's fields; a primitive the Pulsar
primitive schema of its type; binary registers nothing, as Pulsar's own clients register nothing
for BYTES, so topics written without a schema (and topics whose schema another producer owns)
take pre-encoded payloads as before.

Records are named as the pulsar-spark connector names them (`topLevelRecord`, a nested record
after its field, in its parent's namespace), so the definition only depends on the DataFrame's
type and the same DataFrame type always finds the same version. Unlike the connector, a
nullable field is the union `["null", T]` with default null (the connector writes `[T, "null"]`
without a default): a later DataFrame that adds a nullable column then reads what the earlier
one wrote, which is what lets the schema evolve under Pulsar's default strategy (FULL).
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyspark.sql import types as T

from magnetar.schemas import SchemaData, SchemaType
from magnetar.spark.option_errors import fail

RECORD_NAME = "topLevelRecord"
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
PRIMITIVE_SCHEMAS: dict[type[T.DataType], SchemaType] = {
    T.StringType: SchemaType.STRING,
    T.BooleanType: SchemaType.BOOLEAN,
    T.ByteType: SchemaType.INT8,
    T.ShortType: SchemaType.INT16,
    T.IntegerType: SchemaType.INT32,
    T.LongType: SchemaType.INT64,
    T.FloatType: SchemaType.FLOAT,
    T.DoubleType: SchemaType.DOUBLE,
    T.DateType: SchemaType.DATE,
    T.TimestampType: SchemaType.TIMESTAMP,
}
_AVRO_PRIMITIVES: dict[type[T.DataType], Any] = {
    T.BooleanType: "boolean",
    T.ByteType: "int",
    T.ShortType: "int",
    T.IntegerType: "int",
    T.LongType: "long",
    T.FloatType: "float",
    T.DoubleType: "double",
    T.StringType: "string",
    T.BinaryType: "bytes",
    T.DateType: {"type": "int", "logicalType": "date"},
    T.TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
}


def value_schema_for(data_type: T.DataType) -> SchemaData | None:
    """What a `value` column of `data_type` registers (None: nothing, for binary); a type with
    no schema is refused with a message naming the field."""
    if isinstance(data_type, T.BinaryType):
        return None
    kind = PRIMITIVE_SCHEMAS.get(type(data_type))
    if kind is not None:
        return SchemaData(kind, b"")
    if isinstance(data_type, T.StructType):
        definition = avro_definition(data_type)
        return SchemaData(SchemaType.AVRO, json.dumps(definition, separators=(",", ":")).encode())
    fail(f"column 'value' of type {data_type.simpleString()} has no Pulsar schema: the sink writes a struct "
         "(an AVRO record), binary, string, a number, boolean, date or timestamp")


def avro_definition(struct: T.StructType) -> dict[str, Any]:
    """The AVRO record a struct `value` is written as."""
    return _record(struct, RECORD_NAME, None, "value")


def _record(struct: T.StructType, name: str, namespace: str | None, path: str) -> dict[str, Any]:
    fullname = name if namespace is None else f"{namespace}.{name}"
    fields = []
    for field in struct.fields:
        where = f"{path}.{field.name}"
        if not _AVRO_NAME.match(field.name):
            fail(f"field {where!r}: Avro field names are letters, digits and _ (not starting with a digit); "
                 "rename it")
        avro_type = _avro_type(field.dataType, field.nullable, field.name, fullname, where)
        fields.append({"name": field.name, "type": avro_type, **({"default": None} if field.nullable else {})})
    record: dict[str, Any] = {"type": "record", "name": name, "fields": fields}
    if namespace is not None:
        record["namespace"] = namespace
    return record


def _avro_type(data_type: T.DataType, nullable: bool, name: str, namespace: str, where: str) -> Any:
    inner = _non_null_type(data_type, name, namespace, where)
    return ["null", inner] if nullable else inner


def _non_null_type(data_type: T.DataType, name: str, namespace: str, where: str) -> Any:
    primitive = _AVRO_PRIMITIVES.get(type(data_type))
    if primitive is not None:
        return primitive
    if isinstance(data_type, T.DecimalType):
        return {"type": "bytes", "logicalType": "decimal", "precision": data_type.precision,
                "scale": data_type.scale}
    if isinstance(data_type, T.StructType):
        return _record(data_type, name, namespace, where)
    if isinstance(data_type, T.ArrayType):
        return {"type": "array",
                "items": _avro_type(data_type.elementType, data_type.containsNull, name, namespace, f"{where}[]")}
    if isinstance(data_type, T.MapType):
        if not isinstance(data_type.keyType, T.StringType):
            fail(f"field {where!r}: Avro maps have string keys, got {data_type.keyType.simpleString()}")
        return {"type": "map",
                "values": _avro_type(data_type.valueType, data_type.valueContainsNull, name, namespace,
                                     f"{where}{{}}")}
    fail(f"field {where!r} of type {data_type.simpleString()} has no Avro type here "
         "(cast it, e.g. timestamp_ntz to timestamp)")
