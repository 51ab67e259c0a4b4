"""A subscription: a cursor plus the dispatcher that serves its consumers."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatcher import (
    Dispatcher,
    KeySharedDispatcher,
    MultipleConsumersDispatcher,
    SingleActiveConsumerDispatcher,
)
from magnetar.broker.errors import BrokerServiceError
from magnetar.storage import ManagedCursor, Position
from magnetar.wire.message_id import unacked_indexes
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe
SUB_TYPE_NAMES = {
    Sub.Exclusive: "Exclusive",
    Sub.Shared: "Shared",
    Sub.Failover: "Failover",
    Sub.Key_Shared: "Key_Shared",
}


class PersistentSubscription:
    def __init__(self, topic: PersistentTopic, name: str, cursor: ManagedCursor, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.dispatcher: Dispatcher | None = None
        self.sub_type: int | None = None
        self.redelivery_counts: dict[Position, int] = {}

    def __repr__(self) -> str:
        return f"{self.topic.name}/{self.name}"

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers if self.dispatcher else []

    def first_unacked_position(self) -> Position:
        """Where reading starts again: just after the mark-delete position."""
        return self.topic.ledger.next_position(self.cursor.mark_delete_position)

    # -- consumers
    def add_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is None or (not self.dispatcher.consumers and self.sub_type != consumer.sub_type):
            self.sub_type = consumer.sub_type
            self.dispatcher = self._new_dispatcher(consumer)
        elif self.sub_type != consumer.sub_type:
            raise BrokerServiceError(
                pb.ConsumerBusy,
                f"Subscription {self.name} is {SUB_TYPE_NAMES[self.sub_type]}, "  # type: ignore[index]
                f"not {SUB_TYPE_NAMES.get(consumer.sub_type, consumer.sub_type)}",
            )
        self.dispatcher.add_consumer(consumer)

    def _new_dispatcher(self, consumer: Consumer) -> Dispatcher:
        if consumer.sub_type in (Sub.Exclusive, Sub.Failover):
            return SingleActiveConsumerDispatcher(self, consumer.sub_type)
        if consumer.sub_type == Sub.Key_Shared:
            return KeySharedDispatcher(self, consumer.key_shared_meta)
        return MultipleConsumersDispatcher(self)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is not None and consumer in self.dispatcher.consumers:
            self.dispatcher.remove_consumer(consumer)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        if self.dispatcher is not None:
            self.dispatcher.schedule()

    # -- acknowledgements
    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        if ack.ack_type == pb.CommandAck.Cumulative:
            self._acknowledge_cumulative(consumer, ack)
        else:
            self._acknowledge_individual(ack)

    def _acknowledge_individual(self, ack: pb.CommandAck) -> None:
        whole: list[Position] = []
        batch_level = self.topic.service.config.acknowledgmentAtBatchIndexLevelEnabled
        for mid in ack.message_id:
            position = Position(mid.ledgerId, mid.entryId)
            if batch_level and mid.ack_set:
                left = self.cursor.intersect_batch_deleted_indexes(position, list(mid.ack_set))
                if self._partial(mid, left):
                    continue
            whole.append(position)
        if whole:
            self.cursor.delete(whole)
            self._forget(whole)

    @staticmethod
    def _partial(mid: pb.MessageIdData, ack_set: list[int]) -> bool:
        """An ack_set with bits still set leaves part of the batch unacknowledged."""
        size = mid.batch_size if mid.HasField("batch_size") else 64 * len(ack_set)
        return bool(unacked_indexes(ack_set, size))

    def _acknowledge_cumulative(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        if self.sub_type in (Sub.Shared, Sub.Key_Shared) or len(ack.message_id) != 1:
            log.warning("ignoring cumulative ack on %s (%s subscription)", self, self.sub_type)
            return
        mid = ack.message_id[0]
        position = Position(mid.ledgerId, mid.entryId)
        if mid.ack_set and self._partial(mid, list(mid.ack_set)):
            self.cursor.set_batch_deleted_indexes(position, list(mid.ack_set))
            position = self.topic.ledger.previous_position(position)
        if position <= self.cursor.mark_delete_position:
            return
        self.cursor.mark_delete(position)
        self._forget([p for p in consumer.pending if p <= position])

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
        first = self.topic.ledger.first_position
        after_last = self.topic.next_publish_position()
        if first is None or position < first:
            position = first if first is not None else after_last
        elif position > after_last:
            position = after_last
        self.cursor.reset(position)
        self.redelivery_counts.clear()
        consumers = list(self.consumers)
        if self.dispatcher is not None:
            for consumer in consumers:
                self.dispatcher.remove_consumer(consumer)
            self.dispatcher.reset(position)
        return consumers

    # -- stats
    def backlog(self) -> int:
        return self.cursor.num_unacked_entries()

    def stats(self) -> dict[str, object]:
        backlog = self.backlog()
        delayed = self.dispatcher.delayed_messages if self.dispatcher is not None else 0
        return {
            "type": SUB_TYPE_NAMES.get(self.sub_type, "None") if self.sub_type is not None else "None",
            "msgBacklog": backlog,
            "msgDelayed": delayed,
            "msgBacklogNoDelayed": max(0, backlog - delayed),
            "isDurable": self.durable,
            "unackedMessages": sum(c.unacked_messages for c in self.consumers),
            "consumers": [
                {"consumerName": c.name, "availablePermits": c.permits, "unackedMessages": c.unacked_messages}
                for c in self.consumers
            ],
        }
