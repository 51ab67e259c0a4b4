from magnetar.wire.commands import ReceiptEncoder
from magnetar.wire.frames import FrameDecoder
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
