import itertools
import random
import struct

import pytest
from seeds import fresh_seed

from magnetar.wire.errors import FrameTooLargeError, WireError
from magnetar.wire.frames import FrameDecoder, encode_command, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

# Frames captured from the official client (spec/official-client-trace.md §1).
PING = bytes.fromhex("00000009000000050812920100")
FLOW_1000 = bytes.fromhex("0000000d00000009080b5a05080010e807")
ACK_7_0 = bytes.fromhex("000000120000000e080a520a080010001a0408071000")


def cmd(type_name: str, field: str, **kwargs):
    base = pb.BaseCommand(type=pb.BaseCommand.Type.Value(type_name))
    getattr(base, field).SetInParent()
    for k, v in kwargs.items():
        setattr(getattr(base, field), k, v)
    return base


def test_encodes_captured_bytes():
    assert encode_command(cmd("PING", "ping")) == PING
    assert encode_command(cmd("FLOW", "flow", consumer_id=0, messagePermits=1000)) == FLOW_1000


def test_decodes_captured_ack():
    (frame,) = FrameDecoder().feed(ACK_7_0)
    assert frame.command.type == pb.BaseCommand.ACK
    assert frame.command.ack.message_id[0].ledgerId == 7
    assert frame.payload is None


def test_many_frames_in_one_chunk_and_one_frame_in_many():
    stream = PING + FLOW_1000 + ACK_7_0
    assert [f.command.type for f in FrameDecoder().feed(stream)] == [18, 11, 10]
    decoder = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += decoder.feed(stream[i : i + 1])
    assert [f.command.type for f in got] == [18, 11, 10]
    assert decoder.buffered == 0


def test_payload_command_round_trip():
    send = cmd("SEND", "send", producer_id=3, sequence_id=9)
    frame = encode_payload_command(send, b"entry-bytes")
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.command.send.sequence_id == 9
    assert decoded.payload == b"entry-bytes"


@pytest.mark.parametrize("chunk", [1000, 65_536, 300_001])
def test_payloads_gathered_over_many_reads_are_bytes_of_their_own(chunk):
    """Large frames split across reads, with the next frame's start in the same read: each
    payload comes out whole and as bytes, not a view of the gathering buffer (which the
    next read reuses, and which a stored entry must not keep alive)."""
    send = cmd("SEND", "send", producer_id=3, sequence_id=9)
    entries = [bytes([i]) * size for i, size in enumerate([200_000, 7, 150_001, 0, 90_000])]
    stream = b"".join(encode_payload_command(send, e) if e else encode_command(cmd("PING", "ping")) for e in entries)
    decoder = FrameDecoder()
    got = []
    for i in range(0, len(stream), chunk):
        got += decoder.feed(stream[i : i + chunk])
    assert [f.payload for f in got] == [e or None for e in entries]
    assert all(type(f.payload) is bytes for f in got if f.payload is not None)
    assert decoder.buffered == 0


def test_oversized_frame_refused_before_buffering():
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError, match="exceeds the maximum"):
        decoder.feed(struct.pack(">I", 4 * 1024**3 - 1))


def test_command_size_larger_than_frame():
    with pytest.raises(WireError, match="command size"):
        FrameDecoder().feed(struct.pack(">II", 8, 100) + b"\0" * 4)


def test_garbage_command():
    with pytest.raises(WireError):
        FrameDecoder().feed(struct.pack(">II", 8, 4) + b"\xff\xff\xff\xff")


@pytest.mark.parametrize("good", [b"", PING, PING + FLOW_1000], ids=["alone", "after-one", "after-two"])
def test_garbage_after_good_frames_in_one_chunk_is_a_wire_error(good):
    """A frame that fails to parse after complete frames of the same chunk used to leave a
    memoryview export behind, so trimming the buffer raised BufferError instead."""
    decoder = FrameDecoder()
    with pytest.raises(WireError):
        decoder.feed(good + struct.pack(">II", 9, 5) + b"\xff" * 5)


def test_command_without_type():
    with pytest.raises(WireError, match="without a type"):
        FrameDecoder().feed(struct.pack(">II", 4, 0))


def test_missing_required_field_is_refused_on_encode():
    with pytest.raises(ValueError, match="required"):
        encode_command(pb.BaseCommand(type=pb.BaseCommand.SUCCESS, success=pb.CommandSuccess()))


def _raw_frame(command: pb.BaseCommand) -> bytes:
    """A frame around a command serialised without the encoder's required-field check."""
    body = command.SerializePartialToString()
    return struct.pack(">II", len(body) + 4, len(body)) + body


