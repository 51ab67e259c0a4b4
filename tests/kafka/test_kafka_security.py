"""Kafka listeners with security, as KoP maps it: SASL/PLAIN with the namespace as user name and
`token:<jwt>` as password, checked by the broker's token provider; each request authorized as the
token's role by Pulsar's permissions; SSL with the broker's certificates. Real clients: librdkafka
(confluent-kafka) and kafka-python; the raw codec for what they never send."""

from __future__ import annotations

import datetime
import re
import secrets
import time
import uuid
from collections.abc import Iterator

import jwt
import pytest
from admin_http import admin_call
from certs import CertificateAuthority
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka_brokers import RawKafka
from kio.schema.fetch.v12 import request as fetch
from kio.schema.metadata.v12 import request as metadata
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from passlib.apache import HtpasswdFile
from passlib.hash import bcrypt
from polling import wait_for
from standalone import Standalone

from magnetar.kafka.protocol.messages import encode_request

NAMESPACE = "kt/ns"
GRANTS = {"app": ["produce", "consume"], "ingest": ["produce"], "reader": ["consume"]}
LISTENER = re.compile(r"Kafka listener on 127\.0\.0\.1:(\d+) \((\w+)\)")
SASL_FAILED, ILLEGAL_SASL_STATE, TOPIC_DENIED = 58, 34, 29


class SecureKafka:
    """A broker with token authentication and authorization, SASL_PLAINTEXT and SASL_SSL listeners."""

    def __init__(self, tmp_path_factory) -> None:
        directory = tmp_path_factory.mktemp("kafka-security")
        self.key = secrets.token_bytes(32)
        (directory / "secret.key").write_bytes(self.key)
        self.ca = CertificateAuthority(directory)
        htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
        htpasswd.set_hash("carol", bcrypt.using(rounds=5).hash("carol-pw"))  # checked on a worker thread
        htpasswd.save()
        server = self.ca.issue("broker", "127.0.0.1", server=True)
        self.broker = Standalone(directory / "data", [
            "authenticationEnabled=true", "authenticationProviders=token,basic", "authorizationEnabled=true",
            f"basicAuthConf={directory / 'htpasswd'}", "anonymousUserRole=anonymous",  # never a SASL role
            "superUserRoles=admin", f"tokenSecretKey=file://{directory / 'secret.key'}",
            "messagingProtocols=kafka", "kafkaListeners=SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "kafkaTenant=kt", "kafkaNamespace=ns", f"tlsCertificateFilePath={server.cert}",
            f"tlsKeyFilePath={server.key}"]).start()
        self.ports = {scheme: int(port) for port, scheme in LISTENER.findall(self.broker.log())}
        self.admin("PUT", "tenants/kt", {"adminRoles": ["kt-admin"], "allowedClusters": ["standalone"]})
        self.admin("PUT", f"namespaces/{NAMESPACE}")
        for role, actions in GRANTS.items():
            self.grant(role, actions)

    def token(self, role: str, expires_in: float | None = None) -> str:
        claims: dict[str, object] = {"sub": role}
        if expires_in is not None:
            claims["exp"] = int(time.time() + expires_in)
        return jwt.encode(claims, self.key, algorithm="HS256")

    def admin(self, method: str, path: str, body: object = None) -> object:
        return admin_call(self.broker.admin_url, self.token("admin"), method, path, body)

    def grant(self, role: str, actions: list[str]) -> None:
        self.admin("POST", f"namespaces/{NAMESPACE}/permissions/{role}", actions)

    def librdkafka(self, role: str, *, scheme: str = "SASL_PLAINTEXT", password: str | None = None) -> dict:
        """librdkafka's settings for `role` (or a password of the caller's) on the listener `scheme`."""
        config = {"bootstrap.servers": f"127.0.0.1:{self.ports[scheme]}", "security.protocol": scheme,
                  "sasl.mechanism": "PLAIN", "sasl.username": NAMESPACE,
                  "sasl.password": password or f"token:{self.token(role)}"}
        if scheme == "SASL_SSL":
            config["ssl.ca.location"] = str(self.ca.pem)
        return config


@pytest.fixture(scope="module")
def secure(tmp_path_factory) -> Iterator[SecureKafka]:
    secure = SecureKafka(tmp_path_factory)
    yield secure
    secure.broker.stop()


def _topic() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


def produce(config: dict, topic: str, count: int) -> list:
    """Delivery reports (offsets or errors) of `count` records."""
    producer = Producer({**config, "linger.ms": 5, "message.timeout.ms": 10_000})
    reports: list = []
    for i in range(count):
        producer.produce(topic, key=f"k{i % 7}".encode(), value=f"v{i}".encode(),
                         on_delivery=lambda err, msg: reports.append(err or msg.offset()))
    producer.flush(20)
    return reports


