"""What each role may do over REST and the binary protocol (issue 28, 3-5 and the probe
beyond it): one table maps every route and command to Pulsar's operation; this module
checks that the router has no route the table lacks, that docs/security.md shows the
table, and walks the topic commands as each kind of role against a real broker with real
tokens (test_role_table walks every route, against a table of its own)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from rawclient import RawClient
from security_helpers import AUTHZ_SETTINGS, admin_json, admin_routes, build_scene, client_as, route_body, route_url
from standalone import Standalone

from magnetar.admin.operations import ROUTES
from magnetar.admin.permission_table import render
from magnetar.broker.auth.operations import COMMANDS, Need
from magnetar.broker.transport.connection import _HANDLERS
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
DOCS = Path(__file__).parents[2] / "docs" / "security.md"
TOPIC = "persistent://t1/ns/probe"
#: What each role of the scene may do, stated apart from the code: a role with no grant only
#: what needs authentication alone; produce and consume their own; admins more.
BASIC = {Need.PUBLIC, Need.OPEN, Need.AUTHENTICATED, Need.HOLDER}
ALLOWED = {
    "nobody": BASIC,
    "ingest": BASIC | {Need.LOOKUP, Need.PRODUCE},
    "reader": BASIC | {Need.LOOKUP, Need.CONSUME},
    "t1-admin": set(Need) - {Need.SUPER_USER},
    "admin": set(Need),
}


def test_every_route_and_command_has_an_operation(tmp_path):
    routes = admin_routes(tmp_path)
    assert sorted(routes - set(ROUTES)) == [], "routes without an authorization rule"
    assert sorted(set(ROUTES) - routes) == [], "rules for routes that do not exist"
    assert set(_HANDLERS) == set(COMMANDS)


def test_the_documented_table_is_the_one_the_code_checks_with():
    assert render() in DOCS.read_text(), "run: python -m magnetar.admin.permission_table docs/security.md"


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("operations") / "data",
                        [*AUTHZ_SETTINGS, signer.setting, "authenticateMetricsEndpoint=true",
                         "transactionCoordinatorEnabled=true"]).start()  # else its routes answer 503
    build_scene(broker.admin_url, signer)
    client = client_as(broker.url, signer, "app")
    try:
        client.subscribe(TOPIC, "sub").close()
        producer = client.create_producer(TOPIC, batching_enabled=False)
        for n in range(3):
            producer.send(f"secret-{n}".encode())
    finally:
        client.close()
    yield broker
    broker.stop()


def request_as(broker: Standalone, signer, role: str | None, method: str, path: str,
               body: object = None) -> tuple[int, bytes]:
    headers = signer.bearer(role) if role else {}
    data = None if body is None else json.dumps(body).encode()
    status, _, content = http(method, broker.admin_url + path, data, headers=headers)
    return status, content


def test_reading_messages_over_rest_needs_consume(broker, signer):
    """`ingest` (produce only) once read what `app` sent through examinemessage and
    getMessageById; Pulsar's PEEK_MESSAGES and GET_SUBSCRIPTIONS need consume."""
    base = "/admin/v2/persistent/t1/ns/probe"
    status, content = request_as(broker, signer, "reader", "GET", f"{base}/examinemessage?initialPosition=earliest")
    assert (status, content) == (200, b"secret-0")
    _, last = admin_json("GET", f"{broker.admin_url}{base}/lastMessageId", signer.bearer("reader"))
    entry = f"{base}/ledger/{last['ledgerId']}/entry/{last['entryId']}"  # type: ignore[index]
    for path in (f"{base}/examinemessage?initialPosition=earliest", entry, f"{base}/subscriptions",
                 f"{base}/subscription/sub/position/1", f"{base}/lastMessageId"):
        status, content = request_as(broker, signer, "ingest", "GET", path)
        assert status == 403, (path, status, content)
        assert b"secret" not in content
        assert "it needs consume" in json.loads(content)["reason"]
    assert request_as(broker, signer, "reader", "GET", entry) == (200, b"secret-2")
    assert request_as(broker, signer, "reader", "GET", f"{base}/subscriptions") == (200, b'["sub"]')


def test_a_consume_role_lists_its_namespace_over_rest_and_binary(broker, signer):
    for path in ("/admin/v2/persistent/t1/ns", "/admin/v2/namespaces/t1/ns/topics"):
        status, content = request_as(broker, signer, "reader", "GET", path)
        assert status == 200, (path, content)
        assert TOPIC in json.loads(content)
        assert request_as(broker, signer, "ingest", "GET", path)[0] == 403  # Pulsar's GET_TOPICS: consume
    client = client_as(broker.url, signer, "reader")
    try:
        consumer = client.subscribe(re.compile("persistent://t1/ns/pro.*"), "by-pattern",
                                    initial_position=pulsar.InitialPosition.Earliest)
        assert consumer.receive(10_000).data().startswith(b"secret-")
    finally:
        client.close()


