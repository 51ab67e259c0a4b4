"""With authorization on, what a topic in a tenant or namespace that does not exist answers.

Pulsar checks a role (other than a super user) as an admin of the topic's tenant before
anything else, and a missing tenant answers TopicNotFound to every role: the official
Python client's suite (`asyncio_test.py::test_create_producer_failure`) runs against a
standalone with authorization on and expects TopicNotFound for `tenant/ns/...`. In an
existing tenant a role without rights is refused alike whether the namespace exists, so
it learns nothing of the tenant's namespaces; roles with rights there are told the truth.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import pulsar
import pulsar.asyncio
import pytest
from security_helpers import TokenSigner, admin_json, make_client
from standalone import Standalone

TENANT_ADMIN, GRANTED, STRANGER, SUPER = "boss", "writer", "mallory", "admin"


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("missing") / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", signer.setting,
        "anonymousUserRole=anonymous", "authorizationEnabled=true", f"superUserRoles={SUPER}"]).start()
    headers = signer.bearer(SUPER)
    url = f"{broker.admin_url}/admin/v2"
    assert admin_json("PUT", f"{url}/tenants/acme", headers,
                      {"adminRoles": [TENANT_ADMIN], "allowedClusters": ["standalone"]})[0] == 204
    assert admin_json("PUT", f"{url}/namespaces/acme/orders", headers)[0] == 204
    assert admin_json("POST", f"{url}/namespaces/acme/orders/permissions/{GRANTED}", headers,
                      ["produce", "consume"])[0] == 204
    yield broker
    broker.stop()


def client_as(broker: Standalone, signer: TokenSigner, role: str | None) -> pulsar.Client:
    auth = {"authentication": pulsar.AuthenticationToken(signer.token(role))} if role else {}
    return make_client(broker.url, **auth)


#: (role, topic) -> what creating a producer or a consumer answers. None is the anonymous role.
CASES = [
    *((role, "persistent://ghost/ns/t", pulsar.TopicNotFound) for role in (None, STRANGER, GRANTED, TENANT_ADMIN,
                                                                          SUPER)),
    (SUPER, "persistent://acme/missing/t", pulsar.TopicNotFound),
    (TENANT_ADMIN, "persistent://acme/missing/t", pulsar.TopicNotFound),
    # the role may not look inside acme: a missing namespace reads as an existing one it has no rights in
    (STRANGER, "persistent://acme/missing/t", pulsar.AuthorizationError),
    (STRANGER, "persistent://acme/orders/t", pulsar.AuthorizationError),
    (None, "persistent://acme/missing/t", pulsar.AuthorizationError),
    (None, "persistent://acme/orders/t", pulsar.AuthorizationError),
    (GRANTED, "persistent://acme/missing/t", pulsar.AuthorizationError),  # its grant is on acme/orders only
]


@pytest.mark.parametrize(("role", "topic", "error"), CASES)
def test_producers_and_consumers_on_missing_tenants_and_namespaces(broker, signer, role, topic, error):
    client = client_as(broker, signer, role)
    try:
        with pytest.raises(error):
            client.create_producer(topic)
        with pytest.raises(error):
            client.subscribe(topic, f"sub-{random.randrange(1 << 30)}")
    finally:
        client.close()


def test_the_official_suites_create_producer_failure(broker):
    """asyncio_test.py::test_create_producer_failure as the suite writes it: anonymous, asyncio."""

    async def create() -> None:
        client = pulsar.asyncio.Client(broker.url, operation_timeout_seconds=5)
        try:
            with pytest.raises(pulsar.asyncio.PulsarException) as caught:
                await client.create_producer("tenant/ns/asyncio-test-send-failure")
            assert caught.value.error() == pulsar.Result.TopicNotFound
        finally:
            await client.close()

    asyncio.run(create())


def test_roles_with_rights_still_work_and_nothing_was_created(broker, signer):
    client = client_as(broker, signer, GRANTED)
    try:
        consumer = client.subscribe("persistent://acme/orders/t", "sub")
        client.create_producer("persistent://acme/orders/t").send(b"x")
        assert consumer.receive(5000).data() == b"x"
    finally:
        client.close()
    status, tenants = admin_json("GET", f"{broker.admin_url}/admin/v2/tenants", signer.bearer(SUPER))
    assert status == 200 and "ghost" not in tenants and "tenant" not in tenants  # type: ignore[operator]
    status, namespaces = admin_json("GET", f"{broker.admin_url}/admin/v2/namespaces/acme", signer.bearer(SUPER))
    assert status == 200 and namespaces == ["acme/orders"]


@pytest.mark.parametrize(("role", "tenant", "status"), [
    (STRANGER, "ghost", 404), (TENANT_ADMIN, "ghost", 404), (STRANGER, "acme", 403)])
def test_the_admin_api_answers_alike(broker, signer, role, tenant, status):
    url = f"{broker.admin_url}/admin/v2/persistent/{tenant}/missing/t/stats"
    answer, body = admin_json("GET", url, signer.bearer(role))
    assert answer == status, body
    assert "reason" in body  # type: ignore[operator]
