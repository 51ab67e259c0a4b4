"""Work a request makes in slices of the event loop's time: after each slice the loop's other
clients get a turn. What the admin API's large answers and requests share (/metrics at
10,000 topics, a REST produce of a thousand Avro records), so no one request holds every
producer's receipt while it is made."""

from __future__ import annotations

import asyncio
import time

SLICE_S = 0.002
"""Work done before other clients get a turn of the event loop."""


class LoopSlices:
    def __init__(self, seconds: float = SLICE_S) -> None:
        self._seconds = seconds
        self._deadline = time.perf_counter() + seconds

    def spent(self) -> bool:
        """This slice's time is used up: hand the loop back (`next`) before more."""
        return time.perf_counter() > self._deadline

    async def next(self) -> None:
        """Give the loop's other clients a turn, then start the next slice."""
        await asyncio.sleep(0)
        self._deadline = time.perf_counter() + self._seconds
