"""A Pulsar broker for tests, started in a fraction of a second.

    with magnetar.testing.standalone(config={"brokerDeduplicationEnabled": True}) as broker:
        client = pulsar.Client(broker.service_url)   # admin API: broker.admin_url

`async with` works the same in asyncio code. The pytest fixtures (`pulsar_broker`,
`pulsar_client`, `pulsar_broker_factory`) are in magnetar.testing.pytest_plugin, which pytest
loads by itself; see docs/testing.md.

Importing this package imports no broker code (pytest imports it in every run).

Layering: the top layer: may import any magnetar package (it starts `magnetar standalone`
through magnetar.cli); no magnetar package imports it. Enforced by import-linter (pyproject.toml).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.testing.child_process import ChildProcessBroker
    from magnetar.testing.harness import ConfigValue, StandaloneBroker
    from magnetar.testing.in_process import InProcessBroker

__all__ = ["ChildProcessBroker", "ConfigValue", "InProcessBroker", "StandaloneBroker", "standalone"]

# Imported on first use: this package is imported with the pytest plugin in every run.
_HOMES = {"ChildProcessBroker": "child_process", "ConfigValue": "harness", "StandaloneBroker": "harness",
          "InProcessBroker": "in_process"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def standalone(
    config: Mapping[str, ConfigValue] | None = None,
    *,
    data_dir: Path | str | None = None,
    subprocess: bool = False,
    start_timeout: float = 60.0,
) -> StandaloneBroker:
    """A broker to start with `with` / `async with` (or `start()` and `close()`).

    config: broker.conf keys (`-c` of `magnetar standalone`), checked as `-c` checks them.
    data_dir: where the data goes, kept afterwards; by default a temporary dir, removed.
    subprocess: run `magnetar standalone` as a child process (it can be `kill()`ed) instead
      of in a thread of this process.
    start_timeout: seconds to wait for it to listen.
    """
    from magnetar.testing.child_process import ChildProcessBroker  # noqa: PLC0415 (see _HOMES)
    from magnetar.testing.in_process import InProcessBroker  # noqa: PLC0415

    kind = ChildProcessBroker if subprocess else InProcessBroker
    return kind(config, data_dir=data_dir, start_timeout=start_timeout)
