"""Tenants, namespaces and clusters over Pulsar's REST paths, and what they mean for topics."""

from __future__ import annotations

import json
import time

import pulsar
import pytest
from admin_http import get_json, http
from rawclient import RawClient

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand


def call(broker, method: str, path: str, body: object = None) -> tuple[int, object]:
    raw = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{broker.admin_url}{path}", raw)
    return status, json.loads(answer) if answer else None


def test_defaults_exist_from_the_first_start(broker):
    assert get_json(f"{broker.admin_url}/admin/v2/clusters") == ["standalone"]
    assert get_json(f"{broker.admin_url}/admin/v2/tenants") == ["public", "pulsar"]
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/public") == ["public/default"]
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/pulsar") == ["pulsar/system"]
    assert get_json(f"{broker.admin_url}/admin/v2/tenants/public")["allowedClusters"] == ["standalone"]
    cluster = get_json(f"{broker.admin_url}/admin/v2/clusters/standalone")
    assert cluster["brokerServiceUrl"] == broker.url
    assert call(broker, "GET", "/admin/v2/clusters/elsewhere")[0] == 404


def test_tenant_and_namespace_lifecycle(broker, client_factory):
    assert call(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": ["standalone"]}) \
        == (204, None)
    assert call(broker, "PUT", "/admin/v2/tenants/acme", {})[0] == 409
    assert call(broker, "PUT", "/admin/v2/tenants/other", {"allowedClusters": ["mars"]}) == (
        412, {"reason": "Clusters do not exist"})
    assert call(broker, "PUT", "/admin/v2/namespaces/nobody/ns")[0] == 404
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 204
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/orders")[0] == 409
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/bad%20name")[0] == 412
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/acme") == ["acme/orders"]

    client = client_factory(broker.url)
    client.create_producer("persistent://acme/orders/t").send(b"in a real namespace")
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/acme/orders/topics") == [
        "persistent://acme/orders/t"]
    assert call(broker, "DELETE", "/admin/v2/namespaces/acme/orders") == (
        409, {"reason": "Cannot delete non empty namespace"})
    assert call(broker, "DELETE", "/admin/v2/tenants/acme") == (
        409, {"reason": "The tenant still has active namespaces"})
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/empty")[0] == 204
    assert call(broker, "DELETE", "/admin/v2/namespaces/acme/empty?force=true") == (
        405, {"reason": "Broker doesn't allow forced deletion of namespaces"})
    assert call(broker, "DELETE", "/admin/v2/namespaces/acme/empty")[0] == 204
    assert call(broker, "GET", "/admin/v2/namespaces/acme/empty")[0] == 404


@pytest.mark.parametrize("topic", ["persistent://nobody/default/t", "persistent://public/missing/t",
                                   "non-persistent://public/missing/t"])
def test_topics_outside_existing_namespaces_are_not_found(broker, client_factory, topic):
    client = client_factory(broker.url, operation_timeout_seconds=5)
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(topic)
    with pytest.raises(pulsar.TopicNotFound):
        client.subscribe(topic, "sub")
    assert not (broker.data_dir / "managed-ledgers").exists() or not any(
        (broker.data_dir / "managed-ledgers").iterdir())


def test_namespaces_survive_a_restart_and_old_topics_keep_theirs(broker, client_factory):
    assert call(broker, "PUT", "/admin/v2/tenants/acme", {})[0] == 204
    assert call(broker, "PUT", "/admin/v2/namespaces/acme/ns")[0] == 204
    client_factory(broker.url).create_producer("persistent://acme/ns/t").send(b"x")
    broker.restart()
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/acme") == ["acme/ns"]
    reader = client_factory(broker.url).create_reader("persistent://acme/ns/t", pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"x"


def test_namespace_ttl_applies_unless_the_topic_sets_its_own(broker_factory, client_factory):
    broker = broker_factory("messageExpiryCheckIntervalInMinutes=0.01")
    assert call(broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", 1) == (204, None)
    assert call(broker, "GET", "/admin/v2/namespaces/public/default/messageTTL") == (200, 1)
    assert call(broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", -5)[0] == 412
    assert get_json(f"{broker.admin_url}/admin/v2/namespaces/public/default")["message_ttl_in_seconds"] == 1
    client = client_factory(broker.url)
    for name in ("expires", "kept"):
        client.subscribe(name, "sub").close()
    base = f"{broker.admin_url}/admin/v2/persistent/public/default"
    assert http("POST", f"{base}/kept/messageTTL?messageTTL=3600")[0] == 204
    for name in ("expires", "kept"):
        client.create_producer(name).send(b"old")
    backlog = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        backlog = {name: get_json(f"{base}/{name}/stats")["subscriptions"]["sub"]["msgBacklog"]
                   for name in ("expires", "kept")}
        if backlog["expires"] == 0:
            break
        time.sleep(0.2)
    assert backlog == {"expires": 0, "kept": 1}


def test_http_lookup_and_an_http_service_url(broker, client_factory):
    answer = get_json(f"{broker.admin_url}/lookup/v2/topic/persistent/public/default/over-http")
    assert answer["brokerUrl"] == broker.url
    assert answer["httpUrl"] == broker.admin_url
    client = client_factory(broker.admin_url)
    consumer = client.subscribe("over-http", "sub")
    client.create_producer("over-http").send(b"looked up over HTTP")
    assert consumer.receive(timeout_millis=10_000).data() == b"looked up over HTTP"
    assert call(broker, "GET", "/lookup/v2/topic/persistent/nobody/ns/t")[0] == 404


def test_brokers_endpoints(broker):
    assert http("GET", f"{broker.admin_url}/admin/v2/brokers/ready")[2] == b"ok"
    assert http("GET", f"{broker.admin_url}/admin/v2/brokers/version")[2].startswith(b"magnetar-")
    runtime = get_json(f"{broker.admin_url}/admin/v2/brokers/configuration/runtime")
    assert runtime["brokerServicePort"] == str(broker.port) and runtime["allowAutoTopicCreation"] == "true"
    assert get_json(f"{broker.admin_url}/admin/v2/brokers/standalone") == [broker.admin_url.removeprefix("http://")]


def test_lookup_over_the_protocol_refuses_missing_namespaces(broker):
    raw = RawClient(broker.url)
    raw.connect()
    raw.command(T(type=T.PARTITIONED_METADATA, partitionMetadata=pb.CommandPartitionedTopicMetadata(
        topic="persistent://public/missing/t", request_id=1)))
    assert raw.expect(T.PARTITIONED_METADATA_RESPONSE).partitionMetadataResponse.error == pb.TopicNotFound
    raw.close()
