"""What a replicator sends for an entry it reads: the entry as stored, its MessageMetadata
saying where it comes from, or nothing (Pulsar's PersistentReplicator's rules)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

from magnetar.broker.deduplication import REPL_SOURCE_POSITION
from magnetar.storage import Position
from magnetar.wire import client_commands as cc
from magnetar.wire.entry import build_entry, parse_entry
from magnetar.wire.errors import WireError
from magnetar.wire.markers import SNAPSHOT_REQUEST, SNAPSHOT_RESPONSE, UPDATE
from magnetar.wire.proto import pulsar_api_pb2 as pb

MarkerSink = Callable[[Position, pb.MessageMetadata, bytes], None]
"""Told of each marker the remote's replicator stored here (replicated subscriptions)."""
_REPLICATED_MARKERS = frozenset({SNAPSHOT_REQUEST, SNAPSHOT_RESPONSE, UPDATE})
"""The markers that cross clusters (a SNAPSHOT stays where it was made, a transaction's
marker belongs to this cluster's transaction)."""


class SchemaNeededError(Exception):
    """The entry was written with a schema version the remote has not been given yet."""

    def __init__(self, version: bytes) -> None:
        super().__init__(version.hex())
        self.version = version


class Outgoing(NamedTuple):
    send: bytes
    """The SEND frame, its sequence id the original producer's."""
    sequence_id: int
    """What the remote's receipt must name."""
    messages: int
    publish_time: int


def outgoing(entry: bytes, position: Position, producer_id: int, local: str, remote: str,
             schema_versions: Mapping[bytes, bytes], markers: MarkerSink | None = None) -> Outgoing | None:
    """The SEND replicating `entry` to `remote`, or None for an entry that stays here:
    unreadable, a marker that does not cross clusters, one that came from another cluster
    (so no message loops; a marker `remote` sent goes to `markers`, as Pulsar's replicator
    hands it to the topic), or one whose producer named other clusters
    (`replication_clusters`, `disable_replication`).

    The payload (a whole batch, compressed or encrypted as it is) goes unopened; the
    metadata keeps key, properties, event time, ordering key and sequence id, and gains
    `replicated_from` and the source position the remote deduplicates by; its schema version
    becomes the remote's version of that schema (`schema_versions`, local to remote), or
    SchemaNeededError says which schema the remote must be given first."""
    try:
        parsed = parse_entry(entry)
    except WireError:
        return None
    metadata = parsed.metadata
    if metadata.HasField("replicated_from"):
        if markers is not None and metadata.HasField("marker_type") and metadata.replicated_from == remote:
            markers(position, metadata, bytes(parsed.payload))
        return None
    if metadata.HasField("marker_type") and metadata.marker_type not in _REPLICATED_MARKERS:
        return None
    if metadata.replicate_to and remote not in metadata.replicate_to:
        return None
    if metadata.schema_version:
        if metadata.schema_version not in schema_versions:
            raise SchemaNeededError(metadata.schema_version)
        metadata.schema_version = schema_versions[metadata.schema_version]
    metadata.replicated_from = local
    metadata.properties.add(key=REPL_SOURCE_POSITION, value=f"{position.ledger_id}:{position.entry_id}")
    batched = metadata.HasField("num_messages_in_batch")
    send = cc.send(
        producer_id, metadata.sequence_id, build_entry(metadata, parsed.payload),
        num_messages=metadata.num_messages_in_batch if batched else None,
        highest_sequence_id=metadata.highest_sequence_id if metadata.HasField("highest_sequence_id") else None,
        is_chunk=metadata.HasField("chunk_id"),
    )
    return Outgoing(send, metadata.sequence_id, metadata.num_messages_in_batch if batched else 1,
                    metadata.publish_time)
