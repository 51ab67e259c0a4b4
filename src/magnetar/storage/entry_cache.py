"""Recently appended entries, kept in memory for readers tailing a topic."""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Sequence

from magnetar.storage.position import Position

#: Memory an entry costs beyond its bytes: the bytes object's header, its int key, and the
#: amortised dict and deque slots (measured with tracemalloc; tests/storage/test_entry_cache.py
#: checks it). Small entries cost more in overhead than in data, so counting len() alone let
#: a "64 MB" cache hold twice that.
ENTRY_OVERHEAD_BYTES = sys.getsizeof(b"") + sys.getsizeof(1 << 60) + 64

#: Entry ids stay below 2**32 (managedLedgerMaxEntriesPerLedger is an int), so a position
#: packs into one int key.
_ENTRY_ID_BITS = 32


def _key(position: Position) -> int:
    return position[0] << _ENTRY_ID_BITS | position[1]


class EntryCache:
    """One byte-bounded FIFO per factory, shared by all its managed ledgers.

    Keyed by position alone: ledger ids are unique in a data dir, so positions of different
    topics never collide and nothing needs invalidating when a topic is closed or deleted.
    The key is the position packed into an int, not the Position: a full cache holds
    hundreds of thousands of keys, and Positions (tuple subclasses) stay tracked by the
    cyclic collector, which re-scanned all of them in every full collection, while ints and
    bytes are never tracked.
    FIFO rather than LRU because the entries worth keeping are the newest ones; a dict plus
    a deque of insertion order is cheaper per entry than an OrderedDict, and this runs for
    every append. Lookups take no lock: a dict lookup is atomic under the GIL, and readers
    hit this on every entry; inserts and evictions, which touch the byte count, do.
    """

    def __init__(self, max_bytes: int) -> None:
        """`max_bytes` bounds the memory the cached entries take, overhead included."""
        self._max_bytes = max_bytes
        self._entries: dict[int, bytes] = {}
        self._order: deque[int] = deque()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position[0] << _ENTRY_ID_BITS | position[1])

    def __contains__(self, position: Position) -> bool:
        return _key(position) in self._entries

    def put_run(self, first: Position, entries: Sequence[bytes]) -> None:
        """Cache entries stored one after another in one ledger, from `first` on."""
        if self._max_bytes <= 0:
            return
        cached = self._entries
        start = _key(first)
        keys = range(start, start + len(entries))
        with self._lock:
            cached.update(zip(keys, entries, strict=True))
            self._order.extend(keys)
            self._bytes += sum(map(len, entries)) + ENTRY_OVERHEAD_BYTES * len(entries)
            popleft = self._order.popleft
            while self._bytes > self._max_bytes:
                self._bytes -= len(cached.pop(popleft())) + ENTRY_OVERHEAD_BYTES

    @property
    def size_bytes(self) -> int:
        """Memory the cached entries take, as counted against the bound."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
