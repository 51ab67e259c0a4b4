"""Pulsar frames: `[u32 totalSize][u32 cmdSize][BaseCommand][payload?]`.

Sans-IO in the style of h11: `FrameDecoder` takes whatever chunks a socket
produced and hands back whole frames; the encoders return bytes to write.
The payload of SEND and MESSAGE frames (the entry: optional broker-entry
metadata, checksum, MessageMetadata, message bytes) is returned untouched so
the broker can store and forward it without re-serialising anything.
"""

from __future__ import annotations

import struct
from operator import attrgetter
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError, EncodeError

from magnetar.wire.errors import FrameTooLargeError, WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

FRAME_SIZES = struct.Struct(">II")
"""A frame's total size and its command's size, the two fields before the command."""
_U32 = struct.Struct(">I")
#: A frame gathered over several reads that is at least this big is sliced out of the
#: gathering buffer through a view (see FrameDecoder._joined).
_GATHERED_VIEW_BYTES = 64 * 1024

#: Pulsar's default maxMessageSize (5 MiB) plus the 10 KiB padding its broker
#: allows for the command and metadata around a maximal message.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024
DEFAULT_MAX_FRAME_SIZE = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING


class Frame(NamedTuple):
    """One decoded frame; `payload` is the entry of a SEND/MESSAGE, else None."""

    command: pb.BaseCommand
    payload: bytes | None


#: Builds a Frame without NamedTuple's Python-level __new__: one is made per frame read.
_new_frame = tuple.__new__


def encode_command(cmd: pb.BaseCommand) -> bytes:
    """Serialise a simple command; a missing required field is a bug, so it raises."""
    return command_frame(_serialize(cmd))


def command_frame(command: bytes) -> bytes:
    """The frame of a simple command already serialised."""
    return FRAME_SIZES.pack(len(command) + 4, len(command)) + command


def encode_payload_command(cmd: pb.BaseCommand, entry: bytes | memoryview) -> bytes:
    """Serialise a payload command followed by the entry bytes as they are."""
    return payload_frame(_serialize(cmd), entry)


def payload_frame(command: bytes, entry: bytes | memoryview) -> bytes:
    """The frame of a payload command already serialised, followed by the entry as it is."""
    return b"".join((FRAME_SIZES.pack(len(command) + 4 + len(entry), len(command)), command, entry))


def encode_payload_header(cmd: pb.BaseCommand, entry_size: int) -> bytes:
    """A payload command's frame up to its entry, which is written after it as it is: a
    large entry is sent from the buffer it was read into rather than copied into one
    with its header."""
    body = _serialize(cmd)
    return FRAME_SIZES.pack(len(body) + 4 + entry_size, len(body)) + body


def _serialize(cmd: pb.BaseCommand) -> bytes:
    try:
        return cmd.SerializeToString()
    except EncodeError as exc:  # the official client drops connections over this
        name = pb.BaseCommand.Type.Name(cmd.type)
        raise ValueError(f"command {name} lacks a required field: {exc}") from exc


def decode_command(body: bytes | memoryview) -> pb.BaseCommand:
    """Parse a BaseCommand, requiring `type` and the sub-message it names."""
    try:
        cmd = _parse_command(body)
    except DecodeError as exc:
        raise WireError(f"garbage BaseCommand ({len(body)} bytes): {exc}") from exc
    body_of = _PER_MESSAGE.get(cmd.type)
    if body_of is not None and body_of(cmd).IsInitialized():
        # One of these per unbatched message: checking its body alone costs a third of
        # checking the whole command (a type read as one of them was sent, the enum's
        # default is CONNECT); a body missing or incomplete takes the full check below.
        return cmd
    if not cmd.HasField("type"):
        raise WireError("BaseCommand without a type")
    # upb does not enforce `required`; the official client would drop such a
    # frame, and a handler reading a missing field would see a silent default.
    field = _BODY_FIELDS.get(cmd.type)
    if field is not None and not cmd.HasField(field):
        raise WireError(f"{pb.BaseCommand.Type.Name(cmd.type)} command without its body")
    if not cmd.IsInitialized():
        missing = ", ".join(cmd.FindInitializationErrors())
        raise WireError(f"{pb.BaseCommand.Type.Name(cmd.type)} command lacks required fields: {missing}")
    return cmd


_parse_command = pb.BaseCommand.FromString
_PER_MESSAGE = {
    pb.BaseCommand.SEND: attrgetter("send"),
    pb.BaseCommand.SEND_RECEIPT: attrgetter("send_receipt"),
    pb.BaseCommand.MESSAGE: attrgetter("message"),
}
"""The commands of the hot paths, each read once per unbatched message, and their bodies."""

#: BaseCommand type -> the name of the body field with the same number.
_BODY_FIELDS = {
    number: field.name for number, field in pb.BaseCommand.DESCRIPTOR.fields_by_number.items() if number != 1
}


def command_body(cmd: pb.BaseCommand) -> Any | None:
    """The command's body: the sub-message whose field number equals its type (None if absent)."""
    field = _BODY_FIELDS.get(cmd.type)
    return getattr(cmd, field) if field is not None and cmd.HasField(field) else None


class FrameDecoder:
    """Incremental frame decoder with a hard size limit.

    The limit is checked against the announced size before a byte of the frame
    body is buffered, so a peer cannot make us allocate what it claims.
    """

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (a peer that stops mid-frame)."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Add bytes from the stream; return every frame they complete, in order.

        One pass over a read that may hold hundreds of frames (a producer's pipelined
        SENDs), so the loop body is kept flat: this runs once per message. Each command and
        payload is one copy of its own bytes, sliced from the read, or from the buffer a
        frame begun in an earlier read was gathered in (a view of it, sliced to bytes).
        Nothing returned or kept refers to `data`: a reader may reuse its buffer (the
        client's connection reads every time into the same one).
        """
        data = self._joined(data)
        if data is None:
            return []
        frames: list[Frame] = []
        offset = 0
        end = len(data)
        max_size = self.max_frame_size
        unpack = _U32.unpack_from
        gathered = isinstance(data, memoryview)
        try:
            while end - offset >= 4:
                (total,) = unpack(data, offset)
                if total > max_size or total < 4:
                    self._refuse_total(total)
                frame_end = offset + 4 + total
                if frame_end > end:
                    break
                (cmd_size,) = unpack(data, offset + 4)
                payload_start = offset + 8 + cmd_size
                if payload_start > frame_end:
                    raise WireError(f"command size {cmd_size} exceeds its frame ({total - 4} bytes left)")
                command = decode_command(data[offset + 8 : payload_start])
                payload = data[payload_start:frame_end] if payload_start < frame_end else None
                if gathered and payload is not None:
                    payload = bytes(payload)
                frames.append(_new_frame(Frame, (command, payload)))
                offset = frame_end
        finally:
            self._buf = bytearray(memoryview(data)[offset:]) if offset < end else bytearray()  # one copy, not two
        return frames

    def _joined(self, data: bytes | bytearray | memoryview) -> bytes | memoryview | None:
        """The read behind what an earlier read left unfinished, as bytes; None while the
        frame begun earlier is still incomplete (a large frame arriving over many reads is
        appended to, not copied whole at every read). When that frame is large, a view of
        the buffer it was gathered in: it is then sliced out once, rather than copied to
        bytes with the whole buffer first (small frames slice faster out of bytes)."""
        buf = self._buf
        if not buf:
            return data if isinstance(data, bytes) else bytes(data)
        buf += data
        if len(buf) < 4:
            return bytes(buf)
        (total,) = _U32.unpack_from(buf, 0)
        if 4 <= total <= self.max_frame_size and 4 + total > len(buf):
            return None
        return memoryview(buf) if total >= _GATHERED_VIEW_BYTES else bytes(buf)

    def _refuse_total(self, total: int) -> None:
        if total > self.max_frame_size:
            raise FrameTooLargeError(f"frame of {total} bytes exceeds the maximum of {self.max_frame_size}")
        raise WireError(f"frame size {total} is too small to hold a command size")
