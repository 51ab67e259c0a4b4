"""What the coordinator keeps of a transaction, as its log stores it, and its counts.

Kept apart from the coordinator's logic: the record's shape is what a restart reads back.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from magnetar.wire.txn import COMMIT, TxnId

OPEN, COMMITTING, ABORTING = "OPEN", "COMMITTING", "ABORTING"
#: Upper bounds (ms) of Pulsar's transaction execution-latency buckets (pulsar_txn_execution_latency_le_*).
LATENCY_BOUNDS_MS = (10, 20, 50, 100, 500, 1000, 5000, 15000, 30000, 60000, 300000, 1500000, 3000000)


@dataclass
class CoordinatorStats:
    """Counts since the broker started (Pulsar's TransactionMetadataStoreStats)."""

    created: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    latency_buckets: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))
    """Ended transactions by milliseconds from opened to ended: [i] counts those over the
    bound before LATENCY_BOUNDS_MS[i] and up to it (not cumulative), the last those over all."""

    def ended(self, action: int, opened: float | None) -> None:
        if action == COMMIT:
            self.committed += 1
        else:
            self.aborted += 1
        if opened is not None:
            ms = (time.monotonic() - opened) * 1000
            self.latency_buckets[next((i for i, bound in enumerate(LATENCY_BOUNDS_MS) if ms <= bound),
                                      len(LATENCY_BOUNDS_MS))] += 1


@dataclass
class TxnMeta:
    txn: TxnId
    status: str
    deadline: float
    """Wall-clock seconds when an open transaction is aborted."""
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    owner: str | None = None
    """The role that opened it (None: authentication is off): only that role, or a super
    user, may use or end it."""
    stored: bool = False
    """Whether the store holds its record (one with no participant needs none)."""
    saving: asyncio.Future[None] | None = None
    """The log write of its last participants, until it is durable."""
    opened: float | None = None
    """time.monotonic() when it was opened (None: opened before a restart)."""
    opened_at: float = 0.0
    """Wall-clock seconds when it was opened (0: a record written before magnetar kept it)."""
    unrecorded: str | None = None
    """Why the log could not name one of its participants (whose messages may be stored):
    it can only abort."""
    producer: str = ""
    """Whose transaction it is, as the protocol handler that opened it named it (a Kafka
    producer's id and epoch): its markers name it ("" for a Pulsar client's)."""

    def encode(self) -> bytes:
        return json.dumps({"status": self.status, "deadline": self.deadline, "partitions": self.partitions,
                           "subscriptions": self.subscriptions, "owner": self.owner,
                           "opened": self.opened_at, **({"producer": self.producer} if self.producer else {})}).encode()

    @classmethod
    def decode(cls, txn: TxnId, raw: bytes) -> TxnMeta:
        data = json.loads(raw)
        return cls(txn, data["status"], float(data["deadline"]), list(data["partitions"]),
                   [(topic, sub) for topic, sub in data["subscriptions"]], data.get("owner"),
                   opened_at=float(data.get("opened", 0.0)), producer=str(data.get("producer", "")))
