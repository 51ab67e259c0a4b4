"""SIGKILL a writer at random moments; every entry it reported durable must survive intact."""

import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from crash_writer import CHURN_TOPIC, TOPIC, payload

from magnetar.storage import ManagedLedgerFactory, Position

WRITER = Path(__file__).with_name("crash_writer.py")


def _pythonpath() -> str:
    """The writer's directory, and the caller's PYTHONPATH, which says which magnetar is tested."""
    return os.pathsep.join(filter(None, [str(WRITER.parent), os.environ.get("PYTHONPATH")]))


def run_and_kill(data_dir: Path, first_index: int, kill_after: int, *writer_args: str) -> dict[int, Position]:
    """Start a writer, SIGKILL it once `kill_after` durable entries were reported."""
    child = subprocess.Popen(
        [sys.executable, str(WRITER), str(data_dir), str(first_index), *writer_args],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": _pythonpath()},
    )
    reported: dict[int, Position] = {}
    buffer = b""
    deadline = time.monotonic() + 30
    try:
        while len(reported) < kill_after:
            assert time.monotonic() < deadline, "writer reported too few durable entries in time"
            assert child.poll() is None, "writer died on its own"
            ready, _, _ = select.select([child.stdout], [], [], 0.5)
            if ready:
                buffer += os.read(child.stdout.fileno(), 1 << 16)
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    i, ledger_id, entry_id = map(int, line.split())
                    reported[i] = Position(ledger_id, entry_id)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    # Lines already in the pipe were reported before the kill: they are promises too.
    for line in (buffer + child.stdout.read()).split(b"\n"):
        if line.strip():
            i, ledger_id, entry_id = map(int, line.split())
            reported[i] = Position(ledger_id, entry_id)
    child.stdout.close()
    return reported


@pytest.mark.slow
def test_durable_entries_survive_sigkill(tmp_path):
    kill_repeatedly(tmp_path / "data", random.Random(1234))


@pytest.mark.slow
def test_durable_entries_survive_sigkill_while_files_are_evicted(tmp_path):
    """A pool of 2 files for two topics written in turn: each group commit reopens the
    ledger's data and index files that the other topic's group closed."""
    data_dir = tmp_path / "data"
    kill_repeatedly(data_dir, random.Random(4321), "2")
    with ManagedLedgerFactory(data_dir) as factory:
        churn = factory.open(CHURN_TOPIC)
        assert churn.read_entries(churn.first_position, 10**6)  # whole and checksum-valid


def kill_repeatedly(data_dir: Path, rng: random.Random, *writer_args: str) -> None:
    next_index = 0
    for _ in range(8):
        reported = run_and_kill(data_dir, next_index, rng.randint(20, 400), *writer_args)
        assert reported

        with ManagedLedgerFactory(data_dir) as factory:
            ml = factory.open(TOPIC)
            entries = ml.read_entries(ml.first_position, 10**6)
            # Contiguous and whole: the i-th entry of the topic is exactly payload(i),
            # with nothing torn or missing in between, across all the runs so far.
            assert [data for _, data in entries] == [payload(i) for i in range(len(entries))]
            by_index = dict(enumerate(position for position, _ in entries))
            for i, position in reported.items():
                assert by_index.get(i) == position, f"entry {i} reported durable at {position} is lost"
            assert [ml.next_position(a) for a, _ in entries[:-1]] == [b for b, _ in entries[1:]]
            # Nothing half there: each data file holds exactly its whole records.
            for info in ml.ledgers:
                assert next(data_dir.glob(f"managed-ledgers/*/{info.ledger_id}.log")).stat().st_size == info.size
            next_index = len(entries)
            # The recovered topic takes new appends after what survived.
            assert ml.append_sync(payload(next_index)) > entries[-1][0]
            next_index += 1
