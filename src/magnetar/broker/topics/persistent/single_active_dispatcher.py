"""Exclusive and Failover dispatch: one active consumer receives everything, in order."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.consumer_selectors import SingleActiveElection
from magnetar.broker.topics.persistent.compacted_reads import CompactedReader
from magnetar.broker.topics.persistent.dispatcher import MAX_ROUNDS_PER_PASS, Dispatcher
from magnetar.storage import Position

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription


class SingleActiveConsumerDispatcher(SingleActiveElection, CompactedReader, Dispatcher):
    """Exclusive and Failover: one consumer at a time receives, in order (a read_compacted
    one reads the compacted view, see compaction.reads)."""

    def __init__(self, subscription: PersistentSubscription, sub_type: int) -> None:
        super().__init__(subscription)
        self.sub_type = sub_type
        self.active: Consumer | None = None
        self._paused: asyncio.TimerHandle | None = None
        """Set while a rescheduled entry waits: nothing is read past it meanwhile."""

    def _active_changed(self, previous: Consumer | None) -> None:
        if previous is not None and previous.pending:
            self._release(previous, list(previous.pending))
        else:
            self._restart_compacted_view()
        self.schedule()

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        self._take_back(consumer, positions)
        # Order is the promise here, so everything unacked goes out again from the start.
        for other in self.consumers:
            for position in other.pending:
                self.outstanding.pop(position, None)
            other.pending.clear()
        self.read_position = self.subscription.first_unacked_position()
        self._restart_compacted_view()

    def dispatch(self) -> None:
        consumer = self.active
        rounds = handed = 0
        while consumer is not None and consumer.can_receive and self._paused is None:
            rounds += 1
            if rounds > MAX_ROUNDS_PER_PASS or handed >= self.max_read:  # the rest in the next turn
                self.schedule()
                return
            entries = self._read_new(min(consumer.permits, self.max_read))
            handed += len(entries)
            if not entries:
                self._notify_end_of_topic()
                return
            for entry in entries:
                if not self._deliver(consumer, entry) and self._paused is not None:
                    return  # rescheduled: nothing after it goes out before it does

    def _reschedule(self, entry: DispatchEntry) -> None:
        """Order is the promise: read again from this entry once the delay is over."""
        self.read_position = entry.position
        self._paused = asyncio.get_running_loop().call_later(self._reschedule_delay(), self._resume)

    def _resume(self) -> None:
        self._paused = None
        self.schedule()

    def reset(self, position: Position) -> None:
        self.close()
        super().reset(position)
        self._restart_compacted_view()

    def close(self) -> None:
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None
