"""What a managed ledger uses of the factory that opened it, as a Protocol.

The factory builds managed ledgers, so a managed ledger (and its helpers, the append path and
the rollover) naming the factory's class would close an import cycle. They name this instead:
the few members they call, which also shows what a managed ledger depends on and lets a test
host one without a data dir's lock and threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from magnetar.storage.config import ManagedLedgerConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.disk_space import DiskSpace
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.file_pool import FilePool
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.space_reserve import SpaceReserve


class OpenLedger(Protocol):
    """A managed ledger as its factory calls back on it: the name it is open under, and trim."""

    @property
    def name(self) -> str: ...

    def trim(self) -> object: ...


class LedgerServices(Protocol):
    """The factory's services for its managed ledgers (ManagedLedgerFactory provides them)."""

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def metadata_store(self) -> MetadataStore: ...

    @property
    def entry_cache(self) -> EntryCache: ...

    @property
    def file_pool(self) -> FilePool: ...

    @property
    def space_reserve(self) -> SpaceReserve: ...

    @property
    def disk_space(self) -> DiskSpace: ...

    def allocate_ledger_id(self) -> int:
        """A ledger id never used before in this data dir."""
        ...

    def schedule_commit(self, job: Callable[[], None]) -> None:
        """Run `job` on the sync thread with the next group (once, however often scheduled)."""
        ...

    def hurry_commit(self) -> None:
        """Cut the group now instead of waiting out the group-commit delay."""
        ...

    def trim_in_background(self, ml: OpenLedger) -> None: ...

    def mark_cursor_dirty(self, key: str, cursor: ManagedCursor) -> None: ...

    def persist_cursor(self, key: str, cursor: ManagedCursor) -> None: ...

    def store_new_cursor(self, key: str, cursor: ManagedCursor, failed: Callable[[ManagedCursor], None]) -> None:
        """Write a new cursor's first record off the caller's thread (cursor.when_created
        tells when it is durable); `failed` is called first if it cannot be written."""
        ...

    def forget_cursor(self, key: str, cursor: ManagedCursor) -> None: ...

    def release(self, ml: OpenLedger) -> None:
        """`ml` has closed: the next open of its name makes a new managed ledger."""
        ...
