"""Rates and latency histograms for `magnetar perf`: one window per report line and a
running total for the summary, recorded from the client's I/O thread and read from the
command's thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from hdrh.histogram import HdrHistogram

_LOWEST_US, _HIGHEST_US, _DIGITS = 1, 3_600_000_000, 3
PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)


def _histogram() -> HdrHistogram:
    return HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)


@dataclass
class Window:
    """What happened between two reports (or over the whole run)."""

    seconds: float
    messages: int
    failures: int
    payload_bytes: int
    latency: HdrHistogram

    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    def mbit_rate(self) -> float:
        return self.payload_bytes * 8 / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def latency_ms(self) -> dict[str, float]:
        """Mean, percentiles and max in milliseconds (empty when nothing was measured)."""
        if self.latency.get_total_count() == 0:
            return {}
        out = {"mean": self.latency.get_mean_value() / 1000}
        out.update({f"p{p:g}": self.latency.get_value_at_percentile(p) / 1000 for p in PERCENTILES})
        out["max"] = self.latency.get_max_value() / 1000
        return out

    def as_dict(self) -> dict[str, object]:
        return {"seconds": round(self.seconds, 3), "messages": self.messages, "failures": self.failures,
                "msg_per_s": round(self.rate(), 1), "mbit_per_s": round(self.mbit_rate(), 3),
                "latency_ms": {k: round(v, 3) for k, v in self.latency_ms().items()}}


class Meter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = self._window_start = time.monotonic()
        self._messages = self._failures = self._bytes = 0
        self._total_messages = self._total_failures = self._total_bytes = 0
        self._window, self._total = _histogram(), _histogram()

    def record(self, size: int, latency_us: int) -> None:
        latency_us = min(max(latency_us, _LOWEST_US), _HIGHEST_US)
        with self._lock:
            self._messages += 1
            self._bytes += size
            self._window.record_value(latency_us)

    def fail(self) -> None:
        with self._lock:
            self._failures += 1

    @property
    def total_messages(self) -> int:
        return self._total_messages + self._messages

    def take_window(self) -> Window:
        """The window since the previous call; its counts move into the running total."""
        now = time.monotonic()
        with self._lock:
            window = Window(now - self._window_start, self._messages, self._failures, self._bytes, self._window)
            self._total_messages += self._messages
            self._total_failures += self._failures
            self._total_bytes += self._bytes
            self._messages = self._failures = self._bytes = 0
            self._window, self._window_start = _histogram(), now
        self._total.add(window.latency)
        return window

    def total(self) -> Window:
        self.take_window()
        return Window(time.monotonic() - self._started, self._total_messages, self._total_failures,
                      self._total_bytes, self._total)


def line(verb: str, window: Window) -> str:
    """One report line: rate, bandwidth, failures and the latency spread."""
    latency = window.latency_ms()
    spread = " - ".join(f"{name} {value:.3f}" for name, value in latency.items()) if latency else "n/a"
    return (f"{verb}: {window.rate():,.1f} msg/s --- {window.mbit_rate():,.3f} Mbit/s --- "
            f"failed {window.failures / window.seconds if window.seconds else 0:,.1f} msg/s --- "
            f"latency ms: {spread}")
