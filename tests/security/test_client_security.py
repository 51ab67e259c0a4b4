"""magnetar's own clients against a secured broker, with the official client's option
names: magnetar.client (TLS, AuthenticationToken/TLS/Basic, token refresh), the blocking
connection the Spark source uses, and the admin client and CLI over https."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from passlib.apache import HtpasswdFile
from polling import wait_for
from security_helpers import assert_producer_refused
from standalone import Standalone

import magnetar.client as mc
from magnetar.admin_client import AdminClient, AdminError
from magnetar.cli import main
from magnetar.client.connection import ClientConnection
from magnetar.client.lookup import lookup
from magnetar.credentials.security import ClientSecurity


@pytest.fixture(scope="module")
def broker(pki, signer, tmp_path_factory) -> Iterator[Standalone]:
    """TLS only (both ports), token/tls/basic providers, `admin` and `bob` super users."""
    ca, _ = pki
    directory = tmp_path_factory.mktemp("client-security")
    htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
    htpasswd.set_password("bob", "bob-pw")
    htpasswd.save()
    pair = ca.issue("broker", "broker", server=True)
    broker = Standalone(directory / "data", [
        f"tlsCertificateFilePath={pair.cert}", f"tlsKeyFilePath={pair.key}", f"tlsTrustCertsFilePath={ca.pem}",
        "brokerServicePortTls=0", "webServicePortTls=0", "brokerServicePort=", "webServicePort=",
        "authenticationEnabled=true", "authenticationProviders=token,tls,basic", signer.setting,
        f"basicAuthConf={directory / 'htpasswd'}", "authenticationRefreshCheckSeconds=1",
        "authorizationEnabled=true", "superUserRoles=admin,bob"], plaintext=False).start()
    yield broker
    broker.stop()


def magnetar_round_trip(url: str, topic: str, **kwargs) -> bytes:
    client = mc.Client(url, operation_timeout_seconds=5, **kwargs)
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"magnetar over tls")
        return consumer.receive(5000).data()
    finally:
        client.close()


@pytest.mark.parametrize("credentials", ["token", "tls", "basic"])
def test_magnetar_client_over_tls_with_each_authentication(broker, signer, pki, credentials):
    ca, _ = pki
    if credentials == "token":
        auth = mc.AuthenticationToken(signer.token("admin"))
    elif credentials == "tls":
        pair = ca.issue("magnetar-client", "admin")
        auth = mc.AuthenticationTLS(str(pair.cert), str(pair.key))
    else:
        auth = mc.AuthenticationBasic("bob", "bob-pw")
    data = magnetar_round_trip(broker.tls_url, f"mc-{credentials}", authentication=auth,
                               tls_trust_certs_file_path=str(ca.pem), tls_validate_hostname=True)
    assert data == b"magnetar over tls"


def test_magnetar_client_answers_auth_challenges_with_fresh_tokens(broker, signer, pki):
    ca, _ = pki
    client = mc.Client(broker.tls_url, tls_trust_certs_file_path=str(ca.pem), operation_timeout_seconds=5,
                       authentication=mc.AuthenticationToken(lambda: signer.token("admin", expires_in=2)))
    try:
        producer = client.create_producer("mc-refresh")
        before = broker.log().count("refreshed its credentials")
        assert wait_for(lambda: broker.log().count("refreshed its credentials") >= before + 2, timeout=15)
        producer.send(b"after refresh")
    finally:
        client.close()


def test_magnetar_client_reports_refusals(broker, signer, pki):
    ca, _ = pki
    client = mc.Client(broker.tls_url, tls_trust_certs_file_path=str(ca.pem), operation_timeout_seconds=3,
                       authentication=mc.AuthenticationToken(signer.token("mallory")))
    assert_producer_refused(client, "mc-refused", mc.AuthorizationError, match="'mallory' is not authorized to lookup")
    _, rogue = pki
    client = mc.Client(broker.tls_url, tls_trust_certs_file_path=str(rogue.pem), operation_timeout_seconds=3,
                       authentication=mc.AuthenticationToken(signer.token("admin")))
    assert_producer_refused(client, "mc-untrusted", mc.PulsarException)


def test_blocking_connection_looks_up_the_tls_url(broker, signer, pki):
    ca, _ = pki
    security = ClientSecurity(mc.AuthenticationToken(signer.token("admin")), str(ca.pem))
    with ClientConnection(broker.tls_url, security=security) as conn:
        assert lookup(conn, "persistent://public/default/blocking") == broker.tls_url


def test_admin_client_and_cli_over_https(broker, signer, pki):
    ca, _ = pki
    admin = AdminClient(broker.admin_tls_url, authentication=mc.AuthenticationBasic("bob", "bob-pw"),
                        tls_trust_certs_file_path=str(ca.pem))
    assert "public" in admin.tenants()
    with pytest.raises(AdminError) as refused:
        AdminClient(broker.admin_tls_url, tls_trust_certs_file_path=str(ca.pem)).tenants()
    assert refused.value.status == 401
    result = subprocess.run(
        [sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_tls_url,
         "--tls-trust-cert-path", str(ca.pem), "--auth-plugin", "AuthenticationToken",
         "--auth-params", f"token:{signer.token('admin')}", "tenants", "list"],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert "public" in result.stdout.split()


def test_client_cli_takes_pulsar_clients_security_flags(broker, signer, pki, capsys):
    ca, _ = pki
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    flags = ["--url", broker.tls_url, "--tls-trust-cert-path", str(ca.pem), "--auth-plugin", plugin,
             "--auth-params", f"token:{signer.token('admin')}"]
    assert main(["client", *flags, "produce", "cli-secured", "-m", "over tls"]) == 0
    assert main(["client", *flags[:4], "--auth-plugin", "Kerberos", "produce", "cli-secured", "-m", "x"]) == 2
    assert "--auth-plugin" in capsys.readouterr().err
