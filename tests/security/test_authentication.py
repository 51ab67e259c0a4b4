"""Authentication with the official client's plugins against a real broker: tokens (a
string and a supplier, refreshed by AUTH_CHALLENGE before they expire), TLS client
certificates (the role is the CN), basic auth against an htpasswd file, the admin API's
Bearer / Basic / certificate credentials, and what is refused."""

from __future__ import annotations

import base64
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pulsar
import pytest
from admin_http import http
from passlib.apache import HtpasswdFile
from passlib.hash import apr_md5_crypt, bcrypt, des_crypt
from polling import wait_for
from rawclient import RawClient
from security_helpers import TokenSigner, assert_producer_refused, cert_client, make_client, round_trip
from standalone import Standalone, run_standalone

from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand

#: user -> (password, hash scheme) in the broker's htpasswd file
USERS = {"carol": ("carol-pw", bcrypt.using(ident="2y", rounds=5)), "dave": ("dave-pw", apr_md5_crypt),
         "erin": ("erinpw", des_crypt)}
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"


@pytest.fixture(scope="module")
def secured(pki, signer, tmp_path_factory) -> Iterator[Standalone]:
    """Token, TLS and basic providers; the basic users and `admin` are super users."""
    ca, _ = pki
    directory = tmp_path_factory.mktemp("secured")
    htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
    for user, (password, scheme) in USERS.items():
        htpasswd.set_hash(user, scheme.hash(password))
    htpasswd.save()
    pair = ca.issue("broker", "broker", server=True)
    broker = Standalone(directory / "data", [
        f"tlsCertificateFilePath={pair.cert}", f"tlsKeyFilePath={pair.key}", f"tlsTrustCertsFilePath={ca.pem}",
        "brokerServicePortTls=0", "webServicePortTls=0",
        "authenticationEnabled=true", f"authenticationProviders={TOKEN_PROVIDER},tls,basic", signer.setting,
        f"basicAuthConf={directory / 'htpasswd'}", "anonymousUserRole=anonymous", "authenticationRefreshCheckSeconds=1",
        "authorizationEnabled=true", f"superUserRoles=admin,{','.join(USERS)}",
    ]).start()
    yield broker
    broker.stop()


def refused_at_connect(url: str, reason: str, broker: Standalone, **kwargs) -> None:
    """The official client is told it may not use the broker, and the broker logged why (once more than before)."""
    before = broker.log().count(reason)
    client = make_client(url, operation_timeout_seconds=2, **kwargs)
    assert_producer_refused(client, "refused", pulsar.AuthenticationError)
    assert wait_for(lambda: broker.log().count(reason) > before, timeout=5), reason


@pytest.mark.parametrize("form", ["string", "supplier"])
def test_token_authentication(secured, signer, form):
    token = signer.token("admin")
    auth = pulsar.AuthenticationToken(token if form == "string" else lambda: token)
    assert round_trip(make_client(secured.url, authentication=auth), f"token-{form}") == b"secured"


def test_a_supplied_token_is_refreshed_before_it_expires(secured, signer):
    issued = []

    def supplier() -> str:
        issued.append(signer.token("admin", expires_in=2))
        return issued[-1]

    client = make_client(secured.url, authentication=pulsar.AuthenticationToken(supplier))
    try:
        producer = client.create_producer("refreshed")
        refreshed = secured.log().count("refreshed its credentials for role 'admin'")
        assert wait_for(lambda: secured.log().count("refreshed its credentials for role 'admin'") >= refreshed + 2,
                        timeout=15)
        producer.send(b"still connected")  # the same connection, past the first token's expiry
        assert len(issued) >= 3
    finally:
        client.close()


def test_an_expired_token_is_refused(secured, signer):
    refused_at_connect(secured.url, "Unable to authenticate: the token has expired", secured,
                       authentication=pulsar.AuthenticationToken(signer.token("admin", expires_in=-60)))


