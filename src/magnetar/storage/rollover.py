"""Ledger rollover: which ledger takes new positions, and the switch of the files being written.

Two ledgers matter to a managed ledger's writer, as in Pulsar's ManagedLedgerImpl: the
*current* one, which appends get positions in, and the *writing* one, whose files the sync
thread has open. Positions run ahead of the files, so after a rollover the current ledger
is already the successor while the writing one is still its predecessor, until the sync
thread reaches the successor's first entry.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sortedcontainers import SortedDict

from magnetar.storage import layout
from magnetar.storage.config import ManagedLedgerConfig
from magnetar.storage.errors import StorageFullError
from magnetar.storage.ledger import Ledger
from magnetar.storage.ledger_files import remove_files
from magnetar.storage.ledger_slot import LedgerSlot
from magnetar.storage.metadata_store import MetadataStore

if TYPE_CHECKING:
    from magnetar.storage.ledger_services import LedgerServices

log = logging.getLogger(__name__)


class LedgerRollover:
    """The current and writing ledgers of one managed ledger, sharing its table and lock."""

    def __init__(
        self,
        name: str,
        directory: Path,
        slots: SortedDict,
        lock: threading.Lock,
        store: MetadataStore,
        factory: LedgerServices,
    ) -> None:
        self._name = name
        self._dir = directory
        self._slots = slots
        self._lock = lock
        self._store = store
        self._factory = factory
        self._config: ManagedLedgerConfig = factory.config
        self.current: LedgerSlot | None = None
        """Takes the next position; None only until the writer has opened."""
        self.writing: LedgerSlot | None = None
        """Has its files open for writing; None before the first write and after a close."""

    def start(self) -> None:
        """Writer, at open: appends go to a new ledger, never into a recovered one."""
        self.current = self._new_slot()

    def _new_slot(self) -> LedgerSlot:
        slot = LedgerSlot(self._factory.allocate_ledger_id(), time.time())
        self._slots[slot.ledger_id] = slot
        return slot

    def roll_over(self) -> LedgerSlot:
        """Lock held: seal the current ledger to new positions and make a successor current.

        Raises StorageFullError, changing nothing, if the metadata store's disk has no room
        for the successor's id.
        """
        successor = self._new_slot()
        assert self.current is not None
        self.current.sealed = True
        self.current = successor
        return successor

    def slot_for_append(self) -> LedgerSlot:
        """Lock held, slow path of append(): stamp a fresh ledger's age, or roll over a full or old one.

        A full ledger younger than the minimum rollover time keeps taking entries (Pulsar's
        managedLedgerMinLedgerRolloverTimeMinutes), and so does one whose successor cannot
        get an id because the metadata store's disk is full: a larger ledger beats a lost
        message.
        """
        current = self.current
        assert current is not None
        now = time.time()
        if current.assigned:
            if now - current.created_at < self._config.min_ledger_rollover_time_seconds:
                return current
            try:
                current = self.roll_over()
            except StorageFullError as exc:  # the full disk is reported once (DiskSpace)
                log.debug("managed ledger %s: cannot roll over yet: %s", self._name, exc)
                return current
        current.created_at = now
        current.roll_at = now + self._config.max_ledger_rollover_time_seconds
        return current

    def start_writing(self, slot: LedgerSlot) -> Ledger:
        """Commit lock held: ledger files for `slot`, closing the previous ledger first if
        this is a rollover.

        The new ledger is listed in the metadata store before any entry of it is written, so
        that an entry reported durable is always reachable after a restart.
        """
        if slot is self.writing:
            assert slot.ledger is not None
            return slot.ledger
        previous = self.writing
        if previous is not None and previous.closed_at is None:
            # Sealed before the transaction, never inside it: sealing takes the lock, and
            # append() takes the store (a ledger id) while holding it. Already sealed if an
            # earlier attempt failed for space after this point: each step may be retried.
            self._seal(previous)
        with self._store.transaction() as txn:
            if previous is not None:
                txn.put(layout.ledger_key(self._name, previous.ledger_id), previous.info().to_json())
            txn.put(layout.ledger_key(self._name, slot.ledger_id), slot.info().to_json())
        try:
            ledger = Ledger.create(self._dir, slot.ledger_id, self._factory.file_pool, dsync=self._config.sync_data)
        except OSError:
            remove_files(self._dir, slot.ledger_id)  # half-created: the retry creates both afresh
            raise
        with self._lock:
            slot.listed = True
            slot.ledger = ledger
        self.writing = slot
        return ledger

    def close_writing_ledger(self) -> None:
        """Commit lock held, and never after a failed write, whose file state is unknown."""
        slot = self.writing
        if slot is None:
            return
        self._seal(slot)
        self._store.put(layout.ledger_key(self._name, slot.ledger_id), slot.info().to_json())
        self.writing = None

    def _seal(self, slot: LedgerSlot) -> None:
        assert slot.ledger is not None
        slot.ledger.seal()
        with self._lock:
            slot.closed_at = time.time()
