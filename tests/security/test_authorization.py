"""Authorization with the official client and the admin API: super users, tenant
admins, namespace permissions granted and revoked over REST and the CLI, refusals that
name the role and the action and create nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator

import pulsar
import pytest
from admin_http import http
from security_helpers import TokenSigner, admin_json, assert_producer_refused, make_client, round_trip
from standalone import Standalone

import magnetar.client as magnetar_client


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    broker = Standalone(tmp_path_factory.mktemp("authz") / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", signer.setting,
        "anonymousUserRole=anonymous", "authorizationEnabled=true", "superUserRoles=admin"]).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
def admin_headers(signer) -> dict[str, str]:
    return signer.bearer("admin")


def client_as(broker: Standalone, signer: TokenSigner, role: str | None) -> pulsar.Client:
    auth = {"authentication": pulsar.AuthenticationToken(signer.token(role))} if role else {}
    return make_client(broker.url, **auth)


def cli_admin(broker: Standalone, signer: TokenSigner, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url,
         "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationToken",
         "--auth-params", f"token:{signer.token('admin')}", *args],
        capture_output=True, text=True, timeout=60, check=False)


def create_namespace(broker: Standalone, headers: dict[str, str], namespace: str) -> None:
    status, body = admin_json("PUT", f"{broker.admin_url}/admin/v2/namespaces/{namespace}", headers)
    assert status == 204, body


def topics_of(broker: Standalone, headers: dict[str, str], namespace: str) -> list[str]:
    status, body = admin_json("GET", f"{broker.admin_url}/admin/v2/persistent/{namespace}", headers)
    assert status == 200, body
    return body  # type: ignore[return-value]


def test_an_unknown_role_is_refused_and_nothing_is_created(broker, signer, admin_headers):
    create_namespace(broker, admin_headers, "public/locked")
    topic = "persistent://public/locked/secret"
    client = client_as(broker, signer, "mallory")
    try:
        with pytest.raises(pulsar.AuthorizationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe(topic, "sub")
        with pytest.raises(pulsar.PulsarException):  # listing the namespace's topics
            client.subscribe(re.compile("persistent://public/locked/.*"), "sub")
    finally:
        client.close()
    assert f"role 'mallory' is not authorized to lookup on topic {topic}" in broker.log()
    assert broker.log().count("role 'mallory' is not authorized to get topics in namespace public/locked "
                              "(it needs consume)") == 1
    assert topics_of(broker, admin_headers, "public/locked") == []


def test_anonymous_is_served_where_anonymous_was_granted_over_the_cli(broker, signer, admin_headers):
    create_namespace(broker, admin_headers, "public/open")
    granted = cli_admin(broker, signer, "namespaces", "grant-permission", "public/open", "--role", "anonymous",
                        "--actions", "produce,consume")
    assert granted.returncode == 0, granted.stderr
    shown = cli_admin(broker, signer, "--json", "namespaces", "permissions", "public/open")
    assert json.loads(shown.stdout) == {"anonymous": ["consume", "produce"]}
    assert round_trip(client_as(broker, signer, None), "persistent://public/open/t") == b"secured"
    assert_producer_refused(client_as(broker, signer, None), "persistent://public/locked/elsewhere",  # not elsewhere
                            pulsar.AuthorizationError)
    revoked = cli_admin(broker, signer, "namespaces", "revoke-permission", "public/open", "--role", "anonymous")
    assert revoked.returncode == 0, revoked.stderr
    assert_producer_refused(client_as(broker, signer, None), "persistent://public/open/t", pulsar.AuthorizationError)


def test_a_produce_grant_does_not_allow_consuming(broker, signer, admin_headers):
    create_namespace(broker, admin_headers, "public/drop")
    url = f"{broker.admin_url}/admin/v2/namespaces/public/drop/permissions/writer"
    assert admin_json("POST", url, admin_headers, ["produce"])[0] == 204
    client = client_as(broker, signer, "writer")
    try:
        client.create_producer("persistent://public/drop/in").send(b"x")
        with pytest.raises(pulsar.AuthorizationError):
            client.subscribe("persistent://public/drop/in", "sub")
    finally:
        client.close()
    refusal = "role 'writer' is not authorized to subscribe on topic persistent://public/drop/in"
    assert broker.log().count(refusal) == 1  # logged once, by the command's error path


def test_tenant_admins_manage_their_tenant_only(broker, signer, admin_headers):
    tenant = f"{broker.admin_url}/admin/v2/tenants/acme"
    assert admin_json("PUT", tenant, admin_headers, {"adminRoles": ["boss"], "allowedClusters": ["standalone"]})[0] \
        == 204
    boss = signer.bearer("boss")
    create_namespace(broker, boss, "acme/orders")
    assert round_trip(client_as(broker, signer, "boss"), "persistent://acme/orders/o") == b"secured"
    assert http("GET", f"{broker.admin_url}/admin/v2/namespaces/acme", headers=boss)[0] == 200
    # Pulsar's TenantOperation.GET_TENANT and the broker's health are for super users
    for method, path in (("GET", "/admin/v2/tenants"), ("PUT", "/admin/v2/namespaces/public/boss-was-here"),
                         ("DELETE", "/admin/v2/tenants/acme"), ("GET", "/admin/v2/tenants/acme"),
                         ("GET", "/admin/v2/brokers/health")):
        status, body = admin_json(method, broker.admin_url + path, boss)
        assert status == 403, (method, path, status, body)
        assert "'boss'" in body["reason"]  # type: ignore[index]


def test_admin_endpoints_refuse_anonymous(broker, admin_headers):
    create_namespace(broker, admin_headers, "public/admin-only")
    for method, path in (("GET", "/admin/v2/tenants"), ("GET", "/admin/v2/namespaces/public/admin-only"),
                         ("DELETE", "/admin/v2/persistent/public/admin-only/t"),
                         ("GET", "/admin/v2/persistent/public/admin-only/t/stats"),
                         ("POST", "/admin/v2/namespaces/public/admin-only/permissions/anonymous"),
                         ("GET", "/lookup/v2/topic/persistent/public/admin-only/t")):
        status, body = admin_json(method, broker.admin_url + path, {})
        assert status == 403, (method, path, status, body)
        assert "'anonymous'" in body["reason"]  # type: ignore[index]
    assert topics_of(broker, admin_headers, "public/admin-only") == []


@pytest.mark.parametrize(("body", "reason"), [
    (["produce", "teleport"], "unknown action teleport"),
    ({"produce": True}, "JSON list of actions"),
])
def test_bad_permission_bodies_are_refused(broker, admin_headers, body, reason):
    url = f"{broker.admin_url}/admin/v2/namespaces/public/default/permissions/someone"
    status, answer = admin_json("POST", url, admin_headers, body)
    assert status == 400
    assert reason in answer["reason"]  # type: ignore[index]


@pytest.mark.parametrize("module", [pulsar, magnetar_client], ids=["official", "magnetar"])
def test_only_a_super_user_may_produce_under_a_replicator_name(broker, signer, admin_headers, module):
    """A replicator's producer is trusted with what only replicators do (messages stored as
    replicated, markers that move subscriptions): a role that may produce still may not take
    a name under replicatorPrefix; a super user (the role a broker replicates with) may."""
    namespace = f"public/repl-names-{module.__name__.replace('.', '-')}"
    create_namespace(broker, admin_headers, namespace)
    url = f"{broker.admin_url}/admin/v2/namespaces/{namespace}/permissions/writer"
    assert admin_json("POST", url, admin_headers, ["produce"])[0] == 204
    topic = f"persistent://{namespace}/t"
    for role, allowed in (("writer", False), ("admin", True)):
        client = module.Client(broker.url, authentication=module.AuthenticationToken(signer.token(role)),
                               operation_timeout_seconds=30)
        try:
            client.create_producer(topic, producer_name=f"{role}-own-name").send(b"ordinary")
            if allowed:
                client.create_producer(topic, producer_name="pulsar.repl.east-->standalone").send(b"replicated")
            else:
                with pytest.raises(module.AuthorizationError):
                    client.create_producer(topic, producer_name="pulsar.repl.east-->standalone")
        finally:
            client.close()
