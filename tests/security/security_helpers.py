"""What the authentication and authorization tests share: tokens signed the way a
Pulsar deployment signs them (PyJWT, not the broker's code), clients, round trips."""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import jwt
import pulsar
import pytest
from admin_http import http
from standalone import Standalone

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


class TokenSigner:
    """An HS256 secret key on disk (as `tokenSecretKey=file://...` reads it) and tokens signed with it."""

    def __init__(self, directory: Path) -> None:
        self.key = secrets.token_bytes(32)
        self.path = directory / "secret.key"
        self.path.write_bytes(self.key)

    @property
    def setting(self) -> str:
        return f"tokenSecretKey=file://{self.path}"

    def token(self, role: str, expires_in: float | None = None) -> str:
        claims: dict[str, object] = {"sub": role}
        if expires_in is not None:
            claims["exp"] = int(time.time() + expires_in)
        return jwt.encode(claims, self.key, algorithm="HS256")

    def bearer(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role)}"}


def make_client(url: str, **kwargs) -> pulsar.Client:
    kwargs.setdefault("operation_timeout_seconds", 3)
    kwargs.setdefault("logger", QUIET)
    return pulsar.Client(url, **kwargs)


def cert_client(url: str, ca, pair, **kwargs) -> pulsar.Client:
    """An official client trusting `ca` and presenting `pair` (certs.Pair) as its TLS credentials."""
    return make_client(url, tls_trust_certs_file_path=str(ca.pem),
                       authentication=pulsar.AuthenticationTLS(str(pair.cert), str(pair.key)), **kwargs)


def assert_producer_refused(client, topic: str, error: type[Exception] = pulsar.PulsarException,
                            match: str | None = None) -> None:
    """Creating a producer on `topic` raises `error`; the client (official or magnetar's) is
    closed whatever happens, so a failing assertion leaks no client."""
    try:
        with pytest.raises(error, match=match):
            client.create_producer(topic)
    finally:
        client.close()


def round_trip(client: pulsar.Client, topic: str, payload: bytes = b"secured") -> bytes:
    """Subscribe, produce one message, receive it; the client is closed in any case."""
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(payload)
        return consumer.receive(5000).data()
    finally:
        client.close()


def admin_json(method: str, url: str, headers: dict[str, str], body: object = None) -> tuple[int, object]:
    """(status, decoded JSON body or None) of one admin request."""
    status, _, content = http(method, url, None if body is None else json.dumps(body).encode(), headers=headers)
    return status, json.loads(content) if content else None


#: The scene of issue 28's probes: tenant t1 (admin t1-admin), namespace t1/ns where `app`
#: may produce and consume, `ingest` only produce and `reader` only consume; `nobody` holds
#: no grant and `admin` is the super user.
SCENE_GRANTS = {"app": ["produce", "consume"], "ingest": ["produce"], "reader": ["consume"]}
AUTHZ_SETTINGS = ["authenticationEnabled=true", "authenticationProviders=token", "authorizationEnabled=true",
                  "superUserRoles=admin"]


def build_scene(admin_url: str, signer: TokenSigner, namespace: str = "t1/ns") -> None:
    """Tenant t1 with its admin, `namespace` in it, and SCENE_GRANTS granted there."""
    admin = signer.bearer("admin")
    tenant = namespace.split("/", maxsplit=1)[0]
    status, body = admin_json("PUT", f"{admin_url}/admin/v2/tenants/{tenant}", admin,
                              {"adminRoles": [f"{tenant}-admin"], "allowedClusters": ["standalone"]})
    assert status in (204, 409), body
    status, body = admin_json("PUT", f"{admin_url}/admin/v2/namespaces/{namespace}", admin)
    assert status == 204, body
    for role, actions in SCENE_GRANTS.items():
        status, body = admin_json("POST", f"{admin_url}/admin/v2/namespaces/{namespace}/permissions/{role}", admin,
                                  actions)
        assert status == 204, body


def client_as(url: str, signer: TokenSigner, role: str, **kwargs) -> pulsar.Client:
    """The official client presenting a token for `role`."""
    return make_client(url, authentication=pulsar.AuthenticationToken(signer.token(role)), **kwargs)


#: Path parameters of a walk of the admin routes, and the bodies some routes take.
ROUTE_PARAMS = {"domain": "persistent", "subscription": "sub", "role": "someone", "ledger": "0", "entry": "0",
                "count": "1", "n": "1", "seconds": "1", "timestamp": "0", "cluster": "standalone", "version": "0",
                "name": "fn", "instance": "0", "key": "k", "file": "app.js", "most": "0", "least": "1",
                "timeout": "1000", "partition": "0"}
ROUTE_BODIES = {"/admin/v2/tenants/{tenant}": {"adminRoles": ["scratch-admin"], "allowedClusters": ["standalone"]},
                "permissions/{role}": ["consume"], "replicatedSubscriptionStatus": True,
                **{path: {"type": "STRING", "schema": ""} for path in ("/schema", "/compatibility", "/version")}}


def route_url(path: str, *, scratch: bool) -> str:
    """A route's pattern filled in on t1/ns and its topic `probe` (tenant routes: the tenant
    `scratch`), or with `scratch`, on t1/scratch and its topic `scratch`: what a walk changes
    or deletes there disturbs nothing walked after it."""
    values = {**ROUTE_PARAMS, "tenant": "scratch" if path.startswith("/admin/v2/tenants/") else "t1",
              "namespace": "scratch" if scratch else "ns", "topic": "scratch" if scratch else "probe"}
    return re.sub(r"\{(\w+)\}", lambda match: quote(values[match.group(1)]), path)


def route_body(path: str) -> bytes | None:
    body = next((body for suffix, body in ROUTE_BODIES.items() if path.endswith(suffix)), None)
    return None if body is None else json.dumps(body).encode()


def admin_routes(data_dir: Path) -> set[tuple[str, str]]:
    """(method, canonical pattern) of every route of a broker's admin API (built, not started)."""
    from magnetar.admin.server import AdminServer  # noqa: PLC0415 (only the route tables load a broker)
    from magnetar.broker.config import ServiceConfiguration  # noqa: PLC0415
    from magnetar.broker.service.broker_service import BrokerService  # noqa: PLC0415

    service = BrokerService(ServiceConfiguration(), data_dir)
    try:
        return {(route.method, route.canonical) for route in AdminServer(service).router.routes}
    finally:
        service.factory.close()


@contextlib.contextmanager
def scene_broker(data_dir: Path, signer: TokenSigner, *config: str) -> Iterator[Standalone]:
    """A broker with authorization on and build_scene's t1/ns, stopped after; whatever its
    tests did, its log must hold no traceback."""
    broker = Standalone(data_dir, [*AUTHZ_SETTINGS, signer.setting, *config]).start()
    try:
        build_scene(broker.admin_url, signer)
        yield broker
        assert "Traceback" not in broker.log()
    finally:
        broker.stop()
