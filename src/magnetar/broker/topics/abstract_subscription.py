"""What every subscription is, stored or not: a type, and a dispatcher serving its consumers.

The rules for consumers joining (the first consumer sets the type; another
type is refused while consumers are connected) and for flow permits are the
same on persistent and non-persistent topics, as in Pulsar's
AbstractSubscription; what a subscription remembers about messages is not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.consumer import Consumer
from magnetar.broker.topics.stats import FilterCounters, MessageCounter
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_topic import AbstractTopic

Sub = pb.CommandSubscribe
SUB_TYPE_NAMES = {
    Sub.Exclusive: "Exclusive",
    Sub.Shared: "Shared",
    Sub.Failover: "Failover",
    Sub.Key_Shared: "Key_Shared",
}


class SubscriptionDispatcher(Protocol):
    """What a subscription and a connection ask of any dispatcher."""

    consumers: list[Consumer]

    def add_consumer(self, consumer: Consumer) -> None: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def schedule(self) -> None: ...


class AbstractSubscription:
    def __init__(self, topic: AbstractTopic, name: str, durable: bool) -> None:
        self.topic = topic
        self.name = name
        self.durable = durable
        self.dispatcher: SubscriptionDispatcher | None = None
        self.sub_type: int | None = None
        self.outbound = MessageCounter()
        self.filter_counters = FilterCounters()

    def __repr__(self) -> str:
        return f"{self.topic.name}/{self.name}"

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers if self.dispatcher else []

    # -- consumers
    def add_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is None or (not self.dispatcher.consumers and self.sub_type != consumer.sub_type):
            self._set_type(consumer.sub_type)
            self.dispatcher = self._new_dispatcher(consumer)
        elif self.sub_type != consumer.sub_type:
            raise BrokerServiceError(
                pb.ConsumerBusy,
                f"Subscription {self.name} is {SUB_TYPE_NAMES[self.sub_type]}, "  # type: ignore[index]
                f"not {SUB_TYPE_NAMES.get(consumer.sub_type, consumer.sub_type)}",
            )
        self.dispatcher.add_consumer(consumer)

    def _set_type(self, sub_type: int) -> None:
        self.sub_type = sub_type

    def _new_dispatcher(self, consumer: Consumer) -> SubscriptionDispatcher:
        raise NotImplementedError

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is not None and consumer in self.dispatcher.consumers:
            self.dispatcher.remove_consumer(consumer)

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        if self.dispatcher is not None:
            self.dispatcher.schedule()

    # -- what each kind of subscription answers in its own way
    def acknowledge(self, consumer: Consumer, ack: pb.CommandAck) -> str | None:
        """Apply an ACK; returns why (part of) it was refused, for the ACK_RESPONSE."""
        raise NotImplementedError

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        raise NotImplementedError

    def backlog(self) -> int:
        raise NotImplementedError

    @property
    def delayed_messages(self) -> int:
        """Messages held back for delayed delivery (only stored ones can be)."""
        return 0

    def stats(self) -> dict[str, object]:
        raise NotImplementedError

    # -- stats both kinds report alike
    def sample_rates(self, now: float) -> None:
        self.outbound.sample(now)
        for consumer in self.consumers:
            consumer.outbound.sample(now)

    def traffic_stats(self) -> dict[str, object]:
        out = self.outbound
        return {
            "msgRateOut": out.message_rate,
            "msgThroughputOut": out.byte_rate,
            "bytesOutCounter": out.bytes,
            "msgOutCounter": out.messages,
        }

    @property
    def type_name(self) -> str:
        return SUB_TYPE_NAMES.get(self.sub_type, "None") if self.sub_type is not None else "None"

    def consumer_stats(self) -> list[dict[str, object]]:
        return [c.stats() for c in self.consumers]
