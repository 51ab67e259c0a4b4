"""Batch containers: which messages go into which batch, and when a batch is cut (sans-IO).

The rules are the official client's: a batch is cut when it holds `max_messages`
messages or `max_bytes` of values, or when the next message would not fit; the producer
also cuts on its publish-delay timer and on flush. `KeyBasedContainer` keeps one batch per
key (ordering key, else partition key), as the C++ KeyBased container does, so Key_Shared
consumers get batches of one key.

PIP-191 (`batched_filter_properties`): the values of the named property keys are the
batch's filter properties; a message whose values differ cuts the batch, so every
message of a batch shares them and the batch's MessageMetadata can carry them for
broker entry filters. Keys a message lacks are not extracted (and absent keys count:
{region: eu} and {region: eu, version: 1} differ).

Each message's `[size][SingleMessageMetadata][value]` is encoded when it is added, so
cutting a batch is one join.
"""

from __future__ import annotations

from collections.abc import Sequence

from magnetar.client.outgoing import PendingMessage
from magnetar.wire.batch import encode_single_message

FilterValues = tuple[tuple[str, str], ...]


class Batch:
    """A batch being filled, then cut: messages, their encoded bytes, and the batch properties."""

    __slots__ = ("filter_values", "messages", "parts", "size")

    def __init__(self, filter_values: FilterValues) -> None:
        self.messages: list[PendingMessage] = []
        self.parts: list[bytes] = []
        self.size = 0
        self.filter_values = filter_values

    def add(self, message: PendingMessage) -> None:
        self.messages.append(message)
        self.size += len(message.value)
        self.parts.append(encode_single_message(
            message.value, message.sequence_id, message.properties, message.partition_key,
            message.ordering_key, message.event_time, message.null_value, message.key_b64, message.null_key,
        ))

    def payload(self) -> bytes:
        return b"".join(self.parts)

    @property
    def first_sequence_id(self) -> int:
        return self.messages[0].sequence_id


class BatchContainer:
    """Default batching: one batch at a time, in send order."""

    def __init__(self, max_messages: int, max_bytes: int, filter_keys: Sequence[str] = ()) -> None:
        self.max_messages = max_messages if max_messages > 0 else 1 << 62
        self.max_bytes = max_bytes if max_bytes > 0 else 1 << 62
        self.filter_keys = tuple(filter_keys)
        self._batch: Batch | None = None

    def __len__(self) -> int:
        return 0 if self._batch is None else len(self._batch.messages)

    def filter_values(self, message: PendingMessage) -> FilterValues:
        props = message.properties
        if not self.filter_keys or not props:
            return ()
        return tuple((key, props[key]) for key in self.filter_keys if key in props)

    def add(self, message: PendingMessage) -> list[Batch]:
        """Add a message; return the batches that must go out now, oldest first."""
        values = self.filter_values(message) if self.filter_keys else ()
        out: list[Batch] = []
        batch = self._batch
        if batch is not None and (
            batch.filter_values != values
            or len(batch.messages) >= self.max_messages
            or batch.size + len(message.value) > self.max_bytes
        ):
            out.append(batch)
            batch = None
        if batch is None:
            batch = self._batch = Batch(values)
        batch.add(message)
        if len(batch.messages) >= self.max_messages or batch.size >= self.max_bytes:
            out.append(batch)
            self._batch = None
        return out

    def cut(self) -> list[Batch]:
        """Everything held, as batches to send now (the delay timer or flush)."""
        batch, self._batch = self._batch, None
        return [] if batch is None else [batch]


class KeyBasedContainer(BatchContainer):
    """One batch per key; limits count over all keys, and a full container flushes every key."""

    def __init__(self, max_messages: int, max_bytes: int, filter_keys: Sequence[str] = ()) -> None:
        super().__init__(max_messages, max_bytes, filter_keys)
        self._batches: dict[bytes | str | None, Batch] = {}
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._count

    def add(self, message: PendingMessage) -> list[Batch]:
        key = message.ordering_key if message.ordering_key is not None else message.partition_key
        values = self.filter_values(message) if self.filter_keys else ()
        out: list[Batch] = []
        if self._count and (self._count >= self.max_messages or self._bytes + len(message.value) > self.max_bytes):
            out += self.cut()
        batch = self._batches.get(key)
        if batch is not None and batch.filter_values != values:
            out.append(self._batches.pop(key))
            self._count -= len(batch.messages)
            self._bytes -= batch.size
            batch = None
        if batch is None:
            batch = self._batches[key] = Batch(values)
        batch.add(message)
        self._count += 1
        self._bytes += len(message.value)
        if self._count >= self.max_messages or self._bytes >= self.max_bytes:
            out += self.cut()
        return out

    def cut(self) -> list[Batch]:
        batches = sorted(self._batches.values(), key=lambda b: b.first_sequence_id)
        self._batches.clear()
        self._count = self._bytes = 0
        return batches
