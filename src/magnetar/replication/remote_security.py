"""How this broker reaches a remote cluster as a client: which URLs, which TLS settings and
which credentials, chosen from the cluster's ClusterData and broker.conf's `brokerClient*`
keys the way Pulsar's broker builds its replication client and its admin client of a cluster.

- TLS when the cluster's `brokerClientTlsEnabled` says so, with the cluster's trusted
  certificates, client certificate and `tlsAllowInsecureConnection`; else when broker.conf's
  `brokerClientTlsEnabled` does, with broker.conf's. Then the binary protocol goes to
  `brokerServiceUrlTls` and the admin API to `serviceUrlTls`; otherwise to the plain URLs.
- Credentials: the cluster's `authenticationPlugin` with its `authenticationParameters` when
  both are set; else broker.conf's `brokerClientAuthenticationPlugin` and parameters, which the
  binary client takes only with `authenticationEnabled` (the admin client always), as in Pulsar.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.config import ServiceConfiguration
from magnetar.credentials.authentication import Authentication, authentication_from_plugin
from magnetar.credentials.security import ClientSecurity

_DISABLED = "AuthenticationDisabled"


class RemoteSettingsError(ValueError):
    """The cluster's data (or broker.conf) does not say how to reach it; the message names the field."""


@dataclass(frozen=True, slots=True)
class RemoteEndpoint:
    broker_url: str
    admin_url: str
    """Empty: the cluster has no admin URL for this transport (its topics are not created first)."""
    security: ClientSecurity
    admin_security: ClientSecurity


def remote_endpoint(cluster: str, data: Mapping[str, Any], config: ServiceConfiguration) -> RemoteEndpoint:
    """The endpoint of `cluster` whose ClusterData is `data`; RemoteSettingsError if it cannot be reached."""
    tls_source = data if data.get("brokerClientTlsEnabled") else (
        _broker_tls(config) if config.brokerClientTlsEnabled else None)
    if tls_source is not None and tls_source.get("brokerClientTlsEnabledWithKeyStore"):
        raise RemoteSettingsError(f"cluster {cluster}: brokerClientTlsEnabledWithKeyStore (Java key stores) is not "
                                  "supported; give PEM files in brokerClientTrustCertsFilePath, "
                                  "brokerClientCertificateFilePath and brokerClientKeyFilePath")
    url_field = "brokerServiceUrlTls" if tls_source is not None else "brokerServiceUrl"
    broker_url = data.get(url_field, "")
    if not broker_url:
        raise RemoteSettingsError(f"cluster {cluster} has no {url_field}")
    admin_url = data.get("serviceUrlTls" if tls_source is not None else "serviceUrl", "")
    own = data.get("authenticationPlugin") is not None and data.get("authenticationParameters") is not None
    plugin, params = (data["authenticationPlugin"], data["authenticationParameters"]) if own else (
        config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters)
    where = f"cluster {cluster}'s authenticationPlugin" if own else "brokerClientAuthenticationPlugin"
    authentication = _authentication(plugin, params, where)
    binary_authentication = authentication if own or config.authenticationEnabled else Authentication()
    return RemoteEndpoint(broker_url, admin_url, _security(binary_authentication, tls_source, config),
                          _security(authentication, tls_source, config))


def _broker_tls(config: ServiceConfiguration) -> dict[str, Any]:
    """broker.conf's client TLS settings under ClusterData's field names."""
    return {"brokerClientTrustCertsFilePath": config.brokerClientTrustCertsFilePath,
            "brokerClientCertificateFilePath": config.brokerClientCertificateFilePath,
            "brokerClientKeyFilePath": config.brokerClientKeyFilePath,
            "tlsAllowInsecureConnection": config.tlsAllowInsecureConnection}


def _security(authentication: Authentication, tls: Mapping[str, Any] | None,
              config: ServiceConfiguration) -> ClientSecurity:
    if tls is None:
        return ClientSecurity(authentication)
    certificate, key = tls.get("brokerClientCertificateFilePath", ""), tls.get("brokerClientKeyFilePath", "")
    return ClientSecurity(authentication, tls.get("brokerClientTrustCertsFilePath") or None,
                          bool(tls.get("tlsAllowInsecureConnection")), config.tlsHostnameVerificationEnabled,
                          (certificate, key) if certificate and key else None)


def _authentication(plugin: str, params: str, where: str) -> Authentication:
    if not plugin or plugin.rpartition(".")[2] == _DISABLED:
        return Authentication()
    try:
        return authentication_from_plugin(plugin, params)
    except ValueError as exc:
        raise RemoteSettingsError(f"{where}: {exc}") from None
