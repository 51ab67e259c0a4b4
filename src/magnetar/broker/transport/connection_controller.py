"""What connections may take from the broker: how many of them, and how much unparsed input.

Pulsar's keys: `brokerMaxConnections` and `brokerMaxConnectionsPerIp` (0 = no limit, as in
Pulsar), and `maxMessagePublishBufferSizeInMB`, which in Pulsar bounds the bytes of
messages being published before it stops reading from connections. Here it bounds the
bytes of frames received in part, the memory a peer can hold without ever finishing a
frame (a hundred half-sent 5 MiB frames were half a gigabyte): a connection that would
go over it stops being read until the total is back under half, as Pulsar throttles.
Frames that never finish are closed by the keep-alive (see ServerCnx), which frees the
budget for the rest.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Protocol

log = logging.getLogger(__name__)
#: Refusals are logged at most once per this many seconds, with a count.
LOG_INTERVAL_SECONDS = 10.0


class Readable(Protocol):
    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class ConnectionController:
    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self._max = max_connections
        self._max_per_ip = max_per_ip
        self._per_ip: Counter[str] = Counter()
        self._total = 0
        self._refused = 0
        self._logged_at = -LOG_INTERVAL_SECONDS

    def admit(self, ip: str) -> bool:
        """Count a new connection in, or refuse it (the caller closes it)."""
        reason = None
        if self._max and self._total >= self._max:
            reason = f"brokerMaxConnections ({self._max}) reached"
        elif self._max_per_ip and self._per_ip[ip] >= self._max_per_ip:
            reason = f"brokerMaxConnectionsPerIp ({self._max_per_ip}) reached for {ip}"
        if reason is not None:
            self._log_refusal(reason)
            return False
        self._total += 1
        self._per_ip[ip] += 1
        return True

    def release(self, ip: str) -> None:
        self._total -= 1
        self._per_ip[ip] -= 1
        if not self._per_ip[ip]:
            del self._per_ip[ip]

    def _log_refusal(self, reason: str) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_INTERVAL_SECONDS:
            log.warning("refusing connections: %s (%d refused since the last report)", reason, self._refused)
            self._refused, self._logged_at = 0, now


class PartialFrameBudget:
    """Bytes of unfinished frames over all connections, bounded; over it, reading pauses."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._held: dict[Readable, int] = {}
        self._total = 0
        self._paused: set[Readable] = set()

    @property
    def total(self) -> int:
        return self._total

    def update(self, owner: Readable, buffered: int) -> None:
        """`owner` now holds `buffered` bytes of an unfinished frame (0 once it finished)."""
        self._total += buffered - self._held.get(owner, 0)
        if buffered:
            self._held[owner] = buffered
        else:
            self._held.pop(owner, None)
        # One connection alone is never paused: a frame is bounded by maxMessageSize, and
        # pausing the only holder would stop the frame that could bring the total down.
        alone = self._total == buffered
        if buffered and self._total > self._limit and not alone and owner not in self._paused:
            self._paused.add(owner)
            owner.pause_reading()
        elif self._paused and self._total <= self._limit // 2:
            self._resume_all()

    def forget(self, owner: Readable) -> None:
        """The connection is gone: its bytes are freed, and it is no longer paused."""
        self._paused.discard(owner)
        self.update(owner, 0)

    def _resume_all(self) -> None:
        paused, self._paused = self._paused, set()
        for owner in paused:
            owner.resume_reading()