def test_a_token_that_expires_while_connected_closes_the_connection(secured, signer):
    client = make_client(secured.url, authentication=pulsar.AuthenticationToken(signer.token("admin", expires_in=2)))
    try:
        client.create_producer("expiring")
        assert wait_for(lambda: "Unable to refresh authentication: the token has expired" in secured.log(),
                        timeout=15)
    finally:
        client.close()


def test_a_token_signed_with_another_key_is_refused(secured, tmp_path):
    other = TokenSigner(tmp_path)
    refused_at_connect(secured.url, "its signature does not verify with this broker's tokenSecretKey", secured,
                       authentication=pulsar.AuthenticationToken(other.token("admin")))


def test_a_one_megabyte_token_is_refused_and_others_are_served(secured, signer):
    refused_at_connect(secured.url, "the token is 1048576 bytes", secured,
                       authentication=pulsar.AuthenticationToken("x" * (1 << 20)))
    auth = pulsar.AuthenticationToken(signer.token("admin"))
    assert round_trip(make_client(secured.url, authentication=auth), "after-big-token") == b"secured"


def test_tls_authentication_takes_the_role_from_the_certificate(secured, pki):
    ca, _ = pki
    admin = ca.issue("client-admin", "admin")
    assert round_trip(cert_client(secured.tls_url, ca, admin), "tls-auth") == b"secured"
    nobody = ca.issue("client-nobody", "nobody")
    assert_producer_refused(cert_client(secured.tls_url, ca, nobody), "tls-auth-nobody", pulsar.AuthorizationError)
    assert "role 'nobody' is not authorized to lookup" in secured.log()


@pytest.mark.parametrize("user", list(USERS))
def test_basic_authentication_with_each_htpasswd_scheme(secured, user):
    password, _ = USERS[user]
    client = make_client(secured.url, authentication=pulsar.AuthenticationBasic(user, password))
    assert round_trip(client, f"basic-{user}") == b"secured"


def test_basic_authentication_with_a_wrong_password_is_refused(secured):
    refused_at_connect(secured.url, "unknown user 'carol' or wrong password", secured,
                       authentication=pulsar.AuthenticationBasic("carol", "not-her-password"))


def test_admin_api_takes_bearer_basic_and_client_certificates(secured, signer, pki):
    tenants = f"{secured.admin_url}/admin/v2/tenants"
    assert http("GET", tenants, headers=signer.bearer("admin"))[0] == 200
    basic = base64.b64encode(b"dave:dave-pw").decode()
    assert http("GET", tenants, headers={"Authorization": f"Basic {basic}"})[0] == 200
    ca, _ = pki
    admin = ca.issue("https-admin", "admin")
    context = ssl.create_default_context(cafile=str(ca.pem))
    context.load_cert_chain(admin.cert, admin.key)
    assert http("GET", f"{secured.admin_tls_url}/admin/v2/tenants", context=context)[0] == 200
    status, _, body = http("GET", tenants, headers={"Authorization": "Bearer not-a-token"})
    assert status == 401 and b"Unable to authenticate" in body
    status, _, body = http("GET", tenants)  # no credentials: the anonymous role, which is no super user
    assert status == 403 and b"'anonymous'" in body


@pytest.fixture(scope="module")
def rsa_broker(tmp_path_factory) -> Iterator[tuple[Standalone, str]]:
    """Tokens checked with an RS256 public key made by `magnetar tokens`; no anonymous role."""
    directory = tmp_path_factory.mktemp("rsa")
    private, public = directory / "private.key", directory / "public.key"
    tokens = [sys.executable, "-m", "magnetar", "tokens"]
    subprocess.run([*tokens, "create-key-pair", "--output-private-key", str(private),
                    "--output-public-key", str(public)], check=True)
    token = subprocess.run([*tokens, "create", "--private-key", f"file://{private}", "--subject", "admin",
                            "--expiry-time", "1h"], check=True, capture_output=True, text=True).stdout.strip()
    broker = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", f"tokenPublicKey=file://{public}",
        "authorizationEnabled=true", "superUserRoles=admin"]).start()
    yield broker, token
    broker.stop()


