"""`FunctionsAdmin`: pulsar-admin's `functions` verbs over /admin/v3/functions, for scripts
and `magnetar admin functions`. Standard library only, like AdminClient, whose transport
(authentication, TLS, Pulsar's errors) it shares."""

from __future__ import annotations

import json
import secrets
import urllib.parse
from pathlib import Path
from typing import Any

from magnetar.admin_client.client import AdminClient


def _path(tenant: str, namespace: str, name: str | None = None) -> str:
    parts = [tenant, namespace, *([name] if name is not None else [])]
    return "/admin/v3/functions/" + "/".join(urllib.parse.quote(part, safe="") for part in parts)


def multipart(fields: dict[str, tuple[str | None, str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body from name -> (file name or None, content type, bytes)."""
    boundary = "magnetar-" + secrets.token_hex(12)
    body = bytearray()
    for name, (filename, content_type, data) in fields.items():
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += (f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
                 f"Content-Type: {content_type}\r\n\r\n").encode()
        body += data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    return bytes(body), f"multipart/form-data; boundary={boundary}"


class FunctionsAdmin:
    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin

    def _upload(self, method: str, config: dict[str, Any], code: Path | None) -> None:
        """`config` is FunctionConfig JSON; tenant and namespace default to Pulsar's
        (`public`, `default`)."""
        config = {"tenant": "public", "namespace": "default", **config}
        fields: dict[str, tuple[str | None, str, bytes]] = {
            "functionConfig": (None, "application/json", json.dumps(config).encode())}
        if code is not None:
            fields["data"] = (code.name, "application/octet-stream", code.read_bytes())
        body, content_type = multipart(fields)
        self.admin._request(method, _path(config["tenant"], config["namespace"], config["name"]), body,
                            content_type=content_type)

    def create(self, config: dict[str, Any], code: Path) -> None:
        self._upload("POST", config, code)

    def update(self, config: dict[str, Any], code: Path | None = None) -> None:
        self._upload("PUT", config, code)

    def delete(self, tenant: str, namespace: str, name: str) -> None:
        self.admin._json("DELETE", _path(tenant, namespace, name))

    def get(self, tenant: str, namespace: str, name: str) -> dict[str, Any]:
        return self.admin._json("GET", _path(tenant, namespace, name))

    def download(self, tenant: str, namespace: str, name: str) -> bytes:
        """The function's code as it was uploaded."""
        content, _ = self.admin._request("GET", _path(tenant, namespace, name) + "/download")
        return content

    def list(self, tenant: str, namespace: str) -> list[str]:
        return self.admin._json("GET", _path(tenant, namespace))

    def status(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> dict[str, Any]:
        return self.admin._json("GET", _path(tenant, namespace, name) + _instance(instance_id) + "/status")

    def stats(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> dict[str, Any]:
        return self.admin._json("GET", _path(tenant, namespace, name) + _instance(instance_id) + "/stats")

    def control(self, verb: str, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> None:
        """`start`, `stop` or `restart` every instance, or the one given."""
        self.admin._json("POST", _path(tenant, namespace, name) + _instance(instance_id) + f"/{verb}")

    def trigger(self, tenant: str, namespace: str, name: str, value: bytes, topic: str | None = None) -> str:
        fields: dict[str, tuple[str | None, str, bytes]] = {"data": (None, "text/plain", value)}
        if topic:
            fields["topic"] = (None, "text/plain", topic.encode())
        body, content_type = multipart(fields)
        content, _ = self.admin._request("POST", _path(tenant, namespace, name) + "/trigger", body,
                                         content_type=content_type)
        return content.decode(errors="replace")

    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> dict[str, Any]:
        return self.admin._json("GET", _path(tenant, namespace, name) + "/state/" + urllib.parse.quote(key, safe=""))

    def put_state(self, tenant: str, namespace: str, name: str, state: dict[str, Any]) -> None:
        body, content_type = multipart({"state": (None, "application/json", json.dumps(state).encode())})
        key = urllib.parse.quote(str(state.get("key", "")), safe="")
        self.admin._request("POST", _path(tenant, namespace, name) + f"/state/{key}", body,
                            content_type=content_type)


def _instance(instance_id: int | None) -> str:
    return "" if instance_id is None else f"/{instance_id}"