def group_consume(config: dict, topic: str, count: int, group: str) -> list[bytes]:
    """Values read by a consumer group, committed before it leaves."""
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values: list[bytes] = []

    def more() -> bool:
        for message in consumer.consume(count - len(values), timeout=0.2):
            assert message.error() is None, message.error()
            values.append(message.value())
        return len(values) >= count

    try:
        assert wait_for(more, timeout=30), f"{len(values)} of {count}"
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("scheme", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_good_token_produces_and_a_group_consumes_and_commits(secure, scheme) -> None:
    topic, count = _topic(), 120
    reports = produce(secure.librdkafka("app", scheme=scheme), topic, count)
    assert sorted(reports) == list(range(count))
    values = group_consume(secure.librdkafka("reader", scheme=scheme), topic, count, "billing")
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(count))
    assert "authenticated as role 'reader' (token)" in secure.broker.log()


def test_kafka_python_authenticates_with_sasl_plain(secure) -> None:
    topic = _topic()
    common = {"bootstrap_servers": f"127.0.0.1:{secure.ports['SASL_PLAINTEXT']}", "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": NAMESPACE}
    producer = KafkaProducer(**common, sasl_plain_password=f"token:{secure.token('app')}")
    try:
        offsets = [producer.send(topic, f"kp{i}".encode()).get(timeout=20).offset for i in range(5)]
    finally:
        producer.close()
    assert offsets == list(range(5))
    consumer = KafkaConsumer(topic, **common, sasl_plain_password=f"token:{secure.token('reader')}",
                             group_id="kp-group", auto_offset_reset="earliest", consumer_timeout_ms=20_000)
    try:
        got = [next(consumer).value for _ in range(5)]
        consumer.commit()
    finally:
        consumer.close()
    assert got == [f"kp{i}".encode() for i in range(5)]


def authenticate(secure: SecureKafka, user: str, password: str) -> tuple[RawKafka, object]:
    """A raw SASL_PLAINTEXT connection after SaslHandshake and SaslAuthenticate, and the latter's answer."""
    raw = RawKafka(f"127.0.0.1:{secure.ports['SASL_PLAINTEXT']}")
    handshake = raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
    assert handshake.error_code == 0 and handshake.mechanisms == ("PLAIN",)  # type: ignore[attr-defined]
    message = b"\0" + user.encode() + b"\0" + password.encode()
    return raw, raw.call(36, 2, sasl_authenticate.SaslAuthenticateRequest(auth_bytes=message))


@pytest.mark.parametrize(("user", "password", "reason"), [
    (NAMESPACE, "token:not-a-jwt", "invalid token"),
    (NAMESPACE, "expired", "the password must be <method>:<credentials>"),
    ("other/ns", "good", "names namespace other/ns, which does not exist"),
    ("kt/ns/extra", "good", "is not a tenant or tenant/namespace"),
    ("kt/", "good", "is not a tenant or tenant/namespace"),
    (NAMESPACE, "tls:whatever", "no authentication provider for method 'tls'"),
    (NAMESPACE, "basic:carol:wrong", "unknown user 'carol' or wrong password"),
    (NAMESPACE, "forged", "its signature does not verify"),
    (NAMESPACE, "old", "the token has expired"),
])
def test_bad_credentials_get_sasl_authentication_failed_and_the_connection_closes(secure, user, password,
                                                                                   reason) -> None:
    password = {"good": f"token:{secure.token('app')}", "old": f"token:{secure.token('app', expires_in=-60)}",
                "forged": "token:" + jwt.encode({"sub": "admin"}, b"x" * 32, algorithm="HS256")}.get(password, password)
    raw, answer = authenticate(secure, user, password)
    try:
        assert answer.error_code == SASL_FAILED, answer  # type: ignore[attr-defined]
        assert reason in answer.error_message  # type: ignore[attr-defined]
        assert raw.receive_frame() is None  # closed after the answer
    finally:
        raw.close()


def test_any_configured_provider_can_be_named_in_the_password(secure) -> None:
    raw, answer = authenticate(secure, "kt", "basic:carol:carol-pw")  # the tenant alone names it too
    raw.close()
    assert answer.error_code == 0, answer  # type: ignore[attr-defined]
    assert "authenticated as role 'carol' (basic)" in secure.broker.log()


def test_librdkafka_reports_a_refused_token(secure) -> None:
    errors: list = []
    producer = Producer({**secure.librdkafka("app", password=f"token:{secure.token('app', expires_in=-60)}"),
                         "error_cb": errors.append})
    assert wait_for(lambda: producer.poll(0.1) is not None and any(
        e.code() == KafkaError._AUTHENTICATION for e in errors), timeout=20), errors
    assert "the token has expired" in str(errors)


