"""Retention and ledger trimming: what goes, what stays, and that a crash mid-trim loses nothing listed."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from magnetar.storage import ManagedLedgerConfig, Position
from magnetar.storage.ledger_slot import LedgerInfo
from magnetar.storage.ledger_trimmer import RetentionPolicy, ledgers_to_trim, slowest_reader_ledger_id

TOPIC = "public/default/persistent/trimmed"
MB = 1024 * 1024


def small_ledgers(**overrides) -> ManagedLedgerConfig:
    return ManagedLedgerConfig(max_entries_per_ledger=4, **overrides)


def fill(ml, entries: int) -> list[Position]:
    positions = [ml.append_sync(f"entry-{i}".encode() * 10) for i in range(entries)]
    return positions


def ledger_files(ml_dir: Path) -> set[int]:
    return {int(path.stem) for path in ml_dir.iterdir() if path.suffix in (".log", ".idx")}


def ml_dir(factory, name=TOPIC) -> Path:
    return factory._ml_dir(name)


def infos(*sizes_and_ages: tuple[int, float], now: float = 1000.0) -> list[LedgerInfo]:
    return [LedgerInfo(i + 1, 10, size, 0.0, now - age) for i, (size, age) in enumerate(sizes_and_ages)]


# --- the rules, as pure functions ------------------------------------------------------------


def test_defaults_delete_every_consumed_ledger():
    closed = infos((100, 5), (100, 4), (100, 3))
    assert ledgers_to_trim(closed, 400, RetentionPolicy(0, 0), slowest_ledger_id=3, now=1000.0) == closed[:2]


def test_infinite_retention_keeps_everything():
    closed = infos((100, 5), (100, 4))
    assert ledgers_to_trim(closed, 300, RetentionPolicy(-1, -1), slowest_ledger_id=99, now=1000.0) == []


def test_size_limit_keeps_the_newest_ledgers_that_fit():
    closed = infos((100, 5), (100, 4), (100, 3))  # plus 100 in the open ledger: 400 in all
    doomed = ledgers_to_trim(closed, 400, RetentionPolicy(-1, 200), slowest_ledger_id=99, now=1000.0)
    assert [info.ledger_id for info in doomed] == [1, 2]  # 200 bytes remain: ledger 3 and the open one


def test_time_limit_counts_from_when_a_ledger_was_closed():
    closed = infos((100, 50), (100, 20), (100, 5))
    doomed = ledgers_to_trim(closed, 300, RetentionPolicy(10, -1), slowest_ledger_id=99, now=1000.0)
    assert [info.ledger_id for info in doomed] == [1, 2]


def test_either_limit_deletes_as_in_pulsar():
    """Pulsar deletes a consumed ledger past the time limit OR past the size limit."""
    closed = infos((100, 50), (100, 1), (100, 1))
    by_time = ledgers_to_trim(closed, 300, RetentionPolicy(10, 10 * MB), slowest_ledger_id=99, now=1000.0)
    assert [info.ledger_id for info in by_time] == [1]
    by_size = ledgers_to_trim(closed, 300, RetentionPolicy(3600, 100), slowest_ledger_id=99, now=1000.0)
    assert [info.ledger_id for info in by_size] == [1, 2]


def test_nothing_at_or_after_the_slowest_reader_goes():
    closed = infos((100, 5), (100, 4), (100, 3))
    assert [i.ledger_id for i in ledgers_to_trim(closed, 300, RetentionPolicy(), 2, 1000.0)] == [1]


def test_slowest_reader_on_the_last_entry_of_a_closed_ledger_has_consumed_it():
    entries = {5: 4, 6: 4, 7: 1}
    assert slowest_reader_ledger_id([Position(6, 3), Position(7, 0)], entries, current_ledger_id=7) == 7
    assert slowest_reader_ledger_id([Position(6, 2)], entries, current_ledger_id=7) == 6
    assert slowest_reader_ledger_id([], entries, current_ledger_id=7) == 7
    assert slowest_reader_ledger_id([Position(7, 0)], entries, current_ledger_id=7) == 7


# --- a managed ledger ---------------------------------------------------------------------------


def test_trim_deletes_consumed_ledgers_files_and_metadata(open_factory):
    factory = open_factory(small_ledgers())
    ml = factory.open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = fill(ml, 14)  # ledgers of 4, 4, 4, 2
    ledger_ids = sorted({p.ledger_id for p in positions})
    assert ml.trim().ledgers == 0  # nothing consumed yet
    cursor.mark_delete(positions[5])  # the first ledger consumed, the second half-way
    result = ml.trim()
    assert result.ledgers == 1
    assert [info.ledger_id for info in ml.ledgers] == ledger_ids[1:]
    assert ledger_files(ml_dir(factory)) == set(ledger_ids[1:])
    assert not any(key.endswith(f"{ledger_ids[0]:020d}") for key in factory.metadata_store.list("storage/"))
    assert ml.first_position == Position(ledger_ids[1], 0)
    assert [p for p, _ in ml.read_entries(Position(ledger_ids[0], 0), 100)] == positions[4:]


def test_sizes_match_the_files_on_disk(open_factory):
    factory = open_factory(small_ledgers())
    ml = factory.open(TOPIC)
    fill(ml, 10)
    directory = ml_dir(factory)
    on_disk = {info.ledger_id: (directory / f"{info.ledger_id}.log").stat().st_size for info in ml.ledgers}
    assert on_disk == {info.ledger_id: info.size for info in ml.ledgers}
    assert ml.total_size_bytes() == sum(on_disk.values())
    ml.trim()  # no cursor: everything but the ledger being written goes
    assert ml.total_size_bytes() == sum(os.path.getsize(p) for p in directory.glob("*.log"))


def test_without_cursors_only_retention_keeps_data(open_factory):
    factory = open_factory(small_ledgers())
    ml = factory.open(TOPIC)
    positions = fill(ml, 12)
    ml.retention = RetentionPolicy(-1, -1)
    assert ml.trim().ledgers == 0
    ml.retention = RetentionPolicy(-1, ml.ledgers[-1].size + 1)  # room for less than two ledgers
    assert ml.trim().ledgers == 1
    ml.retention = RetentionPolicy(0, 0)
    ml.trim()
    assert [info.ledger_id for info in ml.ledgers] == [positions[-1].ledger_id]  # the one being written


def test_acks_crossing_a_ledger_trim_in_the_background(open_factory, wait_until):
    factory = open_factory(small_ledgers())
    ml = factory.open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = fill(ml, 9)
    first_ledger = positions[0].ledger_id
    cursor.delete(positions[:4])
    wait_until(lambda: first_ledger not in {info.ledger_id for info in ml.ledgers})
    wait_until(lambda: first_ledger not in ledger_files(ml_dir(factory)))


def test_min_rollover_time_holds_a_full_ledger(open_factory):
    ml = open_factory(small_ledgers(min_ledger_rollover_time_seconds=3600)).open(TOPIC)
    positions = fill(ml, 10)
    assert len({p.ledger_id for p in positions}) == 1


def test_max_rollover_time_closes_an_idle_ledger_so_it_can_be_trimmed(open_factory):
    factory = open_factory(ManagedLedgerConfig(max_ledger_rollover_time_seconds=0.2))
    ml = factory.open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = fill(ml, 3)
    cursor.mark_delete(positions[-1])
    deadline = time.monotonic() + 10
    while ml.trim().ledgers == 0:
        assert time.monotonic() < deadline, "the idle ledger was never rolled over and trimmed"
        time.sleep(0.05)
    assert ml.ledgers == [] and ledger_files(ml_dir(factory)) == set()
    after = ml.append_sync(b"more")
    assert after.ledger_id > positions[-1].ledger_id
    assert ml.read_entries(Position(0, 0), 10) == [(after, b"more")]


def test_reopen_after_trimming_everything(open_factory):
    factory = open_factory(small_ledgers())
    ml = factory.open(TOPIC)
    ml.open_cursor("sub", "earliest").mark_delete(fill(ml, 8)[-1])
    ml.trim()
    factory.close()
    reopened = open_factory(small_ledgers()).open(TOPIC)
    assert reopened.cursors["sub"].num_unacked_entries() == 0
    assert reopened.trim().ledgers == 1  # the ledger that was being written is closed now
    assert reopened.ledgers == []
    position = reopened.append_sync(b"next")
    assert reopened.cursors["sub"].num_unacked_entries() == 1
    assert reopened.read_entries(Position(0, 0), 10) == [(position, b"next")]


CRASHING_TRIM = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from magnetar.storage import ManagedLedgerConfig, ManagedLedgerFactory
    import magnetar.storage.managed_ledger as managed_ledger

    factory = ManagedLedgerFactory(Path(sys.argv[1]), ManagedLedgerConfig(max_entries_per_ledger=4))
    ml = factory.open(sys.argv[2])
    cursor = ml.open_cursor("sub", "earliest")
    positions = [ml.append_sync(b"x" * 100) for _ in range(14)]
    cursor.mark_delete(positions[9])
    cursor.flush()
    # SIGKILL between the metadata transaction and the unlinks: the worst moment.
    managed_ledger.remove_files = lambda *args: os.kill(os.getpid(), signal.SIGKILL)
    ml.trim()
""")


def test_sigkill_in_the_middle_of_a_trim_leaves_no_listed_ledger_without_files(tmp_path, open_factory):
    data = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-c", CRASHING_TRIM, str(data), TOPIC], check=False, capture_output=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
    factory = open_factory(small_ledgers())
    directory = ml_dir(factory)
    assert len(ledger_files(directory)) == 4  # the trimmed two still on disk, unlisted
    ml = factory.open(TOPIC)
    listed = {info.ledger_id for info in ml.ledgers}
    assert len(listed) == 2
    assert ledger_files(directory) == listed  # orphans removed at open
    entries = ml.read_entries(Position(0, 0), 100)
    assert len(entries) == 6 and all(data == b"x" * 100 for _, data in entries)
    assert ml.cursors["sub"].num_unacked_entries() == 4


@pytest.mark.parametrize("retention", [RetentionPolicy(-1, -1), RetentionPolicy(3600, -1)])
def test_retention_keeps_consumed_ledgers(open_factory, retention):
    ml = open_factory(small_ledgers()).open(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(fill(ml, 12)[-1])
    ml.retention = retention
    assert ml.trim().ledgers == 0
    assert ml.number_of_entries() == 12
