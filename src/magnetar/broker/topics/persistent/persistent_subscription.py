"""A persistent subscription: a cursor plus the dispatcher that serves its consumers."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import TYPE_CHECKING

from magnetar.broker.entry_filters import FilterContext
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.abstract_subscription import SUB_TYPE_NAMES, AbstractSubscription
from magnetar.broker.topics.consumer import Consumer
from magnetar.broker.topics.persistent.dispatcher import Dispatcher
from magnetar.broker.topics.persistent.filter_gate import filter_context
from magnetar.broker.topics.persistent.key_shared_dispatcher import KeySharedDispatcher
from magnetar.broker.topics.persistent.shared_dispatcher import MultipleConsumersDispatcher
from magnetar.broker.topics.persistent.single_active_dispatcher import SingleActiveConsumerDispatcher
from magnetar.broker.topics.positions import position_of
from magnetar.storage import ManagedCursor, Position
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import ack_set_bits, ack_set_from_indexes, set_bits, unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.persistent.persistent_topic import PersistentTopic
    from magnetar.broker.transactions.pending_ack import PendingAcks
    from magnetar.wire.txn import TxnId

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe
__all__ = ["SUB_TYPE_NAMES", "PersistentSubscription"]
_SUB_TYPES = {name: number for number, name in SUB_TYPE_NAMES.items()}
#: Cursor property remembering the subscription's type while no consumer is connected.
SUB_TYPE_PROPERTY = "#magnetar.subscription.type"
#: Entries one cumulative ACK in a transaction may cover (each is held, and written, until it ends).
MAX_CUMULATIVE_IN_TXN = 10_000
#: Cursor property of a replicated subscription (PIP-33): its position is mirrored to the
#: topic's other clusters (magnetar.replication.subscriptions does the mirroring).
REPLICATED_PROPERTY = "#magnetar.subscription.replicated"


class PersistentSubscription(AbstractSubscription):
    topic: PersistentTopic
    dispatcher: Dispatcher | None

    def __init__(self, topic: PersistentTopic, name: str, cursor: ManagedCursor, durable: bool) -> None:
        super().__init__(topic, name, durable)
        self.cursor = cursor
        self.sub_type = _SUB_TYPES.get(cursor.properties.get(SUB_TYPE_PROPERTY, ""))
        self.redelivery_counts: dict[Position, int] = {}
        self.unreadable_skipped = 0
        self._transient_properties: dict[str, str] = {}
        self._properties: dict[str, str] | None = None
        self._filter_contexts: dict[Consumer, FilterContext] = {}
        self._last_batch_size: tuple[Position, int] | None = None
        self.pending_acks: PendingAcks | None = None
        """Positions acknowledged by transactions still open, kept from every consumer (PIP-31)."""
        if durable and topic.context.config.transactionCoordinatorEnabled:
            from magnetar.broker.transactions.pending_ack import PendingAcks  # noqa: PLC0415 (only then)

            self.pending_acks = PendingAcks.load(topic.context.metadata, topic.ledger.name, name)

    @property
    def properties(self) -> dict[str, str]:
        """Subscription properties (CommandSubscribe.subscription_properties, or the admin API),
        kept with the cursor beside magnetar's own '#' keys; a reader's live in memory."""
        if not self.durable:
            return self._transient_properties
        if self._properties is None:
            self._properties = {key: value for key, value in self.cursor.properties.items() if not key.startswith("#")}
        return self._properties

    def remove_consumer(self, consumer: Consumer) -> None:
        super().remove_consumer(consumer)
        self._filter_contexts.pop(consumer, None)

    def filter_context_for(self, consumer: Consumer) -> FilterContext:
        """What entry filters are told about this subscription and `consumer`, built once."""
        context = self._filter_contexts.get(consumer)
        if context is None:
            context = self._filter_contexts[consumer] = filter_context(self, consumer)
        return context

    def set_properties(self, properties: dict[str, str]) -> None:
        """Replace the subscription properties (Pulsar's updateSubscriptionProperties)."""
        reserved = [key for key in properties if key.startswith("#")]
        if reserved:
            raise ValueError(f"subscription property {reserved[0]!r}: names starting with '#' are reserved")
        if not self.durable:
            self._transient_properties = dict(properties)
        else:
            for key in self.properties:
                if key not in properties:
                    self.cursor.remove_property(key)
            for key, value in properties.items():
                self.cursor.set_property(key, value)
        self._properties = None
        self._filter_contexts.clear()

    @property
    def replicated(self) -> bool:
        return self.durable and self.cursor.properties.get(REPLICATED_PROPERTY) == "true"

    def set_replicated(self, replicated: bool) -> None:
        """Kept with the cursor, so the mirroring goes on after a restart (a reader has no
        position worth mirroring: it stays off)."""
        if not self.durable or replicated == self.replicated:
            return
        if replicated:
            self.cursor.set_property(REPLICATED_PROPERTY, "true")
        else:
            self.cursor.remove_property(REPLICATED_PROPERTY)
        log.info("%s: replicated subscription %s", self, "on" if replicated else "off")
        if replicated:
            for listener in tuple(self.topic.replicated_subscription_listeners):
                listener()

    def first_unacked_position(self) -> Position:
        """Where reading starts again: just after the mark-delete position."""
        return self.topic.ledger.next_position(self.cursor.mark_delete_position)

    # -- consumers
    def _set_type(self, sub_type: int) -> None:
        """Remember the type with the cursor, so stats name it after a restart too."""
        if sub_type != self.sub_type and self.durable and sub_type in SUB_TYPE_NAMES:
            self.cursor.set_property(SUB_TYPE_PROPERTY, SUB_TYPE_NAMES[sub_type])
        self.sub_type = sub_type

    def _new_dispatcher(self, consumer: Consumer) -> Dispatcher:
        if consumer.sub_type in (Sub.Exclusive, Sub.Failover):
            return SingleActiveConsumerDispatcher(self, consumer.sub_type)
        if consumer.sub_type == Sub.Key_Shared:
            return KeySharedDispatcher(self, consumer.key_shared_meta)
        return MultipleConsumersDispatcher(self)

    # -- acknowledgements
    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> str | None:
        """Apply an ACK; returns why (part of) it was refused, for the ACK_RESPONSE.

        An id that names no entry of this topic is refused and changes nothing, so a
        client (buggy or hostile) cannot acknowledge what it was never given.
        """
        if ack.ack_type == pb.CommandAck.Cumulative:
            return self._acknowledge_cumulative(consumer, ack)
        return self._acknowledge_individual(ack)

    def _acknowledge_individual(self, ack: pb.CommandAck) -> str | None:
        whole: list[Position] = []
        refused: list[Position] = []
        batch_level = self.topic.context.config.acknowledgmentAtBatchIndexLevelEnabled
        ledger = self.topic.ledger
        for mid in ack.message_id:
            position = position_of(mid)
            if not ledger.has_entry(position):
                if not self._before_first(position):
                    refused.append(position)
                continue
            if batch_level and mid.ack_set:
                left = self.cursor.intersect_batch_deleted_indexes(position, list(mid.ack_set))
                if self._partial(mid, left):
                    continue
            if self.pending_acks is not None and position in self.pending_acks.indexes:
                self._ack_all_but_held(position)
                continue
            whole.append(position)
        if whole:
            self.cursor.delete(whole)
            self._forget(whole)
        return self._refusal(refused)

    # -- acknowledgements in transactions (PIP-31)
    def _ack_all_but_held(self, position: Position) -> None:
        """A batch some of whose messages open transactions hold, acknowledged whole outside
        them (a client that took the held ones, masked in its ack_set, for acknowledged):
        the held ones stay, for their transactions to acknowledge or give back."""
        assert self.pending_acks is not None
        held = self.pending_acks.held_indexes(position)
        self.cursor.set_batch_deleted_indexes(position, ack_set_from_indexes(sorted(held), self._batch_size(position)))
        self._forget([position])  # out of the consumer's hands: an abort delivers the held ones again

    def acknowledge_in_txn(self, ack: pb.CommandAck, txn: TxnId) -> asyncio.Future[None] | None:
        """Hold the ACK's entries for `txn`, or with an ack_set the batch's messages it names:
        no consumer gets them meanwhile, and the cursor moves only if the transaction commits.
        Held at once; the future is done once the hold is durable (None: it is already)."""
        if not self.durable:
            raise BrokerServiceError(pb.NotAllowedError, "a reader cannot acknowledge in a transaction")
        whole: list[Position] = []
        parts: list[tuple[Position, frozenset[int]]] = []
        if ack.ack_type == pb.CommandAck.Cumulative:
            whole = self._cumulative_in_txn(ack)
        for mid in ack.message_id:
            position = position_of(mid)
            if not self.topic.ledger.has_entry(position):
                raise BrokerServiceError(pb.NotAllowedError, self._refusal([position]) or "")
            if self.cursor.is_acknowledged(position):
                raise BrokerServiceError(pb.TransactionConflict, f"{position} is acknowledged already")
            indexes = self._acked_indexes(position, list(mid.ack_set)) if mid.ack_set else None
            if indexes is None:
                whole.append(position)
            else:
                parts.append((position, indexes))
        pending = self._pending_acks()
        held = pending.hold(txn, whole)
        for position, indexes in parts:
            pending.hold_indexes(txn, position, indexes)
        if held and self.dispatcher is not None:
            self.dispatcher.acknowledged(held)  # the consumer is done with them; nobody else gets them
        return pending.saving(txn)

    def _cumulative_in_txn(self, ack: pb.CommandAck) -> list[Position]:
        """The entries before a cumulative ACK's message not acknowledged yet, held whole by
        the transaction (the message itself is held as an individual ACK of it would be:
        with its ack_set, the batch's messages up to it)."""
        if self.sub_type in (Sub.Shared, Sub.Key_Shared) or len(ack.message_id) != 1:
            raise BrokerServiceError(pb.NotAllowedError, "a cumulative acknowledgement names one message, on an "
                                     "Exclusive or Failover subscription")
        named = position_of(ack.message_id[0])
        before = []
        for position in self.cursor.iter_unacked():
            if position >= named:
                break
            if len(before) >= MAX_CUMULATIVE_IN_TXN:
                raise BrokerServiceError(pb.NotAllowedError, f"a cumulative acknowledgement in a transaction covers "
                                         f"at most {MAX_CUMULATIVE_IN_TXN} entries: acknowledge more often")
            before.append(position)
        return before

    def _pending_acks(self) -> PendingAcks:
        if self.pending_acks is None:
            from magnetar.broker.transactions.pending_ack import PendingAcks  # noqa: PLC0415 (the first one)

            self.pending_acks = PendingAcks(self.topic.context.metadata, self.topic.ledger.name, self.name)
        return self.pending_acks

    def _batch_size(self, position: Position) -> int:
        """Messages in the entry (1 unless it is a batch), from its stored metadata; the last
        entry's is kept, since a transaction's acknowledgements of a batch come one message
        at a time."""
        last = self._last_batch_size
        if last is not None and last[0] == position:
            return last[1]
        try:
            metadata = parse_message_metadata(self.topic.ledger.read_entry(position))
        except WireError as exc:
            raise BrokerServiceError(pb.NotAllowedError, f"{position}: {exc}") from exc
        size = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        self._last_batch_size = (position, size)
        return size

    def _acked_indexes(self, position: Position, ack_set: list[int]) -> frozenset[int] | None:
        """The batch indexes an ack_set acknowledges (its cleared bits), none of them acked
        already; None when it covers the whole entry."""
        size = self._batch_size(position)
        if len(ack_set) > (size + 63) // 64:
            raise BrokerServiceError(pb.NotAllowedError, f"an ack_set of {len(ack_set)} words for a batch of {size}")
        whole = (1 << size) - 1
        acked = ~ack_set_bits(ack_set) & whole
        if not acked:
            raise BrokerServiceError(pb.NotAllowedError, f"the ack_set of {position} acknowledges no message")
        stored = self.cursor.get_batch_deleted_indexes(position)
        if stored is not None and acked & ~ack_set_bits(stored):
            raise BrokerServiceError(pb.TransactionConflict, f"messages of {position} are acknowledged already")
        return None if acked == whole else frozenset(set_bits(acked))

    def end_txn_acks(self, txn: TxnId, commit: bool) -> asyncio.Future[None] | None:
        """The transaction ended: what it held is acknowledged, or given back to be delivered
        again. A commit's acknowledgements are stored off the event loop (the cursor's write
        is a SQLite commit) and the transaction's record here goes once they are durable:
        the future is done then (None: nothing to store)."""
        pending = self.pending_acks
        if pending is None:
            return None
        held = pending.release(txn)
        if commit:
            pending.committed_count += 1
        else:
            pending.aborted_count += 1
        positions = list(held)
        if held and commit:
            done = [position for position, indexes in held.items()
                    if indexes is None or self._ack_indexes(position, indexes)]
            self.cursor.delete(done)
            self._forget(done)
            stored = asyncio.get_running_loop().run_in_executor(None, self.cursor.flush)
            stored.add_done_callback(lambda flushed: flushed.cancelled() or flushed.exception() or pending.forget(txn))
            return stored
        if held and self.dispatcher is not None:
            dispatcher = self.dispatcher
            with_consumers = [(dispatcher.outstanding[p], p) for p in positions if p in dispatcher.outstanding]
            dispatcher.requeue(positions)
            for consumer, position in with_consumers:  # a batch its consumer holds the rest of: sent again
                self.redeliver(consumer, [position])
        pending.forget(txn)
        return None

    def _ack_indexes(self, position: Position, indexes: frozenset[int]) -> bool:
        """Acknowledge some messages of a batch in the cursor; True when none is left (the
        entry is then deleted whole)."""
        size = self._batch_size(position)
        stored = self.cursor.get_batch_deleted_indexes(position)
        left = (frozenset(range(size)) if stored is None else frozenset(unacked_indexes(stored, size))) - indexes
        if not left:
            return True
        self.cursor.set_batch_deleted_indexes(position, ack_set_from_indexes(sorted(left), size))
        return False

    def _before_first(self, position: Position) -> bool:
        """Older than every entry the topic has: acknowledged already, by definition."""
        first = self.topic.ledger.first_position
        return first is not None and position < first and position.entry_id >= -1

    def _refusal(self, refused: list[Position]) -> str | None:
        if not refused:
            return None
        log.warning("%s: refused acks of positions that are not entries of the topic: %s",
                    self, ", ".join(map(str, refused[:5])))
        return f"Invalid message id {refused[0]}: not an entry of {self.topic.name}"

    @staticmethod
    def _partial(mid: pb.MessageIdData, ack_set: list[int]) -> bool:
        """An ack_set with bits still set leaves part of the batch unacknowledged."""
        size = mid.batch_size if mid.HasField("batch_size") else 64 * len(ack_set)
        return bool(unacked_indexes(ack_set, size))

    def _acknowledge_cumulative(self, consumer: Consumer, ack: pb.CommandAck) -> str | None:
        if self.sub_type in (Sub.Shared, Sub.Key_Shared) or len(ack.message_id) != 1:
            log.warning("ignoring cumulative ack on %s (%s subscription)", self, self.sub_type)
            return None
        mid = ack.message_id[0]
        named = position_of(mid)
        position = self._mark_delete_target(named)
        if position is None:
            return self._refusal([named])
        if position == named and mid.ack_set and self._partial(mid, list(mid.ack_set)):
            self.cursor.set_batch_deleted_indexes(position, list(mid.ack_set))
            position = self.topic.ledger.previous_position(position)
        if position <= self.cursor.mark_delete_position:
            return None
        self.cursor.mark_delete(position)
        self._forget([p for p in consumer.pending if p <= position])
        return None

    def _mark_delete_target(self, position: Position) -> Position | None:
        """Where a cumulative ack of `position` moves the mark-delete position.

        (L, -1) is "nothing of ledger L": the position before L's first entry. Anything
        else must be an entry of this topic (or lie before all of them, which is a no-op).
        """
        ledger = self.topic.ledger
        if ledger.has_entry(position):
            return position
        if position.entry_id == -1 and ledger.has_entry(Position(position.ledger_id, 0)):
            return ledger.previous_position(Position(position.ledger_id, 0))
        if self._before_first(position):
            return self.cursor.mark_delete_position
        return None

    def expire_up_to(self, position: Position) -> None:
        """TTL: everything up to `position` counts as acknowledged."""
        self.cursor.mark_delete(position)
        if self.dispatcher is not None:
            self._forget([p for p in self.dispatcher.outstanding if p <= position])

    def _forget(self, positions: list[Position]) -> None:
        for position in positions:
            self.redelivery_counts.pop(position, None)
        if self.dispatcher is not None:
            self.dispatcher.acknowledged(positions)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is None:
            return
        if self.sub_type not in (Sub.Shared, Sub.Key_Shared):
            positions = None  # Exclusive/Failover rewind: order first
        self.dispatcher.redeliver(consumer, positions)

    # -- seek
    def reset_cursor(self, position: Position) -> list[Consumer]:
        """Move the subscription to `position`; returns the consumers to disconnect."""
        position = self.topic.entry_at_or_after(position)
        self.cursor.reset(position)
        self.redelivery_counts.clear()
        consumers = list(self.consumers)
        if self.dispatcher is not None:
            for consumer in consumers:
                self.dispatcher.remove_consumer(consumer)
            self.dispatcher.reset(position)
        return consumers

    def acknowledge_filtered(self, position: Position) -> None:
        """An entry filter rejected the entry: acknowledged for this subscription only."""
        self.cursor.delete([position])
        self._forget([position])

    def skip_unreadable(self, position: Position, reason: str) -> None:
        """An entry no consumer could read is acknowledged, once, with one logged error: the
        alternative is a subscription that delivers nothing past it."""
        log.error("%s: entry %s cannot be delivered (%s); acknowledged so the subscription moves on",
                  self, position, reason)
        self.unreadable_skipped += 1
        self.cursor.delete([position])
        self._forget([position])

    # -- admin operations on the backlog
    def skip(self, count: int) -> int:
        """Acknowledge the next `count` unacknowledged entries (Pulsar's skip); returns how many."""
        skipped = list(itertools.islice(self.cursor.iter_unacked(), max(count, 0)))
        if skipped:
            self.cursor.delete(skipped)
            self._forget(skipped)
        return len(skipped)

    def clear_backlog(self) -> None:
        """Everything stored so far counts as acknowledged (Pulsar's skip_all)."""
        last = self.topic.ledger.last_confirmed_position
        if last is not None and last > self.cursor.mark_delete_position:
            self.expire_up_to(last)

    def nth_unacknowledged(self, n: int) -> Position | None:
        """The n-th (1-based) entry still to be acknowledged, for peeking at a backlog."""
        return next(itertools.islice(self.cursor.iter_unacked(), n - 1, None), None) if n >= 1 else None

    # -- stats
    def backlog(self) -> int:
        return self.cursor.num_unacked_entries()

    @property
    def delayed_messages(self) -> int:
        return self.dispatcher.delayed_messages if self.dispatcher is not None else 0

    def stats(self) -> dict[str, object]:
        backlog = self.backlog()
        delayed = self.delayed_messages
        return {
            **self.traffic_stats(),
            "type": self.type_name,
            "msgBacklog": backlog,
            "msgDelayed": delayed,
            "msgBacklogNoDelayed": max(0, backlog - delayed),
            "isDurable": self.durable,
            "isReplicated": self.replicated,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            # magnetar's own: entries acknowledged because no consumer could read them
            "unreadableEntriesSkipped": self.unreadable_skipped,
            "subscriptionProperties": self.properties,
            **self.filter_counters.stats(),
            "consumers": self.consumer_stats(),
        }
