"""A counter that also knows its recent rate, for stats such as msgDropRate.

Pulsar reports rates averaged over its stats period (statsUpdateFrequencyInSecs,
60 s by default). magnetar has no periodic stats job, so the rate is taken over
a sliding window of the same length, kept as one bucket per second: recording
is O(1) and memory is bounded by the window, however fast events come.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

DEFAULT_WINDOW_SECONDS = 60


class Rate:
    def __init__(self, window_seconds: int = DEFAULT_WINDOW_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window = window_seconds
        self._clock = clock
        self._buckets: deque[list[int]] = deque()  # [second, count], oldest first
        self.total = 0

    def record(self, count: int = 1) -> None:
        self.total += count
        second = int(self._clock())
        if self._buckets and self._buckets[-1][0] == second:
            self._buckets[-1][1] += count
        else:
            self._buckets.append([second, count])
        self._expire(second)

    def rate(self) -> float:
        """Events per second over the last `window` seconds."""
        self._expire(int(self._clock()))
        return sum(count for _, count in self._buckets) / self.window

    def _expire(self, now: int) -> None:
        while self._buckets and self._buckets[0][0] <= now - self.window:
            self._buckets.popleft()
