"""A steady rate for `-r/--rate` flags: the n-th operation waits for its slot, so a late
start does not turn into a burst and a rate of 0 means as fast as possible."""

from __future__ import annotations

import time


class Pacer:
    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = time.monotonic()

    def wait(self) -> None:
        if not self._interval:
            return
        now = time.monotonic()
        if self._next > now:
            time.sleep(self._next - now)
        else:
            # Behind schedule by more than a second: do not catch up with a burst.
            self._next = max(self._next, now - 1.0)
        self._next += self._interval
