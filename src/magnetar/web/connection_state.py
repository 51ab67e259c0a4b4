"""Where one HTTP connection is and what may follow, in one place (the habit of h11's
`_state.py`): the connection (server.py) reports what happened and asks here what to do,
instead of keeping flags of its own. Sans-IO: the timers, the transport and the task that
answers stay with the connection, which carries out what is decided here.

A connection's phase only moves forward (an event naming an earlier phase changes nothing):

    OPEN --UPGRADE | REFUSED | SHUTDOWN--> LAST --CLOSE--> CLOSING --LOST--> CLOSED
    OPEN --CLOSE (an answer that closes: HTTP/1.0, `Connection: close`, a body cut short)--> CLOSING
    any --LOST--> CLOSED;  a connection over maxHttpServerConnections: TURNED_AWAY --> CLOSED

- OPEN: requests are read, parsed and answered in order.
- LAST: no request after those queued is read (an Upgrade request, answered in HTTP/1.1 as
  if it asked nothing; one that could not be read, whose refusal is answered after the
  queued ones; the server shutting down). What the client sends meanwhile is dropped.
- CLOSING: the last answer is written and the sending side shut; the receiving side stays
  open until the client stops sending, LINGER at most (what it sends is dropped), so a
  client still sending a body the server did not read gets its answer rather than a reset.
- CLOSED: the transport is gone, or the connection was turned away when accepted.

Besides its phase, a connection is paused for reading for any of a few reasons at once
(`Pause`; reading resumes when the last one goes), and runs at most one of the deadlines
its phase allows (`DEADLINES`).
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.web.messages import HttpError


class Phase(enum.IntEnum):
    OPEN = 0
    LAST = 1
    CLOSING = 2
    CLOSED = 3


class Event(enum.Enum):
    UPGRADE = "an Upgrade request was read"
    REFUSED = "a request could not be read (malformed, its head too large or too slow)"
    SHUTDOWN = "the server closes"
    CLOSE = "the last answer was written"
    TURNED_AWAY = "accepted over the connection limit"
    LOST = "the transport is gone"


#: The phase each event leads to, from any earlier phase.
TRANSITIONS: dict[Event, Phase] = {
    Event.UPGRADE: Phase.LAST,
    Event.REFUSED: Phase.LAST,
    Event.SHUTDOWN: Phase.LAST,
    Event.CLOSE: Phase.CLOSING,
    Event.TURNED_AWAY: Phase.CLOSED,
    Event.LOST: Phase.CLOSED,
}


class Pause(enum.Enum):
    PIPELINE = "more than MAX_PIPELINED requests wait for their answers"
    BODY = "a body was read ahead of its handler as far as it may be"
    REFUSED = "a request that could not be read waits for those before it to be answered"


class Deadline(enum.Enum):
    HEAD = "a request's line and headers within the request time budget"
    KEEP_ALIVE = "an idle connection's next request"
    LINGER = "the client's last bytes after the answers"


#: The deadlines a phase runs: the request head's budget while requests are read (and while
#: a head begun before the server's shutdown is still arriving), keep-alive only between
#: requests, the linger once closing.
DEADLINES: dict[Phase, frozenset[Deadline]] = {
    Phase.OPEN: frozenset({Deadline.HEAD, Deadline.KEEP_ALIVE}),
    Phase.LAST: frozenset({Deadline.HEAD}),
    Phase.CLOSING: frozenset({Deadline.LINGER}),
    Phase.CLOSED: frozenset(),
}


class ConnectionState:
    __slots__ = ("_paused", "phase", "refusal")

    def __init__(self) -> None:
        self.phase = Phase.OPEN
        self.refusal: HttpError | None = None
        """The answer to a request that could not be read, written after those queued before it."""
        self._paused: set[Pause] = set()

    def on(self, event: Event, refusal: HttpError | None = None) -> Phase:
        """Moves on for `event` (`refusal`: what answers a REFUSED request); the phase now."""
        if event is Event.REFUSED:
            self.refusal = refusal
        self.phase = max(self.phase, TRANSITIONS[event])
        return self.phase

    @property
    def reads_requests(self) -> bool:
        return self.phase is Phase.OPEN

    def closes_with(self, more_queued: bool) -> bool:
        """Whether an answer is the connection's last (it then says `Connection: close`)."""
        return self.phase is not Phase.OPEN and not more_queued and self.refusal is None

    def runs(self, deadline: Deadline) -> bool:
        return deadline in DEADLINES[self.phase]

    def pause(self, reason: Pause) -> bool:
        """Records `reason`; True when reading must stop now (it was not paused)."""
        stop = not self._paused
        self._paused.add(reason)
        return stop

    def resume(self, reason: Pause) -> bool:
        """Drops `reason`; True when reading may go on now (it was the last one)."""
        if reason not in self._paused:
            return False
        self._paused.discard(reason)
        return not self._paused

    def resume_all(self) -> bool:
        """Drops every reason; True when reading was paused."""
        paused = bool(self._paused)
        self._paused.clear()
        return paused
