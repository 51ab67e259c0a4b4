"""Rebuilding a managed ledger's ledger table from the metadata store.

The writer does it once, at open: ledgers a dead writer left open are closed at their last
intact entry (Pulsar's ManagedLedgerImpl.initialize recovers the last ledger the same way).
A read-only view does it on every refresh, catching up with a live writer it never talks to.
"""

from __future__ import annotations

import time
from pathlib import Path

from sortedcontainers import SortedDict

from magnetar.storage import layout
from magnetar.storage.file_pool import FilePool
from magnetar.storage.ledger import Ledger, RecoveryReport
from magnetar.storage.ledger_files import fsync_dir, remove_files
from magnetar.storage.ledger_slot import LedgerInfo, LedgerSlot
from magnetar.storage.ledger_trimmer import remove_orphan_files
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.position import Position


def load_ledger_infos(store: MetadataStore, name: str) -> list[LedgerInfo]:
    prefix = layout.ledgers_prefix(name)
    infos = []
    for key in store.list(prefix):
        raw = store.get(key)
        if raw is not None:
            infos.append(LedgerInfo.from_json(int(key.removeprefix(prefix)), raw))
    return infos


def recover_ledgers(
    name: str, directory: Path, store: MetadataStore, file_pool: FilePool
) -> tuple[list[LedgerSlot], list[RecoveryReport]]:
    """Writer: every listed ledger as a sealed slot, with what recovery had to repair.

    Files nobody lists (a trim or a creation a crash cut short) are removed first.
    """
    directory.mkdir(parents=True, exist_ok=True)
    fsync_dir(directory.parent)
    infos = load_ledger_infos(store, name)
    remove_orphan_files(directory, (info.ledger_id for info in infos))
    slots: list[LedgerSlot] = []
    reports: list[RecoveryReport] = []
    for info in infos:
        recovered = _recover(name, directory, store, file_pool, info, reports) if info.closed_at is None else info
        if recovered is not None:
            slots.append(
                LedgerSlot(
                    info.ledger_id,
                    recovered.created_at,
                    recovered.closed_at,
                    sealed=True,
                    listed=True,
                    assigned=recovered.entries,
                    assigned_bytes=recovered.size,
                    durable=recovered.entries,
                    durable_bytes=recovered.size,
                )
            )
    return slots, reports


def _recover(
    name: str,
    directory: Path,
    store: MetadataStore,
    file_pool: FilePool,
    info: LedgerInfo,
    reports: list[RecoveryReport],
) -> LedgerInfo | None:
    """Close a ledger its writer left open; forget it if it holds no entry."""
    key = layout.ledger_key(name, info.ledger_id)
    try:
        ledger, report = Ledger.recover(directory, info.ledger_id, file_pool)
    except FileNotFoundError:  # listed, but the writer died before creating the files
        store.delete(key)
        return None
    reports.append(report)
    if ledger.entries == 0:
        ledger.close()
        remove_files(directory, info.ledger_id)
        store.delete(key)
        return None
    ledger.seal()
    ledger.close()
    closed = LedgerInfo(info.ledger_id, ledger.entries, ledger.size, info.created_at, time.time())
    store.put(key, closed.to_json())
    return closed


def refresh_ledgers(slots: SortedDict, infos: list[LedgerInfo], directory: Path, file_pool: FilePool) -> None:
    """Read-only, table lock held: make `slots` match the listed `infos` and their files.

    Ledgers no longer listed were trimmed (or the topic deleted) by the writer.
    """
    listed = {info.ledger_id: info for info in infos}
    for gone in [lid for lid in slots if lid not in listed]:
        slot = slots.pop(gone)
        if slot.ledger is not None:
            slot.ledger.close()
    for info in listed.values():
        _refresh_slot(slots, info, directory, file_pool)


def _refresh_slot(slots: SortedDict, info: LedgerInfo, directory: Path, file_pool: FilePool) -> None:
    slot = slots.get(info.ledger_id)
    if slot is None:
        slot = slots[info.ledger_id] = LedgerSlot(info.ledger_id, info.created_at, listed=True)
    slot.closed_at = info.closed_at
    slot.sealed = info.closed_at is not None
    closed_entries = info.entries if slot.sealed else None
    if slot.ledger is None and slot.sealed:
        # Closed ledgers are opened lazily on first read; their metadata is complete.
        slot.assigned = slot.durable = info.entries
        slot.durable_bytes = info.size
        return
    if slot.ledger is None:
        try:
            slot.ledger = Ledger.open_read_only(directory, info.ledger_id, closed_entries, file_pool)
        except FileNotFoundError:  # listed a moment before its files are created
            return
    else:
        slot.ledger.refresh(closed_entries)
    slot.assigned = slot.durable = slot.ledger.entries
    slot.durable_bytes = slot.ledger.size


def last_confirmed(slots: SortedDict) -> Position | None:
    """The last durable entry of the table, newest ledger first."""
    for slot in reversed(slots.values()):
        if slot.durable:
            return Position(slot.ledger_id, slot.durable - 1)
    return None
