"""`magnetar tokens` (as `pulsar tokens`) and the token provider's checks that need no
broker: ES256 keys, audiences, the claim naming the role, key settings read every way
Pulsar's keys are written."""

from __future__ import annotations

import base64
import io
import json
import sys
import time
from dataclasses import dataclass

import jwt
import pytest
from cryptography.hazmat.primitives.serialization import load_der_private_key

from magnetar.broker.auth.authentication import AuthenticationError, Credentials
from magnetar.broker.auth.providers.token import TokenAuthenticationProvider
from magnetar.broker.config import ServiceConfiguration
from magnetar.cli import main


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def tokens(capsys, monkeypatch):
    """Run `magnetar tokens ...` through the CLI's entry point, in this process (it starts
    nothing, and a process per call would cost seconds each)."""

    def run(*args: str, stdin: str | None = None) -> Result:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        code = main(["tokens", *args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


def provider(**settings: str) -> TokenAuthenticationProvider:
    config = ServiceConfiguration()
    config.apply(settings)
    return TokenAuthenticationProvider(config)


def test_secret_key_token_show_and_validate(tokens, tmp_path):
    key = tmp_path / "secret.key"
    assert tokens("create-secret-key", "--output", str(key)).returncode == 0
    assert len(key.read_bytes()) == 32
    printed = tokens("create-secret-key", "--base64")
    assert len(base64.b64decode(printed.stdout.strip())) == 32
    created = tokens("create", "--secret-key", f"file://{key}", "--subject", "alice", "--expiry-time", "2h")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    claims = jwt.decode(token, key.read_bytes(), algorithms=["HS256"])
    assert claims["sub"] == "alice" and 7100 < claims["exp"] - time.time() <= 7200
    shown = tokens("show", "-i", stdin=token)
    assert json.loads(shown.stdout.split("---")[1]) == claims
    assert tokens("validate", "-sk", f"data:;base64,{base64.b64encode(key.read_bytes()).decode()}", token) \
        .returncode == 0
    expired = tokens("create", "-sk", str(key), "-s", "alice", "-e", "0s").stdout.strip()
    refused = tokens("validate", "-sk", str(key), expired)
    assert refused.returncode == 1 and "expired" in refused.stderr


@pytest.mark.parametrize(("args", "named"), [
    (["create", "-sk", "nope", "-s", "x"], "--secret-key"),
    (["create", "-sk", "/nonexistent/key", "-s", "x"], "--secret-key"),
    (["create-secret-key", "-a", "RS256"], "--signature-algorithm"),
])
def test_bad_arguments_name_the_flag(tokens, args, named):
    result = tokens(*args)
    assert result.returncode == 2
    assert named in result.stderr


def test_bad_expiry_names_the_flag(tokens, tmp_path):
    key = tmp_path / "secret.key"
    tokens("create-secret-key", "-o", str(key))
    result = tokens("create", "-sk", str(key), "-s", "x", "--expiry-time", "soon")
    assert result.returncode == 2 and "--expiry-time" in result.stderr


def test_es256_key_pair(tokens, tmp_path):
    private, public = tmp_path / "private.der", tmp_path / "public.der"
    assert tokens("create-key-pair", "-a", "ES256", "--output-private-key", str(private),
                  "--output-public-key", str(public)).returncode == 0
    token = jwt.encode({"sub": "edge"}, load_der_private_key(private.read_bytes(), None), algorithm="ES256")
    checker = provider(tokenPublicKey=f"file://{public}", tokenPublicAlg="ES256")
    assert checker.authenticate(Credentials("token", token.encode())).role == "edge"
    rs256 = provider(tokenPublicKey=f"file://{public}")  # the default algorithm, RS256, does not match
    with pytest.raises(AuthenticationError):
        rs256.authenticate(Credentials("token", token.encode()))


def test_audience_and_role_claim(tmp_path):
    key = tmp_path / "secret.key"
    key.write_bytes(b"k" * 32)
    checker = provider(tokenSecretKey=str(key), tokenAuthClaim="role", tokenAudienceClaim="aud",
                       tokenAudience="magnetar")
    good = jwt.encode({"role": "svc", "aud": ["other", "magnetar"]}, key.read_bytes())
    assert checker.authenticate(Credentials("token", good.encode())).role == "svc"
    for claims, reason in (({"role": "svc", "aud": "other"}, "audience"), ({"sub": "svc", "aud": "magnetar"},
                                                                          "'role' claim")):
        with pytest.raises(AuthenticationError, match=reason):
            checker.authenticate(Credentials("token", jwt.encode(claims, key.read_bytes()).encode()))


def test_expiry_is_carried_for_refresh(tmp_path):
    key = tmp_path / "secret.key"
    key.write_bytes(b"k" * 32)
    expires = int(time.time()) + 60
    principal = provider(tokenSecretKey=str(key)).authenticate(
        Credentials("token", jwt.encode({"sub": "a", "exp": expires}, key.read_bytes()).encode()))
    assert principal.expires_at == expires
