"""pytest fixtures for tests that need a Pulsar broker (see docs/testing.md):

- `pulsar_broker` (session): one magnetar standalone for the whole run, configured by the
  `pulsar_broker_config` fixture, which a conftest.py overrides to set keys;
- `pulsar_client` (function): a client of it, closed after the test: the official
  `pulsar.Client` when pulsar-client is installed, else magnetar.client's (same API);
- `pulsar_broker_factory` (function): starts brokers of a test's own, each with its own
  configuration (`pulsar_broker_factory({"key": value})`), all closed after the test.

pytest loads this module in every run once magnetar is installed (entry point `pytest11`),
whether a test uses it or not: it imports nothing but pytest at import time, and a fixture
imports the broker (or a client) only when a test asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from magnetar.testing import ConfigValue, StandaloneBroker

BrokerFactory = Callable[..., "StandaloneBroker"]


@pytest.fixture(scope="session")
def pulsar_broker_config() -> Mapping[str, ConfigValue]:
    """broker.conf keys for `pulsar_broker`; override this fixture to set some."""
    return {}


@pytest.fixture(scope="session")
def pulsar_broker(pulsar_broker_config: Mapping[str, ConfigValue]) -> Iterator[StandaloneBroker]:
    """One broker for the session: tests share it, so each should use topics of its own."""
    from magnetar.testing import standalone  # noqa: PLC0415 (lazy: see the module docstring)

    with standalone(pulsar_broker_config) as broker:
        yield broker


@pytest.fixture
def pulsar_client(pulsar_broker: StandaloneBroker) -> Iterator[Any]:
    """A client of `pulsar_broker`, closed (with its producers and consumers) after the test."""
    client = _client_module().Client(pulsar_broker.service_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def pulsar_broker_factory() -> Iterator[BrokerFactory]:
    """Start a broker of the test's own: `pulsar_broker_factory(config, **options)` takes
    magnetar.testing.standalone's arguments; every broker started is closed after the test."""
    from magnetar.testing import standalone  # noqa: PLC0415 (lazy: see the module docstring)

    brokers: list[StandaloneBroker] = []

    def start(config: Mapping[str, ConfigValue] | None = None, **options: Any) -> StandaloneBroker:
        broker = standalone(config, **options)
        brokers.append(broker)
        return broker.start()

    yield start
    failures: list[BaseException] = []
    for broker in brokers:
        try:
            broker.close()
        except Exception as exc:  # close the others before reporting it
            failures.append(exc)
    if failures:
        raise failures[0]


def _client_module() -> Any:
    try:
        import pulsar  # noqa: PLC0415 (optional: the official client)
    except ImportError:
        import magnetar.client as pulsar  # noqa: PLC0415
    return pulsar
