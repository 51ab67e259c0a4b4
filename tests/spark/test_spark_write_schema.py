"""pulsar-spark's jobs on magnetar. Writing typed `value` columns: a struct registers an AVRO
schema the official client decodes with an equivalent Record, primitives register their
primitive schema, the broker's compatibility checks apply, and the Spark source reads the rows
back as they were written. Reading from pulsar-spark's offsets: message ids and times per topic."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import struct
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest
from pulsar.schema import Array, AvroSchema, Boolean, Double, Long, Map, Record, String, StringSchema
from pyspark.errors import PySparkException
from pyspark.sql import types as T
from spark_helpers import INTERCEPTORS, official_client
from standalone import Standalone

from magnetar.admin_client import AdminClient

pytestmark = pytest.mark.spark

EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


class Point(Record):
    _avro_namespace = "topLevelRecord"
    x = Double()
    label = String()


class Reading(Record):
    """The Record equivalent to READING (each nullable field a `["null", T]` union, default null)."""

    id = Long(required=True)
    name = String()
    ok = Boolean()
    tags = Array(String())
    counts = Map(Long())
    point = Point()


for _name, _cls in (("topLevelRecord", Reading), ("point", Point)):
    _cls.__name__ = _name

READING = T.StructType([
    T.StructField("id", T.LongType(), False),
    T.StructField("name", T.StringType()),
    T.StructField("ok", T.BooleanType()),
    T.StructField("tags", T.ArrayType(T.StringType(), containsNull=False)),
    T.StructField("counts", T.MapType(T.StringType(), T.LongType(), valueContainsNull=False)),
    T.StructField("point", T.StructType([T.StructField("x", T.DoubleType()), T.StructField("label", T.StringType())])),
])
EVERY_TYPE = T.StructType([
    *READING.fields,
    T.StructField("small", T.ShortType()),
    T.StructField("f", T.FloatType()),
    T.StructField("raw", T.BinaryType()),
    T.StructField("day", T.DateType()),
    T.StructField("at", T.TimestampType()),
    T.StructField("amount", T.DecimalType(12, 3)),
])
WHEN = dt.datetime(2026, 11, 26, 1, 2, 3, 456789, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def broker(tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("write-schema") / "data", [INTERCEPTORS, EXPOSING]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def official(broker: Standalone) -> Iterator[pulsar.Client]:
    with official_client(broker) as client:
        yield client


def _reading(i: int) -> dict:
    return {"id": i * 1_000_003 - 2**40, "name": None if i % 3 == 0 else f"r{i}é", "ok": i % 2 == 0,
            "tags": [f"t{j}" for j in range(i % 4)], "counts": {f"c{j}": j - i for j in range(i % 3)},
            "point": None if i % 5 == 0 else {"x": i / 4, "label": None if i % 2 else "p"}}


def _write(spark, broker: Standalone, topic: str, rows: list, schema: T.StructType, **options) -> None:
    writer = spark.createDataFrame(rows, schema).write.format("magnetar").option("service.url", broker.url)
    for key, value in {"topic": topic, **options}.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def _read_values(spark, broker: Standalone, topic: str) -> list:
    df = spark.read.format("magnetar").option("topic", topic).load(str(broker.data_dir))
    return [row.value for row in df.orderBy("index").collect()]


def _schema_info(broker: Standalone, topic: str, version: int | None = None) -> dict:
    path = "schema" if version is None else f"schema/{version}"
    with urllib.request.urlopen(f"{broker.admin_url}/admin/v2/schemas/public/default/{topic}/{path}",
                                timeout=10) as answer:
        return json.load(answer)


def _consume(official: pulsar.Client, topic: str, count: int, **kwargs) -> list[pulsar.Message]:
    consumer = official.subscribe(topic, "check", initial_position=pulsar.InitialPosition.Earliest, **kwargs)
    with contextlib.closing(consumer):
        return [consumer.receive(10_000) for _ in range(count)]


def _version(message: pulsar.Message) -> int:
    """The message's schema version (the official client hands its 8 bytes over as a str)."""
    return int.from_bytes(bytes(map(ord, message.schema_version())), "big")


