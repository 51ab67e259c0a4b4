"""Attackers that write and never read, for the tests of back-pressure on every listener."""

from __future__ import annotations

import socket


def flood_until_blocked(sock: socket.socket, chunk: bytes, limit: int) -> tuple[int, bool]:
    """Write `chunk` over and over without reading, until a write waits past the socket's
    timeout (the peer stopped reading) or `limit` bytes went out; (bytes sent, blocked)."""
    sent = 0
    while sent < limit:
        try:
            sock.sendall(chunk)
        except TimeoutError:
            return sent, True
        sent += len(chunk)
    return sent, False
