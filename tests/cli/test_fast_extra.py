"""The [fast] extra (uvloop) end to end: a `magnetar standalone` and magnetar.client on uvloop.

The suite's venv has no uvloop on purpose (installed there, it would switch every test's broker
and client to it), so this module installs it into a directory of its own once and puts that
directory on the PYTHONPATH of the processes it starts: the broker, and a subprocess running
magnetar.client's blocking facade. Then it drives them as users would, through every listener
whose transport code once assumed asyncio's classes (uvloop's transports are not
asyncio.Transport subclasses): the binary protocol with both clients, plain and over TLS with a
client certificate, the admin API over HTTP and HTTPS, the Kafka listener (plaintext, SSL, and
SASL_SSL authenticated by a client certificate).
"""

from __future__ import annotations

import json
import os
import random
import re
import socket
import ssl
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http
from certs import CertificateAuthority
from confluent_kafka import Consumer, Producer
from floods import flood_until_blocked
from kio.schema.api_versions.v3 import request as api_versions
from polling import wait_for
from standalone import Standalone

from magnetar.admin_client import AdminClient, AdminError, FunctionsAdmin
from magnetar.kafka.protocol.messages import encode_request

KAFKA_READY = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+)")
EXCLAMATION = Path(__file__).parents[1] / "functions" / "code" / "exclamation.py"
UVLOOP_REQUIREMENT = "uvloop>=0.21"  # pyproject.toml's [fast] extra


@pytest.fixture(scope="module")
def fast_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a process with the [fast] extra: uvloop importable, ahead of the rest."""
    target = tmp_path_factory.mktemp("uvloop-target")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--target", str(target), UVLOOP_REQUIREMENT], check=True, timeout=300)
    path = os.pathsep.join(p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture(scope="module")
def fast_broker(tmp_path_factory: pytest.TempPathFactory, fast_env: dict[str, str]) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("fast") / "data", args=["--kafka", "0"], env=fast_env).start()
    yield broker
    broker.stop()
    _assert_no_errors_logged(broker)


def _assert_no_errors_logged(broker: Standalone) -> None:
    """Nothing went wrong unseen: what asyncio (or uvloop) logs of a callback or a future nobody
    awaited comes out as an ERROR line of the broker's log."""
    errors = [line for line in broker.log().splitlines() if " ERROR " in line]
    assert not errors, broker.log()


@pytest.fixture(scope="module")
def fast_tls(tmp_path_factory: pytest.TempPathFactory, fast_env: dict[str, str]) -> Iterator[tuple[Standalone, dict]]:
    """A TLS-only broker on uvloop that requires a trusted client certificate, and the client
    settings (both clients' names) that satisfy it."""
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    server, client = ca.issue("broker", "broker", server=True), ca.issue("client", "app")
    config = [f"tlsCertificateFilePath={server.cert}", f"tlsKeyFilePath={server.key}",
              f"tlsTrustCertsFilePath={ca.pem}", "brokerServicePortTls=0", "webServicePortTls=0",
              "brokerServicePort=", "webServicePort=", "tlsRequireTrustedClientCertOnConnect=true",
              "messagingProtocols=kafka", "kafkaListeners=SSL://127.0.0.1:0"]
    broker = Standalone(tmp_path_factory.mktemp("fast-tls") / "data", config, plaintext=False, env=fast_env).start()
    yield broker, {"tls_trust_certs_file_path": str(ca.pem), "tls_certificate_file_path": str(client.cert),
                   "tls_private_key_file_path": str(client.key)}
    broker.stop()


@pytest.fixture(params=["plain", "tls"])
def service(request: pytest.FixtureRequest) -> tuple[str, dict]:
    """A service URL of a broker on uvloop and the client settings it needs."""
    if request.param == "plain":
        return request.getfixturevalue("fast_broker").url, {}
    broker, settings = request.getfixturevalue("fast_tls")
    return broker.tls_url, settings


def _topic() -> str:
    return f"fast-{uuid.uuid4().hex[:10]}"


def test_the_broker_says_it_runs_on_uvloop(fast_broker: Standalone) -> None:
    assert re.search(r"event loop: uvloop \d", fast_broker.log()), fast_broker.log()


def test_the_official_client_produces_and_consumes_with_batching(service: tuple[str, dict], client_factory) -> None:
    url, settings = service
    client = client_factory(url, **settings)
    topic = f"persistent://public/default/{_topic()}"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)  # batching on, the default
    payloads = [random.randbytes(random.randint(0, 2000)) for _ in range(random.randint(100, 400))]
    for payload in payloads:
        producer.send_async(payload, None)
    producer.flush()
    assert _receive(consumer, len(payloads)) == payloads


def _receive(consumer, count: int) -> list[bytes]:
    """`count` payloads in arrival order, each acknowledged."""
    received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10_000)
        received.append(message.data())
        consumer.acknowledge(message)
    return received


