"""Accepting connections while the process is out of file descriptors.

When accept() fails for lack of descriptors (or kernel memory), asyncio reports it through
the loop's exception handler as "socket.accept() out of system resource", once per attempt,
with a traceback. CPython's selector loop is meant to stop listening for a second then, but
its accept loop carries on after the error (CPython gh-151615; Python 3.11 has it): one
report and one retry timer per attempt, up to the listen backlog (100), and each of those
timers starts another round, so reports multiply for as long as the shortage lasts; a broker
logged 1.7 million of them in 150 s.

So the broker
- reports such errors at most once per interval, with the number suppressed
  (AcceptErrorReporter, installed by BrokerService.start), and leaves any other error to the
  handler that was there before;
- runs on BrokerEventLoop when uvloop is absent: asyncio's loop with the accept round ended
  at the first such error, so that it backs off for a second as intended.

uvloop needs neither fix: libuv sheds the pending connections (accepts and closes them with a
descriptor it keeps in reserve) and reports nothing.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
"""What accept() fails with for lack of resources; asyncio's selector loop backs off on these."""
REPORT_INTERVAL_SECONDS = 10.0
_ACCEPT_MESSAGE = "socket.accept() out of system resource"

ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]


def is_accept_resource_error(context: dict[str, Any]) -> bool:
    exc = context.get("exception")
    return (
        isinstance(exc, OSError)
        and exc.errno in RESOURCE_ERRNOS
        and str(context.get("message", "")).startswith(_ACCEPT_MESSAGE)
    )


class AcceptErrorReporter:
    """Loop exception handler: accept() failing for lack of resources is logged once per
    interval with a count of the reports suppressed since; anything else goes to the handler
    that was installed before (or the loop's default one)."""

    def __init__(
        self,
        interval: float = REPORT_INTERVAL_SECONDS,
        fallback: ExceptionHandler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._interval = interval
        self._fallback = fallback
        self._clock = clock
        self._next_report_at = -float("inf")
        self.reported = 0
        self.suppressed = 0
        """Reports held back since the last line logged."""

    @classmethod
    def install(cls, loop: asyncio.AbstractEventLoop, interval: float = REPORT_INTERVAL_SECONDS) -> AcceptErrorReporter:
        reporter = cls(interval, loop.get_exception_handler())
        loop.set_exception_handler(reporter)
        return reporter

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not is_accept_resource_error(context):
            if self._fallback is not None:
                self._fallback(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        now = self._clock()
        if now < self._next_report_at:
            self.suppressed += 1
            return
        log.error(
            "cannot accept connections: %s (%d more since the last report, at most one per %.0f s); new connections "
            "wait in the listen backlog until descriptors are free",
            context["exception"], self.suppressed, self._interval,
        )
        self.reported += 1
        self.suppressed = 0
        self._next_report_at = now + self._interval


class _EndRoundOnResourceError:
    """Stands in for a listening socket during one accept round of the selector loop: once
    accept() fails for lack of resources, the rest of the round finds the queue "empty"."""

    __slots__ = ("_failed", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._failed = False

    def accept(self) -> tuple[socket.socket, Any]:
        if self._failed:
            raise BlockingIOError(errno.EAGAIN, "accept round ended after a resource error")
        try:
            return self.sock.accept()
        except OSError as exc:
            if exc.errno in RESOURCE_ERRNOS:
                self._failed = True
            raise

    def fileno(self) -> int:
        return self.sock.fileno()

    def __getattr__(self, name: str) -> Any:  # family, type, ... for asyncio's reports
        return getattr(self.sock, name)


class BrokerEventLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop, with one report and one retry timer per failed accept round
    (see the module docstring); harmless where CPython already stops the round itself."""

    def _accept_connection(self, protocol_factory: Any, sock: Any, *args: Any, **kwargs: Any) -> None:
        # The retry timer hands the stand-in back to this method: unwrap it.
        listening = sock.sock if isinstance(sock, _EndRoundOnResourceError) else sock
        super()._accept_connection(  # type: ignore[misc]
            protocol_factory, _EndRoundOnResourceError(listening), *args, **kwargs
        )
