"""What every test broker does, however it runs: configuration, ports, the temporary
directory and the `with` / `async with` protocol. How a broker runs is a subclass's: in a
thread of this process (in_process) or as a `magnetar standalone` child (child_process).

Nothing here imports the broker: that happens when one starts, so that importing
magnetar.testing (which pytest does in every run once magnetar is installed) stays cheap.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from magnetar.broker.config.loading import LoadedConfiguration

log = logging.getLogger(__name__)

ConfigValue = str | int | float | bool | Sequence[str] | None
"""A configuration value as Python gives it; sent as the text `-c key=value` would carry."""

PORT_KEYS = ("brokerServicePort", "webServicePort", "brokerServicePortTls", "webServicePortTls")
STOP_TIMEOUT_SECONDS = 60.0
# Before the user's configuration, which may set any of them: port 0 binds a free port, and
# reading back the bound one leaves no window for another process to take it.
_FREE_PORTS = ("brokerServicePort=0", "webServicePort=0")
_open: set[StandaloneBroker] = set()
"""Brokers started and not closed yet: closed when the interpreter exits, so that one a test
forgot leaves no process running and no directory behind."""


@atexit.register
def _close_forgotten() -> None:
    for broker in list(_open):
        with contextlib.suppress(Exception):
            broker.close()


@dataclass(frozen=True, slots=True)
class Listening:
    """Where a started broker listens: pulsar:// and http:// when on, pulsar+ssl:// and https:// when on."""

    service_url: str | None
    service_url_tls: str | None
    admin_url: str | None
    admin_url_tls: str | None

    @classmethod
    def from_urls(cls, service_urls: Sequence[str], admin_urls: Sequence[str]) -> Listening:
        def first(urls: Sequence[str], scheme: str) -> str | None:
            return next((url for url in urls if url.startswith(scheme + "://")), None)

        return cls(first(service_urls, "pulsar"), first(service_urls, "pulsar+ssl"),
                   first(admin_urls, "http"), first(admin_urls, "https"))

    def ports(self) -> dict[str, int]:
        """The bound port of each listener, by the key that configures it."""
        urls = (self.service_url, self.admin_url, self.service_url_tls, self.admin_url_tls)
        return {key: urlsplit(url).port or 0 for key, url in zip(PORT_KEYS, urls, strict=True) if url}


def config_text(value: ConfigValue) -> str:
    """The text a broker.conf line would have for a value: switches as true/false, lists
    comma-separated, None empty (which turns a port off and keeps other keys' default)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Sequence) and not isinstance(value, str):
        return ",".join(str(item) for item in value)
    return str(value)


class StandaloneBroker(ABC):
    """A `magnetar standalone` for a test: free ports, a temporary data dir, stopped and
    removed on exit (even when the body raises); `with` or `async with`.

    `restart()` keeps the data and the ports, so clients reconnect by themselves.
    """

    def __init__(
        self,
        config: Mapping[str, ConfigValue] | None = None,
        *,
        data_dir: Path | str | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.config = {key: config_text(value) for key, value in (config or {}).items()}
        self.start_timeout = start_timeout
        self._temp_dir: Path | None = None
        self._own_data_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir is not None else Path()
        self._pinned_ports: dict[str, int] = {}
        self._listening: Listening | None = None

    # -- where it listens
    @property
    def running(self) -> bool:
        return self._listening is not None

    @property
    def service_url(self) -> str:
        """pulsar://host:port, or pulsar+ssl:// when plain text is off."""
        listening = self._started()
        return listening.service_url or listening.service_url_tls or ""

    @property
    def admin_url(self) -> str:
        """http://host:port (the admin API is under /admin/v2), or https:// when plain HTTP is off."""
        listening = self._started()
        return listening.admin_url or listening.admin_url_tls or ""

    @property
    def service_url_tls(self) -> str | None:
        return self._started().service_url_tls

    @property
    def admin_url_tls(self) -> str | None:
        return self._started().admin_url_tls

    def _started(self) -> Listening:
        if self._listening is None:
            raise RuntimeError("the broker is not running: start it (or enter its `with` block) first")
        return self._listening

    # -- life cycle
    def start(self) -> Self:
        """Start on the data dir (a new temporary one the first time unless one was given)."""
        if self.running:
            raise RuntimeError(f"the broker is already running on {self.service_url}")
        loaded = self._configuration()
        if self._temp_dir is None:
            self._temp_dir = Path(tempfile.mkdtemp(prefix="magnetar-test-"))
            _open.add(self)
            if self._own_data_dir:
                self.data_dir = self._temp_dir / "data"
        self._listening = self._start(loaded)
        self._pinned_ports = {key: port for key, port in self._listening.ports().items()
                              if self.config.get(key, "0") == "0"}
        log.info("test broker on %s, admin API on %s (data in %s)", self.service_url, self.admin_url, self.data_dir)
        return self

    def stop(self) -> None:
        """Stop and keep the data dir; nothing happens when it is not running."""
        if self._listening is not None:
            self._listening = None
            self._stop()

    def restart(self) -> Self:
        """Stop and start again on the same data and the same ports."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop and remove the temporary directory (a data dir given by the caller stays)."""
        try:
            self.stop()
        finally:
            if self._temp_dir is not None:
                shutil.rmtree(self._temp_dir, ignore_errors=True)
                self._temp_dir = None
            _open.discard(self)

    def _configuration(self) -> LoadedConfiguration:
        """Checked as `magnetar standalone -c` checks it (an unknown key or a bad value raises
        ConfigError naming it), through the same function, so the command's defaults apply."""
        from magnetar.broker.config.properties import Setting  # noqa: PLC0415 (lazy: see the module docstring)
        from magnetar.cli.standalone import standalone_configuration  # noqa: PLC0415

        settings = [Setting(key, value, f"config[{key!r}]") for key, value in self.config.items()]
        settings += [Setting(key, str(port), "port of the first start") for key, port in self._pinned_ports.items()]
        return standalone_configuration(overrides=_FREE_PORTS, flags=settings)

    def command_line_items(self) -> list[str]:
        """The configuration as `-c key=value` items, later ones winning."""
        pinned = (f"{key}={port}" for key, port in self._pinned_ports.items())
        return [*_FREE_PORTS, *(f"{key}={value}" for key, value in self.config.items()), *pinned]

    @abstractmethod
    def _start(self, loaded: LoadedConfiguration) -> Listening:
        """Run the broker until it listens; on failure leave nothing running and raise."""

    @abstractmethod
    def _stop(self) -> None:
        """Stop the broker, its data made durable; raise if it did not stop cleanly."""

    # -- with
    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    # -- async with: the blocking steps run in a worker thread, never on the caller's loop
    async def start_async(self) -> Self:
        starting = asyncio.ensure_future(asyncio.to_thread(self.start))
        try:
            return await asyncio.shield(starting)
        except asyncio.CancelledError:
            # the start goes on in its thread: let it end, then undo it
            with contextlib.suppress(Exception):
                await starting
            await asyncio.to_thread(self.stop)
            raise

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)

    async def restart_async(self) -> Self:
        return await asyncio.to_thread(self.restart)

    async def close_async(self) -> None:
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Self:
        try:
            return await self.start_async()
        except BaseException:
            await asyncio.shield(self.close_async())
            raise

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await asyncio.shield(self.close_async())
