"""A managed ledger's append path: positions handed out at once, entries made durable in
groups by the factory's sync thread, callbacks in append order, and what a failed or a
full disk does to the appends queued behind it.

Mixed into ManagedLedger, whose ledger table, locks and rollover it uses; kept apart
because it is the one part that runs on the sync thread.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from magnetar.storage.errors import (
    ReadOnlyError,
    StorageClosedError,
    StorageFullError,
    WriteFailedError,
    is_space_error,
)
from magnetar.storage.ledger_files import HEADER
from magnetar.storage.ledger_slot import AppendCallback, PendingAppend, notify_appends
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.config import ManagedLedgerConfig
    from magnetar.storage.ledger import Ledger
    from magnetar.storage.ledger_services import LedgerServices
    from magnetar.storage.rollover import LedgerRollover

log = logging.getLogger("magnetar.storage.managed_ledger")

_RECORD_OVERHEAD = HEADER.size
_new_position = tuple.__new__
"""Builds a Position without the NamedTuple's Python-level __new__: half the cost, and
append_many() builds one per entry."""
SPACE_RETRY_MAX_SECONDS = 2.0
"""Longest pause between write attempts while the disk is full: how late writing resumes."""


class GroupCommitAppends:
    name: str
    _factory: LedgerServices
    _config: ManagedLedgerConfig
    _rollover: LedgerRollover
    _lock: threading.Lock
    _commit_lock: threading.Lock
    _pending: list[PendingAppend]
    _pending_bytes: int
    _last_confirmed: Position | None
    _failure: BaseException | None
    _space_failures: int
    _space_retry_at: float
    _accepting: bool
    _read_only: bool
    _closed: bool
    _max_entries: int
    _max_bytes: int

    def append(self, data: bytes, callback: AppendCallback | None = None) -> Position:
        """Give `data` its position now; `callback` runs on the sync thread once it is durable.

        Callbacks run in append order. On a write failure they get (None, error) and the
        managed ledger refuses further appends: after a failed fsync the file's state is
        unknown, so carrying on could acknowledge lost data.
        """
        return self.append_many((data,), callback)[0]

    def append_many(self, datas: Sequence[bytes], callback: AppendCallback | None = None) -> list[Position]:
        """Append entries in order and give their positions now; `callback` runs once, with
        the last one's position, when all are durable (or with the error that failed them).

        One callback stands for the group because appends become durable in order and a
        failure fails every append queued after it: the last one durable means all are.
        """
        if not datas:
            raise ValueError("append_many needs at least one entry")
        positions: list[Position] = []
        size = sum(map(len, datas))
        with self._lock:
            if not self._accepting:
                self._check_writable()
            slot = self._rollover.current
            assert slot is not None
            pending = self._pending
            first_pending = not pending
            now = time.time()  # once per group: its entries arrived together
            try:
                for data in datas:
                    if (
                        not slot.assigned
                        or slot.assigned >= self._max_entries
                        or slot.assigned_bytes >= self._max_bytes
                        or now >= slot.roll_at
                    ):
                        slot = self._rollover.slot_for_append()
                    position = _new_position(Position, (slot.ledger_id, slot.assigned))
                    slot.assigned += 1
                    slot.assigned_bytes += _RECORD_OVERHEAD + len(data)
                    positions.append(position)
                    pending.append((slot, position, data, None))
            except BaseException:
                self._unqueue(len(positions))
                raise
            pending[-1] = (slot, position, data, callback)
            queued_before = self._pending_bytes
            self._pending_bytes += size
        if first_pending:
            self._factory.schedule_commit(self._commit_pending)
        if queued_before < self._config.group_commit_max_bytes <= queued_before + size:
            self._factory.hurry_commit()
        return positions

    def _unqueue(self, count: int) -> None:
        """Lock held: take back the last `count` appends of a group whose rollover failed, so
        a group is queued whole or not at all (only its last append carries the callback)."""
        for _ in range(count):
            slot, _position, data, _callback = self._pending.pop()
            slot.assigned -= 1
            slot.assigned_bytes -= _RECORD_OVERHEAD + len(data)

    def append_sync(self, data: bytes) -> Position:
        """Append and wait until durable. Never call it from an append callback (deadlock)."""
        done = threading.Event()
        outcome: list[BaseException | None] = []

        def on_durable(_position: Position | None, error: BaseException | None) -> None:
            outcome.append(error)
            done.set()

        position = self.append(data, on_durable)
        done.wait()
        if outcome[0] is not None:
            raise outcome[0]
        return position

    def _check_writable(self) -> None:
        if self._read_only:
            raise ReadOnlyError(f"managed ledger {self.name} was opened read-only")
        if self._closed:
            raise StorageClosedError(f"managed ledger {self.name} is closed")
        if self._failure is not None:
            raise WriteFailedError(f"managed ledger {self.name} failed a write: {self._failure}")

    def _commit_pending(self) -> None:
        """Sync thread: write, fsync and acknowledge everything queued, one group per ledger."""
        with self._commit_lock:
            with self._lock:
                batch, self._pending = self._pending, []
                self._pending_bytes = 0
            if not batch:
                return
            if batch[0][0] is batch[-1][0]:  # the usual case: no rollover inside the batch
                self._commit_group(batch, [])
                return
            groups = [list(group) for _, group in itertools.groupby(batch, key=lambda append: append[0])]
            for i, group in enumerate(groups):
                if not self._commit_group(group, groups[i + 1 :]):
                    return

    def _commit_group(self, group: list[PendingAppend], later: list[list[PendingAppend]]) -> bool:
        """Write one ledger's share of a batch; False if it failed (and `later` failed with it)."""
        slots, positions, datas, callbacks = zip(*group, strict=True)
        slot = slots[0]
        try:
            if self._failure is not None:
                raise self._failure
            if self._space_failures and time.monotonic() < self._space_retry_at and self._factory.disk_space.full:
                self._fail_for_space(group, later, None)
                return False
            ledger = self._rollover.start_writing(slot)
            ledger.append(datas, sync=self._config.sync_data)
        except Exception as error:
            if is_space_error(error) and self._failure is None:
                self._fail_for_space(group, later, error)
            else:
                self._fail_for_good(group, later, error)
            return False
        self._write_index(ledger)
        self._factory.entry_cache.put_run(positions[0], datas)
        with self._lock:
            slot.durable = ledger.entries
            slot.durable_bytes = ledger.size
            self._last_confirmed = positions[-1]
        if self._space_failures:
            log.debug("managed ledger %s: writing again after %d writes failed for space", self.name,
                      self._space_failures)
            self._space_failures = 0
        self._factory.disk_space.wrote()
        notify_appends(positions, callbacks, None)
        return True

    def _write_index(self, ledger: Ledger) -> None:
        """Before the entries count as durable and are acknowledged: a read-only reader of the
        data directory (the Spark source's `path` option) trusts the index alone, and an
        application told its message is stored expects a reader started after that to find it. A failure (a full
        disk) costs nothing durable; the slots stay pending for the next commit or the seal."""
        try:
            ledger.write_index()
        except OSError as exc:
            log.debug("managed ledger %s: index write put off: %s", self.name, exc)

    def _fail_for_good(self, group: list[PendingAppend], later: list[list[PendingAppend]], error: Exception) -> None:
        """A write failed for a reason other than space (EIO, EFBIG): the file's tail is in an
        unknown state, so this ledger takes no further append; the ones queued behind the
        failed group fail with it (nothing else would ever answer them). Logged once."""
        with self._lock:
            first = self._failure is None
            self._failure = self._failure or error
            self._accepting = False
        if first:
            log.error("managed ledger %s: write failed, refusing further appends: %s", self.name, error)
        failure = WriteFailedError(f"managed ledger {self.name} failed a write: {self._failure}")
        failure.__cause__ = error
        doomed = [*group, *(append for rest in later for append in rest)]
        _, positions, _, callbacks = zip(*doomed, strict=True)
        notify_appends(positions, callbacks, failure)

    def _fail_for_space(
        self, group: list[PendingAppend], later: list[list[PendingAppend]], error: Exception | None
    ) -> None:
        """The disk is full: fail this group and every append queued after it, and hand
        their positions out again, so the next append (a retry, once space is back) carries
        on right after the last durable entry. The ledger file was already cut back.

        Later appends fail too because their positions follow the failed ones: storing them
        would leave a gap that no reader could cross. `error` is None when no write was
        tried (inside the back-off), which must not push the next attempt further away; the
        back-off ends early once the factory's DiskSpace has seen room (a probe, another write).
        """
        with self._lock:
            doomed = [*group, *(append for rest in later for append in rest), *self._pending]
            self._pending = []
            self._pending_bytes = 0
            for slot in {append[0] for append in doomed}:
                slot.assigned, slot.assigned_bytes = slot.durable, slot.durable_bytes
        if error is not None:
            self._space_failures += 1
            self._space_retry_at = time.monotonic() + min(SPACE_RETRY_MAX_SECONDS, 0.05 * 2**self._space_failures)
            if self._space_failures == 1:
                log.debug("managed ledger %s: disk full, failing writes until space returns: %s", self.name, error)
        self._factory.disk_space.refused(len(doomed), error, sum(len(append[2]) for append in group))
        reason = error if error is not None else "no space left on device (next write attempt shortly)"
        _, positions, _, callbacks = zip(*doomed, strict=True)
        notify_appends(positions, callbacks, StorageFullError(f"{self.name}: {reason}"))

    # --- trimming ----------------------------------------------------------------------------

