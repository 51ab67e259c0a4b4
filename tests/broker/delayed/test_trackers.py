"""The trackers on their own, with a fake clock: long horizons in no time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.broker.config import ConfigError, ServiceConfiguration
from magnetar.broker.delayed_delivery import create_tracker, tracker_kind
from magnetar.broker.delayed_delivery.bucket import BucketDelayedDeliveryTracker
from magnetar.broker.delayed_delivery.tracker import DelayedDeliveryTracker, InMemoryDelayedDeliveryTracker
from magnetar.broker.service.config_checks import check_features
from magnetar.storage import ManagedCursor, ManagedLedgerFactory, Position

DAY_MS = 86_400_000
BUCKET_MS = 300_000


class Clock:
    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def factory(tmp_path: Path) -> Iterator[ManagedLedgerFactory]:
    with ManagedLedgerFactory(tmp_path / "data") as f:
        yield f


@pytest.fixture
def cursor(factory: ManagedLedgerFactory) -> ManagedCursor:
    return factory.open("public/default/persistent/t").open_cursor("sub")


def bucket_tracker(factory: ManagedLedgerFactory, cursor: ManagedCursor, clock: Clock, *, strict: bool = True,
                   flush_threshold: int = 10) -> BucketDelayedDeliveryTracker:
    return BucketDelayedDeliveryTracker(
        factory.metadata_store, cursor, "public/default/persistent/t", tick_ms=1000, strict=strict,
        bucket_ms=BUCKET_MS, flush_threshold=flush_threshold, clock=clock)


@pytest.fixture(params=["in-memory", "bucket"])
def make(request, factory, cursor):
    def build(clock: Clock, strict: bool = True) -> DelayedDeliveryTracker:
        if request.param == "in-memory":
            return InMemoryDelayedDeliveryTracker(1000, strict, clock=clock)
        return bucket_tracker(factory, cursor, clock, strict=strict)
    return build


def test_due_in_time_then_position_order_and_never_early(make):
    clock = Clock()
    tracker = make(clock)
    t0 = clock.now
    times = {Position(1, 0): t0 + 500, Position(1, 1): t0 + 100, Position(1, 2): t0 + 100, Position(2, 0): t0 + 50}
    for position, at in times.items():
        assert tracker.add(position, at)
    assert len(tracker) == 4
    assert tracker.next_due_time() is not None and tracker.next_due_time() <= t0 + 50
    clock.now = t0 + 49
    assert tracker.pop_due(10) == []
    clock.now = t0 + 100
    assert tracker.pop_due(10) == [Position(2, 0), Position(1, 1), Position(1, 2)]
    clock.now = t0 + 499
    assert tracker.pop_due(10) == []
    clock.now = t0 + 500
    assert tracker.pop_due(10) == [Position(1, 0)]
    assert len(tracker) == 0 and tracker.next_due_time() is None


def test_not_strict_allows_one_tick_early(make):
    clock = Clock()
    tracker = make(clock, strict=False)
    assert not tracker.add(Position(1, 0), clock.now + 1000), "within one tick: deliver now"
    assert tracker.add(Position(1, 1), clock.now + 1001)
    clock.now += 1
    assert tracker.pop_due(10) == [Position(1, 1)]


def test_past_or_now_is_not_held(make):
    clock = Clock()
    tracker = make(clock)
    assert not tracker.add(Position(1, 0), clock.now)
    assert not tracker.add(Position(1, 1), clock.now - DAY_MS)
    assert len(tracker) == 0


def test_pop_honours_max_and_discard_prevents_delivery(make):
    clock = Clock()
    tracker = make(clock)
    for entry in range(10):
        tracker.add(Position(1, entry), clock.now + 10)
    tracker.discard([Position(1, 3), Position(1, 4), Position(9, 9)])
    assert len(tracker) == 8
    clock.now += 10
    first = tracker.pop_due(5)
    rest = tracker.pop_due(100)
    assert first + rest == [Position(1, e) for e in range(10) if e not in (3, 4)]
    assert len(first) == 5


def test_adding_twice_holds_once(make):
    clock = Clock()
    tracker = make(clock)
    assert tracker.add(Position(1, 0), clock.now + 10)
    assert tracker.add(Position(1, 0), clock.now + 10)
    assert len(tracker) == 1


def test_first_untracked_skips_runs(make):
    tracker = make(Clock())
    at = Clock().now + DAY_MS
    for entry in [*range(5, 1000), *range(1001, 1500)]:
        tracker.add(Position(7, entry), at)
    assert tracker.first_untracked(Position(7, 0)) == Position(7, 0)
    assert tracker.first_untracked(Position(7, 5)) == Position(7, 1000)
    assert tracker.first_untracked(Position(7, 1001)) == Position(7, 1500)
    assert tracker.first_untracked(Position(8, 3)) == Position(8, 3)
    assert tracker.high_water == Position(7, 1499)


def test_far_future_is_not_in_memory_but_is_delivered(factory, cursor):
    """A message due in days costs a membership bit, not a heap entry."""
    clock = Clock()
    tracker = bucket_tracker(factory, cursor, clock, flush_threshold=100)
    start = clock.now
    for entry in range(1000):
        tracker.add(Position(1, entry), start + 3 * DAY_MS + entry)
    assert tracker.add(Position(2, 0), start + 60_000)
    assert len(tracker._heap) == 0
    assert tracker.pop_due(10) == []
    assert len(tracker._heap) <= 1
    clock.now = start + 60_000
    assert tracker.pop_due(10) == [Position(2, 0)]
    assert tracker.next_due_time() == (start + 3 * DAY_MS) // BUCKET_MS * BUCKET_MS
    clock.now = start + 3 * DAY_MS + 999
    assert tracker.pop_due(2000) == [Position(1, e) for e in range(1000)]


def test_recovery_after_flush_and_unflushed_tail_is_not_a_member(factory, cursor):
    clock = Clock()
    start = clock.now
    tracker = bucket_tracker(factory, cursor, clock, flush_threshold=10)
    for entry in range(25):  # 20 flushed in two segments, 5 only in memory
        tracker.add(Position(1, entry), start + DAY_MS - entry * 1000)
    again = bucket_tracker(factory, cursor, clock, flush_threshold=10)
    assert len(again) == 20
    assert again.contains(Position(1, 19)) and not again.contains(Position(1, 20))
    assert again.high_water == Position(1, 19)
    clock.now = start + DAY_MS
    assert again.pop_due(100) == [Position(1, e) for e in reversed(range(20))]


def test_acked_after_flush_stays_acked_after_recovery(factory, cursor):
    clock = Clock()
    tracker = bucket_tracker(factory, cursor, clock, flush_threshold=5)
    for entry in range(5):
        tracker.add(Position(1, entry), clock.now + 10_000)
    tracker.discard([Position(1, 2)])
    tracker.flush()
    again = bucket_tracker(factory, cursor, clock, flush_threshold=5)
    clock.now += 10_000
    assert again.pop_due(10) == [Position(1, e) for e in (0, 1, 3, 4)]


def test_delivered_buckets_leave_storage(factory, cursor):
    clock = Clock()
    store = factory.metadata_store
    tracker = bucket_tracker(factory, cursor, clock, flush_threshold=3)
    for entry in range(3):
        tracker.add(Position(1, entry), clock.now + 1000 + entry)
    assert any("/seg/" in key for key in store.list(""))
    clock.now += BUCKET_MS * 2
    assert len(tracker.pop_due(10)) == 3
    assert not any("/seg/" in key or "/members/" in key for key in store.list(""))
    assert len(bucket_tracker(factory, cursor, clock)) == 0


def test_clear_and_recreated_subscription_start_empty(factory, cursor):
    clock = Clock()
    ledger = factory.open("public/default/persistent/t")
    tracker = bucket_tracker(factory, cursor, clock, flush_threshold=1)
    tracker.add(Position(1, 0), clock.now + DAY_MS)
    replaced = {key for key in factory.metadata_store.list("") if "/delayed/" in key}
    assert replaced
    tracker.clear()
    assert not replaced & set(factory.metadata_store.list(""))  # the replaced index's keys went with it
    assert len(tracker) == 0
    assert len(bucket_tracker(factory, cursor, clock)) == 0
    tracker.add(Position(1, 1), clock.now + DAY_MS)
    ledger.delete_cursor("sub")
    fresh = ledger.open_cursor("sub")
    assert len(bucket_tracker(factory, fresh, clock)) == 0


@pytest.mark.parametrize("name, kind", [
    ("org.apache.pulsar.broker.delayed.InMemoryDelayedDeliveryTrackerFactory", "in-memory"),
    ("org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory", "bucket"),
    ("InMemory", "in-memory"),
    ("Bucket", "bucket"),
])
def test_factory_names(name, kind):
    assert tracker_kind(name) == kind


def test_unknown_factory_is_refused_at_configuration():
    config = ServiceConfiguration()
    with pytest.raises(ConfigError, match="delayedDeliveryTrackerFactoryClassName"):
        config.apply({"delayedDeliveryTrackerFactoryClassName": "com.example.Nope"}, check_features)


def test_non_durable_cursor_falls_back_to_in_memory(factory):
    config = ServiceConfiguration()
    config.apply({"delayedDeliveryTrackerFactoryClassName": "Bucket"})
    ledger = factory.open("public/default/persistent/t")
    ledger.append_sync(b"x")
    non_durable = ledger.open_non_durable_cursor(Position(0, 0))
    tracker = create_tracker(config, factory.metadata_store, non_durable, ledger.name, True, 1000)
    assert isinstance(tracker, InMemoryDelayedDeliveryTracker)
    durable = create_tracker(config, factory.metadata_store, ledger.open_cursor("d"), ledger.name, True, 1000)
    assert isinstance(durable, BucketDelayedDeliveryTracker)
    assert create_tracker(config, factory.metadata_store, ledger.open_cursor("d"), ledger.name, False, 1000) is None
