"""A small key-value store for metadata: ledger lists, cursors, and the broker's own records."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

from magnetar.storage import faults
from magnetar.storage.errors import ReadOnlyError, StorageClosedError, StorageFullError


class MetadataWriter(Protocol):
    """The writes allowed inside a transaction."""

    def put(self, key: str, value: bytes) -> None: ...

    def delete(self, key: str) -> None: ...

    def delete_prefix(self, prefix: str) -> None:
        """Delete every key starting with `prefix` (never empty: that would be every key)."""
        ...


class MetadataStore(MetadataWriter, Protocol):
    """What storage and the broker need from a metadata backend.

    Keys are '/'-separated strings so that "everything of this topic" is a prefix listing.
    Kept this small so a ZooKeeper- or etcd-backed store could stand in later.
    """

    def get(self, key: str) -> bytes | None: ...

    def list(self, prefix: str) -> list[str]:
        """Keys starting with `prefix`, in sorted order."""
        ...

    def transaction(self) -> AbstractContextManager[MetadataWriter]:
        """All writes made through the yielded writer become visible and durable together."""
        ...

    def close(self) -> None: ...


def bump_counter(store: MetadataStore, key: str, count: int, *, initial: int = 0) -> int:
    """Move the counter kept at `key` (a decimal number) forward by `count` and give its new
    value; an absent counter stands at `initial`. The one writer of a counter is the broker
    that owns the store, so the read and the write need no transaction between them."""
    raw = store.get(key)
    value = (int(raw) if raw else initial) + count
    store.put(key, str(value).encode())
    return value


def _prefix_upper_bound(prefix: str) -> str | None:
    """Smallest string greater than every string starting with `prefix` (None: no bound).

    A range scan on the primary key is indexed; LIKE or substr() would scan the whole table.
    """
    if not prefix:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class SqliteMetadataStore:
    """MetadataStore on one SQLite file.

    WAL mode lets a read-only process (a Spark reader) read while the broker writes.
    synchronous=FULL because a ledger must be durably listed before any of its entries is
    reported durable: with NORMAL a power loss could forget the ledger and so lose
    acknowledged messages. Metadata writes are rare (ledger rollover, throttled cursor
    flushes), so the extra fsync per commit is cheap.

    Writes go through one connection serialised by a lock (SQLite allows one writer at a
    time anyway). Reads take a connection of their own from a small pool: WAL lets them run
    beside a write, so a read on the event loop never waits for another thread's COMMIT and
    its fsync (the transaction log, the sync thread's ledger and cursor records). A thread
    inside a write transaction reads through the writer's connection, so it sees its own
    uncommitted writes; every other reader sees the last commit.
    """

    def __init__(self, path: Path, *, read_only: bool = False,
                 on_full: Callable[[StorageFullError], None] | None = None) -> None:
        self._lock = threading.RLock()
        self._read_only = read_only
        self._on_full = on_full
        """Told of each transaction the disk had no room for (the factory's DiskSpace)."""
        self._path = path
        if read_only:
            self._conn = self._open_read_only()
        else:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB NOT NULL)")
        self._closed = False
        self._writer: _SqliteWriter | None = None
        """The open transaction's writer: a transaction begun inside it (by the thread holding
        the lock) joins it, so many small writes can share one commit (stopping a broker)."""
        self._writer_thread: int | None = None
        """The thread inside the open write transaction: its reads go through the writer."""
        self._readers = _ReaderPool(self._open_reader)

    def _open_read_only(self) -> sqlite3.Connection:
        uri = f"{self._path.resolve().as_uri()}?mode=ro"
        return sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)

    def _open_reader(self) -> sqlite3.Connection:
        if self._read_only:
            return self._open_read_only()
        return sqlite3.connect(self._path, check_same_thread=False, isolation_level=None)

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageClosedError("metadata store is closed")
        return self._conn

    def _query(self, sql: str, args: tuple[str, ...]) -> list[tuple[object, ...]]:
        if self._writer_thread == threading.get_ident():
            return self._connection().execute(sql, args).fetchall()  # our own uncommitted writes
        with self._readers.connection() as conn:
            return conn.execute(sql, args).fetchall()

    def get(self, key: str) -> bytes | None:
        rows = self._query("SELECT value FROM kv WHERE key = ?", (key,))
        return bytes(rows[0][0]) if rows else None  # type: ignore[arg-type]

    def list(self, prefix: str) -> list[str]:
        upper = _prefix_upper_bound(prefix)
        if upper is None:
            rows = self._query("SELECT key FROM kv ORDER BY key", ())
        else:
            rows = self._query("SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, upper))
        return [str(row[0]) for row in rows]

    def put(self, key: str, value: bytes) -> None:
        with self.transaction() as txn:
            txn.put(key, value)

    def delete(self, key: str) -> None:
        with self.transaction() as txn:
            txn.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        with self.transaction() as txn:
            txn.delete_prefix(prefix)

    @contextmanager
    def transaction(self) -> Iterator[MetadataWriter]:
        """A write transaction; a full disk surfaces as StorageFullError with nothing applied.
        One begun inside another is part of it: its writes are committed (or rolled back) with
        the outer one's.

        A failed COMMIT leaves SQLite's transaction open, so it is rolled back here too:
        otherwise every later BEGIN would fail long after space came back.
        """
        if self._read_only:
            raise ReadOnlyError("metadata store was opened read-only")
        with self._lock:
            if self._writer is not None:
                yield self._writer
                return
            conn = self._connection()
            try:
                if faults.ACTIVE and faults.disk_full():
                    raise sqlite3.OperationalError("database or disk is full (injected)")
                conn.execute("BEGIN IMMEDIATE")
                self._writer = _SqliteWriter(conn)
                self._writer_thread = threading.get_ident()
                try:
                    yield self._writer
                    conn.execute("COMMIT")
                except BaseException:
                    _rollback(conn)
                    raise
                finally:
                    self._writer = None
                    self._writer_thread = None
            except sqlite3.OperationalError as exc:
                if not _is_full(exc):
                    raise
                full = StorageFullError(f"metadata store: {exc}")
                if self._on_full is not None:
                    self._on_full(full)
                raise full from exc

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._readers.close()
                self._conn.close()


class _ReaderPool:
    """Idle read connections, one taken per read and given back after it.

    A pool rather than one connection per thread: executor and helper threads come and go,
    and a connection is used by one thread at a time however many threads there are. It grows
    to the number of reads running at once (a handful) and no further.
    """

    def __init__(self, open_connection: Callable[[], sqlite3.Connection]) -> None:
        self._open = open_connection
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise StorageClosedError("metadata store is closed")
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            with self._lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _SqliteWriter:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def put(self, key: str, value: bytes) -> None:
        self._conn.execute("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)", (key, value))

    def delete(self, key: str) -> None:
        self._conn.execute("DELETE FROM kv WHERE key = ?", (key,))

    def delete_prefix(self, prefix: str) -> None:
        upper = _prefix_upper_bound(prefix)
        if upper is None:
            raise ValueError("delete_prefix needs a prefix: an empty one would delete every key")
        self._conn.execute("DELETE FROM kv WHERE key >= ? AND key < ?", (prefix, upper))


def _rollback(conn: sqlite3.Connection) -> None:
    # SQLite may have rolled back on its own already (it does on some full-disk errors).
    with contextlib.suppress(sqlite3.Error):
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _is_full(error: sqlite3.OperationalError) -> bool:
    """SQLITE_FULL ("database or disk is full"); the error code where Python gives it."""
    return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "full" in str(error)
