"""Dispatchers: which consumer of a subscription gets which entry, and when.

All of them read forward from the subscription's read position, skip entries
the cursor already holds as acknowledged, and charge consumers one permit per
message. They differ only in who may receive:

- `SingleActiveConsumerDispatcher` (Exclusive, Failover): one active consumer
  gets everything in order; redelivery rewinds to the first unacked entry.
- `MultipleConsumersDispatcher` (Shared): round robin over consumers with
  permits; entries to deliver again wait in a replay set read before new ones.
- `KeySharedDispatcher` (Key_Shared): like Shared, but an entry goes to the
  consumer owning its key's hash, and order per key is kept (see there).

Shared and Key_Shared hold back entries whose metadata has deliver_at_time
(PIP-26): the subscription's delayed-delivery tracker remembers them by
position, and once due they are read again before new entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from sortedcontainers import SortedDict

from magnetar.broker.consumer import Consumer, DispatchEntry
from magnetar.broker.consumer_selectors import (
    RoundRobinSelector,
    StickyKeyConsumerSelector,
    announce_active,
    check_exclusive,
    choose_active,
    sticky_key_hash,
)
from magnetar.broker.delayed_delivery import DelayedDeliveryTracker, create_tracker
from magnetar.broker.entry_filters import FilterResult
from magnetar.broker.entry_filters.gate import judge
from magnetar.storage import CorruptEntryError, Position
from magnetar.wire.entry import validate_publishable
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.subscription import PersistentSubscription

log = logging.getLogger(__name__)

#: Bound on entries parked for redelivery before reading new ones stops, so one
#: stalled Key_Shared consumer cannot pull the whole backlog into memory.
MAX_REPLAY_ENTRIES = 10_000
#: Entries one read pass may look at before yielding to the event loop, so a
#: backlog of held (delayed) entries is scanned in slices, not in one block.
MAX_SCAN_PER_PASS = 1_000
#: Read-and-assign rounds one dispatch pass may make before yielding to the event loop:
#: with entry filters rejecting most entries, a round can deliver nothing and the next
#: would follow at once, through the whole backlog in one callback.
MAX_ROUNDS_PER_PASS = 16


class Dispatcher:
    """What all dispatch modes share: reading entries and tracking what is out."""

    def __init__(self, subscription: PersistentSubscription) -> None:
        self.subscription = subscription
        self.consumers: list[Consumer] = []
        self.outstanding: dict[Position, Consumer] = {}
        self.read_position = subscription.first_unacked_position()
        config = subscription.topic.service.config
        self.max_read = config.dispatcherMaxReadBatchSize
        self._scheduled = False

    # -- scheduling: every trigger (publish, flow, ack, reconnect) coalesces into one pass
    def schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._scheduled = False
        try:
            self.dispatch()
        except Exception:
            log.exception("dispatch failed on %s", self.subscription)

    def dispatch(self) -> None:
        raise NotImplementedError

    # -- consumers
    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)
        self._release(consumer, consumer.pending.keys())
        self.schedule()

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        """Make messages a consumer held available again, counting a redelivery."""
        raise NotImplementedError

    def _take_back(self, consumer: Consumer, positions: Iterable[Position]) -> list[Position]:
        """Forget that `consumer` holds these positions; each counts one more redelivery."""
        counts = self.subscription.redelivery_counts
        taken = list(positions)
        for position in taken:
            consumer.pending.pop(position, None)
            self.outstanding.pop(position, None)
            counts[position] = counts.get(position, 0) + 1
        return taken

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: the listed positions, or all when None."""
        chosen = list(consumer.pending) if positions is None else [p for p in positions if p in consumer.pending]
        self._release(consumer, chosen)
        self.schedule()

    def acknowledged(self, positions: Iterable[Position]) -> None:
        for position in positions:
            owner = self.outstanding.pop(position, None)
            if owner is not None:
                owner.pending.pop(position, None)

    def close(self) -> None:
        """The subscription goes away (topic unloaded or deleted): stop every timer."""

    def reset(self, position: Position) -> None:
        """After a seek: forget what was out, read again from `position`."""
        self.outstanding.clear()
        for consumer in self.consumers:
            consumer.pending.clear()
        self.read_position = position

    # -- reading
    def _entry(self, position: Position, data: bytes | None) -> DispatchEntry | None:
        """What dispatch needs of an entry; None for one no consumer could read (unparseable
        metadata, a batch count its payload cannot hold, a corrupt record), which the
        subscription skips rather than let it stall every later message."""
        sub = self.subscription
        if data is None:
            sub.skip_unreadable(position, "its stored record fails its checksum")
            return None
        try:
            metadata: pb.MessageMetadata | None = validate_publishable(data)
        except WireError as exc:
            sub.skip_unreadable(position, str(exc))
            return None
        count = metadata.num_messages_in_batch if metadata is not None and metadata.HasField(
            "num_messages_in_batch") else 1
        ack_set = sub.cursor.get_batch_deleted_indexes(position) or []
        if ack_set:
            count = len(unacked_indexes(ack_set, count)) or count
        return DispatchEntry(position, data, metadata, count, sub.redelivery_counts.get(position, 0), list(ack_set))

    def _deliverable(self, position: Position) -> bool:
        return position not in self.outstanding and not self.subscription.cursor.is_acknowledged(position)

    def _read_new(self, max_entries: int, taken: AbstractSet[Position] = frozenset()) -> list[DispatchEntry]:
        """Entries from the read position on, skipping acknowledged and held ones, and
        `taken`: what this pass already took from replay or due (behind the read position
        after a restart, so it may lie ahead of it)."""
        ledger = self.subscription.topic.ledger
        entries: list[DispatchEntry] = []
        scanned = 0
        while len(entries) < max_entries:
            if scanned >= MAX_SCAN_PER_PASS:
                self.schedule()
                break
            count = self._readable_run(max_entries - len(entries), taken)  # may move the read position
            raw = self._read_stored(self.read_position, count)
            if not raw:
                break
            scanned += len(raw)
            for position, data in raw:
                if self._deliverable(position) and position not in taken:
                    entry = self._entry(position, data)
                    if entry is not None and not self._hold(entry):
                        entries.append(entry)
            self.read_position = ledger.next_position(raw[-1][0])
        return entries

    def _notify_end_of_topic(self) -> None:
        """Once a terminated topic has nothing left to read, each consumer is told so, once."""
        topic = self.subscription.topic
        last = topic.ledger.last_confirmed_position
        if not topic.terminated or (last is not None and self.read_position <= last):
            return
        for consumer in self.consumers:
            if not consumer.told_end_of_topic:
                consumer.told_end_of_topic = True
                consumer.cnx.send_reached_end_of_topic(consumer.consumer_id)

    def _read_stored(self, start: Position, count: int) -> list[tuple[Position, bytes | None]]:
        """Entries from `start`; a corrupt record reads as None instead of failing its run."""
        ledger = self.subscription.topic.ledger
        try:
            return ledger.read_entries(start, count)  # type: ignore[return-value]
        except CorruptEntryError:
            position = ledger.position_at_or_after(start)
            return [(position, self._read_one(position))]

    def _read_one(self, position: Position) -> bytes | None:
        try:
            return self.subscription.topic.ledger.read_entry(position)
        except CorruptEntryError:
            return None

    def _readable_run(self, limit: int, taken: AbstractSet[Position]) -> int:
        """How many entries to read from the read position (which it may first move on)."""
        return limit

    def _hold(self, entry: DispatchEntry) -> bool:
        """True when the entry must not be dispatched now (Exclusive/Failover hold nothing)."""
        return False

    @property
    def delayed_messages(self) -> int:
        return 0

    def _deliver(self, consumer: Consumer, entry: DispatchEntry) -> bool:
        """Send `entry` to `consumer` unless the topic's entry filters say otherwise (a
        rejected entry is acknowledged by the gate; a rescheduled one comes back later)."""
        verdict = judge(self.subscription, consumer, entry)
        if verdict is FilterResult.ACCEPT:
            self.outstanding[entry.position] = consumer
            consumer.deliver(entry)
            return True
        if verdict is FilterResult.RESCHEDULE:
            self._reschedule(entry)
        return False

    def _reschedule(self, entry: DispatchEntry) -> None:
        raise NotImplementedError

    def _reschedule_delay(self) -> float:
        return self.subscription.topic.service.config.dispatcherFilterRescheduledMessageDelay / 1000


