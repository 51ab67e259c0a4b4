"""A bounded pool of open ledger files, shared by every managed ledger of a factory.

A broker that kept every ledger's files open would hold two descriptors per topic ever
written, and at the process limit it could no longer accept connections or create topics.
Ledgers therefore open their files on demand and count them here; when the pool is over its
limit it closes the files of the least recently used ledgers, which reopen them on their next
read or append.

Locking: a member (a ledger) guards its descriptors with its own lock and calls the pool with
that lock held, so the order is always member lock, then pool lock. Eviction runs with the
pool lock held and only *tries* a member's lock: a member busy in another thread (reading,
or pinned by an append) is skipped, never waited for. Waiting could deadlock against a thread
that holds that member's lock while waiting for the pool lock, and closing a descriptor
another thread is using could make it read or write some unrelated file that reused the
number. The limit is therefore soft: it is exceeded by at most the files of members busy at
that moment, a handful per thread.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from typing import Protocol

log = logging.getLogger(__name__)

UNBOUNDED = sys.maxsize
"""A limit for a pool that never evicts: a ledger used on its own, outside a factory."""


class PooledFiles(Protocol):
    """What the pool needs from a member: a way to close its files if nobody uses them."""

    def release_files_if_idle(self) -> bool:
        """Close every open file unless another thread is using them; never block.

        Called with the pool lock held, so it must not call back into the pool. True if the
        files were closed.
        """
        ...


class FilePool:
    """Counts the files members hold open and evicts least recently used members past a limit."""

    def __init__(self, max_open_files: int) -> None:
        if max_open_files < 1:
            raise ValueError(f"max_open_files must be positive, not {max_open_files}")
        self.max_open_files = max_open_files
        self._lock = threading.Lock()
        self._members: OrderedDict[PooledFiles, int] = OrderedDict()
        """Member -> files it holds open, least recently used first."""
        self._open = 0
        self.last_used: PooledFiles | None = None
        """The member most recently moved to the end (read without the lock, it may be
        stale): touching it again, as a run of reads of one ledger does, takes no lock."""

    @property
    def open_files(self) -> int:
        """Files counted open now (members may be opening or closing one at this moment)."""
        return self._open

    def __len__(self) -> int:
        return len(self._members)

    def opened(self, member: PooledFiles, count: int = 1) -> None:
        """`member`, holding its own lock, is about to open `count` files: count them as its,
        make it the most recently used, and close idle members' files to stay within the limit.

        Called before the open so that the process never holds more than the limit because of
        this member; if the open fails the member calls closed().
        """
        with self._lock:
            self._members[member] = self._members.get(member, 0) + count
            self._members.move_to_end(member)
            self.last_used = member
            self._open += count
            if self._open > self.max_open_files:
                self._evict(self.max_open_files, keep=member)

    def touch(self, member: PooledFiles) -> None:
        """`member` used its open files: it becomes the most recently used."""
        if self.last_used is member:
            return
        with self._lock:
            if member in self._members:
                self._members.move_to_end(member)
                self.last_used = member

    def closed(self, member: PooledFiles, count: int = 1) -> None:
        """`member`, holding its own lock, closed `count` of its files itself."""
        with self._lock:
            held = self._members.get(member, 0) - count
            if held > 0:
                self._members[member] = held
            else:
                self._members.pop(member, None)
                if self.last_used is member:
                    self.last_used = None
            self._open -= count

    def evict_idle(self) -> int:
        """Close the files of every idle member: the process ran out of descriptors, and
        giving ours back lets the open that failed (or a connection) succeed. Returns how
        many files were closed."""
        with self._lock:
            return self._evict(0, keep=None)

    def _evict(self, target: int, keep: PooledFiles | None) -> int:
        """Pool lock held: close least recently used members' files until at most `target`
        remain counted, skipping `keep` and busy members."""
        victims = []
        excess = self._open - target
        for member, count in self._members.items():
            if excess <= 0:
                break
            if member is not keep and member.release_files_if_idle():
                victims.append(member)
                excess -= count
        closed = 0
        for member in victims:
            closed += self._members.pop(member)
            if self.last_used is member:
                self.last_used = None
        self._open -= closed
        return closed
