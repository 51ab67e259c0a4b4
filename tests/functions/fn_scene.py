"""The scene of issue 40's probes, on a real broker with token authentication and
authorization: tenants t1 (admin `t1-admin`) and t2 (admin `t2-admin`); in t1/ns `app` may
produce and consume, `ingest` only produce, `reader` only consume, `fndev` holds only
`functions` and `fnapp` holds `functions`, `produce` and `consume`; `admin` is the super
user. Tokens are signed with PyJWT, as a deployment signs them, not with the broker's code."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pulsar
from fn_helpers import CODE, wait_consumers
from standalone import Standalone

from magnetar.admin_client import AdminClient, FunctionsAdmin
from magnetar.credentials.authentication import AuthenticationToken

GRANTS = {"app": ["produce", "consume"], "ingest": ["produce"], "reader": ["consume"], "fndev": ["functions"],
          "fnapp": ["functions", "produce", "consume"]}


@dataclass
class Scene:
    broker: Standalone
    key: bytes
    key_path: Path

    def token(self, role: str) -> str:
        return jwt.encode({"sub": role}, self.key, algorithm="HS256")

    def functions(self, role: str) -> FunctionsAdmin:
        return FunctionsAdmin(AdminClient(self.broker.admin_url, authentication=AuthenticationToken(self.token(role))))

    @property
    def admin(self) -> AdminClient:
        return self.functions("admin").admin

    def client(self, role: str = "admin") -> pulsar.Client:
        return pulsar.Client(self.broker.url, authentication=pulsar.AuthenticationToken(self.token(role)),
                             operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))

    def http(self, method: str, path: str, role: str | None, body: bytes | None = None,
             content_type: str = "application/json") -> tuple[int, Any]:
        """(status, decoded body) of one admin request as `role` (None: no credentials)."""
        headers = {"Content-Type": content_type, **({"Authorization": f"Bearer {self.token(role)}"} if role else {})}
        request = urllib.request.Request(self.broker.admin_url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, content = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, content = error.code, error.read()
        try:
            return status, json.loads(content) if content else None
        except ValueError:
            return status, content

    def deploy(self, role: str, name: str, code: str = "hostile.py", class_name: str = "hostile.Hostile",
               **config: Any) -> dict[str, Any]:
        """Create t1/ns/`name` as `role` and wait for its instances to subscribe."""
        full = {"tenant": "t1", "namespace": "ns", "name": name, "className": class_name,
                "subscriptionPosition": "Earliest", **config}
        self.functions(role).create(full, CODE / code)
        wait_consumers(self.admin, full, full.get("parallelism", 1))
        return full


def start_scene(directory: Path, *settings: str) -> Scene:
    key = secrets.token_bytes(32)
    key_path = directory / "secret.key"
    key_path.write_bytes(key)
    broker = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", f"tokenSecretKey=file://{key_path}",
        "authorizationEnabled=true", "superUserRoles=admin", *settings]).start()
    scene = Scene(broker, key, key_path)
    admin = scene.admin
    for tenant in ("t1", "t2"):
        admin.create_tenant(tenant, [f"{tenant}-admin"], ["standalone"])
    for namespace in ("t1/ns", "t1/ns2", "t2/ns"):
        admin.create_namespace(namespace)
    for role, actions in GRANTS.items():
        admin.grant_permission("t1/ns", role, actions)
    return scene


def answers(consumer: pulsar.Consumer, count: int) -> list[dict[str, Any]]:
    """The hostile function's next `count` answers, in order."""
    found = []
    for _ in range(count):
        message = consumer.receive(30000)
        consumer.acknowledge(message)
        found.append(json.loads(message.data()))
    return found
