"""An instance's counters, as Pulsar's function status and stats report them, kept by the
instance and written to a file its worker reads (atomically, so a read never sees half)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

LATEST_EXCEPTIONS = 10
"""How many recent exceptions status lists, as Pulsar's instances keep."""
WRITE_INTERVAL = 0.25
"""Seconds between two writes of the stats file: how stale status may be."""


def now_ms() -> int:
    return int(time.time() * 1000)


class InstanceStats:
    """Counters updated from the processing thread and the client's callback thread."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self.received = 0
        self.processed = 0
        self.user_exceptions = 0
        self.system_exceptions = 0
        self.latency_ms_total = 0.0
        self.last_invocation = 0
        self.latest_user: deque[dict[str, Any]] = deque(maxlen=LATEST_EXCEPTIONS)
        self.latest_system: deque[dict[str, Any]] = deque(maxlen=LATEST_EXCEPTIONS)
        self.user_metrics: dict[str, list[float]] = {}
        self._dirty = True
        self._written = 0.0
        self._carry_exceptions_over()

    def _carry_exceptions_over(self) -> None:
        """A restarted instance starts its counts at zero, as Pulsar's do, but keeps the
        exceptions that killed its predecessor visible in status."""
        if self.path is None or not self.path.exists():
            return
        try:
            before = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        self.latest_user.extend(before.get("latestUserExceptions", []))
        self.latest_system.extend(before.get("latestSystemExceptions", []))

    def on_received(self) -> None:
        """Only the processing thread counts messages, so these two take no lock."""
        self.received += 1
        self.last_invocation = now_ms()
        self._dirty = True

    def on_processed(self, latency_ms: float) -> None:
        self.processed += 1
        self.latency_ms_total += latency_ms
        self._dirty = True

    def on_user_exception(self, error: BaseException) -> None:
        with self._lock:
            self.user_exceptions += 1
            self.latest_user.append(_exception(error))
            self._dirty = True

    def on_system_exception(self, error: BaseException | str) -> None:
        with self._lock:
            self.system_exceptions += 1
            self.latest_system.append(_exception(error))
            self._dirty = True

    def record_metric(self, name: str, value: float) -> None:
        with self._lock:
            total = self.user_metrics.setdefault(name, [0.0, 0])
            total[0] += value
            total[1] += 1
            self._dirty = True

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "numReceived": self.received,
                "numSuccessfullyProcessed": self.processed,
                "numUserExceptions": self.user_exceptions,
                "latestUserExceptions": list(self.latest_user),
                "numSystemExceptions": self.system_exceptions,
                "latestSystemExceptions": list(self.latest_system),
                "averageLatency": self.latency_ms_total / self.processed if self.processed else 0.0,
                "lastInvocationTime": self.last_invocation,
                "userMetrics": {name: {"sum": s, "count": c} for name, (s, c) in self.user_metrics.items()},
                "pid": os.getpid(),
            }

    def write(self, force: bool = False) -> None:
        """At most every WRITE_INTERVAL seconds while messages flow (a file a message would
        cost more than the message), at once when forced (before the process ends)."""
        with self._write_lock:
            now = time.monotonic()
            if self.path is None or not (force or (self._dirty and now - self._written >= WRITE_INTERVAL)):
                return
            self._dirty = False
            self._written = now
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(json.dumps(self.snapshot()))
            os.replace(temporary, self.path)

    def write_periodically(self) -> None:
        """A thread writing what changed every WRITE_INTERVAL, so the loop never does."""
        def loop() -> None:
            while True:
                time.sleep(WRITE_INTERVAL)
                self.write()

        threading.Thread(target=loop, name="stats-writer", daemon=True).start()


def _exception(error: BaseException | str) -> dict[str, Any]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"exceptionString": text, "timestampMs": now_ms()}


def read(path: Path) -> dict[str, Any]:
    """What an instance last wrote; empty when it has written nothing yet."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
