"""Payload processors (PIP-96): plugins that turn an entry's payload into messages, and the
choice of one per entry.

The broker dispatches entries unchanged, whatever wrote them; the consumer (or the Spark
source) decides how to read each one. An entry names its format in a MessageMetadata
property (`entry.format`: ``kafka`` as Kafka-on-Pulsar writes it, ``arrow`` for ours; absent
means Pulsar's batch format), so a reader holding several processors picks one per entry
from MessageMetadata alone. What a processor is handed and subclasses is in
magnetar.formats.payload (below every processor).

Processors are found by name: the built-ins (``pulsar``, ``kafka``, ``arrow``) directly, others
through the entry-point group ``magnetar.payload_processors``, and by nothing else: a name may
come from a Spark query's options, whose writer need not own the process, so it never imports
an arbitrary module (see magnetar.plugins). Code that holds a processor class passes an instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from magnetar.formats.payload import (
    CorruptPayloadError,
    EntryPayload,
    PayloadContext,
    PayloadError,
    PayloadProcessor,
    UnknownFormatError,
)
from magnetar.plugins import PluginGroup
from magnetar.wire.batch import BatchMessage
from magnetar.wire.entry import PULSAR_FORMAT

if TYPE_CHECKING:
    from magnetar.formats.columns import MessageColumns

ENTRY_POINT_GROUP = "magnetar.payload_processors"


class ProcessorSet:
    """The processors of one reader, by format; Pulsar's own format is always readable."""

    def __init__(self, processors: Sequence[PayloadProcessor]) -> None:
        # Here, not at the top: pulsar_batch imports pyarrow, and every client imports this
        # module, while only a reader given processors builds a set.
        from magnetar.formats.pulsar_batch import PulsarProcessor  # noqa: PLC0415

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