def test_struct_value_is_avro_the_official_client_decodes(spark, broker, official):
    rows = [(None, _reading(i)) for i in range(40)]
    _write(spark, broker, "readings", [r[1:] for r in rows], T.StructType([T.StructField("value", READING)]),
           batchingMaxMessages="7")
    info = _schema_info(broker, "readings")
    assert info["type"] == "AVRO" and info["version"] == 0
    definition = json.loads(info["data"])
    assert definition["name"] == "topLevelRecord"
    assert definition["fields"][1] == {"name": "name", "type": ["null", "string"], "default": None}
    messages = _consume(official, "readings", 40, schema=AvroSchema(Reading))
    assert {_version(m) for m in messages} == {0}
    decoded = sorted((m.value() for m in messages), key=lambda r: r.id)
    for i, value in enumerate(decoded):
        expected = _reading(i)
        assert (value.id, value.name, value.ok, value.tags, value.counts) == tuple(
            expected[k] for k in ("id", "name", "ok", "tags", "counts"))
        point = expected["point"]
        assert (None if value.point is None else (value.point.x, value.point.label)) == (
            None if point is None else (point["x"], point["label"]))


def test_every_type_reads_back_as_written(spark, broker):
    rows = [({**_reading(i), "small": i - 7, "f": i / 2, "raw": bytes([i]) * i, "day": dt.date(2026, 1, 1 + i),
              "at": WHEN + dt.timedelta(microseconds=i), "amount": decimal.Decimal(i * 1001 - 5000) / 1000},)
            for i in range(12)] + [(None,)]
    _write(spark, broker, "every-type", rows, T.StructType([T.StructField("value", EVERY_TYPE)]))
    read = _read_values(spark, broker, "every-type")
    assert len(read) == len(rows)
    got = sorted(((None if v is None else v.asDict(recursive=True)) for v in read),
                 key=lambda d: (d is None, d and d["id"]))
    expected = [r[0] for r in rows]
    for mine, theirs in zip(got, expected, strict=True):
        if theirs is None:
            assert mine is None
            continue
        assert {**mine, "raw": bytes(mine["raw"])} == {**theirs, "at": theirs["at"].replace(tzinfo=None)} | {
            "at": mine["at"]} and mine["at"].timestamp() == theirs["at"].timestamp()


def test_schema_evolves_and_an_incompatible_change_fails_the_query(spark, broker, official):
    v1 = T.StructType([T.StructField("name", T.StringType()), T.StructField("age", T.IntegerType())])
    v2 = T.StructType([*v1.fields, T.StructField("email", T.StringType())])
    _write(spark, broker, "evolving", [({"name": "a", "age": 1},)], T.StructType([T.StructField("value", v1)]))
    _write(spark, broker, "evolving", [({"name": "b", "age": 2, "email": "b@x"},)],
           T.StructType([T.StructField("value", v2)]))
    assert _schema_info(broker, "evolving")["version"] == 1
    _write(spark, broker, "evolving", [({"name": "c", "age": 3},)], T.StructType([T.StructField("value", v1)]))
    assert _schema_info(broker, "evolving")["version"] == 1, "an existing version is found again, not re-added"
    assert [v.asDict() for v in _read_values(spark, broker, "evolving")] == [
        {"name": "a", "age": 1, "email": None}, {"name": "b", "age": 2, "email": "b@x"},
        {"name": "c", "age": 3, "email": None}]
    assert [_version(m) for m in _consume(official, "evolving", 3)] == [0, 1, 0]
    incompatible = T.StructType([T.StructField("name", T.LongType()), T.StructField("age", T.IntegerType())])
    with pytest.raises(PySparkException, match="IncompatibleSchema"):
        _write(spark, broker, "evolving", [({"name": 5, "age": 4},)],
               T.StructType([T.StructField("value", incompatible)]))
    assert _schema_info(broker, "evolving")["version"] == 1
    assert len(_read_values(spark, broker, "evolving")) == 3


