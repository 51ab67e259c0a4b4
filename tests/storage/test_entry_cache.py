"""The entry cache's bound is on real memory, not on the sum of entry lengths."""

from __future__ import annotations

import gc
import os
import tracemalloc

import pytest

from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.position import Position


@pytest.mark.parametrize("entry_size", [16, 60, 1000])
def test_counted_bytes_match_traced_memory(entry_size):
    count = 50_000
    cache = EntryCache(1 << 40)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for start in range(0, count, 100):
            # Built here as the broker builds them: fresh bytes per append, one run per group.
            cache.put_run(Position(7_000_000 + start // 10_000, start), [os.urandom(entry_size) for _ in range(100)])
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(cache) == count
    assert 0.8 <= cache.size_bytes / used <= 1.25, (cache.size_bytes, used)


def test_bound_holds_for_tiny_entries():
    cache = EntryCache(1_000_000)
    for start in range(0, 100_000, 1000):
        cache.put_run(Position(1, start), [b"x"] * 1000)
    assert cache.size_bytes <= 1_000_000
    assert len(cache) < 1_000_000 // 100
    assert Position(1, 99_999) in cache and Position(1, 0) not in cache


def test_entries_older_than_the_age_bound_go_even_without_appends():
    now = [100.0]
    cache = EntryCache(1 << 30, max_age_seconds=1.0, clock=lambda: now[0])
    cache.put_run(Position(3, 0), [b"a"] * 10)
    now[0] += 0.6
    cache.put_run(Position(3, 10), [b"b"] * 5)
    now[0] += 0.5  # the first run is 1.1 s old, the second 0.5 s
    cache.evict_expired()
    assert Position(3, 9) not in cache and cache.get(Position(3, 10)) == b"b"
    assert len(cache) == 5 and cache.evicted == 10
    now[0] += 1.0
    cache.evict_expired()
    assert len(cache) == 0 and cache.size_bytes == 0
