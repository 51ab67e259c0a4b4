"""Pulsar's compatibility rules as tables: which field changes Avro resolution allows in which
direction (what Java Avro's resolving grammar, Pulsar's validator, allows), and what each
strategy makes of a change that is readable one way, the other, both or neither."""

from __future__ import annotations

import json
from typing import Any

import pytest
from verdicts import accepted

from magnetar.schemas import CompatibilityStrategy, IncompatibleSchemaError, InvalidSchemaError, SchemaData, SchemaType
from magnetar.schemas.compatibility import check_against_history

S = CompatibilityStrategy
Fields = list[dict[str, Any]]


def schema(fields: Fields, name: str = "Rec", kind: SchemaType = SchemaType.AVRO) -> SchemaData:
    return SchemaData(kind, json.dumps({"type": "record", "name": name, "namespace": "t", "fields": fields}).encode())


def field(field_type: Any, name: str = "f", **extra: Any) -> Fields:
    return [{"name": name, "type": field_type, **extra}]


def enum(symbols: list[str], name: str = "Color") -> dict[str, Any]:
    return {"type": "enum", "name": name, "symbols": symbols}


def inner(fields: Fields, name: str = "Inner") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": fields}


def fixed(size: int, name: str = "Digest") -> dict[str, Any]:
    return {"type": "fixed", "name": name, "size": size}


