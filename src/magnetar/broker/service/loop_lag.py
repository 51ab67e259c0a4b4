"""How late the event loop runs what is due: the broker's own measure of a stalled loop.

Every connection, every receipt and every dispatch shares the one loop, so a turn that
runs long delays them all; the time a timer fires after it was due is that delay as any
callback met it. A timer every PROBE_INTERVAL_S (a sample of the loop at random moments:
a stall shorter than the interval is caught in proportion to its length) records its
lateness into a cumulative histogram (Prometheus' own shape, `magnetar_event_loop_lag_seconds`)
and a maximum over the last stats interval and the current one
(`magnetar_event_loop_lag_max_seconds`). Ten
wake-ups a second cost an idle broker about 0.1 % of a core (twenty cost 0.2 %, against
0.08 % for all else it does while idle; docs/performance.md).
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left

PROBE_INTERVAL_S = 0.1
LAG_BOUNDS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class LoopLagProbe:
    def __init__(self) -> None:
        self.counts = [0] * (len(LAG_BOUNDS_S) + 1)
        """Per bucket (not cumulative), the last one past the largest bound."""
        self.count = 0
        self.sum = 0.0
        self._max = self._last_max = 0.0
        self._handle: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._arm(loop.time())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        due = now + PROBE_INTERVAL_S
        self._handle = self._loop.call_at(due, self._fired, due)

    def _fired(self, due: float) -> None:
        now = self._loop.time()  # type: ignore[union-attr]
        self.record(max(0.0, now - due))
        self._arm(now)

    def record(self, lag: float) -> None:
        self.counts[bisect_left(LAG_BOUNDS_S, lag)] += 1
        self.count += 1
        self.sum += lag
        self._max = max(self._max, lag)

    def roll(self) -> None:
        """A stats interval ended: the maximum starts over (the previous one stays shown)."""
        self._last_max, self._max = self._max, 0.0

    @property
    def max_seconds(self) -> float:
        return max(self._max, self._last_max)
