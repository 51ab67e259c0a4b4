"""Entries a producer writes whole, for writers of other formats (`send_entry`, `send_arrow`).

The caller brings the payload and says how many messages it holds; the producer adds the
MessageMetadata it owns (producer name, sequence ids, publish time) and checks the count
against the payload wherever a built-in reader knows the format: a wrong
`num_messages_in_batch` would shift every message id a consumer acknowledges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.client import errors
from magnetar.client.outgoing import compressed
from magnetar.formats.payload import PayloadError
from magnetar.formats.processor import count_messages
from magnetar.wire.entry import FORMAT_PROPERTY, PULSAR_FORMAT
from magnetar.wire.proto import pulsar_api_pb2 as pb

_OWNED = {"producer_name", "sequence_id", "publish_time", "num_messages_in_batch"}


def entry_metadata(fields: Mapping[str, Any] | None, num_messages: int) -> pb.MessageMetadata:
    """MessageMetadata from the caller's fields (properties as a dict); the producer fills the rest."""
    fields = dict(fields or {})
    owned = _OWNED & fields.keys()
    if owned:
        raise errors.InvalidConfiguration(f"send_entry: {sorted(owned)} are set by the producer")
    if not isinstance(num_messages, int) or num_messages < 1:
        raise errors.InvalidConfiguration(f"send_entry: num_messages must be a positive int, got {num_messages!r}")
    properties = fields.pop("properties", None) or {}
    try:
        metadata = pb.MessageMetadata(producer_name="", sequence_id=0, publish_time=0, **fields)
    except (ValueError, TypeError) as exc:
        raise errors.InvalidConfiguration(f"send_entry: bad metadata fields: {exc}") from exc
    for key, value in dict(properties).items():
        metadata.properties.add(key=key, value=value)
    metadata.num_messages_in_batch = num_messages
    return metadata


def check_count(metadata: pb.MessageMetadata, payload: bytes, num_messages: int, max_size: int) -> None:
    """Refuse a payload whose built-in reader counts other than `num_messages` messages."""
    fmt = next((kv.value for kv in metadata.properties if kv.key == FORMAT_PROPERTY), PULSAR_FORMAT)
    if metadata.compression != pb.NONE:
        from magnetar.wire.compression import decompress  # noqa: PLC0415

        try:
            payload = decompress(metadata.compression, payload, metadata.uncompressed_size, max_size=max_size)
        except ValueError as exc:
            raise errors.InvalidConfiguration(f"send_entry: the payload does not decompress: {exc}") from exc
    try:
        found = count_messages(fmt, payload)
    except (PayloadError, ValueError) as exc:
        raise errors.InvalidConfiguration(f"send_entry: not a valid {fmt} payload: {exc}") from exc
    if found is not None and found != num_messages:
        raise errors.InvalidConfiguration(
            f"send_entry: num_messages={num_messages} but the {fmt} payload holds {found} messages")


def arrow_entries(data: Any, max_rows: int | None, compression: int) -> list[tuple[pb.MessageMetadata, bytes, int]]:
    """(metadata, payload, rows) of each Arrow IPC entry of a pyarrow Table or RecordBatch, one per
    record batch of at most `max_rows` rows, compressed as the producer's other entries."""
    from magnetar.formats.arrow_ipc import ARROW_FORMAT, encode_arrow_batches  # noqa: PLC0415 (pyarrow)

    try:
        payloads = encode_arrow_batches(data, max_rows)
    except (ValueError, TypeError) as exc:
        raise errors.InvalidConfiguration(f"send_arrow: {exc}") from exc
    entries = []
    for payload, rows in payloads:
        metadata = entry_metadata({"properties": {FORMAT_PROPERTY: ARROW_FORMAT}}, rows)
        entries.append((metadata, compressed(metadata, payload, compression), rows))
    return entries
