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
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from magnetar.broker.entry_filters import FilterResult
from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.persistent.filter_gate import judge
from magnetar.storage import CorruptEntryError, Position
from magnetar.wire.entry import validate_publishable
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import ack_set_from_indexes, unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_subscription import PersistentSubscription

log = logging.getLogger(__name__)

#: Entries one read pass may look at before yielding to the event loop, so a
#: backlog of held (delayed) entries is scanned in slices, not in one block.
MAX_SCAN_PER_PASS = 1_000
#: Read-and-assign rounds one dispatch pass may make before yielding to the event loop:
#: with entry filters rejecting most entries, a round can deliver nothing and the next
#: would follow at once, through the whole backlog in one callback. A pass also yields
#: once it has handed out dispatcherMaxReadBatchSize entries (one read's worth, as a
#: Pulsar dispatcher sends per read): a consumer with a receiver queue of thousands
#: would otherwise take 10 ms of the loop in one callback, every other client waiting.
MAX_ROUNDS_PER_PASS = 16


class Dispatcher:
    """What all dispatch modes share: reading entries and tracking what is out."""

    def __init__(self, subscription: PersistentSubscription) -> None:
        self.subscription = subscription
        self.consumers: list[Consumer] = []
        self.outstanding: dict[Position, Consumer] = {}
        self.read_position = subscription.first_unacked_position()
        config = subscription.topic.context.config
        self.max_read = config.dispatcherMaxReadBatchSize
        self.max_read_bytes = config.dispatcherMaxReadSizeBytes
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
        was_blocked = False
        for position in positions:
            owner = self.outstanding.pop(position, None)
            if owner is not None:
                owner.pending.pop(position, None)
                was_blocked |= owner.blocked_on_unacked
        if was_blocked:
            self.schedule()  # the consumer may be under half its limit again

    def requeue(self, positions: list[Position]) -> None:
        """Entries an aborted transaction had acknowledged: delivered again (here by reading
        again from the first of them; entries still out are skipped as ever)."""
        self.read_position = min(self.read_position, *positions)
        self.schedule()

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
        subscription skips rather than let it stall every later message, and for a batch
        whose every message is acknowledged or held by open transactions."""
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
        pending = sub.pending_acks
        if pending is not None and position in pending.indexes:  # messages open transactions acknowledged
            left = set(unacked_indexes(ack_set, count) if ack_set else range(count)) - pending.held_indexes(position)
            if not left:
                return None
            ack_set = ack_set_from_indexes(sorted(left), count)
        if ack_set:
            count = len(unacked_indexes(ack_set, count)) or count
        return DispatchEntry(position, data, metadata, count, sub.redelivery_counts.get(position, 0), list(ack_set))

    def _deliverable(self, position: Position) -> bool:
        if position in self.outstanding or self.subscription.cursor.is_acknowledged(position):
            return False
        pending = self.subscription.pending_acks  # None unless a transaction acknowledged here
        return pending is None or position not in pending.positions

    def _read_new(self, max_entries: int, taken: AbstractSet[Position] = frozenset()) -> list[DispatchEntry]:
        """Entries from the read position on, skipping acknowledged and held ones, and
        `taken`: what this pass already took from replay or due (behind the read position
        after a restart, so it may lie ahead of it). At most dispatcherMaxReadSizeBytes of
        them (but at least one entry): permits count messages, and a consumer's receiver
        queue of batches of thousands would otherwise let a hundred megabytes out at once."""
        topic = self.subscription.topic
        ledger = topic.ledger
        transactions = topic.transaction_buffer  # None unless the topic has held transactions
        entries: list[DispatchEntry] = []
        scanned = 0
        byte_budget = self.max_read_bytes
        while len(entries) < max_entries and byte_budget > 0:
            if scanned >= MAX_SCAN_PER_PASS:
                self.schedule()
                break
            count = self._readable_run(max_entries - len(entries), taken)  # may move the read position
            raw = self._read_stored(self.read_position, count, byte_budget)
            if transactions is not None:
                raw = transactions.readable(raw)
            if not raw:
                break
            scanned += len(raw)
            byte_budget -= sum(len(data) for _, data in raw if data is not None)
            for position, data in raw:
                if self._deliverable(position) and position not in taken:
                    entry = self._entry(position, data)
                    if entry is None or self._hold(entry):
                        continue
                    if entry.metadata is not None and (entry.metadata.HasField("marker_type") or (
                            transactions is not None and transactions.hides(entry.metadata))):
                        self.subscription.acknowledge_filtered(position)  # a marker or an aborted message
                        continue
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

    def _read_stored(self, start: Position, count: int, max_bytes: int) -> list[tuple[Position, bytes | None]]:
        """Entries from `start` (at least one, within max_bytes); a corrupt record reads as
        None instead of failing its run."""
        ledger = self.subscription.topic.ledger
        try:
            return ledger.read_entries(start, count, max_bytes)  # type: ignore[return-value]
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
        return self.subscription.topic.context.config.dispatcherFilterRescheduledMessageDelay / 1000