def test_rs256_tokens_from_the_tokens_command(rsa_broker):
    broker, token = rsa_broker
    client = make_client(broker.url, authentication=pulsar.AuthenticationToken(token))
    assert round_trip(client, "rs256") == b"secured"


def test_without_credentials_or_anonymous_role_nothing_is_served(rsa_broker):
    broker, _ = rsa_broker
    refused_at_connect(broker.url, "the client presented no credentials", broker)
    for method, path in (("GET", "/admin/v2/tenants"), ("DELETE", "/admin/v2/persistent/public/default/t"),
                         ("GET", "/admin/v2/persistent/public/default/t/stats"),
                         ("PUT", "/admin/v2/namespaces/public/other")):
        status, _, body = http(method, broker.admin_url + path)
        assert status == 401, (method, path, status, body)
        assert b"reason" in body


@pytest.mark.parametrize(("settings", "named"), [
    (["authenticationEnabled=true", "authenticationProviders=kerberos"], "authenticationProviders"),
    (["authenticationEnabled=true", "authenticationProviders=token"], "tokenSecretKey or tokenPublicKey"),
    (["authenticationEnabled=true", "authenticationProviders=token", "tokenSecretKey=file:///nonexistent"],
     "tokenSecretKey"),
    (["authenticationEnabled=true", "authenticationProviders=basic"], "basicAuthConf"),
    (["authorizationEnabled=true"], "authenticationEnabled"),
])
def test_bad_auth_settings_stop_the_broker_naming_the_key(settings, named, tmp_path):
    args = [arg for item in settings for arg in ("-c", item)]
    result = run_standalone("--data-dir", str(tmp_path / "d"), *args)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr


def test_tls_auth_with_insecure_connections_is_refused_at_start(pki, tmp_path):
    """tlsAllowInsecureConnection asks clients for no certificate, so the tls provider could
    never authenticate anyone: the broker must say so instead of refusing every client."""
    ca, _ = pki
    pair = ca.issue("broker-insecure", "broker", server=True)
    result = run_standalone("--data-dir", str(tmp_path / "d"), "-c", "authenticationEnabled=true",
                            "-c", "authenticationProviders=tls", "-c", f"tlsCertificateFilePath={pair.cert}",
                            "-c", f"tlsKeyFilePath={pair.key}", "-c", f"tlsTrustCertsFilePath={ca.pem}",
                            "-c", "brokerServicePortTls=0", "-c", "tlsAllowInsecureConnection=true")
    assert result.returncode == 2, result.stderr
    assert "tlsAllowInsecureConnection" in result.stderr


def _raw_connect(raw: RawClient, method: str, data: bytes) -> None:
    raw.command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="raw", protocol_version=20,
                                                            auth_method_name=method, auth_data=data)))


def test_on_the_wire_refusals_and_role_changes(secured, signer):
    raw = RawClient(secured.url)  # refused: ERROR with request id -1 (as Java's), then closed
    _raw_connect(raw, "token", b"garbage")
    error = raw.expect(T.ERROR).error
    assert (error.request_id, error.error) == ((1 << 64) - 1, pb.AuthenticationError)
    assert raw.closed_by_peer()
    raw.close()
    raw = RawClient(secured.url)  # fresh credentials must name the same role
    _raw_connect(raw, "token", signer.token("admin").encode())
    raw.expect(T.CONNECTED)
    raw.command(T(type=T.AUTH_RESPONSE, authResponse=pb.CommandAuthResponse(
        response=pb.AuthData(auth_method_name="token", auth_data=signer.token("mallory").encode()))))
    assert raw.closed_by_peer()
    raw.close()
    raw = RawClient(secured.url)  # a second CONNECT
    raw.connect()
    raw.command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="raw")))
    assert raw.closed_by_peer()
    raw.close()
