"""magnetar.client's schemas against a real standalone, written as code for the official client
is written (`import magnetar.client as pulsar`): every schema type round trips; records evolve
with each message read from the version that wrote it (a newer producer and an older consumer,
and the reverse); an incompatible change is refused with IncompatibleSchema; a reader with an
older schema; values cross between the official client and magnetar.client both ways; a broker
restart in the middle; values a schema cannot encode are refused in the caller."""

from __future__ import annotations

import asyncio
import base64
import enum
import random
import uuid

import pulsar as official
import pulsar.schema as official_schema
import pytest
from admin_http import http
from protobuf_messages import message_class, random_value
from schema_records import user_records

import magnetar.client as pulsar
import magnetar.client.schema.schemas as schemas_module
from magnetar.client import aio
from magnetar.client.schema import (
    Array,
    AvroSchema,
    Boolean,
    BooleanSchema,
    Bytes,
    ByteSchema,
    BytesSchema,
    CustomEnum,
    Double,
    DoubleSchema,
    Float,
    FloatSchema,
    Integer,
    IntSchema,
    JsonSchema,
    KeyValue,
    KeyValueEncodingType,
    KeyValueSchema,
    Long,
    LongSchema,
    Map,
    ProtobufNativeSchema,
    Record,
    ShortSchema,
    String,
    StringSchema,
)
from magnetar.schemas.definitions import join_key_value
from magnetar.schemas.model import SchemaData

QUIET = official.ConsoleLogger(official.LoggerLevel.Error)


class Color(enum.Enum):
    red = 1
    green = 2


class Point(Record):
    x = Integer(required=True)
    y = Integer(required=True)


User, UserV2, UserBad = user_records(pulsar.schema)


class Everything(Record):
    _avro_namespace = "org.example"
    flag = Boolean()
    small = Integer()
    big = Long()
    ratio = Float()
    precise = Double()
    blob = Bytes()
    text = String()
    color = CustomEnum(Color)
    tags = Array(String())
    weights = Map(Double())
    where = Point
    path = Array(Point())


class Tagged(Record):
    name = String()
    age = Integer()
    color = Color


class OfficialTagged(official_schema.Record):
    """The official client's declaration of `Tagged` (the same name, so the same definition)."""
    name = official_schema.String()
    age = official_schema.Integer()
    color = Color


OfficialTagged.__name__ = "Tagged"


def topic() -> str:
    return f"persistent://public/default/schema-{uuid.uuid4().hex[:10]}"


def version(message: pulsar.Message) -> int:
    raw = message.schema_version()
    return int.from_bytes(raw.encode("latin-1") if isinstance(raw, str) else raw, "big")


@pytest.fixture(scope="module")
def client(shared_broker):
    c = pulsar.Client(shared_broker.service_url, operation_timeout_seconds=10)
    yield c
    c.close()


@pytest.fixture(scope="module")
def official_client(shared_broker):
    c = official.Client(shared_broker.service_url, operation_timeout_seconds=10, logger=QUIET)
    yield c
    c.close()


def everything(rng: random.Random) -> Everything:
    return Everything(flag=rng.random() < 0.5, small=rng.randint(-2**31, 2**31 - 1), big=rng.randint(-2**63, 2**63 - 1),
                      ratio=0.5, precise=rng.random(), blob=rng.randbytes(rng.randint(0, 20)),
                      text=rng.choice(["", "ünï", "plain"]), color=rng.choice(list(Color)),
                      tags=[str(i) for i in range(rng.randint(0, 3))], weights={"w": rng.random()},
                      where=Point(x=1, y=2), path=[Point(x=i, y=-i) for i in range(rng.randint(0, 3))])