PRIMITIVES = [
    (T.StringType(), "STRING", ["a", "bé", None], None),
    (T.LongType(), "INT64", [-1, 2**40, None], ">q"),
    (T.ByteType(), "INT8", [-5, 100], ">b"),
    (T.FloatType(), "FLOAT", [0.25, -2.5], ">f"),
    (T.BooleanType(), "BOOLEAN", [True, False], ">?"),
    (T.TimestampType(), "TIMESTAMP", [WHEN.replace(microsecond=456000), dt.datetime(1969, 1, 1, tzinfo=dt.UTC)],
     None),
]


@pytest.mark.parametrize(("spark_type", "kind", "values", "layout"), PRIMITIVES, ids=[p[1] for p in PRIMITIVES])
def test_primitive_values_register_their_schema(spark, broker, official, spark_type, kind, values, layout):
    topic = f"primitive-{kind.lower()}"
    _write(spark, broker, topic, [(v,) for v in values], T.StructType([T.StructField("value", spark_type)]))
    assert _schema_info(broker, topic)["type"] == kind
    read = _read_values(spark, broker, topic)
    if isinstance(spark_type, T.TimestampType):
        read, values = [r.timestamp() for r in read], [v.timestamp() for v in values]
    if isinstance(spark_type, T.StringType):
        values = [v or "" for v in values]  # a message without a value reads as an empty payload
    assert sorted(read, key=repr) == sorted(values, key=repr)
    if layout is not None:  # Pulsar's Java encoding, as the official client hands the bytes over
        payloads = [m.data() for m in _consume(official, topic, len(values))]
        unpacked = [struct.unpack(layout, p)[0] for p in payloads if p]
        assert sorted(unpacked) == sorted(v for v in values if v is not None)


def test_strings_as_the_official_string_schema(spark, broker, official):
    _write(spark, broker, "primitive-string", [("c",)], T.StructType([T.StructField("value", T.StringType())]))
    assert [m.value() for m in _consume(official, "primitive-string", 4, schema=StringSchema())][-1] == "c"


def test_binary_and_value_format_bytes_register_nothing(spark, broker, official):
    binary = T.StructType([T.StructField("value", T.BinaryType())])
    _write(spark, broker, "readings", [(b"\x00not avro",)], binary)  # schema'd topic: a producer without one
    text = T.StructType([T.StructField("value", T.StringType())])
    _write(spark, broker, "untyped", [("plain",)], text, valueFormat="bytes")
    _write(spark, broker, "untyped", [(b"raw",)], binary)
    with pytest.raises(urllib.error.HTTPError) as missing:
        _schema_info(broker, "untyped")
    assert missing.value.code == 404
    assert [m.data() for m in _consume(official, "untyped", 2)] == [b"plain", b"raw"]


def test_a_value_without_a_schema_fails_at_planning(spark, broker):
    """The message leads the exception (the cases are in test_value_encoding.py)."""
    with pytest.raises(PySparkException) as info:
        _write(spark, broker, "never", [], T.StructType([T.StructField("value", T.StructType([
            T.StructField("a b", T.LongType())]))]))
    assert "MagnetarOptionError: field 'value.a b': Avro field names" in str(info.value).splitlines()[0]


# -- pulsar-spark's offsets: message ids per topic partition, times per topic


@pytest.fixture(scope="module")
def offsets_topic(broker: Standalone, official: pulsar.Client) -> dict[tuple[int, int, int, int], pulsar.MessageId]:
    """60 keyed messages in batches over two partitions; the official client's id of each,
    by (partition, ledger, entry, batch index)."""
    AdminClient(broker.admin_url).create_partitioned_topic("persistent://public/default/offsets", 2)
    producer = official.create_producer("offsets", batching_enabled=True, batching_max_messages=7,
                                        batching_max_publish_delay_ms=1000)
    with contextlib.closing(producer):
        for i in range(60):
            producer.send_async(f"m{i}".encode(), None, partition_key=f"k{i % 11}")
        producer.flush()
    ids = {}
    for message in _consume(official, "offsets", 60):
        mid = message.message_id()
        ids[(mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())] = mid
    return ids


def _pulsar_spark_json(ids: dict[str, bytes]) -> str:
    """Offsets as pulsar-spark's JsonUtils writes them: each id's bytes as signed byte values."""
    return json.dumps({topic: [b - 256 if b > 127 else b for b in data] for topic, data in ids.items()})


