"""Properties of the entry codec: layers round-trip, the CRC catches flips, junk is a WireError."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from magnetar.wire.entry import (
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    add_broker_entry_metadata,
    build_entry,
    parse_entry,
    parse_message_metadata,
    peek_broker_entry_metadata,
    strip_broker_entry_metadata,
    validate_layout,
    validate_publishable,
    verify_checksum,
)
from magnetar.wire.errors import ChecksumError, WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

u64 = st.integers(0, 2**64 - 1)
metadatas = st.builds(
    pb.MessageMetadata,
    producer_name=st.text(max_size=20),
    sequence_id=u64,
    publish_time=u64,
    properties=st.lists(st.builds(pb.KeyValue, key=st.text(max_size=5), value=st.text(max_size=5)), max_size=3),
    partition_key=st.text(max_size=10),
    num_messages_in_batch=st.integers(0, 1000),
    deliver_at_time=st.integers(-(2**63), 2**63 - 1),
)
bems = st.one_of(st.none(), st.builds(pb.BrokerEntryMetadata, broker_timestamp=u64, index=u64))
payloads = st.binary(max_size=2000)


def make_entry(
    metadata: pb.MessageMetadata, payload: bytes, checksum: bool, bem: pb.BrokerEntryMetadata | None
) -> bytes:
    entry = build_entry(metadata, payload, checksum=checksum)
    return add_broker_entry_metadata(entry, bem) if bem is not None else entry


@given(metadatas, payloads, st.booleans(), bems)
def test_layers_round_trip(
    metadata: pb.MessageMetadata, payload: bytes, checksum: bool, bem: pb.BrokerEntryMetadata | None
) -> None:
    entry = make_entry(metadata, payload, checksum, bem)
    parsed = parse_entry(entry)
    assert parsed.metadata == metadata
    assert bytes(parsed.payload) == payload
    assert parsed.broker_entry_metadata == bem
    assert (parsed.checksum is not None) == checksum
    assert parse_message_metadata(entry) == metadata
    assert peek_broker_entry_metadata(entry) == bem
    assert bytes(strip_broker_entry_metadata(entry)) == build_entry(metadata, payload, checksum=checksum)
    verify_checksum(entry)
    validate_layout(entry)


@given(metadatas, payloads, bems, st.data())
def test_any_flipped_bit_under_the_checksum_is_caught(
    metadata: pb.MessageMetadata, payload: bytes, bem: pb.BrokerEntryMetadata | None, data: st.DataObject
) -> None:
    entry = bytearray(make_entry(metadata, payload, True, bem))
    crc_at = len(entry) - len(build_entry(metadata, payload))
    position = data.draw(st.integers(crc_at + 2, len(entry) - 1))  # the CRC itself or what it covers
    entry[position] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(WireError):  # ChecksumError, or the flip broke the layout first
        parse_entry(entry)
        verify_checksum(entry)


@given(metadatas, payloads)
def test_flip_in_payload_is_a_checksum_error(metadata: pb.MessageMetadata, payload: bytes) -> None:
    entry = bytearray(build_entry(metadata, payload + b"!"))
    entry[-1] ^= 0x80
    with pytest.raises(ChecksumError):
        verify_checksum(entry)


@given(metadatas, payloads, st.booleans(), bems, st.data())
def test_truncation_inside_the_headers_is_a_wire_error(
    metadata: pb.MessageMetadata,
    payload: bytes,
    checksum: bool,
    bem: pb.BrokerEntryMetadata | None,
    data: st.DataObject,
) -> None:
    entry = make_entry(metadata, payload, checksum, bem)
    metadata_end = len(entry) - len(payload)
    cut = data.draw(st.integers(0, metadata_end - 1))
    with pytest.raises(WireError):
        parse_entry(entry[:cut])
    with pytest.raises(WireError):
        parse_message_metadata(entry[:cut])


@settings(max_examples=500)
@given(st.data())
def test_publish_validation_finds_what_the_layered_readers_find(data: st.DataObject) -> None:
    """validate_publishable reads a producer's entry, and a stored one behind the broker's
    prefix, its own way, for speed: whole, with a bit flipped or cut short, it must accept
    and refuse what parse_message_metadata and verify_checksum do."""
    metadata = data.draw(metadatas)
    metadata.ClearField("num_messages_in_batch")  # the batch count is a check of its own
    entry = bytearray(make_entry(metadata, data.draw(payloads), data.draw(st.booleans()), data.draw(bems)))
    damage = data.draw(st.sampled_from(["none", "flip", "cut"]))
    if damage == "flip":
        entry[data.draw(st.integers(0, len(entry) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del entry[data.draw(st.integers(0, len(entry) - 1)) :]
    try:
        expected = parse_message_metadata(bytes(entry))
        verify_checksum(bytes(entry))
    except WireError:
        with pytest.raises(WireError):
            validate_publishable(bytes(entry), checksum=True)
        return
    assume(not expected.HasField("num_messages_in_batch"))  # a flip may have made it a batch
    assert validate_publishable(bytes(entry), checksum=True) == expected


@settings(max_examples=500)
@given(st.data())
def test_parse_entry_finds_what_the_layered_readers_find(data: st.DataObject) -> None:
    """parse_entry reads a producer's layout (behind the broker's prefix or not) its own way,
    for speed, as a client does for every entry it receives: whole, with a bit flipped or cut
    short, it must accept and refuse what the layer-by-layer readers do, and give the same layers."""
    payload = data.draw(payloads)
    entry = bytearray(make_entry(data.draw(metadatas), payload, data.draw(st.booleans()), data.draw(bems)))
    damage = data.draw(st.sampled_from(["none", "flip", "cut"]))
    if damage == "flip":
        entry[data.draw(st.integers(0, len(entry) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "cut":
        del entry[data.draw(st.integers(0, len(entry) - 1)) :]
    raw = bytes(entry)
    verify = data.draw(st.booleans())
    try:
        bem = peek_broker_entry_metadata(raw)
        metadata = parse_message_metadata(raw)
        if verify:
            verify_checksum(raw)
    except WireError:
        with pytest.raises(WireError):
            parse_entry(raw, verify=verify)
        return
    parsed = parse_entry(raw, verify=verify)
    assert (parsed.broker_entry_metadata, parsed.metadata) == (bem, metadata)
    assert bytes(parsed.payload) == raw[len(raw) - len(parsed.payload) :]
    assert len(metadata.SerializeToString()) + len(parsed.payload) < len(raw)
    if damage == "none":
        assert bytes(parsed.payload) == payload


@pytest.mark.parametrize("magic", [0x0E00, 0x0E03, 0xFFFF])
def test_an_unknown_magic_is_read_as_a_metadata_size_and_refused(magic: int) -> None:
    entry = build_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0), b"x")
    wrong = struct.pack(">H", magic) + entry[2:]
    with pytest.raises(WireError, match="metadata size"):
        parse_entry(wrong)


def test_magics_in_the_wrong_order_are_refused() -> None:
    """The spec fixes BEM before the checksum; a checksum-first entry hides the BEM magic."""
    good = make_entry(pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0), b"x", True, None)
    swapped = good[:6] + struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, 0) + good[6:]
    assert struct.unpack_from(">H", swapped)[0] == MAGIC_CRC32C
    with pytest.raises(WireError):
        parse_entry(swapped)


@settings(max_examples=500)
@given(st.binary(max_size=300))
def test_garbage_raises_only_wire_error(garbage: bytes) -> None:
    for read in (
        parse_entry,
        parse_message_metadata,
        peek_broker_entry_metadata,
        strip_broker_entry_metadata,
        validate_layout,
        validate_publishable,
        verify_checksum,
    ):
        with contextlib.suppress(WireError):
            read(garbage)
