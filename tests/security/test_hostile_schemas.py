"""Large schemas sent as an attacker sends them (issue 40, item 8): a produce-only role's
PRODUCER with a 12,000-field record and a tenant admin's 16,000-field compatibility check
are refused at once, naming the limit; a large check within the limit runs while the broker
keeps answering everyone else, the connection that sent it included; a producer closed while
its check ran is not created afterwards; a connection cannot queue checks without bound.

Raw frames where the order of answers is what is tested; the official client and
magnetar.client for a user's wide record."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pulsar
import pytest
from admin_http import http
from rawclient import RawClient
from security_helpers import client_as, scene_broker
from standalone import Standalone

import magnetar.client
from magnetar.broker.transport.schema_waits import MAX_SCHEMA_CHECKS
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
LIMIT = 10_000  # schemaMaxFields' default


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    with scene_broker(tmp_path_factory.mktemp("schemas") / "data", signer) as broker:
        yield broker


def wide(fields: int, prefix: str = "f", optional: int = 0) -> str:
    listed = [{"name": f"{prefix}{i}", "type": "long"} for i in range(fields)]
    listed += [{"name": f"o{i}", "type": ["null", "long"], "default": None} for i in range(optional)]
    return json.dumps({"type": "record", "name": "Wide", "fields": listed})


def avro(definition: str) -> pb.Schema:
    return pb.Schema(name="Wide", type=pb.Schema.Avro, schema_data=definition.encode())


def producer_command(topic: str, producer_id: int, definition: str) -> T:
    return T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=producer_id,
                                                          request_id=producer_id, schema=avro(definition)))


def raw_as(broker: Standalone, signer, role: str) -> RawClient:
    raw = RawClient(broker.url)
    raw.connect("token", signer.token(role).encode())
    return raw


def test_a_produce_only_role_cannot_send_a_schema_past_the_limit(broker, signer):
    raw = raw_as(broker, signer, "ingest")
    try:
        raw.command(producer_command("persistent://t1/ns/huge", 1, wide(12_000)))
        error = raw.expect(T.ERROR).error
        assert error.error == pb.IncompatibleSchema
        assert "12000 fields, union branches and symbols, more than the 10000 the broker takes (schemaMaxFields)" \
            in error.message
        raw.command(T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
            request_id=2, topic="persistent://t1/ns/huge", schema=avro(wide(LIMIT + 1)))))
        answer = raw.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).getOrCreateSchemaResponse
        assert answer.error_code == pb.IncompatibleSchema and "(schemaMaxFields)" in answer.error_message
    finally:
        raw.close()


def test_an_admin_check_past_the_limit_is_refused_with_422(broker, signer):
    body = json.dumps({"type": "AVRO", "schema": wide(16_000)}).encode()
    for path in ("compatibility", "schema"):
        status, _, content = http("POST", f"{broker.admin_url}/admin/v2/schemas/t1/ns/huge/{path}", body,
                                  headers=signer.bearer("t1-admin"))
        assert status == 422, (path, content)
        assert "16000 fields, union branches and symbols, more than the 10000" in json.loads(content)["reason"]


@pytest.mark.parametrize("command", ["PRODUCER", "SUBSCRIBE", "GET_OR_CREATE_SCHEMA"])
def test_the_connection_that_sent_a_large_schema_is_served_while_it_is_checked(broker, signer, command):
    """The schema and a PING in one write: the PONG comes first, then the schema's answer
    (a broker that checks on its event loop answers in the order asked)."""
    topic = f"persistent://t1/ns/wide-{command.lower()}"
    raw = raw_as(broker, signer, "app")
    try:
        raw.command(producer_command(topic, 1, wide(6000)))  # the version the check compares with
        raw.expect(T.PRODUCER_SUCCESS)
        larger = avro(wide(6000, optional=1))
        request = {
            "PRODUCER": producer_command(topic, 2, wide(6000, optional=1)),
            "SUBSCRIBE": T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
                topic=topic, subscription="s", subType=pb.CommandSubscribe.Shared, consumer_id=3, request_id=3,
                schema=larger)),
            "GET_OR_CREATE_SCHEMA": T(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=pb.CommandGetOrCreateSchema(
                request_id=4, topic=topic, schema=larger)),
        }[command]
        raw.write(_encoded(request) + _encoded(T(type=T.PING, ping=pb.CommandPing())))
        raw.expect(T.PONG)
        answer = raw.next_frame(timeout=60)
        assert answer is not None and answer.command.type in (
            T.PRODUCER_SUCCESS, T.SUCCESS, T.GET_OR_CREATE_SCHEMA_RESPONSE), answer
        if command == "GET_OR_CREATE_SCHEMA":
            assert not answer.command.getOrCreateSchemaResponse.HasField("error_code")
    finally:
        raw.close()


def _encoded(command: T) -> bytes:
    from magnetar.wire.frames import encode_command  # noqa: PLC0415

    return encode_command(command)


def test_the_admin_api_answers_others_while_it_checks_a_large_schema(broker, signer):
    """Other requests are answered while a tenant admin's check of a 9,000-field record
    runs (a broker checking on its event loop answered none until it was done)."""
    base = f"{broker.admin_url}/admin/v2/schemas/t1/ns/wide-admin"
    headers = signer.bearer("t1-admin")
    status, _, content = http("POST", f"{base}/schema", json.dumps({"type": "AVRO", "schema": wide(9000)}).encode(),
                              headers=headers)
    assert status == 200, content
    answered: list[tuple[int, dict, bytes]] = []
    checking = threading.Thread(target=lambda: answered.append(http(
        "POST", f"{base}/compatibility", json.dumps({"type": "AVRO", "schema": wide(9000, optional=1)}).encode(),
        headers=headers)))
    checking.start()
    others = 0
    while checking.is_alive():
        assert http("GET", f"{broker.admin_url}/admin/v2/clusters", headers=headers)[2] == b'["standalone"]'
        others += 1
    checking.join()
    assert answered[0][0] == 200 and json.loads(answered[0][2])["isCompatibility"] is True
    assert others >= 5, f"only {others} requests answered during the check"


def test_a_producer_closed_while_its_schema_is_checked_is_not_created(broker, signer):
    topic = "persistent://t1/ns/withdrawn"
    raw = raw_as(broker, signer, "app")
    try:
        raw.write(_encoded(producer_command(topic, 1, wide(4000)))
                  + _encoded(T(type=T.CLOSE_PRODUCER, close_producer=pb.CommandCloseProducer(producer_id=1,
                                                                                          request_id=9))))
        assert raw.expect(T.SUCCESS).success.request_id == 9
        raw.command(producer_command(topic, 2, wide(4000)))  # waits for the same check, then is created
        assert raw.expect(T.PRODUCER_SUCCESS, timeout=60).producer_success.request_id == 2
        status, _, stats = http("GET", f"{broker.admin_url}/admin/v2/persistent/t1/ns/withdrawn/stats",
                                headers=signer.bearer("t1-admin"))
    finally:
        raw.close()
    assert status == 200 and len(json.loads(stats)["publishers"]) == 1


def test_a_connection_waits_for_a_few_checks_at_most(broker, signer):
    """Producers of distinct large schemas in one write: past MAX_SCHEMA_CHECKS at once, the
    ones over the limit are refused with ServiceNotReady (which clients retry); the others are
    created. Three times the limit: reading a command is far cheaper than checking its schema,
    but on a loaded machine a check may end before the last commands are read."""
    raw = raw_as(broker, signer, "app")
    count = 3 * MAX_SCHEMA_CHECKS
    try:
        for n in range(count):  # the topics first, so that the producers below wait for their checks alone
            raw.create_producer(f"persistent://t1/ns/queue-{n}", producer_id=100 + n, request_id=100 + n)
        raw.write(b"".join(_encoded(producer_command(f"persistent://t1/ns/queue-{n}", n, wide(5000, prefix=f"p{n}_")))
                           for n in range(count)))
        answers = [raw.next_frame(timeout=60) for _ in range(count)]
    finally:
        raw.close()
    assert all(frame is not None for frame in answers), "every producer is answered"
    errors = [frame.command.error for frame in answers if frame.command.type == T.ERROR]
    created = [frame for frame in answers if frame.command.type == T.PRODUCER_SUCCESS]
    assert errors and len(created) >= MAX_SCHEMA_CHECKS and len(errors) + len(created) == count
    assert all(error.error == pb.ServiceNotReady and "schema checks are in progress" in error.message
               for error in errors)


@pytest.mark.parametrize("module", [pulsar, magnetar.client], ids=["official", "magnetar"])
def test_a_wide_record_within_the_limit_works_end_to_end(broker, signer, module):
    """A user's 3,000-field record: registered, evolved by a second producer, read back."""
    topic = f"persistent://t1/ns/wide-{module.__name__.replace('.', '-')}"
    record = module.schema.Record
    first = type("Wide", (record,), {f"c{i}": module.schema.Long() for i in range(3000)})
    evolved = type("Wide", (record,), {**{f"c{i}": module.schema.Long() for i in range(3000)},
                                       "extra": module.schema.Long(required_default=True)})
    client = client_as(broker.url, signer, "app") if module is pulsar else module.Client(
        broker.url, authentication=module.AuthenticationToken(signer.token("app")), operation_timeout_seconds=30)
    try:
        consumer = client.subscribe(topic, "s", schema=module.schema.AvroSchema(first))
        client.create_producer(topic, schema=module.schema.AvroSchema(first)).send(first(**{"c7": 7}))
        client.create_producer(topic, schema=module.schema.AvroSchema(evolved)).send(evolved(c8=8, extra=1))
        assert consumer.receive(30_000).value().c7 == 7
        assert consumer.receive(30_000).value().c8 == 8
    finally:
        client.close()
