"""The schema registry through a real standalone, driven by the official `pulsar-client`
(its `pulsar.schema` Record, AvroSchema, JsonSchema, StringSchema) and, for the commands
that client does not send, a raw connection: evolution, refusals with IncompatibleSchema,
versions on messages, an older reader decoding newer messages, the namespace and topic
policies, partitions sharing one schema, a deleted topic's schema, a SIGKILL."""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import _pulsar
import pulsar
import pytest
from admin_http import http
from pulsar.schema import (
    AvroSchema,
    JsonSchema,
    Long,
    ProtobufNativeSchema,
    Record,
    StringSchema,
)
from rawclient import RawClient
from schema_records import user_records
from standalone import Standalone

from magnetar.schemas import SchemaData, SchemaType
from magnetar.schemas.definitions import join_key_value
from magnetar.schemas.protocol import to_wire
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


User1, User2, UserBad = user_records(pulsar.schema)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """One broker for the module: each test has its own topics (and namespace where it sets policies)."""
    standalone = Standalone(tmp_path_factory.mktemp("schemas") / "data").start()
    yield standalone
    standalone.stop()


@pytest.fixture(scope="module")
def client(broker: Standalone) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    yield c
    c.close()


def topic() -> str:
    return f"persistent://public/default/schema-{uuid.uuid4().hex[:10]}"


def namespace(broker: Standalone, **policies: object) -> str:
    """A fresh namespace of `public` with these policies set through the admin API."""
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    assert http("PUT", f"{broker.admin_url}/admin/v2/namespaces/{ns}", b"{}")[0] == 204
    for path, value in policies.items():
        status, _, body = http("POST", f"{broker.admin_url}/admin/v2/namespaces/{ns}/{path}",
                               json.dumps(value).encode())
        assert status == 204, body
    return ns


def version(message: pulsar.Message) -> int:
    raw = message.schema_version()
    return int.from_bytes(raw.encode("latin-1") if isinstance(raw, str) else raw, "big")


def test_evolution_versions_and_an_older_reader(client: pulsar.Client) -> None:
    """Two compatible versions interleaved in batches: each message carries its writer's
    version, and a consumer still on v1 decodes v2's messages (through GET_SCHEMA)."""
    name = topic()
    old_consumer = client.subscribe(name, "old", schema=AvroSchema(User1))
    p1 = client.create_producer(name, schema=AvroSchema(User1))
    p2 = client.create_producer(name, schema=AvroSchema(User2))
    rng = random.Random()
    sent = []
    for i in range(rng.randint(20, 60)):
        if rng.random() < 0.5:
            p1.send_async(User1(name=f"u{i}", age=i), None)
            sent.append((0, i))
        else:
            p2.send_async(User2(name=f"u{i}", age=i, score=i / 2), None)
            sent.append((1, i))
    p1.flush()
    p2.flush()
    received = {}
    for _ in sent:
        message = old_consumer.receive(10_000)
        value = message.value()
        assert isinstance(value, User1)
        received[value.age] = (version(message), value.name)
    assert received == {i: (v, f"u{i}") for v, i in sent}
    new_reader = client.subscribe(name, "new", schema=AvroSchema(User2),
                                  initial_position=pulsar.InitialPosition.Earliest)
    scores = {value.age: value.score for value in (new_reader.receive(10_000).value() for _ in sent)}
    assert scores == {i: None if v == 0 else i / 2 for v, i in sent}  # v1's messages read with the default


def test_incompatible_change_is_refused_with_incompatible_schema(client: pulsar.Client) -> None:
    name = topic()
    client.create_producer(name, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(UserBad))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=JsonSchema(User1))  # the type may not change
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(name, "s", schema=AvroSchema(UserBad))
    client.create_producer(name, schema=AvroSchema(User1))  # the same schema still gets in


def test_namespace_and_topic_strategies(broker: Standalone, client: pulsar.Client) -> None:
    ns = namespace(broker, schemaCompatibilityStrategy="ALWAYS_INCOMPATIBLE")
    name = f"persistent://{ns}/t"
    client.create_producer(name, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(User2))
    # the topic's own policy wins over its namespace's
    url = f"{broker.admin_url}/admin/v2/persistent/{ns}/t/schemaCompatibilityStrategy"
    assert http("POST", url, b'"ALWAYS_COMPATIBLE"')[0] == 204
    client.create_producer(name, schema=AvroSchema(UserBad))
    assert http("DELETE", url)[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(User2))


