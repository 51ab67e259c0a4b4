"""Who a client is: the authentication providers named in authenticationProviders, asked
with what the client sent (CONNECT's auth_method_name and auth_data, an HTTP
Authorization header, a TLS client certificate), answering with a role.

Providers are plugins of the `magnetar.authentication_providers` entry-point group,
named as Pulsar names its classes (`org.apache.pulsar.broker.authentication.
AuthenticationProviderToken`) or by their short method names (`token`, `tls`,
`basic`). A provider that raises anything but AuthenticationError fails that one
authentication, never the broker.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.auth.issued import METHOD as ISSUED_METHOD
from magnetar.broker.auth.issued import IssuedCredentials, UnknownCredential
from magnetar.plugins import PluginGroup

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration

log = logging.getLogger(__name__)

GROUP = "magnetar.authentication_providers"
_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
_BUILTIN_TARGETS = {
    "token": "magnetar.broker.auth.providers.token:TokenAuthenticationProvider",
    "tls": "magnetar.broker.auth.providers.tls:TlsAuthenticationProvider",
    "basic": "magnetar.broker.auth.providers.basic:BasicAuthenticationProvider",
}
BUILTIN_PROVIDERS: dict[str, str] = {
    **_BUILTIN_TARGETS,
    _PULSAR_PACKAGE + "AuthenticationProviderToken": _BUILTIN_TARGETS["token"],
    _PULSAR_PACKAGE + "AuthenticationProviderTls": _BUILTIN_TARGETS["tls"],
    _PULSAR_PACKAGE + "AuthenticationProviderBasic": _BUILTIN_TARGETS["basic"],
}
#: What clients without credentials name (the C++ client sends "none").
NO_AUTH_METHODS = frozenset({"", "none"})


class AuthenticationError(Exception):
    """Credentials that name no role; the message says why, without the credentials."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a client presented: the bytes of its auth data and its TLS certificate."""

    method: str
    data: bytes = b""
    peer_certificate: Mapping | None = None


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated role, and when its credentials stop being valid (epoch seconds)."""

    role: str
    method: str
    expires_at: float | None = None


class AuthenticationProvider(Protocol):
    """What a provider plugin is: built with the broker configuration, it names its
    method and turns credentials into a principal (or raises AuthenticationError). One
    whose checks take milliseconds sets `slow = True` and is called on a worker thread."""

    auth_method_name: str

    def __init__(self, config: ServiceConfiguration) -> None: ...

    def authenticate(self, credentials: Credentials) -> Principal: ...


_PROVIDERS = PluginGroup("authentication provider", GROUP, BUILTIN_PROVIDERS)


def load_provider(name: str, config: ServiceConfiguration) -> AuthenticationProvider:
    """Build the provider `name` (from authenticationProviders: the operator's) designates;
    ValueError names the problem. A client's auth_method_name only picks among those built."""
    factory = _PROVIDERS.load(name)
    return factory(config)


class AuthenticationService:
    """The providers in force, by method name, and the anonymous role.

    With authentication off no provider is built, as in Pulsar: files written for it
    name providers (even `authenticationProviders=false`) that only matter once it is
    on, and the providers' libraries then stay unimported.
    """

    def __init__(self, config: ServiceConfiguration) -> None:
        self.enabled = config.authenticationEnabled
        self.anonymous_role = config.anonymousUserRole or None
        self.providers: dict[str, AuthenticationProvider] = {}
        self.issued = IssuedCredentials()
        for name in config.authenticationProviders if self.enabled else ():
            provider = load_provider(name, config)
            self.providers[provider.auth_method_name] = provider

    def authenticate(self, credentials: Credentials) -> Principal:
        """The principal behind `credentials`: the provider of their method decides; a
        client naming no method we have gets the anonymous role, if there is one. A
        credential the broker issued (broker.auth.issued) is checked by the broker itself."""
        try:
            issued = self.issued.role(credentials.method, credentials.data)
        except UnknownCredential as exc:
            raise AuthenticationError(str(exc)) from None
        if issued is not None:
            return Principal(issued, ISSUED_METHOD)
        provider = self.providers.get(credentials.method)
        if provider is None:
            if self.anonymous_role is not None:
                return Principal(self.anonymous_role, "none")
            if credentials.method in NO_AUTH_METHODS:
                raise AuthenticationError("the client presented no credentials, and this broker requires them "
                                          "(no anonymousUserRole is set)")
            raise AuthenticationError(f"no authentication provider for method {credentials.method!r} "
                                      f"(this broker has {', '.join(sorted(self.providers)) or 'none'})")
        try:
            return provider.authenticate(credentials)
        except AuthenticationError:
            raise
        except Exception as exc:  # a plugin's bug costs one authentication, not the broker
            log.exception("authentication provider %r failed", credentials.method)
            raise AuthenticationError(f"authentication provider {credentials.method!r} failed: "
                                      f"{type(exc).__name__}") from None

    def authenticate_async(self, credentials: Credentials) -> asyncio.Future[Principal]:
        """`authenticate` as a future of the running loop, for the binary protocol, the admin
        API and Kafka's SASL alike: settled on return for quick providers, so a caller may
        go on at once when it is done(); run on a worker thread for providers that say their
        checks take long (`slow`: password hashing, milliseconds each), so a flood of them
        does not stall the other connections of the loop. Refusals are AuthenticationError."""
        loop = asyncio.get_running_loop()
        if getattr(self.providers.get(credentials.method), "slow", False):
            return loop.run_in_executor(None, self.authenticate, credentials)
        settled: asyncio.Future[Principal] = loop.create_future()
        try:
            settled.set_result(self.authenticate(credentials))
        except AuthenticationError as exc:
            settled.set_exception(exc)
        return settled

    def http_credentials(self, authorization: str | None, peer_certificate: Mapping | None) -> Credentials:
        """What an admin request presents, read as Pulsar's HTTP authentication reads it:
        `Authorization: Bearer <token>`, `Authorization: Basic <base64 user:password>`,
        else a client certificate, else nothing (anonymous)."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return Credentials("token", value.strip().encode())
        if scheme == "basic":
            try:
                decoded = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise AuthenticationError("the Basic Authorization header is not base64") from None
            return Credentials("basic", decoded)
        if scheme:
            raise AuthenticationError(f"unsupported Authorization scheme {scheme!r} (use Bearer or Basic)")
        if peer_certificate and "tls" in self.providers:
            return Credentials("tls", b"", peer_certificate)
        return Credentials("none")
