"""Pulsar's REST producer (`POST /topics/persistent/...`): what it writes is read by the
official client and magnetar.client alike (keys, properties, event time, schema'd values),
and what is malformed or hostile is refused with a reason, storing nothing."""

from __future__ import annotations

import base64
import json
import random
import time

import pytest
from admin_http import get_json, http

TOPICS = "/topics/persistent/public/default"
ADMIN = "/admin/v2/persistent/public/default"
POINT = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}, {"name": "label",
                                                                                       "type": "string"}]}


def produce(broker, topic: str, body: object) -> tuple[int, dict]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    status, _, answer = http("POST", f"{broker.admin_url}{TOPICS}/{topic}", raw)
    return status, json.loads(answer) if answer else {}


def create(broker, topic: str) -> None:
    assert http("PUT", f"{broker.admin_url}{ADMIN}/{topic}")[0] == 204


def stored(broker, topic: str) -> int:
    return get_json(f"{broker.admin_url}{ADMIN}/{topic}/stats")["msgInCounter"]


def test_messages_read_by_both_clients(module_broker, api):
    mod, make = api
    topic = f"rest-plain-{random.randrange(1 << 30)}"
    create(module_broker, topic)
    consumer = make(module_broker.url).subscribe(topic, "s")
    messages = [{"key": f"k{i}", "payload": f"hello <script>{i}</script>", "properties": {"n": str(i), "é": "ü"},
                 "eventTime": 1_700_000_000_000 + i} for i in range(3)]
    messages.append({"payload": "no key"})
    status, answer = produce(module_broker, topic, {"producerName": "tester", "messages": messages})
    assert status == 200, answer
    assert answer["schemaVersion"] == -1
    results = answer["messagePublishResults"]
    assert [r["errorCode"] for r in results] == [0] * 4
    for sent, result in zip(messages, results, strict=True):
        got = consumer.receive(timeout_millis=10_000)
        assert got.data() == sent["payload"].encode()
        assert got.partition_key() == sent.get("key", "")
        assert got.properties() == sent.get("properties", {})
        assert got.event_timestamp() == sent.get("eventTime", 0)
        mid = got.message_id()
        assert result["messageId"] == f"{mid.ledger_id()}:{mid.entry_id()}:-1"
    assert mod is not None


def test_avro_values_encoded_for_the_topics_schema(module_broker, api):
    mod, make = api
    topic = f"rest-avro-{random.randrange(1 << 30)}"
    client = make(module_broker.url)
    schema = mod.schema.AvroSchema(None, schema_definition=POINT)
    client.create_producer(topic, schema=schema).close()  # the topic's schema, registered as a producer does
    consumer = client.subscribe(topic, "s", schema=schema)
    records = [{"x": i, "label": f"p{i}"} for i in range(3)]
    # as a JSON value, and as a string holding one (as Pulsar's clients send it)
    payloads = [records[0], json.dumps(records[1]), records[2]]
    status, answer = produce(module_broker, topic, {"messages": [{"payload": p} for p in payloads]})
    assert status == 200, answer
    assert answer["schemaVersion"] == 0
    assert [consumer.receive(timeout_millis=10_000).value() for _ in records] == records

    for bad in ({"x": "not an int", "label": "p"}, {"x": 1}, "not json", 5):
        status, answer = produce(module_broker, topic, {"messages": [{"payload": records[0]}, {"payload": bad}]})
        assert status == 400 and "messages[1]" in answer["reason"], (bad, answer)
    assert stored(module_broker, topic) == 3


def test_a_schema_in_the_request_is_registered_as_a_producers(module_broker, client_factory):
    topic = f"rest-json-{random.randrange(1 << 30)}"
    create(module_broker, topic)
    value_schema = json.dumps({"type": "JSON", "schema": json.dumps(POINT), "properties": {}})
    status, answer = produce(module_broker, topic, {"valueSchema": value_schema,
                                                    "messages": [{"payload": {"x": 7, "label": "seven"}}]})
    assert status == 200, answer
    registered = get_json(f"{module_broker.admin_url}/admin/v2/schemas/public/default/{topic}/schema")
    assert registered["type"] == "JSON" and json.loads(registered["data"]) == POINT
    import pulsar  # noqa: PLC0415

    reader = client_factory(module_broker.url).subscribe(
        topic, "s", schema=pulsar.schema.JsonSchema(_point_record()),
        initial_position=pulsar.InitialPosition.Earliest)
    got = reader.receive(timeout_millis=10_000).value()
    assert (got.x, got.label) == (7, "seven")
    # an incompatible schema is refused as a producer's would be
    other = {"type": "AVRO", "schema": json.dumps({"type": "record", "name": "Other", "fields": [
        {"name": "y", "type": "string"}]})}
    status, answer = produce(module_broker, topic, {"valueSchema": other, "messages": [{"payload": {"y": "a"}}]})
    assert status == 400 and "valueSchema" in answer["reason"], answer
    assert stored(module_broker, topic) == 1


def _point_record():
    from pulsar.schema import Integer, Record, String  # noqa: PLC0415

    class Point(Record):
        x = Integer()
        label = String()

    return Point


def test_bytes_from_base64_and_partitions(module_broker, client_factory):
    topic = f"rest-parts-{random.randrange(1 << 30)}"
    assert http("PUT", f"{module_broker.admin_url}{ADMIN}/{topic}/partitions", b"3")[0] == 204
    data = [random.randbytes(random.randrange(1, 200)) for _ in range(6)]
    body = {"valueSchema": {"type": "BYTES"}, "messages": [{"payload": base64.b64encode(d).decode()} for d in data]}
    status, answer = produce(module_broker, topic, body)
    assert status == 200, answer
    partitions = [int(r["messageId"].rsplit(":", 1)[1]) for r in answer["messagePublishResults"]]
    assert sorted(set(partitions)) == [0, 1, 2]  # spread round robin
    status, answer = produce(module_broker, f"{topic}/partitions/1", {"messages": [{"payload": "one"}]})
    assert status == 200 and answer["messagePublishResults"][0]["messageId"].endswith(":1"), answer
    import pulsar  # noqa: PLC0415

    consumer = client_factory(module_broker.url).subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    got = sorted(consumer.receive(timeout_millis=10_000).data() for _ in range(7))
    assert got == sorted([*data, b"one"])


HOSTILE = [
    (b"{not json", 400),
    (b"[]", 400),
    ({"messages": []}, 400),
    ({"messages": [{"payload": "x"}] * 1001}, 400),
    ({"messages": [{"nopayload": 1}]}, 400),
    ({"messages": [{"payload": 5}]}, 400),
    ({"messages": [{"payload": "x", "properties": {"a": 1}}]}, 400),
    ({"messages": [{"payload": "x", "eventTime": -5}]}, 400),
    ({"messages": [{"payload": "x", "key": ["k"]}]}, 400),
    ({"valueSchema": {"type": "BYTES"}, "messages": [{"payload": "!!not base64!!"}]}, 400),
    ({"valueSchema": {"type": "NOSUCH"}, "messages": [{"payload": "x"}]}, 400),
    ({"valueSchema": {"type": "INT32"}, "messages": [{"payload": "x"}]}, 400),
    ({"keySchema": {"type": "AVRO", "schema": "{}"}, "messages": [{"payload": "x"}]}, 400),
    ({"producerName": ["x"], "messages": [{"payload": "x"}]}, 400),
]


