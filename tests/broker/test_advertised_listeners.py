"""What LOOKUP tells clients to dial: advertisedAddress, advertisedListeners, listener names."""

from __future__ import annotations

import socket

import pulsar
import pytest
from rawclient import RawClient
from standalone import Standalone, run_standalone

from magnetar.broker.transport.advertised_listeners import (
    ListenerConfigError,
    internal_listener_name,
    parse_advertised_listeners,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
Lookup = pb.CommandLookupTopicResponse


def lookup(url: str, listener: str | None = None) -> pb.CommandLookupTopicResponse:
    raw = RawClient(url)
    try:
        raw.connect()
        request = pb.CommandLookupTopic(topic="persistent://public/default/where", request_id=1)
        if listener is not None:
            request.advertised_listener_name = listener
        raw.command(T(type=T.LOOKUP, lookupTopic=request))
        return raw.expect(T.LOOKUP_RESPONSE).lookupTopicResponse
    finally:
        raw.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_wildcard_bind_advertises_the_host_name(broker_factory, client_factory):
    broker = broker_factory("bindAddress=0.0.0.0")
    url = f"pulsar://127.0.0.1:{broker.port}"
    answer = lookup(url)
    assert answer.response == Lookup.Connect
    assert answer.brokerServiceUrl == f"pulsar://{socket.gethostname()}:{broker.port}"
    assert "0.0.0.0" not in answer.brokerServiceUrl
    client = client_factory(url)
    consumer = client.subscribe("wildcard", "sub")
    client.create_producer("wildcard").send(b"reached")
    assert consumer.receive(timeout_millis=10_000).data() == b"reached"


def test_advertised_address_is_what_lookup_answers(broker_factory, client_factory):
    broker = broker_factory("advertisedAddress=localhost")
    assert lookup(broker.url).brokerServiceUrl == f"pulsar://localhost:{broker.port}"
    client = client_factory(broker.url)
    consumer = client.subscribe("advertised", "sub")
    client.create_producer("advertised").send(b"via localhost")
    assert consumer.receive(timeout_millis=10_000).data() == b"via localhost"


def test_listener_names_pick_the_url_and_unknown_names_fail(tmp_path, client_factory):
    port = free_port()
    listeners = (f"advertisedListeners=internal:pulsar://127.0.0.1:{port},"
                 f"external:pulsar://localhost:{port},external:pulsar+ssl://localhost:6651")
    broker = Standalone(tmp_path / "data", [listeners], port=port).start()
    try:
        assert lookup(broker.url).brokerServiceUrl == f"pulsar://127.0.0.1:{port}"
        external = lookup(broker.url, "external")
        assert (external.brokerServiceUrl, external.brokerServiceUrlTls) == (
            f"pulsar://localhost:{port}", "pulsar+ssl://localhost:6651")
        missing = lookup(broker.url, "test")
        assert (missing.response, missing.error) == (Lookup.Failed, pb.ServiceNotReady)
        assert "test" in missing.message

        client = client_factory(broker.url, listener_name="external")
        consumer = client.subscribe("listeners", "sub")
        client.create_producer("listeners").send(b"external")
        assert consumer.receive(timeout_millis=10_000).data() == b"external"
        lost = client_factory(broker.url, listener_name="test", operation_timeout_seconds=3)
        with pytest.raises(pulsar.PulsarException):
            lost.create_producer("listeners")
    finally:
        broker.stop()


@pytest.mark.parametrize(("settings", "named"), [
    (["advertisedListeners=nameless"], "advertisedListeners"),
    (["advertisedListeners=a:http://host:80"], "advertisedListeners"),
    (["advertisedListeners=a:pulsar://host"], "advertisedListeners"),
    (["advertisedListeners=a:pulsar://h:1,a:pulsar://h:2"], "advertisedListeners"),
    (["advertisedListeners=a:pulsar://h:1", "internalListenerName=b"], "internalListenerName"),
])
def test_bad_listener_settings_stop_the_start(tmp_path, settings, named):
    args = [arg for setting in settings for arg in ("-c", setting)]
    result = run_standalone("--data-dir", str(tmp_path), *args)
    assert result.returncode == 2
    assert named in result.stderr


def test_listener_parsing():
    listeners = parse_advertised_listeners(" a:pulsar://h:1 , b:pulsar://g:2,b:pulsar+ssl://g:3 ")
    assert listeners["a"].broker_service_url == "pulsar://h:1"
    assert (listeners["b"].broker_service_url, listeners["b"].broker_service_url_tls) == (
        "pulsar://g:2", "pulsar+ssl://g:3")
    assert internal_listener_name(listeners, "") == "a"
    assert internal_listener_name(listeners, "b") == "b"
    assert internal_listener_name({}, "") is None
    # Pulsar's standalone.conf names an internal listener without declaring any
    assert internal_listener_name({}, "internal") is None
    with pytest.raises(ListenerConfigError):
        internal_listener_name(listeners, "c")
