"""A client whose credentials are refused learns it at once and why, with both clients, and
nothing of the credentials comes back (issue 43).

Pulsar answers a refused CONNECT with ERROR (AuthenticationError, request id -1) and closes;
the official client's C++ core drops that ERROR unread (apache/pulsar-client-cpp#227) and
retried until its operation timeout, so its user saw Timeout after 30 s. The clients here keep
the default timeout: a Timeout instead of AuthenticationError is the bug coming back. The
admin API answers the same credentials 401 with the same reason."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import jwt
import pytest
from admin_http import http
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from passlib.apache import HtpasswdFile
from passlib.hash import bcrypt
from polling import wait_for
from rawclient import RawClient, send_frame
from security_helpers import TokenSigner
from standalone import Standalone

import magnetar.client
from magnetar.wire.frames import encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
PASSWORD = "carol-secret-pw"


@dataclass(frozen=True)
class Case:
    """Credentials a broker refuses (`auth`: (method, params) for a client: `token` and the
    token, `basic` and (user, password), or None), the Authorization header the admin API
    gets, what the refusal must say, and what it must not."""

    auth: tuple[str, object] | None
    header: str | None
    says: str
    secrets: tuple[str, ...] = ()


@pytest.fixture(scope="module")
def signer(tmp_path_factory) -> TokenSigner:
    return TokenSigner(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def broker(signer, tmp_path_factory) -> Iterator[Standalone]:
    """Tokens and basic credentials (bcrypt: checked on a worker thread), no anonymous role."""
    directory = tmp_path_factory.mktemp("refusals")
    htpasswd = HtpasswdFile(str(directory / "htpasswd"), new=True)
    htpasswd.set_hash("carol", bcrypt.using(ident="2y", rounds=5).hash("the-real-password"))
    htpasswd.save()
    broker = Standalone(directory / "data", [
        "authenticationEnabled=true", "authenticationProviders=token,basic", signer.setting,
        f"basicAuthConf={directory / 'htpasswd'}"]).start()
    yield broker
    broker.stop()


def _token_case(token: str, says: str) -> Case:
    return Case(("token", token), f"Bearer {token}", says, (token, token.rsplit(".", 1)[-1]))


def _cases(signer: TokenSigner, tmp_path) -> dict[str, Case]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    rsa_pem = rsa_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    basic = base64.b64encode(f"carol:{PASSWORD}".encode()).decode()
    return {
        "no credentials": Case(None, None, "presented no credentials"),
        "another HS256 key": _token_case(TokenSigner(tmp_path).token("admin"),
                                         "does not verify with this broker's tokenSecretKey"),
        "an RS256 key": _token_case(jwt.encode({"sub": "admin"}, rsa_pem, algorithm="RS256"),
                                    "signed with 'RS256', not with this broker's tokenSecretKey"),
        "expired": _token_case(signer.token("admin", expires_in=-60), "the token has expired ("),
        "malformed": _token_case("not.a-jwt", "not a JWT"),
        "a wrong password": Case(("basic", ("carol", PASSWORD)), f"Basic {basic}",
                                 "unknown user 'carol' or wrong password", (PASSWORD, basic)),
    }


CASE_NAMES = ["no credentials", "another HS256 key", "an RS256 key", "expired", "malformed", "a wrong password"]

#: The official client in a process of its own, as a user runs it: its C++ core's logger is one
#: per process (the first client's), and its log, on stdout, is where it says why.
OFFICIAL = """
import json, re, sys
import pulsar
url, auth, operation, topic = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
options = {}
if auth is not None:
    method, params = auth
    options["authentication"] = (pulsar.AuthenticationToken(params) if method == "token"
                                 else pulsar.AuthenticationBasic(*params))
client = pulsar.Client(url, **options)
run = {"producer": lambda: client.create_producer(topic), "subscribe": lambda: client.subscribe(topic, "s"),
       "pattern": lambda: client.subscribe(re.compile(topic + ".*"), "s"),
       "reader": lambda: client.create_reader(topic, pulsar.MessageId.earliest)}[operation]
try:
    run()
except pulsar.PulsarException as exc:
    print("raised", type(exc).__name__, file=sys.stderr)
