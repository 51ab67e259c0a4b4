"""The compaction runs under way, and what the admin API says about them.

Runs are started by the admin API (one at a time per topic; a second request while one
runs is a conflict) or by the compaction monitor (monitors.compaction), when a topic's
bytes beyond the horizon exceed its `compactionThreshold` (topic > namespace >
`brokerServiceCompactionThresholdInBytes`; 0 = never). Each run works on a worker thread;
the loop only keeps its status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.compaction.service import AdoptionRefused
from magnetar.broker.errors import ResourceConflictError
from magnetar.broker.policies.topic_policies import Policy
from magnetar.storage import ManagedLedger, Position

if TYPE_CHECKING:
    from magnetar.broker.compaction.service import TopicCompactionService
    from magnetar.wire.topic_name import TopicName

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


class CompactableTopic(Protocol):
    """What a run uses of its topic (topics.persistent.PersistentTopic), for annotations only."""

    name: TopicName
    ledger: ManagedLedger
    compaction_service: TopicCompactionService


class CompactionManager:
    def __init__(self) -> None:
        self.statuses: dict[str, CompactionStatus] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def stop(self) -> None:
        """The broker is stopping: cancel the runs under way."""
        for task in self._tasks.values():
            task.cancel()

    def status(self, topic: str) -> CompactionStatus:
        return self.statuses.get(topic, CompactionStatus())

    def running(self, topic: str) -> bool:
        return topic in self._tasks

    def trigger(self, topic: CompactableTopic) -> None:
        """Start compacting `topic`; a conflict if a run is under way."""
        self._start(topic, topic.compaction_service.compact, raise_errors=False)

    async def adopt(self, topic: CompactableTopic, staging: str, horizon: Position, base: Position | None,
                    entries: int) -> None:
        """Put a staged compaction in force (see BuiltinCompactionService.adopt); counted as
        a run, so a compaction requested meanwhile is a conflict and the status reports it.
        Its errors reach the caller (AdoptionRefused is the request's fault)."""
        adopt = getattr(topic.compaction_service, "adopt", None)
        if adopt is None:
            raise AdoptionRefused(f"the compaction service {type(topic.compaction_service).__name__} "
                                  "cannot adopt a staged compaction")
        await self._start(topic, lambda _progress: adopt(staging, horizon, base, entries), raise_errors=True)

    def _start(self, topic: CompactableTopic, work: Callable[[Callable[[float], None]], object], *,
               raise_errors: bool) -> asyncio.Task[None]:
        key = str(topic.name)
        if key in self._tasks:
            raise ResourceConflictError("Compaction already in progress")
        status = self.statuses[key] = CompactionStatus("RUNNING")
        task = self._tasks[key] = asyncio.get_running_loop().create_task(
            self._run(topic, status, work, raise_errors))
        return task

    async def _run(self, topic: CompactableTopic, status: CompactionStatus,
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


def hold_trimming_at_horizon(topic: CompactableTopic) -> None:
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