def test_auto_update_off_keeps_to_known_versions(broker: Standalone, client: pulsar.Client) -> None:
    ns = namespace(broker)
    name = f"persistent://{ns}/t"
    client.create_producer(name, schema=AvroSchema(User1))
    assert http("POST", f"{broker.admin_url}/admin/v2/namespaces/{ns}/isAllowAutoUpdateSchema", b"false")[0] == 204
    client.create_producer(name, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(User2))


def test_validation_enforced_refuses_producers_without_a_schema(broker: Standalone, client: pulsar.Client) -> None:
    ns = namespace(broker, schemaValidationEnforced=True)
    schemaless = f"persistent://{ns}/plain"
    client.create_producer(schemaless).send(b"bytes are fine where there is no schema")
    name = f"persistent://{ns}/typed"
    client.create_producer(name, schema=StringSchema())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name)
    client.create_producer(f"persistent://public/default/{name.rsplit('/', 1)[1]}-{uuid.uuid4().hex[:4]}")


def test_a_consumer_registers_only_on_an_idle_topic(client: pulsar.Client) -> None:
    idle = topic()
    client.subscribe(idle, "first", schema=AvroSchema(User1)).close()
    with pytest.raises(pulsar.IncompatibleSchema):  # the consumer's schema became the topic's
        client.create_producer(idle, schema=AvroSchema(UserBad))
    busy = topic()
    client.create_producer(busy).send(b"schemaless data")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(busy, "typed", schema=AvroSchema(User1))


class AutoConsume(pulsar.schema.Schema):
    """An AUTO_CONSUME SchemaInfo, as Java's Schema.AUTO_CONSUME() has it. The Python client
    has no such class, and the C++ client under it leaves such a schema out of its
    CommandSubscribe: to the broker it is a consumer without a schema."""

    def __init__(self) -> None:
        super().__init__(bytes, _pulsar.SchemaType.AUTO_CONSUME, None, "AUTO_CONSUME")

    def encode(self, obj: bytes) -> bytes:
        return obj

    def decode(self, data: bytes) -> bytes:
        return data


def _auto_consume(raw: RawClient, name: str) -> None:
    raw.command(T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
        topic=name, subscription="auto", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=1,
        schema=pb.Schema(name="auto", schema_data=b"", type=pb.Schema.AutoConsume))))
    raw.expect(T.SUCCESS)


def test_auto_consume_consumers_leave_a_topic_idle(broker: Standalone, client: pulsar.Client) -> None:
    """As in Pulsar, a consumer subscribed with Schema.Type AutoConsume (as Java's clients send
    it) registers nothing and leaves the topic idle: a typed consumer after it still gives the
    topic its first schema, and producers are held to it. A consumer without a schema (what
    the official client's AUTO_CONSUME SchemaInfo sends) does make the topic busy."""
    name = topic()
    raw = _raw(broker)
    try:
        _auto_consume(raw, name)
        typed = client.subscribe(name, "typed", schema=AvroSchema(User1))
        with pytest.raises(pulsar.IncompatibleSchema):  # the typed consumer's schema is the topic's
            client.create_producer(name, schema=AvroSchema(UserBad))
        client.create_producer(name, schema=AvroSchema(User1)).send(User1(name="a", age=1))
        assert typed.receive(10_000).value().name == "a"
    finally:
        raw.close()
    busy = topic()
    client.subscribe(busy, "auto", schema=AutoConsume())
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(busy, "typed", schema=AvroSchema(User1))


