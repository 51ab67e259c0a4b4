from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from hypothesis import settings
from seeds import draw_run_seed
from standalone import Standalone

# Hypothesis' default deadline (200 ms an example) fails a test whenever a loaded machine is
# slow, which says nothing about the code; pytest-timeout still bounds each test. Mutation
# runs (docs/testing.md) draw the same examples every time, so a mutant's verdict is stable.
settings.register_profile("magnetar", deadline=None)
settings.register_profile("mutation", deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "magnetar"))


def pytest_configure(config: pytest.Config) -> None:
    draw_run_seed()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator:
    """Start brokers with chosen config; every one is stopped at the end."""
    started: list[Standalone] = []

    def start(*config: str, data_dir: Path | None = None) -> Standalone:
        broker = Standalone(data_dir or tmp_path / f"data{len(started)}", list(config)).start()
        started.append(broker)
        return broker

    yield start
    for broker in started:
        with contextlib.suppress(Exception):
            broker.stop()


@pytest.fixture
def broker(broker_factory) -> Standalone:
    return broker_factory()


@pytest.fixture
def client_factory() -> Iterator:
    clients: list[pulsar.Client] = []

    def make(url: str, **kwargs) -> pulsar.Client:
        kwargs.setdefault("operation_timeout_seconds", 10)
        kwargs.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        client = pulsar.Client(url, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture
def client(broker: Standalone, client_factory) -> pulsar.Client:
    return client_factory(broker.url)
