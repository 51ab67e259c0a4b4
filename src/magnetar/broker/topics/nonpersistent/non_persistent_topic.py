"""A non-persistent topic (or one partition of one): producers and subscriptions in memory.

A published message is handed to each subscription's dispatcher at once and
then forgotten: no ledger, no cache, no cursor, nothing in the metadata store
(only a partitioned topic's partition count is stored, like a persistent one's).
So the receipt needs no fsync and is answered before dispatch, as Pulsar does,
and it carries the id Pulsar gives every non-persistent message, 0:0 (plus
partition and batch index); the consumer sees the same id. The official client
neither acknowledges such messages nor checks their ids for duplicates, so ids
need not be distinct.

Publishing parses nothing beyond what the SEND command and the connection's
checks already did, except MessageMetadata when a Key_Shared subscription needs
the key, once per message for all subscriptions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.abstract_topic import AbstractTopic, GroupPublishCallback
from magnetar.broker.topics.consumer import DispatchEntry
from magnetar.broker.topics.nonpersistent.non_persistent_subscription import NonPersistentSubscription
from magnetar.storage import Position
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.topics.context import BrokerContext

log = logging.getLogger(__name__)

#: The (ledgerId, entryId) of every message on a non-persistent topic, receipts included.
NON_PERSISTENT_POSITION = Position(0, 0)


def _metadata(entry: bytes) -> pb.MessageMetadata | None:
    try:
        return parse_message_metadata(entry)
    except WireError:
        return None


class NonPersistentTopic(AbstractTopic):
    subscriptions: dict[str, NonPersistentSubscription]

    def __init__(self, context: BrokerContext, name: TopicName) -> None:
        super().__init__(context, name)
        self.subscriptions = {}
        self._topic_epoch = -1

    def is_active(self) -> bool:
        """Pulsar lists a non-persistent topic only while it has producers, consumers or
        subscriptions; an idle one is as good as absent."""
        return bool(self.producers or self.subscriptions)

    # -- publishing
    def publish_many(self, entries: list[bytes], counts: list[int], batch_size: int,
                     callback: GroupPublishCallback) -> None:
        callback([NON_PERSISTENT_POSITION] * len(entries), None)
        self.inbound.add(sum(counts), sum(map(len, entries)))
        subscriptions = list(self.subscriptions.values())
        needs_metadata = any(subscription.needs_metadata for subscription in subscriptions)
        for entry, count in zip(entries, counts, strict=True):
            message = DispatchEntry(NON_PERSISTENT_POSITION, entry, _metadata(entry) if needs_metadata else None, count)
            for subscription in subscriptions:
                try:
                    subscription.send(message)
                except Exception:  # one subscription's failure must not cost the others the message
                    log.exception("dispatch failed on %s", subscription)

    # -- producers
    @property
    def topic_epoch(self) -> int:
        """In memory only, as in Pulsar: a non-persistent topic has no durable metadata."""
        return self._topic_epoch

    def _set_topic_epoch(self, epoch: int) -> None:
        self._topic_epoch = epoch

    # -- consumers
    def _check_subscribe(self, cmd: pb.CommandSubscribe) -> None:
        if cmd.read_compacted:
            raise BrokerServiceError(pb.NotAllowedError, "readCompacted only valid on persistent topics")

    def _create_subscription(self, cmd: pb.CommandSubscribe) -> NonPersistentSubscription:
        """The start position (initialPosition, a reader's start id) means nothing here: a
        subscription gets what is published from now on."""
        subscription = NonPersistentSubscription(self, cmd.subscription, durable=cmd.durable)
        self.subscriptions[cmd.subscription] = subscription
        return subscription

    def _drop_subscription(self, subscription: NonPersistentSubscription) -> None:  # type: ignore[override]
        if self.subscriptions.get(subscription.name) is subscription:
            del self.subscriptions[subscription.name]

    # -- stats, with the field names of Pulsar's NonPersistentTopicStats
    def stats(self) -> dict[str, object]:
        return {
            **self.traffic_stats(),
            # Pulsar's publisher-side drop (over maxConcurrentNonPersistentMessagePerConnection);
            # magnetar dispatches within the SEND, so nothing piles up to be dropped there.
            "msgDropRate": 0.0,
            "storageSize": 0,
            "publishers": [{**p.stats(), "msgDropRate": 0.0} for p in self.producers.values()],
            "subscriptions": {name: sub.stats() for name, sub in self.subscriptions.items()},
        }
