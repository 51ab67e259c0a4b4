"""How a client connection is secured, under the official client's option names:
`authentication` (magnetar.credentials.authentication), `tls_trust_certs_file_path`,
`tls_allow_insecure_connection`, `tls_validate_hostname`. One frozen value, so the
asyncio client, the blocking connection of the Spark source (which ships it to its
executors) and the admin client all read the same settings the same way.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from magnetar.credentials.authentication import Authentication
from magnetar.wire import client_commands as cc


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    authentication: Authentication = field(default_factory=Authentication)
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    """The official client's default: the certificate is checked, the host name in it is not."""

    def ssl_context(self) -> ssl.SSLContext:
        """Checks the broker against the trusted certificates (the system's when none are
        given) unless insecure connections are allowed, and shows the client certificate of
        AuthenticationTLS."""
        context = ssl.create_default_context(cafile=self.tls_trust_certs_file_path or None)
        if self.tls_allow_insecure_connection:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not self.tls_validate_hostname:
            context.check_hostname = False
        pair = self.authentication.tls_pair
        if pair is not None:
            context.load_cert_chain(*pair)
        return context

    def connect_frame(self, client_version: str) -> bytes:
        data = self.authentication.auth_data()
        return cc.connect(client_version, auth_method_name=self.authentication.method_name, auth_data=data or None)

    def auth_response_frame(self, client_version: str) -> bytes:
        """The answer to AUTH_CHALLENGE: the credentials asked for anew (a token supplier is called again)."""
        return cc.auth_response(client_version, self.authentication.method_name, self.authentication.auth_data())