CASES = [
    (StringSchema(), lambda rng: rng.choice(["", "hello", "ünïcödé"])),
    (BytesSchema(), lambda rng: rng.randbytes(rng.randint(0, 30))),
    (BooleanSchema(), lambda rng: rng.random() < 0.5),
    (ByteSchema(), lambda rng: rng.randint(-128, 127)),
    (ShortSchema(), lambda rng: rng.randint(-2**15, 2**15 - 1)),
    (IntSchema(), lambda rng: rng.randint(-2**31, 2**31 - 1)),
    (LongSchema(), lambda rng: rng.randint(-2**63, 2**63 - 1)),
    (FloatSchema(), lambda rng: 0.25 * rng.randint(-100, 100)),
    (DoubleSchema(), lambda rng: rng.random()),
    (AvroSchema(Everything), everything),
    (JsonSchema(User), lambda rng: User(name=str(rng.random()), age=rng.randint(0, 99))),
    (AvroSchema(None, User.schema()), lambda rng: {"name": "dict", "age": rng.randint(0, 9)}),
    (KeyValueSchema(StringSchema(), AvroSchema(Point)),
     lambda rng: KeyValue(rng.choice(["k", None]), Point(x=rng.randint(0, 9), y=0))),
    (KeyValueSchema(LongSchema(), JsonSchema(User)), lambda rng: KeyValue(rng.randint(0, 9), None)),
    (KeyValueSchema(IntSchema(), AvroSchema(Point), KeyValueEncodingType.SEPARATED),
     lambda rng: KeyValue(rng.choice([rng.randint(-9, 9), None]), rng.choice([Point(x=rng.randint(0, 9), y=1), None]))),
]


@pytest.mark.parametrize(("schema", "draw"), CASES, ids=lambda case: str(case) if not callable(case) else "")
def test_each_schema_type_round_trips(client, schema, draw) -> None:
    """Batches of random values, a consumer and a reader of the same schema get them back equal."""
    name = topic()
    rng = random.Random()
    consumer = client.subscribe(name, "s", schema=schema)
    producer = client.create_producer(name, schema=schema, batching_enabled=True)
    values = [draw(rng) for _ in range(rng.randint(5, 20))]
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    got = [consumer.receive(10_000) for _ in values]
    assert [m.value() for m in got] == values
    first_version = b"" if schema.wire() is None else bytes(8)  # bytes register no schema, so no version
    assert {m.schema_version() for m in got} == {first_version}
    reader = client.create_reader(name, pulsar.MessageId.earliest, schema=schema)
    assert [reader.read_next(10_000).value() for _ in values] == values


def test_definitions_equal_the_official_clients_byte_for_byte() -> None:
    """A Pulsar broker finds a schema's version by a hash of its definition's bytes: the same
    Record declared with either client registers the same bytes, whatever the field options."""
    rng = random.Random()
    for _ in range(30):
        specs = [(f"f{i}", rng.choice(["Integer", "Long", "String", "Double", "Boolean", "Bytes", "Float"]),
                  *rng.choice([(False, False), (True, False), (False, True)])) for i in range(rng.randint(1, 6))]
        sort = rng.random() < 0.5
        namespace = rng.choice([None, "com.example"])

        def declare(module, specs=specs, sort=sort, namespace=namespace):
            body = {"_sorted_fields": sort, "_avro_namespace": namespace,
                    "nested": module.Array(module.Map(module.String())), "color": Color}
            for field, kind, required, required_default in specs:
                body[field] = getattr(module, kind)(required=required, required_default=required_default)
            return type("R", (module.Record,), body)

        for ours, theirs in ((AvroSchema, official_schema.AvroSchema), (JsonSchema, official_schema.JsonSchema)):
            assert ours(declare(pulsar.schema)).schema_info().data == \
                theirs(declare(official_schema)).schema_info().schema().encode()
    assert StringSchema().schema_info().data == official_schema.StringSchema().schema_info().schema().encode()


