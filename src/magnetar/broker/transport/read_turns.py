"""One read of a client's socket handled over several turns of the event loop.

A socket read can hold up to 256 KiB: some 1,600 small SENDs, 20 ms of work, during which
no other client's receipt, dispatch or read gets a turn, and the next read is bigger for
it. So a connection handles at most WORK_PER_TURN units of a read in one callback and the
rest in the following turns, with reading paused meanwhile (frames keep their order, and
the socket's buffer and TCP hold the client back instead of the broker's memory). A frame
is a unit, except an ACK, which is one per message id: the official client groups a
consumer's acks for 100 ms, and at 10,000 msg/s one ACK names a thousand messages (7 ms of
work). Such an ACK is cut into ACKs of at most WORK_PER_TURN ids, handled in order like
any frame, unless it asks for an answer or belongs to a transaction (then it stays whole:
its one answer covers all its ids). Mixed into ServerCnx, which supplies `_handle_frames`.

A topic over its publish rate (broker.topics.publish_rate) throttles the connections that
publish to it the same way: reading pauses, and what was read but not handled waits, until
the topic's bucket has refilled. As in Pulsar, the whole connection waits, its other
producers and consumers too; other connections do not.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from magnetar.broker.topics.publish_rate import hold_for
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    Frames = list[tuple[pb.BaseCommand, bytes | None]]

WORK_PER_TURN = 128
"""About 2 ms of SENDs (or 1 ms of acknowledged ids) on this broker's hot path: the longest
one connection holds the loop."""
_ACK = pb.BaseCommand.ACK


class TurnBoundedReads:
    transport: asyncio.Transport | None
    _backlog: Frames | None
    _held_by_broker: bool
    """Reading paused by someone else (the partial-frame budget, a stopping broker): the
    end of a backlog must not resume it."""
    _throttle: asyncio.TimerHandle | None
    """While a publish rate holds the connection: the call that lets it go."""
    _last_seen: float
    """When the client was last heard from (the keep-alive's clock); a throttle's end counts:
    the PONG it held back is read only after it."""

    def _handle_frames(self, frames: Frames) -> None:
        raise NotImplementedError

    def _handle_read(self, frames: Frames) -> None:
        """Handle what one read brought, the first FRAMES_PER_TURN frames now."""
        if self._backlog is not None:  # read while a backlog waits (resumed by the budget): after it
            self._backlog += frames
            return
        cut = _turn_end(frames)
        if cut < len(frames):
            self._backlog = frames[cut:]
            frames = frames[:cut]
            if self.transport is not None:
                self.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._handle_backlog)
        self._handle_frames(frames)

    def _handle_backlog(self) -> None:
        if self._throttle is not None:
            return  # the end of the throttle handles it
        backlog, self._backlog = self._backlog, None
        if backlog is None or self.transport is None or self.transport.is_closing():
            return  # dropped (closed, or the broker stopping): the client resends what has no receipt
        self._handle_read(backlog)
        self._resume_if_free()

    def _resume_if_free(self) -> None:
        if (self._backlog is None and not self._held_by_broker and self._throttle is None
                and self.transport is not None):
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
        self._resume_if_free()

    def throttle(self, seconds: float) -> None:
        """Read nothing more for `seconds` (a publish rate's wait); a longer wait while one
        runs extends it."""
        if self._throttle is None and self.transport is not None:
            self.transport.pause_reading()
        self._throttle = hold_for(self._throttle, seconds, self._end_throttle)

    def _end_throttle(self) -> None:
        self._throttle = None
        self._last_seen = time.monotonic()
        if self._backlog is not None:
            self._handle_backlog()
        else:
            self._resume_if_free()

    def cancel_throttle(self) -> None:
        if self._throttle is not None:
            self._throttle.cancel()
            self._throttle = None


def _turn_end(frames: Frames) -> int:
    """How many of `frames` this turn handles; a big ACK among them is cut in place."""
    work = 0
    for i, (command, _) in enumerate(frames):
        if command.type == _ACK and len(command.ack.message_id) > 1:
            ids = len(command.ack.message_id)
            if ids > WORK_PER_TURN and _divisible(command.ack):
                frames[i : i + 1] = _split_ack(command)
                ids = WORK_PER_TURN
            work += ids
        else:
            work += 1
        if work >= WORK_PER_TURN:
            return i + 1
    return len(frames)


def _divisible(ack: pb.CommandAck) -> bool:
    return not (ack.HasField("request_id") or ack.txnid_most_bits or ack.txnid_least_bits)


def _split_ack(command: pb.BaseCommand) -> list[tuple[pb.BaseCommand, None]]:
    """Slices of WORK_PER_TURN ids, each an ACK like `command` otherwise. The command
    is copied without its ids once, not whole per slice: copying a thousand ids eight
    times to keep a hundred each cost more than handling them."""
    ids = list(command.ack.message_id)
    del command.ack.message_id[:]
    parts = []
    for start in range(0, len(ids), WORK_PER_TURN):
        part = pb.BaseCommand()
        part.CopyFrom(command)
        part.ack.message_id.extend(ids[start : start + WORK_PER_TURN])
        parts.append((part, None))
    return parts