class SingleActiveConsumerDispatcher(Dispatcher):
    """Exclusive and Failover: one consumer at a time receives, in order."""

    def __init__(self, subscription: PersistentSubscription, sub_type: int) -> None:
        super().__init__(subscription)
        self.sub_type = sub_type
        self.active: Consumer | None = None
        self._paused: asyncio.TimerHandle | None = None
        """Set while a rescheduled entry waits: nothing is read past it meanwhile."""

    def add_consumer(self, consumer: Consumer) -> None:
        check_exclusive(self.sub_type, self.consumers)
        super().add_consumer(consumer)
        self._elect()

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)
        self._elect()

    def _elect(self) -> None:
        chosen = choose_active(self.consumers, self.subscription.topic.partition)
        if chosen is None:
            self.active = None
            return
        if chosen is self.active:
            return
        previous, self.active = self.active, chosen
        if previous is not None and previous.pending:
            self._release(previous, list(previous.pending))
        if self.sub_type == pb.CommandSubscribe.Failover:
            announce_active(self.consumers, chosen)
        self.schedule()

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        self._take_back(consumer, positions)
        # Order is the promise here, so everything unacked goes out again from the start.
        for other in self.consumers:
            for position in other.pending:
                self.outstanding.pop(position, None)
            other.pending.clear()
        self.read_position = self.subscription.first_unacked_position()

    def dispatch(self) -> None:
        consumer = self.active
        rounds = 0
        while consumer is not None and consumer.can_receive and self._paused is None:
            rounds += 1
            if rounds > MAX_ROUNDS_PER_PASS:  # filters rejecting most entries: yield now and then
                self.schedule()
                return
            entries = self._read_new(min(consumer.permits, self.max_read))
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

    def close(self) -> None:
        if self._paused is not None:
            self._paused.cancel()
            self._paused = None


