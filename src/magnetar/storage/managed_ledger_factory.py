"""The managed-ledger factory: one data dir's lock, metadata store, caches, threads and managed ledgers."""

from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage import layout
from magnetar.storage.config import ManagedLedgerConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.disk_space import DiskSpace
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import (
    DataDirLockedError,
    NoSuchManagedLedgerError,
    ReadOnlyError,
    StorageClosedError,
    StorageError,
    StorageFullError,
)
from magnetar.storage.file_pool import FilePool
from magnetar.storage.group_commit import SyncThread
from magnetar.storage.ledger_ids import LedgerIdAllocator
from magnetar.storage.managed_ledger import CURSOR_FLUSH_INTERVAL_SECONDS, ManagedLedger
from magnetar.storage.metadata_store import SqliteMetadataStore
from magnetar.storage.space_reserve import SpaceReserve

if TYPE_CHECKING:
    # Annotations only: the Protocol is a type, and start-up imports what it runs (issue 29).
    from magnetar.storage.ledger_services import OpenLedger

log = logging.getLogger(__name__)
TRIM_DEBOUNCE_SECONDS = 0.2
"""Acks move mark-delete positions many times a second; trims of one topic gather this long."""


def _nothing() -> None:
    """No periodic job: the broker's retention check schedules trims, and the sync thread
    leaves cursors to a thread of their own."""


def _trim_quietly(ml: OpenLedger) -> None:
    """A trim the disk had no room for (its metadata transaction) is tried on the next request."""
    try:
        ml.trim()
    except StorageClosedError:
        pass  # closed (unloaded or deleted) between the request and now
    except StorageFullError as exc:  # the full disk is reported once (DiskSpace), not per trim
        log.debug("managed ledger %s: trim deferred: %s", ml.name, exc)


