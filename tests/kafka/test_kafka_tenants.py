"""Teams sharing a broker over Kafka (KoP's kafkaEnableMultiTenantMetadata): the SASL user name
chooses `tenant/namespace` (or `tenant`, with kafkaNamespace), each namespace with its own
topics, groups and offsets, authorized as every Kafka request is. Team A cannot see or touch
team B's topics and groups, even naming B's namespace as its user name."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator

import jwt
import pytest
from admin_http import admin_call
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka_brokers import RawKafka
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from polling import wait_for
from standalone import Standalone

LISTENER_PORT = "Kafka listener on 127.0.0.1:"
TEAMS = {"alice": "team-a/ns", "bob": "team-b/ns"}


class Tenants:
    def __init__(self, tmp_path_factory) -> None:
        directory = tmp_path_factory.mktemp("kafka-tenants")
        self.key = secrets.token_bytes(32)
        (directory / "secret.key").write_bytes(self.key)
        self.broker = Standalone(directory / "data", [
            "authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
            "superUserRoles=admin", f"tokenSecretKey=file://{directory / 'secret.key'}",
            "messagingProtocols=kafka", "kafkaListeners=SASL_PLAINTEXT://127.0.0.1:0"]).start()
        log = self.broker.log()
        self.bootstrap = "127.0.0.1:" + log.split(LISTENER_PORT, 1)[1].split(" ", 1)[0]
        for role, namespace in TEAMS.items():
            tenant = namespace.split("/")[0]
            self.admin("PUT", f"tenants/{tenant}", {"adminRoles": [], "allowedClusters": ["standalone"]})
            self.admin("PUT", f"namespaces/{namespace}")
            self.admin("PUT", f"namespaces/{tenant}/default")
            self.admin("POST", f"namespaces/{namespace}/permissions/{role}", ["produce", "consume"])

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.key, algorithm="HS256")

    def admin(self, method: str, path: str, body: object = None) -> object:
        return admin_call(self.broker.admin_url, self.token("admin"), method, path, body)

    def config(self, role: str, user: str | None = None) -> dict:
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user or TEAMS[role],
                "sasl.password": f"token:{self.token(role)}"}


@pytest.fixture(scope="module")
def tenants(tmp_path_factory) -> Iterator[Tenants]:
    started = Tenants(tmp_path_factory)
    yield started
    started.broker.stop()


def _produce(config: dict, topic: str, values: list[bytes]) -> list:
    producer = Producer({**config, "linger.ms": 2, "message.timeout.ms": 10_000})
    reports: list = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: reports.append(err or msg.offset()))
    producer.flush(20)
    return reports


def _consume(config: dict, topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[bytes] = []

    def more() -> bool:
        for message in consumer.consume(count, timeout=0.2):
            assert message.error() is None, message.error()
            got.append(message.value())
        return len(got) >= count

    try:
        assert wait_for(more, timeout=30), got
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def test_each_team_has_its_own_topics_groups_and_offsets(tenants) -> None:
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    alice, bob = tenants.config("alice"), tenants.config("bob")
    assert _produce(alice, topic, [b"a1", b"a2", b"a3"]) == [0, 1, 2]
    assert _produce(bob, topic, [b"b1"]) == [0]  # the same name, another topic
    assert _consume(alice, topic, "billing", 3) == [b"a1", b"a2", b"a3"]
    assert _consume(bob, topic, "billing", 1) == [b"b1"]
    for namespace, count in (("team-a/ns", 3), ("team-b/ns", 1)):
        stats = tenants.admin("GET", f"persistent/{namespace}/{topic}-partition-0/stats")
        assert stats["msgInCounter"] == count and stats["subscriptions"]["billing"]["msgBacklog"] == 0
    alice_admin, bob_admin = AdminClient(alice), AdminClient(bob)
    assert topic in alice_admin.list_topics(timeout=10).topics
    alice_groups = alice_admin.list_consumer_groups().result(timeout=30)
    assert "billing" in [g.group_id for g in alice_groups.valid], (alice_groups.valid, alice_groups.errors)
    # at the same time in a group of the same name, each team's member is alone in its own group
    members = {role: _member(tenants, role, topic) for role in TEAMS}
    try:
        for role, admin in (("alice", alice_admin), ("bob", bob_admin)):
            (described,) = admin.describe_consumer_groups(["live"]).values()
            group = described.result(timeout=30)
            assert [m.client_id for m in group.members] == [members[role].config["client_id"]], role
            assert [tp.partition for tp in group.members[0].assignment.topic_partitions] == [0]
    finally:
        for member in members.values():
            member.close()


def _member(tenants: Tenants, role: str, topic: str) -> KafkaConsumer:
    """A kafka-python member of group `live`, polled until it has its assignment."""
    consumer = KafkaConsumer(bootstrap_servers=tenants.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username=TEAMS[role],
                             sasl_plain_password=f"token:{tenants.token(role)}", group_id="live",
                             client_id=f"{role}-{uuid.uuid4().hex[:4]}", auto_offset_reset="earliest")
    consumer.subscribe([topic])
    assert wait_for(lambda: consumer.poll(100) is not None and bool(consumer.assignment()), timeout=30)
    return consumer


def test_a_team_naming_the_other_teams_namespace_is_refused_everything(tenants) -> None:
    topic = f"secret-{uuid.uuid4().hex[:6]}"
    assert _produce(tenants.config("alice"), topic, [b"alice only"]) == [0]
    intruder = tenants.config("bob", user="team-a/ns")  # authenticates; authorized for nothing there
    reports = _produce(intruder, topic, [b"intrusion"])
    assert [r.code() for r in reports] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    intruder_admin = AdminClient(intruder)
    assert topic not in intruder_admin.list_topics(timeout=10).topics
    listed = intruder_admin.list_consumer_groups().result(timeout=30)
    assert (listed.valid, listed.errors) == ([], [])
    consumer = Consumer({**intruder, "group.id": "billing", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        errors: list = []
        assert wait_for(lambda: errors.extend(m.error().code() for m in consumer.consume(5, 0.2) if m.error())
                        or bool(errors), timeout=30)
        assert set(errors) <= {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}
    finally:
        consumer.close()
    # and bob in his own namespace sees nothing of alice's (kafka-python lists the namespace's topics)
    lister = KafkaConsumer(bootstrap_servers=tenants.bootstrap, security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="PLAIN", sasl_plain_username="team-b/ns",
                           sasl_plain_password=f"token:{tenants.token('bob')}")
    try:
        assert topic not in lister.topics()
    finally:
        lister.close()


def _authenticate(tenants: Tenants, user: str, role: str) -> object:
    raw = RawKafka(tenants.bootstrap)
    try:
        raw.call(17, 1, sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"))
        message = b"\0" + user.encode() + b"\0" + f"token:{tenants.token(role)}".encode()
        return raw.call(36, 2, sasl_authenticate.SaslAuthenticateRequest(auth_bytes=message))
    finally:
        raw.close()


def test_a_tenant_alone_names_its_kafka_namespace_and_an_unknown_one_is_refused(tenants) -> None:
    topic = f"t-{uuid.uuid4().hex[:6]}"
    assert _produce(tenants.config("admin", user="team-a"), topic, [b"x"]) == [0]
    assert tenants.admin("GET", f"persistent/team-a/default/{topic}/partitions") == {"partitions": 1}
    refused = _authenticate(tenants, "team-c", "alice")
    assert refused.error_code == 58 and "names namespace team-c/default, which does not exist" in \
        refused.error_message  # type: ignore[attr-defined]
