"""Ledger ids, unique across a whole data dir."""

from __future__ import annotations

import threading

from magnetar.storage.layout import NEXT_LEDGER_ID_KEY
from magnetar.storage.metadata_store import MetadataStore


class LedgerIdAllocator:
    """Hands out ids from blocks reserved durably in the metadata store.

    Reserving before use keeps ids unique across restarts and crashes (a crash only skips
    the rest of a block); reserving a block at a time means a rollover rarely pays for a
    metadata commit on the appending thread.
    """

    def __init__(self, store: MetadataStore, block_size: int = 64) -> None:
        self._store = store
        self._block_size = block_size
        self._next = self._limit = 0
        self._lock = threading.Lock()

    def next_id(self) -> int:
        with self._lock:
            if self._next >= self._limit:
                self._reserve_block()
            ledger_id = self._next
            self._next += 1
            return ledger_id

    def _reserve_block(self) -> None:
        with self._store.transaction() as txn:
            raw = self._store.get(NEXT_LEDGER_ID_KEY)
            start = int(raw) if raw is not None else 1
            txn.put(NEXT_LEDGER_ID_KEY, str(start + self._block_size).encode())
        self._next, self._limit = start, start + self._block_size
