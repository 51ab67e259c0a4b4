"""Which ledgers of a managed ledger may go: consumed by every durable cursor and out of retention.

The rules are Pulsar's (ManagedLedgerImpl.internalTrimLedgers):

- only ledgers wholly behind the slowest durable cursor's mark-delete position are
  candidates; with no durable cursor every closed ledger is one, so a topic nobody
  subscribes to keeps only what its retention policy keeps;
- candidates are walked oldest first; one goes if it is past the retention time (counted
  from when it was closed) *or* if what would remain without it is still at least the
  retention size; the walk stops at the first one that stays, so the ledgers kept are
  always the newest ones;
- -1 means no limit for either; the defaults (0 and 0) delete what is consumed;
- the ledger being written is never deleted.

The order of a deletion is what makes it crash-safe: the ledgers leave the metadata store's
ledger list in one transaction first, then their files are unlinked. A crash between the
two leaves files nobody lists, which the next open removes (`remove_orphan_files`); it never
leaves a listed ledger without its files.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from magnetar.storage.ledger_files import fsync_dir
from magnetar.storage.ledger_slot import LedgerInfo
from magnetar.storage.position import Position

log = logging.getLogger(__name__)
_LEDGER_FILE = re.compile(r"(\d+)\.(log|idx)")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How much consumed data to keep: Pulsar's RetentionPolicies, in seconds and bytes.

    -1 for either is "no limit"; 0 and 0 (Pulsar's defaults) keep nothing once consumed.
    """

    time_seconds: float = 0
    size_bytes: int = 0

    @property
    def infinite(self) -> bool:
        return self.time_seconds < 0 and self.size_bytes < 0


@dataclass(frozen=True, slots=True)
class TrimResult:
    """What one trim removed, and how long it took (the benchmark reports the cost)."""

    ledgers: int = 0
    bytes: int = 0
    seconds: float = 0.0


def slowest_reader_ledger_id(
    mark_deletes: Iterable[Position], entries_by_ledger: Mapping[int, int], current_ledger_id: int
) -> int:
    """Ledgers with a smaller id than this are consumed by every durable cursor.

    A mark-delete position on the last entry of a closed ledger has consumed that ledger
    too. With no durable cursor at all, everything before the current ledger is consumed.
    """
    slowest = min(mark_deletes, default=None)
    if slowest is None:
        return current_ledger_id
    entries = entries_by_ledger.get(slowest.ledger_id)
    if slowest.ledger_id != current_ledger_id and entries is not None and slowest.entry_id + 1 >= entries:
        return slowest.ledger_id + 1
    return slowest.ledger_id


def ledgers_to_trim(
    closed: Sequence[LedgerInfo], total_size: int, policy: RetentionPolicy, slowest_ledger_id: int, now: float
) -> list[LedgerInfo]:
    """The oldest ledgers of `closed` (oldest first, the ledger being written excluded)
    that are consumed and out of retention; `total_size` counts every ledger, open one too."""
    doomed: list[LedgerInfo] = []
    size_to_delete = 0
    for info in closed:
        if info.ledger_id >= slowest_ledger_id or info.closed_at is None:
            break
        size_to_delete += info.size
        expired = policy.time_seconds >= 0 and now - info.closed_at > policy.time_seconds
        over_size = policy.size_bytes >= 0 and total_size - size_to_delete >= policy.size_bytes
        if not (expired or over_size):
            break
        doomed.append(info)
    return doomed


def remove_orphan_files(directory: Path, listed: Iterable[int]) -> list[int]:
    """Unlink ledger files the ledger list does not name: a trim (or a ledger's creation)
    that a crash cut short. Returns the ledger ids whose files were removed."""
    keep = set(listed)
    removed: set[int] = set()
    for path in directory.iterdir():
        match = _LEDGER_FILE.fullmatch(path.name)
        if match is not None and int(match.group(1)) not in keep:
            path.unlink(missing_ok=True)
            removed.add(int(match.group(1)))
    if removed:
        fsync_dir(directory)
        log.info("%s: removed files of unlisted ledgers %s", directory, sorted(removed))
    return sorted(removed)
