"""The blocking facade's bound on messages pending in a producer (max_pending_messages).

Application threads take a slot per send_async, the event loop gives slots back as receipts
(or failures) complete messages. A `threading.Semaphore` did this, but it is written in
Python: a Condition entered on both sides, about a microsecond per message between them.
Here the common case is one C lock taken on each side and a counter; the Condition is
waited on only when the bound is reached, and notified only when someone waits.
"""

from __future__ import annotations

import threading


class PendingSlots:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._waiting = 0

    def take(self, block: bool) -> bool:
        """A slot for one message; False at the bound unless `block`, which waits for one."""
        with self._lock:
            while self._used >= self._limit:
                if not block:
                    return False
                self._waiting += 1
                try:
                    self._room.wait()
                finally:
                    self._waiting -= 1
            self._used += 1
            return True

    def release(self, count: int) -> None:
        """`count` messages completed (the producer's on_completed)."""
        with self._lock:
            self._used -= count
            if self._waiting:
                self._room.notify(count)
