"""Reading single messages over HTTP: the payload as the body, the metadata as headers.

Headers are Pulsar's `X-Pulsar-*`, plus the PIP-70 broker entry metadata, which the
official Python client cannot show. The batch codec (and the compression libraries it
may load) is imported by the first message read, not by the broker's start-up.
"""

from __future__ import annotations

from datetime import UTC, datetime

from magnetar import web
from magnetar.admin.responses import fail
from magnetar.storage import Position
from magnetar.wire.entry import parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb


def format_time(millis: int) -> str:
    """Pulsar's admin date format: ISO-8601 with milliseconds and offset."""
    return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_OPTIONAL_HEADERS = {
    "partition_key": ("X-Pulsar-partition-key", str),
    "event_time": ("X-Pulsar-event-time", format_time),
    "deliver_at_time": ("X-Pulsar-deliver-at-time", format_time),
    "num_messages_in_batch": ("X-Pulsar-num-batch-message", str),
    "uncompressed_size": ("X-Pulsar-uncompressed-size", str),
}


def entry_response(position: Position, data: bytes, max_size: int) -> web.Response:
    """One stored entry as Pulsar's getMessageById answers it."""
    from magnetar.wire.batch import decompressed_payload  # noqa: PLC0415 (see the module's docstring)

    try:
        entry = parse_entry(data)
        md = entry.metadata
        payload = bytes(decompressed_payload(md, entry.payload, max_size=max_size))
    except WireError as exc:
        raise fail(409, f"entry {position} cannot be decoded: {exc}") from exc
    headers = {
        "X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}",
        "X-Pulsar-publish-time": format_time(md.publish_time),
        "X-Pulsar-producer-name": md.producer_name,
        "X-Pulsar-sequence-id": str(md.sequence_id),
    }
    for kv in md.properties:
        headers[f"X-Pulsar-PROPERTY-{kv.key}"] = kv.value
    for field, (header, render) in _OPTIONAL_HEADERS.items():
        if md.HasField(field):
            headers[header] = render(getattr(md, field))  # type: ignore[operator]
    if md.HasField("num_messages_in_batch"):
        headers["X-Pulsar-batch-size"] = str(len(payload))
    if md.HasField("compression"):
        headers["X-Pulsar-compression"] = pb.CompressionType.Name(md.compression)
    bem = entry.broker_entry_metadata
    if bem is not None:
        if bem.HasField("broker_timestamp"):
            headers["X-Pulsar-Broker-Entry-METADATA-timestamp"] = format_time(bem.broker_timestamp)
        if bem.HasField("index"):
            headers["X-Pulsar-Broker-Entry-METADATA-index"] = str(bem.index)
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")
