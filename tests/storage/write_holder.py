"""A metadata write transaction held open on another thread: what a slow commit (its fsync)
looks like to everyone else, for as long as a test needs it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from magnetar.storage import MetadataStore


@contextmanager
def write_held_open(store: MetadataStore, writes: dict[str, bytes] | None = None) -> Iterator[None]:
    """Inside: another thread is in a write transaction of `store` that made `writes` and
    has not committed; it commits on leaving."""
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store.transaction() as txn:
            for key, value in (writes or {}).items():
                txn.put(key, value)
            inside.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        release.set()
        holder.join()
