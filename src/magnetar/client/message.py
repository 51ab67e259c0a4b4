"""`Message`: the official client's accessors plus PIP-70's `index()` and `broker_publish_time()`.

A consumer builds one Message per received message, so construction does no decoding and
runs no Python code: a Message is a tuple of the wire codec's `BatchMessage` (its own
SingleMessageMetadata, value and batch index; metadata None for a non-batched entry, whose
fields are then the entry's) and the entry-wide context (MessageMetadata, broker entry
metadata, topic, redelivery count, position) it shares with its batch siblings, made in C
by `messages_of`. Accessors read lazily; the MessageId is made when asked for.
"""

from __future__ import annotations

import base64
from itertools import repeat
from operator import itemgetter
from typing import Any

from magnetar.client.crypto.context import EncryptionContext
from magnetar.client.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb


class EntryContext:
    """What every message of one entry shares."""

    __slots__ = ("acks", "batch_size", "broker_metadata", "decryption_failed", "entry", "first_chunk", "ledger",
                 "metadata", "owner", "partition", "redelivery_count", "topic")

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
        self.first_chunk: Any = None
        """A chunked message's first chunk id (a wire MessageId)."""
        self.decryption_failed = False
        """The entry is encrypted and was delivered undecrypted (crypto_failure_action=CONSUME)."""


class Message(tuple):
    """A received message: ``(BatchMessage(single metadata, value, index), EntryContext)``."""

    __slots__ = ()

    _ctx: EntryContext = property(itemgetter(1))  # type: ignore[assignment]
    _index: int = property(lambda self: self[0][2])  # type: ignore[assignment]

    @classmethod
    def of(cls, ctx: EntryContext, single: pb.SingleMessageMetadata | None, data: Any, index: int = -1) -> Message:
        return tuple.__new__(cls, ((single, data, index), ctx))

    def _fields(self) -> Any:
        single = self[0][0]
        return self[1].metadata if single is None else single

    @property
    def _data(self) -> Any:
        return self[0][1]

    def data(self) -> bytes:
        """The payload bytes (b"" for a null value)."""
        data = self[0][1]
        return data if type(data) is bytes else bytes(data)

    def value(self) -> Any:
        """The payload decoded by the consumer's schema (the bytes without one), read from the
        schema version that wrote it."""
        decode = getattr(self[1].owner, "decode_value", None)
        return self.data() if decode is None else decode(self)

    def properties(self) -> dict[str, str]:
        return {kv.key: kv.value for kv in self._fields().properties}

    def partition_key(self) -> str:
        return self._fields().partition_key

    def key_bytes(self) -> bytes | None:
        """The key's bytes, as Java's getKeyBytes gives them: base64-decoded when the producer
        set bytes (`partition_key_b64_encoded`, as a SEPARATED KeyValueSchema does), else the
        key's UTF-8; None when the message has no key or a null one."""
        fields = self._fields()
        if fields.null_partition_key or not fields.HasField("partition_key"):
            return None
        if fields.partition_key_b64_encoded:
            return base64.b64decode(fields.partition_key)
        return fields.partition_key.encode()

    def ordering_key(self) -> bytes:
        return self._fields().ordering_key

    def key_options(self) -> dict[str, Any]:
        """Send options that write this message's keys again as its producer wrote them: the
        partition key with its base64 flag (a SEPARATED KeyValue's key bytes), a null key, the
        ordering key. Dead and retry letters carry them, as the Java client's letters do."""
        fields = self._fields()
        options: dict[str, Any] = {}
        if fields.null_partition_key:
            options["null_partition_key"] = True
        elif fields.HasField("partition_key"):
            options["partition_key"] = fields.partition_key
            options["partition_key_b64_encoded"] = fields.partition_key_b64_encoded
        if fields.HasField("ordering_key"):
            options["ordering_key"] = fields.ordering_key
        return options

    def publish_timestamp(self) -> int:
        """The producer's publish time in ms (the entry's, for every message of a batch)."""
        return self._ctx.metadata.publish_time

    def event_timestamp(self) -> int:
        return self._fields().event_time

    def message_id(self) -> MessageId:
        ctx = self[1]
        mid = MessageId(ctx.partition, ctx.ledger, ctx.entry, self[0][2], ctx.batch_size)
        mid._topic = ctx.topic
        mid.batch_acks = ctx.acks
        mid._first_chunk = ctx.first_chunk
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

    def encryption_context(self) -> EncryptionContext | None:
        """How the message's entry was encrypted, None when it was not (as the official 3.x client)."""
        ctx = self[1]
        metadata = ctx.metadata
        if not metadata.encryption_keys:
            return None
        return EncryptionContext(metadata, ctx.decryption_failed)

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
        return f"Message(id={self.message_id()}, topic={self[1].topic!r}, {len(self[0][1])} bytes)"


def messages_of(ctx: EntryContext, batch: list[Any]) -> list[Message]:
    """Messages of a decoded batch (a list of BatchMessage), built without a Python step per message."""
    return list(map(tuple.__new__, repeat(Message), zip(batch, repeat(ctx))))

