"""A subscription on a non-persistent topic: consumers and a drop count, no cursor.

It remembers no message, so the commands that act on remembered messages are
accepted and do nothing, as Pulsar's NonPersistentSubscription does:
acknowledgements, redelivery requests (nothing can be delivered again) and the
backlog (always 0). A durable subscription outlives its consumers (and keeps
its topic listed), a reader's goes with its consumer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.topics.abstract_subscription import AbstractSubscription
from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.nonpersistent.non_persistent_dispatcher import (
    NonPersistentDispatcher,
    NonPersistentKeySharedDispatcher,
    NonPersistentMultipleConsumersDispatcher,
    NonPersistentSingleActiveConsumerDispatcher,
)
from magnetar.broker.topics.stats import MessageCounter
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.nonpersistent.non_persistent_topic import NonPersistentTopic

Sub = pb.CommandSubscribe


class NonPersistentSubscription(AbstractSubscription):
    topic: NonPersistentTopic
    dispatcher: NonPersistentDispatcher | None

    def __init__(self, topic: NonPersistentTopic, name: str, durable: bool) -> None:
        super().__init__(topic, name, durable)
        # Kept here rather than in the dispatcher: a type change replaces the dispatcher,
        # and the count of what this subscription lost should not restart with it.
        self.dropped = MessageCounter()

    def _new_dispatcher(self, consumer: Consumer) -> NonPersistentDispatcher:
        if consumer.sub_type in (Sub.Exclusive, Sub.Failover):
            return NonPersistentSingleActiveConsumerDispatcher(self, consumer.sub_type)
        if consumer.sub_type == Sub.Key_Shared:
            return NonPersistentKeySharedDispatcher(self, consumer.key_shared_meta)
        return NonPersistentMultipleConsumersDispatcher(self)

    @property
    def needs_metadata(self) -> bool:
        return self.dispatcher is not None and self.dispatcher.needs_metadata

    def send(self, entry: DispatchEntry) -> None:
        """A message just published: to a consumer now, or dropped.

        Before any consumer ever joined there is no dispatcher, and the message is
        discarded uncounted (Pulsar releases it the same way).
        """
        if self.dispatcher is not None:
            self.dispatcher.send(entry)

    # -- commands about remembered messages: nothing is remembered
    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> str | None:
        """Nothing to acknowledge, nothing refused; the official client does not even send these."""
        return None

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing can be delivered again."""

    def backlog(self) -> int:
        return 0

    def sample_rates(self, now: float) -> None:
        super().sample_rates(now)
        self.dropped.sample(now)

    def stats(self) -> dict[str, object]:
        """Pulsar's NonPersistentSubscriptionStats; msgDropRate is, like every rate, worked out
        each statsUpdateFrequencyInSecs."""
        return {
            **self.traffic_stats(),
            "type": self.type_name,
            "msgBacklog": 0,
            "isDurable": self.durable,
            "unackedMessages": 0,
            "msgDropRate": self.dropped.message_rate,
            # magnetar's own: Pulsar reports the rate only, which a test or an alert can't sum.
            "msgDropCounter": self.dropped.messages,
            "consumers": self.consumer_stats(),
        }
