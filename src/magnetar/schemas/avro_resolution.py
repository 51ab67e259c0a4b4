"""Avro schema resolution as Pulsar's broker applies it.

Pulsar validates with Java Avro's resolving grammar (`SchemaValidatorBuilder`), which
reports only what makes every read fail, and differs from the `avro` package's checker in
four ways kept here:

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
  reads it;
- a reader field the writer lacks needs a default of its own: an enum's default does not
  stand in for it (the `avro` package then compares the enum with the writer's record).

The cost is linear in the schemas' size, where the `avro` package's checker is quadratic
(a 16,000-field record took 30 s): it looks each reader field up in a writer field table it
builds again per field, and merges results by copying every problem found so far. Here a
record's fields and a union's branches are indexed once, and a record's or union's problems
are gathered in one pass. What stays quadratic is Java Avro's own rule for a union of
records named differently (each writer record tried against each reader record): a check
has a budget of steps, and one over it is refused as too complex (TooComplexError).

Imported on first use (it loads `avro`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

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
from avro.schema import EnumSchema, Field, FixedSchema, NamedSchema, RecordSchema, Schema, UnionSchema

_NAMED = frozenset({SchemaType.RECORD, SchemaType.ENUM, SchemaType.FIXED})
_PROMOTED_TO = {
    SchemaType.INT: frozenset({SchemaType.LONG, SchemaType.FLOAT, SchemaType.DOUBLE}),
    SchemaType.LONG: frozenset({SchemaType.FLOAT, SchemaType.DOUBLE}),
    SchemaType.FLOAT: frozenset({SchemaType.DOUBLE}),
    SchemaType.STRING: frozenset({SchemaType.BYTES}),
    SchemaType.BYTES: frozenset({SchemaType.STRING}),
}
_INCOMPATIBLE = SchemaCompatibilityType.incompatible
_problem = functools.partial(incompatible, SchemaIncompatibilityType.type_mismatch)
"""An incompatibility: its message and where (the `avro` package's form); its type, which
nothing reads (refusals show messages and locations), is left at one value."""
_IN_PROGRESS = SchemaCompatibilityResult(SchemaCompatibilityType.recursion_in_progress)


class TooComplexError(Exception):
    """The check took more steps than its budget."""


class _Branches:
    """A union's branches indexed once: the first of each type, the first of each (type, full
    name), and the records in order."""

    __slots__ = ("by_name", "by_type", "records")

    def __init__(self, union: UnionSchema) -> None:
        self.by_type: dict[str, int] = {}
        self.by_name: dict[tuple[str, str], int] = {}
        self.records: list[int] = []
        for index, branch in enumerate(union.schemas):
            self.by_type.setdefault(branch.type, index)
            if branch.type in _NAMED:
                self.by_name.setdefault((branch.type, branch.fullname), index)
            if branch.type == SchemaType.RECORD:
                self.records.append(index)


class PulsarCompatibilityChecker(ReaderWriterCompatibilityChecker):
    def __init__(self, budget: int) -> None:
        """`budget`: how many pairs of (reader, writer) types the check may compare."""
        super().__init__()
        self._steps_left = budget
        self._known: dict[tuple[int, int], SchemaCompatibilityResult] = {}
        self._fields: dict[int, tuple[RecordSchema, dict[str, Field]]] = {}
        self._branches: dict[int, tuple[UnionSchema, _Branches]] = {}

    def get_compatibility(self, reader: Schema, writer: Schema, reference_token: str = "/",
                          location: list[str] | None = None) -> SchemaCompatibilityResult:
        """Each pair of types is compared once; a pair met again inside itself (a recursive
        type) counts as compatible there. Pairs are known by their schemas' ids, which the
        schemas being compared keep alive (the `avro` package's own key hashes the two ids'
        XOR, which collides for most pairs of a large record: each look-up probed ~50 keys)."""
        key = (id(reader), id(writer))
        known = self._known.get(key)
        if known is not None:
            return CompatibleResult if known is _IN_PROGRESS else known
        self._known[key] = _IN_PROGRESS
        result = self._known[key] = self.calculate_compatibility(reader, writer, [*(location or ()), reference_token])
        return result

    def calculate_compatibility(self, reader: Schema, writer: Schema, location: list[str]) -> SchemaCompatibilityResult:
        self._steps_left -= 1
        if self._steps_left < 0:
            raise TooComplexError
        if reader.type == writer.type == SchemaType.RECORD:
            assert isinstance(reader, RecordSchema) and isinstance(writer, RecordSchema)
            return self.check_reader_writer_record_fields(reader, writer, location)
        if reader.type == writer.type == SchemaType.ENUM:
            assert isinstance(reader, EnumSchema) and isinstance(writer, EnumSchema)
            return _check_names(reader, writer, location)
        if reader.type == writer.type == SchemaType.FIXED:
            assert isinstance(reader, FixedSchema) and isinstance(writer, FixedSchema)
            return merge(_check_names(reader, writer, location), check_fixed_size(reader, writer, location))
        if writer.type == SchemaType.UNION:
            assert isinstance(writer, UnionSchema)
            return self._from_union(reader, writer, location)
        if reader.type == SchemaType.UNION:
            assert isinstance(reader, UnionSchema)
            index = self._branch_for(reader, writer)
            if index is None:
                return _problem(f"reader union lacking writer type {writer.type}", location)
            return self.get_compatibility(reader.schemas[index], writer, str(index), location)
        return super().calculate_compatibility(reader, writer, location)

    def check_reader_writer_record_fields(self, reader: RecordSchema, writer: RecordSchema,
                                          location: list[str]) -> SchemaCompatibilityResult:
        """Each reader field reads its writer field (by name, else by one of its aliases), or
        has a default."""
        written = self._fields_of(writer)
        results = []
        for index, field in enumerate(reader.fields):
            source = written.get(field.name)
            if source is None:
                aliases = field.props.get("aliases")
                source = next((written[a] for a in aliases if a in written), None) \
                    if isinstance(aliases, list) else None
            where = [*location, "fields", str(index)]
            if source is not None:
                results.append(self.get_compatibility(field.type, source.type, "type", where))
            elif not field.has_default:  # an enum's own default does not stand for the field's, as in Java
                results.append(_problem(field.name, where))
        return _combined(results)

    def _from_union(self, reader: Schema, writer: UnionSchema, location: list[str]) -> SchemaCompatibilityResult:
        """Every branch the writer may write must be read: by the reader's union (a problem
        there is the missing branch), or by the reader itself."""
        if reader.type != SchemaType.UNION:
            return _combined(self.get_compatibility(reader, branch) for branch in writer.schemas)
        return _combined(
            _problem(f"reader union lacking writer type: {branch.type.upper()}", [*location, str(index)])
            for index, branch in enumerate(writer.schemas)
            if self.get_compatibility(reader, branch).compatibility is _INCOMPATIBLE)

    def _branch_for(self, reader: UnionSchema, writer: Schema) -> int | None:
        """The index of the branch Java Avro resolves `writer` with, if any."""
        branches = self._branches_of(reader)
        if writer.type not in _NAMED:
            found = branches.by_type.get(writer.type)
            if found is not None:
                return found
        else:
            found = branches.by_name.get((writer.type, writer.fullname))
            if found is not None:
                return found
            if writer.type == SchemaType.RECORD:
                structural = None
                for index in branches.records:
                    branch = reader.schemas[index]
                    if (structural is None or branch.name == writer.name) and \
                            self.get_compatibility(branch, writer).compatibility is SchemaCompatibilityType.compatible:
                        structural = index
                if structural is not None:
                    return structural
        promoted = [branches.by_type[kind] for kind in _PROMOTED_TO.get(writer.type, ()) if kind in branches.by_type]
        return min(promoted, default=None)

    def _fields_of(self, record: RecordSchema) -> dict[str, Field]:
        """The record's fields by name, built once per check (the schema is kept beside its
        table, so its id is not reused meanwhile)."""
        entry = self._fields.get(id(record))
        if entry is None:
            entry = self._fields[id(record)] = (record, {field.name: field for field in record.fields})
        return entry[1]

    def _branches_of(self, union: UnionSchema) -> _Branches:
        entry = self._branches.get(id(union))
        if entry is None:
            entry = self._branches[id(union)] = (union, _Branches(union))
        return entry[1]


def _combined(results: Iterable[SchemaCompatibilityResult]) -> SchemaCompatibilityResult:
    """One result of many, in one pass: incompatible with every problem's message and
    location, if any (the incompatibility types nobody reads are left out)."""
    problems = [result for result in results if result.compatibility is _INCOMPATIBLE]
    if not problems:
        return CompatibleResult
    return SchemaCompatibilityResult(
        compatibility=_INCOMPATIBLE,
        messages=set().union(*(result.messages for result in problems)),
        locations=set().union(*(result.locations for result in problems)))


def _check_names(reader: NamedSchema, writer: NamedSchema, location: list[str]) -> SchemaCompatibilityResult:
    aliases = reader.props.get("aliases") or []
    qualified = {alias if "." in alias or not reader.namespace else f"{reader.namespace}.{alias}" for alias in aliases}
    if reader.name == writer.name or writer.fullname in qualified:
        return CompatibleResult
    return _problem(f"expected: {writer.fullname}", [*location, "name"])
