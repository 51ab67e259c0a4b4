"""Typed `value` columns for topics with a schema (written by the official client's schemas)."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import json
import pickle
import random
import struct
import urllib.request
from collections.abc import Callable

import pulsar
import pytest
from admin_http import http
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema
from pyspark.errors import PySparkException
from seeds import fresh_seed
from spark_helpers import INTERCEPTORS
from standalone import Standalone

from magnetar.client.connection import ClientConnection
from magnetar.schemas import version_from_bytes
from magnetar.spark import source as source_module
from magnetar.spark import topic_schemas
from magnetar.spark.source import MagnetarDataSource
from magnetar.wire.proto import pulsar_api_pb2 as pb

pytestmark = pytest.mark.spark

EXPOSING = "exposingBrokerEntryMetadataToClientEnabled=true"


class UserV1(Record):
    _avro_namespace = "test"
    name = String(required=True)
    age = Integer(required=True)


class UserV2(Record):
    _avro_namespace = "test"
    name = String(required=True)
    age = Integer(required=True)
    email = String()


for cls in (UserV1, UserV2):  # one record, two versions of it
    cls.__name__ = "User"
USER_V2 = UserV2.schema()
USER_V2["fields"][2]["default"] = None  # the Python client leaves out a null default; evolving needs one

ALL_TYPES = {
    "type": "record", "name": "AllTypes", "namespace": "test", "fields": [
        {"name": "opt", "type": ["null", "string"], "default": None},
        {"name": "int_or_long", "type": ["int", "long"]},
        {"name": "float_or_double", "type": ["float", "double"]},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN"]}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at_ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "at_us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "either", "type": ["string", "int"]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "double"}]}},
        {"name": "raw", "type": {"type": "fixed", "name": "Four", "size": 4}},
    ]}
RECURSIVE = {"type": "record", "name": "Node", "fields": [
    {"name": "value", "type": "int"}, {"name": "next", "type": ["null", "Node"], "default": None}]}
WHEN = datetime.datetime(2026, 11, 25, 10, 0, 0, 123000, tzinfo=datetime.UTC)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("schemas") / "data"
    broker = Standalone(data_dir, [INTERCEPTORS, EXPOSING]).start()
    client = pulsar.Client(broker.url, operation_timeout_seconds=10,
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        _write_evolved(client)
        _write_all_types(client)
        with contextlib.closing(client.create_producer("strings", schema=StringSchema())) as producer:
            for text in ("a", "bé"):
                producer.send(text)
        with contextlib.closing(client.create_producer("json-users", schema=JsonSchema(UserV2))) as producer:
            for i in range(3):
                producer.send(UserV2(name=f"j{i}é", age=7 + i, email=None if i == 1 else f"j{i}@x"))
        _write_primitive_and_key_value(client, broker.admin_url)
        _write_random_batches(client, broker.admin_url, random.Random(fresh_seed()))
        _write_separated_key_values(broker.url)
        recursive = AvroSchema(None, schema_definition=RECURSIVE)
        with contextlib.closing(client.create_producer("recursive", schema=recursive)) as producer:
            producer.send({"value": 1, "next": {"value": 2, "next": None}})
        yield broker, data_dir
    finally:
        client.close()
        broker.stop()


def _write_evolved(client: pulsar.Client) -> None:
    """Three messages in version 0, then two in version 1 (an optional field added)."""
    v1 = AvroSchema(UserV1)
    with contextlib.closing(client.create_producer("users", schema=v1, batching_enabled=True)) as producer:
        for i in range(3):  # batched, as default producers send
            producer.send_async(UserV1(name=f"old-{i}", age=i), None, partition_key=f"k{i}")
        producer.flush()
    v2 = AvroSchema(None, schema_definition=USER_V2)
    with contextlib.closing(client.create_producer("users", schema=v2, batching_enabled=True)) as producer:
        for i in range(2):
            producer.send_async({"name": f"new-{i}", "age": 10 + i, "email": f"n{i}@x"}, None, partition_key=f"n{i}")
        producer.flush()


def _write_all_types(client: pulsar.Client) -> None:
    schema = AvroSchema(None, schema_definition=ALL_TYPES)
    with contextlib.closing(client.create_producer("all-types", schema=schema)) as producer:
        producer.send({
            "opt": None, "int_or_long": 5, "float_or_double": 1.5, "colour": "GREEN",
            "price": decimal.Decimal("12.34"), "day": datetime.date(2026, 11, 25), "at_ms": WHEN, "at_us": WHEN,
            "either": 42, "tags": ["a", "b"], "counts": {"k": 3}, "inner": {"x": 0.25}, "raw": b"\x00\x01\x02\x03",
        })


def _write_random_batches(client: pulsar.Client, admin_url: str, rnd: random.Random) -> None:
    """A partitioned topic of batches of random sizes (1 included) and messages sent alone."""
    status, _, body = http("PUT", f"{admin_url}/admin/v2/persistent/public/default/ids/partitions", b"3")
    assert status == 204, body
    batching = client.create_producer("ids", batching_enabled=True, batching_max_messages=1000,
                                      batching_max_publish_delay_ms=60_000)
    alone = client.create_producer("ids", batching_enabled=False)
    for round_ in range(rnd.randrange(5, 15)):
        for i in range(rnd.choice([1, rnd.randrange(1, 200)])):
            batching.send_async(b"%d-%d" % (round_, i), None, partition_key=str(rnd.randrange(10)))
        batching.flush()
        for _ in range(rnd.randrange(3)):
            alone.send(b"alone", partition_key=str(rnd.randrange(10)))
    batching.close()
    alone.close()


def _upload(admin_url: str, topic: str, payload: dict) -> None:
    request = urllib.request.Request(f"{admin_url}/admin/v2/schemas/public/default/{topic}/schema",
                                     data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10):
        pass


def _write_primitive_and_key_value(client: pulsar.Client, admin_url: str) -> None:
    """Schemas the Python client has no class for: registered over REST, payloads laid out as
    Pulsar's Java schemas encode them, sent by a producer without a schema."""
    _upload(admin_url, "longs", {"type": "INT64", "schema": "", "properties": {}})
    _upload(admin_url, "kv", {
        "type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": json.dumps(UserV1.schema())}),
        "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO", "kv.encoding.type": "INLINE"}})
    with contextlib.closing(client.create_producer("longs")) as producer:
        for n in (-1, 2**40):
            producer.send(struct.pack(">q", n))
    value = AvroSchema(UserV1).encode(UserV1(name="v", age=3))
    with contextlib.closing(client.create_producer("kv")) as producer:
        producer.send(struct.pack(">i", 1) + b"k" + struct.pack(">i", len(value)) + value)