class MultipleConsumersDispatcher(Dispatcher):
    """Shared: any consumer with permits may take any entry."""

    def __init__(self, subscription: PersistentSubscription) -> None:
        super().__init__(subscription)
        self.replay: SortedDict = SortedDict()  # Position -> sticky-key hash (or -1)
        self._rescheduled: dict[Position, tuple[float, int]] = {}  # -> (monotonic due time, key hash)
        self._reschedule_timer: asyncio.TimerHandle | None = None
        self._round_robin = RoundRobinSelector()
        topic = subscription.topic
        self.delayed = create_tracker(
            topic.service.config, topic.service.metadata, subscription.cursor, topic.ledger.name)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._last_fire = 0

    @property
    def delayed_messages(self) -> int:
        return len(self.delayed) if self.delayed is not None else 0

    def _release(self, consumer: Consumer, positions: Iterable[Position]) -> None:
        for position in self._take_back(consumer, positions):
            self.replay[position] = -1

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
        rounds = 0
        while True:
            available = [c for c in self.consumers if c.can_receive]
            if not available:
                return
            rounds += 1
            if rounds > MAX_ROUNDS_PER_PASS:  # filters rejecting most entries: yield now and then
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
            parked = self._assign(entries)
            for entry in parked:
                self.replay[entry.position] = self._hash(entry)
            if len(parked) == len(entries) and not fresh:
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

    def _assign(self, entries: list[DispatchEntry]) -> list[DispatchEntry]:
        parked: list[DispatchEntry] = []
        for entry in entries:
            consumer = self._round_robin.select(self.consumers)
            if consumer is None:
                parked.append(entry)
            else:
                self._deliver(consumer, entry)
        return parked


