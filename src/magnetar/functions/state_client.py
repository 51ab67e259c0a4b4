"""The instance's side of function state: counters and values kept by the worker in the
broker's metadata store, reached over the admin API (Pulsar's state paths, plus two of
magnetar's for counters) on one kept-alive connection."""

from __future__ import annotations

import base64
import http.client
import json
import threading
import urllib.parse
from typing import Any


class StateError(RuntimeError):
    """The worker refused or could not be reached."""


class StateClient:
    def __init__(self, admin_url: str, fqfn: str, headers: dict[str, str] | None = None) -> None:
        parsed = urllib.parse.urlsplit(admin_url)
        self._https = parsed.scheme == "https"
        self._netloc = parsed.netloc
        self._base = "/admin/v3/functions/" + fqfn
        self._headers = headers or {}
        self._lock = threading.Lock()
        self._connection: http.client.HTTPConnection | None = None

    def incr(self, key: str, amount: int) -> int:
        return int(self._call("POST", f"/counter/{_key(key)}", {"amount": amount})["numberValue"])

    def counter(self, key: str) -> int:
        state = self._call("GET", f"/state/{_key(key)}", None, missing_ok=True)
        return int(state.get("numberValue") or 0) if state else 0

    def delete(self, key: str) -> None:
        self._call("DELETE", f"/state/{_key(key)}", None, missing_ok=True)

    def put(self, key: str, value: bytes) -> None:
        state = {"key": key, "byteValue": base64.b64encode(value).decode()}
        self._call("POST", f"/state/{_key(key)}", state)

    def get(self, key: str) -> bytes | None:
        state = self._call("GET", f"/state/{_key(key)}", None, missing_ok=True)
        if not state:
            return None
        if state.get("byteValue") is not None:
            return base64.b64decode(state["byteValue"])
        if state.get("stringValue") is not None:
            return str(state["stringValue"]).encode()
        return str(state.get("numberValue", "")).encode()

    def _call(self, method: str, path: str, body: Any, *, missing_ok: bool = False) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        headers = {**self._headers, **({"Content-Type": "application/json"} if data is not None else {})}
        with self._lock:
            for attempt in (1, 2):
                connection = self._connect()
                try:
                    connection.request(method, self._base + path, body=data, headers=headers)
                    response = connection.getresponse()
                    content = response.read()
                    break
                except (OSError, http.client.HTTPException) as error:
                    self._connection = None
                    if attempt == 2:
                        raise StateError(f"function state unreachable: {error}") from error
        if response.status == 404 and missing_ok:
            return {}
        if response.status >= 400:
            raise StateError(f"function state {method} {path}: {response.status} {content.decode(errors='replace')}")
        return json.loads(content) if content else {}

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            self._connection = kind(self._netloc, timeout=30)
        return self._connection


def _key(key: str) -> str:
    return urllib.parse.quote(key, safe="")
