"""Kafka's framing: every request and response is a big-endian int32 size and that many bytes.

Sans-IO: the connection feeds what it read, and takes whole frames back. The size is
checked before any byte of the frame is buffered, so one bad or hostile size costs
nothing (the broker bounds it by `maxMessageSize` plus room for the request's fields).
"""

from __future__ import annotations

import struct

_SIZE = struct.Struct(">i")


class FrameTooLarge(ValueError):
    """A size prefix beyond the limit (or negative): the stream cannot be resynchronised."""


class FrameDecoder:
    """Splits a byte stream into frames, each without its size prefix."""

    def __init__(self, max_frame_size: int) -> None:
        self._max = max_frame_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The frames completed by `data`, in order (FrameTooLarge on a bad size)."""
        buffer = self._buffer
        buffer += data
        frames = []
        pos = 0
        while len(buffer) - pos >= 4:
            (size,) = _SIZE.unpack_from(buffer, pos)
            if size < 0 or size > self._max:
                raise FrameTooLarge(f"a frame of {size} bytes; the limit is {self._max}")
            end = pos + 4 + size
            if end > len(buffer):
                break
            frames.append(bytes(buffer[pos + 4 : end]))
            pos = end
        del buffer[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buffer)
