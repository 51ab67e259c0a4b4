"""How a group commit makes appends durable with few system calls (issue 45): the data file
of a synced ledger is written with O_DSYNC, one call where a write and an fdatasync were
two, and the index slots are written after the appends were acknowledged. Neither may let
an acknowledgement run ahead of durability, nor lose an acknowledged entry in a crash."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest

from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory, Position
from magnetar.storage import ledger as ledger_module
from magnetar.storage.errors import WriteFailedError
from magnetar.storage.file_pool import FilePool
from magnetar.storage.ledger import Ledger
from magnetar.storage.ledger_files import INDEX_SLOT_BYTES, IOV_MAX, index_path

TOPIC = "persistent://public/default/sync"


@pytest.fixture
def system_calls(monkeypatch):
    """The ledger's data writes and fdatasyncs, in order, each with whether its descriptor
    had O_DSYNC at that moment."""
    calls: list[tuple[str, bool]] = []

    def recorded(name, real):
        def call(fd, *args):
            calls.append((name, bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DSYNC)))
            return real(fd, *args)

        return call

    monkeypatch.setattr(ledger_module, "_write_records", recorded("write", ledger_module._write_records))
    monkeypatch.setattr(ledger_module, "fdatasync", recorded("fdatasync", ledger_module.fdatasync))
    return calls


def test_a_dsync_ledger_syncs_every_write_in_the_write_itself_even_after_eviction(tmp_path, system_calls):
    pool = FilePool(4)
    ledger = Ledger.create(tmp_path, 1, pool, dsync=True)
    for i in range(5):
        assert pool.evict_idle() == 2  # data and index closed: the append reopens them
        ledger.append([b"entry %d" % i, b"more"], sync=True)
    assert system_calls == [("write", True)] * 5, "one call per append, each one synced"
    ledger.close()


def test_a_plain_ledger_fsyncs_after_a_synced_write_and_not_after_an_unsynced_one(tmp_path, system_calls):
    ledger = Ledger.create(tmp_path, 1)
    ledger.append([b"a"], sync=True)
    ledger.append([b"b"], sync=False)
    assert system_calls == [("write", False), ("fdatasync", False), ("write", False)]
    ledger.close()


@pytest.mark.parametrize("sync_data", [True, False])
def test_the_factory_writes_synced_topics_with_dsync_and_unsynced_ones_without(tmp_path, system_calls, sync_data):
    with ManagedLedgerFactory(tmp_path / "data", ManagedLedgerConfig(sync_data=sync_data)) as factory:
        factory.open(TOPIC).append_sync(b"x")
    assert system_calls[0] == ("write", sync_data)  # then the seal's fdatasync, at close


def test_an_append_is_acknowledged_after_its_index_slot_is_written(open_factory):
    """A read-only reader (the Spark source's `path` option) trusts the index alone: an entry
    acknowledged to its producer is already indexed, so a reader started after it finds it."""
    ml = open_factory().open(TOPIC)
    ml.append_sync(b"first")
    ledger_id = ml.ledgers[-1].ledger_id
    index = index_path(ml._dir, ledger_id)
    assert index.stat().st_size == INDEX_SLOT_BYTES
    seen: list[int] = []
    done = threading.Event()

    def on_durable(position: Position | None, error: BaseException | None) -> None:
        seen.append(index.stat().st_size)
        done.set()

    ml.append(b"second", on_durable)
    assert done.wait(10)
    assert seen == [2 * INDEX_SLOT_BYTES], "acknowledged before a read-only reader could find it"


def test_a_failed_synced_write_fails_the_append_and_acknowledges_nothing(open_factory, monkeypatch):
    """With O_DSYNC the write is the sync: its failure (an EIO from the disk) is the one
    the acknowledgement must not get past."""
    ml = open_factory().open(TOPIC)
    ml.append_sync(b"kept")

    def failing(fd, buffers, offset):
        raise OSError(5, "Input/output error (injected)")

    monkeypatch.setattr(ledger_module, "_write_records", failing)
    outcomes: list[tuple[Position | None, BaseException | None]] = []
    done = threading.Event()
    ml.append(b"lost", lambda position, error: (outcomes.append((position, error)), done.set()))
    assert done.wait(10)
    assert outcomes[0][0] is None and isinstance(outcomes[0][1], WriteFailedError)
    with pytest.raises(WriteFailedError):
        ml.append_sync(b"refused")


def test_recovery_indexes_acknowledged_entries_whose_slots_were_never_written(tmp_path):
    """A crash between the acknowledgement and the index write leaves the data file ahead
    of its index: reopening finds the entries by their checksummed records."""
    ledger = Ledger.create(tmp_path, 1, dsync=True)
    ledger.append([b"one", b"two"], sync=True)
    ledger.write_index()
    ledger.append([b"three"], sync=True)  # acknowledged; its slot not written yet
    os.close(ledger._data_fd)  # a crash: no close(), no seal()
    os.close(ledger._index_fd)
    assert index_path(tmp_path, 1).stat().st_size == 2 * INDEX_SLOT_BYTES
    recovered, report = Ledger.recover(tmp_path, 1)
    assert report.index_rebuilt and report.entries == 3
    assert recovered.read_range(0, 3) == [b"one", b"two", b"three"]
    assert index_path(tmp_path, 1).stat().st_size == 3 * INDEX_SLOT_BYTES
    recovered.close()


def test_a_dsync_append_of_many_entries_is_still_one_synced_write(tmp_path, monkeypatch):
    """pwritev takes at most IOV_MAX buffers: a group of more entries must not become a
    synced write (a wait for the disk) per slice."""
    ledger = Ledger.create(tmp_path, 1, dsync=True)
    real_pwritev = os.pwritev
    calls: list[int] = []
    monkeypatch.setattr(os, "pwritev", lambda fd, buffers, offset: calls.append(len(buffers)) or real_pwritev(
        fd, buffers, offset))
    entries = [b"%d" % i for i in range(3 * IOV_MAX)]
    ledger.append(entries, sync=True)
    assert len(calls) == 1
    assert ledger.read_range(0, len(entries)) == entries
    ledger.close()
