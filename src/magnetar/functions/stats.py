"""An instance's counters, as Pulsar's function status and stats report them, kept by the
instance and sent to its worker as one JSON line a snapshot on a pipe of their own; the
worker keeps the last one. The instance runs the user's code, so the worker reads what it
sends as it would a client's: bounded lines, each value checked (`parse`)."""

from __future__ import annotations

import json
import math
import threading
import time
from collections import deque
from typing import Any, BinaryIO

LATEST_EXCEPTIONS = 10
"""How many recent exceptions status lists, as Pulsar's instances keep."""
WRITE_INTERVAL = 0.25
"""Seconds between two snapshots while counts change: how stale status may be."""
MAX_EXCEPTION_TEXT = 2000
MAX_USER_METRICS = 100
"""Names `record_metric` keeps; more are counted nowhere (a snapshot stays small)."""
MAX_SNAPSHOT_BYTES = 256 * 1024
"""The longest snapshot line the worker reads; the limits above keep an honest one far below."""


def now_ms() -> int:
    return int(time.time() * 1000)


class InstanceStats:
    """Counters updated from the processing thread and the client's callback thread."""

    def __init__(self, stream: BinaryIO | None, carried: dict[str, Any] | None = None) -> None:
        self.stream = stream
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
        self.open_txn: list[int] | None = None
        """The transaction the instance has open (EFFECTIVELY_ONCE on transactions): the worker
        hands it to the next instance, which aborts it if this one dies holding it."""
        self._dirty = True
        self._written = 0.0
        # a restarted instance starts its counts at zero, as Pulsar's do, but keeps the exceptions
        # that ended its predecessor visible in status (the worker hands them over)
        self.latest_user.extend((carried or {}).get("latestUserExceptions", []))
        self.latest_system.extend((carried or {}).get("latestSystemExceptions", []))

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

    def on_transaction(self, txn_id: tuple[int, int] | None) -> None:
        """An open one is written at once (the worker must know it before anything is done in
        it); an ended one with the next snapshot (a successor aborting it is refused)."""
        if txn_id is None:
            self.open_txn, self._dirty = None, True
            return
        self.open_txn = [int(txn_id[0]), int(txn_id[1])]
        self.write(force=True)

    def record_metric(self, name: str, value: float) -> None:
        with self._lock:
            if name not in self.user_metrics and len(self.user_metrics) >= MAX_USER_METRICS:
                return
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
                **({"openTransaction": self.open_txn} if self.open_txn is not None else {}),
            }

    def write(self, force: bool = False) -> None:
        """At most every WRITE_INTERVAL seconds while messages flow (a snapshot a message would
        cost more than the message), at once when forced (before the process ends). A worker
        gone (a broken pipe) is the parent-death watch's business, not this one's."""
        with self._write_lock:
            now = time.monotonic()
            if self.stream is None or not (force or (self._dirty and now - self._written >= WRITE_INTERVAL)):
                return
            self._dirty = False
            self._written = now
            try:
                self.stream.write(json.dumps(self.snapshot()).encode() + b"\n")
                self.stream.flush()
            except (OSError, ValueError):
                self.stream = None

    def write_periodically(self) -> None:
        """A thread writing what changed every WRITE_INTERVAL, so the loop never does."""
        def loop() -> None:
            while True:
                time.sleep(WRITE_INTERVAL)
                self.write()

        threading.Thread(target=loop, name="stats-writer", daemon=True).start()


def _exception(error: BaseException | str) -> dict[str, Any]:
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    return {"exceptionString": text[:MAX_EXCEPTION_TEXT], "timestampMs": now_ms()}


# -- the worker's side: a snapshot as the instance sent it, every value checked
_COUNTS = ("numReceived", "numSuccessfullyProcessed", "numUserExceptions", "numSystemExceptions",
           "lastInvocationTime")


def parse(line: bytes) -> dict[str, Any] | None:
    """A snapshot line, keeping only values of the types status and /metrics print (a
    function could send anything on its pipe); None when it is no snapshot at all."""
    if len(line) > MAX_SNAPSHOT_BYTES:
        return None
    try:
        sent = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(sent, dict):
        return None
    snapshot: dict[str, Any] = {key: sent[key] for key in _COUNTS if _count(sent.get(key))}
    if _number(sent.get("averageLatency")):
        snapshot["averageLatency"] = float(sent["averageLatency"])
    for key in ("latestUserExceptions", "latestSystemExceptions"):
        listed = sent.get(key)
        if isinstance(listed, list):
            snapshot[key] = [{"exceptionString": item["exceptionString"][:MAX_EXCEPTION_TEXT],
                              "timestampMs": item["timestampMs"]}
                             for item in listed[-LATEST_EXCEPTIONS:] if isinstance(item, dict)
                             and isinstance(item.get("exceptionString"), str) and _count(item.get("timestampMs"))]
    txn = sent.get("openTransaction")
    if isinstance(txn, list) and len(txn) == 2 and all(_count(part) for part in txn):
        snapshot["openTransaction"] = txn
    metrics = sent.get("userMetrics")
    if isinstance(metrics, dict):
        snapshot["userMetrics"] = {
            name[:200]: {"sum": float(metric["sum"]), "count": metric["count"]}
            for name, metric in list(metrics.items())[:MAX_USER_METRICS]
            if isinstance(metric, dict) and _number(metric.get("sum")) and _count(metric.get("count"))}
    return snapshot


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 63


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
