"""Acknowledgments grouped as the official client groups them: one ACK per 100 ms or 1000 ids.

Acks may come from the event loop or, with the blocking facade, from application threads,
so adding is a `deque.append` (atomic under the GIL) and only the loop builds and writes
frames. A cumulative ack keeps only the highest id. Ids are kept as tuples until a frame
is built, field by field from them (client_commands.ack_ids).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence

from magnetar.wire import client_commands as cc

GROUP_TIME = 0.1
GROUP_MAX = 1000

AckKey = tuple[int, int, tuple[int, ...]]
"""(ledger, entry, ack_set words): an empty ack set acks the whole entry."""


class AckGroupingTracker:
    def __init__(self, loop: asyncio.AbstractEventLoop, consumer_id: int, write: Callable[[bytes], bool],
                 threaded: bool) -> None:
        self._loop = loop
        self._consumer_id = consumer_id
        self._write = write
        """Writes a frame on the consumer's current connection; False when it has none."""
        self._threaded = threaded
        self._individual: deque[AckKey] = deque()
        self._cumulative: AckKey | None = None
        self._flush_scheduled = False
        self._timer: asyncio.TimerHandle | None = loop.call_later(GROUP_TIME, self._tick)

    def add(self, ledger: int, entry: int, ack_set: Sequence[int] = ()) -> None:
        self._individual.append((ledger, entry, tuple(ack_set)))
        if len(self._individual) >= GROUP_MAX and not self._flush_scheduled:
            self._flush_scheduled = True
            if self._threaded:
                self._loop.call_soon_threadsafe(self.flush)
            else:
                self._loop.call_soon(self.flush)

    def add_cumulative(self, ledger: int, entry: int, ack_set: Sequence[int] = ()) -> None:
        key = (ledger, entry, tuple(ack_set))
        current = self._cumulative
        if current is None or (ledger, entry) >= (current[0], current[1]):
            self._cumulative = key

    def _tick(self) -> None:
        self.flush()
        self._timer = self._loop.call_later(GROUP_TIME, self._tick)

    def flush(self) -> None:
        self._flush_scheduled = False
        individual = self._individual
        if individual:
            ids = []
            pop = individual.popleft
            while individual:  # other threads may append meanwhile: taken one at a time
                ids.append(pop())
            # Without a connection the ack is lost, as in the official client: the broker
            # redelivers what it did not hear about.
            self._write(cc.ack_ids(self._consumer_id, ids))
        cumulative = self._cumulative
        if cumulative is not None:
            self._cumulative = None
            self._write(cc.ack_ids(self._consumer_id, [cumulative], cumulative=True))

    def close(self) -> None:
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
