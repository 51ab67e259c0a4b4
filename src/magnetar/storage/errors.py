"""Exceptions raised by the storage layer."""

from __future__ import annotations

import errno
from pathlib import Path


class StorageError(Exception):
    """Base class, so callers can catch every storage failure in one clause."""


class DataDirLockedError(StorageError):
    """Two writers on one data dir would interleave appends and corrupt each other's ledgers."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(
            f"data dir {data_dir} is locked by another process (or another factory in this one); "
            "stop it first, or open the dir read_only=True"
        )
        self.data_dir = data_dir


class StorageClosedError(StorageError):
    """The managed ledger or factory was closed; its files may no longer be open."""


class WriteFailedError(StorageClosedError):
    """A managed ledger that failed a write (other than for space) refuses appends for as long
    as it stays open."""


class ReadOnlyError(StorageError):
    """A read-only factory never writes, so that it can run beside a live broker."""


class NoSuchManagedLedgerError(StorageError, LookupError):
    """A read-only factory was asked for a managed ledger that does not exist (it creates none)."""


class NoSuchEntryError(StorageError, LookupError):
    """The position names no durable entry (not yet written, not durable yet, or never existed)."""


class CorruptEntryError(StorageError):
    """An entry read back does not match the checksum written with it."""


class StorageFullError(StorageError):
    """The file system holding the data dir is full (or the user is over quota).

    Raised instead of sqlite's "database or disk is full" and beside ENOSPC/EDQUOT from
    ledger writes, so the broker can answer one clear error (and log one line) rather than
    a traceback. Nothing is left half-done: the write that hit it was undone.
    """


_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_space_error(error: BaseException) -> bool:
    """Whether `error` means "no room left": the one write failure that is safe to retry.

    Any other failed write or fsync leaves a file in an unknown state, so the managed
    ledger stops writing for good; a full disk only refused bytes we can cut off again.
    """
    if isinstance(error, StorageFullError):
        return True
    return isinstance(error, OSError) and error.errno in _SPACE_ERRNOS
