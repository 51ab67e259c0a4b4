"""The marker entries of replicated subscriptions (PIP-33), as Pulsar lays them out.

A marker is an entry whose MessageMetadata has `marker_type`: brokers write it into a topic
and read it back, consumers never see it. Pulsar's metadata for them: producer name
`pulsar.marker`, sequence id 0, the publish time, and `replicate_to` naming the one cluster
a marker is for (a response goes back to the cluster that asked; a snapshot stays in the
cluster that made it). The payload is one message of pulsar_markers.proto.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf.message import DecodeError

from magnetar.wire.entry import build_entry
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.proto import pulsar_markers_pb2 as mk

SNAPSHOT_REQUEST = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_REQUEST
SNAPSHOT_RESPONSE = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT_RESPONSE
SNAPSHOT = mk.REPLICATED_SUBSCRIPTION_SNAPSHOT
UPDATE = mk.REPLICATED_SUBSCRIPTION_UPDATE
REPLICATED_SUBSCRIPTION_MARKERS = frozenset({SNAPSHOT_REQUEST, SNAPSHOT_RESPONSE, SNAPSHOT, UPDATE})
MARKER_PRODUCER = "pulsar.marker"

Request = mk.ReplicatedSubscriptionsSnapshotRequest
Response = mk.ReplicatedSubscriptionsSnapshotResponse
Snapshot = mk.ReplicatedSubscriptionsSnapshot
Update = mk.ReplicatedSubscriptionsUpdate
_PAYLOADS: dict[int, type[Request | Response | Snapshot | Update]] = {
    SNAPSHOT_REQUEST: Request, SNAPSHOT_RESPONSE: Response, SNAPSHOT: Snapshot, UPDATE: Update}
ClusterPositions = Mapping[str, tuple[int, int]]
"""Per cluster, a (ledger id, entry id) of that cluster's copy of the topic."""


def _entry(marker_type: int, payload: bytes, only_to: str | None) -> bytes:
    metadata = pb.MessageMetadata(producer_name=MARKER_PRODUCER, sequence_id=0,
                                  publish_time=int(time.time() * 1000), marker_type=marker_type)
    if only_to is not None:
        metadata.replicate_to.append(only_to)
    return build_entry(metadata, payload)


def _clusters(target: Any, positions: ClusterPositions) -> None:
    """Fill a repeated ClusterMessageId field, clusters in name order (as Pulsar's TreeMap)."""
    for cluster, (ledger_id, entry_id) in sorted(positions.items()):
        target.add(cluster=cluster, message_id=mk.MarkerPosition(ledger_id=ledger_id, entry_id=entry_id))


def request_entry(snapshot_id: str, source_cluster: str) -> bytes:
    """Asks every other cluster for its last position (replicated everywhere)."""
    return _entry(SNAPSHOT_REQUEST, Request(snapshot_id=snapshot_id, source_cluster=source_cluster)
                  .SerializeToString(), None)


def response_entry(snapshot_id: str, reply_to: str, cluster: str, ledger_id: int, entry_id: int) -> bytes:
    """This cluster's last position, for the cluster that asked only."""
    response = Response(snapshot_id=snapshot_id)
    response.cluster.cluster = cluster
    response.cluster.message_id.ledger_id, response.cluster.message_id.entry_id = ledger_id, entry_id
    return _entry(SNAPSHOT_RESPONSE, response.SerializeToString(), reply_to)


def snapshot_entry(snapshot_id: str, local_cluster: str, local: tuple[int, int], remotes: ClusterPositions) -> bytes:
    """A finished snapshot: stays in this cluster's topic."""
    snapshot = Snapshot(snapshot_id=snapshot_id)
    snapshot.local_message_id.ledger_id, snapshot.local_message_id.entry_id = local
    _clusters(snapshot.clusters, remotes)
    return _entry(SNAPSHOT, snapshot.SerializeToString(), local_cluster)


def update_entry(subscription: str, positions: ClusterPositions) -> bytes:
    """Where `subscription` may move to in each cluster (replicated everywhere)."""
    update = Update(subscription_name=subscription)
    _clusters(update.clusters, positions)
    return _entry(UPDATE, update.SerializeToString(), None)


def parse_marker(marker_type: int, payload: bytes) -> Request | Response | Snapshot | Update:
    """The payload of a replicated-subscription marker; WireError for another type or bytes
    that are not its message (a marker crosses clusters: the bytes are not trusted)."""
    cls = _PAYLOADS.get(marker_type)
    if cls is None:
        raise WireError(f"marker type {marker_type} is not a replicated-subscription marker")
    message = cls()
    try:
        message.ParseFromString(payload)
    except DecodeError as exc:
        raise WireError(f"malformed marker of type {marker_type}: {exc}") from exc
    if not message.IsInitialized():
        raise WireError(f"marker of type {marker_type} lacks required fields")
    return message


def positions_of(clusters: Iterable[mk.ClusterMessageId]) -> dict[str, tuple[int, int]]:
    return {c.cluster: (c.message_id.ledger_id, c.message_id.entry_id) for c in clusters}