_T = pb.BaseCommand


@pytest.mark.parametrize(
    ("kind", "field", "body", "missing"),
    [
        (_T.SEND, "send", pb.CommandSend(producer_id=1), "sequence_id"),
        (_T.SEND, "send", pb.CommandSend(sequence_id=1), "producer_id"),
        (_T.SEND, "send", pb.CommandSend(producer_id=1, sequence_id=1, message_id=pb.MessageIdData(ledgerId=3)),
         "entryId"),
        (_T.SEND, "send", None, "body"),
        (_T.SEND_RECEIPT, "send_receipt", pb.CommandSendReceipt(producer_id=1), "sequence_id"),
        (_T.SEND_RECEIPT, "send_receipt", pb.CommandSendReceipt(
            producer_id=1, sequence_id=1, message_id=pb.MessageIdData(entryId=3)), "ledgerId"),
        (_T.SEND_RECEIPT, "send_receipt", None, "body"),
        (_T.MESSAGE, "message", pb.CommandMessage(message_id=pb.MessageIdData(ledgerId=1, entryId=2)),
         "consumer_id"),
        (_T.MESSAGE, "message", pb.CommandMessage(consumer_id=1), "message_id"),
        (_T.MESSAGE, "message", None, "body"),
    ],
    ids=["send-no-sequence-id", "send-no-producer-id", "send-message-id-without-entry", "send-no-body",
         "receipt-no-sequence-id", "receipt-message-id-without-ledger", "receipt-no-body",
         "message-no-consumer-id", "message-no-message-id", "message-no-body"],
)
def test_a_per_message_command_lacking_a_required_field_is_refused(kind, field, body, missing):
    """SEND, SEND_RECEIPT and MESSAGE take a fast path through the required-field check: it
    must still see every field of the body, a nested message id's included."""
    command = pb.BaseCommand(type=kind)
    if body is not None:
        getattr(command, field).CopyFrom(body)
    with pytest.raises(WireError, match=missing):
        FrameDecoder().feed(_raw_frame(command))


@pytest.mark.parametrize(
    ("kind", "field", "body"),
    [
        (_T.SEND, "send", pb.CommandSend(producer_id=1, sequence_id=2)),
        (_T.SEND_RECEIPT, "send_receipt", pb.CommandSendReceipt(
            producer_id=1, sequence_id=2, message_id=pb.MessageIdData(ledgerId=3, entryId=4))),
        (_T.MESSAGE, "message", pb.CommandMessage(consumer_id=1, message_id=pb.MessageIdData(ledgerId=3, entryId=4))),
    ],
    ids=["send", "receipt", "message"],
)
def test_a_whole_per_message_command_is_read(kind, field, body):
    command = pb.BaseCommand(type=kind)
    getattr(command, field).CopyFrom(body)
    (frame,) = FrameDecoder().feed(_raw_frame(command))
    assert frame.command == command


@pytest.mark.parametrize("seed", [5, fresh_seed()])
def test_frames_fed_from_one_reused_buffer_do_not_refer_to_it(seed):
    """A reader may reuse the buffer it feeds from (magnetar.client's connection does): the
    frames returned, and a frame left unfinished, are copies, whatever the chunks' sizes."""
    rng = random.Random(seed)
    sizes = (0, 1, 90, 3000, 70_000, 200_000)
    payloads = [rng.randbytes(rng.choice(sizes)) for _ in range(40)]
    sent = [pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=i))
            for i in range(len(payloads))]
    frames = [encode_payload_command(cmd, p) for cmd, p in zip(sent, payloads, strict=True)]
    stream = b"".join(frames)
    ends = set(itertools.accumulate(map(len, frames)))
    decoder = FrameDecoder()
    buffer = bytearray(64 * 1024)
    got = []
    offset = 0
    while offset < len(stream):
        # cut anywhere, or at a frame's end (the next read then starts a frame)
        end = offset + rng.choice((1, 7, 100, 5000, len(buffer)))
        end = min(end, *(e for e in ends if e > offset)) if rng.random() < 0.5 else end
        chunk = stream[offset:end]
        buffer[: len(chunk)] = chunk
        got += decoder.feed(memoryview(buffer)[: len(chunk)])
        buffer[: len(chunk)] = b"\x5a" * len(chunk)
        offset += len(chunk)
    assert [f.command.send.sequence_id for f in got] == list(range(len(payloads))), seed
    assert [f.payload or b"" for f in got] == payloads, seed
