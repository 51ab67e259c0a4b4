"""One read of a client's socket handled over several turns of the event loop.

A socket read can hold up to 256 KiB: some 1,600 small SENDs, 20 ms of work, during which
no other client's receipt, dispatch or read gets a turn, and the next read is bigger for
it. So a connection handles at most FRAMES_PER_TURN frames of a read in one callback and
the rest in the following turns, with reading paused meanwhile (frames keep their order,
and the socket's buffer and TCP hold the client back instead of the broker's memory).
Mixed into ServerCnx, which supplies `_handle_frames`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.wire.proto import pulsar_api_pb2 as pb

    Frames = list[tuple[pb.BaseCommand, bytes | None]]

FRAMES_PER_TURN = 128
"""About 2 ms of SENDs on this broker's hot path: the longest one connection holds the loop."""


class TurnBoundedReads:
    transport: asyncio.Transport | None
    _backlog: Frames | None
    _held_by_broker: bool
    """Reading paused by someone else (the partial-frame budget, a stopping broker): the
    end of a backlog must not resume it."""

    def _handle_frames(self, frames: Frames) -> None:
        raise NotImplementedError

    def _handle_read(self, frames: Frames) -> None:
        """Handle what one read brought, the first FRAMES_PER_TURN frames now."""
        if self._backlog is not None:  # read while a backlog waits (resumed by the budget): after it
            self._backlog += frames
            return
        if len(frames) > FRAMES_PER_TURN:
            self._backlog = frames[FRAMES_PER_TURN:]
            frames = frames[:FRAMES_PER_TURN]
            if self.transport is not None:
                self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._handle_backlog)
        self._handle_frames(frames)

    def _handle_backlog(self) -> None:
        backlog, self._backlog = self._backlog, None
        if backlog is None or self.transport is None or self.transport.is_closing():
            return  # dropped (closed, or the broker stopping): the client resends what has no receipt
        self._handle_read(backlog)
        if self._backlog is None and not self._held_by_broker and self.transport is not None:
            self.transport.resume_reading()

    def drop_backlog(self) -> None:
        """Frames read but not handled are forgotten, as if never read (closing, stopping)."""
        self._backlog = None

    def pause_reading(self) -> None:
        self._held_by_broker = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        self._held_by_broker = False
        if self.transport is not None and self._backlog is None:
            self.transport.resume_reading()