# (what changes, old fields, new fields, new reads old (BACKWARD), old reads new (FORWARD))
CHANGES: list[tuple[str, Fields, Fields, bool, bool]] = [
    # promotions: the wider type reads the narrower, never the other way
    ("int to long", field("int"), field("long"), True, False),
    ("int to float", field("int"), field("float"), True, False),
    ("int to double", field("int"), field("double"), True, False),
    ("long to float", field("long"), field("float"), True, False),
    ("long to double", field("long"), field("double"), True, False),
    ("float to double", field("float"), field("double"), True, False),
    ("long to int", field("long"), field("int"), False, True),
    ("double to float", field("double"), field("float"), False, True),
    ("string to bytes", field("string"), field("bytes"), True, True),
    ("bytes to string", field("bytes"), field("string"), True, True),
    ("int to string", field("int"), field("string"), False, False),
    ("boolean to int", field("boolean"), field("int"), False, False),
    ("string to boolean", field("string"), field("boolean"), False, False),
    ("null to int", field("null"), field("int"), False, False),
    # fields added and removed
    ("added with a default", field("int", "a"), field("int", "a") + field("string", "b", default=""), True, True),
    ("added without a default", field("int", "a"), field("int", "a") + field("string", "b"), False, True),
    ("added optional, default null", field("int", "a"), field("int", "a") + field(["null", "string"], "b",
                                                                                  default=None), True, True),
    ("added optional without a default", field("int", "a"), field("int", "a") + field(["null", "string"], "b"),
     False, True),
    ("removed, it had a default", field("int", "a") + field("string", "b", default=""), field("int", "a"), True, True),
    ("removed without a default", field("int", "a") + field("string", "b"), field("int", "a"), True, False),
    ("renamed, new name aliases the old", field("int", "a"), field("int", "b", aliases=["a"]), True, False),
    ("renamed without an alias", field("int", "a"), field("int", "b"), False, False),
    ("reordered", field("int", "a") + field("string", "b"), field("string", "b") + field("int", "a"), True, True),
    # unions
    ("made optional", field("int"), field(["null", "int"]), True, False),
    ("made required", field(["null", "int"]), field("int"), False, True),
    ("union widened", field(["null", "string"]), field(["null", "string", "int"]), True, False),
    ("union branch promoted", field(["null", "int"]), field(["null", "long"]), True, False),
    ("union branches reordered", field(["null", "int"]), field(["int", "null"]), True, True),
    ("union to another", field(["null", "int"]), field(["null", "boolean"]), False, False),
    # a reader's union reads with the branch Java Avro picks: same type (and full name), else a
    # record that reads it, else a promotion; that branch must read it
    ("into a union by promotion", field("int"), field(["string", "long"]), True, False),
    ("into a union, the promoted branch first", field("int"), field(["null", "double", "long"]), True, False),
    ("into a union with no branch for it", field("int"), field(["null", "string"]), False, False),
    ("record into a union whose same-named record cannot read it",
     field(inner(field("int", "x"), "A")), field([inner(field("int", "x") + field("int", "y"), "A"),
                                                   inner(field("int", "x"), "B")]), False, True),
    ("record into a union of records of other names", field(inner(field("int", "x"), "A")),
     field([inner(field("int", "x") + field("int", "y"), "B"), inner(field("int", "x"), "C")]), True, True),
    ("enum into a union, the same name in another namespace", field(enum(["RED"])),
     field(["null", {**enum(["RED"]), "namespace": "u"}]), False, False),
    # enums: names must match; symbols are not compared (Pulsar's resolving grammar)
    ("enum symbol added", field(enum(["RED"])), field(enum(["RED", "BLUE"])), True, True),
    ("enum symbol removed", field(enum(["RED", "BLUE"])), field(enum(["RED"])), True, True),
    ("enum renamed", field(enum(["RED"])), field(enum(["RED"], "Colour")), False, False),
    ("enum renamed, new aliases the old", field(enum(["RED"])),
     field({**enum(["RED"], "Colour"), "aliases": ["Color"]}),
     True, False),
    ("enum renamed, new aliases the old by full name", field(enum(["RED"])),
     field({**enum(["RED"], "Colour"), "aliases": ["t.Color"]}), True, False),
    ("enum moved to another namespace", field(enum(["RED"])), field({**enum(["RED"]), "namespace": "u"}), True, True),
    ("enum to string", field(enum(["RED"])), field("string"), False, False),
    # fixed: name and size
    ("fixed resized", field(fixed(4)), field(fixed(8)), False, False),
    ("fixed renamed", field(fixed(4)), field(fixed(4, "Hash")), False, False),
    ("fixed renamed, new aliases the old", field(fixed(4)), field({**fixed(4, "Hash"), "aliases": ["Digest"]}),
     True, False),
    ("fixed renamed and resized, new aliases the old", field(fixed(4)),
     field({**fixed(8, "Hash"), "aliases": ["Digest"]}), False, False),
    ("fixed to bytes", field(fixed(4)), field("bytes"), False, False),
    # containers: their items resolve as fields do
    ("array items promoted", field({"type": "array", "items": "int"}), field({"type": "array", "items": "long"}),
     True, False),
    ("map values promoted", field({"type": "map", "values": "int"}), field({"type": "map", "values": "long"}),
     True, False),
    ("map values retyped", field({"type": "map", "values": "int"}), field({"type": "map", "values": "string"}),
     False, False),
    ("array to map", field({"type": "array", "items": "int"}), field({"type": "map", "values": "int"}), False, False),
    # nested records: matched by fields, not names
    ("nested field promoted", field(inner(field("int", "x"))), field(inner(field("long", "x"))), True, False),
    ("nested field added without default", field(inner(field("int", "x"))),
     field(inner(field("int", "x") + field("int", "y"))), False, True),
    ("nested record renamed", field(inner(field("int", "x"))), field(inner(field("int", "x"), "Other")), True, True),
    ("nested record in a union renamed", field(["null", inner(field("int", "x"))], default=None),
     field(["null", inner(field("int", "x"), "Other")], default=None), True, True),
    ("nested record to its field", field(inner(field("int", "x"))), field("int"), False, False),
]


@pytest.mark.parametrize(("old", "new", "backward", "forward"), [row[1:] for row in CHANGES],
                         ids=[row[0] for row in CHANGES])
@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON], ids=["AVRO", "JSON"])
def test_avro_resolution(old: Fields, new: Fields, backward: bool, forward: bool, kind: SchemaType) -> None:
    """Each direction on its own, then FULL: both; the top-level record renamed at the same
    time changes nothing (records match by fields)."""
    history = [schema(old, kind=kind)]
    proposed = schema(new, "Renamed", kind)
    assert accepted(history, proposed, S.BACKWARD) is backward
    assert accepted(history, proposed, S.FORWARD) is forward
    assert accepted(history, proposed, S.FULL) is (backward and forward)


READS_OLD = (field("int"), field("long"))
"""new reads old, old cannot read new"""
READ_BY_OLD = (field("long"), field("int"))
BOTH = (field("int", "a"), field("int", "a") + field("int", "b", default=0))
NEITHER = (field("int"), field("string"))

