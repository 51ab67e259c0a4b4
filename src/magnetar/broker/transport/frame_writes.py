"""Writing the frames of one flush to a connection's transport with as few copies as it allows.

asyncio 3.11's selector transport joins what `writelines` gets into one bytes object, and
copies into a bytearray whatever one send does not take (then moves that bytearray's rest
after each later send). For MESSAGE frames of megabytes those copies, and the page faults
of the fresh memory they land in, cost the broker more than the sends themselves. So while
the transport holds nothing, a plain TCP connection's frames are written here with
`os.writev`, straight from the buffers that hold them (a large entry is the bytes storage
read it into, its frame header a separate small piece). Only what the socket does not take
then goes to the transport, which keeps it, waits for the socket and pauses the protocol
past its high-water mark as before; and while the transport holds anything, every frame
goes to it, so that the order of frames is kept. So does everything once the transport is
closing: asyncio may have given the socket up (a reset) and closes it soon.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

Frame = bytes | memoryview

#: Frames at least this big are written one by one (or apart from their header) rather
#: than joined with others into one buffer.
LARGE_FRAME = 64 * 1024
#: Buffers one writev may take (Linux's IOV_MAX).
_IOV_MAX = 1024
_writev = getattr(os, "writev", None)


def socket_fd(transport: asyncio.BaseTransport, tls: bool) -> int:
    """The descriptor frames may be written to directly, or -1: a TLS connection's bytes
    must go through its SSL object, and a transport without a socket (or a platform
    without writev) leaves everything to the transport."""
    sock = transport.get_extra_info("socket")
    if tls or sock is None or _writev is None:
        return -1
    return sock.fileno()


def write_frames(transport: asyncio.WriteTransport, fd: int, frames: Sequence[Frame], tls: bool) -> None:
    """Write one flush's frames in order; `fd` is socket_fd()'s answer for the transport."""
    if tls:  # one TLS record for the lot, not one (and one SSL call) per frame
        transport.write(b"".join(frames))
        return
    if fd >= 0 and not transport.get_write_buffer_size() and not transport.is_closing():
        frames = _write_through(fd, frames)
        if not frames:
            return
    if len(frames) > 1 and len(frames[-1]) < LARGE_FRAME:
        transport.writelines(frames)
    else:  # large frames: writelines would join (copy) them all once more
        for frame in frames:
            transport.write(frame)


def _write_through(fd: int, frames: Sequence[Frame]) -> Sequence[Frame]:
    """Send what the socket takes now; what it did not take, the first frame maybe cut.

    Any error but a full socket is left for the transport to meet: its own send fails the
    same way and closes the connection as it always does.
    """
    done = 0
    while done < len(frames):
        chunk = frames[done : done + _IOV_MAX]
        try:
            sent = _writev(fd, chunk)  # type: ignore[misc]
        except OSError:
            return frames[done:]
        for frame in chunk:
            if sent < len(frame):
                return [memoryview(frame)[sent:], *frames[done + 1 :]]
            sent -= len(frame)
            done += 1
    return ()
