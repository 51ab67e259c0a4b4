"""The columnar Avro decoder gives what the row path (fastavro, record by record) gives."""

from __future__ import annotations

import datetime
import decimal
import io
import json
import random

import fastavro
import pyarrow as pa
import pytest
from seeds import fresh_seed

from magnetar.schemas import SchemaData, SchemaType
from magnetar.schemas.definitions import parse_avro
from magnetar.spark.avro_columns import compile_records, decode_records
from magnetar.spark.value_decoding import RecordDecoder

COLOUR = {"type": "enum", "name": "C", "symbols": ["RED", "GREEN", "BLUE"]}
POINT = {"type": "record", "name": "Point", "fields": [
    {"name": "x", "type": "double"}, {"name": "label", "type": ["null", "string"], "default": None}]}
FLAT = [
    {"name": "name", "type": "string"},
    {"name": "id", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "active", "type": "boolean"},
    {"name": "count", "type": "int"},
    {"name": "tag", "type": ["null", "string"]},
    {"name": "maybe", "type": ["long", "null"]},
    {"name": "colour", "type": COLOUR},
    {"name": "raw", "type": "bytes"},
]
NESTED = [
    {"name": "point", "type": POINT},
    {"name": "maybe_point", "type": ["null", "Point"], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "points", "type": {"type": "array", "items": "Point"}},
    {"name": "grid", "type": {"type": "array", "items": {"type": "array", "items": "int"}}},
    {"name": "counts", "type": {"type": "map", "values": "long"}},
    {"name": "where", "type": {"type": "map", "values": ["null", "Point"]}},
    {"name": "either", "type": ["string", "int", "null", "Point"]},
    {"name": "int_or_long", "type": ["null", "int", "long"]},
    {"name": "float_or_double", "type": ["float", "double"]},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 30, "scale": 4}},
    {"name": "fixed_price", "type": {"type": "fixed", "name": "F9", "size": 9, "logicalType": "decimal",
                                     "precision": 20, "scale": 2}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "at_ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
    {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "four", "type": {"type": "fixed", "name": "Four", "size": 4}},
]
SCHEMA = {"type": "record", "name": "E", "fields": FLAT + NESTED}
UTC = datetime.UTC


def _point(rnd: random.Random) -> dict:
    return {"x": rnd.random(), "label": rnd.choice([None, "p" * rnd.randrange(5)])}


def _items(rnd: random.Random, make) -> list:
    return [make() for _ in range(rnd.choice([0, 1, rnd.randrange(40)]))]


