"""The client side of TLS, under the official client's option names
(tls_trust_certs_file_path, tls_allow_insecure_connection, tls_validate_hostname)."""

from __future__ import annotations

import ssl


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
