"""SASL/PLAIN on a SASL_PLAINTEXT or SASL_SSL listener, as Kafka-on-Pulsar reads it.

A client sends SaslHandshake (mechanism PLAIN), then SaslAuthenticate with RFC 4616's
`authzid NUL user NUL password`. As in KoP the user name says where the client's topics
and groups live and the password is `<method>:<credentials>`, `token:<jwt>` for the token
provider: the credentials go to the broker's AuthenticationService, the same providers
the binary protocol's CONNECT uses, and the role it answers is what every later request
is authorized as.

With `kafkaEnableMultiTenantMetadata` (on, as in KoP) the user name chooses the
namespace: `tenant` is `tenant/<kafkaNamespace>` (KoP's rule), `tenant/namespace` that
namespace (KoP takes only the tenant from it), and a namespace that does not exist is
refused at authentication (KoP refuses a tenant that does not exist). Without it every
connection has `kafkaTenant/kafkaNamespace`, and the user name must name it or its tenant.

Kafka's rules for the exchange: before it completes a client may send ApiVersions and
the two SASL requests only; anything else closes the connection. A refused
authentication is answered SASL_AUTHENTICATION_FAILED with the reason, then the
connection closes. Credentials that expire end the connection at its first request after
the expiry; the client connects again with fresh ones (no KIP-368 re-authentication: the
session lifetime sent is 0).
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.auth.authentication import AuthenticationError, AuthenticationService, Credentials, Principal
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request

log = logging.getLogger(__name__)
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SASL_APIS = frozenset({SASL_HANDSHAKE, SASL_AUTHENTICATE})
PLAIN = "PLAIN"
_NO_SESSION_LIFETIME = datetime.timedelta(0)


class _State(enum.Enum):
    HANDSHAKE = "waiting for SaslHandshake"
    AUTHENTICATE = "waiting for SaslAuthenticate"
    COMPLETE = "authenticated"


def sasl_response(request: Request, error: ErrorCode, message: str | None = None) -> Any:
    """A SaslHandshake or SaslAuthenticate response carrying `error`."""
    module = response_module(request.api_key, request.api_version)
    if request.api_key == SASL_HANDSHAKE:
        return build(module, "SaslHandshakeResponse", error_code=error, mechanisms=(PLAIN,))
    return build(module, "SaslAuthenticateResponse", error_code=error, error_message=message, auth_bytes=b"",
                 session_lifetime=_NO_SESSION_LIFETIME)


def parse_plain(message: bytes) -> tuple[str, str, str]:
    """(user, method, credentials) of a SASL/PLAIN message whose password is `method:credentials`;
    AuthenticationError says what is missing."""
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationError("a SASL/PLAIN message is authzid NUL user NUL password")
    try:
        user, password = parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        raise AuthenticationError("the SASL/PLAIN user name and password must be UTF-8") from None
    method, _, credentials = password.partition(":")
    if not user:
        raise AuthenticationError("no user name: it names the tenant or tenant/namespace")
    if not method or not credentials:
        raise AuthenticationError("the password must be <method>:<credentials>, as token:<jwt>")
    return user, method, credentials


class UserNamespaces:
    """The namespace a SASL user name chooses (see the module's docstring)."""

    def __init__(self, tenant: str, namespace: str, multi_tenant: bool, exists: Callable[[str], bool]) -> None:
        self.default = f"{tenant}/{namespace}"
        self._local = namespace
        self._multi_tenant = multi_tenant
        self._exists = exists

    def __call__(self, user: str) -> str:
        """The namespace of `user`; AuthenticationError says why it names none."""
        if not self._multi_tenant:
            if user not in (self.default, self.default.split("/", 1)[0]):
                raise AuthenticationError(f"user name {user!r} names no namespace of this listener: Kafka topics live "
                                          f"in {self.default} (kafkaTenant/kafkaNamespace)")
            return self.default
        tenant, slash, local = user.partition("/")
        if not tenant or "/" in local or (slash and not local):
            raise AuthenticationError(f"user name {user!r} is not a tenant or tenant/namespace")
        namespace = f"{tenant}/{local or self._local}"
        if not self._exists(namespace):
            raise AuthenticationError(f"user name {user!r} names namespace {namespace}, which does not exist")
        return namespace


class SaslSession:
    """One connection's SASL exchange and, once it completes, its principal and namespace."""

    def __init__(self, authentication: AuthenticationService, namespaces: Callable[[str], str],
                 peer_certificate: Mapping | None, peer: str) -> None:
        self._service = authentication
        self._namespaces = namespaces
        self._certificate = peer_certificate
        self._peer = peer
        self._state = _State.HANDSHAKE
        self.principal: Principal | None = None
        self.namespace: str | None = None
        """The namespace the user name chose, once the credentials are accepted."""
        self._chosen: str | None = None
        self.closing = False
        """Set once the exchange failed: the connection closes after this response."""

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def role(self) -> str | None:
        return self.principal.role if self.principal is not None else None

    def expired(self) -> bool:
        expires_at = self.principal.expires_at if self.principal is not None else None
        return expires_at is not None and time.time() >= expires_at

    def handle(self, request: Request) -> Any | Awaitable[Any]:
        """The response to a SaslHandshake or SaslAuthenticate request."""
        expected = _State.HANDSHAKE if request.api_key == SASL_HANDSHAKE else _State.AUTHENTICATE
        if self._state is not expected:
            return self._refuse(request, ErrorCode.illegal_sasl_state,
                                f"{'SaslHandshake' if expected is _State.HANDSHAKE else 'SaslAuthenticate'} "
                                f"while {self._state.value}")
        if request.api_key == SASL_HANDSHAKE:
            if request.body.mechanism != PLAIN:
                return self._refuse(request, ErrorCode.unsupported_sasl_mechanism,
                                    f"mechanism {request.body.mechanism!r} (this broker has {PLAIN})")
            self._state = _State.AUTHENTICATE
            return sasl_response(request, ErrorCode.none)
        return self._authenticate(request)

    def _authenticate(self, request: Request) -> Any | Awaitable[Any]:
        try:
            credentials = self._credentials(request.body.auth_bytes)
        except AuthenticationError as exc:
            return self._refuse(request, ErrorCode.sasl_authentication_failed, str(exc))
        pending = self._service.authenticate_async(credentials)
        return self._settle(request, pending) if pending.done() else self._settle_later(request, pending)

    def _credentials(self, message: bytes) -> Credentials:
        user, method, data = parse_plain(message)
        self._chosen = self._namespaces(user)
        if method not in self._service.providers:
            raise AuthenticationError(f"no authentication provider for method {method!r} (this broker has "
                                      f"{', '.join(sorted(self._service.providers)) or 'none'})")
        return Credentials(method, data.encode(), self._certificate)

    async def _settle_later(self, request: Request, pending: asyncio.Future[Principal]) -> Any:
        """A slow provider answers from its worker thread, as for Pulsar's CONNECT."""
        await asyncio.wait([pending])
        return self._settle(request, pending)

    def _settle(self, request: Request, pending: asyncio.Future[Principal]) -> Any:
        error = pending.exception()
        if error is not None:
            return self._refuse(request, ErrorCode.sasl_authentication_failed, str(error))
        return self._accept(request, pending.result())

    def _accept(self, request: Request, principal: Principal) -> Any:
        self.principal = principal
        self.namespace = self._chosen
        self._state = _State.COMPLETE
        log.info("Kafka client %s authenticated as role %r (%s) in namespace %s", self._peer, principal.role,
                 principal.method, self.namespace)
        return sasl_response(request, ErrorCode.none)

    def _refuse(self, request: Request, error: ErrorCode, reason: str) -> Any:
        log.warning("Kafka client %s: SASL refused (%s): %s; closing its connection", self._peer, error.name, reason)
        self.closing = True
        return sasl_response(request, error, f"Authentication failed: {reason}")