def test_hostile_requests_are_refused_and_store_nothing(module_broker):
    topic = f"rest-hostile-{random.randrange(1 << 30)}"
    create(module_broker, topic)
    for body, expected in HOSTILE:
        status, answer = produce(module_broker, topic, body)
        assert status == expected and answer["reason"], (body if isinstance(body, bytes) else str(body)[:80], answer)
    huge = json.dumps({"messages": [{"payload": "x" * (2 << 20)}]}).encode()
    assert http("POST", f"{module_broker.admin_url}{TOPICS}/{topic}", huge)[0] == 413
    assert produce(module_broker, "no-such-topic", {"messages": [{"payload": "x"}]})[0] == 404
    assert produce(module_broker, f"{topic}/partitions/0", {"messages": [{"payload": "x"}]})[0] == 404
    assert produce(module_broker, f"{topic}/partitions/x", {"messages": [{"payload": "x"}]})[0] == 412
    assert produce(module_broker, f"{topic}/partitions/%C2%B2", {"messages": [{"payload": "x"}]})[0] == 412  # '²'
    assert stored(module_broker, topic) == 0
    # a topic's maxMessageSize holds for REST messages too
    assert http("POST", f"{module_broker.admin_url}{ADMIN}/{topic}/maxMessageSize", b"100")[0] == 204
    status, answer = produce(module_broker, topic, {"messages": [{"payload": "y" * 200}]})
    assert status == 400 and "maxMessageSize" in answer["reason"], answer
    # a terminated topic takes nothing
    assert http("POST", f"{module_broker.admin_url}{ADMIN}/{topic}/terminate")[0] == 200
    schema = {"type": "AVRO", "schema": json.dumps(POINT)}
    record = {"x": 1, "label": "z"}
    assert produce(module_broker, topic, {"valueSchema": schema, "messages": [{"payload": record}]})[0] == 409
    assert http("GET", f"{module_broker.admin_url}/admin/v2/schemas/public/default/{topic}/schema")[0] == 404
    assert stored(module_broker, topic) == 0
    # a namespace that requires encryption: the REST producer cannot encrypt
    admin = module_broker.admin_url
    assert http("PUT", f"{admin}/admin/v2/namespaces/public/sealed")[0] == 204
    assert http("POST", f"{admin}/admin/v2/namespaces/public/sealed/encryptionRequired", b"true")[0] == 204
    assert http("PUT", f"{admin}/admin/v2/persistent/public/sealed/secret")[0] == 204
    status, _, body = http("POST", f"{admin}/topics/persistent/public/sealed/secret",
                           json.dumps({"messages": [{"payload": "plain"}]}).encode())
    assert status == 412 and b"encrypted" in body, body
    assert "Traceback" not in module_broker.log()


@pytest.mark.parametrize("count", [1, 50])
def test_message_ids_are_the_stored_positions(module_broker, client_factory, count):
    topic = f"rest-ids-{count}-{random.randrange(1 << 30)}"
    create(module_broker, topic)
    status, answer = produce(module_broker, topic, {"messages": [{"payload": str(i)} for i in range(count)]})
    assert status == 200
    last = get_json(f"{module_broker.admin_url}{ADMIN}/{topic}/lastMessageId")
    ledger, entry, _ = answer["messagePublishResults"][-1]["messageId"].split(":")
    assert (int(ledger), int(entry)) == (last["ledgerId"], last["entryId"])


def test_the_publish_rate_slows_the_answers(module_broker):
    """Over the topic's publishRate (5 msg/s, a bucket of one second), the answer waits out
    the throttle as a throttled producer's connection would: 30 messages take at least the
    five seconds beyond the bucket, minus a wide band (a lower bound: load only adds)."""
    topic = f"rest-rate-{random.randrange(1 << 30)}"
    create(module_broker, topic)
    rate = {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}
    assert http("POST", f"{module_broker.admin_url}{ADMIN}/{topic}/publishRate", json.dumps(rate).encode())[0] == 204
    started = time.monotonic()
    for _ in range(3):
        assert produce(module_broker, topic, {"messages": [{"payload": "r"}] * 10})[0] == 200
    assert time.monotonic() - started >= 3.0
    assert stored(module_broker, topic) == 30  # slowed, never refused