# strategy -> accepted: (READS_OLD, READ_BY_OLD, BOTH, NEITHER)
STRATEGIES: dict[CompatibilityStrategy, tuple[bool, bool, bool, bool]] = {
    S.ALWAYS_COMPATIBLE: (True, True, True, True),
    S.ALWAYS_INCOMPATIBLE: (False, False, False, False),
    S.UNDEFINED: (False, False, False, False),  # the registry turns it into FULL before it gets here
    S.BACKWARD: (True, False, True, False),
    S.FORWARD: (False, True, True, False),
    S.FULL: (False, False, True, False),
    S.BACKWARD_TRANSITIVE: (True, False, True, False),
    S.FORWARD_TRANSITIVE: (False, True, True, False),
    S.FULL_TRANSITIVE: (False, False, True, False),
}


@pytest.mark.parametrize("strategy", list(STRATEGIES), ids=lambda s: s.name)
@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON], ids=["AVRO", "JSON"])
def test_what_each_strategy_accepts(strategy: CompatibilityStrategy, kind: SchemaType) -> None:
    for (old, new), expected in zip((READS_OLD, READ_BY_OLD, BOTH, NEITHER), STRATEGIES[strategy], strict=True):
        assert accepted([schema(old, kind=kind)], schema(new, kind=kind), strategy) is expected, (old, new)
        assert accepted([], schema(new, kind=kind), strategy), "a first version is always accepted"


def test_the_same_definition_again_passes_every_plain_strategy() -> None:
    v1 = schema(field("int"))
    for strategy in (S.ALWAYS_INCOMPATIBLE, S.UNDEFINED, S.BACKWARD, S.FORWARD, S.FULL):
        assert accepted([v1], v1, strategy), strategy


# (history, new, the strategies that accept it); each history is oldest first
TRANSITIVE: list[tuple[str, list[Fields], Fields, set[CompatibilityStrategy]]] = [
    # v3 reads v2 (which has b) but not v1; v1 and v2 read v3
    ("a default dropped", [field("int", "a"), field("int", "a") + field("int", "b", default=0)],
     field("int", "a") + field("int", "b"), {S.BACKWARD, S.FORWARD, S.FORWARD_TRANSITIVE, S.FULL}),
    # v2 reads v3 (b has a default there) but v1 does not; v3 reads both
    ("a field v1 required removed", [field("int", "a") + field("int", "b"), field("int", "a") + field("int", "b",
                                                                                                   default=0)],
     field("int", "a"), {S.BACKWARD, S.BACKWARD_TRANSITIVE, S.FORWARD, S.FULL}),
    # v3 reads v2 only; neither reads v3 (no a)
    ("a field replaced", [field("int", "a"), field("int", "a") + field("int", "b", default=0)], field("int", "b"),
     {S.BACKWARD}),
    # every pair reads the other
    ("a field dropped and restored with a default", [field("int", "a") + field("int", "b"), field("int", "a")],
     field("int", "a") + field("int", "b", default=0), set(STRATEGIES) - {S.ALWAYS_INCOMPATIBLE, S.UNDEFINED}),
]


@pytest.mark.parametrize(("history", "new", "accepting"), [row[1:] for row in TRANSITIVE],
                         ids=[row[0] for row in TRANSITIVE])
def test_transitive_strategies_look_at_every_version(history: list[Fields], new: Fields,
                                                      accepting: set[CompatibilityStrategy]) -> None:
    versions = [schema(fields) for fields in history]
    for strategy in STRATEGIES:
        if strategy != S.ALWAYS_COMPATIBLE:
            assert accepted(versions, schema(new), strategy) is (strategy in accepting), strategy


def test_a_type_change_let_in_by_always_compatible_stops_the_transitive_strategies() -> None:
    """ALWAYS_COMPATIBLE lets a topic change its type; later the plain strategies compare
    with the latest version only, the transitive ones find the other type in the history."""
    history = [SchemaData(SchemaType.STRING, b""), schema(field("int"))]
    assert accepted(history, schema(field("long")), S.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match="exists schema type STRING, new schema type AVRO"):
        check_against_history(history, schema(field("long")), S.BACKWARD_TRANSITIVE)


def test_an_unreadable_definition_is_refused_as_incompatible() -> None:
    """A definition the parser cannot read, stored or new, refuses the new schema (Pulsar
    answers a parse failure with IncompatibleSchemaException), naming what is wrong."""
    broken = SchemaData(SchemaType.AVRO, b'{"type": "record"')
    with pytest.raises(IncompatibleSchemaError, match="Invalid schema definition data for AVRO"):
        check_against_history([broken], schema(field("int")), S.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match="Invalid schema definition data for AVRO"):
        check_against_history([schema(field("int"))], broken, S.FULL_TRANSITIVE)
    assert accepted([broken], schema(field("int")), S.ALWAYS_COMPATIBLE)


