"""magnetar.client's schemas, with the official client's API (`pulsar.schema`): typed
`Record` classes and the schemas that encode values for producers, decode them for
consumers and register with the broker. `schema=` on create_producer, subscribe and
create_reader takes any of them (docs/client.md).

Beyond the official Python client: the primitive schemas (BooleanSchema, ByteSchema,
ShortSchema, IntSchema, LongSchema, FloatSchema, DoubleSchema, named and encoded as in
Pulsar's Java client) and KeyValueSchema (INLINE and SEPARATED).
"""

from magnetar.client.schema.definition import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from magnetar.client.schema.protobuf_native import ProtobufNativeSchema
from magnetar.client.schema.schemas import (
    AvroSchema,
    BooleanSchema,
    ByteSchema,
    BytesSchema,
    DoubleSchema,
    FloatSchema,
    IntSchema,
    JsonSchema,
    KeyValue,
    KeyValueEncodingType,
    KeyValueSchema,
    LongSchema,
    Schema,
    ShortSchema,
    StringSchema,
)

__all__ = [
    "Array", "AvroSchema", "Boolean", "BooleanSchema", "ByteSchema", "Bytes", "BytesSchema", "CustomEnum",
    "Double", "DoubleSchema", "Field", "Float", "FloatSchema", "IntSchema", "Integer", "JsonSchema", "KeyValue",
    "KeyValueEncodingType", "KeyValueSchema", "Long", "LongSchema", "Map", "Null", "ProtobufNativeSchema", "Record",
    "Schema", "ShortSchema", "String", "StringSchema",
]
