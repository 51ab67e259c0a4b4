"""Properties of FrameDecoder: chunking never matters, bad input only raises WireError."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_recorder import load_vectors

from magnetar.wire.errors import FrameTooLargeError, WireError
from magnetar.wire.frames import Frame, FrameDecoder, encode_command, encode_payload_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

MAX_FRAME = 64 * 1024
RECORDED = [frame for frames in load_vectors().values() for frame in frames]
u64 = st.integers(0, 2**64 - 1)


def command(kind: int, field: str, **fields: int) -> pb.BaseCommand:
    cmd = pb.BaseCommand(type=kind)
    getattr(cmd, field).SetInParent()
    for name, value in fields.items():
        setattr(getattr(cmd, field), name, value)
    return cmd


simple_frames = st.one_of(
    st.just(encode_command(command(pb.BaseCommand.PING, "ping"))),
    st.builds(lambda r: encode_command(command(pb.BaseCommand.SUCCESS, "success", request_id=r)), u64),
    st.builds(
        lambda c, p: encode_command(command(pb.BaseCommand.FLOW, "flow", consumer_id=c, messagePermits=p)),
        u64,
        st.integers(0, 2**32 - 1),
    ),
)
payload_frames = st.builds(
    lambda p, s, entry: encode_payload_command(
        command(pb.BaseCommand.SEND, "send", producer_id=p, sequence_id=s), entry
    ),
    u64,
    u64,
    st.binary(max_size=2000),
)
streams = st.lists(st.one_of(simple_frames, payload_frames, st.sampled_from(RECORDED)), min_size=1, max_size=20)


def decode_whole(frames: list[bytes]) -> list[Frame]:
    return [FrameDecoder(MAX_FRAME).feed(raw)[0] for raw in frames]


def as_comparable(frames: list[Frame]) -> list[tuple[bytes, bytes | None]]:
    return [(f.command.SerializeToString(), f.payload) for f in frames]


def chunk(stream: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(stream) + 1) for c in cuts})
    return [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]


@settings(max_examples=200)
@given(frames=streams, cuts=st.lists(st.integers(0, 2**20), max_size=30))
def test_any_chunking_yields_the_same_frames(frames: list[bytes], cuts: list[int]) -> None:
    decoder = FrameDecoder(MAX_FRAME)
    got = [frame for piece in chunk(b"".join(frames), cuts) for frame in decoder.feed(piece)]
    assert as_comparable(got) == as_comparable(decode_whole(frames))
    assert decoder.buffered == 0


@given(frames=streams, data=st.data())
def test_truncated_stream_holds_the_partial_frame(frames: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frames)
    cut = data.draw(st.integers(0, len(stream) - 1))
    decoder = FrameDecoder(MAX_FRAME)
    got = decoder.feed(stream[:cut])
    complete = 0
    offset = 0
    for raw in frames:
        if offset + len(raw) > cut:
            break
        offset += len(raw)
        complete += 1
    assert len(got) == complete
    assert decoder.buffered == cut - offset
    assert as_comparable(got + decoder.feed(stream[cut:])) == as_comparable(decode_whole(frames))


@settings(max_examples=500)
@given(garbage=st.binary(max_size=400), cuts=st.lists(st.integers(0, 400), max_size=5))
def test_garbage_raises_only_wire_error(garbage: bytes, cuts: list[int]) -> None:
    decoder = FrameDecoder(1024)
    try:
        for piece in chunk(garbage, cuts):
            decoder.feed(piece)
    except WireError:
        pass


@pytest.mark.parametrize("claimed", [MAX_FRAME + 1, 0xFFFF_FFFF])
def test_oversized_frame_is_refused_from_its_size_field_alone(claimed: int) -> None:
    tracemalloc.start()
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(MAX_FRAME).feed(struct.pack(">I", claimed))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 1024


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    cmd = command(pb.BaseCommand.SEND, "send", producer_id=1, sequence_id=2)
    overhead = len(encode_payload_command(cmd, b""))
    raw = encode_payload_command(cmd, bytes(MAX_FRAME + 4 - overhead))
    assert len(raw) == MAX_FRAME + 4
    [frame] = FrameDecoder(MAX_FRAME).feed(raw)
    assert frame.payload == bytes(MAX_FRAME + 4 - overhead)
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(MAX_FRAME).feed(encode_payload_command(cmd, bytes(MAX_FRAME + 5 - overhead)))


@pytest.mark.parametrize("total", [0, 1, 3])
def test_frame_too_small_for_a_command_size(total: int) -> None:
    with pytest.raises(WireError):
        FrameDecoder(MAX_FRAME).feed(struct.pack(">I", total) + bytes(total))
