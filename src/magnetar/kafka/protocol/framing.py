"""Kafka's framing: every request and response is a big-endian int32 size and that many bytes.

Sans-IO: the connection feeds what it read, and takes whole frames back. The size is
checked before any byte of the frame is buffered, so one bad or hostile size costs
nothing (the broker bounds it by `maxMessageSize` plus room for the request's fields).
"""

from __future__ import annotations

import struct
from collections import deque

_SIZE = struct.Struct(">i")


class FrameTooLarge(ValueError):
    """A size prefix beyond the limit (or negative): the stream cannot be resynchronised."""


class FrameDecoder:
    """Splits a byte stream into frames, each without its size prefix.

    Reads are kept as they came until the frame they belong to is complete, then joined
    once: a 1 MB produce request arriving over many reads is copied once, not grown into
    a buffer read by read and sliced out of it. A frame that fills a read exactly is the
    read itself."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        """The largest frame taken (a SASL listener raises it once the client authenticates)."""
        self._chunks: deque[bytes] = deque()
        self._skip = 0  # bytes of the first chunk already taken
        self._buffered = 0
        self._size: int | None = None  # of the frame whose prefix has been read

    def feed(self, data: bytes) -> list[bytes]:
        """The frames completed by `data`, in order (FrameTooLarge on a bad size)."""
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
        frames = []
        while True:
            if self._size is None:
                if self._buffered < 4:
                    return frames
                (size,) = _SIZE.unpack(self._take(4))
                if size < 0 or size > self.max_frame_size:
                    raise FrameTooLarge(f"a frame of {size} bytes; the limit is {self.max_frame_size}")
                self._size = size
            if self._buffered < self._size:
                return frames
            frames.append(self._take(self._size))
            self._size = None

    def _take(self, count: int) -> bytes:
        """The next `count` buffered bytes, copied at most once."""
        if not count:
            return b""
        self._buffered -= count
        chunks = self._chunks
        first, skip = chunks[0], self._skip
        if len(first) - skip > count:
            self._skip = skip + count
            return first[skip:skip + count]
        if len(first) - skip == count:
            chunks.popleft()
            self._skip = 0
            return first if not skip else first[skip:]
        pieces = [memoryview(first)[skip:]]
        chunks.popleft()
        needed = count - len(pieces[0])
        while needed:
            chunk = chunks[0]
            if len(chunk) > needed:
                pieces.append(memoryview(chunk)[:needed])
                self._skip = needed
                break
            pieces.append(memoryview(chunk))
            chunks.popleft()
            needed -= len(chunk)
        else:
            self._skip = 0
        return b"".join(pieces)

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete (its size prefix included)."""
        return self._buffered + (4 if self._size is not None else 0)
