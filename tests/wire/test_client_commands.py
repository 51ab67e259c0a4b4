"""Client-side wire pieces: the hand-written batch message encoder and the command builders."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from magnetar.wire import client_commands as cc
from magnetar.wire.batch import decode_batch, encode_single_message
from magnetar.wire.frames import FrameDecoder
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

text = st.text(max_size=20)


@given(
    value=st.binary(max_size=300),
    sequence_id=st.none() | st.integers(0, 2**64 - 1),
    properties=st.none() | st.dictionaries(text, text, max_size=4),
    partition_key=st.none() | text,
    ordering_key=st.none() | st.binary(max_size=10),
    event_time=st.none() | st.integers(1, 2**64 - 1),
    null_value=st.booleans(),
    key_b64=st.booleans(),
    null_key=st.booleans(),
)
def test_encode_single_message_equals_protobuf(value, sequence_id, properties, partition_key, ordering_key,
                                               event_time, null_value, key_b64, null_key):
    expected = pb.SingleMessageMetadata(payload_size=len(value))
    for key, val in (properties or {}).items():
        expected.properties.add(key=key, value=val)
    if partition_key is not None:
        expected.partition_key = partition_key
    if event_time:
        expected.event_time = event_time
    if ordering_key is not None:
        expected.ordering_key = ordering_key
    if sequence_id is not None:
        expected.sequence_id = sequence_id
    if null_value:
        expected.null_value = True
    if key_b64:
        expected.partition_key_b64_encoded = True
    if null_key:
        expected.null_partition_key = True
    body = expected.SerializeToString()
    encoded = encode_single_message(value, sequence_id, properties, partition_key, ordering_key, event_time,
                                    null_value, key_b64, null_key)
    assert encoded == struct.pack(">I", len(body)) + body + value
    [decoded] = decode_batch(encoded, 1)
    assert bytes(decoded.value) == value


def _decode(frame: bytes) -> pb.BaseCommand:
    [decoded] = FrameDecoder().feed(frame)
    return decoded.command


def test_connect_announces_broker_entry_metadata():
    cmd = _decode(cc.connect("magnetar-test"))
    assert cmd.connect.feature_flags.supports_broker_entry_metadata
    assert cmd.connect.protocol_version == cc.PROTOCOL_VERSION
    assert cmd.connect.auth_method_name == "none"


def test_subscribe_of_a_reader_and_a_key_shared_consumer():
    reader = _decode(cc.subscribe(1, 2, "t", "reader-x", pb.CommandSubscribe.Exclusive, durable=False,
                                  start_message_id=MessageId(-1, -1))).subscribe
    assert not reader.durable
    assert (reader.start_message_id.ledgerId, reader.start_message_id.entryId) == (2**64 - 1, 2**64 - 1)
    shared = _decode(cc.subscribe(1, 2, "t", "s", pb.CommandSubscribe.Key_Shared, key_shared_mode=pb.STICKY,
                                  sticky_ranges=[(0, 100)])).subscribe
    assert shared.keySharedMeta.keySharedMode == pb.STICKY
    assert [(r.start, r.end) for r in shared.keySharedMeta.hashRanges] == [(0, 100)]


def test_send_sets_num_messages_only_for_batches():
    single = FrameDecoder().feed(cc.send(1, 7, b"entry"))[0]
    assert not single.command.send.HasField("num_messages") and single.payload == b"entry"
    batch = _decode(cc.send(1, 7, b"entry", num_messages=5))
    assert batch.send.num_messages == 5


def test_seek_and_redeliver_carry_ledger_and_entry_only():
    seek = _decode(cc.seek(1, 2, message_id=MessageId(3, 4, 0, 5))).seek
    assert (seek.message_id.ledgerId, seek.message_id.entryId) == (3, 4)
    assert not seek.message_id.HasField("batch_index")
    redeliver = _decode(cc.redeliver(2, [MessageId(3, 4, batch_index=1)])).redeliverUnacknowledgedMessages
    assert [(m.ledgerId, m.entryId, m.HasField("batch_index")) for m in redeliver.message_ids] == [(3, 4, False)]
    assert not _decode(cc.redeliver(2)).redeliverUnacknowledgedMessages.message_ids


def _send_by_protobuf(producer_id: int, sequence_id: int, entry: bytes, num_messages: int | None) -> bytes:
    body = pb.CommandSend(producer_id=producer_id, sequence_id=sequence_id)
    if num_messages is not None:
        body.num_messages = num_messages
    command = pb.BaseCommand(type=pb.BaseCommand.SEND, send=body).SerializeToString()
    return struct.pack(">II", len(command) + 4 + len(entry), len(command)) + command + entry


@given(producer_id=st.integers(0, 2**64 - 1), sequence_id=st.integers(0, 2**64 - 1),
       entry=st.binary(max_size=50), num_messages=st.none() | st.integers(1, 2**31 - 1))
def test_the_hand_written_send_equals_protobuf(producer_id, sequence_id, entry, num_messages):
    """SEND outside a transaction is written field by field (the unbatched hot path)."""
    assert cc.send(producer_id, sequence_id, entry, num_messages=num_messages) == \
        _send_by_protobuf(producer_id, sequence_id, entry, num_messages)


@given(consumer_id=st.integers(0, 2**64 - 1), cumulative=st.booleans(),
       ids=st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
                              st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)), max_size=5))
def test_the_hand_written_ack_equals_protobuf(consumer_id, cumulative, ids):
    """Grouped acknowledgements are written field by field from (ledger, entry, ack set) tuples."""
    by_protobuf = []
    for ledger, entry, ack_set in ids:
        data = MessageId(ledger, entry).to_proto()
        data.ack_set.extend(ack_set)
        by_protobuf.append(data)
    assert cc.ack_ids(consumer_id, ids, cumulative=cumulative) == cc.ack(consumer_id, by_protobuf,
                                                                         cumulative=cumulative)
