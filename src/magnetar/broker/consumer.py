"""A consumer as the broker sees it: permits, and what it holds unacknowledged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from magnetar.broker.stats import MessageCounter
from magnetar.storage import Position
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.abstract_subscription import AbstractSubscription
    from magnetar.broker.connection import ServerCnx


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


class Consumer:
    """Flow permits are counted in messages: a batch of n costs n (Pulsar's rule)."""

    def __init__(
        self,
        cnx: ServerCnx,
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
        self.told_end_of_topic = False
        self.pending: dict[Position, int] = {}
        self.outbound = MessageCounter()

    @property
    def can_receive(self) -> bool:
        return self.permits > 0 and self.cnx.writable

    @property
    def unacked_messages(self) -> int:
        return sum(self.pending.values())

    def deliver(self, entry: DispatchEntry) -> None:
        """Send a stored entry, held as unacknowledged until the consumer acks it."""
        self.pending[entry.position] = entry.num_messages
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
            "address": self.cnx.remote,
        }

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, {self.cnx})"
