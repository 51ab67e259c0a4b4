"""Reading schema definitions: what each type's bytes must be, parsed with real parsers (the
`avro` package for AVRO and JSON, protobuf's descriptor pool for PROTOBUF_NATIVE), and the
KEY_VALUE layout Pulsar's clients write.

A KEY_VALUE schema's data is `[int32 key length][key definition][int32 value length][value
definition]` (big-endian; -1 for an absent side) and its properties name each side's type,
name and properties (`key.schema.type`, `key.schema.name`, `key.schema.properties` as a JSON
object, the same for `value.`, and `kv.encoding.type` INLINE or SEPARATED).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.schemas.bounded_cache import BoundedCache
from magnetar.schemas.errors import InvalidSchemaError
from magnetar.schemas.model import SchemaData, SchemaType

KEY_TYPE, KEY_NAME, KEY_PROPERTIES = "key.schema.type", "key.schema.name", "key.schema.properties"
VALUE_TYPE, VALUE_NAME, VALUE_PROPERTIES = "value.schema.type", "value.schema.name", "value.schema.properties"
KV_ENCODING = "kv.encoding.type"
KV_ENCODINGS = ("INLINE", "SEPARATED")
if TYPE_CHECKING:
    import avro.schema

_PYTHON_NONE = b"null"
"""What the Python client sends as a STRING schema's definition (json.dumps(None))."""
_JSON_SCHEMA_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null", "any"})
_CLIENT_SIDE = frozenset({SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH})


def validate(schema: SchemaData, max_fields: int | None = None) -> None:
    """Refuse a definition its type cannot have, with a message that says what is wrong, and
    an Avro one (AVRO, JSON, PROTOBUF) with more than `max_fields` fields, union branches and
    symbols (see `avro_members`), counted before it is parsed."""
    kind = schema.type
    if kind in (SchemaType.AVRO, SchemaType.PROTOBUF) or \
            (kind == SchemaType.JSON and not is_legacy_json_schema(schema.data)):
        if max_fields is not None:
            _check_members(schema.data, kind, max_fields)
        parse_avro(schema.data, kind)
    elif kind == SchemaType.PROTOBUF_NATIVE:
        protobuf_root_message(schema.data)
    elif kind == SchemaType.STRING:
        if schema.data not in (b"", _PYTHON_NONE):
            raise InvalidSchemaError(f"Invalid schema definition data for STRING schema: {_shown(schema.data)}")
    elif kind == SchemaType.KEY_VALUE:
        key, value = split_key_value(schema)
        validate(key, max_fields)
        validate(value, max_fields)
    elif kind in _CLIENT_SIDE:
        raise InvalidSchemaError(f"Schema {kind.name} is a client-side schema type")
    elif kind.primitive and kind not in (SchemaType.NONE, SchemaType.BYTES) and schema.data:
        raise InvalidSchemaError(f"Invalid schema definition data for {kind.name} schema: a primitive schema has "
                                 f"no definition, but {len(schema.data)} bytes were given")


PARSED_LIMIT = 512
PARSED_BYTES = 2 * 1024 * 1024
"""Definitions kept parsed (at most PARSED_LIMIT, of PARSED_BYTES of text in all): the
registry compares every producer's schema with each live version of its topic, and parsing
is what that costs (a producer per version per parse)."""
_parsed: BoundedCache[avro.schema.Schema] = BoundedCache(PARSED_LIMIT, PARSED_BYTES)


def parse_avro(data: bytes, kind: SchemaType = SchemaType.AVRO) -> avro.schema.Schema:
    """An Avro schema from its JSON text. Names are not held to Avro's strict rule, as
    Pulsar's broker does not (Java clients name inner classes with '$'). `avro` is imported
    on first use: a broker whose topics have no schemas never loads it. The result is
    shared by every caller of the same (definition, type): treat it as read-only."""
    text = bytes(data)
    return _parsed.get((text, kind), len(text), lambda: _parse_avro(text, kind))


