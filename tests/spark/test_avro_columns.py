"""The columnar Avro decoder gives what fastavro gives, record for record."""

from __future__ import annotations

import io
import json
import random

import fastavro
import pyarrow as pa

from magnetar.schemas.definitions import parse_avro
from magnetar.spark.avro_columns import decode_flat, flat_fields

SCHEMA = {"type": "record", "name": "E", "fields": [
    {"name": "name", "type": "string"},
    {"name": "id", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "active", "type": "boolean"},
    {"name": "count", "type": "int"},
    {"name": "tag", "type": ["null", "string"]},
    {"name": "maybe", "type": ["long", "null"]},
    {"name": "colour", "type": {"type": "enum", "name": "C", "symbols": ["RED", "GREEN"]}},
    {"name": "raw", "type": "bytes"},
]}


def _record(rnd: random.Random) -> dict:
    return {
        "name": "é" * rnd.randrange(0, 200), "id": rnd.randrange(-2**63, 2**63), "score": rnd.random(),
        "ratio": 1.5, "active": rnd.random() < 0.5, "count": rnd.randrange(-2**31, 2**31),
        "tag": rnd.choice([None, "x" * rnd.randrange(150)]), "maybe": rnd.choice([None, rnd.randrange(-2**40, 2**40)]),
        "colour": rnd.choice(["RED", "GREEN"]), "raw": rnd.randbytes(rnd.randrange(5)),
    }


def test_flat_records_decode_as_fastavro_does():
    rnd = random.Random()
    parsed = fastavro.parse_schema(SCHEMA)
    records = [_record(rnd) for _ in range(2000)]
    payloads = []
    for record in records:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        payloads.append(out.getvalue())
    skip = rnd.randrange(1, 50)  # a slice: offsets not starting at 0
    fields = flat_fields(parse_avro(json.dumps(SCHEMA).encode()))
    assert fields is not None
    columns = decode_flat(pa.array(payloads, pa.binary()).slice(skip), fields)
    assert columns is not None
    decoded = pa.StructArray.from_arrays(list(columns.values()), names=list(columns)).to_pylist()
    assert decoded == records[skip:]


def test_payloads_of_another_layout_are_refused():
    fields = flat_fields(parse_avro(json.dumps(SCHEMA).encode()))
    assert fields is not None
    assert decode_flat(pa.array([b"\x02a", b"\x00"], pa.binary()), fields) is None
