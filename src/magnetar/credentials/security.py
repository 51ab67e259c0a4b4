"""How a client connection is secured, under the official client's option names:
`authentication` (magnetar.credentials.authentication), `tls_trust_certs_file_path`,
`tls_allow_insecure_connection`, `tls_validate_hostname`. One frozen value, so the
asyncio client, the blocking connection of the Spark source (which ships it to its
executors) and the admin client all read the same settings the same way.
"""

from __future__ import annotations

import functools
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
    tls_certificate: tuple[str, str] | None = None
    """The client's certificate and key files for the TLS handshake (the official client's
    tls_certificate_file_path and tls_private_key_file_path), whatever the authentication;
    AuthenticationTLS's pair is shown when it has one."""

    def ssl_context(self) -> ssl.SSLContext:
        """Checks the broker against the trusted certificates (the system's when none are
        given) unless insecure connections are allowed, and shows the client certificate of
        AuthenticationTLS. Built once per settings, not per connection: loading the system's
        certificates takes about 20 ms, on the event loop in the asyncio client."""
        return _ssl_context(self.tls_trust_certs_file_path or None, self.tls_allow_insecure_connection,
                            self.tls_validate_hostname, self.authentication.tls_pair or self.tls_certificate)

    def connect_frame(self, client_version: str) -> bytes:
        data = self.authentication.auth_data()
        return cc.connect(client_version, auth_method_name=self.authentication.method_name, auth_data=data or None)

    def auth_response_frame(self, client_version: str) -> bytes:
        """The answer to AUTH_CHALLENGE: the credentials asked for anew (a token supplier is called again)."""
        return cc.auth_response(client_version, self.authentication.method_name, self.authentication.auth_data())


@functools.lru_cache(maxsize=16)
def _ssl_context(cafile: str | None, insecure: bool, validate_hostname: bool,
                 pair: tuple[str, str] | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=cafile)
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif not validate_hostname:
        context.check_hostname = False
    if pair is not None:
        context.load_cert_chain(*pair)
    return context
