"""AuthenticationService.authenticate_async, which the binary protocol, the admin API and Kafka's
SASL share: a quick provider has answered when it returns, a slow one (bcrypt) answers from
a worker thread while the event loop goes on, and a refusal is an AuthenticationError either way.
The real basic provider, on an htpasswd file written here."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from passlib.apache import HtpasswdFile
from passlib.hash import bcrypt

from magnetar.broker.auth.authentication import AuthenticationError, AuthenticationService, Credentials
from magnetar.broker.config import ServiceConfiguration


@pytest.fixture
def service(tmp_path: Path) -> AuthenticationService:
    htpasswd = HtpasswdFile(str(tmp_path / "htpasswd"), new=True)
    htpasswd.set_hash("carol", bcrypt.using(ident="2y", rounds=10).hash("carol-pw"))
    htpasswd.save()
    return AuthenticationService(ServiceConfiguration(
        authenticationEnabled=True, authenticationProviders=["basic"], basicAuthConf=str(tmp_path / "htpasswd"),
        anonymousUserRole="anonymous"))


def test_a_quick_answer_is_settled_on_return(service):
    async def check() -> None:
        pending = service.authenticate_async(Credentials("none"))
        assert pending.done() and pending.result().role == "anonymous"

    asyncio.run(check())


def test_a_slow_provider_answers_later_while_the_loop_runs(service):
    async def check() -> None:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        pending = service.authenticate_async(Credentials("basic", b"carol:carol-pw"))
        assert not pending.done()  # handed to a worker thread, not checked on the loop
        assert (await pending).role == "carol"
        assert ticks > 1  # the loop kept running during the bcrypt check
        ticker.cancel()
        refused = service.authenticate_async(Credentials("basic", b"carol:wrong"))
        with pytest.raises(AuthenticationError, match="wrong password"):
            await refused

    asyncio.run(check())


def test_a_quick_refusal_is_a_settled_error(tmp_path):
    service = AuthenticationService(ServiceConfiguration(authenticationEnabled=True, authenticationProviders=[]))

    async def check() -> None:
        pending = service.authenticate_async(Credentials("none"))
        assert pending.done() and isinstance(pending.exception(), AuthenticationError)

    asyncio.run(check())
