"""Client credentials under the official client's names: `AuthenticationToken` (a token
or a function returning one), `AuthenticationTLS` (a certificate and its key),
`AuthenticationBasic` (user and password). magnetar.client sends them in CONNECT (and
again when the broker's AUTH_CHALLENGE asks), the admin client as HTTP headers or a
client certificate.

`authentication_from_plugin` reads pulsar-admin's and pulsar-client's `--auth-plugin` /
`--auth-params` pairs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

_PLUGIN_PACKAGE = "org.apache.pulsar.client.impl.auth."


class Authentication:
    """No credentials (method "none")."""

    method_name = "none"

    def auth_data(self) -> bytes:
        """What CONNECT (or AUTH_RESPONSE) carries; asked anew each time, so a token supplier can refresh."""
        return b""

    def http_headers(self) -> dict[str, str]:
        return {}

    @property
    def tls_pair(self) -> tuple[str, str] | None:
        """(certificate file, key file) to present in the TLS handshake, if any."""
        return None


class AuthenticationToken(Authentication):
    method_name = "token"

    def __init__(self, token: str | Callable[[], str]) -> None:
        self._token = token

    def token(self) -> str:
        return self._token() if callable(self._token) else self._token

    def auth_data(self) -> bytes:
        return self.token().encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token()}"}


class AuthenticationTLS(Authentication):
    method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    @property
    def tls_pair(self) -> tuple[str, str] | None:
        return self.certificate_path, self.private_key_path


class AuthenticationBasic(Authentication):
    def __init__(self, username: str, password: str, method: str = "basic") -> None:
        self._credentials = f"{username}:{password}"
        self.method_name = method

    def auth_data(self) -> bytes:
        return self._credentials.encode()

    def http_headers(self) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(self._credentials.encode()).decode()}


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A token supplier reading a file each time, so a renewed token is picked up (and picklable, for Spark)."""

    path: str

    def __call__(self) -> str:
        return Path(self.path).read_text().strip()


def authentication_from_plugin(plugin: str, params: str) -> Authentication:
    """The credentials a `--auth-plugin` class name (or short name) and its `--auth-params` describe:
    token `token:<jwt>` or `file:///path`; tls `tlsCertFile:<path>,tlsKeyFile:<path>`; basic
    `{"userId": ..., "password": ...}`. ValueError says what is wrong."""
    name = plugin.removeprefix(_PLUGIN_PACKAGE).lower()
    if name in ("authenticationtoken", "token"):
        return AuthenticationToken(_token_param(params))
    if name in ("authenticationtls", "tls"):
        fields = _params(params)
        if "tlsCertFile" not in fields or "tlsKeyFile" not in fields:
            raise ValueError("tls auth params need tlsCertFile and tlsKeyFile")
        return AuthenticationTLS(fields["tlsCertFile"], fields["tlsKeyFile"])
    if name in ("authenticationbasic", "basic"):
        fields = _params(params)
        if "userId" not in fields or "password" not in fields:
            raise ValueError('basic auth params need {"userId": ..., "password": ...}')
        return AuthenticationBasic(fields["userId"], fields["password"], fields.get("method", "basic"))
    raise ValueError(f"unknown auth plugin {plugin!r} (AuthenticationToken, AuthenticationTls or AuthenticationBasic)")


def _token_param(params: str) -> str | Callable[[], str]:
    if params.startswith("token:"):
        return params.removeprefix("token:")
    if params.startswith("file:"):
        return TokenFile(unquote(urlsplit(params).path))
    if params.lstrip().startswith("{"):
        return str(json.loads(params).get("token", ""))
    return params


def _params(params: str) -> dict[str, str]:
    """`{"k": "v"}` or `k:v,k:v`, as Pulsar's plugins take them."""
    if params.lstrip().startswith("{"):
        loaded = json.loads(params)
        return {str(key): str(value) for key, value in loaded.items()}
    fields = {}
    for item in params.split(","):
        key, sep, value = item.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields
