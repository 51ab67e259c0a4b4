import struct

import pytest

from magnetar.wire import entry as e
from magnetar.wire.errors import ChecksumError, WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

# The SEND payload of spec/official-client-trace.md §1: "hi" from producer stub-1-0.
CAPTURED = bytes.fromhex("0e0151c1dace00000013" "0a08737475622d312d301000" "18f9c589fc9f34" "6869")


def metadata(**kw):
    return pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, **kw)


def test_captured_entry_parses_and_verifies():
    parsed = e.parse_entry(CAPTURED)
    assert parsed.metadata.producer_name == "stub-1-0"
    assert parsed.checksum == 0x51C1DACE
    assert bytes(parsed.payload) == b"hi"
    e.verify_checksum(CAPTURED)


def test_build_entry_reproduces_captured_bytes():
    md = e.parse_message_metadata(CAPTURED)
    assert e.build_entry(md, b"hi") == CAPTURED


def test_broker_entry_metadata_prefix_round_trip():
    bem = pb.BrokerEntryMetadata(broker_timestamp=1700000000000, index=41)
    stamped = e.add_broker_entry_metadata(CAPTURED, bem)
    assert e.peek_broker_entry_metadata(stamped) == bem
    assert bytes(e.strip_broker_entry_metadata(stamped)) == CAPTURED
    assert e.peek_broker_entry_metadata(CAPTURED) is None
    e.verify_checksum(stamped)  # the CRC never covers the broker's prefix
    assert e.parse_entry(stamped).broker_entry_metadata == bem


def test_peek_does_not_read_past_prefix():
    bem = pb.BrokerEntryMetadata(broker_timestamp=5, index=0)
    garbage_behind = e.add_broker_entry_metadata(b"\xff" * 64, bem)
    assert e.peek_broker_entry_metadata(garbage_behind) == bem


def test_bad_checksum():
    corrupted = CAPTURED[:-1] + b"X"
    with pytest.raises(ChecksumError, match="mismatch"):
        e.verify_checksum(corrupted)


def test_entry_without_checksum():
    plain = e.build_entry(metadata(), b"x", checksum=False)
    assert not e.has_checksum(plain)
    e.verify_checksum(plain)
    assert e.parse_entry(plain).checksum is None


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"\x0e\x01\x00",
        b"\x0e\x02\x00\x00\x00\x09\x08",
        struct.pack(">I", 1000) + b"x",
        e.build_entry(metadata(), b"")[:-3],
    ],
)
def test_truncated_entries(bad):
    with pytest.raises(WireError):
        e.parse_entry(bad)


def test_garbage_metadata():
    with pytest.raises(WireError, match="garbage MessageMetadata"):
        e.parse_message_metadata(struct.pack(">I", 3) + b"\xff\xff\xff")


def test_validate_layout_accepts_good_and_rejects_bad():
    assert e.validate_layout(CAPTURED) == 6
    with pytest.raises(WireError):
        e.validate_layout(CAPTURED[:8])
