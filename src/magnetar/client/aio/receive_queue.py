"""The consumer's receiver queue, in two flavours: for asyncio tasks and for blocking threads.

The event loop fills the queue; the application takes from it. With the asyncio API both
happen on the loop, and a waiting `receive()` is a future. With the blocking facade the
application waits in its own thread, so the queue is a `queue.SimpleQueue` (a C queue whose
`get(timeout)` releases the GIL): no hop through the event loop per message.
"""

from __future__ import annotations

import asyncio
import queue
from collections import deque
from typing import Any


class AsyncReceiveQueue:
    threaded = False

    def __init__(self) -> None:
        self._items: deque[Any] = deque()
        self._waiters: deque[asyncio.Future[Any]] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def put_many(self, items: list[Any]) -> None:
        self._items.extend(items)
        waiters = self._waiters
        while waiters and self._items:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(self._items.popleft())

    def get_nowait(self) -> Any | None:
        return self._items.popleft() if self._items else None

    def waiter(self) -> asyncio.Future[Any]:
        """A future that receives the next item (cancel it to stop waiting)."""
        future = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        return future

    def requeue_front(self, item: Any) -> None:
        """Give back an item whose taker was cancelled before it could use it."""
        self._items.appendleft(item)
        self.put_many([])

    def clear(self) -> int:
        count = len(self._items)
        self._items.clear()
        return count

    def fail_waiters(self, exc: BaseException) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)


_CLOSED = object()


class ThreadReceiveQueue:
    """Filled by the event loop, read by application threads."""

    threaded = True

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def __len__(self) -> int:
        return self._queue.qsize()

    def put_many(self, items: list[Any]) -> None:
        put = self._queue.put
        for item in items:
            put(item)

    def get_nowait(self) -> Any | None:
        try:
            item = self._queue.get_nowait()
        except queue.Empty:
            return None
        return None if item is _CLOSED else item

    def get(self, timeout: float | None) -> Any | None:
        """The next item, or None on timeout or when the consumer closed."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CLOSED:
            self._queue.put(_CLOSED)  # wake every other waiting thread too
            return None
        return item

    def clear(self) -> int:
        count = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return count
            if item is _CLOSED:
                self._queue.put(_CLOSED)
                return count
            count += 1

    def fail_waiters(self, exc: BaseException) -> None:
        self._queue.put(_CLOSED)
