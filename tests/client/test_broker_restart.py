"""A producer or consumer created while its broker restarts waits for it, up to the operation
timeout, with either client: the official clients retry their lookups (partition metadata
included) and registrations until then, and magnetar.client does the same."""

from __future__ import annotations

import threading
from typing import Any

import pulsar
import pytest

import magnetar.client

MODULES = {"official": pulsar, "magnetar": magnetar.client}


def _client(module: Any, url: str, timeout: float) -> Any:
    kwargs: dict[str, Any] = {"operation_timeout_seconds": timeout}
    if module is pulsar:
        kwargs["logger"] = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    return module.Client(url, **kwargs)


@pytest.mark.parametrize("api", MODULES)
def test_a_producer_and_a_consumer_created_during_a_restart_wait_for_the_broker(broker_factory, api):
    broker = broker_factory()
    client = _client(MODULES[api], broker.url, 60)
    try:
        broker.stop()
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
    finally:
        client.close()


@pytest.mark.parametrize("api", MODULES)
def test_a_broker_that_stays_down_is_a_timeout(broker_factory, api):
    broker = broker_factory()
    client = _client(MODULES[api], broker.url, 2)
    try:
        broker.stop()
        with pytest.raises(Exception) as failure:
            client.create_producer("down")
        assert type(failure.value).__name__ == "Timeout", repr(failure.value)  # pulsar.Timeout, errors.Timeout
    finally:
        client.close()