def test_nothing_but_api_versions_is_read_before_authentication(secure) -> None:
    raw = RawKafka(f"127.0.0.1:{secure.ports['SASL_PLAINTEXT']}")
    try:
        raw.send_raw(encode_metadata())
        assert raw.receive_frame() is None  # Kafka's IllegalSaslState: the connection is closed
    finally:
        raw.close()
    raw, answer = authenticate(secure, NAMESPACE, f"token:{secure.token('app')}")
    try:
        assert answer.error_code == 0  # type: ignore[attr-defined]
        again = raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
        assert again.error_code == ILLEGAL_SASL_STATE  # type: ignore[attr-defined]
    finally:
        raw.close()


def encode_metadata() -> bytes:
    return encode_request(3, 12, 1, "raw", metadata.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def test_roles_get_only_what_their_permissions_grant(secure) -> None:
    topic = _topic()
    assert sorted(produce(secure.librdkafka("app"), topic, 10)) == list(range(10))
    for role in ("reader", "nobody"):  # consume only, and no grant at all
        reports = produce(secure.librdkafka(role), topic, 3)
        assert [r.code() for r in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED] * 3, (role, reports)
    consumer = Consumer({**secure.librdkafka("ingest"), "group.id": "not-yours", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        errors: list = []
        assert wait_for(lambda: bool(errors.extend(
            m.error().code() for m in consumer.consume(10, timeout=0.2) if m.error() is not None) or errors),
            timeout=20)
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in errors, errors
    finally:
        consumer.close()


def test_fetch_and_topic_listing_follow_consume(secure) -> None:
    topic = _topic()
    produce(secure.librdkafka("app"), topic, 5)
    raw, _ = authenticate(secure, NAMESPACE, f"token:{secure.token('ingest')}")
    try:
        answer = raw.call(1, 12, fetch.FetchRequest(
            replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            session_id=0, session_epoch=-1, topics=(fetch.FetchTopic(topic=topic, partitions=(fetch.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)),), forgotten_topics_data=(), rack_id=""))
        assert answer.responses[0].partitions[0].error_code == TOPIC_DENIED  # type: ignore[attr-defined]
    finally:
        raw.close()
    ingest = AdminClient(secure.librdkafka("ingest")).list_topics(timeout=10).topics
    reader = AdminClient(secure.librdkafka("reader")).list_topics(timeout=10).topics
    assert topic not in ingest and topic in reader  # listing a namespace needs consume, as in Pulsar


def test_creating_and_deleting_topics_needs_a_tenant_admin(secure) -> None:
    topic = _topic()
    app, admin = AdminClient(secure.librdkafka("app")), AdminClient(secure.librdkafka("kt-admin"))
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        app.create_topics([NewTopic(topic, 2)])[topic].result(10)
    admin.create_topics([NewTopic(topic, 2)])[topic].result(10)
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        app.delete_topics([topic])[topic].result(10)
    admin.delete_topics([topic])[topic].result(10)


def test_revoking_a_permission_refuses_the_connections_next_request(secure) -> None:
    topic = _topic()
    producer = Producer({**secure.librdkafka("app"), "linger.ms": 0, "message.timeout.ms": 10_000})
    reports: list = []

    def send() -> object:
        reports.clear()
        producer.produce(topic, b"x", on_delivery=lambda err, msg: reports.append(err or msg.offset()))
        producer.flush(15)
        return reports[0]

    try:
        assert send() == 0
        secure.admin("DELETE", f"namespaces/{NAMESPACE}/permissions/app")
        refused = send()
        assert isinstance(refused, KafkaError) and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, refused
    finally:
        secure.grant("app", GRANTS["app"])
        producer.flush(5)


def test_an_ssl_listener_serves_with_the_brokers_certificate(tmp_path) -> None:
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("broker", "127.0.0.1", server=True)
    broker = Standalone(tmp_path / "data", ["messagingProtocols=kafka", "kafkaListeners=SSL://127.0.0.1:0",
                                            f"tlsCertificateFilePath={server.cert}",
                                            f"tlsKeyFilePath={server.key}"]).start()
    try:
        (port, scheme), = LISTENER.findall(broker.log())
        assert scheme == "SSL"
        config = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                  "ssl.ca.location": str(ca.pem)}
        topic = _topic()
        assert sorted(produce(config, topic, 20)) == list(range(20))
        assert len(group_consume(config, topic, 20, "tls-group")) == 20
    finally:
        broker.stop()


def test_a_connection_whose_token_expired_is_closed_at_its_next_request(secure) -> None:
    raw, answer = authenticate(secure, NAMESPACE, f"token:{secure.token('app', expires_in=2)}")
    try:
        assert answer.error_code == 0  # type: ignore[attr-defined]

        def closed() -> bool:
            raw.send_raw(encode_metadata())
            return raw.receive_frame() is None

        assert wait_for(closed, timeout=15)
        assert "the credentials of role 'app' expired" in secure.broker.log()
    finally:
        raw.close()
