"""Compatibility per strategy: the avro package's schema resolution against an independent
oracle on randomized evolutions, primitives by type, KEY_VALUE per side, PROTOBUF_NATIVE's
root message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from avro_oracle import can_read
from hypothesis import given, settings
from hypothesis import strategies as st
from protobuf_defs import definition
from verdicts import accepted

from magnetar.schemas import CompatibilityStrategy, IncompatibleSchemaError, SchemaData, SchemaType
from magnetar.schemas.compatibility import check_against_history
from magnetar.schemas.definitions import join_key_value
from magnetar.wire.proto import pulsar_api_pb2 as pb

S = CompatibilityStrategy
PRIMITIVES = ["int", "long", "float", "double", "string", "bytes", "boolean"]


def record(fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": "Rec", "namespace": "t", "fields": fields}


def avro(rec: dict[str, Any], kind: SchemaType = SchemaType.AVRO) -> SchemaData:
    return SchemaData(kind, json.dumps(rec).encode())


@st.composite
def fields(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from("abcdefgh"))
    base = draw(st.sampled_from(PRIMITIVES))
    if draw(st.booleans()):
        field: dict[str, Any] = {"name": name, "type": ["null", base]}
        if draw(st.booleans()):
            field["default"] = None
        return field
    field = {"name": name, "type": base}
    if draw(st.booleans()):
        field["default"] = {"int": 0, "long": 0, "float": 0.0, "double": 0.0, "string": "", "bytes": "",
                            "boolean": False}[base]
    return field


@st.composite
def records(draw: st.DrawFn) -> dict[str, Any]:
    drawn = draw(st.lists(fields(), min_size=1, max_size=5, unique_by=lambda f: f["name"]))
    return record(drawn)


@st.composite
def evolved(draw: st.DrawFn, base: dict[str, Any]) -> dict[str, Any]:
    """A next version: fields dropped, added, retyped (promotions and not), made optional."""
    out = [dict(f) for f in base["fields"]]
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["add", "drop", "retype"]))
        if action == "add" or not out:
            new = draw(fields())
            out = [f for f in out if f["name"] != new["name"]] + [new]
        elif action == "drop" and len(out) > 1:
            out.pop(draw(st.integers(0, len(out) - 1)))
        else:
            index = draw(st.integers(0, len(out) - 1))
            out[index] = {**draw(fields()), "name": out[index]["name"]}
    return record(out)


def expected(history: list[dict[str, Any]], new: dict[str, Any], strategy: CompatibilityStrategy) -> bool:
    compared = history if strategy.transitive else history[-1:]
    backward = strategy in (S.BACKWARD, S.BACKWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE)
    forward = strategy in (S.FORWARD, S.FORWARD_TRANSITIVE, S.FULL, S.FULL_TRANSITIVE)
    if strategy == S.ALWAYS_COMPATIBLE or not compared or (new == compared[-1] and not strategy.transitive):
        return True
    if strategy == S.ALWAYS_INCOMPATIBLE:
        return False
    return all((not backward or can_read(new, old)) and (not forward or can_read(old, new)) for old in compared)


@settings(max_examples=150)
@given(st.data(), st.sampled_from([s for s in S if s != S.UNDEFINED]), st.sampled_from([SchemaType.AVRO,
                                                                                           SchemaType.JSON]))
def test_random_evolutions_follow_avro_resolution(data: st.DataObject, strategy: CompatibilityStrategy,
                                                   kind: SchemaType) -> None:
    """A chain of versions, each proposed against the ones accepted so far: the checker
    accepts exactly what the oracle says Avro resolution allows under the strategy."""
    history = [data.draw(records())]
    for _ in range(data.draw(st.integers(1, 4))):
        proposal = data.draw(evolved(history[-1]))
        verdict = accepted([avro(r, kind) for r in history], avro(proposal, kind), strategy)
        assert verdict == expected(history, proposal, strategy), (history, proposal, strategy)
        if verdict:
            history.append(proposal)


def test_backward_and_forward_are_directions() -> None:
    v1 = record([{"name": "a", "type": "int"}])
    added_required = record([{"name": "a", "type": "int"}, {"name": "b", "type": "string"}])
    assert not accepted([avro(v1)], avro(added_required), S.BACKWARD)
    assert accepted([avro(v1)], avro(added_required), S.FORWARD)
    assert not accepted([avro(v1)], avro(added_required), S.FULL)


def test_transitive_looks_past_the_latest() -> None:
    """v1 {a:int}, v2 {b:string=""}, v3 {b:string}: v3 reads v2 but not v1 (no b, no default)."""
    v1 = avro(record([{"name": "a", "type": "int"}]))
    v2 = avro(record([{"name": "b", "type": "string", "default": ""}]))
    v3 = avro(record([{"name": "b", "type": "string"}]))
    assert accepted([v1], v2, S.BACKWARD)
    assert accepted([v1, v2], v3, S.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match=r"BACKWARD_TRANSITIVE: .*the version 1 before the latest"):
        check_against_history([v1, v2], v3, S.BACKWARD_TRANSITIVE)
    assert accepted([v1, v2], v3, S.FORWARD_TRANSITIVE) is False  # v1 cannot read v3's data either: a has no default


def test_the_message_names_the_strategy_and_the_field() -> None:
    v1 = record([{"name": "a", "type": "long"}])
    v2 = record([{"name": "a", "type": "int"}])
    with pytest.raises(IncompatibleSchemaError, match=r"strategy FULL: .*int.*long.*fields/0/type"):
        check_against_history([avro(v1)], avro(v2), S.FULL)


def test_the_type_may_not_change() -> None:
    with pytest.raises(IncompatibleSchemaError, match="exists schema type AVRO, new schema type JSON"):
        check_against_history([avro(record([]))], avro(record([]), SchemaType.JSON), S.FULL)
    assert accepted([avro(record([]))], SchemaData(SchemaType.STRING, b""), S.ALWAYS_COMPATIBLE)


@pytest.mark.parametrize("strategy", [s for s in S if s != S.UNDEFINED])
def test_primitives_need_only_the_same_type(strategy: CompatibilityStrategy) -> None:
    history = [SchemaData(SchemaType.STRING, b"")]
    assert accepted(history, SchemaData(SchemaType.STRING, b""), strategy)
    assert accepted(history, SchemaData(SchemaType.STRING, b"null"), strategy) == (strategy != S.ALWAYS_INCOMPATIBLE)
    assert accepted(history, SchemaData(SchemaType.INT32, b""), strategy) == (strategy == S.ALWAYS_COMPATIBLE)


def test_always_incompatible_refuses_any_change_but_keeps_the_same() -> None:
    v1 = avro(record([{"name": "a", "type": "int"}]))
    assert accepted([v1], v1, S.ALWAYS_INCOMPATIBLE)
    with pytest.raises(IncompatibleSchemaError, match="ALWAYS_INCOMPATIBLE"):
        check_against_history([v1], avro(record([{"name": "a", "type": "int", "doc": "d"}])), S.ALWAYS_INCOMPATIBLE)


def test_key_value_checks_each_side_by_its_type() -> None:
    v1 = avro(record([{"name": "a", "type": "int"}]))
    v2 = avro(record([{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}]))
    bad = avro(record([{"name": "a", "type": "string"}]))
    key = SchemaData(SchemaType.STRING, b"")
    history = [join_key_value(key, v1)]
    assert accepted(history, join_key_value(key, v2), S.FULL)
    with pytest.raises(IncompatibleSchemaError, match=r"KEY_VALUE schema, value: .*strategy BACKWARD"):
        check_against_history(history, join_key_value(key, bad), S.BACKWARD)
    with pytest.raises(IncompatibleSchemaError, match="key type changes from STRING to INT64"):
        check_against_history(history, join_key_value(SchemaData(SchemaType.INT64, b""), v1), S.FULL)
    assert accepted(history, join_key_value(SchemaData(SchemaType.INT64, b""), v1), S.ALWAYS_COMPATIBLE)


def test_protobuf_native_keeps_its_root_message() -> None:
    send = SchemaData(SchemaType.PROTOBUF_NATIVE, definition(pb.CommandSend.DESCRIPTOR))
    ack = SchemaData(SchemaType.PROTOBUF_NATIVE, definition(pb.CommandAck.DESCRIPTOR))
    assert accepted([send], send, S.FULL)
    with pytest.raises(IncompatibleSchemaError, match="root message may not change"):
        check_against_history([send], ack, S.BACKWARD)
    assert accepted([send], ack, S.ALWAYS_COMPATIBLE)
    assert not accepted([send], ack, S.ALWAYS_INCOMPATIBLE)


def test_records_match_by_fields_and_enums_by_name() -> None:
    """As Pulsar's Java validator resolves: a renamed record (a renamed Python Record class)
    still evolves, nested ones too; a renamed enum does not."""
    inner = {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}
    renamed_inner = {**inner, "name": "Other"}
    v1 = {**record([{"name": "a", "type": "int"}, {"name": "i", "type": ["null", inner], "default": None}]),
          "name": "User1"}
    v2 = {**record([{"name": "a", "type": "int"}, {"name": "i", "type": ["null", renamed_inner], "default": None}]),
          "name": "User2"}
    assert accepted([avro(v1)], avro(v2), S.FULL_TRANSITIVE)
    enum = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    e1 = record([{"name": "c", "type": enum}])
    e2 = record([{"name": "c", "type": {**enum, "name": "Colour"}}])
    with pytest.raises(IncompatibleSchemaError, match=r"expected: .*Colo"):
        check_against_history([avro(e1)], avro(e2), S.BACKWARD)
