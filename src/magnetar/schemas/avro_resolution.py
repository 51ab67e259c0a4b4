"""Avro schema resolution as Pulsar's broker applies it.

Pulsar validates with Java Avro's resolving grammar (`SchemaValidatorBuilder`), which
reports only what makes every read fail, and differs from the `avro` package's checker in
two ways kept here:

- records match by their fields and never by their names (a Python `Record` subclass renamed
  between versions still evolves), while enums and fixed types must keep their short names,
  or the reader must list the writer's name among its aliases (an alias without a dot is in
  the reader's namespace, where the `avro` package's checker takes it as written);
- an enum's symbols are never compared: the grammar turns a writer symbol the reader lacks
  into a failure of the one read that meets it, not into an error of the schema, so symbols
  may be added and removed under every strategy.

Imported on first use (it loads `avro`).
"""

from __future__ import annotations

from avro.compatibility import (
    CompatibleResult,
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaIncompatibilityType,
    SchemaType,
    check_fixed_size,
    incompatible,
    merge,
)
from avro.schema import EnumSchema, FixedSchema, NamedSchema, RecordSchema, Schema


class PulsarCompatibilityChecker(ReaderWriterCompatibilityChecker):
    def calculate_compatibility(self, reader: Schema, writer: Schema, location: list[str]) -> SchemaCompatibilityResult:
        if reader.type == writer.type == SchemaType.RECORD:
            assert isinstance(reader, RecordSchema) and isinstance(writer, RecordSchema)
            return self.check_reader_writer_record_fields(reader, writer, location)
        if reader.type == writer.type == SchemaType.ENUM:
            assert isinstance(reader, EnumSchema) and isinstance(writer, EnumSchema)
            return _check_names(reader, writer, location)
        if reader.type == writer.type == SchemaType.FIXED:
            assert isinstance(reader, FixedSchema) and isinstance(writer, FixedSchema)
            return merge(_check_names(reader, writer, location), check_fixed_size(reader, writer, location))
        return super().calculate_compatibility(reader, writer, location)


def _check_names(reader: NamedSchema, writer: NamedSchema, location: list[str]) -> SchemaCompatibilityResult:
    aliases = reader.props.get("aliases") or []
    qualified = {alias if "." in alias or not reader.namespace else f"{reader.namespace}.{alias}" for alias in aliases}
    if reader.name == writer.name or writer.fullname in qualified:
        return CompatibleResult
    return incompatible(SchemaIncompatibilityType.name_mismatch, f"expected: {writer.fullname}", [*location, "name"])
