"""Room kept aside so that freeing space still works on a full disk.

Deleting a topic or trimming ledgers must first write to the metadata store (the ledgers
leave its list before their files go, for crash safety), and on a disk with no byte left
that write fails: the one operation that would make room could not run. The data dir
therefore holds a small preallocated file; a space-freeing operation that hits a full
disk gives it back, retries once, and takes it again afterwards (best effort).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from magnetar.storage.errors import StorageFullError

log = logging.getLogger(__name__)
RESERVE_BYTES = 4 * 1024 * 1024
Result = TypeVar("Result")


class SpaceReserve:
    def __init__(self, path: Path, size: int = RESERVE_BYTES) -> None:
        self.path = path
        self.size = size

    def ensure(self) -> None:
        """Take the reserve if it is not held and the disk has room for it."""
        try:
            if self.path.exists() and self.path.stat().st_size == self.size:
                return
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, self.size)
            finally:
                os.close(fd)
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            log.debug("space reserve not taken: %s", exc)

    def release(self) -> bool:
        if not self.path.exists():
            return False
        self.path.unlink()
        log.warning("disk full: released the %d bytes reserved in %s to make room", self.size, self.path)
        return True

    def freeing_space(self, operation: Callable[[], Result]) -> Result:
        """Run an operation that frees space, with the reserve's room if the disk has none."""
        try:
            result = operation()
        except StorageFullError:
            if not self.release():
                raise
            result = operation()
        self.ensure()
        return result
