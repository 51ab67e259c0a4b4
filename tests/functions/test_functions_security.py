"""The worker's settings: on a broker with token authentication and authorization, managing
functions needs the `functions` grant (or a tenant admin, a super user), and the worker's
instances and trigger present brokerClientAuthenticationParameters to the binary protocol and
the state API; `--no-functions-worker` runs none."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest
from fn_helpers import CODE, receive_all, wait_consumers
from polling import wait_for
from procfs import descendants
from standalone import Standalone

from magnetar.admin.client import AdminClient, AdminError
from magnetar.admin.functions_client import FunctionsAdmin
from magnetar.credentials.authentication import AuthenticationToken

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[Standalone, bytes]]:
    key = secrets.token_bytes(32)
    (tmp_path / "secret.key").write_bytes(key)
    worker = jwt.encode({"sub": "worker"}, key, algorithm="HS256")
    broker = Standalone(tmp_path / "data", [
        "authenticationEnabled=true", "authenticationProviders=token", f"tokenSecretKey=file://{tmp_path}/secret.key",
        "authorizationEnabled=true", "superUserRoles=admin,worker",
        f"brokerClientAuthenticationPlugin={TOKEN_PLUGIN}", f"brokerClientAuthenticationParameters=token:{worker}",
    ]).start()
    yield broker, key
    broker.stop()


def functions_as(broker: Standalone, key: bytes, role: str) -> FunctionsAdmin:
    token = jwt.encode({"sub": role}, key, algorithm="HS256")
    return FunctionsAdmin(AdminClient(broker.admin_url, authentication=AuthenticationToken(token)))


def test_functions_under_authentication_and_authorization(secured: tuple[Standalone, bytes]) -> None:
    broker, key = secured
    admin = functions_as(broker, key, "admin")
    admin.admin.grant_permission("public/default", "dev", ["functions"])
    admin.admin.grant_permission("public/default", "app", ["produce", "consume"])
    dev, app = functions_as(broker, key, "dev"), functions_as(broker, key, "app")
    excl = {"tenant": "public", "namespace": "default", "name": "excl", "inputs": ["sec-in"], "output": "sec-out",
            "className": "exclamation.ExclamationFunction"}
    with pytest.raises(AdminError) as refused:
        app.create(excl, CODE / "exclamation.py")
    assert refused.value.status == 403
    dev.create(excl, CODE / "exclamation.py")
    count = {**excl, "name": "count", "className": "word_count.WordCountFunction", "output": None}
    dev.create(count, CODE / "word_count.py")
    wait_consumers(admin.admin, excl, 1)
    wait_consumers(admin.admin, count, 1)
    with pytest.raises(AdminError) as refused:
        app.status("public", "default", "excl")
    assert refused.value.status == 403

    token = jwt.encode({"sub": "app"}, key, algorithm="HS256")
    client = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(token),
                           logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    out = client.subscribe("sec-out", "check")
    client.create_producer("sec-in").send(b"secure words")
    assert receive_all(out, 1)[0].data() == b"secure words!"

    def counted() -> bool:
        try:
            return dev.query_state("public", "default", "count", "secure")["numberValue"] == 1
        except AdminError as error:
            assert error.status == 404, error
            return False

    assert wait_for(counted)
    assert dev.trigger("public", "default", "excl", b"hi") == "hi!"
    client.close()


def test_code_that_takes_too_long_to_load_is_refused_within_the_request_budget(tmp_path: Path) -> None:
    broker = Standalone(tmp_path / "data", ["webServiceRequestTimeoutSeconds=3"]).start()
    try:
        functions = FunctionsAdmin(AdminClient(broker.admin_url))
        with pytest.raises(AdminError) as refused:
            functions.create({"tenant": "public", "namespace": "default", "name": "slow", "inputs": ["in"],
                              "className": "slow_import.process"}, CODE / "slow_import.py")
        assert refused.value.status == 400 and "took over 2 s" in refused.value.reason, refused.value
        assert functions.list("public", "default") == []
        assert broker.proc is not None
        assert descendants(broker.proc.pid) == [broker.proc.pid], "no check outlives its request"
    finally:
        broker.stop()


def test_no_functions_worker(tmp_path: Path) -> None:
    broker = Standalone(tmp_path / "data", args=["--no-functions-worker"]).start()
    try:
        with pytest.raises(AdminError) as refused:
            FunctionsAdmin(AdminClient(broker.admin_url)).list("public", "default")
        assert refused.value.status == 404
    finally:
        broker.stop()