def test_a_restart_stops_cleanly_and_clients_carry_on(fast_broker: Standalone, client_factory) -> None:
    """SIGTERM through uvloop's signal handling: the broker closes cleanly, and the official
    client's producer and consumer reconnect to the restarted one with nothing lost."""
    client = client_factory(fast_broker.url)
    topic = f"persistent://public/default/{_topic()}"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic)
    before = [f"before-{i}".encode() for i in range(random.randint(1, 50))]
    for payload in before:
        producer.send(payload)
    assert fast_broker.stop() == 0
    assert "stopped cleanly" in fast_broker.log(), fast_broker.log()
    _assert_no_errors_logged(fast_broker)
    fast_broker.start()
    after = [f"after-{i}".encode() for i in range(random.randint(1, 50))]
    for payload in after:
        producer.send(payload)
    assert _receive(consumer, len(before) + len(after)) == before + after


MAGNETAR_CLIENT = textwrap.dedent("""
    import json, sys
    from magnetar.client import Client, InitialPosition

    url, topic, count, settings = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    client = Client(url, operation_timeout_seconds=10, **settings)
    consumer = client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    producer = client.create_producer(topic)
    sent = [f"m-{i}".encode() * (i % 7) for i in range(count)]
    sent[count // 2] = bytes(range(256)) * 1200  # larger than the client's 256 KiB read buffer
    for payload in sent:
        producer.send_async(payload, None)
    producer.flush()
    received = []
    for _ in sent:
        message = consumer.receive(timeout_millis=10_000)
        received.append(message.data())
        consumer.acknowledge(message)
    loop = type(client._io.loop)
    client.close()
    print(json.dumps({"loop": f"{loop.__module__}.{loop.__name__}", "in_order": received == sent}))
""")


def test_magnetar_client_on_uvloop_produces_and_consumes(service: tuple[str, dict], fast_env: dict[str, str]) -> None:
    url, settings = service
    topic = f"persistent://public/default/{_topic()}"
    done = subprocess.run([sys.executable, "-c", MAGNETAR_CLIENT, url, topic, "300", json.dumps(settings)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, **fast_env}, check=False)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome == {"loop": "uvloop.Loop", "in_order": True}


def _admin(broker: Standalone, method: str, path: str, body: object = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{broker.admin_url}/admin/v2/{path}", data)
    assert status in (200, 204), (method, path, status, answer)
    return json.loads(answer) if answer else None


def test_the_admin_api_answers(fast_broker: Standalone, client_factory) -> None:
    tenant = _topic()
    _admin(fast_broker, "PUT", f"tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone"]})
    _admin(fast_broker, "PUT", f"namespaces/{tenant}/ns")
    _admin(fast_broker, "PUT", f"persistent/{tenant}/ns/t")
    assert _admin(fast_broker, "GET", f"persistent/{tenant}/ns") == [f"persistent://{tenant}/ns/t"]
    producer = client_factory(fast_broker.url).create_producer(f"persistent://{tenant}/ns/t")
    for i in range(5):
        producer.send(f"m{i}".encode())
    stats = _admin(fast_broker, "GET", f"persistent/{tenant}/ns/t/stats")
    assert stats["msgInCounter"] == 5
    assert len(stats["publishers"]) == 1


def test_the_admin_api_answers_over_https_with_a_client_certificate(fast_tls: tuple[Standalone, dict]) -> None:
    broker, settings = fast_tls
    context = ssl.create_default_context(cafile=settings["tls_trust_certs_file_path"])
    context.load_cert_chain(settings["tls_certificate_file_path"], settings["tls_private_key_file_path"])
    status, _, answer = http("GET", f"{broker.admin_tls_url}/admin/v2/tenants", context=context)
    assert (status, json.loads(answer)) == (200, ["public", "pulsar"]), answer


def _kafka_port(broker: Standalone) -> int:
    return int(KAFKA_READY.findall(broker.log())[-1])


@pytest.fixture(params=["PLAINTEXT", "SSL"])
def kafka_service(request: pytest.FixtureRequest) -> dict[str, str]:
    """librdkafka's settings for a Kafka listener of a broker on uvloop."""
    if request.param == "PLAINTEXT":
        return {"bootstrap.servers": f"127.0.0.1:{_kafka_port(request.getfixturevalue('fast_broker'))}"}
    broker, settings = request.getfixturevalue("fast_tls")
    return {"bootstrap.servers": f"127.0.0.1:{_kafka_port(broker)}", "security.protocol": "SSL",
            "ssl.ca.location": settings["tls_trust_certs_file_path"],
            "ssl.certificate.location": settings["tls_certificate_file_path"],
            "ssl.key.location": settings["tls_private_key_file_path"]}


def test_a_kafka_client_produces_and_consumes(kafka_service: dict[str, str]) -> None:
    _produce_and_consume(kafka_service)


