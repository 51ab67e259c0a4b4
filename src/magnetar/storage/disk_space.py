"""Whether the data dir's file system takes writes: one record of a full disk for a whole factory.

Every writer that meets ENOSPC, EDQUOT or SQLite's "database or disk is full" reports it here,
and every ledger write that lands says so too, so what sits above storage (the broker's
producers, its health check, its metrics) reads one answer instead of gathering failures
topic by topic. A full disk is also found by `probe`, which asks the file system for room in
a scratch file and gives it back at once: while the disk is full it asks for the room the
largest refused write needed, so space coming back is seen even when nothing writes (the
broker holds its producers meanwhile); when nothing is known to be wrong, the health check
asks for PROBE_BYTES.

The change of state is told to listeners on the thread that saw it (the sync thread, a
metadata writer, a probe's); the counts since the disk filled go with the "room again" news.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from magnetar.storage import faults
from magnetar.storage.errors import is_space_error

PROBE_BYTES = 1 << 20
"""The room a probe asks for at least: a group of entries, or SQLite's journal, fits in it."""


@dataclass(frozen=True, slots=True)
class SpaceChange:
    full: bool
    reason: str
    """Why writes fail (the first refusal's error); empty once there is room again."""
    seconds: float = 0.0
    """How long the disk was full (with the news that it no longer is)."""
    refused: int = 0
    """Writes refused for space meanwhile: ledger appends and metadata transactions."""


SpaceListener = Callable[[SpaceChange], None]


class DiskSpace:
    def __init__(self, probe_path: Path) -> None:
        self._probe_path = probe_path
        self._lock = threading.Lock()
        self._full_since: float | None = None
        self._reason = ""
        self._refused = 0
        self._needed = 0
        self._listeners: list[SpaceListener] = []

    @property
    def full(self) -> bool:
        return self._full_since is not None

    @property
    def reason(self) -> str:
        return self._reason

    def add_listener(self, listener: SpaceListener) -> None:
        self._listeners.append(listener)

    def refused(self, count: int, error: BaseException | None = None, size: int = 0) -> None:
        """`count` writes of `size` bytes in all found no room (`error` None: refused without
        trying, inside a ledger's back-off)."""
        with self._lock:
            self._refused += count
            self._needed = max(self._needed, size)
            if self._full_since is not None or error is None:
                return
            self._full_since = time.monotonic()
            self._reason = str(error)
            change = SpaceChange(True, self._reason)
        self._tell(change)

    def wrote(self) -> None:
        """A ledger write landed: whatever was refused before, there is room now. Called after
        every group, so the usual case is one attribute read."""
        if self._full_since is not None:
            self._clear()

    def probe(self) -> bool:
        """Whether the room the largest refused write needed (at least PROBE_BYTES) is free now.
        A refusal marks the disk full; room marks it writable again."""
        size = max(PROBE_BYTES, self._needed)
        try:
            _reserve_and_release(self._probe_path, size)
        except OSError as exc:
            if not is_space_error(exc):
                raise
            self.refused(0, exc, size)
            return False
        self.wrote()
        return True

    def _clear(self) -> None:
        with self._lock:
            if self._full_since is None:
                return
            change = SpaceChange(False, "", time.monotonic() - self._full_since, self._refused)
            self._full_since, self._reason, self._refused, self._needed = None, "", 0, 0
        self._tell(change)

    def _tell(self, change: SpaceChange) -> None:
        for listener in self._listeners:
            listener(change)


def _reserve_and_release(path: Path, size: int) -> None:
    """Have the file system set `size` bytes aside for a scratch file, then hand them back.
    posix_fallocate reserves without writing them (glibc writes where a file system cannot)."""
    if faults.ACTIVE and faults.disk_full():
        raise faults.no_space()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
    finally:
        try:
            os.ftruncate(fd, 0)
        finally:
            os.close(fd)
