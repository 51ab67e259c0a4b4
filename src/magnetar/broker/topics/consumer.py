"""A consumer as the broker sees it: permits, and what it holds unacknowledged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.broker.topics.stats import MessageCounter
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.abstract_subscription import AbstractSubscription
    from magnetar.broker.topics.cnx import TransportCnx


@dataclass(slots=True)
class DispatchEntry:
    """One stored entry on its way to a consumer, with what dispatch needs to know."""

    position: Position
    data: bytes
    metadata: pb.MessageMetadata | None
    num_messages: int
    redelivery_count: int = 0
    ack_set: list[int] = field(default_factory=list)

    @property
    def sticky_key(self) -> bytes:
        """The key Key_Shared orders by: ordering_key, else partition_key."""
        md = self.metadata
        if md is None:
            return b""
        if md.HasField("ordering_key"):
            return md.ordering_key
        return md.partition_key.encode()


class UnackedMessages(dict[Position, int]):
    """Entries a consumer holds unacknowledged, with the message count kept as it changes:
    the unacked limit is checked on every dispatch, which must not sum the whole map."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __setitem__(self, position: Position, count: int) -> None:
        self.total += count - self.get(position, 0)
        super().__setitem__(position, count)

    def pop(self, position: Position, default: int | None = None) -> int | None:  # type: ignore[override]
        count = super().pop(position, None)
        if count is None:
            return default
        self.total -= count
        return count

    def clear(self) -> None:
        super().clear()
        self.total = 0


class Consumer:
    """Flow permits are counted in messages: a batch of n costs n (Pulsar's rule).

    A Shared or Key_Shared consumer holding `max_unacked` messages is blocked until its
    acknowledgements bring it down to half of that, as Pulsar's consumers are.
    """

    def __init__(
        self,
        cnx: TransportCnx,
        consumer_id: int,
        name: str,
        subscription: AbstractSubscription,
        sub_type: int,
        priority_level: int,
        key_shared_meta: pb.KeySharedMeta | None,
    ) -> None:
        self.cnx = cnx
        self.consumer_id = consumer_id
        self.name = name
        self.subscription = subscription
        self.sub_type = sub_type
        self.priority_level = priority_level
        self.key_shared_meta = key_shared_meta
        self.metadata: dict[str, str] = {}
        """The consumer's properties (CommandSubscribe.metadata; the client's `properties=`)."""
        self.permits = 0
        self.read_compacted = False
        """Reads the compacted view (CommandSubscribe.read_compacted)."""
        self.auto_consume = False
        """Subscribed with an AUTO_CONSUME schema: left out when the topic's idleness for a
        consumer's schema is decided."""
        self.told_end_of_topic = False
        self.pending = UnackedMessages()
        self.max_unacked = 0
        self.blocked_on_unacked = False
        self.outbound = MessageCounter()

    @property
    def can_receive(self) -> bool:
        if self.blocked_on_unacked:
            if self.pending.total > self.max_unacked // 2:
                return False
            self.blocked_on_unacked = False
        return self.permits > 0 and self.cnx.writable

    @property
    def unacked_messages(self) -> int:
        return self.pending.total

    def deliver(self, entry: DispatchEntry) -> None:
        """Send a stored entry, held as unacknowledged until the consumer acks it."""
        self.pending[entry.position] = entry.num_messages
        if self.max_unacked and self.pending.total >= self.max_unacked:
            self.blocked_on_unacked = True
        self.push(entry)

    def push(self, entry: DispatchEntry) -> None:
        """Send without holding anything for redelivery: a non-persistent message is never
        asked for again (and the official client does not even acknowledge it)."""
        count, size = entry.num_messages, len(entry.data)
        self.permits -= count
        self.outbound.add(count, size)
        subscription = self.subscription
        subscription.outbound.add(count, size)
        subscription.topic.outbound.add(count, size)
        self.cnx.send_message(self.consumer_id, subscription.topic.partition, entry)

    def stats(self) -> dict[str, object]:
        return {
            "consumerName": self.name,
            "msgRateOut": self.outbound.message_rate,
            "msgThroughputOut": self.outbound.byte_rate,
            "bytesOutCounter": self.outbound.bytes,
            "msgOutCounter": self.outbound.messages,
            "availablePermits": self.permits,
            "unackedMessages": self.unacked_messages,
            "blockedConsumerOnUnackedMsgs": self.blocked_on_unacked,
            "address": self.cnx.remote,
        }

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, {self.cnx})"
