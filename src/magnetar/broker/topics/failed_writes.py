"""What the broker does when a topic's ledger fails a write for a reason other than space
(an I/O error, a file grown past the process's size limit).

Such a ledger takes no further append: its file's tail is in an unknown state. Pulsar's
managed ledger answers a failed BookKeeper write by closing that ledger and starting a new
one; here the same comes from closing the topic and loading it again, whose ledger
recovery cuts the unknown tail and starts a new ledger file. If the disk still fails,
the first write fails again and the cycle repeats, so each topic is given a pause before
it may load again (0.5 s doubling to 30 s; forgotten after a minute without a failure).

Why not answer each SEND with PersistenceError: the official client drops its whole
connection on a SEND_ERROR and re-creates everything on it, so the failed topic would take
down the other topics' producers and consumers sharing that connection, over and over.
Closing the topic sends CLOSE_PRODUCER and CLOSE_CONSUMER instead: the connection stays,
the client re-creates the failed topic's producers and consumers alone, after its
back-off, and sends again the messages that had no receipt. While the topic pauses,
loading it is refused with ServiceNotReady, which the client retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)
FIRST_PAUSE_SECONDS = 0.5
MAX_PAUSE_SECONDS = 30.0
FORGET_AFTER_SECONDS = 60.0
"""A topic that has not failed for this long starts again from the first pause."""


@dataclass(slots=True)
class _Failures:
    count: int
    last: float
    until: float


class FailedWrites:
    def __init__(self, unload: Callable[[str], None]) -> None:
        self._unload = unload
        self._failures: dict[str, _Failures] = {}
        self._closing: set[str] = set()

    def write_failed(self, topic: str, reason: BaseException) -> None:
        """`topic`'s ledger failed for good: close it on the next loop turn (not inside the
        write's callback, which runs with the topic's state half updated). Once per failure."""
        if topic in self._closing:
            return
        now = time.monotonic()
        failures = self._failures.get(topic)
        count = 1 if failures is None or now - failures.last > FORGET_AFTER_SECONDS else failures.count + 1
        pause = min(MAX_PAUSE_SECONDS, FIRST_PAUSE_SECONDS * 2 ** (count - 1))
        self._failures[topic] = _Failures(count, now, now + pause)
        self._closing.add(topic)
        log.warning("[%s] a write failed (%s): closing the topic; it loads again, with a new ledger, in %.1f s",
                    topic, reason, pause)
        asyncio.get_running_loop().call_soon(self._close, topic)

    def _close(self, topic: str) -> None:
        self._closing.discard(topic)
        self._unload(topic)

    def refusal(self, topic: str) -> str | None:
        """Why `topic` may not load now (it is pausing after a failed write), or None."""
        failures = self._failures.get(topic)
        if failures is None:
            return None
        left = failures.until - time.monotonic()
        if left <= 0:
            if left < -FORGET_AFTER_SECONDS:
                del self._failures[topic]
            return None
        return f"{topic} is recovering from a failed write: retry in {left:.1f} s"
