"""A full disk: the write is undone, its appends fail, and writing resumes once there is room."""

import errno
import os
import sqlite3
import time

import pytest

from magnetar.storage import ManagedLedgerConfig, Position, StorageError
from magnetar.storage import disk_space as disk_space_module
from magnetar.storage import ledger as ledger_module
from magnetar.storage.disk_space import PROBE_BYTES
from magnetar.storage.errors import StorageFullError
from magnetar.storage.metadata_store import SqliteMetadataStore

TOPIC = "public/default/persistent/full"


class Disk:
    """Stands in for the kernel's write: while `full`, half the bytes land, then ENOSPC."""

    def __init__(self) -> None:
        self.full = False
        self.real = ledger_module._write_records

    def write(self, fd: int, buffers: list[bytes], offset: int) -> None:
        if not self.full:
            self.real(fd, buffers, offset)
            return
        data = b"".join(buffers)
        os.pwrite(fd, data[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.fixture
def disk(monkeypatch):
    disk = Disk()
    monkeypatch.setattr(ledger_module, "_write_records", disk.write)
    return disk


def append_and_wait(ml, data: bytes, wait_until):
    outcome = []
    ml.append(data, lambda position, error: outcome.append((position, error)))
    wait_until(lambda: outcome)
    return outcome[0]


def retry_until_stored(ml, data: bytes, timeout: float = 10.0) -> Position:
    """As a producer does: after a full disk, appends fail fast for a short back-off."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return ml.append_sync(data)
        except StorageFullError:
            assert time.monotonic() < deadline, "writing never resumed"
            time.sleep(0.02)


def test_a_write_without_room_is_undone_and_the_next_one_carries_on(open_factory, disk, wait_until):
    factory = open_factory()
    ml = factory.open(TOPIC)
    first = ml.append_sync(b"before")
    disk.full = True
    position, error = append_and_wait(ml, b"x" * 1000, wait_until)
    assert position is None and isinstance(error, StorageFullError)
    data_file = factory._ml_dir(TOPIC) / f"{first.ledger_id}.log"
    assert os.path.getsize(data_file) == ml.total_size_bytes()  # the torn half is gone
    disk.full = False
    after = retry_until_stored(ml, b"after")
    assert after == Position(first.ledger_id, 1)  # no gap where the failed entry was
    assert [data for _, data in ml.read_entries(first, 10)] == [b"before", b"after"]
    factory.close()
    reopened = open_factory().open(TOPIC)
    assert [data for _, data in reopened.read_entries(Position(0, 0), 10)] == [b"before", b"after"]


def test_reads_and_acks_go_on_while_the_disk_is_full(open_factory, disk, wait_until):
    ml = open_factory(ManagedLedgerConfig(max_entries_per_ledger=2)).open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = [ml.append_sync(f"m{i}".encode()) for i in range(5)]
    disk.full = True
    assert isinstance(append_and_wait(ml, b"refused", wait_until)[1], StorageFullError)
    assert [p for p, _ in ml.read_entries(positions[0], 10)] == positions
    cursor.delete(positions[:3])
    assert cursor.mark_delete_position == positions[2]


def test_cursors_stay_dirty_while_the_metadata_store_is_full(open_factory, monkeypatch):
    factory = open_factory()
    ml = factory.open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = [ml.append_sync(f"m{i}".encode()) for i in range(3)]
    store = factory.metadata_store
    real_transaction = store.transaction

    def full_transaction():
        raise StorageFullError("metadata store: database or disk is full")

    monkeypatch.setattr(store, "transaction", full_transaction)
    cursor.mark_delete(positions[1])
    with pytest.raises(StorageError):
        cursor.flush()
    factory._flush_dirty_cursors_quietly()  # the periodic flush logs and keeps it dirty
    with pytest.raises(StorageFullError):
        ml.open_cursor("new-sub")
    assert "new-sub" not in ml.cursors
    monkeypatch.setattr(store, "transaction", real_transaction)
    factory.close()
    assert open_factory().open(TOPIC).cursors["sub"].mark_delete_position == positions[1]


def test_sqlite_full_becomes_storage_full_error(tmp_path):
    store = SqliteMetadataStore(tmp_path / "m.db")
    store._conn.execute("PRAGMA max_page_count = 8")  # a database that cannot grow: SQLITE_FULL
    with pytest.raises(StorageFullError):
        for i in range(1000):
            store.put(f"k{i}", b"v" * 4000)
    store._conn.execute("PRAGMA max_page_count = 1000000")
    store.put("after", b"ok")  # no transaction left open by the failure
    assert store.get("after") == b"ok"
    with pytest.raises(sqlite3.OperationalError):
        store._conn.execute("SELECT * FROM missing_table")
    store.close()


# --- the factory's one record of a full disk (storage.disk_space) ----------------------------------


class Told:
    """A DiskSpace listener keeping what it was told."""

    def __init__(self, space) -> None:
        self.changes = []
        space.add_listener(self.changes.append)

    @property
    def states(self) -> list[bool]:
        return [change.full for change in self.changes]


@pytest.fixture
def fallocate(monkeypatch, disk):
    """posix_fallocate (the probe's call) refusing while the stub disk is full; the sizes asked."""
    sizes = []
    real = os.posix_fallocate

    def fake(fd: int, offset: int, size: int) -> None:
        sizes.append(size)
        if disk.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, size)

    monkeypatch.setattr(disk_space_module.os, "posix_fallocate", fake)
    return sizes


def test_the_factory_is_told_once_that_the_disk_filled_and_once_that_a_write_landed(open_factory, disk):
    factory = open_factory()
    told = Told(factory.disk_space)
    ml = factory.open(TOPIC)
    ml.append_sync(b"before")
    disk.full = True
    for _ in range(3):
        with pytest.raises(StorageFullError):
            ml.append_sync(b"x" * 1000)
    assert factory.disk_space.full and "No space left" in factory.disk_space.reason
    assert told.states == [True]
    disk.full = False
    retry_until_stored(ml, b"after")
    assert not factory.disk_space.full
    assert told.states == [True, False]
    assert told.changes[1].refused >= 3 and told.changes[1].seconds > 0


def test_a_probe_asks_for_the_room_refused_and_ends_a_ledgers_back_off(open_factory, disk, fallocate):
    factory = open_factory()
    ml = factory.open(TOPIC)
    ml.append_sync(b"before")
    disk.full = True
    with pytest.raises(StorageFullError):
        ml.append_sync(b"x" * (3 << 20))
    ml._space_retry_at = time.monotonic() + 60  # a back-off that would outlast the test
    assert not factory.disk_space.probe()
    assert factory.disk_space.full and fallocate[-1] >= 3 << 20  # the room the refused write needed
    disk.full = False
    assert factory.disk_space.probe() and not factory.disk_space.full
    assert ml.append_sync(b"at once") is not None  # not refused inside the back-off
    assert factory.disk_space.probe() and fallocate[-1] == PROBE_BYTES


def test_a_metadata_store_without_room_marks_the_disk_full(open_factory):
    factory = open_factory()
    ml = factory.open(TOPIC)
    conn = factory.metadata_store._conn
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")  # the database cannot grow: SQLITE_FULL
    with pytest.raises(StorageFullError):
        for i in range(100):
            ml.open_cursor(f"sub-{i}")
    assert factory.disk_space.full and "metadata store" in factory.disk_space.reason
