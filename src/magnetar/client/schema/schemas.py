"""Schemas: how a producer's values become bytes and a consumer's bytes become values, and
what each registers with the broker (its `SchemaData`: type, definition, properties).

The official client's schemas (BytesSchema, StringSchema, JsonSchema, AvroSchema) register
the definitions it registers, byte for byte, so a topic shared with its producers keeps one
version; the primitive schemas and KeyValueSchema encode as Pulsar's Java client does.

Avro goes through fastavro (compiled; the official client's `[avro]` extra uses it too):
several times faster than the pure-Python `avro` package at encoding and decoding records,
and it resolves a writer's schema to the reader's (added fields take their defaults,
removed ones are skipped), which is how a consumer reads messages of another version.
"""

from __future__ import annotations

import base64
import enum
import io
import json
import struct
from typing import Any, ClassVar, NamedTuple, Protocol

import fastavro

from magnetar.client.schema.definition import Record
from magnetar.schemas.definitions import (
    join_key_value,
    key_value_parts,
    pack_pair,
    unpack_pair,
    writer_definition_for,
)
from magnetar.schemas.model import SchemaData, SchemaType
from magnetar.schemas.protocol import to_wire
from magnetar.wire.proto import pulsar_api_pb2 as pb


class Message(Protocol):
    """What decoding a received message reads (magnetar.client.Message has it)."""

    def data(self) -> bytes: ...

    def has_null_value(self) -> bool: ...

    def key_bytes(self) -> bytes | None: ...


class Schema:
    """A value type: `encode` for producers, `decode` for consumers, `schema_info` for the broker."""

    resolves_writer: ClassVar[bool] = False
    """Whether decoding needs the definition of the version that wrote the message."""

    def __init__(self, record_cls: Any, kind: SchemaType, definition: bytes, name: str) -> None:
        self._record_cls = record_cls
        self._info = SchemaData(kind, definition)
        self._name = name

    def schema_info(self) -> SchemaData:
        """What this schema registers: type, definition and properties."""
        return self._info

    def wire(self) -> pb.Schema | None:
        """The `Schema` of CommandProducer and CommandSubscribe; None for bytes, which registers nothing."""
        if self._info.type == SchemaType.BYTES:
            return None
        return to_wire(self._name, self._info)

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def encode_message(self, obj: Any) -> tuple[bytes | None, dict[str, Any]]:
        """The payload of a message holding `obj` (None: a null value), and the send options
        the value sets besides (its key, for a SEPARATED KeyValueSchema)."""
        return self.encode(obj), {}

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def decode_with(self, data: bytes, writer: SchemaData | None) -> Any:
        """`data` as written with `writer` (None: with this schema), read as this schema's values."""
        return self.decode(data)

    def decode_message(self, message: Message, writer: SchemaData | None) -> Any:
        """A received message's value (None for a null value), written with `writer`."""
        return None if message.has_null_value() else self.decode_with(message.data(), writer)

    def _validate_object_type(self, obj: Any) -> None:
        if not isinstance(obj, self._record_cls):
            kinds = self._record_cls if isinstance(self._record_cls, tuple) else (self._record_cls,)
            expected = " or ".join(kind.__name__ for kind in kinds)
            raise TypeError(f"{self} cannot encode a {type(obj).__name__} ({obj!r:.60}): expected {expected}")

    def __str__(self) -> str:
        return type(self).__name__


class BytesSchema(Schema):
    """Bytes as they are; registers nothing (a topic's bytes are Pulsar's default)."""

    def __init__(self) -> None:
        super().__init__(bytes, SchemaType.BYTES, b"", "BYTES")

    def encode(self, data: Any) -> bytes:
        self._validate_object_type(data)
        return data

    def decode(self, data: bytes) -> bytes:
        return data


class StringSchema(Schema):
    def __init__(self) -> None:
        # the official client registers the JSON text of None as a STRING schema's definition
        super().__init__(str, SchemaType.STRING, b"null", "STRING")

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        return obj.encode()

    def decode(self, data: bytes) -> str:
        return data.decode()


class _Packed(Schema):
    """A primitive of fixed width, big-endian, as Pulsar's Java client writes it; subclasses
    name their type, `struct` layout and accepted Python types in the class statement."""

    kind: ClassVar[SchemaType]
    layout: ClassVar[struct.Struct]
    python_types: ClassVar[tuple[type, ...]]

    def __init_subclass__(cls, kind: SchemaType, layout: str, python_types: tuple[type, ...] = (int,)) -> None:
        cls.kind, cls.layout, cls.python_types = kind, struct.Struct(layout), python_types

    def __init__(self) -> None:
        super().__init__(self.python_types, self.kind, b"", self.kind.name)

    def encode(self, obj: Any) -> bytes:
        self._validate_object_type(obj)
        try:
            return self.layout.pack(obj)
        except struct.error as exc:
            raise ValueError(f"{self} cannot encode {obj!r}: {exc}") from None

    def decode(self, data: bytes) -> Any:
        return self.layout.unpack(data)[0]