def test_metrics_ask_for_credentials_when_configured(broker, signer):
    assert http("GET", f"{broker.admin_url}/metrics")[0] == 401
    status, _, content = http("GET", f"{broker.admin_url}/metrics", headers=signer.bearer("nobody"))
    assert status == 200
    assert b"t1/ns/probe" in content  # any authenticated role reads them, as in Pulsar


LIST_NAMESPACE = pb.CommandGetTopicsOfNamespace(namespace="t1/ns", request_id=6)
LAST_ID = pb.CommandGetLastMessageId(consumer_id=0, request_id=3)


def raw_as(broker: Standalone, signer, role: str) -> RawClient:
    raw = RawClient(broker.url)
    raw.connect("token", signer.token(role).encode())
    return raw


@pytest.mark.parametrize("role", list(ALLOWED))
def test_topic_commands_as_every_role(broker, signer, role):
    """PRODUCER, SUBSCRIBE, LOOKUP, PARTITIONED_METADATA, GET_SCHEMA and
    GET_TOPICS_OF_NAMESPACE as the raw protocol sends them; an error answer is an
    AuthorizationError exactly where the table says the role may not."""
    requests = {
        T.PRODUCER: T(type=T.PRODUCER, producer=pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1)),
        T.SUBSCRIBE: T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
            topic=TOPIC, subscription=f"raw-{role}", subType=pb.CommandSubscribe.Shared, consumer_id=1, request_id=2)),
        T.LOOKUP: T(type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=TOPIC, request_id=3)),
        T.PARTITIONED_METADATA: T(type=T.PARTITIONED_METADATA,
                                  partitionMetadata=pb.CommandPartitionedTopicMetadata(topic=TOPIC, request_id=4)),
        T.GET_SCHEMA: T(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(topic=TOPIC, request_id=5)),
        T.GET_TOPICS_OF_NAMESPACE: T(type=T.GET_TOPICS_OF_NAMESPACE, getTopicsOfNamespace=LIST_NAMESPACE),
    }
    raw = raw_as(broker, signer, role)
    try:
        for kind, request in requests.items():
            raw.command(request)
            frame = raw.next_frame()
            assert frame is not None, T.Type.Name(kind)
            refused = _error_code(frame.command) == pb.AuthorizationError
            assert refused == (COMMANDS[kind].need not in ALLOWED[role]), (T.Type.Name(kind), frame.command)
    finally:
        raw.close()


def _error_code(command: T) -> int | None:
    """The ServerError of an answer, None for a success."""
    for field, code_field in (("error", "error"), ("lookupTopicResponse", "error"),
                              ("partitionMetadataResponse", "error"), ("getSchemaResponse", "error_code"),
                              ("consumerStatsResponse", "error_code")):
        if command.HasField(field) and getattr(command, field).HasField(code_field):
            return getattr(getattr(command, field), code_field)
    return None


def test_every_route_on_live_resources_never_fails_the_server(broker, signer):
    """The walk above sends admins to scratch resources; here the super user runs every
    route on the live topic and subscription, reads first and deletions last, and no
    handler answers with a server error."""
    order = {"GET": 0, "PUT": 1, "POST": 2, "DELETE": 3}
    problems = []
    for method, path in sorted(ROUTES, key=lambda route: order[route[0]]):
        url = route_url(path, scratch=False)
        status, _, content = http(method, broker.admin_url + url, route_body(path), headers=signer.bearer("admin"))
        if status >= 500:
            problems.append(f"{method} {url}: {status} {content[:200]!r}")
    assert problems == []


def test_handle_commands_reach_only_the_connections_own_handles(broker, signer):
    """A role holding nothing names consumer 0 and producer 0, which another connection
    holds: it learns nothing and changes nothing there."""
    client = client_as(broker.url, signer, "app")
    try:
        consumer = client.subscribe(TOPIC, "held-by-app")
        raw = raw_as(broker, signer, "nobody")
        try:
            for request in (
                    T(type=T.UNSUBSCRIBE, unsubscribe=pb.CommandUnsubscribe(consumer_id=0, request_id=1)),
                    T(type=T.SEEK, seek=pb.CommandSeek(consumer_id=0, request_id=2, message_publish_time=0)),
                    T(type=T.GET_LAST_MESSAGE_ID, getLastMessageId=LAST_ID),
                    T(type=T.CONSUMER_STATS, consumerStats=pb.CommandConsumerStats(consumer_id=0, request_id=4))):
                raw.command(request)
                frame = raw.next_frame()
                assert frame is not None and _error_code(frame.command) is not None, frame
            raw.command(T(type=T.FLOW, flow=pb.CommandFlow(consumer_id=0, messagePermits=1000)))
            raw.send(0, 0, b"forged")
            assert raw.closed_by_peer()  # a SEND for a producer it does not hold ends its connection
        finally:
            raw.close()
        client.create_producer(TOPIC).send(b"for app")
        assert consumer.receive(10_000).data() == b"for app"
    finally:
        client.close()
