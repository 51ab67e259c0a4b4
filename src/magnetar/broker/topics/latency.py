"""Latency distributions the broker exports in /metrics, under Pulsar's names.

Two shapes, as Pulsar has them: a topic's `pulsar_storage_write_latency_le_*` buckets
(BookKeeper's entry-latency bounds, each bucket counting only its own range, over the
last stats interval), and the broker-wide `pulsar_broker_publish_latency` summary
(quantiles from 0 to 1). Recording is one bisect over a short tuple and two additions,
done once per group of SENDs read together rather than once per message, so the publish
path pays next to nothing for it; quantiles are worked out only when /metrics is read.
All on the event loop's thread: no locks.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

ENTRY_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
"""Pulsar's ENTRY_LATENCY_BUCKETS_USEC, in milliseconds."""
ENTRY_LATENCY_SUFFIXES = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
"""How Pulsar names each bucket: `pulsar_storage_write_latency_le_<suffix>`."""
SUMMARY_QUANTILES = (0.0, 0.5, 0.95, 0.99, 0.999, 0.9999, 1.0)
"""The quantiles Pulsar's pulsar_broker_publish_latency summary reports."""
_FINE_RATIO = 1.02
_FINE_BOUNDS_MS = tuple(0.001 * _FINE_RATIO**i for i in range(1040))
"""Geometric buckets from 1 µs to past 10 minutes, each 2 % wide: a quantile read from
them is within 2 % of the exact one."""


class EntryLatencyBuckets:
    """Counts per Pulsar bucket: the interval being recorded, and the last one, which
    /metrics shows (rolled at each stats update, as Pulsar refreshes its StatsBuckets)."""

    __slots__ = ("_counts", "_sum", "last", "last_sum")

    def __init__(self) -> None:
        self._counts = [0] * (len(ENTRY_LATENCY_BOUNDS_MS) + 1)
        self._sum = 0.0
        self.last: list[int] = list(self._counts)
        self.last_sum = 0.0

    def observe(self, ms: float, count: int = 1) -> None:
        self._counts[bisect_left(ENTRY_LATENCY_BOUNDS_MS, ms)] += count
        self._sum += ms * count

    def roll(self) -> None:
        self.last, self.last_sum = self._counts, self._sum
        self._counts, self._sum = [0] * len(self.last), 0.0


class LatencySummary:
    """Quantiles of the last stats interval and the current one together (so a figure
    shows from the first group on, and covers at least one whole interval), and a count
    and sum since the broker started, as a Prometheus summary has them."""

    __slots__ = ("_current", "_current_max", "_current_min", "_last", "_last_max", "_last_min", "count", "sum")

    def __init__(self) -> None:
        self._current = [0] * (len(_FINE_BOUNDS_MS) + 1)
        self._last = list(self._current)
        self._current_min = self._last_min = float("inf")
        self._current_max = self._last_max = 0.0
        self.count = 0
        self.sum = 0.0

    def observe(self, ms: float, count: int = 1) -> None:
        self._current[bisect_left(_FINE_BOUNDS_MS, ms)] += count
        self.count += count
        self.sum += ms * count
        self._current_max = max(self._current_max, ms)
        self._current_min = min(self._current_min, ms)

    def roll(self) -> None:
        self._last, self._last_min, self._last_max = self._current, self._current_min, self._current_max
        self._current = [0] * len(self._last)
        self._current_min, self._current_max = float("inf"), 0.0

    def quantiles(self) -> list[tuple[float, float]]:
        """(quantile, ms) pairs; empty when nothing was observed in the window. A bucket's
        upper bound stands for its values, clamped to the exact minimum and maximum (which
        quantiles 0 and 1 are)."""
        counts = [a + b for a, b in zip(self._current, self._last, strict=True)]
        total = sum(counts)
        if not total:
            return []
        low, high = min(self._current_min, self._last_min), max(self._current_max, self._last_max)
        running = list(accumulate(counts))
        out = []
        for q in SUMMARY_QUANTILES[1:-1]:
            index = bisect_left(running, q * total)
            bound = _FINE_BOUNDS_MS[index] if index < len(_FINE_BOUNDS_MS) else high
            out.append((q, min(max(bound, low), high)))
        return [(0.0, low), *out, (1.0, high)]
