"""Tunables of the managed-ledger storage, named after Pulsar's broker.conf keys."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ManagedLedgerConfig:
    """Limits and durability policy shared by every managed ledger of a factory.

    Each field documents the broker.conf key it stands for, so the broker can map a Pulsar
    configuration onto it without a translation table of its own.
    """

    max_entries_per_ledger: int = 50_000
    """managedLedgerMaxEntriesPerLedger: roll over to a new ledger after this many entries."""

    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024
    """managedLedgerMaxSizePerLedgerMbytes (in bytes here): roll over past this data-file size."""

    max_ledger_rollover_time_seconds: float = 240 * 60
    """managedLedgerMaxLedgerRolloverTimeMinutes (in seconds here): roll over ledgers this old,
    full or not, even on a topic gone idle, so that consumed data becomes trimmable."""

    min_ledger_rollover_time_seconds: float = 0
    """managedLedgerMinLedgerRolloverTimeMinutes (in seconds here): a full ledger keeps taking
    entries until it is this old, so a burst does not make a swarm of tiny ledgers."""

    retention_time_seconds: float = 0
    """defaultRetentionTimeInMinutes (in seconds here): consumed ledgers closed longer ago
    than this are trimmed; -1 keeps them forever. Each managed ledger may override it."""

    retention_size_bytes: int = 0
    """defaultRetentionSizeInMB (in bytes here): consumed ledgers are trimmed, oldest first,
    while what remains is at least this big; -1 is no limit."""

    sync_data: bool = True
    """journalSyncData: fsync before reporting an append durable. False trusts the page cache,
    so an append survives a process crash but not a power loss."""

    cache_size_bytes: int = 64 * 1024 * 1024
    """managedLedgerCacheSizeMB (in bytes here): recent entries kept in memory so that readers
    tailing a topic are served without touching the files."""

    cache_max_age_seconds: float = 1.0
    """managedLedgerCacheEvictionTimeThresholdMillis (in seconds here): cached entries older
    than this are dropped. A reader tailing a topic reads an entry within milliseconds of its
    append; one further behind reads the files (the page cache) anyway, so older entries only
    held memory."""

    group_commit_max_delay_seconds: float = 0.001
    """How long the sync thread may wait after the first queued append to gather a larger group.
    Every append in the group pays this as extra latency, so keep it small."""

    group_commit_max_bytes: int = 512 * 1024
    """Bytes queued by one managed ledger that end the wait above at once (BookKeeper's
    journalBufferedWritesThreshold, same default). A producer with a full window adds nothing
    while it waits for its receipts, so waiting longer would only idle the disk: with 1,000
    appends of 1 KB in flight this took group commit from 0.34-0.59 to 0.79-0.88 of plain
    writes with one fsync (benchmarks/storage_bench.py)."""

    max_open_files: int = 512
    """managedLedgerMaxOpenFiles (magnetar's own key; BookKeeper's bookie calls it openFileLimit):
    ledger files kept open at once. Closed ledgers are reopened on demand when read, so this
    bounds descriptors however many topics exist. Half a typical soft limit of 1024: even where
    the limit cannot be raised, the other half is left for connections, the metadata store
    and the rest of the process."""
