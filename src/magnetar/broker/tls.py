"""TLS for the broker's pulsar+ssl:// port and the admin API's https:// port, under
Pulsar's keys (tlsCertificateFilePath, tlsKeyFilePath, tlsTrustCertsFilePath, ...).

One server context serves both ports. Certificates are checked for changes every
tlsCertRefreshCheckDurationSec and loaded again into the same context, so renewed
certificates reach new connections without a restart while established ones keep
theirs. A half-written pair (certificate and key not matching yet) is logged and the
old pair kept until the next check.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import ServiceConfiguration

log = logging.getLogger(__name__)

#: tlsProtocols names (Java's, which Pulsar passes through) and Python's versions.
_PROTOCOLS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}


class TlsConfigError(ValueError):
    """A TLS setting no listener could use; the message names the key."""


def server_context(config: ServiceConfiguration) -> ssl.SSLContext:
    """The server side of TLS as Pulsar's keys describe it."""
    if not config.tlsCertificateFilePath or not config.tlsKeyFilePath:
        raise TlsConfigError("a TLS port (brokerServicePortTls/webServicePortTls) needs tlsCertificateFilePath "
                             "and tlsKeyFilePath")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load_pair(context, config.tlsCertificateFilePath, config.tlsKeyFilePath)
    if config.tlsTrustCertsFilePath:
        try:
            context.load_verify_locations(cafile=config.tlsTrustCertsFilePath)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"tlsTrustCertsFilePath {config.tlsTrustCertsFilePath!r}: {exc}") from None
    context.verify_mode = _verify_mode(config)
    _set_protocols(context, config.tlsProtocols)
    if config.tlsCiphers:
        try:
            context.set_ciphers(":".join(config.tlsCiphers))
        except ssl.SSLError as exc:
            raise TlsConfigError(f"tlsCiphers {','.join(config.tlsCiphers)!r}: {exc} (use OpenSSL cipher names)") \
                from None
    return context


def _verify_mode(config: ServiceConfiguration) -> ssl.VerifyMode:
    """Client certificates: required (tlsRequireTrustedClientCertOnConnect), asked for
    and checked when offered (a trust file is set, so TLS authentication can use them),
    or not asked for. tlsAllowInsecureConnection asks for none: Python's TLS cannot take
    a certificate it does not trust, so an untrusted one is never read."""
    if config.tlsRequireTrustedClientCertOnConnect:
        if not config.tlsTrustCertsFilePath:
            raise TlsConfigError("tlsRequireTrustedClientCertOnConnect=true needs tlsTrustCertsFilePath")
        return ssl.CERT_REQUIRED
    if config.tlsTrustCertsFilePath and not config.tlsAllowInsecureConnection:
        return ssl.CERT_OPTIONAL
    return ssl.CERT_NONE


def _set_protocols(context: ssl.SSLContext, names: list[str]) -> None:
    if not names:
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        return
    unknown = [name for name in names if name not in _PROTOCOLS]
    if unknown:
        raise TlsConfigError(f"tlsProtocols: unknown protocol {', '.join(unknown)} (known: {', '.join(_PROTOCOLS)})")
    versions = sorted(_PROTOCOLS[name] for name in names)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]


def _load_pair(context: ssl.SSLContext, cert_path: str, key_path: str) -> None:
    try:
        context.load_cert_chain(cert_path, key_path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsConfigError(f"tlsCertificateFilePath {cert_path!r} / tlsKeyFilePath {key_path!r}: {exc}") from None


class CertificateReloader:
    """Loads the certificate, key and trusted CAs again into the serving context when their
    files change (CAs are added to those trusted: a removed CA stays trusted until restart).
    The broker calls check() every tlsCertRefreshCheckDurationSec (a PeriodicTask)."""

    def __init__(self, context: ssl.SSLContext, config: ServiceConfiguration) -> None:
        self.context = context
        self._cert = config.tlsCertificateFilePath
        self._key = config.tlsKeyFilePath
        self._trust = config.tlsTrustCertsFilePath
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, ...]:
        try:
            return tuple(int(os.stat(path).st_mtime_ns) for path in (self._cert, self._key, self._trust) if path)
        except OSError:
            return ()

    def check(self) -> None:
        """Reload if the files changed since the last load."""
        stamp = self._file_stamp()
        if not stamp or stamp == self._stamp:
            return
        try:
            _load_pair(self.context, self._cert, self._key)
            if self._trust:  # new CAs are added; OpenSSL's store cannot forget old ones
                self.context.load_verify_locations(cafile=self._trust)
        except (TlsConfigError, OSError, ssl.SSLError) as exc:
            log.warning("TLS certificate changed but cannot be loaded yet, keeping the old one: %s", exc)
            return
        self._stamp = stamp
        log.info("TLS certificate reloaded from %s", self._cert)
