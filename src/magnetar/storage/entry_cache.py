"""Recently appended entries, kept in memory for readers tailing a topic."""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from magnetar.storage.position import Position

#: Memory an entry costs beyond its bytes: the bytes object's header, its int key, and the
#: amortised dict slot (measured with tracemalloc; tests/storage/test_entry_cache.py checks
#: it). Small entries cost more in overhead than in data, so counting len() alone let a
#: "64 MB" cache hold twice that.
ENTRY_OVERHEAD_BYTES = sys.getsizeof(b"") + sys.getsizeof(1 << 60) + 56

#: Entry ids stay below 2**32 (managedLedgerMaxEntriesPerLedger is an int), so a position
#: packs into one int key.
_ENTRY_ID_BITS = 32


def _key(position: Position) -> int:
    return position[0] << _ENTRY_ID_BITS | position[1]


class EntryCache:
    """One FIFO per factory, shared by all its managed ledgers, bounded in bytes
    (managedLedgerCacheSizeMB) and in age (managedLedgerCacheEvictionTimeThresholdMillis).

    Keyed by position alone: ledger ids are unique in a data dir, so positions of different
    topics never collide and nothing needs invalidating when a topic is closed or deleted.
    The key is the position packed into an int, not the Position: a full cache holds
    hundreds of thousands of keys, and Positions (tuple subclasses) stay tracked by the
    cyclic collector, which re-scanned all of them in every full collection, while ints and
    bytes are never tracked. Eviction goes by runs (the entries one group commit wrote),
    oldest first, so the bookkeeping is one small tuple per group rather than per entry.
    FIFO rather than LRU because the entries worth keeping are the newest ones. Lookups take
    no lock: a dict lookup is atomic under the GIL, and readers hit this on every entry;
    inserts and evictions, which touch the byte count, do.
    """

    def __init__(self, max_bytes: int, max_age_seconds: float = float("inf"),
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`max_bytes` bounds the memory the cached entries take, overhead included;
        entries older than `max_age_seconds` go at the next put or evict_expired()."""
        self._max_bytes = max_bytes
        self._max_age = max_age_seconds
        self._clock = clock
        self._entries: dict[int, bytes] = {}
        self._runs: deque[tuple[int, int, int, float]] = deque()  # first key, count, bytes, when
        self._bytes = 0
        self._lock = threading.Lock()
        self.evicted = 0

    def get(self, position: Position) -> bytes | None:
        return self._entries.get(position[0] << _ENTRY_ID_BITS | position[1])

    def __contains__(self, position: Position) -> bool:
        return _key(position) in self._entries

    def put_run(self, first: Position, entries: Sequence[bytes]) -> None:
        """Cache entries stored one after another in one ledger, from `first` on."""
        if self._max_bytes <= 0:
            return
        start = _key(first)
        size = sum(map(len, entries)) + ENTRY_OVERHEAD_BYTES * len(entries)
        now = self._clock()
        with self._lock:
            self._entries.update(zip(range(start, start + len(entries)), entries, strict=True))
            self._runs.append((start, len(entries), size, now))
            self._bytes += size
            self._evict(now)

    def evict_expired(self) -> None:
        """Drop what has aged out even when nothing is appended (an idle broker)."""
        with self._lock:
            self._evict(self._clock())

    def _evict(self, now: float) -> None:
        runs, cached = self._runs, self._entries
        oldest_kept = now - self._max_age
        while runs and (self._bytes > self._max_bytes or runs[0][3] < oldest_kept):
            start, count, size, _ = runs.popleft()
            for key in range(start, start + count):
                cached.pop(key, None)
            self._bytes -= size
            self.evicted += count

    @property
    def size_bytes(self) -> int:
        """Memory the cached entries take, as counted against the bound."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)
