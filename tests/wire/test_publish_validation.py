"""What the broker checks of a published entry before storing it (validate_publishable),
row by row: a batch's message count must fit its payload, a foreign format's only be
positive, the CRC32C is checked only when asked, and each refusal says what is wrong."""

from __future__ import annotations

import struct

import pytest

from magnetar.wire.entry import add_broker_entry_metadata, build_entry, validate_publishable
from magnetar.wire.errors import ChecksumError, WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

#: The smallest message of a Pulsar batch: a 4-byte size and a 2-byte SingleMessageMetadata.
SMALLEST = 6


def metadata(**fields) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, **fields)


@pytest.mark.parametrize(("count", "payload", "fields", "refusal"), [
    (1, 6, {}, None),
    (10, 60, {}, None),
    (10, 59, {}, "a batch of 10 messages cannot fit in 59 payload bytes"),
    (0, 60, {}, "a batch of 0 messages cannot fit in 60 payload bytes"),
    (-1, 60, {}, "a batch of -1 messages cannot fit in 60 payload bytes"),
    (2**31 - 1, 1, {}, "a batch of 2147483647 messages cannot fit in 1 payload bytes"),
    # compressed: the uncompressed size is what the messages must fit in
    (100, 8, {"compression": pb.LZ4, "uncompressed_size": 600}, None),
    (100, 8, {"compression": pb.LZ4, "uncompressed_size": 599},
     "a batch of 100 messages cannot fit in 599 uncompressed payload bytes"),
    (1, 600, {"compression": pb.ZSTD, "uncompressed_size": 5}, "cannot fit in 5 uncompressed payload bytes"),
    # a foreign payload packs its messages its own way: only the count's sign is checked
    (1000, 10, {"properties": [pb.KeyValue(key="entry.format", value="kafka")]}, None),
    (0, 10, {"properties": [pb.KeyValue(key="entry.format", value="arrow")]}, "a arrow entry of 0 messages"),
    # properties that name no foreign format change nothing
    (1000, 10, {"properties": [pb.KeyValue(key="region", value="eu")]}, "a batch of 1000 messages cannot fit"),
    (1000, 10, {"properties": [pb.KeyValue(key="entry.format", value="pulsar")]}, "cannot fit in 10 payload"),
])
@pytest.mark.parametrize("checksum", [True, False])
def test_a_batch_count_must_fit_its_payload(count, payload, fields, refusal, checksum):
    entry = build_entry(metadata(num_messages_in_batch=count, **fields), bytes(payload), checksum=checksum)
    if refusal is None:
        assert validate_publishable(entry, checksum=True).num_messages_in_batch == count
    else:
        with pytest.raises(WireError) as refused:
            validate_publishable(entry, checksum=True)
        assert refusal in str(refused.value)


def test_the_smallest_batched_message_is_six_bytes():
    from magnetar.wire.batch import encode_batch  # noqa: PLC0415

    assert len(encode_batch([(pb.SingleMessageMetadata(), b"")])) == SMALLEST


@pytest.mark.parametrize("prefixed", [False, True], ids=["as-sent", "with-broker-entry-metadata"])
def test_the_checksum_is_checked_only_when_asked(prefixed):
    entry = build_entry(metadata(), b"payload")
    if prefixed:  # the general path of the reader, not the producer's fast one
        entry = add_broker_entry_metadata(entry, pb.BrokerEntryMetadata(broker_timestamp=1, index=2))
    entry = entry[:-1] + bytes([entry[-1] ^ 0xFF])  # the payload no longer matches its CRC32C
    assert validate_publishable(entry) == metadata()
    assert validate_publishable(entry, checksum=False) == metadata()
    with pytest.raises(ChecksumError):
        validate_publishable(entry, checksum=True)
    plain = build_entry(metadata(), b"payload", checksum=False)  # none stored: nothing to check
    assert validate_publishable(plain, checksum=True) == metadata()


def test_a_metadata_size_past_the_end_is_refused_with_the_sizes():
    body = metadata().SerializeToString()
    entry = struct.pack(">HII", 0x0E01, 0, len(body) + 50) + body
    refusal = f"metadata size {len(body) + 50} exceeds the {len(body)} bytes left in the entry"
    with pytest.raises(WireError, match=refusal):
        validate_publishable(entry)