def test_records_evolve_each_way_with_versions_on_messages(client) -> None:
    """Producers of v1 and v2 interleaved in batches: an old consumer reads every message as
    User (v2's score dropped), a new one as UserV2 (v1's messages get the default score)."""
    name = topic()
    old = client.subscribe(name, "old", schema=AvroSchema(User))
    new = client.subscribe(name, "new", schema=AvroSchema(UserV2))
    p1 = client.create_producer(name, schema=AvroSchema(User), batching_enabled=True)
    p2 = client.create_producer(name, schema=AvroSchema(UserV2), batching_enabled=True)
    rng = random.Random()
    sent = {}
    for i in range(rng.randint(20, 50)):
        if rng.random() < 0.5:
            p1.send_async(User(name=f"u{i}", age=i), None)
            sent[i] = (0, None)
        else:
            p2.send_async(UserV2(name=f"u{i}", age=i, score=i / 4), None)
            sent[i] = (1, i / 4)
    p1.flush()
    p2.flush()
    for consumer, kind in ((old, User), (new, UserV2)):
        got = {}
        for _ in sent:
            message = consumer.receive(10_000)
            value = message.value()
            assert type(value) is kind and value.name == f"u{value.age}"
            got[value.age] = (version(message), getattr(value, "score", None))
        assert got == {i: (v, score if kind is UserV2 else None) for i, (v, score) in sent.items()}


def test_an_incompatible_change_is_refused(client) -> None:
    name = topic()
    client.create_producer(name, schema=AvroSchema(User)).send(User(name="a", age=1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(UserBad))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(name, "bad", schema=AvroSchema(UserBad))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=StringSchema())


def test_a_reader_with_an_older_schema(client) -> None:
    name = topic()
    client.create_producer(name, schema=JsonSchema(User)).send(User(name="one", age=1))
    client.create_producer(name, schema=JsonSchema(UserV2)).send(UserV2(name="two", age=2, score=2.5))
    reader = client.create_reader(name, pulsar.MessageId.earliest, schema=JsonSchema(User))
    got = [reader.read_next(10_000) for _ in range(2)]
    assert [(version(m), m.value()) for m in got] == [(0, User(name="one", age=1)), (1, User(name="two", age=2))]
    avro = topic()
    client.create_producer(avro, schema=AvroSchema(User)).send(User(name="one", age=1))
    client.create_producer(avro, schema=AvroSchema(UserV2)).send(UserV2(name="two", age=2, score=2.5))
    reader = client.create_reader(avro, pulsar.MessageId.earliest, schema=AvroSchema(User))
    assert [reader.read_next(10_000).value().name for _ in range(2)] == ["one", "two"]


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_values_cross_between_the_official_client_and_magnetar_both_ways(client, official_client, kind) -> None:
    """Both clients register the same definition (one version), and each decodes the other's values."""
    ours = AvroSchema(Tagged) if kind == "avro" else JsonSchema(Tagged)
    theirs = (official_schema.AvroSchema if kind == "avro" else official_schema.JsonSchema)(OfficialTagged)
    name = topic()
    our_consumer = client.subscribe(name, "ours", schema=ours)
    their_consumer = official_client.subscribe(name, "theirs", schema=theirs)
    official_client.create_producer(name, schema=theirs).send(OfficialTagged(name="official", age=1, color=Color.red))
    client.create_producer(name, schema=ours).send(Tagged(name="magnetar", age=2, color=Color.green))
    got = [our_consumer.receive(10_000) for _ in range(2)]
    assert [(version(m), m.value()) for m in got] == [(0, Tagged(name="official", age=1, color=Color.red)),
                                                      (0, Tagged(name="magnetar", age=2, color=Color.green))]
    theirs_got = [their_consumer.receive(10_000).value() for _ in range(2)]
    assert [(v.name, v.age, v.color) for v in theirs_got] == [("official", 1, Color.red), ("magnetar", 2, Color.green)]


