"""The registry's data model: Pulsar's type numbers and names, versions, strategies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.schemas import (
    CompatibilityStrategy,
    InvalidSchemaError,
    SchemaData,
    SchemaType,
    version_bytes,
    version_from_bytes,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb


def test_wire_numbers_are_the_protos() -> None:
    """Every type that travels has the number of the wire's Schema.Type of the same meaning."""
    names = {"BOOLEAN": "Bool", "KEY_VALUE": "KeyValue", "LOCAL_DATE": "LocalDate", "LOCAL_TIME": "LocalTime",
             "LOCAL_DATE_TIME": "LocalDateTime", "PROTOBUF_NATIVE": "ProtobufNative", "INT8": "Int8",
             "INT16": "Int16", "INT32": "Int32", "INT64": "Int64"}
    for kind in SchemaType:
        if kind.value < 0:
            assert kind.wire == pb.Schema.Type.Value("None")
            continue
        wire_name = names.get(kind.name, kind.name.title())
        assert pb.Schema.Type.Value(wire_name) == kind.wire
        assert SchemaType.from_wire(kind.wire) == kind


def test_auto_consume_and_unknown_wire_numbers() -> None:
    assert SchemaType.from_wire(21) == SchemaType.AUTO_CONSUME
    with pytest.raises(InvalidSchemaError, match="unknown schema type number 99"):
        SchemaType.from_wire(99)


def test_names_parse_as_pulsar_writes_them() -> None:
    assert SchemaType.parse("key_value") == SchemaType.KEY_VALUE
    with pytest.raises(InvalidSchemaError, match=r"unknown schema type 'AVRO2'.*AVRO"):
        SchemaType.parse("AVRO2")
    assert CompatibilityStrategy.parse("full_transitive").transitive
    assert not CompatibilityStrategy.parse("FULL").transitive
    with pytest.raises(InvalidSchemaError, match="unknown schema compatibility strategy 'SIDEWAYS'"):
        CompatibilityStrategy.parse("SIDEWAYS")
    assert CompatibilityStrategy.from_auto_update("BackwardTransitive") == CompatibilityStrategy.BACKWARD_TRANSITIVE
    assert CompatibilityStrategy.from_auto_update("AutoUpdateDisabled") == CompatibilityStrategy.ALWAYS_INCOMPATIBLE
    assert len(CompatibilityStrategy) == 9


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_versions_are_eight_bytes_big_endian(version: int) -> None:
    raw = version_bytes(version)
    assert len(raw) == 8 and raw == version.to_bytes(8, "big")
    assert version_from_bytes(raw) == version


def test_a_version_of_another_size_is_refused() -> None:
    with pytest.raises(InvalidSchemaError, match="8 bytes, not 3"):
        version_from_bytes(b"\x00\x00\x01")


def test_equality_is_type_and_definition_not_properties() -> None:
    """Pulsar finds an existing version by the SHA-256 of the definition and the type."""
    a = SchemaData(SchemaType.AVRO, b'"int"', {"a": "1"})
    assert a.same_as(SchemaData(SchemaType.AVRO, b'"int"', {"b": "2"}))
    assert not a.same_as(SchemaData(SchemaType.JSON, b'"int"'))
    assert not a.same_as(SchemaData(SchemaType.AVRO, b'"long"'))


def test_key_value_properties_name_its_sides() -> None:
    """Unlike Pulsar, the sides' types (in the properties) tell two KEY_VALUE schemas apart."""
    data = b"\x00\x00\x00\x00\x00\x00\x00\x00"
    string_key = SchemaData(SchemaType.KEY_VALUE, data, {"key.schema.type": "STRING"})
    assert string_key.same_as(SchemaData(SchemaType.KEY_VALUE, data, {"key.schema.type": "STRING"}))
    assert not string_key.same_as(SchemaData(SchemaType.KEY_VALUE, data, {"key.schema.type": "INT64"}))
