"""The snapshots a replicated subscription keeps, and a snapshot's rounds of answers."""

from __future__ import annotations

import random

from magnetar.replication.subscriptions.snapshot_builder import SnapshotBuilder
from magnetar.replication.subscriptions.snapshot_cache import CachedSnapshot, SnapshotCache
from magnetar.storage import Position


def entry_distance(a: Position, b: Position) -> int:
    return b.entry_id - a.entry_id


def snapshot(entry_id: int) -> CachedSnapshot:
    return CachedSnapshot(Position(1, entry_id), {"west": (7, entry_id * 2)})


def test_the_newest_snapshot_the_mark_delete_position_reached_is_taken_once() -> None:
    cache = SnapshotCache(10, entry_distance)
    for entry_id in (10, 20, 30):
        cache.add(snapshot(entry_id))
    assert cache.advance(Position(1, 9)) is None
    assert cache.advance(Position(1, 25)) == snapshot(20)
    assert cache.advance(Position(1, 25)) is None  # 10 and 20 are gone with it
    assert cache.advance(Position(1, 30)) == snapshot(30)
    assert len(cache) == 0


def test_a_full_cache_keeps_its_oldest_and_newest_and_stays_spread() -> None:
    """Snapshots at random gaps: the first and the last always stay (a far-behind consumer and a
    caught-up one both find one), and the one dropped is always where two neighbours are closest."""
    cache = SnapshotCache(5, entry_distance)
    positions = sorted(random.sample(range(1, 10_000), 40))
    for entry_id in positions:
        cache.add(snapshot(entry_id))
        assert len(cache) <= 5
    kept = [s.position.entry_id for s in cache]
    assert kept[0] == positions[0] and kept[-1] == positions[-1]
    assert kept == sorted(kept)

    cache = SnapshotCache(4, entry_distance)
    for entry_id in (1, 2, 3, 100, 200):
        cache.add(snapshot(entry_id))
    assert [s.position.entry_id for s in cache] == [1, 3, 100, 200]  # 2's neighbours were closest


def test_an_older_snapshot_means_the_topic_went_back_and_the_cache_starts_over() -> None:
    cache = SnapshotCache(10, entry_distance)
    cache.add(snapshot(50))
    cache.add(snapshot(5))
    assert cache.advance(Position(1, 49)) == snapshot(5)
    assert len(cache) == 0


def test_with_two_remotes_a_second_round_follows_and_the_first_answers_count() -> None:
    builder = SnapshotBuilder({"west", "north"}, timeout=30)
    assert builder.received("west", (1, 1)) is None
    assert builder.received("elsewhere", (9, 9)) is None  # not asked
    assert builder.received("north", (2, 2)) == "again"
    assert builder.received("north", (2, 5)) is None
    assert builder.received("west", (1, 4)) == "done"
    assert builder.responses == {"west": (1, 1), "north": (2, 2)}
    assert builder.received("west", (1, 8)) is None  # complete: later answers change nothing


def test_with_one_remote_one_round_completes() -> None:
    builder = SnapshotBuilder({"west"}, timeout=30)
    assert builder.received("west", (3, 4)) == "done"
