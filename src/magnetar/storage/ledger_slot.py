"""A managed ledger's table of contents: ledgers as listed in the metadata store and as held in memory."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from magnetar.storage.ledger import Ledger
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

AppendCallback = Callable[[Position | None, BaseException | None], None]


@dataclass(frozen=True, slots=True)
class LedgerInfo:
    """A ledger as listed in the metadata store: the managed ledger's table of contents."""

    ledger_id: int
    entries: int
    size: int
    created_at: float
    closed_at: float | None

    def to_json(self) -> bytes:
        return json.dumps(
            {"entries": self.entries, "size": self.size, "created_at": self.created_at, "closed_at": self.closed_at}
        ).encode()

    @classmethod
    def from_json(cls, ledger_id: int, raw: bytes) -> LedgerInfo:
        fields = json.loads(raw)
        return cls(ledger_id, fields["entries"], fields["size"], fields["created_at"], fields["closed_at"])


@dataclass(eq=False, slots=True)
class LedgerSlot:
    """In-memory state of one ledger.

    `assigned` counts positions handed out (it runs ahead of the files); `durable` counts
    entries written, synced and therefore readable. A sealed ledger gets no new positions.
    """

    ledger_id: int
    created_at: float
    closed_at: float | None = None
    sealed: bool = False
    listed: bool = False
    assigned: int = 0
    assigned_bytes: int = 0
    durable: int = 0
    durable_bytes: int = 0
    roll_at: float = math.inf
    ledger: Ledger | None = None

    def info(self) -> LedgerInfo:
        return LedgerInfo(self.ledger_id, self.durable, self.durable_bytes, self.created_at, self.closed_at)


PendingAppend = tuple[LedgerSlot, Position, bytes, AppendCallback | None]
"""A plain tuple, not a NamedTuple: one is built per append, and a group is transposed
with zip(*group), both of which run in C."""


def notify_appends(
    positions: Sequence[Position], callbacks: Sequence[AppendCallback | None], error: BaseException | None
) -> None:
    for position, callback in zip(positions, callbacks, strict=True):
        if callback is None:
            continue
        try:
            callback(None if error else position, error)
        except Exception:
            log.exception("append callback failed for %s", position)
