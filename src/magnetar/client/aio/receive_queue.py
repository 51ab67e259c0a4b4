"""The consumer's receiver queue, in two flavours: for asyncio tasks and for blocking threads.

The event loop fills the queue; the application takes from it. With the asyncio API both
happen on the loop, and a waiting `receive()` is a future. With the blocking facade the
application waits in its own thread, so the queue is a `queue.SimpleQueue` (a C queue whose
`get(timeout)` releases the GIL): no hop through the event loop per message.

A multi-topic consumer's partitions share one queue, so a partition that forgets what it
queued (it subscribed again, it seeks, it asks for redelivery) takes out its own items only:
its siblings' were sent to them, and the broker sends those to nobody again.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from magnetar.client.columnar import item_count, item_owner


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

    def put_from_read(self, items: list[Any], _after_read: Callable[[Callable[[], None]], None]) -> None:
        """put_many: the waiters are on the loop too, so there is no wake-up to save."""
        self.put_many(items)

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

    def clear(self, owner: Any, permits_back: bool) -> int:
        """Forget `owner`'s items; returns how many messages they were (`permits_back` is
        the threaded queue's concern: nothing is dropped later here)."""
        count, kept = 0, deque()
        for item in self._items:
            if item_owner(item) is owner:
                count += item_count(item)
            else:
                kept.append(item)
        self._items = kept
        return count

    def fail_waiters(self, exc: BaseException) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(exc)


_CLOSED = object()


class ThreadReceiveQueue:
    """Filled by the event loop, read by application threads.

    The loop puts whole lists (one entry's messages, so one owner's) into a
    `queue.SimpleQueue`; a reader takes a list at a time into its own buffer and hands out
    messages from there, so the two threads meet once per entry, not once per message.
    `clear(owner)` (a reconnect, a seek, a redelivery) bumps that owner's generation: a list
    queued before it is thrown away by the reader that meets it, which gives its permits
    back to the owner unless the owner re-registered since (the broker forgot them then).
    Nothing is taken out of the SimpleQueue meanwhile: a reader may be taking from it, and
    putting the siblings' lists back would reorder them.
    """

    threaded = True

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._cleared: dict[Any, tuple[int, int]] = {}
        """Each owner that cleared: (its generation, the oldest generation whose lists still
        hold the broker's permits). Owners never cleared are at (0, 0)."""
        self._buffer: deque[Any] = deque()
        self._buffer_owner: Any = None
        self._buffer_generation = 0
        self._lock = threading.Lock()
        """Serialises readers (several application threads may call receive)."""
        self._held: list[list[Any]] = []
        """Each entry's messages of the read being dispatched (loop side; see put_from_read)."""

    def __len__(self) -> int:
        """Not exact (queued lists count one each), but zero exactly when nothing is queued."""
        buffered = len(self._buffer) if self._buffer_is_current() else 0
        return buffered + self._queue.qsize()

    def _generation(self, owner: Any) -> int:
        cleared = self._cleared.get(owner)
        return 0 if cleared is None else cleared[0]

    def _buffer_is_current(self) -> bool:
        return not self._cleared or self._buffer_generation == self._generation(self._buffer_owner)

    def put_many(self, items: list[Any]) -> None:
        self.release()  # after what a read holds back: order is kept
        if items:
            self._queue.put((self._generation(item_owner(items[0])), items))

    def put_from_read(self, items: list[Any], after_read: Callable[[Callable[[], None]], None]) -> None:
        """put_many of messages decoded from a connection's read, held back until the read is
        done (`after_read` runs `release` then): a waiting application thread is woken once a
        read, where a read of many entries woke it once an entry (each a thread switch; once
        it is awake, the entries put after the first cost no wake-up)."""
        if not items:
            return
        if not self._held:
            after_read(self.release)
        self._held.append(items)

    def release(self) -> None:
        held = self._held
        if held:
            self._held = []
            put, generation = self._queue.put, self._generation
            for items in held:
                put((generation(item_owner(items[0])), items))

    def get_nowait(self) -> Any | None:
        return self.get(0)

    def get(self, timeout: float | None) -> Any | None:
        """The next item, or None on timeout or when the consumer closed."""
        with self._lock:
            buffer = self._buffer
            while True:
                if buffer and self._buffer_is_current():
                    return buffer.popleft()
                if buffer:  # queued before its owner's clear(): the broker sends these again
                    self._drop(buffer, self._buffer_owner, self._buffer_generation)
                try:
                    item = self._queue.get_nowait() if timeout == 0 else self._queue.get(timeout=timeout)
                except queue.Empty:
                    return None
                if item is _CLOSED:
                    self._queue.put(_CLOSED)  # wake every other waiting thread too
                    return None
                generation, items = item
                self._buffer_owner, self._buffer_generation = item_owner(items[0]), generation
                buffer.extend(items)

    def _drop(self, buffer: deque[Any], owner: Any, generation: int) -> None:
        if generation >= self._cleared.get(owner, (0, 0))[1]:
            owner.dropped_by_reader(sum(map(item_count, buffer)))
        buffer.clear()

    def put_back(self, item: Any) -> None:
        """Return an item just taken to the front (a batch_receive that stops before an error)."""
        with self._lock:
            self._buffer.appendleft(item)

    def clear(self, owner: Any, permits_back: bool) -> int:
        """Forget `owner`'s items (the loop's side): those a read holds back at once (returns
        how many messages they were), those queued once a reader meets them (their permits
        go back then when `permits_back`: the owner did not re-register)."""
        generation, floor = self._cleared.get(owner, (0, 0))
        generation += 1
        self._cleared[owner] = (generation, floor if permits_back else generation)
        count, kept = 0, []
        for items in self._held:
            if item_owner(items[0]) is owner:
                count += sum(map(item_count, items))
            else:
                kept.append(items)
        self._held = kept
        return count

    def fail_waiters(self, exc: BaseException) -> None:
        self.release()
        self._queue.put(_CLOSED)
