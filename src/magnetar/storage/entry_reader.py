"""A managed ledger's reading side: entry lookup across its ledgers, and position arithmetic.

Pulsar spreads this over ManagedLedgerImpl (getNextValidPosition, getPreviousPosition,
getNumberOfEntries) and OpReadEntry; here it is one object the managed ledger delegates
to, sharing its ledger table and lock, so reads never see a half-updated table.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from sortedcontainers import SortedDict

from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import NoSuchEntryError, StorageClosedError
from magnetar.storage.file_pool import FilePool
from magnetar.storage.ledger import Allocator, Ledger
from magnetar.storage.ledger_slot import LedgerSlot
from magnetar.storage.position import Position


class EntryReader:
    """Reads durable entries, from the shared entry cache first and the ledger files after.

    `slots` (ledger_id -> LedgerSlot) and `lock` are the managed ledger's own: the writer
    and the trimmer change them in place. `is_closed` tells a read that lost its ledger
    to a close (an error) from one that lost it to a trim (skipped, as in Pulsar).
    """

    def __init__(
        self,
        name: str,
        directory: Path,
        slots: SortedDict,
        lock: threading.Lock,
        entry_cache: EntryCache,
        file_pool: FilePool,
        is_closed: Callable[[], bool],
    ) -> None:
        self._name = name
        self._dir = directory
        self._slots = slots
        self._lock = lock
        self._cache = entry_cache
        self._file_pool = file_pool
        self._is_closed = is_closed

    def _readable_ledger(self, slot: LedgerSlot) -> Ledger:
        """Ledgers closed before this process opened them are loaded on first read.

        Loading keeps their index in memory; their files are opened and closed on demand by
        the factory's file pool.
        """
        if slot.ledger is None:
            slot.ledger = Ledger.open_read_only(self._dir, slot.ledger_id, slot.durable, self._file_pool)
        return slot.ledger

    def _lost_to_trim(self, position: Position) -> bool:
        """After a read hit a closed ledger: whether a trim (not a close) took it away."""
        return not self._is_closed() and position.ledger_id not in self._slots

    def has_entry(self, position: Position) -> bool:
        slot = self._slots.get(position.ledger_id)
        return slot is not None and 0 <= position.entry_id < slot.durable

    def read_entry(self, position: Position) -> bytes:
        """The entry cache is shared by every managed ledger of the factory, so ownership is
        checked before the cache is asked: ledger ids are unique, but a position a user
        names may belong to another topic."""
        with self._lock:
            slot = self._slots.get(position.ledger_id)
            if slot is None or not 0 <= position.entry_id < slot.durable:
                raise NoSuchEntryError(f"{self._name}: no durable entry at {position}")
            cached = self._cache.get(position)
            if cached is not None:
                return cached
            ledger = self._readable_ledger(slot)
        try:
            return ledger.read(position.entry_id)
        except StorageClosedError:
            if not self._lost_to_trim(position):
                raise
            raise NoSuchEntryError(f"{self._name}: {position} was trimmed") from None

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None, into: Allocator | None = None
    ) -> list[tuple[Position, bytes | memoryview]]:
        """Recent entries come from the cache; the rest with one pread per run of uncached
        entries (into buffers of `into`'s, see Ledger.read_range). The lock is held only to
        look a ledger up, never across file reads."""
        out: list[tuple[Position, bytes | memoryview]] = []
        budget = max_bytes
        position = self.position_at_or_after(start)
        while len(out) < max_entries:
            with self._lock:
                slot = self._slots.get(position.ledger_id)
                if slot is None or position.entry_id >= slot.durable:
                    break
                ledger = self._readable_ledger(slot)
                available = slot.durable - position.entry_id
            count = min(max_entries - len(out), available)
            if budget is not None:
                count, size = ledger.entries_within(position.entry_id, count, budget)
                if count == 0:
                    if out:
                        break
                    count, size = 1, ledger.entry_size(position.entry_id)
                budget -= size
            try:
                out.extend(self._read_run(ledger, position, count, into))
            except StorageClosedError:
                if not self._lost_to_trim(position):
                    raise
                # Trimmed while we read it (a reader behind every durable cursor): Pulsar's
                # readers lose such entries too; carry on at the oldest entry left.
                position = self.position_at_or_after(position)
                continue
            if count < available:
                break
            position = self.position_at_or_after(Position(position.ledger_id, slot.durable))
        return out

    def _read_run(self, ledger: Ledger, start: Position, count: int,
                  into: Allocator | None) -> list[tuple[Position, bytes | memoryview]]:
        cache = self._cache
        ledger_id = start.ledger_id
        out: list[tuple[Position, bytes | memoryview]] = []
        entry_id, stop = start.entry_id, start.entry_id + count
        while entry_id < stop:
            position = Position(ledger_id, entry_id)
            data = cache.get(position)
            if data is not None:
                out.append((position, data))
                entry_id += 1
                continue
            miss_end = entry_id + 1
            while miss_end < stop and Position(ledger_id, miss_end) not in cache:
                miss_end += 1
            datas = ledger.read_range(entry_id, miss_end - entry_id, into)
            out.extend((Position(ledger_id, i), data) for i, data in zip(range(entry_id, miss_end), datas, strict=True))
            entry_id = miss_end
        return out

    # --- position arithmetic -----------------------------------------------------------------

    def first_position(self) -> Position | None:
        with self._lock:
            for slot in self._slots.values():
                if slot.durable:
                    return Position(slot.ledger_id, 0)
        return None

    def next_position(self, position: Position) -> Position:
        """Counts assigned, not only durable, entries: a cursor may wait on an entry that is
        still being written. Empty sealed ledgers are skipped, the unsealed one is not."""
        ledger_id, entry_id = position
        with self._lock:
            slot = self._slots.get(ledger_id)
            if slot is not None and (entry_id + 1 < slot.assigned or not slot.sealed):
                return Position(ledger_id, entry_id + 1)
            for later in self._slots.irange(minimum=ledger_id, inclusive=(False, True)):
                later_slot = self._slots[later]
                if later_slot.assigned or not later_slot.sealed:
                    return Position(later, 0)
        return Position(ledger_id, entry_id + 1)

    def previous_position(self, position: Position) -> Position:
        ledger_id, entry_id = position
        if entry_id > 0:
            return Position(ledger_id, entry_id - 1)
        with self._lock:
            for earlier in self._slots.irange(maximum=ledger_id, inclusive=(True, False), reverse=True):
                assigned = self._slots[earlier].assigned
                if assigned:
                    return Position(earlier, assigned - 1)
        return Position(ledger_id, -1)

    def position_at_or_after(self, position: Position) -> Position:
        return self.next_position(Position(position.ledger_id, max(position.entry_id, 0) - 1))

    def entries_between(self, start_inclusive: Position, end_inclusive: Position) -> int:
        total = 0
        with self._lock:
            for ledger_id in self._slots.irange(start_inclusive.ledger_id, end_inclusive.ledger_id):
                durable = self._slots[ledger_id].durable
                low = max(start_inclusive.entry_id, 0) if ledger_id == start_inclusive.ledger_id else 0
                high = min(end_inclusive.entry_id, durable - 1) if ledger_id == end_inclusive.ledger_id else durable - 1
                total += max(0, high - low + 1)
        return total

    def estimated_bytes_from(self, position: Position) -> int:
        """Whole ledgers after its own, and a share of its own in proportion to the entries
        left: Pulsar estimates backlog sizes the same way, without reading a single index."""
        total = 0
        with self._lock:
            for ledger_id in self._slots.irange(minimum=position.ledger_id):
                slot = self._slots[ledger_id]
                if ledger_id > position.ledger_id:
                    total += slot.durable_bytes
                elif slot.durable:
                    left = max(0, slot.durable - max(position.entry_id, 0))
                    total += slot.durable_bytes * left // slot.durable
        return total