def test_partitions_share_versions_fetched_once_per_client(client, shared_broker) -> None:
    """A 3-partition topic written with v0 and v1 (keys spread the messages): an old consumer
    decodes every message, and the client fetched each version once for all partitions."""
    name = topic()
    status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/"
                                  f"{name.rsplit('/', 1)[1]}/partitions", b"3")
    assert status in (200, 204), body
    consumer = client.subscribe(name, "s", schema=AvroSchema(User))
    p1 = client.create_producer(name, schema=AvroSchema(User), batching_enabled=True)
    p2 = client.create_producer(name, schema=AvroSchema(UserV2), batching_enabled=True)
    count = 30
    for i in range(count):
        (p1 if i % 2 else p2).send_async(UserV2(name=f"u{i}", age=i, score=0.5) if i % 2 == 0 else
                                         User(name=f"u{i}", age=i), None, partition_key=f"key-{i}")
    p1.flush()
    p2.flush()
    got = [consumer.receive(10_000) for _ in range(count)]
    assert sorted(m.value().age for m in got) == list(range(count))
    assert len({m.topic_name() for m in got}) > 1
    fetched = client._core.context.writer_schemas._known
    assert sorted((topic_name, int.from_bytes(v, "big")) for topic_name, v in fetched if topic_name == name) == \
        [(name, 0), (name, 1)]


def test_values_survive_a_broker_restart_between_versions(broker_factory) -> None:
    """v0 written, the broker restarted, v1 written by the same producer's successor; a client
    that never saw either version decodes both (fetching them from the restarted broker)."""
    broker = broker_factory()
    name = topic()
    writer = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        producer = writer.create_producer(name, schema=AvroSchema(User))
        consumer = writer.subscribe(name, "s", schema=AvroSchema(UserV2))
        producer.send(User(name="before", age=1))
        first = consumer.receive(10_000)
        assert (version(first), first.value().name) == (0, "before")  # v0 fetched before the restart
        consumer.acknowledge(first)
        broker.restart()
        producer.send(User(name="after-restart", age=2))  # the producer re-registers its schema
        writer.create_producer(name, schema=AvroSchema(UserV2)).send(UserV2(name="v1", age=3, score=1.0))
        got = {}
        while "v1" not in got:  # "before" may come again: its ack may not have reached the broker
            message = consumer.receive(10_000)  # v1 is fetched from the restarted broker
            got[message.value().name] = (version(message), message.value().score)
        assert got.pop("before", (0, None)) == (0, None)
        assert got == {"after-restart": (0, None), "v1": (1, 1.0)}
    finally:
        writer.close()
    reader_client = pulsar.Client(broker.url, operation_timeout_seconds=10)
    try:
        reader = reader_client.create_reader(name, pulsar.MessageId.earliest, schema=AvroSchema(User))
        assert [reader.read_next(10_000).value().name for _ in range(3)] == ["before", "after-restart", "v1"]
    finally:
        reader_client.close()


def test_values_a_schema_cannot_encode_are_refused_in_the_caller(client) -> None:
    name = topic()
    producer = client.create_producer(name, schema=AvroSchema(User))
    consumer = client.subscribe(name, "s", schema=AvroSchema(User), initial_position=pulsar.InitialPosition.Earliest)
    with pytest.raises(TypeError, match="expected User"):
        producer.send(UserV2(name="x", age=1))
    with pytest.raises(TypeError, match="expected User"):
        producer.send_async(b"raw bytes", None)
    with pytest.raises(TypeError, match="'age'"):
        User(name="x", age="not a number")
    producer.send(User(name="fine", age=1))  # the producer is unharmed
    producer.send(None)  # a null value is not encoded, and reads as None
    assert [consumer.receive(10_000).value() for _ in range(2)] == [User(name="fine", age=1), None]
    with pytest.raises(ValueError, match="IntSchema"):
        client.create_producer(topic(), schema=IntSchema()).send(2**40)
    with pytest.raises(TypeError, match="StringSchema"):
        client.create_producer(topic(), schema=StringSchema()).send(b"bytes, not str")
    with pytest.raises(pulsar.InvalidConfiguration, match="schema"):
        client.create_producer(topic(), schema=official_schema.StringSchema())


