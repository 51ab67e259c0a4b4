"""A producer or consumer created while its broker restarts waits for it, up to the operation
timeout, with either client: the official clients retry their lookups (partition metadata
included) and registrations until then, and magnetar.client does the same."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from standalone import Standalone

import magnetar.client

MODULES = {"official": pulsar, "magnetar": magnetar.client}


@pytest.fixture(params=MODULES)
def stopped(request: pytest.FixtureRequest, broker_factory) -> Iterator[tuple[Any, Standalone]]:
    """A function making a client of the module under test on a broker, and that broker, stopped."""
    broker = broker_factory()
    clients: list[Any] = []

    def client(timeout: float) -> Any:
        module = MODULES[request.param]
        kwargs: dict[str, Any] = {"operation_timeout_seconds": timeout}
        if module is pulsar:
            kwargs["logger"] = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        clients.append(module.Client(broker.url, **kwargs))
        return clients[-1]

    broker.stop()
    yield client, broker
    for made in clients:
        made.close()


def test_a_producer_and_a_consumer_created_during_a_restart_wait_for_the_broker(stopped):
    make_client, broker = stopped
    client = make_client(60)
    made: dict[str, Any] = {}
    trying = threading.Event()

    def create() -> None:
        trying.set()
        try:
            made["consumer"] = client.subscribe("restarting", "sub")
            made["producer"] = client.create_producer("restarting")
        except Exception as exc:  # reported below
            made["error"] = exc

    creating = threading.Thread(target=create)
    creating.start()
    assert trying.wait(10)
    broker.start()  # the first attempts, made before it listens, were refused
    creating.join(90)
    assert "error" not in made, made.get("error")
    made["producer"].send(b"after the restart")
    assert made["consumer"].receive(timeout_millis=10_000).data() == b"after the restart"


def test_a_broker_that_stays_down_is_a_timeout(stopped):
    make_client, _ = stopped
    with pytest.raises(Exception) as failure:
        make_client(2).create_producer("down")
    assert type(failure.value).__name__ == "Timeout", repr(failure.value)  # pulsar.Timeout, errors.Timeout
