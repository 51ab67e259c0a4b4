"""Non-persistent dispatchers: a message goes out as it is published, or not at all.

Nothing is stored, so there is nothing to read later: the consumer chosen by the
subscription type's rules (`consumer_selectors`, shared with persistent topics)
gets the message if it has permits and a writable connection; otherwise the
message is dropped and counted, which is what keeps a slow consumer from
stalling the producer or the other consumers. As Pulsar's
NonPersistentDispatcher* classes do:

- `NonPersistentSingleActiveConsumerDispatcher` (Exclusive, Failover): the
  active consumer, else drop.
- `NonPersistentMultipleConsumersDispatcher` (Shared): round robin over
  consumers that can receive, else drop.
- `NonPersistentKeySharedDispatcher` (Key_Shared): the owner of the key's hash
  if it can receive, else drop; a key nobody owns (STICKY ranges not covering
  it) is discarded without being counted, as in Pulsar.

A message is charged to the consumer in messages, a batch counting as all of
its messages, exactly as a persistent dispatch is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.consumer_selectors import (
    KeySharedConsumers,
    RoundRobinSelector,
    SingleActiveElection,
    StickyKeyConsumerSelector,
    sticky_key_hash,
)
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.nonpersistent.non_persistent_subscription import NonPersistentSubscription


class NonPersistentDispatcher:
    """What all non-persistent dispatch modes share: the consumers, and sending or dropping."""

    #: Whether `send` needs the entry's MessageMetadata (only Key_Shared, for the key).
    needs_metadata = False

    def __init__(self, subscription: NonPersistentSubscription) -> None:
        self.subscription = subscription
        self.consumers: list[Consumer] = []

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.remove(consumer)

    def schedule(self) -> None:
        """Nothing waits to be read: permits only matter when the next message is published."""

    def send(self, entry: DispatchEntry) -> None:
        raise NotImplementedError

    def _push_or_drop(self, consumer: Consumer | None, entry: DispatchEntry) -> None:
        if consumer is not None and consumer.can_receive:
            consumer.push(entry)
        else:
            self.subscription.dropped.add(entry.num_messages, len(entry.data))


class NonPersistentSingleActiveConsumerDispatcher(SingleActiveElection, NonPersistentDispatcher):
    """Exclusive and Failover: the active consumer receives, if it has permits."""

    def __init__(self, subscription: NonPersistentSubscription, sub_type: int) -> None:
        super().__init__(subscription)
        self.sub_type = sub_type
        self.active: Consumer | None = None

    def send(self, entry: DispatchEntry) -> None:
        self._push_or_drop(self.active, entry)


class NonPersistentMultipleConsumersDispatcher(NonPersistentDispatcher):
    """Shared: the next consumer that can receive."""

    def __init__(self, subscription: NonPersistentSubscription) -> None:
        super().__init__(subscription)
        self._round_robin = RoundRobinSelector()

    def send(self, entry: DispatchEntry) -> None:
        self._push_or_drop(self._round_robin.select(self.consumers), entry)


class NonPersistentKeySharedDispatcher(KeySharedConsumers, NonPersistentDispatcher):
    """Key_Shared: the consumer owning the key's hash, with no ordering to keep across
    consumer changes, since nothing is ever delivered twice."""

    needs_metadata = True

    def __init__(self, subscription: NonPersistentSubscription, meta: pb.KeySharedMeta | None) -> None:
        super().__init__(subscription)
        self.selector = StickyKeyConsumerSelector(meta)

    def send(self, entry: DispatchEntry) -> None:
        owner = self.selector.owner(sticky_key_hash(entry.sticky_key))
        if owner is not None:
            self._push_or_drop(owner, entry)
