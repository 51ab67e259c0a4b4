"""Avro schema resolution as Pulsar's broker applies it.

Pulsar validates with Java Avro's resolving grammar (`SchemaValidatorBuilder`), which
reports only what makes every read fail, and differs from the `avro` package's checker in
three ways kept here:

- records match by their fields and never by their names (a Python `Record` subclass renamed
  between versions still evolves), while enums and fixed types must keep their short names,
  or the reader must list the writer's name among its aliases (an alias without a dot is in
  the reader's namespace, where the `avro` package's checker takes it as written);
- an enum's symbols are never compared: the grammar turns a writer symbol the reader lacks
  into a failure of the one read that meets it, not into an error of the schema, so symbols
  may be added and removed under every strategy;
- a reader's union reads a writer's non-union type with one branch, chosen as Java Avro
  chooses it, which must then read it: the first of the same type (named types: of the same
  full name), else a record that reads it (the last of the same short name, else the first),
  else the first the type promotes to. The `avro` package's checker accepts any branch that
  reads it.

Imported on first use (it loads `avro`).
"""

from __future__ import annotations

from avro.compatibility import (
    CompatibleResult,
    ReaderWriterCompatibilityChecker,
    SchemaCompatibilityResult,
    SchemaCompatibilityType,
    SchemaIncompatibilityType,
    SchemaType,
    check_fixed_size,
    incompatible,
    merge,
)
from avro.schema import EnumSchema, FixedSchema, NamedSchema, RecordSchema, Schema, UnionSchema

_NAMED = frozenset({SchemaType.RECORD, SchemaType.ENUM, SchemaType.FIXED})
_PROMOTED_TO = {
    SchemaType.INT: frozenset({SchemaType.LONG, SchemaType.FLOAT, SchemaType.DOUBLE}),
    SchemaType.LONG: frozenset({SchemaType.FLOAT, SchemaType.DOUBLE}),
    SchemaType.FLOAT: frozenset({SchemaType.DOUBLE}),
    SchemaType.STRING: frozenset({SchemaType.BYTES}),
    SchemaType.BYTES: frozenset({SchemaType.STRING}),
}


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
        if reader.type == SchemaType.UNION and writer.type != SchemaType.UNION:
            assert isinstance(reader, UnionSchema)
            index = self._branch_for(reader, writer)
            if index is None:
                return incompatible(SchemaIncompatibilityType.missing_union_branch,
                                    f"reader union lacking writer type {writer.type}", location)
            return self.get_compatibility(reader.schemas[index], writer, str(index), location)
        return super().calculate_compatibility(reader, writer, location)

    def _branch_for(self, reader: UnionSchema, writer: Schema) -> int | None:
        """The index of the branch Java Avro resolves `writer` with, if any."""
        structural = None
        for index, branch in enumerate(reader.schemas):
            if branch.type != writer.type:
                continue
            if writer.type not in _NAMED or branch.fullname == writer.fullname:
                return index
            if writer.type == SchemaType.RECORD and (structural is None or branch.name == writer.name) and \
                    self.get_compatibility(branch, writer).compatibility is SchemaCompatibilityType.compatible:
                structural = index
        if structural is not None:
            return structural
        promoted = _PROMOTED_TO.get(writer.type, frozenset())
        return next((index for index, branch in enumerate(reader.schemas) if branch.type in promoted), None)


def _check_names(reader: NamedSchema, writer: NamedSchema, location: list[str]) -> SchemaCompatibilityResult:
    aliases = reader.props.get("aliases") or []
    qualified = {alias if "." in alias or not reader.namespace else f"{reader.namespace}.{alias}" for alias in aliases}
    if reader.name == writer.name or writer.fullname in qualified:
        return CompatibleResult
    return incompatible(SchemaIncompatibilityType.name_mismatch, f"expected: {writer.fullname}", [*location, "name"])