def test_every_version_is_named_in_a_transitive_refusal() -> None:
    """The message says which version refused and in which direction."""
    v1, v2 = schema(field("int", "a")), schema(field("int", "a") + field("int", "b", default=0))
    with pytest.raises(IncompatibleSchemaError, match=r"strategy BACKWARD_TRANSITIVE: the new schema cannot read data "
                                                      r"written with the version 1 before the latest"):
        check_against_history([v1, v2], schema(field("int", "b")), S.BACKWARD_TRANSITIVE)
    with pytest.raises(IncompatibleSchemaError, match=r"strategy FORWARD: the latest version cannot read data "
                                                      r"written with the new schema: a \(at .*/fields/0\)"):
        check_against_history([v2], schema(field("string", "c")), S.FORWARD)


def test_pulsar_has_no_none_strategy() -> None:
    """Confluent's NONE is Pulsar's ALWAYS_COMPATIBLE; Pulsar's admin API knows no NONE, and
    an old namespace's auto-update policy maps as Pulsar maps it (unknown: disabled)."""
    with pytest.raises(InvalidSchemaError, match="unknown schema compatibility strategy 'NONE': use one of"):
        S.parse("NONE")
    assert S.parse(" full_transitive ") == S.FULL_TRANSITIVE
    assert S.from_auto_update("AutoUpdateDisabled") == S.ALWAYS_INCOMPATIBLE
    assert S.from_auto_update("None") == S.ALWAYS_INCOMPATIBLE
    assert S.from_auto_update("BackwardTransitive") == S.BACKWARD_TRANSITIVE


def test_a_refusal_lists_every_problem_and_where() -> None:
    old = schema(field("int", "a") + field("int", "b"))
    with pytest.raises(IncompatibleSchemaError) as refused:
        check_against_history([old], schema(field("string", "c")), S.FORWARD)
    assert str(refused.value) == ("Incompatible schema with strategy FORWARD: the latest version cannot read data "
                                  "written with the new schema: a; b (at /fields/0, /fields/1)")


def test_a_renamed_enum_is_refused_at_its_name() -> None:
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: expected: t\.Color \(at /fields/0/type/name\)$"):
        check_against_history([schema(field(enum(["RED"])))], schema(field(enum(["RED"], "Colour"))), S.BACKWARD)


def test_a_refusal_in_a_union_names_the_branch() -> None:
    old = schema(field(inner(field("int", "x"), "A")))
    new = schema(field(["null", inner(field("boolean", "x"), "A")]))
    with pytest.raises(IncompatibleSchemaError, match=r": reader type: boolean not compatible with writer type: int "
                                                      r"\(at /fields/0/type/1/fields/0/type\)$"):
        check_against_history([old], new, S.BACKWARD)


def test_a_json_definition_is_named_json_when_unreadable() -> None:
    broken = SchemaData(SchemaType.JSON, b'{"type": "record"')
    with pytest.raises(IncompatibleSchemaError, match="Invalid schema definition data for JSON schema"):
        check_against_history([broken], schema(field("int"), kind=SchemaType.JSON), S.FULL)


def test_primitives_are_refused_only_by_always_incompatible() -> None:
    with pytest.raises(IncompatibleSchemaError, match=r"^Schema compatibility strategy is ALWAYS_INCOMPATIBLE$"):
        check_against_history([SchemaData(SchemaType.INT64, b"")], SchemaData(SchemaType.INT64, b"x"),
                              S.ALWAYS_INCOMPATIBLE)


LEGACY_A = SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:a", "properties": {}}')
LEGACY_A2 = SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:a", "properties": {"x": {"type": "integer"}}}')
LEGACY_B = SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:b", "properties": {}}')


@pytest.mark.parametrize("strategy", [S.ALWAYS_INCOMPATIBLE, S.BACKWARD, S.FORWARD, S.FULL], ids=lambda s: s.name)
def test_json_in_the_old_json_schema_form(strategy: CompatibilityStrategy) -> None:
    """As Pulsar's JSON check: an Avro definition replaces an old-form one and an old-form one
    follows an Avro one, whatever the strategy; two old-form ones must share their id."""
    current = schema(field("int"), kind=SchemaType.JSON)
    assert accepted([LEGACY_A], current, strategy)
    assert accepted([current], LEGACY_A, strategy)
    assert accepted([LEGACY_A], LEGACY_A2, strategy)
    with pytest.raises(IncompatibleSchemaError, match=r"^Incompatible schema: the two JSON-Schema definitions have "
                                                      r"different ids$"):
        check_against_history([LEGACY_A], LEGACY_B, strategy)


