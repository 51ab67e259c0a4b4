"""TLS client-certificate authentication (Pulsar's AuthenticationProviderTls): the role
is the common name of the certificate the client showed, which the TLS layer has
already checked against tlsTrustCertsFilePath."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.auth.authentication import AuthenticationError, Credentials, Principal

if TYPE_CHECKING:
    from collections.abc import Mapping

    from magnetar.broker.config import ServiceConfiguration


class TlsAuthenticationProvider:
    auth_method_name = "tls"

    def __init__(self, config: ServiceConfiguration) -> None:
        if not config.tls_enabled:
            raise ValueError("the tls provider needs a TLS port (brokerServicePortTls or webServicePortTls)")
        if not config.tlsTrustCertsFilePath:
            raise ValueError("the tls provider needs tlsTrustCertsFilePath to check client certificates")
        if config.tlsAllowInsecureConnection and not config.tlsRequireTrustedClientCertOnConnect:
            # The listener then asks for no certificate (see broker.tls), so none would arrive.
            raise ValueError("the tls provider cannot work with tlsAllowInsecureConnection=true: clients are then "
                             "not asked for a certificate (set tlsRequireTrustedClientCertOnConnect=true)")

    def authenticate(self, credentials: Credentials) -> Principal:
        if not credentials.peer_certificate:
            raise AuthenticationError("no trusted TLS client certificate was presented")
        role = common_name(credentials.peer_certificate)
        if not role:
            raise AuthenticationError("the client certificate has no common name (CN)")
        return Principal(role, self.auth_method_name)


def common_name(certificate: Mapping) -> str | None:
    """The CN of a certificate as Python's ssl module describes it (getpeercert())."""
    for rdn in certificate.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None