class ManagedLedgerFactory:
    """Owns a data dir: its lock, metadata store, entry cache, sync thread and managed ledgers.

    Its managed ledgers see it as `LedgerServices` (storage/ledger_services.py).

    Layout: `LOCK`, `metadata.db`, `RESERVED-SPACE`, `SPACE-PROBE` (docs/storage.md) and
    `managed-ledgers/<escaped name>/<ledger id>.{log,idx}`.
    A read-only factory takes no lock and writes nothing, so it can run beside a live broker
    (a Spark reader); it sees only entries the broker has made durable.
    """

    def __init__(self, data_dir: Path, config: ManagedLedgerConfig | None = None, *, read_only: bool = False) -> None:
        self.data_dir = Path(data_dir)
        self.config = config or ManagedLedgerConfig()
        self.read_only = read_only
        self._lock = threading.Lock()
        self._open: dict[str, ManagedLedger] = {}
        self._closed = False
        self._lock_fd: int | None = None
        if not read_only:
            (self.data_dir / "managed-ledgers").mkdir(parents=True, exist_ok=True)
            self._lock_fd = self._lock_data_dir()
        self.disk_space = DiskSpace(self.data_dir / "SPACE-PROBE")
        """Whether the data dir's file system takes writes (every writer below reports to it)."""
        self._store = SqliteMetadataStore(self.data_dir / "metadata.db", read_only=read_only,
                                          on_full=lambda exc: self.disk_space.refused(1, exc))
        self.entry_cache = EntryCache(self.config.cache_size_bytes, self.config.cache_max_age_seconds)
        self.file_pool = FilePool(self.config.max_open_files)
        """Bounds the ledger files held open by all managed ledgers of this factory."""
        self._dirty_cursors: dict[ManagedCursor, str] = {}
        self._dirty_lock = threading.Lock()
        self._persist_lock = threading.Lock()
        self._ids: LedgerIdAllocator | None = None
        self._sync: SyncThread | None = None
        self._trimmer: SyncThread | None = None
        self._cursor_flusher: SyncThread | None = None
        self._metadata_writer: SyncThread | None = None
        self._new_cursors: dict[ManagedCursor, tuple[str, Callable[[ManagedCursor], None]]] = {}
        """Cursors whose first record waits for the metadata thread (under _dirty_lock)."""
        self._cursor_persist_failing = False
        self.space_reserve = SpaceReserve(self.data_dir / "RESERVED-SPACE")
        if not read_only:
            self.space_reserve.ensure()
            self._ids = LedgerIdAllocator(self._store)
            self._sync = SyncThread(self.config.group_commit_max_delay_seconds, 3600.0, _nothing, adaptive=True)
            # Their own threads: a trim's unlinks and a cursor flush's metadata commit (an
            # fsync, every CURSOR_FLUSH_INTERVAL_SECONDS while consumers ack) never delay a
            # group commit, whose appends would wait out that fsync too (issue 45).
            self._trimmer = SyncThread(TRIM_DEBOUNCE_SECONDS, 3600.0, _nothing, name="magnetar-storage-trim")
            self._cursor_flusher = SyncThread(
                CURSOR_FLUSH_INTERVAL_SECONDS, CURSOR_FLUSH_INTERVAL_SECONDS, self._flush_dirty_cursors_quietly,
                name="magnetar-storage-cursors",
            )
            # New cursors' first records: written at once, off the event loop, and those
            # queued while a commit runs share the next one (200 subscriptions, a few fsyncs).
            self._metadata_writer = SyncThread(0.0, 3600.0, _nothing, name="magnetar-storage-metadata",
                                               adaptive=True)

    def _lock_data_dir(self) -> int:
        fd = os.open(self.data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLockedError(self.data_dir) from None
        return fd

    @property
    def metadata_store(self) -> SqliteMetadataStore:
        return self._store

    # --- managed ledgers ---------------------------------------------------------------------

    def open(self, name: str) -> ManagedLedger:
        """The managed ledger `name`, created if missing (the same object while it is open)."""
        with self._lock:
            if self._closed:
                raise StorageClosedError(f"factory on {self.data_dir} is closed")
            ml = self._open.get(name)
            if ml is not None:
                return ml
            if not self.exists(name):
                if self.read_only:
                    raise NoSuchManagedLedgerError(f"no managed ledger {name!r} in {self.data_dir}")
                self._store.put(layout.name_key(name), json.dumps({"created_at": time.time()}).encode())
            ml = ManagedLedger(name, self._ml_dir(name), self)
            self._open[name] = ml
            return ml

    def opened(self, name: str) -> ManagedLedger | None:
        """The managed ledger `name` if it is open, without waiting for an open under way
        (which holds the lock through its writes: an event loop must not wait it out)."""
        return self._open.get(name)

    def _ml_dir(self, name: str) -> Path:
        return self.data_dir / "managed-ledgers" / layout.directory_name(name)

    def exists(self, name: str) -> bool:
        return self._store.get(layout.name_key(name)) is not None

    def list_names(self) -> list[str]:
        return [layout.name_from_key(key) for key in self._store.list(layout.NAMES_PREFIX)]

    def delete(self, name: str) -> None:
        """Remove the managed ledger, its cursors and its files."""
        if self.read_only:
            raise ReadOnlyError(f"cannot delete {name!r} through a read-only factory")
        with self._lock:
            ml = self._open.get(name)
        if ml is not None:
            ml.close()
        prefix = layout.ml_prefix(name)

        def unlist() -> None:
            with self._store.transaction() as txn:
                txn.delete(layout.name_key(name))
                txn.delete_prefix(prefix)

        self.space_reserve.freeing_space(unlist)
        shutil.rmtree(self._ml_dir(name), ignore_errors=True)

    def release(self, ml: OpenLedger) -> None:
        """Called by a managed ledger as it closes."""
        with self._lock:
            if self._open.get(ml.name) is ml:
                del self._open[ml.name]

    # --- services for managed ledgers --------------------------------------------------------

    def allocate_ledger_id(self) -> int:
        if self._ids is None:
            raise ReadOnlyError("a read-only factory creates no ledgers")
        return self._ids.next_id()

    def schedule_commit(self, job: Callable[[], None]) -> None:
        assert self._sync is not None
        self._sync.schedule(job)

    def hurry_commit(self) -> None:
        """Cut the group now: a managed ledger has queued group_commit_max_bytes."""
        assert self._sync is not None
        self._sync.hurry()

    def trim_in_background(self, ml: OpenLedger) -> None:
        """Trim `ml` soon on the trimmer thread; requests within the debounce delay are one trim."""
        if self._trimmer is not None and not self._closed:
            self._trimmer.schedule(functools.partial(_trim_quietly, ml))

    def mark_cursor_dirty(self, key: str, cursor: ManagedCursor) -> None:
        with self._dirty_lock:
            self._dirty_cursors[cursor] = key

    def persist_cursor(self, key: str, cursor: ManagedCursor) -> None:
        """Written now; while the factory closes, with every other cursor in one commit at
        the end (a commit is an fsync: one per cursor made stopping a broker of 10,000 topics
        take most of a minute)."""
        if self._closed and self._sync is not None:
            self.mark_cursor_dirty(key, cursor)
            return
        self._write_cursors({cursor: key})

    def store_new_cursor(self, key: str, cursor: ManagedCursor, failed: Callable[[ManagedCursor], None]) -> None:
        cursor.creating()
        if self._metadata_writer is None or self._closed:
            failed(cursor)
            cursor.created(StorageClosedError(f"factory on {self.data_dir} is closed"))
            return
        with self._dirty_lock:
            self._new_cursors[cursor] = (key, failed)
        self._metadata_writer.schedule(self._write_new_cursors)

    def _write_new_cursors(self) -> None:
        """The metadata thread's job: every cursor queued so far in one commit."""
        with self._dirty_lock:
            batch, self._new_cursors = self._new_cursors, {}
        try:
            self._write_cursors({cursor: key for cursor, (key, _failed) in batch.items()})
        except Exception as exc:  # whatever it was, each waiting client is told
            with self._dirty_lock:
                for cursor in batch:
                    self._dirty_cursors.pop(cursor, None)
            for cursor, (_key, failed) in batch.items():
                failed(cursor)
                cursor.created(exc)
            return
        for cursor in batch:
            cursor.created(None)

    def forget_cursor(self, key: str, cursor: ManagedCursor) -> None:
        with self._persist_lock:
            cursor.detach()
            with self._dirty_lock:
                self._dirty_cursors.pop(cursor, None)
            self._store.delete(key)

    def _flush_dirty_cursors(self) -> None:
        with self._dirty_lock:
            dirty, self._dirty_cursors = self._dirty_cursors, {}
        self._write_cursors(dirty)

    def _flush_dirty_cursors_quietly(self) -> None:
        """The sync thread's periodic job: on a full disk the cursors stay dirty (and their
        state in memory) and are written on a later pass, once there is room."""
        try:
            self._flush_dirty_cursors()
        except StorageFullError as exc:  # the full disk is reported once (DiskSpace)
            if not self._cursor_persist_failing:
                log.debug("cannot persist cursors, keeping them in memory until there is space: %s", exc)
            self._cursor_persist_failing = True
            return
        if self._cursor_persist_failing:
            log.debug("cursors persisted again")
            self._cursor_persist_failing = False

    def _write_cursors(self, cursors: dict[ManagedCursor, str]) -> None:
        """Snapshots are taken under the persist lock so a newer one is never overwritten.

        A failed write puts the cursors back among the dirty ones before it raises, so
        nothing acknowledged is forgotten while the disk is full.
        """
        with self._persist_lock:
            with self._dirty_lock:
                for cursor in cursors:
                    self._dirty_cursors.pop(cursor, None)
            records = [(key, cursor.snapshot()) for cursor, key in cursors.items() if cursor.durable]
            if not records:
                return
            try:
                with self._store.transaction() as txn:
                    for key, snapshot in records:
                        txn.put(key, snapshot)
            except StorageError:
                with self._dirty_lock:
                    for cursor, key in cursors.items():
                        if cursor.durable:
                            self._dirty_cursors.setdefault(cursor, key)
                raise

    # --- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """Make everything durable, persist cursors, release the data dir. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            open_mls = list(self._open.values())
        if self._metadata_writer is not None:
            self._metadata_writer.stop()  # the cursors it holds are written first
        if self._trimmer is not None:
            self._trimmer.stop()
        for ml in open_mls:
            ml.close()
        if self._sync is not None:
            self._sync.stop()
        if self._cursor_flusher is not None:
            self._cursor_flusher.stop()
            self._flush_dirty_cursors_quietly()
        self._store.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> ManagedLedgerFactory:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
