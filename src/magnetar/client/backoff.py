"""Reconnection delays as the official client spaces them: 0.1 s, then about x2 with jitter."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial: float = 0.1, maximum: float = 30.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self.maximum, self._next * 2)
        # up to 10% less, so many clients that lost one broker do not come back in lockstep
        return delay * (1 - random.random() * 0.1)

    def reset(self) -> None:
        self._next = self.initial