def test_asyncio_consumers_decode_every_version(shared_broker) -> None:
    async def run() -> list[tuple[int, str]]:
        async with aio.Client(shared_broker.service_url, operation_timeout_seconds=10) as client:
            name = topic()
            consumer = await client.subscribe(name, "s", schema=AvroSchema(User))
            await (await client.create_producer(name, schema=AvroSchema(User))).send(User(name="a", age=1))
            await (await client.create_producer(name, schema=AvroSchema(UserV2))).send(UserV2(name="b", age=2))
            return [(version(m), m.value().name) for m in [await consumer.receive(10_000) for _ in range(2)]]

    assert asyncio.run(run()) == [(0, "a"), (1, "b")]


SEPARATED = KeyValueEncodingType.SEPARATED


def test_separated_key_values_carry_the_key_as_the_message_key(client, official_client, shared_broker) -> None:
    """SEPARATED as Pulsar's Java client writes it: the payload is the value's encoding and the
    key's encoding is the message key, base64 with partition_key_b64_encoded. The official
    client (no KeyValueSchema) sees exactly that in partition_key() and data(); its producer's
    plain string keys read as the key's UTF-8, as Java reads them; a partitioned topic routes
    each record by its key; the writer's version is split into its sides once."""
    name = topic()
    schema = KeyValueSchema(StringSchema(), AvroSchema(Tagged), SEPARATED)
    ours = client.subscribe(name, "ours", schema=schema)
    theirs = official_client.subscribe(name, "theirs")
    producer = client.create_producer(name, schema=schema, batching_enabled=True)
    rng = random.Random()
    sent = [KeyValue(rng.choice([f"k{rng.randint(0, 5)}é", None]),
                     rng.choice([Tagged(name=str(i), age=i, color=rng.choice(list(Color))), None]))
            for i in range(rng.randint(20, 40))]
    for value in sent:
        producer.send_async(value, None)
    producer.flush()
    assert [m.value() for m in (ours.receive(10_000) for _ in sent)] == sent
    their_avro = official_schema.AvroSchema(OfficialTagged)
    for value in sent:
        message = theirs.receive(10_000)
        key = None if value.key is None else base64.b64encode(value.key.encode()).decode()
        assert (message.partition_key() or None) == key
        decoded = None if value.value is None else their_avro.decode(message.data())
        assert (decoded and (decoded.name, decoded.age, decoded.color)) == \
            (value.value and (value.value.name, value.value.age, value.value.color))
    official_client.create_producer(name).send(their_avro.encode(OfficialTagged(name="o", age=9, color=Color.red)),
                                               partition_key="plain")
    assert ours.receive(10_000).value() == KeyValue("plain", Tagged(name="o", age=9, color=Color.red))
    with pytest.raises(ValueError, match="partition_key"):
        producer.send(KeyValue("k", None), partition_key="other")


def test_separated_keys_route_partitions_and_writers_are_split_once(client, shared_broker, monkeypatch) -> None:
    name = topic()
    status, _, body = http("PUT", f"{shared_broker.admin_url}/admin/v2/persistent/public/default/"
                                  f"{name.rsplit('/', 1)[1]}/partitions", b"3")
    assert status in (200, 204), body
    reader_schema = KeyValueSchema(LongSchema(), AvroSchema(UserV2), SEPARATED)
    consumer = client.subscribe(name, "s", schema=reader_schema)
    producer = client.create_producer(name, schema=KeyValueSchema(LongSchema(), AvroSchema(User), SEPARATED))
    splits = []
    real_parts = schemas_module.key_value_parts
    monkeypatch.setattr(schemas_module, "key_value_parts", lambda w: splits.append(w) or real_parts(w))
    count = 60
    for i in range(count):
        producer.send_async(KeyValue(i % 7, User(name=f"u{i}", age=i)), None)
    producer.flush()
    got = [consumer.receive(10_000) for _ in range(count)]
    partitions: dict[int, set[str]] = {}
    for message in got:
        value = message.value()
        assert value.value.name == f"u{value.value.age}" and value.key == value.value.age % 7
        partitions.setdefault(value.key, set()).add(message.topic_name())
    assert all(len(where) == 1 for where in partitions.values())  # one partition a key
    assert len(set().union(*partitions.values())) > 1
    assert len(splits) == 1  # one writer version, split once for 60 messages


