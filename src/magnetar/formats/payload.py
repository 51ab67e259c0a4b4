"""The payload processor API (PIP-96): what a processor is handed for an entry, and the
class it subclasses.

A processor yields the messages of an entry as the wire codec's `BatchMessage` tuples
(SingleMessageMetadata, value, batch index), so message ids, acks and seeks work as for a
Pulsar batch; a columnar reader may ask it for Arrow columns instead. Every processor, the
built-in ones too, imports this module and nothing of the rest of `formats`: the choice of a
processor per entry (magnetar.formats.processor) sits above them all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from magnetar.wire.batch import BatchMessage, decode_batch, decode_messages
from magnetar.wire.entry import FORMAT_PROPERTY
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.formats.columns import MessageColumns


class PayloadError(ValueError):
    """An entry whose payload cannot be turned into messages."""


class UnknownFormatError(PayloadError):
    """No processor reads the entry's format: named, so the fix (which processor to add) is plain."""

    def __init__(self, fmt: str, known: Iterable[str]) -> None:
        self.format = fmt
        super().__init__(f"entry is in format {fmt!r} ({FORMAT_PROPERTY} property) and no payload processor "
                         f"reads it (this reader has: {', '.join(sorted(known)) or 'none'}); "
                         f"pass payload_processor={fmt!r}")


class CorruptPayloadError(PayloadError):
    """The processor of the entry's format refused its payload."""

    def __init__(self, fmt: str, reason: str) -> None:
        self.format = fmt
        super().__init__(f"corrupt {fmt} payload: {reason}")


@dataclass(slots=True)
class EntryPayload:
    """What a processor is handed for one entry: the layers the broker stored, payload decompressed."""

    broker_entry_metadata: pb.BrokerEntryMetadata | None
    metadata: pb.MessageMetadata
    payload: memoryview
    """After MessageMetadata's `compression` was undone (a format's own compression is its business)."""
    format: str


class PayloadContext:
    """The Java client's MessagePayloadContext: the entry's metadata and Pulsar's own decoder."""

    __slots__ = ("entry",)

    def __init__(self, entry: EntryPayload) -> None:
        self.entry = entry

    def get_property(self, key: str) -> str | None:
        for kv in self.entry.metadata.properties:
            if kv.key == key:
                return kv.value
        return None

    @property
    def num_messages(self) -> int:
        """`num_messages_in_batch` (1 when absent, the protobuf default)."""
        return self.entry.metadata.num_messages_in_batch

    @property
    def is_batch(self) -> bool:
        return self.entry.metadata.HasField("num_messages_in_batch")

    def default_messages(self) -> list[BatchMessage]:
        """The entry read as Pulsar's format: what a processor defers to for entries it does not own."""
        metadata = self.entry.metadata
        if metadata.HasField("num_messages_in_batch"):
            return decode_batch(self.entry.payload, metadata.num_messages_in_batch)
        return decode_messages(metadata, self.entry.payload, max_size=len(self.entry.payload))


class PayloadProcessor:
    """Reads entries of the formats it names; subclass and override `messages` (and `columns`).

    `formats` None makes a catch-all processor (the Java shape): it sees every entry, and
    defers to `context.default_messages()` for those it does not own.
    """

    formats: ClassVar[tuple[str, ...] | None] = None
    name: ClassVar[str] = ""

    def messages(self, entry: EntryPayload, context: PayloadContext) -> Sequence[BatchMessage]:
        """The entry's messages, batch indexes 0..n-1 in order (or -1 for a lone non-batched message)."""
        return context.default_messages()

    def columns(self, entry: EntryPayload, context: PayloadContext) -> MessageColumns | None:
        """The entry's messages as Arrow columns, or None to have them built from `messages`."""
        return None

    def count(self, payload: memoryview) -> int | None:
        """How many messages a payload of this format holds (for writers to validate), None if unknown."""
        return None