def _record(rnd: random.Random) -> dict:
    when = datetime.datetime(2026, 1, 1, tzinfo=UTC) + datetime.timedelta(microseconds=rnd.randrange(-2**50, 2**50))
    return {
        "name": "é" * rnd.randrange(0, 200), "id": rnd.randrange(-2**63, 2**63), "score": rnd.random(),
        "ratio": 1.5, "active": rnd.random() < 0.5, "count": rnd.randrange(-2**31, 2**31),
        "tag": rnd.choice([None, "x" * rnd.randrange(150)]), "maybe": rnd.choice([None, rnd.randrange(-2**40, 2**40)]),
        "colour": rnd.choice(COLOUR["symbols"]), "raw": rnd.randbytes(rnd.randrange(5)),
        "point": _point(rnd), "maybe_point": rnd.choice([None, _point(rnd)]),
        "tags": _items(rnd, lambda: "t" * rnd.randrange(3)), "points": _items(rnd, lambda: _point(rnd)),
        "grid": _items(rnd, lambda: _items(rnd, lambda: rnd.randrange(-9, 9))),
        "counts": {f"k{i}": rnd.randrange(-2**60, 2**60) for i in range(rnd.choice([0, rnd.randrange(30)]))},
        "where": {f"w{i}": rnd.choice([None, _point(rnd)]) for i in range(rnd.randrange(3))},
        "either": rnd.choice(["s", "", None, _point(rnd)]),  # ints below: fastavro picks the branch by type
        "int_or_long": rnd.choice([None, rnd.randrange(-2**62, 2**62)]),
        "float_or_double": rnd.random(),
        "price": decimal.Decimal(rnd.randrange(-10**26, 10**26)).scaleb(-4),
        "fixed_price": decimal.Decimal(rnd.randrange(-10**18, 10**18)).scaleb(-2),
        "day": datetime.date(1970, 1, 1) + datetime.timedelta(days=rnd.randrange(-20000, 40000)),
        "at_ms": rnd.choice([None, when.replace(microsecond=when.microsecond // 1000 * 1000)]), "at_us": when,
        "four": rnd.randbytes(4),
    }


def _payloads(schema: dict, records: list[dict | None]) -> pa.Array:
    """fastavro's encoding of each record (None: a null payload)."""
    parsed = fastavro.parse_schema(schema)

    def encoded(record: dict) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        return buffer.getvalue()

    return pa.array([None if r is None else encoded(r) for r in records], pa.binary())


def _row_path(writer: dict, reader: dict, payloads: pa.Array) -> pa.Array:
    """What the decoder gives record by record (a version whose schema is `writer`)."""
    schema = SchemaData(SchemaType.AVRO, json.dumps(reader).encode())
    written = SchemaData(SchemaType.AVRO, json.dumps(writer).encode())
    decoder = RecordDecoder(schema, lambda version: written)
    return pa.array(decoder.records(payloads.to_pylist(), [0] * len(payloads)), decoder.type)


def _columnar(writer: dict, reader: dict, payloads: pa.Array) -> pa.Array | None:
    read = compile_records(parse_avro(json.dumps(writer).encode()), parse_avro(json.dumps(reader).encode()))
    assert read is not None
    return decode_records(payloads, read)


@pytest.mark.parametrize("seed", [1, 2, fresh_seed()])
def test_records_decode_as_the_row_path_does(seed: int) -> None:
    rnd = random.Random(seed)
    records = [None if rnd.random() < 0.02 else _record(rnd) for _ in range(1500)]
    for record in records[::7]:
        if record is not None:
            record["either"] = rnd.randrange(-5, 5)
    payloads = _payloads(SCHEMA, records)
    skip = rnd.randrange(1, 50)  # a slice: offsets not starting at 0
    got = _columnar(SCHEMA, SCHEMA, payloads.slice(skip))
    assert got is not None
    expected = _row_path(SCHEMA, SCHEMA, payloads.slice(skip))
    assert got.type == expected.type
    assert got.to_pylist() == expected.to_pylist(), seed


def test_an_older_writer_resolves_to_the_readers_fields() -> None:
    """Fields added since (nullable, at any depth) read null; fields removed since are skipped;
    int widens to long and float to double as Avro promotes them."""
    old_point = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "float"},
                                                              {"name": "gone", "type": "string"}]}
    writer = {"type": "record", "name": "E", "fields": [
        {"name": "id", "type": "int"}, {"name": "point", "type": old_point},
        {"name": "points", "type": {"type": "array", "items": "Point"}}, {"name": "dropped", "type": "long"}]}
    reader = {"type": "record", "name": "E", "fields": [
        {"name": "id", "type": "long"}, {"name": "point", "type": POINT},
        {"name": "points", "type": {"type": "array", "items": "Point"}},
        {"name": "added", "type": ["null", "string"], "default": None}]}
    rnd = random.Random(3)
    records = [{"id": rnd.randrange(-2**31, 2**31), "point": {"x": 0.5, "gone": "g" * i},
                "points": [{"x": 0.25, "gone": ""}] * (i % 3), "dropped": i} for i in range(300)]
    payloads = _payloads(writer, records)
    got = _columnar(writer, reader, payloads)
    assert got is not None
    assert got.to_pylist() == _row_path(writer, reader, payloads).to_pylist()


def test_what_needs_the_row_path_is_refused() -> None:
    writer = {"type": "record", "name": "E", "fields": [{"name": "u", "type": ["null", "int"]}]}
    reshaped = {"type": "record", "name": "E", "fields": [{"name": "u", "type": ["null", "int", "string"]}]}
    defaulted = {"type": "record", "name": "E", "fields": [*writer["fields"], {"name": "n", "type": "int",
                                                                             "default": 7}]}
    for reader in (reshaped, defaulted):
        assert compile_records(parse_avro(json.dumps(writer).encode()), parse_avro(json.dumps(reader).encode())) is None


def test_payloads_of_another_layout_are_refused() -> None:
    schema = {"type": "record", "name": "E", "fields": FLAT}
    read = compile_records(parse_avro(json.dumps(schema).encode()), parse_avro(json.dumps(schema).encode()))
    assert read is not None
    assert decode_records(pa.array([b"\x02a", b"\x00"], pa.binary()), read) is None
