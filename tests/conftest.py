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

import magnetar.client

# Hypothesis' default deadline (200 ms an example) fails a test whenever a loaded machine is
# slow, which says nothing about the code; pytest-timeout still bounds each test. Mutation
# runs (docs/testing.md) draw the same examples every time, so a mutant's verdict is stable.
settings.register_profile("magnetar", deadline=None)
settings.register_profile("mutation", deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "magnetar"))


def pytest_configure(config: pytest.Config) -> None:
    draw_run_seed()


@pytest.fixture
def brokers() -> Iterator[list[Standalone]]:
    """Brokers a test starts and appends here: stopped at its end, whatever happened (a failed
    assertion too), for tests that start them with more than config (a file size limit, a
    data dir of their own)."""
    started: list[Standalone] = []
    yield started
    for broker in started:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.stop()


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


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Standalone]:
    """One default broker for a whole test module whose cases each use their own topic:
    starting one costs about a second."""
    name = request.module.__name__.rpartition(".")[2]
    broker = Standalone(tmp_path_factory.mktemp(name) / "data").start()
    yield broker
    broker.stop()


def official_client(url: str, **kwargs) -> pulsar.Client:
    """The official client with the tests' defaults: a 10 s operation timeout, errors-only logs."""
    kwargs.setdefault("operation_timeout_seconds", 10)
    kwargs.setdefault("logger", pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    return pulsar.Client(url, **kwargs)


@pytest.fixture(scope="module")
def module_client(module_broker: Standalone) -> Iterator[pulsar.Client]:
    """The official client on `module_broker`, for the whole module."""
    client = official_client(module_broker.url)
    yield client
    client.close()


@pytest.fixture
def client_factory() -> Iterator:
    clients: list[pulsar.Client] = []

    def make(url: str, **kwargs) -> pulsar.Client:
        client = official_client(url, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture(params=["official", "magnetar"])
def api(request, client_factory):
    """Each client in turn, the official one and magnetar.client: the client module (its
    exception classes have the same names) and a maker of clients (closed at the end)."""
    made = []

    def make(url: str, **kwargs):
        if request.param == "official":
            return client_factory(url, **kwargs)
        client = magnetar.client.Client(url, operation_timeout_seconds=10, **kwargs)
        made.append(client)
        return client

    yield (pulsar if request.param == "official" else magnetar.client), make
    for client in made:
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture
def client(broker: Standalone, client_factory) -> pulsar.Client:
    return client_factory(broker.url)