def test_key_value_writers_are_known_by_their_definitions_not_their_objects(monkeypatch) -> None:
    """A writer's sides are split once for its data and properties: an equal writer object
    (another consumer's copy, or one made after the first was collected) reuses the split;
    KEY_VALUE<AVRO, X> and KEY_VALUE<JSON, X>, whose data are the same bytes, are two writers."""
    reader = KeyValueSchema(AvroSchema(Point), StringSchema())
    avro_writer = join_key_value(AvroSchema(Point).schema_info(), StringSchema().schema_info())
    json_writer = join_key_value(JsonSchema(Point).schema_info(), StringSchema().schema_info())
    assert avro_writer.data == json_writer.data
    splits = []
    real_parts = schemas_module.key_value_parts
    monkeypatch.setattr(schemas_module, "key_value_parts", lambda w: splits.append(w) or real_parts(w))
    payload = reader.encode(KeyValue(Point(x=1, y=2), "v"))
    avro_copy = SchemaData(avro_writer.type, bytes(avro_writer.data), dict(avro_writer.properties))
    for writer in (avro_writer, avro_copy, json_writer, avro_copy, json_writer):
        assert reader.decode_with(payload, writer) == KeyValue(Point(x=1, y=2), "v")
    assert splits == [avro_writer, json_writer]


def test_protobuf_native_definitions_and_values_equal_the_official_clients() -> None:
    """Random message classes (nested, repeated, importing a well-known type): the same
    definition bytes as the official ProtobufNativeSchema (one version on a Pulsar broker,
    which hashes them), and each client decodes the other's encoding."""
    rng = random.Random()
    for _ in range(25):
        cls = message_class(rng)
        ours, theirs = ProtobufNativeSchema(cls), official_schema.ProtobufNativeSchema(cls)
        assert ours.schema_info().data == theirs.schema_info().schema().encode()
        value = random_value(cls, rng)
        assert ours.decode(theirs.encode(value)) == value == theirs.decode(ours.encode(value))
    with pytest.raises(TypeError, match="protobuf message class"):
        ProtobufNativeSchema(Point)


def test_protobuf_native_values_cross_between_the_clients_both_ways(client, official_client) -> None:
    rng = random.Random()
    cls = message_class(rng)
    name = topic()
    ours = client.subscribe(name, "ours", schema=ProtobufNativeSchema(cls))
    theirs = official_client.subscribe(name, "theirs", schema=official_schema.ProtobufNativeSchema(cls))
    sent = [random_value(cls, rng) for _ in range(4)]
    producer = client.create_producer(name, schema=ProtobufNativeSchema(cls), batching_enabled=True)
    for value in sent[:2]:
        producer.send_async(value, None)
    producer.flush()
    official_producer = official_client.create_producer(name, schema=official_schema.ProtobufNativeSchema(cls))
    for value in sent[2:]:
        official_producer.send(value)
    got = [ours.receive(10_000) for _ in sent]
    assert [(version(m), m.value()) for m in got] == [(0, value) for value in sent]
    assert [theirs.receive(10_000).value() for _ in sent] == sent
    with pytest.raises(TypeError, match="expected Root"):
        producer.send(Point(x=1, y=2))
    with pytest.raises(pulsar.IncompatibleSchema):  # another root message (another package)
        client.create_producer(name, schema=ProtobufNativeSchema(message_class(rng)))
