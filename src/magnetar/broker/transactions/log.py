"""The coordinator's log writes, grouped and off the event loop (Pulsar's transaction log
appends, batched as its MLTransactionLogImpl batches them).

Every record the coordinator writes or deletes goes through one `TransactionLog`: writes
asked for while a commit runs wait for the next one, which takes them all in one SQLite
commit (one fsync) on a thread of its own, so many transactions share a commit and the loop
never waits for the disk. A record is encoded when its commit is dispatched, from the
transaction's state at that moment: a later change is written by a later commit, never
overwritten by an earlier one.

`write_now` is the synchronous way (the coordinator's callers that need a record durable
before they go on, without a future): it commits everything queued and everything in the
commit under way, under the same lock as the thread's commit, and tells that commit to
skip its (older) encodings.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from magnetar.storage import MetadataStore

Encoder = Callable[[], bytes | None]
"""The record's current bytes (None: delete it)."""
_SHARED: weakref.WeakKeyDictionary[MetadataStore, TransactionLog] = weakref.WeakKeyDictionary()


def shared_log(store: MetadataStore) -> TransactionLog:
    """The one log of `store`: the coordinator's records and every subscription's pending
    acks share its commits, and its order (a record asked for before another is durable no
    later than it: a subscription's pending acks never outlive, after a crash, the
    coordinator's record that names the subscription)."""
    log = _SHARED.get(store)
    if log is None:
        log = _SHARED[store] = TransactionLog(store)
    return log


class _Group:
    __slots__ = ("skip", "writes")

    def __init__(self, writes: dict[str, bytes | None]) -> None:
        self.writes = writes
        self.skip = False
        """A synchronous commit wrote newer versions of every one of these records."""


class TransactionLog:
    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._queued: dict[str, Encoder] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._running: _Group | None = None
        self._running_keys: dict[str, Encoder] = {}
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._holding = 0
        self.appends = 0
        """Commits made (Pulsar's pulsar_txn_append_log_total counts appends)."""

    def write(self, key: str, encode: Encoder) -> asyncio.Future[None]:
        """Write (or delete) `key` with what `encode` gives when the commit is dispatched;
        the future is done once it is durable."""
        self._queued[key] = encode
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        if self._running is None and not self._holding:
            self._dispatch()
        return waiter

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Writes asked for in the block go in one commit (one SQLite transaction: all or none
        of them durable), the block holding the dispatch back; it must not await."""
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1
            if not self._holding and self._running is None and self._waiters:
                self._dispatch()

    def forget_later(self, key: str) -> None:
        """Delete `key` with the next commit, whoever asks for it (nobody waits for this)."""
        self._queued.setdefault(key, _none)

    def write_now(self, key: str, encode: Encoder) -> None:
        """Write `key` durably before returning, with everything queued and under way."""
        self._queued[key] = encode
        self.flush_now()

    def flush_now(self) -> None:
        """Everything queued and under way, durable before returning (encoded now)."""
        encoders = {**self._running_keys, **self._queued}
        writes = {name: encoder() for name, encoder in encoders.items()}
        with self._lock:
            self._commit(writes)
            if self._running is not None:
                self._running.skip = True
        self._queued.clear()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _dispatch(self) -> None:
        encoders, self._queued = self._queued, {}
        waiters, self._waiters = self._waiters, []
        group = self._running = _Group({key: encoder() for key, encoder in encoders.items()})
        self._running_keys = encoders
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="magnetar-txn-log")
        done = asyncio.get_running_loop().run_in_executor(self._executor, self._commit_group, group)
        done.add_done_callback(lambda finished: self._committed(finished, waiters))

    def _commit_group(self, group: _Group) -> None:
        with self._lock:
            if not group.skip:
                self._commit(group.writes)

    def _commit(self, writes: dict[str, bytes | None]) -> None:
        with self._store.transaction() as writer:
            for key, value in writes.items():
                if value is None:
                    writer.delete(key)
                else:
                    writer.put(key, value)
        self.appends += 1

    def _committed(self, finished: asyncio.Future[None], waiters: list[asyncio.Future[None]]) -> None:
        self._running = None
        self._running_keys = {}
        exc = None if finished.cancelled() else finished.exception()
        for waiter in waiters:
            settle(waiter, exc)
        if self._waiters:
            self._dispatch()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


def _none() -> None:
    return None


def settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    """Done with `exc` (None: with no result), unless it is done already (cancelled)."""
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