class KeySharedDispatcher(MultipleConsumersDispatcher):
    """Key_Shared: each key's hash belongs to one consumer, and order per key holds.

    Order per key survives consumers coming and going because (1) an entry that
    can't go to its key's owner now is parked, and every later entry with that
    key is parked behind it in the same pass; parked entries are read first
    next time; (2) a consumer that joins while messages are out receives
    nothing read after its arrival until everything before it is acknowledged,
    since keys it takes over may still be unacknowledged at their old owner
    (Pulsar's recentlyJoinedConsumers); once it is the only consumer left, no
    other can hold such messages and the hold-back ends.
    """

    def __init__(self, subscription: PersistentSubscription, meta: pb.KeySharedMeta | None) -> None:
        super().__init__(subscription)
        self.selector = StickyKeyConsumerSelector(meta)
        self._join_limit: dict[Consumer, Position] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        self.selector.add(consumer)
        # Only another consumer can hold older messages of the keys this one takes over.
        if self.consumers and (self.outstanding or self.replay):
            self._join_limit[consumer] = self.read_position
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self._join_limit.pop(consumer, None)
        self.selector.remove(consumer)
        super().remove_consumer(consumer)
        if len(self.consumers) <= 1:
            # Alone, a consumer gets what the others left (parked for replay, read before
            # anything new) ahead of newer messages, so order holds without waiting for its
            # acks; Pulsar clears recentlyJoinedConsumers here too.
            self._join_limit.clear()

    def owner(self, key_hash: int) -> Consumer | None:
        return self.selector.owner(key_hash)

    @staticmethod
    def _hash(entry: DispatchEntry) -> int:
        return sticky_key_hash(entry.sticky_key)

    def _may_take_replay(self, position: Position, key_hash: int) -> bool:
        """Only what its owner may take now: an entry read only to be parked again would
        use up the pass's budget, and a backlog parked for a held-back joiner would then
        starve every other consumer (Pulsar's filterOutEntriesWillBeDiscarded)."""
        if key_hash < 0:  # released by a consumer before its key was known here
            return True
        owner = self.owner(key_hash)
        return owner is not None and owner.can_receive and not self._held(owner, position)

    def acknowledged(self, positions: Iterable[Position]) -> None:
        super().acknowledged(positions)
        if self._join_limit:
            first = self.subscription.first_unacked_position()
            for consumer, limit in list(self._join_limit.items()):
                if first >= limit:
                    del self._join_limit[consumer]
            self.schedule()

    def _assign(self, entries: list[DispatchEntry]) -> list[DispatchEntry]:
        parked: list[DispatchEntry] = []
        # A key waits behind its rescheduled entry, and behind any entry parked this pass.
        blocked: set[int] = {key_hash for _, key_hash in self._rescheduled.values()}
        for entry in entries:
            key_hash = self._hash(entry)
            consumer = self.owner(key_hash)
            if (key_hash in blocked or consumer is None or not consumer.can_receive
                    or self._held(consumer, entry.position)):
                blocked.add(key_hash)
                parked.append(entry)
            elif not self._deliver(consumer, entry) and entry.position in self._rescheduled:
                blocked.add(key_hash)
        return parked

    def _held(self, consumer: Consumer, position: Position) -> bool:
        """A joiner waits for what was read before it came, and for what was read before
        any other joiner still waiting came: an entry parked while an earlier joiner owned
        its key may have older messages of that key still out at a consumer (Pulsar's rule
        for replayed entries, applied to all since new reads lie past every limit anyway)."""
        if consumer not in self._join_limit:
            return False
        return position >= min(self._join_limit.values())
