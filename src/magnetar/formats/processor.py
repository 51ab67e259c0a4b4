"""Payload processors (PIP-96): plugins that turn an entry's payload into messages.

The broker dispatches entries unchanged, whatever wrote them; the consumer (or the Spark
source) decides how to read each one. An entry names its format in a MessageMetadata
property (`entry.format`: ``kafka`` as Kafka-on-Pulsar writes it, ``arrow`` for ours; absent
means Pulsar's batch format), so a reader holding several processors picks one per entry
from MessageMetadata alone. A processor yields the messages of an entry as the wire codec's
`BatchMessage` tuples (SingleMessageMetadata, value, batch index), so message ids, acks and
seeks work as for a Pulsar batch; a columnar reader may ask it for Arrow columns instead.

Processors are found by name: the built-ins (``pulsar``, ``kafka``, ``arrow``) directly, others
through the entry-point group ``magnetar.payload_processors``, and by nothing else: a name may
come from a Spark query's options, whose writer need not own the process, so it never imports
an arbitrary module (see magnetar.plugins). Code that holds a processor class passes an instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from magnetar.plugins import PluginGroup
from magnetar.wire.batch import BatchMessage, decode_batch, decode_messages
from magnetar.wire.entry import FORMAT_PROPERTY, PULSAR_FORMAT, entry_format
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.formats.columns import MessageColumns

ENTRY_POINT_GROUP = "magnetar.payload_processors"

__all__ = [
    "ENTRY_POINT_GROUP",
    "FORMAT_PROPERTY",
    "PULSAR_FORMAT",
    "CorruptPayloadError",
    "EntryPayload",
    "PayloadContext",
    "PayloadError",
    "PayloadProcessor",
    "ProcessorSet",
    "UnknownFormatError",
    "entry_format",
    "resolve_processors",
]


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


class ProcessorSet:
    """The processors of one reader, by format; Pulsar's own format is always readable."""

    def __init__(self, processors: Sequence[PayloadProcessor]) -> None:
        from magnetar.formats.pulsar_batch import PulsarProcessor  # noqa: PLC0415 (a cycle otherwise)

        self.by_format: dict[str, PayloadProcessor] = {}
        self.catch_all: PayloadProcessor | None = None
        for processor in processors:
            formats = getattr(processor, "formats", None)
            if formats is None:
                self.catch_all = processor
            else:
                for fmt in formats:
                    self.by_format.setdefault(fmt, processor)
        self.pulsar = self.by_format.setdefault(PULSAR_FORMAT, PulsarProcessor())

    def processor_for(self, fmt: str) -> PayloadProcessor:
        found = self.by_format.get(fmt) if self.catch_all is None else self.catch_all
        if found is None:
            raise UnknownFormatError(fmt, self.by_format)
        return found

    def messages(self, entry: EntryPayload) -> Sequence[BatchMessage]:
        """The entry's messages; any failure of the processor becomes a PayloadError naming the format."""
        processor = self.processor_for(entry.format)
        try:
            return processor.messages(entry, PayloadContext(entry))
        except PayloadError:
            raise
        except Exception as exc:  # a plugin's bug or bad bytes: one entry fails, never the reader
            raise CorruptPayloadError(entry.format, f"{type(exc).__name__}: {exc}") from exc

    def columns(self, entry: EntryPayload) -> MessageColumns | None:
        processor = self.processor_for(entry.format)
        try:
            columns = getattr(processor, "columns", None)
            return None if columns is None else columns(entry, PayloadContext(entry))
        except PayloadError:
            raise
        except Exception as exc:
            raise CorruptPayloadError(entry.format, f"{type(exc).__name__}: {exc}") from exc


BUILTINS = {
    "pulsar": "magnetar.formats.pulsar_batch:PulsarProcessor",
    "kafka": "magnetar.formats.kafka_records:KafkaProcessor",
    "arrow": "magnetar.formats.arrow_ipc:ArrowProcessor",
}
_NAMED = PluginGroup("payload processor", ENTRY_POINT_GROUP, BUILTINS).allow_list()
"""Names resolve to the built-ins and installed entry points only."""


def load_processor(name: str) -> PayloadProcessor:
    """A processor by name (a built-in or an entry point); a class is instantiated, an
    instance used as is. PluginError (a ValueError) for any other name, imported or not."""
    factory = _NAMED.load(name)
    return factory() if isinstance(factory, type) else factory


def resolve_processors(spec: Any) -> ProcessorSet | None:
    """`payload_processor=` as given: None (Pulsar's format only, today's path), a processor, a
    name, a comma-separated list of names, or a sequence of those."""
    if spec is None:
        return None
    if isinstance(spec, ProcessorSet):
        return spec
    items = spec.split(",") if isinstance(spec, str) else spec if isinstance(spec, Sequence) else [spec]
    processors = []
    for item in items:
        if isinstance(item, str):
            processors.append(load_processor(item.strip()))
        elif isinstance(item, PayloadProcessor) or callable(getattr(item, "messages", None)):
            processors.append(item)
        else:
            raise TypeError(f"payload_processor: expected a PayloadProcessor or a name, got {type(item).__name__}")
    return ProcessorSet(processors)


def count_messages(fmt: str, payload: bytes | memoryview, *, verify: bool = True) -> int | None:
    """Messages in a payload of format `fmt` by the built-in reader of it; None for other formats.
    Raises PayloadError when the payload is not valid in that format. Without `verify`, a
    format that states its count in a header (Kafka) is not checksummed: the broker's case."""
    if fmt not in BUILTINS:
        return None
    processor = load_processor(fmt)
    counter = processor.count if verify else getattr(processor, "stated_count", processor.count)
    try:
        return counter(memoryview(payload))
    except PayloadError:
        raise
    except Exception as exc:
        raise CorruptPayloadError(fmt, f"{type(exc).__name__}: {exc}") from exc


def all_builtins(extra: Sequence[str] = ()) -> ProcessorSet:
    """Every built-in format, after the processors named in `extra` (which win for the formats
    they read): what the Spark source reads with, `extra` being its `payloadProcessor` option."""
    return ProcessorSet([load_processor(name) for name in (*extra, *BUILTINS)])