SEPARATED = [("k1", ("a", 1)), (None, ("b", 2)), ("k2", None), ("kë3", ("c", 3))]


def _write_separated_key_values(url: str) -> None:
    """KEY_VALUE SEPARATED as magnetar.client writes it (Java's layout: the key's encoding as
    the base64 message key), batched; a None key and a None value (a null-value message)
    among them."""
    import magnetar.client as magnetar  # noqa: PLC0415 (only this topic needs magnetar's own client)
    from magnetar.client import schema  # noqa: PLC0415

    class Pair(schema.Record):
        name = schema.String(required=True)
        n = schema.Integer(required=True)

    kv = schema.KeyValueSchema(schema.StringSchema(), schema.AvroSchema(Pair), schema.KeyValueEncodingType.SEPARATED)
    client = magnetar.Client(url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer("kv-separated", schema=kv, batching_enabled=True)
        for key, value in SEPARATED:
            producer.send_async(schema.KeyValue(key, None if value is None else Pair(name=value[0], n=value[1])), None)
        producer.flush()
    finally:
        client.close()


def _read(spark, source: str, topic: str, **options):
    reader = spark.read.format("magnetar").option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    if source.startswith("pulsar://"):
        return reader.option("service.url", source).load()
    return reader.load(source)


@pytest.mark.parametrize("via", ["path", "service.url"])
def test_evolved_schema_reads_as_latest_fields(spark, served, via):
    broker, data_dir = served
    df = _read(spark, broker.url if via == "service.url" else str(data_dir), "users")
    assert df.schema["value"].dataType.simpleString() == "struct<name:string,age:int,email:string>"
    rows = [r.value.asDict() for r in df.orderBy("index").collect()]
    assert rows == [{"name": f"old-{i}", "age": i, "email": None} for i in range(3)] + [
        {"name": f"new-{i}", "age": 10 + i, "email": f"n{i}@x"} for i in range(2)]


def test_value_format_bytes_keeps_payloads(spark, served):
    _broker, data_dir = served
    df = _read(spark, str(data_dir), "users", valueFormat="bytes")
    assert df.schema["value"].dataType.simpleString() == "binary"
    assert AvroSchema(UserV1).decode(bytes(df.orderBy("index").first().value)).name == "old-0"


def test_avro_types_map_as_pulsar_spark_does(spark, served):
    _broker, data_dir = served
    df = _read(spark, str(data_dir), "all-types")
    assert df.schema["value"].dataType.simpleString() == (
        "struct<opt:string,int_or_long:bigint,float_or_double:double,colour:string,price:decimal(9,2),day:date,"
        "at_ms:timestamp,at_us:timestamp,either:struct<member0:string,member1:int>,tags:array<string>,"
        "counts:map<string,bigint>,inner:struct<x:double>,raw:binary>")
    value = df.selectExpr("value", "unix_micros(value.at_ms) as ms", "unix_micros(value.at_us) as us").first()
    got = value.value.asDict(recursive=True)
    assert value.ms == value.us == int(WHEN.timestamp() * 1000) * 1000
    assert {k: got[k] for k in ("opt", "int_or_long", "float_or_double", "colour", "price", "day", "either", "tags",
                                "counts", "inner", "raw")} == {
        "opt": None, "int_or_long": 5, "float_or_double": 1.5, "colour": "GREEN", "price": decimal.Decimal("12.34"),
        "day": datetime.date(2026, 11, 25), "either": {"member0": None, "member1": 42}, "tags": ["a", "b"],
        "counts": {"k": 3}, "inner": {"x": 0.25}, "raw": b"\x00\x01\x02\x03"}


def test_primitive_json_and_key_value_schemas(spark, served):
    broker, data_dir = served
    strings = _read(spark, str(data_dir), "strings").orderBy("index")
    assert strings.schema["value"].dataType.simpleString() == "string"
    assert [r.value for r in strings.collect()] == ["a", "bé"]
    longs = _read(spark, broker.url, "longs").orderBy("index")
    assert [r.value for r in longs.collect()] == [-1, 2**40]
    users = _read(spark, str(data_dir), "json-users").orderBy("index")
    assert [r.value.asDict() for r in users.collect()] == [
        {"name": f"j{i}é", "age": 7 + i, "email": None if i == 1 else f"j{i}@x"} for i in range(3)]
    kv = _read(spark, str(data_dir), "kv")
    assert kv.schema["value"].dataType.simpleString() == "struct<key:string,value:struct<name:string,age:int>>"
    assert kv.first().value.asDict(recursive=True) == {"key": "k", "value": {"name": "v", "age": 3}}


def test_separated_key_values_read_as_key_and_value(spark, served):
    _broker, data_dir = served
    kv = _read(spark, str(data_dir), "kv-separated").orderBy("index")
    assert kv.schema["value"].dataType.simpleString() == "struct<key:string,value:struct<name:string,n:int>>"
    assert [r.value.asDict(recursive=True) for r in kv.collect()] == [
        {"key": key, "value": None if value is None else {"name": value[0], "n": value[1]}}
        for key, value in SEPARATED]


def test_recursive_record_refused(spark, served):
    _broker, data_dir = served
    with pytest.raises(PySparkException, match="record Node contains itself"):
        _read(spark, str(data_dir), "recursive").schema  # noqa: B018 (planning is the check)
    assert _read(spark, str(data_dir), "recursive", valueFormat="bytes").count() == 1


def test_pulsar_spark_row_format(spark, served):
    broker, _data_dir = served
    df = _read(spark, broker.url, "users", rowFormat="pulsar-spark", **{
        "admin.url": broker.admin_url, "pulsar.client.operationTimeoutMs": "30000",
        "pulsar.reader.receiverQueueSize": "100"})
    assert df.columns == ["name", "age", "email", "__key", "__topic", "__messageId", "__publishTime", "__eventTime",
                          "__messageProperties"]
    rows = df.orderBy("__publishTime", "name").collect()
    assert [(r.name, r.age, r.email) for r in rows][-1] == ("new-1", 11, "n1@x")
    assert {r["__topic"] for r in rows} == {"persistent://public/default/users"}
    assert {(r.name, bytes(r["__key"])) for r in rows} == {
        *((f"old-{i}", f"k{i}".encode()) for i in range(3)), *((f"new-{i}", f"n{i}".encode()) for i in range(2))}
    got = [pulsar.MessageId.deserialize(bytes(r["__messageId"])) for r in rows]
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        reader = client.create_reader("users", pulsar.MessageId.earliest)
        expected = [reader.read_next(timeout_millis=10_000).message_id() for _ in rows]
    finally:
        client.close()
    assert sorted((i.ledger_id(), i.entry_id(), i.batch_index()) for i in got) == sorted(
        (i.ledger_id(), i.entry_id(), i.batch_index()) for i in expected)


@pytest.mark.parametrize(("option", "value", "message"), [
    ("rowFormat", "kafka", "option 'rowFormat' must be magnetar or pulsar-spark"),
    ("valueFormat", "avro", "option 'valueFormat' must be typed or bytes"),
])
def test_bad_format_options_name_the_option(spark, served, option, value, message):
    _broker, data_dir = served
    with pytest.raises(PySparkException, match=message):
        _read(spark, str(data_dir), "users", **{option: value}).schema  # noqa: B018 (planning is the check)


def test_stream_reads_typed_values(spark, served, tmp_path):
    broker, _data_dir = served
    stream = (spark.readStream.format("magnetar").option("service.url", broker.url).option("topic", "users")
              .option("startingOffsets", "earliest").load())
    query = (stream.select("index", "value").writeStream.format("memory").queryName("typed_users")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.sql("select value from typed_users order by index").collect()
    assert [(r.value.name, r.value.email) for r in rows] == [
        *((f"old-{i}", None) for i in range(3)), *((f"new-{i}", f"n{i}@x") for i in range(2))]


def test_pulsar_spark_message_ids_are_the_official_clients_bytes(spark, served):
    broker, data_dir = served
    client = pulsar.Client(broker.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe("ids", "check", initial_position=pulsar.InitialPosition.Earliest)
        rows = _read(spark, str(data_dir), "ids", rowFormat="pulsar-spark").select("__messageId").collect()
        expected = sorted(consumer.receive(10_000).message_id().serialize() for _ in rows)
    finally:
        client.close()
    assert sorted(bytes(r["__messageId"]) for r in rows) == expected


def _names(reader) -> list[str]:
    """Every row's value's name, read where Spark's executors read, from a pickled reader."""
    reader = pickle.loads(pickle.dumps(reader))
    batches = [batch for part in reader.partitions() for batch in reader.read(part)]
    return sorted(row["name"] for batch in batches for row in batch.column("value").to_pylist())


def _counted(calls: list[str], name: str, function: Callable[..., object]) -> Callable[..., object]:
    def counting(*args: object, **kwargs: object) -> object:
        calls.append(name)
        return function(*args, **kwargs)
    return counting


def test_schema_versions_found_once_and_carried_to_executors(served, monkeypatch):
    broker, data_dir = served
    asked: list[int | None] = []
    request = ClientConnection.request

    def counting(conn: ClientConnection, cmd: pb.BaseCommand) -> pb.BaseCommand:
        if cmd.type == pb.BaseCommand.GET_SCHEMA:
            wanted = cmd.getSchema
            asked.append(version_from_bytes(wanted.schema_version) if wanted.HasField("schema_version") else None)
        return request(conn, cmd)

    monkeypatch.setattr(ClientConnection, "request", counting)
    monkeypatch.setattr(topic_schemas, "_fetched", {})  # this process's executor cache, empty
    expected = sorted([f"old-{i}" for i in range(3)] + [f"new-{i}" for i in range(2)])
    source = MagnetarDataSource({"service.url": broker.url, "topic": "users"})
    calls: list[str] = []
    for name in ("parse_options", "value_type"):
        monkeypatch.setattr(source_module, name, _counted(calls, name, getattr(source_module, name)))
    source.schema()
    assert sorted(calls) == ["parse_options", "value_type"]  # the options and the value's type, once each
    reader = pickle.loads(pickle.dumps(source)).reader(None)  # as Spark plans: schema(), then reader() on a copy
    assert asked == [None]  # the latest, once, with no version named
    assert _names(reader) == expected
    assert asked == [None, 0]  # the older version the data named, when met; the latest was carried
    assert _names(reader) == expected
    assert asked == [None, 0]  # once per process
    by_path = MagnetarDataSource({"path": str(data_dir), "topic": "users"})
    monkeypatch.setattr(topic_schemas, "_fetch_version", None)  # executors must find every version carried
    assert _names(by_path.reader(None)) == expected
