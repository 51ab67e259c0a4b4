"""The registry's data: schema types under Pulsar's names and wire numbers, a stored schema,
the nine compatibility strategies and the 8-byte version numbers clients stamp on messages."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from magnetar.schemas.errors import InvalidSchemaError


class SchemaType(enum.IntEnum):
    """Pulsar's SchemaType: the non-negative values are the wire's `Schema.Type` numbers; the
    negative ones never travel in a `Schema` (a client sends no schema for BYTES)."""

    NONE = 0
    STRING = 1
    JSON = 2
    PROTOBUF = 3
    AVRO = 4
    BOOLEAN = 5
    INT8 = 6
    INT16 = 7
    INT32 = 8
    INT64 = 9
    FLOAT = 10
    DOUBLE = 11
    DATE = 12
    TIME = 13
    TIMESTAMP = 14
    KEY_VALUE = 15
    INSTANT = 16
    LOCAL_DATE = 17
    LOCAL_TIME = 18
    LOCAL_DATE_TIME = 19
    PROTOBUF_NATIVE = 20
    BYTES = -1
    AUTO = -2
    AUTO_CONSUME = -3
    AUTO_PUBLISH = -4

    @classmethod
    def from_wire(cls, value: int) -> SchemaType:
        """The type of a `Schema.Type` number; 21 is the AutoConsume a v21 client may send."""
        if value == _WIRE_AUTO_CONSUME:
            return cls.AUTO_CONSUME
        if 0 <= value <= cls.PROTOBUF_NATIVE:
            return cls(value)
        raise InvalidSchemaError(f"unknown schema type number {value}")

    @property
    def wire(self) -> int:
        """The `Schema.Type` number that carries this type (None for the client-side ones)."""
        return max(int(self), 0)

    @classmethod
    def parse(cls, name: str) -> SchemaType:
        """A type by its Pulsar name, as the admin API and `key.schema.type` write it."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise InvalidSchemaError(f"unknown schema type {name!r}: use one of {', '.join(t.name for t in cls)}") \
                from None

    @property
    def primitive(self) -> bool:
        return self in _PRIMITIVE

    @property
    def struct(self) -> bool:
        return self in _STRUCT


_WIRE_AUTO_CONSUME = 21
_PRIMITIVE = frozenset({
    SchemaType.NONE, SchemaType.STRING, SchemaType.BOOLEAN, SchemaType.INT8, SchemaType.INT16, SchemaType.INT32,
    SchemaType.INT64, SchemaType.FLOAT, SchemaType.DOUBLE, SchemaType.DATE, SchemaType.TIME, SchemaType.TIMESTAMP,
    SchemaType.BYTES, SchemaType.INSTANT, SchemaType.LOCAL_DATE, SchemaType.LOCAL_TIME, SchemaType.LOCAL_DATE_TIME,
})
_STRUCT = frozenset({SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF, SchemaType.PROTOBUF_NATIVE})


@dataclass(frozen=True, slots=True)
class SchemaData:
    """One version of a topic's schema as the registry keeps it (Pulsar's SchemaData).

    A tombstone (`deleted`) is what deleting a schema appends: versions before it no longer
    count, and the next schema starts a new history under the next version number.
    """

    type: SchemaType
    data: bytes
    properties: Mapping[str, str] = field(default_factory=dict)
    user: str = ""
    timestamp: int = 0
    """Milliseconds since the epoch when it was registered."""
    deleted: bool = False

    @property
    def hash(self) -> bytes:
        """What Pulsar compares to find an existing version: SHA-256 of the definition (the
        type is compared beside it; properties are not)."""
        return hashlib.sha256(self.data).digest()

    @property
    def identity(self) -> tuple[bytes, tuple[tuple[str, str], ...]]:
        """What makes two schemas of one type the same: the definition's hash, plus for
        KEY_VALUE the properties, which name the two sides' types (Pulsar looks at the hash
        alone, so there KEY_VALUE<STRING, X> and KEY_VALUE<INT64, X> pass for one schema)."""
        if self.type == SchemaType.KEY_VALUE:
            return self.hash, tuple(sorted(self.properties.items()))
        return self.hash, ()

    def same_as(self, other: SchemaData) -> bool:
        """The same type and `identity`, told by comparing the bytes (no hash is computed: a
        producer's schema is compared with each live version on every PRODUCER)."""
        return self.type == other.type and self.data == other.data and \
            (self.type != SchemaType.KEY_VALUE or dict(self.properties) == dict(other.properties))


class CompatibilityStrategy(enum.Enum):
    """Pulsar's SchemaCompatibilityStrategy. UNDEFINED at a topic or namespace means "not set
    here"; the TRANSITIVE ones check a new schema against every version since the last delete,
    the others against the latest only."""

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @classmethod
    def parse(cls, name: str) -> CompatibilityStrategy:
        try:
            return cls[name.strip().upper()]
        except (KeyError, AttributeError):
            raise InvalidSchemaError(
                f"unknown schema compatibility strategy {name!r}: use one of {', '.join(s.name for s in cls)}") \
                from None

    @classmethod
    def from_auto_update(cls, name: str) -> CompatibilityStrategy:
        """The strategy an old namespace's `schema_auto_update_compatibility_strategy` means."""
        return _AUTO_UPDATE.get(name, cls.ALWAYS_INCOMPATIBLE)

    @property
    def transitive(self) -> bool:
        return self in (CompatibilityStrategy.BACKWARD_TRANSITIVE, CompatibilityStrategy.FORWARD_TRANSITIVE,
                        CompatibilityStrategy.FULL_TRANSITIVE)


_AUTO_UPDATE = {
    "Backward": CompatibilityStrategy.BACKWARD,
    "Forward": CompatibilityStrategy.FORWARD,
    "Full": CompatibilityStrategy.FULL,
    "AlwaysCompatible": CompatibilityStrategy.ALWAYS_COMPATIBLE,
    "BackwardTransitive": CompatibilityStrategy.BACKWARD_TRANSITIVE,
    "ForwardTransitive": CompatibilityStrategy.FORWARD_TRANSITIVE,
    "FullTransitive": CompatibilityStrategy.FULL_TRANSITIVE,
    "AutoUpdateDisabled": CompatibilityStrategy.ALWAYS_INCOMPATIBLE,
}
VERSION_SIZE = 8


def version_bytes(version: int) -> bytes:
    """A version as clients carry it: 8 bytes, big-endian (Pulsar's LongSchemaVersion)."""
    return version.to_bytes(VERSION_SIZE, "big", signed=True)


def version_from_bytes(raw: bytes) -> int:
    if len(raw) != VERSION_SIZE:
        raise InvalidSchemaError(f"a schema version is {VERSION_SIZE} bytes, not {len(raw)}")
    return int.from_bytes(raw, "big", signed=True)
