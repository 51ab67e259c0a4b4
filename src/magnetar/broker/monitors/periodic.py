"""Background checks the broker runs on its event loop every so often (message expiry,
retention, backlog quotas, inactive topics, compaction thresholds, certificate reloads):
one timer each, a run that fails is logged and the next one still comes, and a check over
topics goes on past a topic it fails on."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.broker.monitors.registry import TopicRegistry

log = logging.getLogger(__name__)


class PeriodicTask:
    def __init__(self, name: str, interval_seconds: float, job: Callable[[], None]) -> None:
        self.name = name
        self.interval = interval_seconds
        self._job = job
        self._handle: asyncio.TimerHandle | None = None
        self._stopped = False

    def start(self) -> None:
        self._stopped = False
        self._arm()

    def stop(self) -> None:
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        self._handle = asyncio.get_running_loop().call_later(self.interval, self._run)

    def _run(self) -> None:
        try:
            self._job()
        except Exception:
            log.exception("%s failed", self.name)
        if not self._stopped:
            self._arm()


def each_topic(registry: TopicRegistry, job: Callable[[Any], None], what: str) -> Callable[[], None]:
    """A job over every loaded topic; one topic's failure is logged and the rest still run."""
    def run() -> None:
        for topic in list(registry.topics.values()):
            try:
                job(topic)
            except Exception:
                log.exception("%s failed on %s", what, topic)
    return run
