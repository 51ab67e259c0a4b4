from hypothesis import example, given
from hypothesis import strategies as st

from magnetar.wire.commands import MessageHeaderEncoder, ReceiptEncoder, message_header, message_id_data
from magnetar.wire.frames import FrameDecoder, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb


def test_receipts_carry_each_send_and_position_in_order():
    """One command is refilled for every receipt: no field may leak from one receipt into the
    next, and a duplicate's -1:-1 travels as uint64, as Pulsar's broker sends it."""
    sends = [(7, 7, b"entry", 1, -1), (8, 12, b"entry", 5, 5), (13, 13)]
    positions = [(3, 0), (3, 1), (-1, -1)]
    frames = FrameDecoder().feed(ReceiptEncoder(42).encode(sends, positions))
    receipts = [frame.command.send_receipt for frame in frames]
    assert [frame.command.type for frame in frames] == [pb.BaseCommand.SEND_RECEIPT] * 3
    assert [(r.producer_id, r.sequence_id, r.highest_sequence_id) for r in receipts] == [
        (42, 7, 7), (42, 8, 12), (42, 13, 13)]
    assert [(r.message_id.ledgerId, r.message_id.entryId) for r in receipts] == [
        (3, 0), (3, 1), (2**64 - 1, 2**64 - 1)]


def test_a_message_header_and_its_entry_written_apart_make_the_joined_frame():
    """A large entry is written after its header as it is: the bytes on the wire must be
    those of the one-buffer frame, whatever the redelivery count and ack set."""
    entry = memoryview(b"\x0e\x01" + bytes(range(256)) * 300)
    for redelivery_count, ack_set in ((0, []), (2, []), (3, [0b1011, 7])):
        command = pb.CommandMessage(consumer_id=5, message_id=message_id_data(9, 11, 2),
                                    redelivery_count=redelivery_count or None, ack_set=ack_set)
        joined = encode_payload_command(pb.BaseCommand(type=pb.BaseCommand.MESSAGE, message=command), entry)
        header = message_header(5, 9, 11, 2, len(entry), redelivery_count, ack_set)
        assert header + entry == joined
        (frame,) = FrameDecoder().feed(header + entry)
        assert frame.command.message.message_id.entryId == 11
        assert frame.payload == entry


_INT64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
_HEADER_ARGS = st.tuples(
    st.integers(min_value=0, max_value=(1 << 64) - 1),  # consumer_id
    _INT64, _INT64,  # ledger_id, entry_id
    st.sampled_from([-1, 0, 7]) | st.integers(min_value=-1, max_value=(1 << 31) - 1),  # partition
    st.integers(min_value=0, max_value=5 << 20),  # entry_size
    st.sampled_from([0, 0, 0, 1]) | st.integers(min_value=0, max_value=(1 << 32) - 1),  # redelivery_count
    st.sampled_from([(), ()]) | st.lists(_INT64, max_size=3).map(tuple),  # ack_set
)


@given(st.lists(_HEADER_ARGS, min_size=1, max_size=12))
@example([(1, 3, 4, 2, 100, 0, ()), (2, 3, 5, -1, 100, 0, ()), (1, 3, 6, 2, 100, 1, (5,)), (1, 3, 7, 2, 9, 0, ())])
def test_the_refilled_message_header_is_byte_for_byte_the_fresh_one(calls: list[tuple]) -> None:
    """One encoder serves a connection's consumers in turn: whatever came before (another
    consumer, a partition or none, a redelivered entry with an ack set), each header must be
    the bytes a fresh protobuf command gives, so nothing of one leaks into the next."""
    encoder = MessageHeaderEncoder()
    for args in calls:
        assert encoder.encode(*args) == message_header(*args)
