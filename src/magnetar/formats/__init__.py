"""Payload formats shared by the client and the Spark source (sans-IO, below both).

Pulsar batches, Kafka record batches and Arrow IPC entries become messages (for `receive`)
or Arrow columns (for `receive_arrow` and Spark), through payload processors (PIP-96)
chosen per entry by its `entry.format` property. Modules that build Arrow columns import
pyarrow; `processor` and the message paths do not need it.

Layering: sans-IO like wire (no asyncio, sockets or threads); beside magnetar.credentials
(neither imports the other), under magnetar.broker and magnetar.client, over storage; imports
only magnetar.wire and magnetar.plugins. Inside, `payload` (the processor API) is below every
processor and `processor` (the choice of one per entry) above them. Enforced by import-linter
(pyproject.toml).
"""

from magnetar.formats.payload import (
    CorruptPayloadError,
    EntryPayload,
    PayloadContext,
    PayloadError,
    PayloadProcessor,
    UnknownFormatError,
)
from magnetar.formats.processor import ProcessorSet, resolve_processors
from magnetar.wire.entry import FORMAT_PROPERTY, entry_format

__all__ = [
    "FORMAT_PROPERTY",
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
