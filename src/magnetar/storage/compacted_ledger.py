"""A topic's compacted ledger: the retained entries of a compaction, each under its original
position, and the horizon it covers.

Files live in the managed ledger's own directory (`compacted/<id>.{log,idx,pos}`), so
deleting the topic deletes them; `.pos` lists each entry's original (ledger, entry). The
record `{ledger_id, horizon, entries}` is one metadata-store key under the managed
ledger's prefix (Pulsar keeps the same facts as the `__compaction` cursor's
`CompactedTopicLedger` property and mark-delete position).

Crash safety comes from ordering: the new ledger is written and fsynced completely, then
the record is switched in one put, then the previous ledger's files are removed. A crash
before the put leaves the previous compaction in force; the new files are orphans, which
opening the store removes.

A compaction computed elsewhere (the Spark job) is written with the same writer into a
*staging* directory (`compacted/staging-<token>/`, ledger id 0), which nothing reads and
orphan removal leaves alone; `adopt` checks the staged files are whole, moves them under
an id allocated here and switches the record exactly as `commit` does.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import os
import re
import shutil
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.storage import layout
from magnetar.storage.ledger import Ledger
from magnetar.storage.ledger_files import data_path, fsync_dir, index_path, remove_files
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.managed_ledger_factory import ManagedLedgerFactory

log = logging.getLogger(__name__)
#: Entries buffered by a writer before one vectored write.
_WRITE_GROUP = 256
#: A staging directory's name: `staging-` and a token, nothing that could leave `compacted/`.
STAGING_NAME = re.compile(r"staging-[A-Za-z0-9_-]{1,64}")
_STAGED_ID = 0


class StagedLedgerError(ValueError):
    """Staged files that cannot be adopted (missing, torn, or not what the job reported)."""


def compaction_key(name: str) -> str:
    return layout.ml_prefix(name) + "compaction"


def _positions_path(directory: Path, ledger_id: int) -> Path:
    return directory / f"{ledger_id}.pos"


@dataclass(frozen=True, slots=True)
class CompactedLedgerInfo:
    ledger_id: int
    horizon: Position
    entries: int
    size: int
    created_at: float

    def to_json(self) -> bytes:
        return json.dumps({"ledger_id": self.ledger_id, "horizon": list(self.horizon), "entries": self.entries,
                           "size": self.size, "created_at": self.created_at}).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CompactedLedgerInfo:
        data = json.loads(raw)
        return cls(int(data["ledger_id"]), Position(*data["horizon"]), int(data["entries"]), int(data.get("size", 0)),
                   float(data.get("created_at", 0.0)))


class CompactedLedger:
    """Read side of one compacted ledger; positions are kept in memory (one per entry,
    and a compacted ledger has about one entry per live key)."""

    def __init__(self, directory: Path, info: CompactedLedgerInfo, ledger: Ledger | None,
                 positions: list[Position]) -> None:
        self.directory = directory
        self.info = info
        self._ledger = ledger
        self.positions = positions

    @property
    def horizon(self) -> Position:
        return self.info.horizon

    @property
    def entries(self) -> int:
        return len(self.positions)

    def index_at_or_after(self, position: Position) -> int:
        """Index of the first entry whose original position is >= `position`."""
        return bisect.bisect_left(self.positions, position)

    def read(self, index: int, count: int) -> list[tuple[Position, bytes]]:
        """Up to `count` entries from `index`, with their original positions."""
        count = min(count, len(self.positions) - index)
        if count <= 0 or self._ledger is None:
            return []
        datas = self._ledger.read_range(index, count)
        return list(zip(self.positions[index : index + count], datas, strict=True))

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()


class CompactedLedgerWriter:
    """Appends a new compacted ledger; nothing of it is in force until the store commits it."""

    def __init__(self, directory: Path, ledger_id: int, ledger: Ledger) -> None:
        self.directory = directory
        self.ledger_id = ledger_id
        self._ledger = ledger
        self._buffer: list[bytes] = []
        self._positions = array("q")
        self.size = 0

    def add(self, position: Position, entry: bytes) -> None:
        if self._positions and Position(self._positions[-2], self._positions[-1]) >= position:
            raise ValueError(f"compacted entries must be added in order: {position} after "
                             f"{self._positions[-2]}:{self._positions[-1]}")
        self._positions.extend(position)
        self._buffer.append(entry)
        self.size += len(entry)
        if len(self._buffer) >= _WRITE_GROUP:
            self._flush()

    @property
    def entries(self) -> int:
        return len(self._positions) // 2

    def _flush(self) -> None:
        if self._buffer:
            self._ledger.append(self._buffer, sync=False)
            self._buffer = []

    def finish(self) -> list[Position]:
        """Make every byte durable (data, index, positions); returns the positions."""
        self._flush()
        self._ledger.seal()
        self._ledger.close()
        path = _positions_path(self.directory, self.ledger_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self._positions.tobytes())
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.directory)
        flat = self._positions
        return [Position(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]

    def abort(self) -> None:
        self._ledger.close()
        _remove(self.directory, self.ledger_id)


def _staged_positions(directory: Path, entries: int, horizon: Position) -> list[Position]:
    path = _positions_path(directory, _STAGED_ID)
    if not path.is_file():
        raise StagedLedgerError(f"{directory.name}: nothing staged (no {path.name})")
    flat = array("q")
    flat.frombytes(path.read_bytes()[: entries * 16])
    if len(flat) != 2 * entries or path.stat().st_size != entries * 16:
        raise StagedLedgerError(f"{directory.name}: {path.stat().st_size // 16} positions staged, {entries} reported")
    positions = [Position(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
    if any(a >= b for a, b in itertools.pairwise(positions)) or (positions and positions[-1] > horizon):
        raise StagedLedgerError(f"{directory.name}: staged positions are out of order or beyond the horizon {horizon}")
    return positions


def _remove(directory: Path, ledger_id: int) -> None:
    remove_files(directory, ledger_id)
    _positions_path(directory, ledger_id).unlink(missing_ok=True)


class CompactedLedgerStore:
    """The compacted ledger in force for one managed ledger, and the switch to a new one."""

    def __init__(self, factory: ManagedLedgerFactory, name: str) -> None:
        self._factory = factory
        self._name = name
        self.directory = factory.data_dir / "managed-ledgers" / layout.directory_name(name) / "compacted"
        self._lock = threading.Lock()
        self._current: CompactedLedger | None = None
        raw = factory.metadata_store.get(compaction_key(name))
        info = CompactedLedgerInfo.from_json(raw) if raw else None
        if not factory.read_only:
            self._remove_orphans(info.ledger_id if info else None)
        if info is not None:
            self._current = self._open(info)

    def _remove_orphans(self, keep: int | None) -> None:
        """Files of a compaction that never committed (the broker died during it)."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            stem = path.name.split(".", 1)[0]
            if stem.isdigit() and int(stem) != keep:
                log.info("%s: removing %s, left by a compaction that did not finish", self._name, path.name)
                path.unlink(missing_ok=True)

    def _open(self, info: CompactedLedgerInfo) -> CompactedLedger:
        raw = _positions_path(self.directory, info.ledger_id).read_bytes() if info.entries else b""
        flat = array("q")
        flat.frombytes(raw)
        positions = [Position(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]
        ledger = (Ledger.open_read_only(self.directory, info.ledger_id, info.entries, self._factory.file_pool)
                  if info.entries else None)
        return CompactedLedger(self.directory, info, ledger, positions)

    @property
    def current(self) -> CompactedLedger | None:
        return self._current

    def new_writer(self) -> CompactedLedgerWriter:
        self.directory.mkdir(parents=True, exist_ok=True)
        ledger_id = self._factory.allocate_ledger_id()
        ledger = Ledger.create(self.directory, ledger_id, self._factory.file_pool)
        return CompactedLedgerWriter(self.directory, ledger_id, ledger)

    def staging_writer(self, name: str) -> CompactedLedgerWriter:
        """A writer into `compacted/<name>/`: works on a read-only factory (it allocates no
        ledger id and touches no metadata), so a job beside a live broker can use it."""
        directory = self.staging_directory(name)
        directory.mkdir(parents=True, exist_ok=False)
        ledger = Ledger.create(directory, _STAGED_ID, self._factory.file_pool)
        return CompactedLedgerWriter(directory, _STAGED_ID, ledger)

    def staging_directory(self, name: str) -> Path:
        if not STAGING_NAME.fullmatch(name):
            raise StagedLedgerError(f"invalid staging name {name!r}: expected staging-<letters, digits, _ or ->")
        return self.directory / name

    def remove_staging(self, name: str) -> None:
        shutil.rmtree(self.staging_directory(name), ignore_errors=True)

    def commit(self, writer: CompactedLedgerWriter, horizon: Position) -> CompactedLedger:
        """Put the written ledger in force; the previous one is closed and removed."""
        writer.finish()
        return self._put_in_force(CompactedLedgerInfo(writer.ledger_id, horizon, writer.entries, writer.size,
                                                      time.time()))

    def adopt(self, name: str, horizon: Position, entries: int) -> CompactedLedger:
        """Put a staged ledger of `entries` entries in force, as `commit` would have.

        The staged files must be whole: the positions file holds exactly `entries`
        positions in increasing order, none beyond `horizon`, and the ledger as many
        durable entries. They are renamed under a fresh id (same file system, so each
        rename is atomic) before the record switches; a crash in between leaves orphans
        that the next open removes.
        """
        staged = self.staging_directory(name)
        positions = _staged_positions(staged, entries, horizon)
        ledger = Ledger.open_read_only(staged, _STAGED_ID, None, self._factory.file_pool)
        try:
            if ledger.entries != entries:
                raise StagedLedgerError(f"{name}: {ledger.entries} durable entries staged, {entries} reported")
            size = ledger.size
        finally:
            ledger.close()
        ledger_id = self._factory.allocate_ledger_id()
        for source, target in ((data_path(staged, _STAGED_ID), data_path(self.directory, ledger_id)),
                               (index_path(staged, _STAGED_ID), index_path(self.directory, ledger_id)),
                               (_positions_path(staged, _STAGED_ID), _positions_path(self.directory, ledger_id))):
            source.rename(target)
        fsync_dir(self.directory)
        self.remove_staging(name)
        log.info("%s: adopted a staged compaction of %d entries up to %s (first %s)", self._name, entries, horizon,
                 positions[0] if positions else None)
        return self._put_in_force(CompactedLedgerInfo(ledger_id, horizon, entries, size, time.time()))

    def _put_in_force(self, info: CompactedLedgerInfo) -> CompactedLedger:
        new = self._open(info)
        self._factory.metadata_store.put(compaction_key(self._name), info.to_json())
        with self._lock:
            old, self._current = self._current, new
        if old is not None:
            old.close()
            _remove(self.directory, old.info.ledger_id)
        return new

    def close(self) -> None:
        with self._lock:
            current, self._current = self._current, None
        if current is not None:
            current.close()
