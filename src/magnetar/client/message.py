"""`Message`: the official client's accessors plus PIP-70's `index()` and `broker_publish_time()`.

A consumer builds one Message per received message, so construction does no decoding:
a message keeps the entry-wide context (MessageMetadata, broker entry metadata, topic,
redelivery count) shared with its batch siblings, and its own SingleMessageMetadata
(None for a non-batched entry, whose fields are then the entry's). Accessors read lazily.
"""

from __future__ import annotations

from typing import Any

from magnetar.client.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb


class EntryContext:
    """What every message of one entry shares."""

    __slots__ = ("acks", "batch_size", "broker_metadata", "entry", "ledger", "metadata", "owner", "partition",
                 "redelivery_count", "topic")

    def __init__(self, owner: Any, topic: str, metadata: pb.MessageMetadata,
                 broker_metadata: pb.BrokerEntryMetadata | None, redelivery_count: int, batch_size: int,
                 ledger: int, entry: int, partition: int, acks: Any = None) -> None:
        self.owner = owner
        """The single-topic consumer that received the entry (acks and permits go back to it)."""
        self.topic = topic
        self.metadata = metadata
        self.broker_metadata = broker_metadata
        self.redelivery_count = redelivery_count
        self.batch_size = batch_size
        """Messages in the batch, 0 for a non-batched entry."""
        self.ledger = ledger
        self.entry = entry
        self.partition = partition
        self.acks = acks
        """The batch's BatchAcks (which of its messages were acked), or a chunked message's chunk ids."""


class Message:
    """A received message."""

    __slots__ = ("_ctx", "_data", "_id", "_index", "_single")

    def __init__(self, ctx: EntryContext, single: pb.SingleMessageMetadata | None, data: Any, index: int = -1,
                 message_id: MessageId | None = None) -> None:
        self._ctx = ctx
        self._single = single
        self._data = data
        self._index = index
        """The batch index, -1 for a non-batched entry."""
        self._id = message_id
        """Made on first use: most messages are acknowledged without anyone asking for their id."""

    def _fields(self) -> Any:
        return self._ctx.metadata if self._single is None else self._single

    def data(self) -> bytes:
        """The payload bytes (b"" for a null value)."""
        data = self._data
        if type(data) is not bytes:
            data = self._data = bytes(data)
        return data

    def value(self) -> Any:
        """The payload decoded by the consumer's schema; the bytes schema is the only one so far."""
        return self.data()

    def properties(self) -> dict[str, str]:
        return {kv.key: kv.value for kv in self._fields().properties}

    def partition_key(self) -> str:
        return self._fields().partition_key

    def ordering_key(self) -> bytes:
        return self._fields().ordering_key

    def publish_timestamp(self) -> int:
        """The producer's publish time in ms (the entry's, for every message of a batch)."""
        return self._ctx.metadata.publish_time

    def event_timestamp(self) -> int:
        return self._fields().event_time

    def message_id(self) -> MessageId:
        mid = self._id
        if mid is None:
            ctx = self._ctx
            mid = self._id = MessageId(ctx.partition, ctx.ledger, ctx.entry, self._index, ctx.batch_size)
            mid._topic = ctx.topic
            mid.batch_acks = ctx.acks
        return mid

    def topic_name(self) -> str:
        return self._ctx.topic

    def redelivery_count(self) -> int:
        return self._ctx.redelivery_count

    def schema_version(self) -> bytes:
        return self._ctx.metadata.schema_version

    def producer_name(self) -> str:
        return self._ctx.metadata.producer_name

    def has_null_value(self) -> bool:
        return self._fields().null_value

    def encryption_context(self) -> None:
        """Encryption is not supported (yet): always None."""
        return None

    # -- PIP-70 (the Java client's getIndex / getBrokerPublishTime)
    def index(self) -> int | None:
        """The broker's index of this message in its topic partition (PIP-70), None if not exposed.

        The broker stamps the index of an entry's last message, so message i of a batch of n
        has ``index - n + i + 1``, as in the C++ and Java clients.
        """
        bem = self._ctx.broker_metadata
        if bem is None or not bem.HasField("index"):
            return None
        batch_index = self._index
        if batch_index < 0:
            return bem.index
        return bem.index - self._ctx.batch_size + batch_index + 1

    def broker_publish_time(self) -> int | None:
        """When the broker stored the entry, ms since the epoch (PIP-70), None if not exposed."""
        bem = self._ctx.broker_metadata
        if bem is None or not bem.HasField("broker_timestamp"):
            return None
        return bem.broker_timestamp

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, topic={self._ctx.topic!r}, {len(self._data)} bytes)"

