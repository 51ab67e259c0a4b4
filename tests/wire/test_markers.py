"""Replicated subscriptions' marker entries, laid out as Pulsar's PulsarMarkers.proto and
Markers.java lay them out, and read back without trusting the bytes."""

from __future__ import annotations

import pytest

from magnetar.wire import markers
from magnetar.wire.entry import parse_entry
from magnetar.wire.errors import WireError


def test_the_payloads_use_pulsars_field_numbers() -> None:
    # field 1 snapshot_id, field 2 source_cluster, both length-delimited
    assert markers.Request(snapshot_id="s", source_cluster="c").SerializeToString() == b"\n\x01s\x12\x01c"
    update = markers.parse_marker(markers.UPDATE, parse_entry(markers.update_entry("sub", {"west": (3, 4)})).payload)
    # field 2 clusters: cluster (1) and message_id (2: ledger_id 1, entry_id 2)
    assert update.SerializeToString() == b"\n\x03sub\x12\x0c\n\x04west\x12\x04\x08\x03\x10\x04"


def test_entries_carry_the_marker_metadata_and_who_they_are_for() -> None:
    request = parse_entry(markers.request_entry("s", "east")).metadata
    response = parse_entry(markers.response_entry("s", "east", "west", 1, 2)).metadata
    snapshot = parse_entry(markers.snapshot_entry("s", "east", (5, 6), {"west": (1, 2)})).metadata
    assert (request.marker_type, response.marker_type, snapshot.marker_type) == (10, 11, 12)
    assert request.producer_name == markers.MARKER_PRODUCER and request.sequence_id == 0
    assert list(request.replicate_to) == []  # to every cluster
    assert list(response.replicate_to) == ["east"]  # back to the asker only
    assert list(snapshot.replicate_to) == ["east"]  # stays where it was made


@pytest.mark.parametrize(("marker_type", "payload"), [
    (markers.UPDATE, b"\xff\xff\xff"),  # not protobuf
    (markers.UPDATE, b""),  # subscription_name is required
    (markers.SNAPSHOT_RESPONSE, b"\x12\x00"),  # snapshot_id missing
    (21, b""),  # a transaction's marker is not one of these
])
def test_hostile_payloads_are_wire_errors(marker_type: int, payload: bytes) -> None:
    with pytest.raises(WireError):
        markers.parse_marker(marker_type, payload)