def _positions(spark, source: str, **options) -> list[tuple[int, int, int, int]]:
    reader = spark.read.format("magnetar").option("topic", "offsets")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.option("service.url", source).load() if source.startswith("pulsar") else reader.load(source)
    return sorted((r.partition, r.ledger_id, r.entry_id, r.batch_index) for r in df.collect())


@pytest.mark.parametrize("via", ["path", "service.url"])
def test_pulsar_spark_message_id_offsets(spark, broker, offsets_topic, via):
    source = broker.url if via == "service.url" else str(broker.data_dir)
    every = sorted(offsets_topic)
    part = max((0, 1), key=lambda n: sum(p[0] == n for p in every))
    mine = [p for p in every if p[0] == part]
    start = next(p for p in mine[3:] if p[3] > 0)  # inside a batch
    end = mine[-4]
    topic = f"persistent://public/default/offsets-partition-{part}"
    starting = _pulsar_spark_json({topic: offsets_topic[start].serialize()})
    assert _positions(spark, source, startingOffsets=starting) == [p for p in every if p[0] != part or p >= start]
    ending = _pulsar_spark_json({topic: offsets_topic[end].serialize()})
    assert _positions(spark, source, startingOffsets=starting, endingOffsets=ending) == [
        p for p in every if p[0] != part or (start <= p and p[1:3] <= end[1:3])], "the ending id's whole entry is read"
    in_base64 = json.dumps({topic: base64.b64encode(offsets_topic[start].serialize()).decode()})
    assert _positions(spark, source, startingOffsets=in_base64) == _positions(spark, source, startingOffsets=starting)


def test_message_ids_of_pulsar_spark_rows_start_a_read(spark, broker, offsets_topic):
    rows = (spark.read.format("magnetar").option("topic", "offsets").option("rowFormat", "pulsar-spark")
            .load(str(broker.data_dir)).collect())
    chosen = sorted(rows, key=lambda r: (r["__topic"], bytes(r["__messageId"])))[len(rows) // 3]
    starting = _pulsar_spark_json({chosen["__topic"]: bytes(chosen["__messageId"])})
    mid = pulsar.MessageId.deserialize(bytes(chosen["__messageId"]))
    first = (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())
    got = _positions(spark, str(broker.data_dir), startingOffsets=starting)
    assert next(p for p in got if p[0] == first[0]) == first


def test_pulsar_spark_times_per_topic(spark, broker, offsets_topic):
    """A time for one partition (by its own name) bounds that partition alone."""
    df = spark.read.format("magnetar").option("topic", "offsets").load(str(broker.data_dir))
    times = df.selectExpr("partition", "unix_millis(broker_time) as t").collect()
    partition_one = sorted(r.partition for r in times if r.partition == 1)
    after_all = max(r.t for r in times) + 1
    for name, bound in (("startingTime", after_all), ("endingTime", 0)):
        per_topic = json.dumps({"persistent://public/default/offsets-partition-0": bound})
        got = spark.read.format("magnetar").option("topic", "offsets").option(name, per_topic).load(
            str(broker.data_dir)).collect()
        assert sorted(r.partition for r in got) == partition_one, name


@pytest.mark.parametrize(("options", "message"), [
    ({"startingOffsets": '{"offsets-partition-0": [8, 1]}'}, "option 'startingOffsets': the message id of"),
    ({"endingOffsets": '{"offsets": "not base64!"}'}, "option 'endingOffsets': the message id of offsets"),
    ({"endingOffsets": _pulsar_spark_json({"offsets-partition-0": pulsar.MessageId.earliest.serialize()})},
     "cannot end at MessageId.earliest"),
    ({"startingTime": '{"offsets": "noon"}'}, "option 'startingTime' must be a time in ms or JSON"),
])
def test_bad_pulsar_spark_offsets_name_the_option(spark, broker, options, message):
    reader = spark.read.format("magnetar").option("topic", "offsets")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(PySparkException, match=message):
        reader.load(str(broker.data_dir))