def avro_members(data: bytes) -> int | None:
    """What parsing and comparing an Avro definition costs grows with: the elements of
    every JSON array in it (its records' fields, its unions' branches, its enums' symbols,
    any list a property holds). None when it is no JSON (the parser says what is wrong)."""
    try:
        stack: list[Any] = [json.loads(data)]
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    count = 0
    while stack:
        value = stack.pop()
        if isinstance(value, list):
            count += len(value)
            stack += value
        elif isinstance(value, dict):
            stack += value.values()
    return count


def _check_members(data: bytes, kind: SchemaType, max_fields: int) -> None:
    members = avro_members(data)
    if members is not None and members > max_fields:
        raise InvalidSchemaError(f"Invalid schema definition data for {kind.name} schema: {members} fields, union "
                                 f"branches and symbols, more than the {max_fields} the broker takes "
                                 f"(schemaMaxFields)")


def _parse_avro(data: bytes, kind: SchemaType) -> avro.schema.Schema:
    import avro.errors  # noqa: PLC0415
    import avro.schema  # noqa: PLC0415

    try:
        return avro.schema.parse(data.decode("utf-8"), validate_names=False)
    except UnicodeDecodeError as exc:
        raise InvalidSchemaError(f"Invalid schema definition data for {kind.name} schema: not UTF-8 text "
                                 f"({exc.reason} at byte {exc.start})") from None
    except (avro.errors.AvroException, json.JSONDecodeError, TypeError, ValueError, AttributeError,
            KeyError) as exc:
        raise InvalidSchemaError(f"Invalid schema definition data for {kind.name} schema: {exc}") from None
    except RecursionError:
        raise InvalidSchemaError(_too_deep(kind)) from None


def is_legacy_json_schema(data: bytes) -> bool:
    """A JSON definition in the JSON-Schema form Pulsar's JSON schemas once had (before they
    became Avro schemas): an object whose `type` is a JSON-Schema type."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(document, dict) and document.get("type") in _JSON_SCHEMA_TYPES


def protobuf_root_message(data: bytes) -> str:
    """The full name of a PROTOBUF_NATIVE schema's root message, after building its file
    descriptors: the definition is JSON with `fileDescriptorSet` (base64 of a serialized
    FileDescriptorSet), `rootMessageTypeName` and `rootFileDescriptorName`."""
    from google.protobuf import descriptor_pb2, descriptor_pool  # noqa: PLC0415 (only PROTOBUF_NATIVE needs them)
    from google.protobuf.message import DecodeError  # noqa: PLC0415

    try:
        document = json.loads(data)
        descriptors = base64.b64decode(document["fileDescriptorSet"], validate=True)
        root_name = document["rootMessageTypeName"]
        root_file = document["rootFileDescriptorName"]
        file_set = descriptor_pb2.FileDescriptorSet.FromString(descriptors)
        pool = descriptor_pool.DescriptorPool()
        for file_proto in file_set.file:
            pool.Add(file_proto)
        message = pool.FindMessageTypeByName(root_name)
    except (ValueError, UnicodeDecodeError, binascii.Error, DecodeError) as exc:
        raise InvalidSchemaError(f"Invalid schema definition data for PROTOBUF_NATIVE schema: {exc}") from None
    except (KeyError, TypeError) as exc:
        raise InvalidSchemaError("Invalid schema definition data for PROTOBUF_NATIVE schema: it needs "
                                 f"fileDescriptorSet, rootMessageTypeName and rootFileDescriptorName ({exc})") from None
    except RecursionError:
        raise InvalidSchemaError(_too_deep(SchemaType.PROTOBUF_NATIVE)) from None
    if message.file.name != root_file:
        raise InvalidSchemaError(f"Invalid schema definition data for PROTOBUF_NATIVE schema: message {root_name} "
                                 f"is in {message.file.name}, not {root_file}")
    return message.full_name


@dataclass(frozen=True, slots=True)
class KeyValueParts:
    key: SchemaData
    value: SchemaData
    encoding: str


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    parts = key_value_parts(schema)
    return parts.key, parts.value


def key_value_parts(schema: SchemaData) -> KeyValueParts:
    """The two sides of a KEY_VALUE schema, each a SchemaData of its own type."""
    key_data, value_data = _split(schema.data)
    props = schema.properties
    encoding = props.get(KV_ENCODING) or "INLINE"
    if encoding not in KV_ENCODINGS:
        raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {KV_ENCODING} {encoding!r} is not INLINE or SEPARATED")
    return KeyValueParts(_side(props, KEY_TYPE, KEY_PROPERTIES, key_data),
                         _side(props, VALUE_TYPE, VALUE_PROPERTIES, value_data), encoding)


def join_key_value(key: SchemaData, value: SchemaData, *, key_name: str = "", value_name: str = "",
                   encoding: str = "INLINE") -> SchemaData:
    """The KEY_VALUE schema of two sides, laid out as Pulsar's clients lay it out."""
    data = pack_pair(key.data, value.data)
    properties = {
        KEY_NAME: key_name, KEY_TYPE: key.type.name, KEY_PROPERTIES: json.dumps(dict(key.properties)),
        VALUE_NAME: value_name, VALUE_TYPE: value.type.name, VALUE_PROPERTIES: json.dumps(dict(value.properties)),
        KV_ENCODING: encoding,
    }
    return SchemaData(SchemaType.KEY_VALUE, data, properties)


