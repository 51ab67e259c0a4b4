"""Managed ledgers: a topic partition's ordered ledgers, group-committed appends (storage/appends.py),
and cursors."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, overload

from sortedcontainers import SortedDict

from magnetar.storage import layout
from magnetar.storage.appends import GroupCommitAppends
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.entry_reader import EntryReader
from magnetar.storage.errors import (
    ReadOnlyError,
    StorageClosedError,
    StorageFullError,
)
from magnetar.storage.ledger import Allocator, RecoveryReport
from magnetar.storage.ledger_files import fsync_dir, remove_files
from magnetar.storage.ledger_recovery import last_confirmed, load_ledger_infos, recover_ledgers, refresh_ledgers
from magnetar.storage.ledger_slot import LedgerInfo, PendingAppend
from magnetar.storage.ledger_trimmer import RetentionPolicy, TrimResult, ledgers_to_trim, slowest_reader_ledger_id
from magnetar.storage.position import Position
from magnetar.storage.rollover import LedgerRollover

if TYPE_CHECKING:
    from magnetar.storage.ledger_services import LedgerServices

log = logging.getLogger(__name__)

CURSOR_FLUSH_INTERVAL_SECONDS = 0.1
"""Acks are frequent; cursors are written at most this often (and on flush/close)."""


class ManagedLedger(GroupCommitAppends):
    """One topic partition: appends are ordered at once and made durable in groups.

    Threads: append/read/cursor calls come from the broker's event-loop thread (or any
    thread); the factory's sync thread writes, fsyncs and then calls the append callbacks.
    `_lock` guards the in-memory ledger table, `_commit_lock` makes commits sequential.
    The table is shared with its helpers, each one concept: `EntryReader` (reads, position
    arithmetic), `LedgerRollover` (current and writing ledgers) and `ledger_recovery`.
    """

    def __init__(self, name: str, directory: Path, factory: LedgerServices) -> None:
        self.name = name
        self._dir = directory
        self._factory = factory
        self._config = factory.config
        self._max_entries = self._config.max_entries_per_ledger
        self._max_bytes = self._config.max_size_per_ledger_bytes
        self._store = factory.metadata_store
        self._read_only = factory.read_only
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self._properties_lock = threading.Lock()
        self._slots: SortedDict = SortedDict()  # ledger_id -> LedgerSlot
        self._pending: list[PendingAppend] = []
        self._pending_bytes = 0
        self._last_confirmed: Position | None = None
        self._failure: BaseException | None = None
        self._space_failures = 0
        """Consecutive writes the disk had no room for; 0 while writing works."""
        self._space_retry_at = 0.0
        """While writes fail for space, appends before this (monotonic) time fail without
        touching the disk: clients retry at once, and a full disk must not become a busy loop."""
        self._closed = False
        self._accepting = not self._read_only
        """False once closed or failed: one check on the append fast path."""
        self._cursors: dict[str, ManagedCursor] = {}
        self._non_durable_ids = itertools.count()
        self._properties: dict[str, str] = json.loads(self._store.get(layout.properties_key(name)) or b"{}")
        self.recovery_reports: list[RecoveryReport] = []
        """What opening had to repair in ledgers a previous writer left open."""
        self.retention = RetentionPolicy(self._config.retention_time_seconds, self._config.retention_size_bytes)
        """Set by the broker from the topic's policies; read by every trim."""
        self.trimmed = TrimResult()
        """Totals of every trim since this object was opened."""
        self._rollover = LedgerRollover(name, directory, self._slots, self._lock, self._store, factory)
        self._reader = EntryReader(
            name, directory, self._slots, self._lock, factory.entry_cache, factory.file_pool, lambda: self._closed
        )
        if self._read_only:
            self.refresh()
            self._load_cursors()
        else:
            self._open_for_writing()

    # --- opening (ledger_recovery) -----------------------------------------------------------

    def _open_for_writing(self) -> None:
        slots, self.recovery_reports = recover_ledgers(self.name, self._dir, self._store, self._factory.file_pool)
        self._slots.update((slot.ledger_id, slot) for slot in slots)
        self._last_confirmed = last_confirmed(self._slots)
        self._rollover.start()
        self._load_cursors()

    def _load_cursors(self) -> None:
        prefix = layout.cursors_prefix(self.name)
        for key in self._store.list(prefix):
            raw = self._store.get(key)
            if raw is not None:
                name = layout.cursor_name_from_key(self.name, key)
                cursor = self._make_cursor(name, Position(-1, -1), durable=not self._read_only)
                cursor.restore(raw)
                self._cursors[name] = cursor

    def refresh(self) -> None:
        """Read-only: pick up the ledgers and entries the writing process made durable since.

        A no-op for the writer, whose view is always current, so readers can call it blindly.
        """
        if not self._read_only:
            return
        infos = load_ledger_infos(self._store, self.name)
        with self._lock:
            refresh_ledgers(self._slots, infos, self._dir, self._factory.file_pool)
            self._last_confirmed = last_confirmed(self._slots)

    # --- appending: GroupCommitAppends (storage/appends.py) -------------------------------------
    # --- trimming ----------------------------------------------------------------------------

    def trim(self) -> TrimResult:
        """Delete the ledgers every durable cursor has consumed and `retention` does not keep.

        Runs on the factory's trimmer thread (trim_in_background) or in a caller's thread;
        commits of this managed ledger wait for the table-of-contents step, never for the
        unlinks. An idle ledger past its maximum age is closed first, so that a topic whose
        producers stopped still gives its consumed data back.
        """
        if self._read_only or self._closed:
            return TrimResult()
        started = time.perf_counter()
        with self._commit_lock:
            self._roll_idle_ledger()
            doomed = self._doomed_ledgers()
            if not doomed:
                return TrimResult()
            self._factory.space_reserve.freeing_space(lambda: self._unlist(doomed))  # step 1
            with self._lock:
                ledgers = [self._slots.pop(info.ledger_id).ledger for info in doomed]
        for ledger in ledgers:
            if ledger is not None:
                ledger.close()
        for info in doomed:  # step 2: files; a crash before this leaves orphans, removed at open
            remove_files(self._dir, info.ledger_id)
        fsync_dir(self._dir)
        result = TrimResult(len(doomed), sum(info.size for info in doomed), time.perf_counter() - started)
        self.trimmed = TrimResult(self.trimmed.ledgers + result.ledgers, self.trimmed.bytes + result.bytes,
                                  self.trimmed.seconds + result.seconds)
        log.info("managed ledger %s: trimmed %d ledgers (%d bytes) in %.1f ms", self.name, result.ledgers,
                 result.bytes, result.seconds * 1000)
        return result

    def _unlist(self, doomed: list[LedgerInfo]) -> None:
        with self._store.transaction() as txn:
            for info in doomed:
                txn.delete(layout.ledger_key(self.name, info.ledger_id))

    def _doomed_ledgers(self) -> list[LedgerInfo]:
        """Commit lock held: the ledgers trim() deletes now."""
        if self.retention.infinite:
            return []
        with self._lock:
            current, writing = self._rollover.current, self._rollover.writing
            assert current is not None
            closed = [slot.info() for slot in self._slots.values()
                      if slot.listed and slot.closed_at is not None and slot is not writing
                      and slot is not current]
            total = sum(slot.durable_bytes for slot in self._slots.values())
            entries = {slot.ledger_id: slot.durable for slot in self._slots.values()}
            mark_deletes = [cursor.mark_delete_position for cursor in self._cursors.values()]
        slowest = slowest_reader_ledger_id(mark_deletes, entries, current.ledger_id)
        return ledgers_to_trim(closed, total, self.retention, slowest, time.time())

    def _roll_idle_ledger(self) -> None:
        """Commit lock held: close the ledger being written if it is past its maximum age and
        nothing is queued for it; the next append starts a new one."""
        with self._lock:
            slot = self._rollover.current
            if (slot is None or slot is not self._rollover.writing or self._pending or not slot.durable
                    or self._failure is not None or time.time() < slot.roll_at):
                return
            try:
                self._rollover.roll_over()
            except StorageFullError:
                return
        self._rollover.close_writing_ledger()

    def on_mark_delete_moved(self, before: Position, after: Position) -> None:
        """A durable cursor's mark-delete position moved: if it crossed into another ledger,
        or reached the last entry of a closed one, a ledger may now be trimmable. Called on
        every ack, so it only compares; the trim itself runs debounced on the trimmer thread."""
        if after.ledger_id != before.ledger_id:
            self._factory.trim_in_background(self)
            return
        slot = self._slots.get(after.ledger_id)
        if slot is not None and slot.sealed and after.entry_id + 1 >= slot.durable:
            self._factory.trim_in_background(self)

    # --- reading (EntryReader) ---------------------------------------------------------------

    @property
    def last_confirmed_position(self) -> Position | None:
        """The last durable entry; None if this managed ledger never had one."""
        return self._last_confirmed

    @property
    def closed(self) -> bool:
        """Closed (the topic unloaded or deleted): reads raise StorageClosedError."""
        return self._closed

    @property
    def first_position(self) -> Position | None:
        return self._reader.first_position()

    def number_of_entries(self) -> int:
        with self._lock:
            return sum(slot.durable for slot in self._slots.values())

    def total_size_bytes(self) -> int:
        """Bytes of the durable records in the data files, record headers included."""
        with self._lock:
            return sum(slot.durable_bytes for slot in self._slots.values())

    def estimated_bytes_from(self, position: Position) -> int:
        """Bytes of the entries from `position` on, estimated from ledger sizes."""
        return self._reader.estimated_bytes_from(position)

    @property
    def ledgers(self) -> list[LedgerInfo]:
        with self._lock:
            return [slot.info() for slot in self._slots.values() if slot.listed]

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError(f"managed ledger {self.name} is closed")

    def has_entry(self, position: Position) -> bool:
        """Whether `position` is a durable entry of this managed ledger (not of another one)."""
        return self._reader.has_entry(position)

    def read_entry(self, position: Position) -> bytes:
        """The entry at `position`, which must be one of this managed ledger's own."""
        self._check_open()
        return self._reader.read_entry(position)

    @overload
    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None, into: None = None
    ) -> list[tuple[Position, bytes]]: ...

    @overload
    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None, into: Allocator
    ) -> list[tuple[Position, bytes | memoryview]]: ...

    def read_entries(
        self, start: Position, max_entries: int, max_bytes: int | None = None, into: Allocator | None = None
    ) -> list[tuple[Position, bytes]] | list[tuple[Position, bytes | memoryview]]:
        """Durable entries from `start` (inclusive, skipping to the next ledger if need be).

        Stops at `max_entries`, or before exceeding `max_bytes` of entry data (but always
        returns at least one entry if there is one). With `into`, entries read from files are
        views of buffers it gives (see Ledger.read_range); cached ones are bytes still.
        """
        self._check_open()
        return self._reader.read_entries(start, max_entries, max_bytes, into)

    def next_position(self, position: Position) -> Position:
        """The position after `position`: the next entry, or the next ledger's first one.

        Past the end it is where the next append would go if no rollover intervenes.
        """
        return self._reader.next_position(position)

    def previous_position(self, position: Position) -> Position:
        """The position before `position`; (ledger, -1) before the very first entry."""
        return self._reader.previous_position(position)

    def position_at_or_after(self, position: Position) -> Position:
        """`position` itself if an entry may live there, else the next position that may."""
        return self._reader.position_at_or_after(position)

    def entries_between(self, start_inclusive: Position, end_inclusive: Position) -> int:
        """Number of durable entries in [start, end], counted across ledgers."""
        return self._reader.entries_between(start_inclusive, end_inclusive)

    # --- properties --------------------------------------------------------------------------

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def get_property(self, key: str) -> str | None:
        return self._properties.get(key)

    def set_property(self, key: str, value: str) -> None:
        """Persisted at once (a metadata commit): meant for rare updates, not per message."""
        self._update_properties(lambda props: props.__setitem__(key, value))

    def remove_property(self, key: str) -> None:
        self._update_properties(lambda props: props.pop(key, None))

    def _update_properties(self, change: Callable[[dict[str, str]], object]) -> None:
        # Not under `_lock`: the sync thread takes `_lock` inside a metadata transaction (at a
        # rollover), so writing the store while holding `_lock` here deadlocked against it.
        with self._properties_lock:
            self._check_writable()
            updated = dict(self._properties)
            change(updated)
            self._store.put(layout.properties_key(self.name), json.dumps(updated).encode())
            self._properties = updated

    # --- cursors -----------------------------------------------------------------------------

    @property
    def cursors(self) -> dict[str, ManagedCursor]:
        with self._lock:
            return dict(self._cursors)

    def open_cursor(self, name: str, initial_position: Literal["latest", "earliest"] = "latest", *,
                    wait: bool = True) -> ManagedCursor:
        """The durable cursor `name`, created at `initial_position` if it does not exist.

        "latest" starts after the last durable entry, "earliest" before the first entry.
        A new cursor is persisted before this returns: a subscription survives a restart
        from the moment it exists. Without `wait` it is written on the factory's metadata
        thread (an event loop must not wait out the commit's fsync) and `when_created`
        tells when it is durable; a cursor that could not be written is forgotten.
        """
        with self._lock:
            self._check_open()
            cursor = self._cursors.get(name)
            if cursor is not None:
                return cursor
            if self._read_only:
                raise ReadOnlyError(f"cannot create cursor {name!r} on read-only {self.name}")
            if initial_position == "latest" and self._last_confirmed is not None:
                mark_delete = self._last_confirmed
            else:
                mark_delete = Position(self._slots.keys()[0], -1)
            cursor = self._cursors[name] = self._make_cursor(name, mark_delete, durable=True)
        if not wait:
            self._factory.store_new_cursor(layout.cursor_key(self.name, name), cursor, self._not_stored)
            return cursor
        try:
            cursor.flush()
        except StorageFullError:
            self._not_stored(cursor)
            raise
        return cursor

    def _not_stored(self, cursor: ManagedCursor) -> None:
        """A subscription exists once persisted: this one does not."""
        with self._lock:
            if self._cursors.get(cursor.name) is cursor:
                del self._cursors[cursor.name]
        cursor.detach()

    def open_non_durable_cursor(self, start: Position) -> ManagedCursor:
        """A cursor never persisted, whose first unacknowledged position is `start`."""
        self._check_open()
        name = f"non-durable-{next(self._non_durable_ids)}"
        return self._make_cursor(name, self.previous_position(start), durable=False)

    def _make_cursor(self, name: str, mark_delete: Position, *, durable: bool) -> ManagedCursor:
        if not durable:
            return ManagedCursor(name, self, mark_delete)
        key = layout.cursor_key(self.name, name)
        return ManagedCursor(
            name,
            self,
            mark_delete,
            on_change=functools.partial(self._factory.mark_cursor_dirty, key),
            persist=functools.partial(self._factory.persist_cursor, key),
            on_mark_delete=self.on_mark_delete_moved,
        )

    def delete_cursor(self, name: str) -> None:
        with self._lock:
            cursor = self._cursors.pop(name, None)
        if cursor is not None:
            self._factory.forget_cursor(layout.cursor_key(self.name, name), cursor)

    # --- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Make every accepted append durable, close the current ledger, persist cursors."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._accepting = False
        if not self._read_only:
            self._commit_pending()
            try:
                with self._commit_lock:
                    if self._failure is None:
                        self._rollover.close_writing_ledger()
                for cursor in self._cursors.values():
                    cursor.flush()
            except StorageFullError as exc:
                # Safe to leave: an open ledger is recovered at the next open, and cursors
                # lose at most the acks since their last persisted state (redelivered).
                log.warning("managed ledger %s: closed without its final metadata: %s", self.name, exc)
        with self._lock:
            for slot in self._slots.values():
                if slot.ledger is not None:
                    slot.ledger.close()
                    slot.ledger = None
        self._factory.release(self)
