"""One connection's authentication: CONNECT's credentials, then refreshes of those that
expire, by the protocol's AUTH_CHALLENGE / AUTH_RESPONSE.

As in Pulsar's ServerCnx: every authenticationRefreshCheckSeconds the broker looks at
the connection's credentials; once expired, a client that announced
supports_auth_refresh is sent AUTH_CHALLENGE and must answer with fresh credentials
(for the same role) before the next check, and one that did not is disconnected.

A refused CONNECT is answered as Pulsar answers it, by ERROR (request id -1,
AuthenticationError, with the reason) and the connection closed. The official C++ client
(the core of the Python, C++ and Node.js clients; apache/pulsar-client-cpp#227) takes
nothing but CONNECTED in that state: it drops the ERROR unread and retries until its
operation timeout, so its user sees Timeout and never why. Such a client is answered
CONNECTED instead and its first request (the lookup every producer, consumer and reader
starts with) gets AuthenticationError with the reason, in the response it waits for; then
the connection closes. Nothing is served in between: the connection never counts as
connected, whatever command comes first gets the refusal, and what came with it in the same
read is dropped unread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

from magnetar.broker.auth.authentication import AuthenticationError, AuthenticationService, Credentials, Principal
from magnetar.wire import commands
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


class AuthenticatingConnection(Protocol):
    """What a session uses of its connection (transport.connection.ServerCnx): the client's
    certificate, whether the connection is still open, whether its client reads an ERROR
    answering CONNECT, and ways to talk and to hang up."""

    peer_certificate: dict | None
    server_version: str
    protocol_version: int
    reads_connect_errors: bool

    def connected_frame(self) -> bytes: ...

    @property
    def closed(self) -> bool: ...

    def send(self, frame: bytes) -> None: ...

    def close(self) -> None: ...


class ConnectionAuth:
    def __init__(self, cnx: AuthenticatingConnection, authentication: AuthenticationService,
                 refresh_interval: float) -> None:
        self._cnx = cnx
        self._service = authentication
        self._interval = refresh_interval
        self.principal: Principal | None = None
        self._supports_refresh = False
        self._challenge_pending = False
        self._timer: asyncio.TimerHandle | None = None
        self.refusal: str | None = None
        """Why CONNECT was refused, while the connection stays to tell a client that reads no
        ERROR to CONNECT (see the module's docstring): the answer to its first request."""

    @property
    def role(self) -> str | None:
        return self.principal.role if self.principal is not None else None

    def on_connect(self, connect: pb.CommandConnect, accepted: Callable[[], None]) -> None:
        """Authenticate CONNECT and call `accepted` once it is; refused, the client is told and
        dropped. Nothing else is read from the client meanwhile (it waits for CONNECTED)."""
        method = connect.auth_method_name if connect.HasField("auth_method_name") else "none"
        self._supports_refresh = connect.feature_flags.supports_auth_refresh

        def authenticated(principal: Principal) -> None:
            self.principal = principal
            self._accept(accepted)

        self._check_credentials(method, connect.auth_data, "Unable to authenticate", authenticated,
                                self._refuse_connect)

    def _accept(self, accepted: Callable[[], None]) -> None:
        self._schedule()
        accepted()

    def on_auth_response(self, response: pb.CommandAuthResponse) -> None:
        """Fresh credentials, asked for by AUTH_CHALLENGE: same role, or the connection goes.
        One nobody asked for is refused: it would only make the broker check a password."""
        data = response.response
        if not self._challenge_pending:
            self._refuse("AUTH_RESPONSE without an AUTH_CHALLENGE", data.auth_method_name)
            return
        self._check_credentials(data.auth_method_name or "none", data.auth_data,
                                "Unable to refresh authentication", self._refreshed, self._refuse)

    def _refreshed(self, principal: Principal) -> None:
        if self.principal is not None and principal.role != self.principal.role:
            self._refuse(f"refreshed credentials name role {principal.role!r}, not {self.principal.role!r}",
                         principal.method)
            return
        self.principal = principal
        self._challenge_pending = False
        log.info("%s refreshed its credentials for role %r", self._cnx, principal.role)

    def _check_credentials(self, method: str, data: bytes, refusal: str,
                           then: Callable[[Principal], None], refuse: Callable[[str, str], None]) -> None:
        """Authenticate, then `then(principal)`; refused, `refuse(message, method)` tells the
        client. A quick provider has answered on return and the command is settled now; a
        slow one answers from its worker thread."""
        credentials = Credentials(method, data, self._cnx.peer_certificate)
        pending = self._service.authenticate_async(credentials)
        if pending.done():
            self._settle(pending, method, refusal, then, refuse)
        else:
            pending.add_done_callback(lambda done: self._settle(done, method, refusal, then, refuse))

    def _settle(self, done: asyncio.Future[Principal], method: str, refusal: str,
                then: Callable[[Principal], None], refuse: Callable[[str, str], None]) -> None:
        error = done.exception()  # read even when the connection went: asyncio logs unread errors
        if self._cnx.closed:  # gone while its credentials were checked
            return
        if error is not None:
            reason = str(error) if isinstance(error, AuthenticationError) else "internal error"
            refuse(f"{refusal}: {reason}", method)
            return
        then(done.result())

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _refuse(self, message: str, method: str) -> None:
        log.warning("%s authentication (%s) refused: %s", self._cnx, method or "none", message)
        self._cnx.send(commands.error(commands.NO_REQUEST_ID, pb.AuthenticationError, message))
        self._cnx.close()

    def _refuse_connect(self, message: str, method: str) -> None:
        """A refused CONNECT, told in the way the client reads (see the module's docstring)."""
        if self._cnx.reads_connect_errors:
            self._refuse(message, method)
            return
        log.warning("%s authentication (%s) refused: %s; told at its first request", self._cnx, method or "none",
                    message)
        self.refusal = message
        self._cnx.send(self._cnx.connected_frame())

    def _schedule(self) -> None:
        if self.principal is not None and self.principal.expires_at is not None and self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self._check)

    def _check(self) -> None:
        """The periodic look at the credentials (Pulsar's refreshAuthenticationCredentials)."""
        self._timer = None
        if self._cnx.closed or self.principal is None:
            return
        if self._challenge_pending:
            log.info("%s closing: no fresh credentials came back in time", self._cnx)
            self._cnx.close()
            return
        expires_at = self.principal.expires_at
        if expires_at is not None and time.time() >= expires_at:
            if not self._supports_refresh:
                log.info("%s closing: its credentials expired and it cannot refresh them", self._cnx)
                self._cnx.close()
                return
            self._challenge_pending = True
            self._cnx.send(commands.auth_challenge(self._cnx.server_version, self._cnx.protocol_version,
                                                   self.principal.method, commands.REFRESH_AUTH_DATA))
        self._schedule()
