"""frame_writes against a real asyncio transport over a socket pair: frames written straight
to the socket and those the transport had to keep arrive whole and in order, whatever the
socket took at each write."""

from __future__ import annotations

import asyncio
import socket

import pytest

from magnetar.broker.transport.frame_writes import LARGE_FRAME, socket_fd, write_frames


class _Sink(asyncio.Protocol):
    pass


async def _write_and_read(flushes: list[list[bytes | memoryview]], tls: bool = False) -> bytes:
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)  # partial writes, often
    theirs.setblocking(False)
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_accepted_socket(_Sink, ours)
    fd = socket_fd(transport, tls)
    assert (fd >= 0) == (not tls)
    expected = sum(len(frame) for flush in flushes for frame in flush)
    received = bytearray()

    async def read_all() -> None:
        while len(received) < expected:
            received.extend(await loop.sock_recv(theirs, 1 << 20))

    reader = asyncio.create_task(read_all())
    for flush in flushes:
        write_frames(transport, fd, flush, tls)  # type: ignore[arg-type]
        await asyncio.sleep(0)  # let the reader run between flushes, as a loop iteration would
    await asyncio.wait_for(reader, 30)
    transport.close()
    theirs.close()
    return bytes(received)


def _frames() -> list[list[bytes | memoryview]]:
    big = bytes(range(256)) * (LARGE_FRAME // 256 * 5)
    small = [f"small-{i};".encode() for i in range(3000)]  # more than one writev takes
    return [
        [b"header-1", memoryview(big), b"x"],
        small,
        [b"header-2", big[::-1], b"header-3", memoryview(big)[1000:]],
        [b"tail"],
    ]


@pytest.mark.parametrize("tls", [False, True], ids=["direct", "joined"])
def test_every_byte_arrives_in_order(tls):
    flushes = _frames()
    assert asyncio.run(_write_and_read(flushes, tls)) == b"".join(bytes(f) for flush in flushes for f in flush)
