"""Find the first entry published at or after a time (seek by time, TTL).

An entry's time is the broker's `broker_timestamp` from its PIP-70 prefix when
it has one (never going backwards, so a binary search is exact), else the
producer's `publish_time`. Only that prefix is read when present, so a search
over a million entries reads about twenty prefixes and nothing behind them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position
from magnetar.wire.entry import first_message_index, parse_message_metadata, peek_broker_entry_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb

_LOOK_BACK = 1000
"""Hidden entries (markers, aborted messages) last_visible looks back over at most."""


def entry_timestamp(entry: bytes) -> int:
    bem = peek_broker_entry_metadata(entry)
    if bem is not None and bem.HasField("broker_timestamp"):
        return bem.broker_timestamp
    return parse_message_metadata(entry).publish_time


@dataclass(slots=True)
class SearchResult:
    position: Position | None  # None: every entry is older than the time
    entries_read: int


class EntrySequence:
    """The entries of a managed ledger numbered 0..n-1 across its ledgers."""

    def __init__(self, ledger: ManagedLedger) -> None:
        self.ledger = ledger
        self._firsts: list[int] = []  # ordinal of each non-empty ledger's first entry
        self._ledger_ids: list[int] = []
        ordinal = 0
        for info in ledger.ledgers:
            if info.entries > 0:
                self._firsts.append(ordinal)
                self._ledger_ids.append(info.ledger_id)
                ordinal += info.entries
        self.size = ordinal

    def position(self, ordinal: int) -> Position:
        if not 0 <= ordinal < self.size:
            raise IndexError(ordinal)
        span = bisect.bisect_right(self._firsts, ordinal) - 1
        return Position(self._ledger_ids[span], ordinal - self._firsts[span])

    def ordinal(self, position: Position | None) -> int:
        """The number of `position` (None, the end of a search, is `size`): ranges of entries
        found by the searches here can be counted and split (the Spark source's partitions)."""
        if position is None:
            return self.size
        span = bisect.bisect_left(self._ledger_ids, position.ledger_id)
        if span == len(self._ledger_ids) or self._ledger_ids[span] != position.ledger_id:
            # a ledger without entries: its next neighbour's first entry
            return self._firsts[span] if span < len(self._firsts) else self.size
        return self._firsts[span] + position.entry_id

    def read(self, ordinal: int) -> bytes:
        return self.ledger.read_entry(self.position(ordinal))


def entry_last_index(entry: bytes) -> int:
    """The PIP-70 index of the entry's last message; -1 for entries stored without one."""
    bem = peek_broker_entry_metadata(entry)
    return bem.index if bem is not None and bem.HasField("index") else -1


def entry_first_index(entry: bytes) -> int:
    """The PIP-70 index of the entry's first message: its last, less the batch's other messages."""
    return first_message_index(parse_message_metadata(entry), entry_last_index(entry))


def first_at_or_above(ledger: ManagedLedger, key: Callable[[bytes], int], target: int) -> SearchResult:
    """Binary search for the first entry whose key is >= target (keys never decrease)."""
    entries = EntrySequence(ledger)
    low, high, reads = 0, entries.size, 0
    while low < high:
        middle = (low + high) // 2
        reads += 1
        if key(entries.read(middle)) < target:
            low = middle + 1
        else:
            high = middle
    return SearchResult(entries.position(low) if low < entries.size else None, reads)


def find_first_at_or_after(ledger: ManagedLedger, timestamp: int) -> SearchResult:
    """The first entry whose time is >= `timestamp` (seek by time, TTL)."""
    return first_at_or_above(ledger, entry_timestamp, timestamp)


def find_by_index(ledger: ManagedLedger, index: int) -> SearchResult:
    """The entry holding the message with PIP-70 index `index` (or the first after it).

    An entry's index is that of its last message, so the entry holding message
    `index` is the first whose index is >= it.
    """
    return first_at_or_above(ledger, entry_last_index, index)


def last_visible(ledger: ManagedLedger, last: Position,
                 hides: Callable[[pb.MessageMetadata], bool]) -> tuple[Position, pb.MessageMetadata | None] | None:
    """The last entry at or before `last` that `hides` lets consumers receive, and its
    metadata: what GetLastMessageId names, so a reader does not wait for a message that never
    comes. After _LOOK_BACK hidden entries, the entry it stopped at; None: there is none."""
    first = ledger.first_position
    position = last
    for _ in range(_LOOK_BACK):
        if first is None or position < first:
            return None
        try:
            metadata = parse_message_metadata(ledger.read_entry(position))
        except WireError:
            return position, None
        if not hides(metadata):
            return position, metadata
        position = ledger.previous_position(position)
    return position, None