client.close()
"""


def _refused(kind: str, url: str, case: Case, operation: str = "producer", raises: str = "AuthenticationError") -> str:
    """What a client tells its user when `case`'s credentials are refused: magnetar.client's
    exception, or the official client's log (its exception carries the code only). Fails on
    any exception but `raises`, a Timeout included: the clients keep their default 30 s
    operation timeout."""
    topic = f"persistent://public/default/refused-{uuid.uuid4().hex[:8]}"
    if kind == "official":
        ran = subprocess.run([sys.executable, "-c", OFFICIAL, url, json.dumps(case.auth), operation, topic],
                             capture_output=True, text=True, timeout=120, check=False)
        assert f"raised {raises}" in ran.stderr, ran.stdout[-3000:] + ran.stderr[-3000:]
        return ran.stdout
    auth = None
    if case.auth is not None:
        method, params = case.auth
        auth = (magnetar.client.AuthenticationToken(params) if method == "token"
                else magnetar.client.AuthenticationBasic(*params))
    client = magnetar.client.Client(url, authentication=auth)
    try:
        with pytest.raises(magnetar.client.AuthenticationError) as raised:
            client.create_producer(topic)
    finally:
        client.close()
    return str(raised.value)


@pytest.mark.parametrize("kind", ["official", "magnetar"])
@pytest.mark.parametrize("name", CASE_NAMES)
def test_a_refused_client_is_told_at_once_and_why(broker, signer, tmp_path, kind, name):
    case = _cases(signer, tmp_path)[name]
    told = _refused(kind, broker.url, case)
    assert "Unable to authenticate" in told and case.says in told, told
    assert wait_for(lambda: case.says in broker.log(), timeout=10)
    for secret in (*case.secrets, signer.key.hex()):
        assert secret not in told and secret not in broker.log(), secret


@pytest.mark.parametrize("operation", ["subscribe", "pattern", "reader"])
def test_every_way_in_is_refused_at_once(broker, signer, tmp_path, operation):
    """A regex consumer's first request lists the namespace, whose every failure the official
    client reports as LookupError; the reason is in its log all the same."""
    case = _cases(signer, tmp_path)["expired"]
    raises = "LookupError" if operation == "pattern" else "AuthenticationError"
    assert case.says in _refused("official", broker.url, case, operation, raises)


@pytest.mark.parametrize("name", CASE_NAMES)
def test_the_admin_api_answers_401_with_the_reason(broker, signer, tmp_path, name):
    case = _cases(signer, tmp_path)[name]
    headers = {"Authorization": case.header} if case.header is not None else {}
    status, _, body = http("GET", f"{broker.admin_url}/admin/v2/tenants", headers=headers)
    text = body.decode()
    assert status == 401 and '"reason"' in text and case.says in text, (status, text)
    for secret in case.secrets:
        assert secret not in text


def test_the_admin_cli_says_why_in_one_line(broker, signer, tmp_path):
    token = _cases(signer, tmp_path)["an RS256 key"].secrets[0]
    result = subprocess.run([sys.executable, "-m", "magnetar", "admin", "--admin-url", broker.admin_url,
                             "--auth-plugin", "AuthenticationToken", "--auth-params", f"token:{token}",
                             "tenants", "list"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "signed with 'RS256'" in result.stderr and "(401)" in result.stderr, result.stderr
    assert token not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _cpp_connect(raw: RawClient, token: bytes) -> None:
    connect = pb.CommandConnect(client_version="Pulsar-CPP-v4.2.0", protocol_version=20,
                                auth_method_name="token", auth_data=token)
    raw.command(T(type=T.CONNECT, connect=connect))


def test_a_refused_cpp_client_is_served_nothing(broker, signer):
    """The official C++ client is answered CONNECTED so that it reads the refusal; a peer that
    says it is one and sends commands at once (no lookup) gets the refusal to the first and
    nothing else: no producer, no message, no subscription."""
    topic = f"persistent://public/default/raw-{uuid.uuid4().hex[:8]}"
    raw = RawClient(broker.url)
    try:
        _cpp_connect(raw, b"forged")
        raw.expect(T.CONNECTED)
        raw.write(b"".join([  # in one write: the broker reads them together
            encode_command(T(type=T.PRODUCER, producer=pb.CommandProducer(topic=topic, producer_id=1,
                                                                          request_id=7))),
            send_frame(1, 0, b"smuggled"),
            encode_command(T(type=T.SUBSCRIBE, subscribe=pb.CommandSubscribe(
                topic=topic, subscription="s", subType=pb.CommandSubscribe.Exclusive, consumer_id=1,
                request_id=8)))]))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == (7, pb.AuthenticationError)
        assert "not a JWT" in error.message
        assert raw.closed_by_peer()
    finally:
        raw.close()
    status, _, body = http("GET", f"{broker.admin_url}/admin/v2/persistent/public/default",
                           headers=signer.bearer("admin"))
    assert status == 200 and topic.rsplit("/", 1)[-1] not in body.decode()


def test_other_clients_get_pulsars_answer(broker):
    """A client that reads ERROR to CONNECT (Java's; here a raw one) gets it, as from Pulsar."""
    raw = RawClient(broker.url)
    try:
        raw.command(T(type=T.CONNECT, connect=pb.CommandConnect(client_version="Pulsar-Java-v4.0.0",
                                                                protocol_version=20)))
        error = raw.expect(T.ERROR).error
        assert (error.request_id, error.error) == ((1 << 64) - 1, pb.AuthenticationError)
        assert "presented no credentials" in error.message
        assert raw.closed_by_peer()
    finally:
        raw.close()