def test_a_key_value_schema_with_a_broken_layout_is_refused_as_incompatible() -> None:
    broken = SchemaData(SchemaType.KEY_VALUE, b"\x00\x00")
    good = SchemaData(SchemaType.KEY_VALUE, b"\x00\x00\x00\x00\x00\x00\x00\x00")
    with pytest.raises(IncompatibleSchemaError, match="Invalid KEY_VALUE schema: the data ends before the key"):
        check_against_history([broken], good, S.FULL)


def test_a_union_refused_by_a_union_names_the_branch_it_lacks() -> None:
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: reader union lacking writer type: INT "
                                                      r"\(at /fields/0/type/1\)$"):
        check_against_history([schema(field(["null", "int"]))], schema(field(["null", "boolean"])), S.BACKWARD)


def test_a_union_read_by_one_type_names_each_branch_it_cannot_read() -> None:
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: reader type: int not compatible with writer "
                                                      r"type: null \(at /\)$"):
        check_against_history([schema(field(["null", "int"]))], schema(field("int")), S.BACKWARD)


def test_a_union_whose_only_record_cannot_read_the_writer_lacks_a_branch() -> None:
    """A record of another name is tried and does not read it: no branch reads the writer."""
    old = schema(field(inner(field("int", "x"), "A")))
    new = schema(field(["null", inner(field("int", "y"), "B")]))
    with pytest.raises(IncompatibleSchemaError, match=r": reader union lacking writer type record "
                                                      r"\(at /fields/0/type\)$"):
        check_against_history([old], new, S.BACKWARD)


def test_aliases_that_name_no_writer_field_leave_the_field_missing() -> None:
    old = schema(field("int", "a"))
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: b \(at /fields/0\)$"):
        check_against_history([old], schema(field("int", "b", aliases=["c", "d"])), S.BACKWARD)
    assert accepted([old], schema(field("int", "b", aliases=["c"], default=0)), S.BACKWARD)


def test_an_enum_default_does_not_stand_for_a_missing_field_s() -> None:
    old = schema(field("int", "a"))
    with_enum = schema(field("int", "a") + field({**enum(["RED"]), "default": "RED"}, "colour"))
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: colour \(at /fields/1\)$"):
        check_against_history([old], with_enum, S.BACKWARD)


def test_a_recursive_record_evolves() -> None:
    """A type met again inside itself counts as read there (the linked list's `next`)."""
    def node(*extra: dict[str, Any]) -> SchemaData:
        return schema([{"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Rec"]}, *extra])

    assert accepted([node()], node({"name": "tag", "type": ["null", "string"], "default": None}), S.FULL)
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD: .*: tag \(at /fields/2\)$"):
        check_against_history([node()], node({"name": "tag", "type": "string"}), S.BACKWARD)


def test_a_pair_tried_for_a_union_branch_still_counts_where_it_is_read() -> None:
    """Record A, tried (and failing) as the union branch for B in `u`, is compared with B
    again for `v`: the pair is compared once, and its problem is one of the refusal's."""
    a = {"type": "record", "name": "A", "fields": [{"name": "y", "type": "int"}]}
    b = {"type": "record", "name": "B", "fields": [{"name": "x", "type": "int"}]}
    old = schema(field(b, "u") + field("t.B", "v"))
    new = schema(field(["null", a], "u") + field("t.A", "v"))
    with pytest.raises(IncompatibleSchemaError, match=r": reader union lacking writer type record; y "
                                                      r"\(at /fields/0, /fields/0/type\)$"):
        check_against_history([old], new, S.BACKWARD)


def test_ten_problems_are_all_shown() -> None:
    names = [f"n{i}" for i in range(10)]
    new = schema([{"name": name, "type": "int"} for name in names])
    with pytest.raises(IncompatibleSchemaError) as refused:
        check_against_history([schema(field("int", "other"))], new, S.BACKWARD)
    assert str(refused.value).endswith(f": {'; '.join(names)} (at {', '.join(f'/fields/{i}' for i in range(10))})")
