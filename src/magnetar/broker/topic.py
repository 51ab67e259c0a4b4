"""A persistent topic (or one partition of one): its ledger, producers, subscriptions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.message_finder import find_first_at_or_after
from magnetar.broker.positions import position_of
from magnetar.broker.producer import Producer
from magnetar.broker.stats import MessageCounter
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.topic_name import TopicName
from magnetar.storage import ManagedLedger, Position
from magnetar.wire import commands
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)
Sub = pb.CommandSubscribe
#: Pulsar's managed-ledger property for the topic epoch.
TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"
PublishCallback = Callable[[Position | None, BaseException | None], None]


def _batch_size(entry: bytes | None) -> int:
    """num_messages_in_batch of an entry, -1 when it is not a batch (or unreadable)."""
    if entry is None:
        return -1
    try:
        metadata = parse_message_metadata(entry)
    except WireError:
        return -1
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else -1


class PersistentTopic:
    def __init__(self, service: BrokerService, name: TopicName, ledger: ManagedLedger) -> None:
        self.service = service
        self.name = name
        self.ledger = ledger
        self.partition = name.partition_index
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, PersistentSubscription] = {
            sub_name: PersistentSubscription(self, sub_name, cursor, durable=True)
            for sub_name, cursor in ledger.cursors.items()
        }
        self.inbound = MessageCounter()
        self.outbound = MessageCounter()
        last_entry = self._last_entry()
        self._last_batch_size = _batch_size(last_entry)
        self.entry_metadata_state = service.entry_metadata.recover(ledger, last_entry)

    def __repr__(self) -> str:
        return str(self.name)

    # -- publishing
    def publish(self, entry: bytes, num_messages: int, batch_size: int, callback: PublishCallback) -> None:
        """Append; `callback` runs on the loop once the entry is durable (or failed)."""
        self.inbound.add(num_messages, len(entry))
        data = self.service.entry_metadata.stamp(self.entry_metadata_state, entry, num_messages)
        bridge = self.service.bridge

        def stored(position: Position | None, exc: BaseException | None) -> None:
            bridge.post(self._stored, callback, batch_size, position, exc)

        self.ledger.append(data, stored, num_messages=num_messages)

    def _stored(
        self, callback: PublishCallback, batch_size: int, position: Position | None, exc: BaseException | None
    ) -> None:
        if exc is None and position is not None:
            self._last_batch_size = batch_size
            for subscription in self.subscriptions.values():
                if subscription.dispatcher is not None and subscription.dispatcher.consumers:
                    subscription.dispatcher.schedule()
        callback(position, exc)

    def _last_entry(self) -> bytes | None:
        """Read once at load: both the batch size and the PIP-70 state come from it."""
        last = self.ledger.last_confirmed_position
        return None if last is None else self.ledger.read_entry(last)

    def next_publish_position(self) -> Position:
        """The position just past the last durable entry."""
        last = self.ledger.last_confirmed_position
        if last is not None:
            return self.ledger.next_position(last)
        ledgers = self.ledger.ledgers
        return Position(ledgers[-1].ledger_id if ledgers else 0, 0)

    def last_message_id(self) -> pb.MessageIdData:
        last = self.ledger.last_confirmed_position
        if last is None:
            ledgers = self.ledger.ledgers
            return MessageId(ledgers[-1].ledger_id if ledgers else -1, -1, self.partition).to_proto()
        batch_index = self._last_batch_size - 1 if self._last_batch_size > 0 else -1
        return MessageId(last.ledger_id, last.entry_id, self.partition, batch_index).to_proto()

    def find_position_by_time(self, timestamp: int) -> Position:
        """Where a seek to `timestamp` lands: the first entry at or after it."""
        found = find_first_at_or_after(self.ledger, timestamp).position
        return found if found is not None else self.next_publish_position()

    def message_ttl_seconds(self) -> int:
        """The topic's TTL policy if one was set, else the broker default."""
        policy = self.service.topic_policy(self.name, "messageTTL")
        return int(policy) if policy is not None else self.service.config.ttlDurationDefaultInSeconds

    # -- producers
    def add_producer(
        self, cnx: ServerCnx, producer_id: int, name: str, access_mode: int, topic_epoch: int | None = None
    ) -> Producer:
        """Admit a producer: its access mode is settled first, then its name, as in Pulsar."""
        epoch = self._claim_access(access_mode, topic_epoch)
        if name in self.producers:
            raise BrokerServiceError(pb.ProducerBusy, f"Producer with name '{name}' is already connected to topic")
        producer = Producer(self, cnx, producer_id, name, access_mode, epoch)
        self.producers[name] = producer
        return producer

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
                other.cnx.fence_producer(other)
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
            self.ledger.set_property(TOPIC_EPOCH_PROPERTY, str(epoch))
        return epoch

    @property
    def topic_epoch(self) -> int:
        """How many times an exclusive producer took the topic; kept with the ledger, so a
        fenced producer stays fenced across broker restarts."""
        return int(self.ledger.get_property(TOPIC_EPOCH_PROPERTY) or -1)

    def remove_producer(self, producer: Producer) -> None:
        producer.closed = True
        if self.producers.get(producer.name) is producer:
            del self.producers[producer.name]

    # -- consumers
    def subscribe(self, cnx: ServerCnx, cmd: pb.CommandSubscribe) -> Consumer:
        if cmd.read_compacted and cmd.subType not in (Sub.Exclusive, Sub.Failover):
            raise BrokerServiceError(
                pb.NotAllowedError, "readCompacted only allowed on failover or exclusive subscriptions"
            )
        if not cmd.subscription:
            raise BrokerServiceError(pb.InvalidTopicName, "empty subscription name")
        subscription = self.subscriptions.get(cmd.subscription)
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
        try:
            subscription.add_consumer(consumer)
        except BrokerServiceError:
            if created and not subscription.durable:
                self._drop_subscription(subscription)
            raise
        return consumer

    def _create_subscription(self, cmd: pb.CommandSubscribe) -> PersistentSubscription:
        if cmd.durable:
            initial = "earliest" if cmd.initialPosition == Sub.Earliest else "latest"
            cursor = self.ledger.open_cursor(cmd.subscription, initial_position=initial)
        else:
            start = self._start_position(cmd)
            cursor = self.ledger.open_non_durable_cursor(start)
        subscription = PersistentSubscription(self, cmd.subscription, cursor, durable=cmd.durable)
        self.subscriptions[cmd.subscription] = subscription
        return subscription

    def _start_position(self, cmd: pb.CommandSubscribe) -> Position:
        """A reader starts AT its start id; the client drops it when exclusive."""
        if not cmd.HasField("start_message_id"):
            first = self.ledger.first_position
            if cmd.initialPosition == Sub.Earliest and first is not None:
                return first
            return self.next_publish_position()
        return self.entry_at_or_after(position_of(cmd.start_message_id))

    def entry_at_or_after(self, position: Position) -> Position:
        """Where a seek or start id naming `position` lands: the first entry of this topic at
        or after it, or just past the last entry. A position in a ledger of another topic, or
        between ledgers, never reaches the cursor as it is."""
        first = self.ledger.first_position
        after_last = self.next_publish_position()
        if first is None or position < first:
            return first if first is not None else after_last
        if position >= after_last:
            return after_last
        return min(self.ledger.position_at_or_after(position), after_last)

    def remove_consumer(self, consumer: Consumer, *, keep_subscription: bool = False) -> None:
        subscription = consumer.subscription
        subscription.remove_consumer(consumer)
        if not subscription.durable and not subscription.consumers and not keep_subscription:
            self._drop_subscription(subscription)

    def _drop_subscription(self, subscription: PersistentSubscription) -> None:
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]
        if subscription.durable:
            self.ledger.delete_cursor(subscription.name)

    def unsubscribe(self, consumer: Consumer) -> None:
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others:
            raise BrokerServiceError(pb.UnknownError, f"Subscription {subscription.name} has other connected consumers")
        subscription.remove_consumer(consumer)
        self._drop_subscription(subscription)

    # -- lifecycle
    def disconnect_all(self) -> None:
        """Tell every client to reconnect (they re-run lookup), e.g. on shutdown."""
        for producer in list(self.producers.values()):
            producer.cnx.send(commands.close_producer(producer.producer_id))
        for subscription in self.subscriptions.values():
            for consumer in list(subscription.consumers):
                consumer.cnx.send(commands.close_consumer(consumer.consumer_id))

    def sample_rates(self, now: float) -> None:
        self.inbound.sample(now)
        self.outbound.sample(now)
        for producer in self.producers.values():
            producer.inbound.sample(now)
        for subscription in self.subscriptions.values():
            subscription.sample_rates(now)

    def stats(self) -> dict[str, object]:
        """Pulsar's TopicStats: counters since the topic was loaded, rates over the last
        stats interval, storage as it is now."""
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
            "storageSize": self.ledger.total_size_bytes(),
            "publishers": [p.stats() for p in self.producers.values()],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
        }
