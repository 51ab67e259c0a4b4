"""The sink's columnar Avro encoder writes what fastavro writes, and what fastavro reads back."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random
import struct

import fastavro
import pyarrow as pa
import pytest
from optional import optional_module

optional_module("pyspark")

from pyspark.sql import types as T  # noqa: E402 (after the check above)

from magnetar.schemas import SchemaData, SchemaType  # noqa: E402
from magnetar.spark import value_encoding  # noqa: E402
from magnetar.spark.options import MagnetarOptionError  # noqa: E402
from magnetar.spark.value_encoding import ValueEncoder, encode_rows, varints  # noqa: E402
from magnetar.spark.value_schemas import value_schema_for  # noqa: E402
from magnetar.spark.write_options import parse_write_options  # noqa: E402

INNER = T.StructType([T.StructField("x", T.IntegerType()), T.StructField("ys", T.ArrayType(
    T.StructType([T.StructField("z", T.LongType(), False)])))])
NO_DECIMALS = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("name", T.StringType()),
    T.StructField("score", T.DoubleType()),
    T.StructField("f", T.FloatType()),
    T.StructField("ok", T.BooleanType()),
    T.StructField("small", T.ShortType()),
    T.StructField("raw", T.BinaryType()),
    T.StructField("day", T.DateType()),
    T.StructField("at", T.TimestampType()),
    T.StructField("tags", T.ArrayType(T.StringType())),
    T.StructField("attrs", T.MapType(T.StringType(), T.LongType())),
    T.StructField("inner", INNER),
])
ARROW = pa.struct([
    ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()), ("f", pa.float32()), ("ok", pa.bool_()),
    ("small", pa.int16()), ("raw", pa.binary()), ("day", pa.date32()), ("at", pa.timestamp("us", tz="UTC")),
    ("tags", pa.list_(pa.string())), ("attrs", pa.map_(pa.string(), pa.int64())),
    ("inner", pa.struct([("x", pa.int32()), ("ys", pa.list_(pa.struct([pa.field("z", pa.int64(), False)])))])),
])
EDGES = [0, -1, 1, 63, 64, -64, -65, 127, 128, 2**31 - 1, -2**31, 2**62, 2**63 - 1, -2**63]


def _rows(rnd: random.Random, count: int) -> list:
    def maybe(value: object) -> object:
        return None if rnd.random() < 0.2 else value

    def number() -> int:
        return rnd.choice(EDGES) if rnd.random() < 0.3 else rnd.randrange(-2**63, 2**63) >> rnd.randrange(64)

    return [None if rnd.random() < 0.05 else {
        "id": number(), "name": maybe("é" * rnd.randrange(0, 150)), "score": maybe(rnd.random() * 1e9 - 5e8),
        "f": maybe(rnd.random()), "ok": maybe(rnd.random() < 0.5), "small": maybe(rnd.randrange(-2**15, 2**15)),
        "raw": maybe(rnd.randbytes(rnd.randrange(20))),
        "day": maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rnd.randrange(-30000, 30000))),
        "at": maybe(dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=rnd.randrange(-10**15, 10**15))),
        "tags": maybe([maybe(str(j)) for j in range(rnd.randrange(4))]),
        "attrs": maybe([(f"k{j}", maybe(number())) for j in range(rnd.randrange(3))]),
        "inner": maybe({"x": maybe(rnd.randrange(-2**31, 2**31)),
                        "ys": maybe([{"z": number()} for _ in range(rnd.randrange(3))])}),
    } for _ in range(count)]


def test_columns_encode_as_fastavro_does_row_by_row():
    rnd = random.Random()
    schema = value_schema_for(NO_DECIMALS)
    definition = json.loads(schema.data)
    values = pa.array(_rows(rnd, 2000), ARROW)
    for part in (values, values.slice(rnd.randrange(1, 1000), rnd.randrange(1, 1000))):
        columnar = value_encoding._encode(part, definition)  # not the fallback
        expected = encode_rows(part, definition).to_pylist()
        encoded = ValueEncoder(schema).column(part).to_pylist()
        assert [None if e is None else c for c, e in zip(columnar.to_pylist(), expected, strict=True)] == expected
        assert encoded == expected


def test_varints_are_avro_zigzag_longs():
    numbers = EDGES + [random.randrange(-2**63, 2**63) for _ in range(500)]
    parsed = fastavro.parse_schema("long")
    for number, encoded in zip(numbers, varints(pa.array(numbers).to_numpy()).to_pylist(), strict=True):
        assert fastavro.schemaless_reader(io.BytesIO(encoded), parsed, None) == number


def test_decimals_read_back_in_the_fewest_bytes():
    """fastavro writes -128 in two bytes; Java's BigInteger.toByteArray (and this) in one."""
    spark_type = T.StructType([T.StructField("d", T.DecimalType(38, 4), False)])
    schema = value_schema_for(spark_type)
    numbers = [decimal.Decimal(n) / 10_000 for n in
               [0, 1, -1, 127, 128, -128, -129, 255, 256, -256, 10**37, -10**37, 2**100, -(2**100)]]
    numbers += [decimal.Decimal(random.randrange(-10**37, 10**37)) / 10_000 for _ in range(300)]
    encoded = ValueEncoder(schema).column(pa.array([{"d": n} for n in numbers], pa.struct([
        pa.field("d", pa.decimal128(38, 4), False)])))
    parsed = fastavro.parse_schema(json.loads(schema.data))
    for number, payload in zip(numbers, encoded.to_pylist(), strict=True):
        unscaled = int(number * 10_000)
        assert len(payload) - 1 == ((unscaled if unscaled >= 0 else ~unscaled).bit_length() + 8) // 8
        assert fastavro.schemaless_reader(io.BytesIO(payload), parsed, None) == {"d": number}