def test_partitions_share_one_schema_and_a_deleted_topic_forgets_it(broker: Standalone,
                                                                   client: pulsar.Client) -> None:
    name = topic()
    path = name.replace("persistent://", "")
    assert http("PUT", f"{broker.admin_url}/admin/v2/persistent/{path}/partitions", b"3")[0] == 204
    producer = client.create_producer(name, schema=AvroSchema(User1),
                                      message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    consumer = client.subscribe(name, "s", schema=AvroSchema(User1))
    for i in range(9):
        producer.send(User1(name="x", age=i))
    messages = [consumer.receive(10_000) for _ in range(9)]
    assert {m.topic_name() for m in messages} == {f"{name}-partition-{i}" for i in range(3)}
    assert {version(m) for m in messages} == {0}
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(f"{name}-partition-1", schema=AvroSchema(UserBad))
    producer.close()
    consumer.close()
    assert http("DELETE", f"{broker.admin_url}/admin/v2/persistent/{path}/partitions?force=true")[0] == 204
    client.create_producer(name, schema=AvroSchema(UserBad))


def _raw(broker: Standalone) -> RawClient:
    raw = RawClient(broker.url)
    raw.connect()
    return raw


def test_get_schema_and_get_or_create_schema_on_the_wire(broker: Standalone, client: pulsar.Client) -> None:
    name = topic()
    client.create_producer(name, schema=AvroSchema(User1))
    client.create_producer(name, schema=AvroSchema(User2))
    raw = _raw(broker)
    try:
        raw.command(T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=1, topic=name)))
        latest = raw.expect(T.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert latest.schema_version == (1).to_bytes(8, "big") and latest.schema.type == pb.Schema.Avro
        assert [f["name"] for f in json.loads(latest.schema.schema_data)["fields"]] == ["name", "age", "score"]
        assert latest.schema.name == name.removeprefix("persistent://")
        raw.command(T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=2, topic=name, schema_version=(0).to_bytes(8, "big"))))
        first = raw.expect(T.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert "score" not in first.schema.schema_data.decode()
        raw.command(T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
            request_id=3, topic=name, schema_version=(7).to_bytes(8, "big"))))
        missing = raw.expect(T.GET_SCHEMA_RESPONSE).getSchemaResponse
        assert missing.error_code == pb.TopicNotFound and "no-schema" in missing.error_message
        avro_long = pb.Schema(name="n", type=pb.Schema.Avro, schema_data=b'"long"')
        raw.command(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=4, topic=name, schema=avro_long)))
        refused = raw.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert refused.error_code == pb.IncompatibleSchema
        bad = pb.Schema(name="n", type=pb.Schema.Avro, schema_data=b'{"type": "record"')
        raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic(), producer_id=1, request_id=5,
                                                                   schema=bad)))
        error = raw.expect(T.ERROR).error
        assert error.error == pb.IncompatibleSchema and "Invalid schema definition data for AVRO" in error.message
        fresh = topic()
        raw.create_producer(fresh, producer_id=2, request_id=6)
        raw.command(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=7, topic=fresh, schema=avro_long)))
        created = raw.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert created.schema_version == (0).to_bytes(8, "big") and not created.HasField("error_code")
    finally:
        raw.close()


def test_versions_survive_sigkill(tmp_path: Path) -> None:
    """Registered versions are durable: after a SIGKILL the same schemas get the same
    versions back, the strategy still refuses, and an old reader decodes new messages."""
    broker = Standalone(tmp_path / "data").start()
    name = topic()
    try:
        with_client(broker, lambda c: (c.create_producer(name, schema=AvroSchema(User1)).send(User1(name="a", age=1)),
                                       c.create_producer(name, schema=AvroSchema(User2)).send(
                                           User2(name="b", age=2, score=0.5))))
        broker.kill()
        broker.start()

        def check(c: pulsar.Client) -> None:
            reader = c.subscribe(name, "after", schema=AvroSchema(User1),
                                 initial_position=pulsar.InitialPosition.Earliest)
            got = [reader.receive(10_000) for _ in range(2)]
            assert [(version(m), m.value().name) for m in got] == [(0, "a"), (1, "b")]
            c.create_producer(name, schema=AvroSchema(User2)).send(User2(name="c", age=3, score=1.0))
            assert version(reader.receive(10_000)) == 1
            with pytest.raises(pulsar.IncompatibleSchema):
                c.create_producer(name, schema=AvroSchema(UserBad))

        with_client(broker, check)
    finally:
        broker.stop()


def with_client(broker: Standalone, use) -> None:  # type: ignore[no-untyped-def]
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, logger=QUIET)
    try:
        use(c)
    finally:
        c.close()


