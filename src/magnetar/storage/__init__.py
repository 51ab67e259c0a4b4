"""Managed-ledger storage: topic partitions as ordered ledgers of durable entries, plus cursors.

Knows nothing of the network and never imports asyncio: completion is reported through plain
callbacks, which the broker bridges into its event loop.

Layering: under magnetar.formats and magnetar.credentials (and everything above them); imports
only magnetar.wire and magnetar.plugins. Managed ledgers see their factory through
`ledger_services.LedgerServices`, so the factory is the top of the package. Enforced by
import-linter (pyproject.toml).
"""

from magnetar.storage.config import ManagedLedgerConfig
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.errors import (
    CorruptEntryError,
    DataDirLockedError,
    NoSuchEntryError,
    NoSuchManagedLedgerError,
    ReadOnlyError,
    StorageClosedError,
    StorageError,
    StorageFullError,
    WriteFailedError,
)
from magnetar.storage.ledger import RecoveryReport
from magnetar.storage.ledger_slot import AppendCallback, LedgerInfo
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.managed_ledger_factory import ManagedLedgerFactory
from magnetar.storage.metadata_store import MetadataStore, MetadataWriter, SqliteMetadataStore, bump_counter
from magnetar.storage.position import Position

__all__ = [
    "AppendCallback",
    "CorruptEntryError",
    "DataDirLockedError",
    "LedgerInfo",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "MetadataStore",
    "MetadataWriter",
    "NoSuchEntryError",
    "NoSuchManagedLedgerError",
    "Position",
    "ReadOnlyError",
    "RecoveryReport",
    "SqliteMetadataStore",
    "StorageClosedError",
    "StorageError",
    "StorageFullError",
    "WriteFailedError",
    "bump_counter",
]
