"""Shared dispatch: round robin over consumers with permits, a replay set for redeliveries,
and the delayed-delivery tracker (PIP-26)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from sortedcontainers import SortedDict

from magnetar.broker.delayed_delivery import create_tracker
from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.consumer_selectors import (
    RoundRobinSelector,
)
from magnetar.broker.topics.persistent.dispatcher import MAX_ROUNDS_PER_PASS, Dispatcher
from magnetar.broker.topics.topic_limits import delayed_delivery
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.broker.delayed_delivery.tracker import DelayedDeliveryTracker
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription


#: Bound on entries parked for redelivery before reading new ones stops, so one
#: stalled Key_Shared consumer cannot pull the whole backlog into memory.
MAX_REPLAY_ENTRIES = 10_000


class MultipleConsumersDispatcher(Dispatcher):
    """Shared: any consumer with permits may take any entry."""

    def __init__(self, subscription: PersistentSubscription) -> None:
        super().__init__(subscription)
        self.replay: SortedDict = SortedDict()  # Position -> sticky-key hash (or -1)
        self._rescheduled: dict[Position, tuple[float, int]] = {}  # -> (monotonic due time, key hash)
        self._reschedule_timer: asyncio.TimerHandle | None = None
        self._round_robin = RoundRobinSelector()
        topic = subscription.topic
        settings = delayed_delivery(topic)
        self.delayed = create_tracker(topic.context.config, topic.context.metadata, subscription.cursor,
                                      topic.ledger.name, settings.active, settings.tick_time_ms)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._last_fire = 0

    @property
    def delayed_messages(self) -> int:
        return len(self.delayed) if self.delayed is not None else 0

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        for position in self._take_back(consumer, positions):
            self.replay[position] = -1

    def requeue(self, positions: list[Position]) -> None:
        for position in positions:
            self.replay[position] = -1
        self.schedule()

    def acknowledged(self, positions: Iterable[Position]) -> None:
        positions = list(positions)
        super().acknowledged(positions)
        for position in positions:
            self.replay.pop(position, None)
            self._rescheduled.pop(position, None)
        if self.delayed is not None:
            self.delayed.discard(positions)

    def reset(self, position: Position) -> None:
        super().reset(position)
        self.replay.clear()
        self._rescheduled.clear()
        if self.delayed is not None:
            self.delayed.clear()

    def dispatch(self) -> None:
        self._dispatch_rounds()
        self._arm_timer()

    def _dispatch_rounds(self) -> None:
        rounds = handed = 0
        while True:
            available = [c for c in self.consumers if c.can_receive]
            if not available:
                return
            rounds += 1
            if rounds > MAX_ROUNDS_PER_PASS or handed >= self.max_read:  # the rest in the next turn
                self.schedule()
                return
            budget = min(sum(c.permits for c in available), self.max_read)
            entries = self._read_replay(budget)
            if len(entries) < budget:
                entries += self._read_due(budget - len(entries))
            fresh = 0
            if len(entries) < budget and len(self.replay) < MAX_REPLAY_ENTRIES:
                new = self._read_new(budget - len(entries), {entry.position for entry in entries})
                fresh = len(new)
                entries += new
            if not entries:
                self._notify_end_of_topic()
                return
            handed += len(entries)
            parked = self._assign(entries)
            if parked == len(entries) and not fresh:
                return

    def _read_replay(self, budget: int) -> list[DispatchEntry]:
        entries: list[DispatchEntry] = []
        for position in list(self.replay.islice(0, None)):
            if len(entries) >= budget:
                break
            if not self._may_take_replay(position, self.replay[position]):
                continue
            del self.replay[position]
            if self._deliverable(position) and (entry := self._entry(position, self._read_one(position))):
                entries.append(entry)
        return entries

    def _may_take_replay(self, position: Position, key_hash: int) -> bool:
        """Shared: any parked entry may go; Key_Shared narrows this by key owner."""
        return True

    # -- delayed delivery
    def _hold(self, entry: DispatchEntry) -> bool:
        metadata = entry.metadata
        return (
            self.delayed is not None
            and metadata is not None
            and metadata.HasField("deliver_at_time")
            and self.delayed.add(entry.position, metadata.deliver_at_time)
        )

    def _read_due(self, budget: int) -> list[DispatchEntry]:
        """Held entries whose time has come; they are never held again (redelivery included)."""
        if self.delayed is None:
            return []
        due = [self._entry(position, self._read_one(position))
               for position in self.delayed.pop_due(budget) if self._deliverable(position)]
        return [entry for entry in due if entry is not None]

    def _readable_run(self, limit: int, taken: AbstractSet[Position]) -> int:
        """After a restart the index may already hold positions ahead of the read position:
        step over them, and over acknowledged ones and those it already released, unread."""
        tracker = self.delayed
        if tracker is None or tracker.high_water is None or tracker.high_water < self.read_position:
            return limit
        cursor, ledger = self.subscription.cursor, self.subscription.topic.ledger
        position = next(cursor.iter_unacked(self.read_position), None)
        while position is not None and self._passed_over(tracker, taken, position):
            after = tracker.first_untracked(position) if tracker.contains(position) else ledger.next_position(position)
            position = next(cursor.iter_unacked(after), None)
        if position is None:
            last = ledger.last_confirmed_position
            self.read_position = ledger.next_position(last) if last is not None else self.read_position
            return limit
        self.read_position = position
        run = 1
        for following in cursor.iter_unacked(ledger.next_position(position)):
            contiguous = following == ledger.next_position(position)
            if run >= limit or not contiguous or self._passed_over(tracker, taken, following):
                break
            position = following
            run += 1
        return run

    def _passed_over(self, tracker: DelayedDeliveryTracker, taken: AbstractSet[Position], position: Position) -> bool:
        """Held, out with a consumer, parked for replay or taken by this pass: reading it as
        new would deliver it twice."""
        return (position in self.outstanding or position in self.replay or position in taken
                or tracker.contains(position))

    def _arm_timer(self) -> None:
        """One timer, for the next due time, never sooner than one tick after the last firing."""
        tracker = self.delayed
        due = tracker.next_due_time() if tracker is not None and self._can_take_due() else None
        if tracker is None or due is None:
            self._cancel_timer()
            return
        fire_at = max(due - tracker.early_ms, self._last_fire + tracker.tick_ms)
        if self._timer is not None and self._timer_at <= fire_at:
            return
        self._cancel_timer()
        self._timer_at = fire_at
        # +1 ms: the clock is read in whole ms, and a timer firing just short of
        # the due time would otherwise wait a whole tick more.
        delay = max(0.0, (fire_at + 1) / 1000 - time.time())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)

    def _can_take_due(self) -> bool:
        return any(consumer.can_receive for consumer in self.consumers)

    def close(self) -> None:
        self._cancel_timer()
        if self._reschedule_timer is not None:
            self._reschedule_timer.cancel()
            self._reschedule_timer = None

    # -- rescheduled by entry filters
    def _deliverable(self, position: Position) -> bool:
        return position not in self._rescheduled and super()._deliverable(position)

    def _reschedule(self, entry: DispatchEntry) -> None:
        """Parked out of reach until the delay is over, then read again like a redelivery
        (without counting one)."""
        self._rescheduled[entry.position] = (time.monotonic() + self._reschedule_delay(), self._hash(entry))
        if self._reschedule_timer is None:
            self._reschedule_timer = asyncio.get_running_loop().call_later(
                self._reschedule_delay(), self._release_rescheduled)

    def _release_rescheduled(self) -> None:
        self._reschedule_timer = None
        now = time.monotonic()
        for position, (due, key_hash) in list(self._rescheduled.items()):
            if due <= now:
                del self._rescheduled[position]
                self.replay[position] = key_hash
        if self._rescheduled:
            first_due = min(due for due, _ in self._rescheduled.values())
            self._reschedule_timer = asyncio.get_running_loop().call_later(
                max(0.0, first_due - now), self._release_rescheduled)
        self.schedule()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        self._last_fire = self.delayed.clock() if self.delayed is not None else 0
        self.schedule()

    @staticmethod
    def _hash(entry: DispatchEntry) -> int:
        return -1

    def _assign(self, entries: list[DispatchEntry]) -> int:
        """Hands each entry to a consumer or parks it in the replay set; returns how many
        were parked."""
        parked = 0
        for entry in entries:
            consumer = self._round_robin.select(self.consumers)
            if consumer is None:
                self.replay[entry.position] = -1
                parked += 1
            else:
                self._deliver(consumer, entry)
        return parked