@pytest.mark.parametrize(("arrow_type", "kind", "values", "layout"), [
    (pa.int64(), SchemaType.INT64, [-1, 2**40, None], ">q"),
    (pa.int8(), SchemaType.INT8, [-5, 100], ">b"),
    (pa.float32(), SchemaType.FLOAT, [0.25, None], ">f"),
    (pa.bool_(), SchemaType.BOOLEAN, [True, False, None], ">?"),
    (pa.date32(), SchemaType.DATE, [dt.date(2026, 11, 26), dt.date(1960, 1, 1)], ">q"),
])
def test_primitives_are_pulsars_big_endian_numbers(arrow_type, kind, values, layout):
    encoded = ValueEncoder(SchemaData(kind, b"")).column(pa.array(values, arrow_type)).to_pylist()
    epoch = dt.date(1970, 1, 1)
    numbers = [(v - epoch).days * 86_400_000 if isinstance(v, dt.date) else v for v in values]
    assert encoded == [None if n is None else struct.pack(layout, n) for n in numbers]


@pytest.mark.parametrize(("value_type", "options", "message"), [
    (T.StructType([T.StructField("a b", T.LongType())]), {}, "field 'value.a b': Avro field names"),
    (T.StructType([T.StructField("m", T.MapType(T.LongType(), T.LongType()))]), {}, "Avro maps have string keys"),
    (T.ArrayType(T.LongType()), {}, "column 'value' of type array<bigint> has no Pulsar schema"),
    (T.StructType([T.StructField("at", T.TimestampNTZType())]), {}, "field 'value.at' of type timestamp_ntz"),
    (T.StructType([T.StructField("a", T.LongType())]), {"valueFormat": "bytes"}, "binary or string with valueFormat"),
    (T.StructType([T.StructField("a", T.LongType())]), {"entryFormat": "arrow"}, "binary or string with entryFormat"),
    (T.StringType(), {"valueFormat": "avro"}, "option 'valueFormat' must be typed or bytes"),
])
def test_values_without_a_schema_are_refused_naming_the_field(value_type, options, message):
    with pytest.raises(MagnetarOptionError, match=message.replace("[", r"\[")):
        parse_write_options({"service.url": "pulsar://127.0.0.1:6650", "topic": "t", **options},
                            T.StructType([T.StructField("value", value_type)]))


def test_value_types_register_their_schema():
    assert value_schema_for(T.BinaryType()) is None
    assert value_schema_for(T.LongType()) == SchemaData(SchemaType.INT64, b"")
    nested = json.loads(value_schema_for(T.StructType([T.StructField("p", T.StructType([
        T.StructField("x", T.DoubleType(), False)]))])).data)
    assert nested == {"type": "record", "name": "topLevelRecord", "fields": [{
        "name": "p", "default": None, "type": ["null", {"type": "record", "name": "p", "namespace": "topLevelRecord",
                                                       "fields": [{"name": "x", "type": "double"}]}]}]}