def _produce_and_consume(kafka_service: dict[str, str]) -> None:
    topic = _topic()
    records = [(str(i).encode(), random.randbytes(random.randint(0, 500))) for i in range(random.randint(20, 200))]
    producer = Producer({**kafka_service, "linger.ms": 5})
    delivered: list = []
    for key, value in records:
        producer.produce(topic, key=key, value=value,
                         on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert producer.flush(30) == 0
    assert sorted(delivered) == list(range(len(records)))
    consumer = Consumer({**kafka_service, "group.id": "fast", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list = []

    def more() -> bool:
        for message in consumer.consume(len(records) - len(got), timeout=0.2):
            assert message.error() is None, message.error()
            got.append((message.key(), message.value()))
        return len(got) >= len(records)

    try:
        assert wait_for(more, timeout=30), f"{len(got)} of {len(records)} records"
    finally:
        consumer.close()
    assert got == records


@pytest.fixture(scope="module")
def fast_sasl(tmp_path_factory: pytest.TempPathFactory, fast_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """A broker on uvloop with authentication and a SASL_SSL Kafka listener that asks for client
    certificates, and librdkafka's settings with one: its `tls` method reads the certificate from
    the connection's `ssl_object`, the one Kafka path that reads the transport's TLS state."""
    directory = tmp_path_factory.mktemp("fast-sasl")
    ca = CertificateAuthority(directory)
    server, client = ca.issue("broker", "127.0.0.1", server=True), ca.issue("client", "app")
    (directory / "secret.key").write_bytes(os.urandom(32))
    broker = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=tls,token", "superUserRoles=app",
        f"tokenSecretKey=file://{directory / 'secret.key'}", f"tlsTrustCertsFilePath={ca.pem}",
        f"tlsCertificateFilePath={server.cert}", f"tlsKeyFilePath={server.key}", "brokerServicePortTls=0",
        "messagingProtocols=kafka", "kafkaListeners=SASL_SSL://127.0.0.1:0"], env=fast_env).start()
    yield {"bootstrap.servers": f"127.0.0.1:{_kafka_port(broker)}", "security.protocol": "SASL_SSL",
           "ssl.ca.location": str(ca.pem), "ssl.certificate.location": str(client.cert),
           "ssl.key.location": str(client.key), "sasl.mechanism": "PLAIN", "sasl.username": "public/default",
           "sasl.password": "tls:certificate"}  # the tls method reads the certificate, not these bytes
    broker.stop()
    assert "authenticated as role 'app' (tls)" in broker.log()
    _assert_no_errors_logged(broker)


def test_a_kafka_client_authenticates_with_its_certificate_over_sasl_ssl(fast_sasl: dict[str, str]) -> None:
    _produce_and_consume(fast_sasl)


def test_a_function_runs_and_answers_a_trigger(fast_broker: Standalone, client_factory) -> None:
    """The functions worker spawns its instances through the loop's subprocess support (uvloop's
    own, not asyncio's child watchers) and a trigger uses magnetar.client's core on the
    broker's loop. Three instances: each deletion of one once had an even chance to log an
    unretrieved CancelledError on uvloop."""
    admin = AdminClient(fast_broker.admin_url)
    functions = FunctionsAdmin(admin)
    name, source, sink = _topic(), _topic(), _topic()
    functions.create({"tenant": "public", "namespace": "default", "name": name, "inputs": [source], "output": sink,
                      "className": "exclamation.ExclamationFunction", "parallelism": 3}, EXCLAMATION)
    subscription = f"public/default/{name}"

    def subscribed() -> bool:
        try:
            return len(admin.stats(source)["subscriptions"].get(subscription, {}).get("consumers", [])) == 3
        except AdminError:  # the instance has not created its input yet
            return False

    assert wait_for(subscribed, timeout=30), functions.status("public", "default", name)
    client = client_factory(fast_broker.url)
    consumer = client.subscribe(sink, "check")
    client.create_producer(source).send(b"hello")
    assert consumer.receive(timeout_millis=20_000).data() == b"hello!"
    assert functions.trigger("public", "default", name, b"again") == "again!"
    functions.delete("public", "default", name)
    _assert_no_errors_logged(fast_broker)


def test_a_kafka_client_that_never_reads_its_answers_is_not_read_either(fast_broker: Standalone) -> None:
    """uvloop's pause_reading and write-buffer limits hold back an attacker: pipelined
    ApiVersions whose answers are never read stop being read, so the sender blocks long before
    64 MB, and the broker still answers others."""
    thousand = encode_request(18, 3, 1, "attacker", api_versions.ApiVersionsRequest(
        client_software_name="a", client_software_version="1")) * 1000
    with socket.create_connection(("127.0.0.1", _kafka_port(fast_broker))) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(3)
        sent, blocked = flood_until_blocked(sock, thousand, 64 * 1024 * 1024)
        assert blocked, f"the broker read {sent // 1024 // 1024} MB of requests from a client that reads no answer"
        assert http("GET", f"{fast_broker.admin_url}/admin/v2/clusters")[0] == 200
