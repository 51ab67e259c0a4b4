import time
from collections.abc import Callable

import pytest

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory


def poll_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll instead of sleeping a guessed amount: fast when it works, bounded when not."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.005)


@pytest.fixture
def wait_until():
    return poll_until


@pytest.fixture
def open_factory(tmp_path):
    factories = []

    def make(config: ManagedLedgerConfig | None = None, **kwargs) -> ManagedLedgerFactory:
        factory = ManagedLedgerFactory(tmp_path / "data", config, **kwargs)
        factories.append(factory)
        return factory

    yield make
    for factory in reversed(factories):
        factory.close()
