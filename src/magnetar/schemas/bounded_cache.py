"""A memo of what definitions cost to compute (parsed schemas, their canonical form), held
within a number of entries and a total size of the definitions it was computed from.

A count alone would not bound it: a parsed Avro schema takes about 25 times the bytes of its
text, so 512 entries of 10,000-field records (350 KB of text each) held 4 GB. Calls come from
the event loop and from the thread that runs schema checks, hence the lock; a value is
computed outside it (two threads may compute the same one; both results are equal).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._entries: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable, size: int, compute: Callable[[], V]) -> V:
        """The value of `key`, computed by `compute` when absent; `size` is what it counts
        against `max_bytes` (a value larger than that is returned, not kept)."""
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found[0]
        value = compute()
        if size <= self.max_bytes:
            self._keep(key, value, size)
        return value

    def _keep(self, key: Hashable, value: V, size: int) -> None:
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = (value, size)
            self._bytes += size
            while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._bytes -= dropped

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)
