"""Fault injection for tests: a switch file that makes the data dir's disk look full.

Off unless the environment variable `MAGNETAR_FAULT_ENOSPC_FILE` names a path when the
storage package is imported (a test sets it for the `magnetar standalone` it starts).
While a file exists at that path, ledger writes write about half their bytes and then
fail with ENOSPC, as a disk filling mid-write does, and metadata transactions fail as
SQLite does on a full disk. Removing the file is "space came back".

Zero cost when off: the write function is wrapped only when the switch is configured,
and the metadata store checks one module constant per transaction.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

ENV_VAR = "MAGNETAR_FAULT_ENOSPC_FILE"
_SWITCH: Path | None = Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else None
ACTIVE = _SWITCH is not None
"""Read once: the switch's path cannot change while the process runs, only the file."""

WriteRecords = Callable[[int, list[bytes], int], None]


def disk_full() -> bool:
    return _SWITCH is not None and _SWITCH.exists()


def no_space() -> OSError:
    return OSError(errno.ENOSPC, f"No space left on device (injected: {_SWITCH} exists)")


def guard_writes(write: WriteRecords) -> WriteRecords:
    """`write`, failing like a full disk while the switch file exists: the first half of
    the bytes land (a torn tail for the ledger to cut off), then ENOSPC."""

    def guarded(fd: int, buffers: list[bytes], offset: int) -> None:
        if not disk_full():
            write(fd, buffers, offset)
            return
        data = b"".join(buffers)
        os.pwrite(fd, data[: len(data) // 2], offset)
        raise no_space()

    return guarded
