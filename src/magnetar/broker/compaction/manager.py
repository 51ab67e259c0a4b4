"""When compaction runs, and what the admin API says about it.

Runs are started by the admin API (one at a time per topic; a second request while one
runs is a conflict) or by the size monitor: every
`brokerServiceCompactionMonitorIntervalInSeconds`, a topic whose bytes beyond the horizon
exceed its `compactionThreshold` (topic > namespace > `brokerServiceCompactionThresholdInBytes`;
0 = never) is compacted. Each run works on a worker thread; the loop only keeps its status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.compaction.service import AdoptionRefused
from magnetar.broker.errors import ResourceConflictError
from magnetar.broker.monitors.periodic import PeriodicTask
from magnetar.broker.policies.topic_policies import Policy
from magnetar.storage import ManagedLedger, Position

if TYPE_CHECKING:
    from magnetar.broker.service.broker_service import BrokerService
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic

COMPACTION_CURSOR = "__compaction"
"""Pulsar's name for the compactor's cursor (Compactor.COMPACTION_SUBSCRIPTION)."""

log = logging.getLogger(__name__)
COMPACTION_THRESHOLD = Policy("compactionThreshold", "compaction_threshold", "brokerServiceCompactionThresholdInBytes")


@dataclass(slots=True)
class CompactionStatus:
    """Pulsar's LongRunningProcessStatus, plus magnetar's progress (0..1) for `--wait`."""

    status: str = "NOT_RUN"
    last_error: str = ""
    progress: float = 0.0

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "lastError": self.last_error, "progress": round(self.progress, 4)}


class CompactionManager:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.statuses: dict[str, CompactionStatus] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._monitor = PeriodicTask("compaction threshold check",
                                     service.config.brokerServiceCompactionMonitorIntervalInSeconds,
                                     self._check_thresholds)

    def start(self) -> None:
        self._monitor.start()

    def stop(self) -> None:
        self._monitor.stop()
        for task in self._tasks.values():
            task.cancel()

    def status(self, topic: str) -> CompactionStatus:
        return self.statuses.get(topic, CompactionStatus())

    def running(self, topic: str) -> bool:
        return topic in self._tasks

    def trigger(self, topic: PersistentTopic) -> None:
        """Start compacting `topic`; a conflict if a run is under way."""
        self._start(topic, topic.compaction_service.compact, raise_errors=False)

    async def adopt(self, topic: PersistentTopic, staging: str, horizon: Position, base: Position | None,
                    entries: int) -> None:
        """Put a staged compaction in force (see BuiltinCompactionService.adopt); counted as
        a run, so a compaction requested meanwhile is a conflict and the status reports it.
        Its errors reach the caller (AdoptionRefused is the request's fault)."""
        adopt = getattr(topic.compaction_service, "adopt", None)
        if adopt is None:
            raise AdoptionRefused(f"the compaction service {type(topic.compaction_service).__name__} "
                                  "cannot adopt a staged compaction")
        await self._start(topic, lambda _progress: adopt(staging, horizon, base, entries), raise_errors=True)

    def _start(self, topic: PersistentTopic, work: Callable[[Callable[[float], None]], object], *,
               raise_errors: bool) -> asyncio.Task[None]:
        key = str(topic.name)
        if key in self._tasks:
            raise ResourceConflictError("Compaction already in progress")
        status = self.statuses[key] = CompactionStatus("RUNNING")
        task = self._tasks[key] = asyncio.get_running_loop().create_task(
            self._run(topic, status, work, raise_errors))
        return task

    async def _run(self, topic: PersistentTopic, status: CompactionStatus,
                   work: Callable[[Callable[[float], None]], object], raise_errors: bool) -> None:
        """One compaction or adoption on a worker thread, its status kept whatever happens."""
        key = str(topic.name)

        def progress(fraction: float) -> None:  # called on the worker thread: one float store
            status.progress = fraction

        try:
            await asyncio.to_thread(work, progress)
        except asyncio.CancelledError:
            status.status, status.last_error = "ERROR", "cancelled: the broker is stopping"
            raise
        except AdoptionRefused as exc:
            status.status, status.last_error = "ERROR", str(exc)
            raise
        except Exception as exc:
            log.exception("[%s] compaction failed", key)
            status.status, status.last_error = "ERROR", f"{type(exc).__name__}: {exc}"
            if raise_errors:
                raise
        else:
            hold_trimming_at_horizon(topic)
            status.status, status.progress = "SUCCESS", 1.0
        finally:
            self._tasks.pop(key, None)

    def _check_thresholds(self) -> None:
        for topic in list(self.service.topics.values()):
            if self._over_threshold(topic):
                log.info("[%s] backlog beyond the compaction horizon exceeds its threshold: compacting", topic.name)
                self.trigger(topic)

    def _over_threshold(self, topic: PersistentTopic) -> bool:
        if str(topic.name) in self._tasks:
            return False
        threshold = int(self.service.policies.effective(topic.name, COMPACTION_THRESHOLD) or 0)
        if threshold <= 0:
            return False
        ledger = topic.ledger
        horizon = topic.compaction_service.last_compacted_position()
        if horizon is None:
            pending = ledger.total_size_bytes()
        else:
            last = ledger.last_confirmed_position
            beyond = last is not None and last > horizon
            pending = ledger.estimated_bytes_from(ledger.next_position(horizon)) if beyond else 0
        return pending > threshold


def hold_trimming_at_horizon(topic: PersistentTopic) -> None:
    """Keep the data after the compaction horizon until the next run has read it.

    As in Pulsar, a durable cursor named `__compaction` sits at the horizon: ledger trimming
    never passes the slowest durable cursor, so entries every subscription has consumed
    but no compaction has seen yet stay for the next run, and compacted readers find the
    tail after the compacted ledger. Storage-level only: the broker lists no subscription
    for it.
    """
    current = topic.compaction_service.store.current
    if current is not None:
        hold_trimming(topic.ledger, current.horizon)


def hold_trimming(ledger: ManagedLedger, horizon: Position) -> None:
    """Move (or open) the `__compaction` cursor to `horizon`, never backwards."""
    cursor = ledger.cursors.get(COMPACTION_CURSOR) or ledger.open_cursor(COMPACTION_CURSOR, "earliest")
    if cursor.mark_delete_position < horizon:
        cursor.mark_delete(horizon)
