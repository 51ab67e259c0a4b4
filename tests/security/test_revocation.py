"""A revoked permission takes effect on open producers and consumers (issue 28, 2).

Once `app`'s producer kept sending and its consumer kept receiving for as long as they
stayed connected after `DELETE .../permissions/app`. Now the change itself closes the
handles whose role lost the right (before the admin request answers), the official
client's attempts to come back are refused, and handles that kept their right are left
alone: namespace grants, topic grants and tenant admins alike."""

from __future__ import annotations

from collections.abc import Iterator

import pulsar
import pytest
from polling import wait_for
from security_helpers import AUTHZ_SETTINGS, admin_json, build_scene, client_as
from standalone import Standalone

EARLIEST = pulsar.InitialPosition.Earliest


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("revocation") / "data", [*AUTHZ_SETTINGS, signer.setting]).start()
    build_scene(broker.admin_url, signer)
    yield broker
    broker.stop()


def admin(broker: Standalone, signer, method: str, path: str, body: object = None) -> object:
    status, answer = admin_json(method, f"{broker.admin_url}/admin/v2/{path}", signer.bearer("admin"), body)
    assert status in (200, 204), (method, path, status, answer)
    return answer


def handles(broker: Standalone, signer, topic: str) -> tuple[int, int]:
    """(producers, consumers) the broker holds on `topic`."""
    stats = admin(broker, signer, "GET", f"persistent/t1/ns/{topic}/stats")
    return len(stats["publishers"]), sum(len(s["consumers"]) for s in stats["subscriptions"].values())  # type: ignore[index]


def send_fails(producer: pulsar.Producer) -> bool:
    try:
        producer.send(b"after the revocation")
    except pulsar.PulsarException:
        return True
    return False


def publish_as_admin(broker: Standalone, signer, topic: str, payload: bytes) -> None:
    client = client_as(broker.url, signer, "admin")
    try:
        client.create_producer(f"persistent://t1/ns/{topic}").send(payload)
    finally:
        client.close()


def open_handles(broker: Standalone, signer, role: str, topic: str) -> tuple[pulsar.Client, pulsar.Producer,
                                                                           pulsar.Consumer]:
    """A producer and a consumer of `role` on `topic`, shown to work."""
    client = client_as(broker.url, signer, role, operation_timeout_seconds=5)
    full = f"persistent://t1/ns/{topic}"
    consumer = client.subscribe(full, f"{role}-sub", initial_position=EARLIEST)
    producer = client.create_producer(full, send_timeout_millis=2000, batching_enabled=False)
    producer.send(b"before")
    before = consumer.receive(10_000)
    assert before.data() == b"before"
    consumer.acknowledge(before)  # else a reconnection of the consumer would deliver it again
    assert handles(broker, signer, topic) == (1, 1)
    return client, producer, consumer


def assert_cut_off(broker: Standalone, signer, topic: str, producer: pulsar.Producer,
                   consumer: pulsar.Consumer) -> None:
    assert handles(broker, signer, topic) == (0, 0)  # closed before the admin request answered
    assert wait_for(lambda: send_fails(producer), timeout=15)
    publish_as_admin(broker, signer, topic, b"not for you")
    with pytest.raises(pulsar.Timeout):
        consumer.receive(1500)
    assert handles(broker, signer, topic) == (0, 0)  # and they could not come back


def test_revoking_a_namespace_permission_closes_open_handles(broker, signer):
    client, producer, consumer = open_handles(broker, signer, "app", "revoked")
    try:
        admin(broker, signer, "DELETE", "namespaces/t1/ns/permissions/app")
        assert_cut_off(broker, signer, "revoked", producer, consumer)
        assert "closing the producer of role 'app' on topic persistent://t1/ns/revoked" in broker.log()
    finally:
        client.close()
        admin(broker, signer, "POST", "namespaces/t1/ns/permissions/app", ["produce", "consume"])


def test_narrowing_a_grant_closes_only_what_it_no_longer_allows(broker, signer):
    client, producer, consumer = open_handles(broker, signer, "app", "narrowed")
    try:
        admin(broker, signer, "POST", "namespaces/t1/ns/permissions/app", ["consume"])
        assert handles(broker, signer, "narrowed") == (0, 1)
        assert wait_for(lambda: send_fails(producer), timeout=15)
        publish_as_admin(broker, signer, "narrowed", b"still yours")
        assert consumer.receive(10_000).data() == b"still yours"
    finally:
        client.close()
        admin(broker, signer, "POST", "namespaces/t1/ns/permissions/app", ["produce", "consume"])


def test_revoking_a_topic_permission_closes_its_handles(broker, signer):
    admin(broker, signer, "POST", "persistent/t1/ns/granted-alone/permissions/solo", ["produce", "consume"])
    assert admin(broker, signer, "GET", "persistent/t1/ns/granted-alone/permissions")["solo"] == [  # type: ignore[index]
        "consume", "produce"]
    client, producer, consumer = open_handles(broker, signer, "solo", "granted-alone")
    try:
        with pytest.raises(pulsar.AuthorizationError):  # the grant is the topic's alone
            client.create_producer("persistent://t1/ns/elsewhere")
        admin(broker, signer, "DELETE", "persistent/t1/ns/granted-alone/permissions/solo")
        assert_cut_off(broker, signer, "granted-alone", producer, consumer)
    finally:
        client.close()
    status, body = admin_json("DELETE", f"{broker.admin_url}/admin/v2/persistent/t1/ns/granted-alone/permissions/app",
                              signer.bearer("admin"))
    assert status == 412, body  # app's grant is the namespace's, not the topic's (Pulsar's answer)


def test_removing_a_tenant_admin_closes_its_handles(broker, signer):
    """t1-admin holds no grant: its right to produce and consume was being the tenant's admin."""
    client, producer, consumer = open_handles(broker, signer, "t1-admin", "admins-own")
    try:
        admin(broker, signer, "POST", "tenants/t1", {"adminRoles": [], "allowedClusters": ["standalone"]})
        assert_cut_off(broker, signer, "admins-own", producer, consumer)
    finally:
        client.close()
        admin(broker, signer, "POST", "tenants/t1", {"adminRoles": ["t1-admin"], "allowedClusters": ["standalone"]})


def test_unrelated_changes_close_nothing(broker, signer):
    client, producer, consumer = open_handles(broker, signer, "app", "untouched")
    try:
        admin(broker, signer, "POST", "namespaces/t1/ns/permissions/someone-else", ["produce"])
        admin(broker, signer, "POST", "namespaces/t1/ns/messageTTL", 3600)
        assert handles(broker, signer, "untouched") == (1, 1)
        producer.send(b"still here")
        assert consumer.receive(10_000).data() == b"still here"
    finally:
        client.close()
