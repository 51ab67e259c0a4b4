"""How a client connection is secured, under the official client's option names:
`authentication` (magnetar.client.auth), `tls_trust_certs_file_path`,
`tls_allow_insecure_connection`, `tls_validate_hostname`. One frozen value, so the
asyncio client, the blocking connection of the Spark source (which ships it to its
executors) and the admin client all read the same settings the same way.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

from magnetar.client.auth import Authentication
from magnetar.wire import client_commands as cc


def client_ssl_context(trust_certs_file_path: str | None = None, allow_insecure_connection: bool = False,
                       certificate_pair: tuple[str, str] | None = None, *,
                       validate_hostname: bool = True) -> ssl.SSLContext:
    """A context that checks the broker against the trusted certificates (the system's when
    none are given), unless insecure connections are allowed, and shows a client
    certificate when one is given (TLS authentication)."""
    context = ssl.create_default_context(cafile=trust_certs_file_path or None)
    if allow_insecure_connection:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif not validate_hostname:
        context.check_hostname = False
    if certificate_pair is not None:
        context.load_cert_chain(*certificate_pair)
    return context


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    authentication: Authentication = field(default_factory=Authentication)
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_validate_hostname: bool = False
    """The official client's default: the certificate is checked, the host name in it is not."""

    def ssl_context(self) -> ssl.SSLContext:
        return client_ssl_context(self.tls_trust_certs_file_path, self.tls_allow_insecure_connection,
                                  self.authentication.tls_pair, validate_hostname=self.tls_validate_hostname)

    def connect_frame(self, client_version: str) -> bytes:
        data = self.authentication.auth_data()
        return cc.connect(client_version, auth_method_name=self.authentication.method_name, auth_data=data or None)

    def auth_response_frame(self, client_version: str) -> bytes:
        """The answer to AUTH_CHALLENGE: the credentials asked for anew (a token supplier is called again)."""
        return cc.auth_response(client_version, self.authentication.method_name, self.authentication.auth_data())
