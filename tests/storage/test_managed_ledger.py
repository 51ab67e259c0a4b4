import subprocess
import sys
import threading
import time

import pytest

from magnetar.storage import (
    DataDirLockedError,
    ManagedLedgerConfig,
    NoSuchEntryError,
    NoSuchManagedLedgerError,
    Position,
    ReadOnlyError,
    StorageClosedError,
)

TOPIC = "public/default/persistent/my-topic-partition-0"


def payload(i: int) -> bytes:
    return f"entry-{i}-".encode() * (1 + i % 7)


def test_append_assigns_positions_and_callbacks_fire_in_order_once_durable(open_factory, wait_until):
    ml = open_factory().open(TOPIC)
    fired = []
    positions = [ml.append(payload(i), lambda p, e: fired.append((p, e))) for i in range(200)]
    assert positions == sorted(positions) and len(set(positions)) == 200
    wait_until(lambda: len(fired) == 200)
    assert fired == [(p, None) for p in positions]
    assert ml.last_confirmed_position == positions[-1]
    assert ml.first_position == positions[0]
    assert ml.number_of_entries() == 200
    assert [data for _, data in ml.read_entries(positions[0], 1000)] == [payload(i) for i in range(200)]


def test_empty_managed_ledger(open_factory):
    ml = open_factory().open(TOPIC)
    assert ml.last_confirmed_position is None
    assert ml.first_position is None
    assert ml.number_of_entries() == 0
    assert ml.read_entries(Position(0, -1), 10) == []


def test_entries_readable_only_once_durable(open_factory, wait_until):
    factory = open_factory()
    ml = factory.open(TOPIC)
    first = ml.append_sync(b"first")
    gate = threading.Event()
    # Hold the sync thread inside a callback so the next append stays pending.
    ml.append(b"blocker", lambda p, e: gate.wait(10))
    wait_until(lambda: ml.last_confirmed_position == ml.next_position(first))
    pending = ml.append(b"pending")
    assert ml.read_entries(first, 10) == [(first, b"first"), (ml.next_position(first), b"blocker")]
    with pytest.raises(NoSuchEntryError):
        ml.read_entry(pending)
    gate.set()
    wait_until(lambda: ml.last_confirmed_position == pending)
    assert ml.read_entry(pending) == b"pending"