def _split(data: bytes) -> tuple[bytes, bytes]:
    key, value = unpack_pair(data, "KEY_VALUE schema", "schema")
    return key or b"", value or b""


_LENGTH = struct.Struct(">i")


def pack_pair(key: bytes | None, value: bytes | None) -> bytes:
    """Pulsar's INLINE layout of two sides, for KEY_VALUE schemas and their values alike: each
    side's length (4 bytes, big-endian; -1 for none), then its bytes."""
    return b"".join(_LENGTH.pack(-1) if side is None else _LENGTH.pack(len(side)) + side for side in (key, value))


def unpack_pair(data: bytes, what: str = "KEY_VALUE value", part: str = "side") -> tuple[bytes | None, bytes | None]:
    """The two sides `pack_pair` laid out (None for -1); InvalidSchemaError naming `what` when
    the lengths do not fit the data."""
    sides: list[bytes | None] = []
    offset = 0
    for side in ("key", "value"):
        if len(data) < offset + 4:
            raise InvalidSchemaError(f"Invalid {what}: the data ends before the {side} {part}'s length "
                                     f"({len(data)} bytes)")
        (length,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        if length == -1:
            sides.append(None)
            continue
        if length < 0 or len(data) < offset + length:
            raise InvalidSchemaError(f"Invalid {what}: the {side} {part}'s length {length} does not fit "
                                     f"the {len(data)} bytes of data")
        sides.append(data[offset:offset + length])
        offset += length
    if offset != len(data):
        raise InvalidSchemaError(f"Invalid {what}: {len(data) - offset} bytes after the value {part}")
    return sides[0], sides[1]


def writer_definition_for(writer: bytes, reader_definition: Any) -> Any:
    """The writer's Avro definition as a resolver must read it against the reader's: records
    match by their fields, not their names (as Pulsar's registry accepts them), so a top-level
    record takes the reader's name. One rule for every reader (client, Spark)."""
    definition = json.loads(writer)
    if isinstance(definition, dict) and isinstance(reader_definition, dict) and "name" in reader_definition:
        definition["name"] = reader_definition["name"]
    return definition


def _side(props: Mapping[str, str], type_key: str, props_key: str, data: bytes) -> SchemaData:
    type_name = props.get(type_key) or SchemaType.BYTES.name
    kind = SchemaType.parse(type_name)
    if kind == SchemaType.KEY_VALUE:
        raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {type_key} cannot be KEY_VALUE")
    return SchemaData(kind, data, _side_properties(props.get(props_key), props_key))


def _side_properties(raw: str | None, props_key: str) -> dict[str, str]:
    if not raw:
        return {}
    try:
        value: Any = json.loads(raw)
    except ValueError as exc:
        raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {props_key} is not JSON ({exc})") from None
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidSchemaError(f"Invalid KEY_VALUE schema: {props_key} is not a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def _too_deep(kind: SchemaType) -> str:
    """Parsers recurse per level of nesting: a definition beyond the interpreter's stack is
    refused as malformed, not left to fail the request."""
    return f"Invalid schema definition data for {kind.name} schema: nested too deeply"


def _shown(data: bytes) -> str:
    text = data[:80].decode("utf-8", "replace")
    return repr(text + ("..." if len(data) > 80 else ""))
