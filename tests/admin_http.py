"""Plain HTTP calls to a standalone's admin API, as curl would make them."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request


def http(method: str, url: str, body: bytes | None = None,
         content_type: str = "application/json", *, headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request; error statuses are returned, not raised.
    `headers` adds request headers (credentials); `context` is the TLS client side for https://."""
    headers = {**({"Content-Type": content_type} if body is not None else {}), **(headers or {})}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def http_get(url: str) -> tuple[int, dict[str, str], bytes]:
    return http("GET", url)


def get_json(url: str) -> object:
    status, _, body = http_get(url)
    assert status == 200, f"GET {url}: {status} {body!r}"
    return json.loads(body)


def admin_call(admin_url: str, token: str, method: str, path: str, body: object = None) -> object:
    """`method` on `/admin/v2/{path}` as the bearer of `token`; the JSON answer (None when empty),
    asserting success."""
    data = None if body is None else json.dumps(body).encode()
    status, _, answer = http(method, f"{admin_url}/admin/v2/{path}", data, headers={"Authorization": f"Bearer {token}"})
    assert status in (200, 204), (method, path, status, answer)
    return json.loads(answer) if answer else None
