"""What every topic is, stored or not: its producers, and consumers joining subscriptions.

Pulsar's persistent and non-persistent topics differ in where a message goes
once published, not in who may publish or subscribe; so producer access modes,
name conflicts and the subscribe/unsubscribe rules live here once (Pulsar's
AbstractTopic), and each kind of topic supplies only its subscriptions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.abstract_subscription import AbstractSubscription
from magnetar.broker.topics.consumer import Consumer
from magnetar.broker.topics.producer import Producer
from magnetar.broker.topics.publish_rate import PublishRateLimiter
from magnetar.broker.topics.stats import MessageCounter
from magnetar.broker.topics.topic_limits import (
    SendLimits,
    check_new_consumer,
    check_new_producer,
    max_unacked_per_consumer,
)
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.deduplication import MessageDeduplication
    from magnetar.broker.topics.cnx import TransportCnx
    from magnetar.broker.topics.context import BrokerContext
    from magnetar.wire.txn import TxnId

log = logging.getLogger(__name__)
GroupPublishCallback = Callable[[list[Position] | None, BaseException | None], None]
"""Gets the positions of a group's entries once all are stored, or None and the error."""


class AbstractTopic:
    subscriptions: Mapping[str, AbstractSubscription]

    def __init__(self, context: BrokerContext, name: TopicName) -> None:
        self.context = context
        self.name = name
        self.partition = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.inbound = MessageCounter()
        self.outbound = MessageCounter()
        self.send_limits: tuple[int, SendLimits] | None = None
        """topic_limits.send_limits' cache: (policies version, limits)."""
        self.publish_limiter: PublishRateLimiter | None = None
        """publish_rate's bucket, kept across changes of other policies."""

    def __repr__(self) -> str:
        return str(self.name)

    def publish_many(self, entries: list[bytes], counts: list[int], batch_size: int,
                     callback: GroupPublishCallback) -> None:
        """Take published entries holding `counts` messages each; `callback` gets their
        positions (the receipts) once accepted. `batch_size` is the last entry's
        num_messages_in_batch (-1 when not a batch), kept for GetLastMessageId."""
        raise NotImplementedError

    def publish_transactional(self, entries: list[bytes], counts: list[int], batch_size: int, txn: TxnId,
                              callback: GroupPublishCallback) -> None:
        """As publish_many, for messages of the open transaction `txn` (stored topics only)."""
        raise BrokerServiceError(pb.NotAllowedError, f"{self.name} takes no transactional messages")

    def stats(self) -> dict[str, object]:
        raise NotImplementedError

    @property
    def deduplication(self) -> MessageDeduplication | None:
        """The topic's deduplication state when it is enabled (stored topics only)."""
        return None

    @property
    def terminated(self) -> bool:
        """A terminated topic takes no more messages (only a stored topic can be one)."""
        return False

    def storage_size(self) -> int:
        """Bytes the topic keeps on disk (none unless it stores messages)."""
        return 0

    # -- producers
    def add_producer(
        self, cnx: TransportCnx, producer_id: int, name: str, access_mode: int, topic_epoch: int | None = None
    ) -> Producer:
        """Admit a producer: its access mode is settled first, then its name, as in Pulsar."""
        self._check_new_producer()
        check_new_producer(self)
        epoch = self._claim_access(access_mode, topic_epoch)
        if name in self.producers:
            raise BrokerServiceError(pb.ProducerBusy, f"Producer with name '{name}' is already connected to topic")
        producer = Producer(self, cnx, producer_id, name, access_mode, epoch)
        self.producers[name] = producer
        return producer

    def check_publisher(self) -> None:
        """Refuse what a new producer is refused for (a terminated topic; over a stored topic's
        backlog quota, producer_request_hold or producer_exception) to a publisher with no
        producer of its own: a protocol handler's, asked before each publish."""
        self._check_new_producer()

    def _check_new_producer(self) -> None:
        """Refuse a producer the topic cannot take at all, before any access mode is claimed."""
        if self.terminated:
            raise BrokerServiceError(pb.TopicTerminatedError, f"Topic {self.name} was already terminated")

    def _claim_access(self, access_mode: int, topic_epoch: int | None) -> int | None:
        """Check `access_mode` against the producers present; an exclusive producer gets the
        topic epoch it holds the topic in (None for Shared)."""
        exclusive = next((p for p in self.producers.values() if p.access_mode != pb.Shared), None)
        if access_mode == pb.Shared:
            if exclusive is not None:
                raise BrokerServiceError(pb.ProducerBusy, f"Topic has an existing exclusive producer: {exclusive.name}")
            return None
        if access_mode == pb.ExclusiveWithFencing:
            for other in list(self.producers.values()):
                other.cnx.tell_producer_closed(other)
        elif exclusive is not None:
            raise BrokerServiceError(pb.ProducerFenced, f"Topic has an existing exclusive producer: {exclusive.name}")
        elif self.producers:
            raise BrokerServiceError(pb.ProducerFenced, "Topic has existing shared producers")
        current = self.topic_epoch
        if topic_epoch is not None and topic_epoch < current:
            # A producer that held the topic before someone else did is fenced for good.
            raise BrokerServiceError(
                pb.ProducerFenced,
                f"Topic epoch has already moved. Current epoch: {current}, producer epoch: {topic_epoch}",
            )
        epoch = topic_epoch if topic_epoch is not None else current + 1
        if epoch != current:
            self._set_topic_epoch(epoch)
        return epoch

    @property
    def topic_epoch(self) -> int:
        """How many times an exclusive producer took the topic (-1: never)."""
        raise NotImplementedError

    def _set_topic_epoch(self, epoch: int) -> None:
        raise NotImplementedError

    def remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]

    def idle_for_schema(self) -> bool:
        """No producers, no consumers and nothing stored: only then may a consumer's schema
        be the topic's first (Pulsar's addSchemaIfIdleOrCheckCompatible). AUTO_CONSUME
        consumers do not count: they take whatever schema the topic gets, as in Pulsar."""
        return not self.producers and self.inbound.messages == 0 and self.storage_size() == 0 \
            and not any(not c.auto_consume for s in self.subscriptions.values() for c in s.consumers)

    # -- consumers
    def subscribe(self, cnx: TransportCnx, cmd: pb.CommandSubscribe) -> Consumer:
        self._check_subscribe(cmd)
        if not cmd.subscription:
            raise BrokerServiceError(pb.InvalidTopicName, "empty subscription name")
        subscription = self.subscriptions.get(cmd.subscription)
        check_new_consumer(self, subscription)
        created = subscription is None
        if subscription is None:
            subscription = self._create_subscription(cmd)
        consumer = Consumer(
            cnx,
            cmd.consumer_id,
            cmd.consumer_name,
            subscription,
            cmd.subType,
            cmd.priority_level,
            cmd.keySharedMeta if cmd.HasField("keySharedMeta") else None,
        )
        consumer.metadata = {kv.key: kv.value for kv in cmd.metadata}
        consumer.max_unacked = max_unacked_per_consumer(self, cmd.subType)
        consumer.read_compacted = cmd.read_compacted
        try:
            subscription.add_consumer(consumer)
        except BrokerServiceError:
            if created and not subscription.durable:
                self._drop_subscription(subscription)
            raise
        return consumer

    def _check_subscribe(self, cmd: pb.CommandSubscribe) -> None:
        """Refuse a SUBSCRIBE this kind of topic cannot serve, before anything is created."""

    def _create_subscription(self, cmd: pb.CommandSubscribe) -> AbstractSubscription:
        raise NotImplementedError

    def _drop_subscription(self, subscription: AbstractSubscription) -> None:
        raise NotImplementedError

    def when_stored(self, subscription: AbstractSubscription, done: Callable[[BaseException | None], None]) -> None:
        """Call `done` on the loop once `subscription` is stored (None) or could not be (the
        error); at once where nothing is stored."""
        done(None)

    def forget_unstored(self, subscription: AbstractSubscription) -> None:
        """`subscription` could not be stored: it goes once no consumer is left on it."""

    def remove_consumer(self, consumer: Consumer, *, keep_subscription: bool = False) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers and not keep_subscription:
            self._drop_subscription(subscription)

    def unsubscribe(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            raise BrokerServiceError(pb.UnknownError, f"Subscription {subscription.name} has other connected consumers")
        subscription.remove_consumer(consumer)
        self._drop_subscription(subscription)

    # -- stats
    def sample_rates(self, now: float) -> None:
        self.inbound.sample(now)
        self.outbound.sample(now)
        for producer in self.producers.values():
            producer.inbound.sample(now)
        for subscription in self.subscriptions.values():
            subscription.sample_rates(now)

    def traffic_stats(self) -> dict[str, object]:
        """The part of Pulsar's TopicStats both kinds of topic report alike: counters since the
        topic was loaded, rates over the last stats interval."""
        inbound, outbound = self.inbound, self.outbound
        return {
            "msgRateIn": inbound.message_rate,
            "msgThroughputIn": inbound.byte_rate,
            "msgRateOut": outbound.message_rate,
            "msgThroughputOut": outbound.byte_rate,
            "bytesInCounter": inbound.bytes,
            "msgInCounter": inbound.messages,
            "bytesOutCounter": outbound.bytes,
            "msgOutCounter": outbound.messages,
            "averageMsgSize": inbound.average_size,
        }

    # -- lifecycle
    def disconnect_clients(self, producers: Callable[[Producer], bool] = lambda _producer: True,
                           consumers: Callable[[Consumer], bool] = lambda _consumer: True) -> None:
        """Close the producers and consumers of the topic the predicates pick (all of them by
        default: unload, deletion); clients look the topic up again and reconnect, as
        Pulsar's do."""
        for producer in list(self.producers.values()):
            if producers(producer):
                producer.cnx.tell_producer_closed(producer)
        for subscription in list(self.subscriptions.values()):
            for consumer in list(subscription.consumers):
                if consumers(consumer):
                    self.remove_consumer(consumer)
                    consumer.cnx.tell_consumer_closed(consumer)
