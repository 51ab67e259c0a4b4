"""The executor side of `magnetar.spark.compact`: a split of the compacted view, phase one
over it (each key's last message in the split) and phase two (its compacted entries).

Both phases call the broker compactor's own functions (`entry_messages`,
`compacted_entry`) on the entries they read, so an entry is kept, marked or rebatched
byte for byte as the broker's compactor would; only the bookkeeping differs: phase one's
latest-per-key is merged across splits by Spark instead of held in one dict.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from magnetar.broker.compaction.compactor import CompactionOptions, PhaseOne, compacted_entry, entry_messages
from magnetar.spark.offsets import TopicPartition
from magnetar.spark.rows import RowFilter
from magnetar.spark.storage_reader import EntryRange, entries_of_range, open_data_dir
from magnetar.storage import Position
from magnetar.storage.compacted_ledger import CompactedLedgerStore
from magnetar.wire.txn import TxnId

#: (ledger id, entry id, batch index, deletes): a key's last message seen so far.
LastMessage = tuple[int, int, int, bool]
#: (key, ledger id, entry id, batch index): a message phase two keeps.
Retained = tuple[str, int, int, int]
_READ_GROUP = 256


class CompactionChangedError(RuntimeError):
    """The compaction the job started from was replaced while it ran."""


@dataclass(frozen=True, slots=True)
class Split:
    """One task's share of the compacted view: `entries` entries of the previous compacted
    ledger from index `start` (`compacted`), or of the topic from (ledger_id, start)."""

    compacted: bool
    tp: TopicPartition
    storage_name: str
    ledger_id: int
    start: int
    entries: int
    first: tuple[int, int]
    """The original position of the split's first entry: where its retained messages begin."""
    aborted: frozenset[TxnId] | None = None
    """On a topic that holds transactions, the aborted ones: their messages are left out."""


def split_entries(path: str, split: Split) -> Iterator[tuple[Position, bytes]]:
    """The entries of a split with their original positions."""
    if split.compacted:
        yield from _compacted_entries(path, split)
        return
    work = EntryRange(split.tp, split.storage_name, split.ledger_id, split.start, split.entries, RowFilter(),
                      split.aborted)
    for ledger_id, entry_id, data in entries_of_range(path, work, True):
        yield Position(ledger_id, entry_id), data


def _compacted_entries(path: str, split: Split) -> Iterator[tuple[Position, bytes]]:
    store = CompactedLedgerStore(open_data_dir(path), split.storage_name)
    try:
        current = store.current
        if current is None or current.info.ledger_id != split.ledger_id:
            raise CompactionChangedError(f"{split.tp.storage_topic}: the compacted ledger the job started from "
                                         f"({split.ledger_id}) was replaced while it ran; run the job again")
        index, end = split.start, split.start + split.entries
        while index < end:
            run = current.read(index, min(_READ_GROUP, end - index))
            if not run:
                raise CompactionChangedError(f"{split.tp.storage_topic}: compacted entries from {index} are gone")
            yield from run
            index += len(run)
    finally:
        store.close()


@dataclass(slots=True)
class SplitSummary:
    """Phase one's answer for a split: each key's last message in it (deletes included, so
    that a later split's delete wins over an earlier split's value when Spark merges them)."""

    last: dict[str, LastMessage]
    entries: int
    messages: int


def last_messages(path: str, split: Split, options: CompactionOptions) -> SplitSummary:
    summary = SplitSummary({}, 0, 0)
    last = summary.last
    for position, data in split_entries(path, split):
        summary.entries += 1
        _metadata, found = entry_messages(position, data, options)
        summary.messages += len(found)
        for index, key, deletes in found:
            if key is not None:
                last[key] = (position.ledger_id, position.entry_id, index, deletes)
    return summary


def later(a: LastMessage, b: LastMessage) -> LastMessage:
    """The later of two messages of one key (positions are unique, so never a tie)."""
    return a if a[:3] > b[:3] else b


def compacted_split(path: str, split: Split, retained: Iterable[Retained],
                    options: CompactionOptions) -> Iterator[tuple[int, int, bytes]]:
    """Phase two on a split: (ledger id, entry id, compacted entry) in order.

    `retained` are the messages of this split that phase one kept; a split without any
    is not even read (unless keyless messages are kept, which phase one does not track).
    """
    state = PhaseOne(options)
    state.latest = {key: (Position(ledger_id, entry_id), index) for key, ledger_id, entry_id, index in retained}
    if not state.latest and not options.retain_null_key:
        return
    first = None if options.retain_null_key else min(ref[0] for ref in state.latest.values())
    for position, data in split_entries(path, split):
        if first is not None and position < first:
            continue
        entry = compacted_entry(position, data, state)
        if entry is not None:
            yield position.ledger_id, position.entry_id, entry