class BooleanSchema(_Packed, kind=SchemaType.BOOLEAN, layout=">?", python_types=(bool,)):
    pass


class ByteSchema(_Packed, kind=SchemaType.INT8, layout=">b"):
    """INT8."""


class ShortSchema(_Packed, kind=SchemaType.INT16, layout=">h"):
    """INT16."""


class IntSchema(_Packed, kind=SchemaType.INT32, layout=">i"):
    """INT32."""


class LongSchema(_Packed, kind=SchemaType.INT64, layout=">q"):
    """INT64."""


class FloatSchema(_Packed, kind=SchemaType.FLOAT, layout=">f", python_types=(float, int)):
    pass


class DoubleSchema(_Packed, kind=SchemaType.DOUBLE, layout=">d", python_types=(float, int)):
    pass


def definition_bytes(definition: Any) -> bytes:
    """The definition's JSON as the official client writes it (one-space indent): a Pulsar
    broker finds a schema's version by a hash of these bytes."""
    return json.dumps(definition, indent=True).encode()


class _Struct(Schema):
    """AVRO and JSON: a Record class (or, for Avro, a bare definition and dicts)."""

    def __init__(self, record_cls: Any, kind: SchemaType, definition: Any) -> None:
        self._definition = definition
        super().__init__(record_cls, kind, definition_bytes(definition), kind.name)

    def _plain(self, obj: Any) -> Any:
        """A record as the encoder's dicts and lists."""
        if self._record_cls is None:
            if not isinstance(obj, dict):
                raise TypeError(f"{self} without a Record class encodes dicts, not {type(obj).__name__}")
            return obj
        self._validate_object_type(obj)
        return self._tree(obj)

    def _tree(self, value: Any) -> Any:
        if isinstance(value, Record):
            return {name: self._tree(item) for name, item in value.fields().items()}
        if isinstance(value, enum.Enum):
            return self._enum(value)
        if isinstance(value, list):
            return [self._tree(item) for item in value]
        if isinstance(value, dict):
            return {key: self._tree(item) for key, item in value.items()}
        return value

    def _enum(self, value: enum.Enum) -> Any:
        raise NotImplementedError

    def _value(self, plain: dict[str, Any]) -> Any:
        return plain if self._record_cls is None else self._record_cls(**plain)


class JsonSchema(_Struct):
    """Records as JSON text; the definition is the record's Avro schema, as Pulsar has it."""

    def __init__(self, record_cls: type[Record]) -> None:
        super().__init__(record_cls, SchemaType.JSON, record_cls.schema())

    def _enum(self, value: enum.Enum) -> Any:
        return value.value  # the official client's JSON carries an enum's value

    def _tree(self, value: Any) -> Any:
        return value.decode() if isinstance(value, bytes) else super()._tree(value)

    def encode(self, obj: Any) -> bytes:
        return json.dumps(self._plain(obj), separators=(",", ":")).encode()

    def decode(self, data: bytes) -> Any:
        return self._value(json.loads(data))


class AvroSchema(_Struct):
    """Records in Avro's binary encoding; a message of another version is resolved to this one."""

    resolves_writer = True

    def __init__(self, record_cls: type[Record] | None, schema_definition: dict[str, Any] | None = None) -> None:
        if record_cls is None and schema_definition is None:
            raise ValueError("AvroSchema needs a Record class or a schema definition")
        definition = record_cls.schema() if record_cls is not None else schema_definition
        super().__init__(record_cls, SchemaType.AVRO, definition)
        self._parsed = fastavro.parse_schema(definition)
        self._writers: dict[bytes, Any] = {}
        """Parsed writer definitions, by their bytes."""

    def _enum(self, value: enum.Enum) -> Any:
        return value.name

    def encode(self, obj: Any) -> bytes:
        buffer = io.BytesIO()
        plain = self._plain(obj)
        try:
            fastavro.schemaless_writer(buffer, self._parsed, plain)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise TypeError(f"{self} cannot encode {obj!r:.80}: {exc}") from None
        return buffer.getvalue()

    def decode(self, data: bytes) -> Any:
        return self._value(fastavro.schemaless_reader(io.BytesIO(data), self._parsed, None))

    def decode_with(self, data: bytes, writer: SchemaData | None) -> Any:
        if writer is None or writer.data == self._info.data:
            return self.decode(data)
        parsed = self._writers.get(writer.data)
        if parsed is None:
            parsed = self._writers[writer.data] = self._writer_schema(writer)
        return self._value(fastavro.schemaless_reader(io.BytesIO(data), parsed, self._parsed))

    def _writer_schema(self, writer: SchemaData) -> Any:
        if writer.type != SchemaType.AVRO:
            raise TypeError(f"a message written with a {writer.type.name} schema cannot be read as {self}")
        return fastavro.parse_schema(writer_definition_for(writer.data, self._definition))

    def __str__(self) -> str:
        name = getattr(self._record_cls, "__name__", None)
        return f"AvroSchema({name})" if name else "AvroSchema"


