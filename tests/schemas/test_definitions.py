"""Definitions: what each type's bytes must be, and the KEY_VALUE layout."""

from __future__ import annotations

import io
import json
import struct

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st
from protobuf_defs import definition

from magnetar.schemas import InvalidSchemaError, SchemaData, SchemaType
from magnetar.schemas.definitions import (
    join_key_value,
    key_value_parts,
    pack_pair,
    protobuf_root_message,
    unpack_pair,
    validate,
    writer_definition_for,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

RECORD = json.dumps({"type": "record", "name": "User", "namespace": "app",
                     "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}).encode()


@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF])
def test_avro_definitions_parse(kind: SchemaType) -> None:
    validate(SchemaData(kind, RECORD))
    validate(SchemaData(kind, b'"string"'))


@pytest.mark.parametrize(("data", "says"), [
    (b"{not json", "Invalid schema definition data for AVRO schema"),
    (b'{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nope"}]}', "nope"),
    (b'{"type": "record", "name": "R"}', "Invalid schema definition data for AVRO schema"),
    (b'{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "Invalid schema definition data for AVRO schema"),
    (b"\xff\xfe", "not UTF-8 text"),
    (b"", "Invalid schema definition data for AVRO schema"),
])
def test_bad_avro_definitions_are_refused_with_the_reason(data: bytes, says: str) -> None:
    with pytest.raises(InvalidSchemaError, match=says):
        validate(SchemaData(SchemaType.AVRO, data))


def test_json_accepts_the_old_json_schema_form() -> None:
    validate(SchemaData(SchemaType.JSON, b'{"type": "object", "id": "urn:x", "properties": {}}'))
    with pytest.raises(InvalidSchemaError, match="JSON schema"):
        validate(SchemaData(SchemaType.JSON, b'{"type": "objekt"}'))


def test_string_takes_nothing_or_the_python_clients_null() -> None:
    validate(SchemaData(SchemaType.STRING, b""))
    validate(SchemaData(SchemaType.STRING, b"null"))
    with pytest.raises(InvalidSchemaError, match="STRING schema: 'text'"):
        validate(SchemaData(SchemaType.STRING, b"text"))


@pytest.mark.parametrize("kind", [t for t in SchemaType if t.primitive and t not in
                                  (SchemaType.STRING, SchemaType.BYTES, SchemaType.NONE)])
def test_other_primitives_have_no_definition(kind: SchemaType) -> None:
    validate(SchemaData(kind, b""))
    with pytest.raises(InvalidSchemaError, match=f"{kind.name} schema: a primitive schema has no definition"):
        validate(SchemaData(kind, b"x"))


@pytest.mark.parametrize("kind", [SchemaType.AUTO, SchemaType.AUTO_CONSUME, SchemaType.AUTO_PUBLISH])
def test_client_side_types_are_not_registered(kind: SchemaType) -> None:
    with pytest.raises(InvalidSchemaError, match="client-side schema type"):
        validate(SchemaData(kind, b""))


def test_protobuf_native_definition_names_its_root_message() -> None:
    data = definition(pb.CommandSend.DESCRIPTOR)
    assert protobuf_root_message(data) == "magnetar.wire.CommandSend"
    validate(SchemaData(SchemaType.PROTOBUF_NATIVE, data))


@pytest.mark.parametrize(("patch", "says"), [
    ({"rootMessageTypeName": "magnetar.wire.Nothing"}, "Nothing"),
    ({"rootFileDescriptorName": "other.proto"}, "not other.proto"),
    ({"fileDescriptorSet": "!!!"}, "PROTOBUF_NATIVE"),
    ({"fileDescriptorSet": None}, "PROTOBUF_NATIVE"),
])
def test_bad_protobuf_native_definitions(patch: dict[str, object], says: str) -> None:
    document = json.loads(definition(pb.CommandSend.DESCRIPTOR))
    document.update(patch)
    with pytest.raises(InvalidSchemaError, match=says):
        validate(SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(document).encode()))


def test_protobuf_native_refuses_stray_characters_in_its_base64() -> None:
    """Characters outside base64's alphabet are refused, not skipped over."""
    document = json.loads(definition(pb.CommandSend.DESCRIPTOR))
    document["fileDescriptorSet"] = "!" + document["fileDescriptorSet"]
    with pytest.raises(InvalidSchemaError, match="PROTOBUF_NATIVE schema: Only base64 data"):
        validate(SchemaData(SchemaType.PROTOBUF_NATIVE, json.dumps(document).encode()))


def test_protobuf_native_needs_its_three_fields() -> None:
    with pytest.raises(InvalidSchemaError, match="needs fileDescriptorSet"):
        validate(SchemaData(SchemaType.PROTOBUF_NATIVE, b"{}"))


_SIDES = st.sampled_from([
    SchemaData(SchemaType.STRING, b""),
    SchemaData(SchemaType.INT64, b""),
    SchemaData(SchemaType.BYTES, b""),
    SchemaData(SchemaType.AVRO, RECORD, {"__alwaysAllowNull": "true"}),
    SchemaData(SchemaType.JSON, RECORD),
])


@given(_SIDES, _SIDES, st.sampled_from(["INLINE", "SEPARATED"]))
def test_key_value_layout_round_trips(key: SchemaData, value: SchemaData, encoding: str) -> None:
    joined = join_key_value(key, value, encoding=encoding)
    (key_length,) = struct.unpack_from(">i", joined.data)
    assert joined.data[4:4 + key_length] == key.data
    assert joined.properties["key.schema.type"] == key.type.name
    validate(joined)
    parts = key_value_parts(joined)
    assert (parts.key, parts.value, parts.encoding) == (key, value, encoding)


def test_key_value_sides_default_to_bytes_and_minus_one_is_absent() -> None:
    parts = key_value_parts(SchemaData(SchemaType.KEY_VALUE, struct.pack(">ii", -1, -1)))
    assert parts.key == SchemaData(SchemaType.BYTES, b"") and parts.value.type == SchemaType.BYTES
    assert parts.encoding == "INLINE"


@pytest.mark.parametrize(("data", "props", "says"), [
    (b"\x00\x00", {}, "Invalid KEY_VALUE schema: the data ends before the key schema's length"),
    (struct.pack(">i", 0) + b"\x00", {}, "ends before the value schema's length"),
    (struct.pack(">i", 10) + b"abc", {}, "length 10 does not fit"),
    (struct.pack(">ii", 0, 0) + b"zz", {}, "2 bytes after the value schema"),
    (struct.pack(">ii", 0, 0), {"key.schema.type": "WHAT"}, "unknown schema type 'WHAT'"),
    (struct.pack(">ii", 0, 0), {"key.schema.type": "KEY_VALUE"}, "cannot be KEY_VALUE"),
    (struct.pack(">ii", 0, 0), {"value.schema.properties": "[1]"}, "value.schema.properties is not a JSON object"),
    (struct.pack(">ii", 0, 0), {"key.schema.properties": "{"}, "key.schema.properties is not JSON"),
    (struct.pack(">ii", 0, 0), {"kv.encoding.type": "SIDEWAYS"}, "not INLINE or SEPARATED"),
    (struct.pack(">i", 1) + b"{" + struct.pack(">i", 0), {"key.schema.type": "AVRO"}, "AVRO schema"),
])
def test_bad_key_value_schemas(data: bytes, props: dict[str, str], says: str) -> None:
    with pytest.raises(InvalidSchemaError, match=says):
        validate(SchemaData(SchemaType.KEY_VALUE, data, props))


@pytest.mark.parametrize("kind", [SchemaType.AVRO, SchemaType.JSON, SchemaType.PROTOBUF_NATIVE])
def test_definitions_nested_beyond_the_stack_are_refused(kind: SchemaType) -> None:
    deep = b'{"type": "array", "items": ' * 5000 + b'"int"' + b"}" * 5000
    with pytest.raises(InvalidSchemaError, match="nested too deeply"):
        validate(SchemaData(kind, deep))


def test_a_renamed_record_resolves_by_its_fields() -> None:
    """The registry accepts a record renamed between versions (fields match, as in Pulsar), so
    every reader resolves the writer's definition under the reader's name."""
    writer = {"type": "record", "name": "UserV1", "fields": [{"name": "id", "type": "long"}]}
    tag = {"name": "tag", "type": ["null", "string"], "default": None}
    reader = {"type": "record", "name": "User", "fields": [{"name": "id", "type": "long"}, tag]}
    data = io.BytesIO()
    fastavro.schemaless_writer(data, fastavro.parse_schema(writer), {"id": 7})
    resolved = fastavro.parse_schema(writer_definition_for(json.dumps(writer).encode(), reader))
    decoded = fastavro.schemaless_reader(io.BytesIO(data.getvalue()), resolved, fastavro.parse_schema(reader))
    assert decoded == {"id": 7, "tag": None}


@pytest.mark.parametrize("key, value", [(b"k", b"v"), (None, b"v"), (b"", None), (None, None)])
def test_pairs_round_trip(key: bytes | None, value: bytes | None) -> None:
    assert unpack_pair(pack_pair(key, value)) == (key, value)


@pytest.mark.parametrize(("data", "says"), [
    (b"", "the data ends before the key side's length"),
    (b"\x00\x00\x00\x05ab", "the key side's length 5 does not fit"),
    (struct.pack(">i", 0) + b"\x00\x00\x00\x05ab", "the value side's length 5 does not fit"),
    (struct.pack(">ii", 0, 0) + b"x", "1 bytes after the value side"),
])
def test_pairs_that_do_not_fit_are_refused(data: bytes, says: str) -> None:
    with pytest.raises(InvalidSchemaError, match=f"Invalid KEY_VALUE value: {says}"):
        unpack_pair(data)


def test_a_bad_definition_is_shown_cut_at_80_bytes() -> None:
    """The refusal quotes the definition: 80 bytes at most, undecodable bytes replaced."""
    for data, shown in ((b"\xff" + b"a" * 85, "'\ufffd" + "a" * 79 + "...'"), (b"b" * 80, repr("b" * 80)),
                        (b"b" * 81, repr("b" * 80 + "..."))):
        with pytest.raises(InvalidSchemaError) as refused:
            validate(SchemaData(SchemaType.STRING, data))
        assert str(refused.value) == f"Invalid schema definition data for STRING schema: {shown}"


def test_protobuf_definitions_are_named_in_their_refusal() -> None:
    with pytest.raises(InvalidSchemaError, match="Invalid schema definition data for PROTOBUF schema"):
        validate(SchemaData(SchemaType.PROTOBUF, b"{"))


def test_key_value_sides_are_unnamed_by_default() -> None:
    joined = join_key_value(SchemaData(SchemaType.STRING, b""), SchemaData(SchemaType.INT32, b""))
    assert (joined.properties["key.schema.name"], joined.properties["value.schema.name"]) == ("", "")


def test_a_writer_definition_that_is_no_record_keeps_its_form() -> None:
    reader = {"type": "record", "name": "User", "fields": []}
    assert writer_definition_for(b'"string"', reader) == "string"
    assert writer_definition_for(b'["null", "int"]', reader) == ["null", "int"]