def test_primitive_schemas_keep_their_type(client: pulsar.Client) -> None:
    name = topic()
    producer = client.create_producer(name, schema=StringSchema())
    consumer = client.subscribe(name, "s", schema=StringSchema())
    producer.send("hello")
    message = consumer.receive(10_000)
    assert message.value() == "hello" and version(message) == 0

    class Counter(Record):
        n = Long()

    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=JsonSchema(Counter))


def test_json_schemas_evolve_and_readers_decode_every_version(client: pulsar.Client) -> None:
    name = topic()
    p1 = client.create_producer(name, schema=JsonSchema(User1))
    p2 = client.create_producer(name, schema=JsonSchema(User2))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=JsonSchema(UserBad))
    p1.send(User1(name="one", age=1))
    p2.send(User2(name="two", age=2, score=2.5))
    reader = client.create_reader(name, pulsar.MessageId.earliest, schema=JsonSchema(User1))
    got = [reader.read_next(10_000) for _ in range(2)]
    assert [(version(m), m.value().name) for m in got] == [(0, "one"), (1, "two")]


def test_the_non_persistent_topic_of_a_name_shares_its_schema(client: pulsar.Client) -> None:
    """Pulsar's schema id is tenant/namespace/topic, whatever the domain."""
    name = topic()
    client.create_producer(name, schema=AvroSchema(User1))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name.replace("persistent://", "non-persistent://"), schema=AvroSchema(UserBad))


def test_protobuf_native_schemas_keep_their_root_message(client: pulsar.Client) -> None:
    """The official client's ProtobufNativeSchema: its descriptor set parses, and another
    root message is refused."""
    name = topic()
    producer = client.create_producer(name, schema=ProtobufNativeSchema(pb.MessageIdData))
    consumer = client.subscribe(name, "s", schema=ProtobufNativeSchema(pb.MessageIdData))
    producer.send(pb.MessageIdData(ledgerId=7, entryId=9))
    value = consumer.receive(10_000).value()
    assert (value.ledgerId, value.entryId) == (7, 9)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=ProtobufNativeSchema(pb.KeyValue))


def test_key_value_schemas_over_the_wire(broker: Standalone) -> None:
    """KEY_VALUE as Java clients send it (the Python client has none): registered, found
    again, and refused when a side's type changes or its value stops being readable."""
    record = json.dumps({"type": "record", "name": "V", "fields": [{"name": "a", "type": "int"}]}).encode()
    string_key = SchemaData(SchemaType.STRING, b"")
    first = join_key_value(string_key, SchemaData(SchemaType.AVRO, record))
    name = topic()
    raw = _raw(broker)
    try:
        def register(producer_id: int, schema: SchemaData) -> pb.BaseCommand:
            raw.command(T(type=T.PRODUCER, producer=pb.CommandProducer(
                topic=name, producer_id=producer_id, request_id=producer_id, schema=to_wire("kv", schema))))
            return raw.expect(T.PRODUCER_SUCCESS if producer_id < 3 else T.ERROR)

        assert register(1, first).producer_success.schema_version == (0).to_bytes(8, "big")
        assert register(2, first).producer_success.schema_version == (0).to_bytes(8, "big")
        int_key = join_key_value(SchemaData(SchemaType.INT64, b""), SchemaData(SchemaType.AVRO, record))
        assert "key type changes from STRING to INT64" in register(3, int_key).error.message
        unreadable = SchemaData(SchemaType.AVRO, record.replace(b'"int"', b'"string"'))
        refused = register(4, join_key_value(string_key, unreadable)).error
        assert refused.error == pb.IncompatibleSchema and "value" in refused.message
    finally:
        raw.close()


def test_deleting_one_partition_keeps_the_shared_schema(broker: Standalone, client: pulsar.Client) -> None:
    name = topic()
    path = name.replace("persistent://", "")
    assert http("PUT", f"{broker.admin_url}/admin/v2/persistent/{path}/partitions", b"2")[0] == 204
    client.create_producer(name, schema=AvroSchema(User1)).close()
    assert http("DELETE", f"{broker.admin_url}/admin/v2/persistent/{path}-partition-0?force=true")[0] == 204
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(f"{name}-partition-1", schema=AvroSchema(UserBad))