class KeyValueEncodingType(enum.IntEnum):
    """Where a KEY_VALUE message's key goes: inline in the payload (both sides), or separated
    into the message key (the payload holds the value alone)."""

    INLINE = 0
    SEPARATED = 1


class KeyValue(NamedTuple):
    key: Any
    value: Any


_WRITERS_KEPT = 64
"""Writer versions a KeyValueSchema keeps split into their sides (a topic has a few)."""


class KeyValueSchema(Schema):
    """A (key, value) pair, each side with its own schema; values are `KeyValue` tuples (or pairs).

    INLINE, as Pulsar's clients write it: the payload is the key's length (4 bytes,
    big-endian; -1 for None), its bytes, then the value's the same way. SEPARATED, as
    Pulsar's Java client writes it: the payload is the value's encoding (a None value is a
    null value), and the key's encoding travels base64-encoded as the message key
    (`partition_key_b64_encoded`; a None key is `null_partition_key`), so Key_Shared
    consumers, compaction and partition routing see the record's key."""

    resolves_writer = True

    def __init__(self, key_schema: Schema, value_schema: Schema,
                 encoding_type: KeyValueEncodingType = KeyValueEncodingType.INLINE) -> None:
        self.key_schema = key_schema
        self.value_schema = value_schema
        self.encoding_type = KeyValueEncodingType(encoding_type)
        super().__init__(tuple, SchemaType.KEY_VALUE, b"", "KeyValue")
        self._info = join_key_value(key_schema.schema_info(), value_schema.schema_info(),
                                    encoding=self.encoding_type.name)
        self._separated = self.encoding_type == KeyValueEncodingType.SEPARATED
        self._writer_sides: dict[tuple[bytes, tuple[tuple[str, str], ...]],
                                 tuple[SchemaData | None, SchemaData | None]] = {}
        """Each writer's (key, value) definitions, by what identifies the writer: its data and
        its properties, which name the sides' types (KEY_VALUE<AVRO, X> and KEY_VALUE<JSON, X>
        of one record have the same data), so equal copies of one version share their split."""
        self._last_writer: tuple[SchemaData | None, tuple[SchemaData | None, SchemaData | None]] = (None, (None, None))
        """The last writer met and its sides (held, so its identity cannot be reused)."""

    def _pair(self, obj: Any) -> tuple[Any, Any]:
        self._validate_object_type(obj)
        if len(obj) != 2:
            raise TypeError(f"{self} encodes (key, value) pairs, not a tuple of {len(obj)}")
        return obj[0], obj[1]

    def encode(self, obj: Any) -> bytes:
        """The INLINE payload of a pair (what a SEPARATED schema's payload would not hold)."""
        key, value = self._pair(obj)
        return pack_pair(None if key is None else self.key_schema.encode(key),
                         None if value is None else self.value_schema.encode(value))

    def encode_message(self, obj: Any) -> tuple[bytes | None, dict[str, Any]]:
        if not self._separated:
            return self.encode(obj), {}
        key, value = self._pair(obj)
        options: dict[str, Any] = {"null_partition_key": True} if key is None else {
            "partition_key": base64.b64encode(self.key_schema.encode(key)).decode("ascii"),
            "partition_key_b64_encoded": True}
        return None if value is None else self.value_schema.encode(value), options

    def decode(self, data: bytes) -> KeyValue:
        return self.decode_with(data, None)

    def decode_with(self, data: bytes, writer: SchemaData | None) -> KeyValue:
        """An INLINE payload."""
        key_writer, value_writer = self._sides(writer)
        key_data, value_data = unpack_pair(data)
        return KeyValue(None if key_data is None else self.key_schema.decode_with(key_data, key_writer),
                        None if value_data is None else self.value_schema.decode_with(value_data, value_writer))

    def decode_message(self, message: Message, writer: SchemaData | None) -> KeyValue | None:
        if not self._separated:
            return super().decode_message(message, writer)
        key_writer, value_writer = self._sides(writer)
        key_data = message.key_bytes()
        return KeyValue(None if key_data is None else self.key_schema.decode_with(key_data, key_writer),
                        None if message.has_null_value() else
                        self.value_schema.decode_with(message.data(), value_writer))

    def _sides(self, writer: SchemaData | None) -> tuple[SchemaData | None, SchemaData | None]:
        """The writer's key and value definitions, split once per writer version. The
        client hands out one SchemaData per version, so the writer of the last message is
        recognized by identity first: the version key is built only when it changes."""
        if writer is None or writer.type != SchemaType.KEY_VALUE:
            return None, None
        if writer is self._last_writer[0]:
            return self._last_writer[1]
        identity = writer.data, tuple(writer.properties.items())
        known = self._writer_sides.get(identity)
        if known is None:
            if len(self._writer_sides) >= _WRITERS_KEPT:
                self._writer_sides.clear()
            parts = key_value_parts(writer)
            known = self._writer_sides[identity] = (parts.key, parts.value)
        self._last_writer = (writer, known)
        return known

    def __str__(self) -> str:
        return f"KeyValueSchema({self.key_schema}, {self.value_schema})"


