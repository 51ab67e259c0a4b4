"""A producer's plain messages are laid out from a template: byte for byte the general path's entry."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.client.outgoing import PendingMessage, PlainMetadata, is_plain, single_metadata
from magnetar.wire.entry import build_entry, parse_entry, verify_checksum
from magnetar.wire.proto import pulsar_api_pb2 as pb


@given(name=st.text(max_size=300), schema_version=st.none() | st.binary(max_size=200),
       sequence_id=st.integers(0, 2**64 - 1), publish_time=st.integers(0, 2**64 - 1), value=st.binary(max_size=300))
def test_the_template_writes_what_protobuf_writes(name, schema_version, sequence_id, publish_time, value):
    message = PendingMessage(value, sequence_id, None)
    assert is_plain(message)
    metadata, payload = single_metadata(message, producer_name=name, publish_time=publish_time,
                                        compression=pb.NONE, schema_version=schema_version)
    entry = PlainMetadata(name, schema_version).entry(sequence_id, publish_time, value)
    assert entry == build_entry(metadata, payload)
    verify_checksum(entry)
    assert parse_entry(entry).metadata == metadata


def test_anything_but_the_value_makes_a_message_not_plain():
    variants = [dict(properties={"k": "v"}), dict(partition_key="k"), dict(ordering_key=b"o"), dict(event_time=5),
                dict(deliver_at=5), dict(null_value=True), dict(replicate_to=["c"]), dict(null_key=True)]
    for fields in variants:
        assert not is_plain(PendingMessage(b"v", 1, None, **fields)), fields
    in_txn = PendingMessage(b"v", 1, None)
    in_txn.txn = (1, 2)
    assert not is_plain(in_txn)