@pytest.mark.parametrize(
    ("config", "per_ledger"),
    [
        (ManagedLedgerConfig(max_entries_per_ledger=4), 4),
        # Each record is 8 header bytes + 10 data bytes; a ledger rolls once it reaches 36.
        (ManagedLedgerConfig(max_size_per_ledger_bytes=36), 2),
        (ManagedLedgerConfig(max_ledger_rollover_time_seconds=0), 1),
        (ManagedLedgerConfig(max_ledger_rollover_time_seconds=3600), 10),
    ],
    ids=["count", "size", "age-expired", "age-not-expired"],
)
def test_rollover(open_factory, config, per_ledger):
    ml = open_factory(config).open(TOPIC)
    positions = [ml.append_sync(b"0123456789") for _ in range(10)]
    ledgers = ml.ledgers
    assert [info.entries for info in ledgers] == [min(per_ledger, 10 - i) for i in range(0, 10, per_ledger)]
    assert all(info.closed_at is not None for info in ledgers[:-1])
    assert ledgers[-1].closed_at is None
    ids = [info.ledger_id for info in ledgers]
    assert ids == sorted(set(ids))
    assert [p.ledger_id for p in positions] == [ids[i // per_ledger] for i in range(10)]
    # Reads and position arithmetic cross the ledger boundaries.
    assert [data for _, data in ml.read_entries(Position(ids[0], -1), 100)] == [b"0123456789"] * 10
    assert [ml.next_position(p) for p in positions[:-1]] == positions[1:]
    assert [ml.previous_position(p) for p in positions[1:]] == positions[:-1]
    assert ml.entries_between(positions[1], positions[-2]) == 8
    assert ml.total_size_bytes() == 10 * 18


def test_ledger_ids_unique_across_topics_and_restarts(open_factory, tmp_path):
    config = ManagedLedgerConfig(max_entries_per_ledger=1)
    for _ in range(3):
        factory = open_factory(config)
        for topic in ("a", "b"):
            ml = factory.open(topic)
            for _ in range(3):
                ml.append_sync(b"x")
        factory.close()
    factory = open_factory(config)
    ids = [info.ledger_id for topic in ("a", "b") for info in factory.open(topic).ledgers]
    assert len(ids) == 18
    assert len(set(ids)) == 18


def test_read_entries_limits_and_boundaries(open_factory):
    ml = open_factory(ManagedLedgerConfig(max_entries_per_ledger=3)).open(TOPIC)
    positions = [ml.append_sync(bytes([i]) * 10) for i in range(9)]
    first_ledger, second_ledger = positions[0].ledger_id, positions[3].ledger_id
    # (ledger, -1) and a position past a ledger's end both start at the next real entry.
    assert ml.read_entries(Position(first_ledger, -1), 1)[0][0] == positions[0]
    assert ml.read_entries(Position(first_ledger, 3), 1)[0][0] == positions[3]
    assert ml.read_entries(Position(second_ledger, -1), 1)[0][0] == positions[3]
    assert [p for p, _ in ml.read_entries(positions[2], 4)] == positions[2:6]
    assert [p for p, _ in ml.read_entries(positions[0], 100, max_bytes=25)] == positions[:2]
    assert [p for p, _ in ml.read_entries(positions[0], 100, max_bytes=1)] == positions[:1]
    assert ml.read_entries(ml.next_position(positions[-1]), 10) == []


def test_reads_from_files_when_not_cached(open_factory):
    ml = open_factory(ManagedLedgerConfig(cache_size_bytes=0, max_entries_per_ledger=5)).open(TOPIC)
    positions = [ml.append_sync(payload(i)) for i in range(12)]
    assert ml.read_entries(positions[0], 100) == [(p, payload(i)) for i, p in enumerate(positions)]
    assert ml.read_entry(positions[7]) == payload(7)


def test_reopen_keeps_entries_properties_and_starts_a_new_ledger(open_factory):
    factory = open_factory()
    ml = factory.open(TOPIC)
    positions = [ml.append_sync(payload(i)) for i in range(5)]
    ml.set_property("index", "42")
    factory.close()
    ml = open_factory().open(TOPIC)
    assert ml.get_property("index") == "42"
    assert ml.read_entries(positions[0], 10) == [(p, payload(i)) for i, p in enumerate(positions)]
    assert ml.ledgers[0].closed_at is not None
    new = ml.append_sync(b"after")
    assert new.ledger_id > positions[-1].ledger_id
    assert ml.next_position(positions[-1]) == new


def test_truncated_tail_is_cut_and_reported_on_reopen(open_factory, tmp_path):
    # A writer that dies without closing leaves its current ledger open...
    script = (
        "import os, sys; from pathlib import Path; from magnetar.storage import ManagedLedgerFactory\n"
        "ml = ManagedLedgerFactory(Path(sys.argv[1])).open(sys.argv[2])\n"
        "[ml.append_sync(f'entry-{i}-'.encode() * (1 + i % 7)) for i in range(5)]\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "data"), TOPIC], check=True, timeout=60)
    # ...and a torn record at the end of its data file.
    [log_file] = (tmp_path / "data" / "managed-ledgers").glob("*/*.log")
    with log_file.open("ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")
    ml = open_factory().open(TOPIC)
    [report] = ml.recovery_reports
    assert (str(report.ledger_id), report.entries, report.dropped_bytes) == (log_file.stem, 5, 11)
    first = ml.first_position
    assert [data for _, data in ml.read_entries(first, 10)] == [payload(i) for i in range(5)]
    assert ml.ledgers[0].closed_at is not None


def test_second_factory_on_same_dir_is_refused(open_factory, tmp_path):
    open_factory()
    with pytest.raises(DataDirLockedError, match="data"):
        open_factory()


def test_lock_released_on_close(open_factory):
    open_factory().close()
    open_factory()


def test_names_exists_delete(open_factory, tmp_path):
    factory = open_factory()
    names = ["public/default/persistent/a-partition-0", "t/with spaces/..", "ünïcode"]
    for name in names:
        factory.open(name).append_sync(b"x")
    assert sorted(factory.list_names()) == sorted(names)
    assert factory.exists(names[0]) and not factory.exists("nope")
    ml_dirs = list((tmp_path / "data" / "managed-ledgers").iterdir())
    assert len(ml_dirs) == 3 and all(d.parent.name == "managed-ledgers" for d in ml_dirs)
    factory.delete(names[1])
    assert sorted(factory.list_names()) == sorted([names[0], names[2]])
    assert len(list((tmp_path / "data" / "managed-ledgers").iterdir())) == 2
    ml = factory.open(names[1])
    assert ml.number_of_entries() == 0 and ml.cursors == {}


def test_closed_managed_ledger_rejects_use(open_factory):
    factory = open_factory()
    ml = factory.open(TOPIC)
    ml.append_sync(b"x")
    ml.close()
    with pytest.raises(StorageClosedError):
        ml.append(b"y")
    with pytest.raises(StorageClosedError):
        ml.read_entries(Position(0, 0), 1)
    assert factory.open(TOPIC) is not ml


def test_close_waits_for_pending_appends(open_factory):
    factory = open_factory(ManagedLedgerConfig(group_commit_max_delay_seconds=0.05))
    ml = factory.open(TOPIC)
    fired = []
    for i in range(100):
        ml.append(payload(i), lambda p, e: fired.append(e))
    factory.close()
    assert fired == [None] * 100
    assert open_factory().open(TOPIC).number_of_entries() == 100


def test_a_group_of_group_commit_max_bytes_is_written_without_waiting_out_the_delay(open_factory):
    """A producer whose window is full adds nothing while its group waits: the group is cut as
    soon as it holds group_commit_max_bytes (BookKeeper's journalBufferedWritesThreshold)."""
    factory = open_factory(ManagedLedgerConfig(group_commit_max_delay_seconds=3600, group_commit_max_bytes=4096))
    ml = factory.open(TOPIC)
    durable = threading.Event()
    ml.append_many([b"x" * 1000] * 3, lambda p, e: None)  # below the threshold: it waits ...
    ml.append_many([b"y" * 1000] * 2, lambda p, e: durable.set())  # ... until this crosses it
    assert durable.wait(30), "the group waited for its hour instead of being cut at 4096 bytes"
    assert ml.number_of_entries() == 5


def test_read_only_factory_sees_only_durable_whole_entries(open_factory, wait_until):
    writer_factory = open_factory(ManagedLedgerConfig(max_entries_per_ledger=7))
    writer = writer_factory.open(TOPIC)
    for i in range(10):
        writer.append_sync(payload(i))
    reader_factory = open_factory(read_only=True)
    reader = reader_factory.open(TOPIC)
    assert reader.number_of_entries() == 10
    first = reader.first_position
    gate = threading.Event()
    writer.append(b"blocker", lambda p, e: gate.wait(10))
    wait_until(lambda: writer.number_of_entries() == 11)
    writer.append(b"not durable yet")
    reader.refresh()
    # The blocker is durable and indexed before its acknowledgement (which the gate holds).
    assert [d for _, d in reader.read_entries(first, 100)] == [payload(i) for i in range(10)] + [b"blocker"]
    gate.set()
    wait_until(lambda: writer.number_of_entries() == 12)
    reader.refresh()
    assert reader.read_entries(first, 100)[-1][1] == b"not durable yet"
    assert reader.last_confirmed_position == writer.last_confirmed_position
    with pytest.raises(ReadOnlyError):
        reader.append(b"x")
    with pytest.raises(NoSuchManagedLedgerError):
        reader_factory.open("missing")


def test_read_only_reader_follows_a_writer_appending_concurrently(open_factory, wait_until):
    writer = open_factory(ManagedLedgerConfig(max_entries_per_ledger=50)).open(TOPIC)
    writer.append_sync(payload(0))
    reader = open_factory(read_only=True).open(TOPIC)
    wait_until(lambda: reader.refresh() or reader.first_position is not None)  # once indexed
    stop = threading.Event()

    def produce():
        i = 1
        while not stop.is_set() and i < 2000:
            writer.append(payload(i))
            i += 1

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        seen: list[bytes] = []
        position = reader.first_position
        while len(seen) < 1000:
            reader.refresh()
            batch = reader.read_entries(position, 100)
            if batch:
                seen += [data for _, data in batch]
                position = reader.next_position(batch[-1][0])
        assert seen == [payload(i) for i in range(len(seen))]
    finally:
        stop.set()
        thread.join()


def test_properties_written_while_ledgers_roll_over_do_not_deadlock(open_factory):
    """set_property (a metadata write) from one thread while the sync thread rolls ledgers
    over (a metadata transaction that seals the old ledger) used to take the two locks in
    opposite orders."""

    ml = open_factory(ManagedLedgerConfig(max_entries_per_ledger=2)).open("persistent/rolling")
    done = threading.Event()

    def write_properties() -> None:
        for i in range(1000):
            ml.set_property("k", str(i))
        done.set()

    writer = threading.Thread(target=write_properties, daemon=True)
    writer.start()
    appended = []
    # the sync thread works through these rollovers (one fsynced metadata transaction each)
    # long after the appends are queued, so 2,000 keep it rolling while the properties are
    # written; 20,000 left ten thousand rollovers for the teardown (10-30 s)
    while not done.is_set() and len(appended) < 2_000:
        appended.append(ml.append(b"x"))
    assert done.wait(30), "set_property never finished: deadlock with the sync thread"
    assert len({position.ledger_id for position in appended}) >= 100
    assert ml.get_property("k") == "999"


def test_read_entries_into_buffers_gives_the_same_entries_as_views(open_factory, wait_until):
    ml = open_factory().open(TOPIC)
    fired = []
    positions = [ml.append(payload(i), lambda p, e: fired.append(p)) for i in range(50)]
    wait_until(lambda: len(fired) == 50)
    sizes = []

    def into(size: int) -> bytearray:
        sizes.append(size)
        return bytearray(size)

    reader = open_factory(read_only=True).open(TOPIC)  # nothing cached: every entry from the file
    wait_until(lambda: reader.refresh() or reader.number_of_entries() == 50)  # the last group once indexed
    read = reader.read_entries(positions[0], 1000, None, into)
    assert [(p, bytes(data)) for p, data in read] == list(zip(positions, map(payload, range(50)), strict=True))
    assert sizes and all(isinstance(data, memoryview) for _, data in read)


def test_an_append_after_a_quiet_spell_is_committed_without_waiting_out_the_delay(open_factory):
    """The group-commit wait adapts to load: with the sync thread idle for longer than its
    last commit took, waiting would gather nothing, so a trickle's append is written at once
    (with an hour's delay configured, it would otherwise wait the hour)."""
    factory = open_factory(ManagedLedgerConfig(group_commit_max_delay_seconds=3600, group_commit_max_bytes=4096))
    ml = factory.open(TOPIC)
    first = threading.Event()
    started = time.monotonic()
    ml.append_many([b"x" * 1000] * 5, lambda p, e: first.set())  # over the byte threshold: committed at once
    assert first.wait(30)
    # the quiet spell itself: longer than that commit took (which the append's wait bounds),
    # however slow the disk is under load
    time.sleep(max(0.5, 2 * (time.monotonic() - started)))
    durable = threading.Event()
    ml.append(b"a trickle", lambda p, e: durable.set())
    assert durable.wait(10), "the lone append waited out the group delay after a quiet spell"
    assert ml.number_of_entries() == 6
