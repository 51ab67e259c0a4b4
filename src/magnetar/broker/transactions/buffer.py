"""A topic's transaction buffer (Pulsar's TopicTransactionBuffer).

A transactional message is stored as it arrives, like any other; what the buffer adds is
what dispatch may see. Nothing at or after the first entry of a transaction still open is
read (Pulsar's maxReadPosition), so neither its messages nor any later message overtake
the decision; once the commit or abort marker is stored, reading moves on, and the
messages of an aborted transaction, and the markers, are skipped for good.

A topic that never saw a transaction has no buffer and pays nothing. One that did keeps a
ledger property saying so (the topic's), and its buffer is rebuilt when it loads by reading its entries'
MessageMetadata: markers say which transactions ended and how, and a transactional entry
without a marker belongs to one still open (its coordinator ends it, or times it out).

Snapshots (Pulsar's transactionBufferSnapshotMaxTransactionCount and ...MinTimeInMillis)
spare a restart that reading: when enough transactions ended here, or enough time passed,
the buffer's state up to the topic's last durable entry (the open transactions that began
at or before it, the aborted ones whose markers the ledger still holds) is written to the
metadata store through the transaction log (grouped, off the event loop); a load reads it
and only the entries after it.

Each aborted transaction also leaves a range: the index of its first message here, its
marker's, and the producer its marker names (the coordinator's TxnMeta.producer: a Kafka
producer's id and epoch; a message's own producer name is not trusted). Kafka's Fetch
lists them as its aborted transactions; they are kept, snapshotted and trimmed with the
aborted set, and rebuilt from the markers by a load.
"""

from __future__ import annotations

import bisect
import json
import logging
import time
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import NamedTuple

from magnetar.broker.transactions.log import shared_log
from magnetar.storage import ManagedLedger, MetadataStore, Position
from magnetar.storage.message_finder import entry_first_index, last_visible
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import ABORT, TXN_ABORT_MARKER, TXN_COMMIT_MARKER, TxnId, marker_producer

log = logging.getLogger(__name__)
_REPLAY_CHUNK = 1000
_LOOK_PAST = 1000
_SNAPSHOTS = "/transactions/buffer-snapshot/"


def drop_snapshot(store: MetadataStore, ledger_name: str) -> None:
    """The topic is deleted: its snapshot goes (a topic made again under the name starts empty)."""
    shared_log(store).flush_now()
    store.delete(_SNAPSHOTS + ledger_name)


class AbortedRange(NamedTuple):
    """An aborted transaction's messages on a topic: from `first` to its marker at `last`
    (PIP-70 indexes), the marker at `at`, begun by `producer` (a producer name)."""

    last: int
    first: int
    producer: str
    at: Position


def hidden(metadata: pb.MessageMetadata, aborted: AbstractSet[TxnId]) -> bool:
    """A transaction's marker, or a message of one of the `aborted` transactions: no reader
    of the topic gets it (a Spark executor asks with the aborted set its driver found)."""
    if metadata.HasField("marker_type"):  # a transaction's, or a replicated subscription's
        return True
    return bool(aborted) and metadata.HasField("txnid_most_bits") and \
        TxnId(metadata.txnid_most_bits, metadata.txnid_least_bits) in aborted


class TransactionBuffer:
    def __init__(self, ledger: ManagedLedger, store: MetadataStore | None = None, snapshot_every: int = 1000,
                 snapshot_after_ms: int = 5000) -> None:
        """`store`: where snapshots go (None: none are taken); one is taken once
        `snapshot_every` transactions ended here since the last, or once one ended
        `snapshot_after_ms` after it."""
        self._ledger = ledger
        self.ongoing: dict[TxnId, Position] = {}
        """Open transactions with messages here, and the position of their first one."""
        self.first_index: dict[TxnId, int] = {}
        """Open transactions' first message here: its index (-1: unknown)."""
        self.aborted_ranges: list[AbortedRange] = []
        """Aborted transactions whose first message and producer are known, by their marker's index."""
        self._longest = 0
        """The most indexes an aborted range spans (from its first message to its marker)."""
        self.aborted: set[TxnId] = set()
        self._aborted_at: dict[TxnId, Position] = {}
        """Where each aborted transaction's marker is (its messages lie before it)."""
        self._max_read: Position | None = None
        self._marking: set[Position] = set()
        """Where markers are being stored: not ended here yet (see `_encode_snapshot`)."""
        self._store = store
        self._snapshot_every = snapshot_every
        self._snapshot_after = snapshot_after_ms / 1000
        self._ended_since_snapshot = 0
        self._snapshot_at = time.monotonic()
        self.snapshot_taken_ms = 0
        """Wall-clock milliseconds of the last snapshot written (0: none yet)."""
        self.committed_count = 0
        self.aborted_count = 0
        """Transactions ended here since the topic loaded (pulsar_txn_tb_*_total)."""

    @classmethod
    def load(cls, ledger: ManagedLedger, store: MetadataStore | None = None, snapshot_every: int = 1000,
             snapshot_after_ms: int = 5000) -> TransactionBuffer:
        """The buffer of a topic that has held transactions: its last snapshot, and its
        entries after it (all of them without one)."""
        buffer = cls(ledger, store, snapshot_every, snapshot_after_ms)
        buffer._replay(buffer._restore())
        return buffer

    @property
    def max_read_position(self) -> Position | None:
        """The first position dispatch may not read (None: no limit)."""
        return self._max_read

    def _update_max_read(self) -> None:
        self._max_read = min(self.ongoing.values()) if self.ongoing else None

    def appended(self, txn: TxnId, position: Position, first: int = -1) -> None:
        """A message of `txn` was given `position` (before it is durable); the first one here
        has index `first`."""
        if txn not in self.ongoing:
            self.ongoing[txn] = position
            self.first_index[txn] = first
            self._update_max_read()

    def marking(self, positions: Iterable[Position]) -> None:
        """Markers were given these positions (not yet durable): `ended` or `unmarked` follows."""
        self._marking.update(positions)

    def unmarked(self, positions: Iterable[Position]) -> None:
        """Markers that could not be stored."""
        self._marking.difference_update(positions)

    def ended(self, txn: TxnId, action: int, marker: Position | None = None, marker_index: int = -1,
              producer: str = "") -> None:
        """The marker of `txn` is stored (at `marker`, index `marker_index`, naming `producer`):
        its messages are delivered or dropped from now on."""
        self._marking.discard(marker)  # type: ignore[arg-type]
        first = self.first_index.pop(txn, -1)
        if action == ABORT:
            self.aborted.add(txn)
            at = marker or self._ledger.last_confirmed_position or Position(-1, -1)
            self._aborted_at[txn] = at
            self._add_range(AbortedRange(marker_index, first, producer, at))
            self.aborted_count += 1
        else:
            self.committed_count += 1
        if self.ongoing.pop(txn, None) is not None:
            self._update_max_read()
        self._ended_since_snapshot += 1
        if self._store is not None and (self._ended_since_snapshot >= self._snapshot_every
                                        or time.monotonic() - self._snapshot_at >= self._snapshot_after):
            self._take_snapshot()

    def _add_range(self, aborted: AbortedRange) -> None:
        if aborted.producer and 0 <= aborted.first <= aborted.last:
            bisect.insort(self.aborted_ranges, aborted)
            self._longest = max(self._longest, aborted.last - aborted.first)

    def aborted_between(self, start: int, end: int) -> list[AbortedRange]:
        """Aborted transactions with messages between indexes `start` and `end` (excluded), as
        Kafka's Fetch lists them: the marker at or after `start`, the first message before
        `end`. Ranges are looked at by their marker's index, from `start` on, up to the
        longest range past `end` (no later one can begin before it), and at most
        _LOOK_PAST of them past `end`: a transaction missed is still served as filler."""
        ranges = self.aborted_ranges
        found = []
        past = 0
        for at in range(bisect.bisect_left(ranges, (start,)), len(ranges)):
            aborted = ranges[at]
            if aborted.last >= end:
                past += 1
                if aborted.last > end + self._longest or past > _LOOK_PAST:
                    break
            if aborted.first < end:
                found.append(aborted)
        return found

    # -- snapshots
    def _take_snapshot(self) -> None:
        assert self._store is not None
        self._ended_since_snapshot = 0
        self._snapshot_at = time.monotonic()
        shared_log(self._store).write(_SNAPSHOTS + self._ledger.name, self._encode_snapshot).add_done_callback(
            _retrieve)

    def _encode_snapshot(self) -> bytes | None:
        """The state as of the last durable entry, encoded when the log's commit is dispatched;
        but not past a marker that is durable and not yet ended here (its storage thread's news
        is still on its way to the loop): a restart would read the transaction open from the
        snapshot and never read the marker after it, and so abort a committed transaction."""
        last = self._ledger.last_confirmed_position
        if last is None:
            return None
        if self._marking and (first_marker := min(self._marking)) <= last:
            last = self._ledger.previous_position(first_marker)
        first = self._ledger.first_position
        if first is not None:  # aborted transactions whose markers were trimmed hold nothing left
            for txn in [txn for txn, at in self._aborted_at.items() if at < first]:
                del self._aborted_at[txn]
                self.aborted.discard(txn)
            self.aborted_ranges = [aborted for aborted in self.aborted_ranges if aborted.at >= first]
        self.snapshot_taken_ms = int(time.time() * 1000)
        return json.dumps({
            "position": list(last),
            "ongoing": [[*txn, *at, self.first_index.get(txn, -1)] for txn, at in self.ongoing.items() if at <= last],
            "aborted": [[*txn, *at] for txn, at in self._aborted_at.items() if at <= last],
            "ranges": [[aborted.last, aborted.first, aborted.producer, *aborted.at]
                       for aborted in self.aborted_ranges if aborted.at <= last],
            "taken": self.snapshot_taken_ms,
        }).encode()

    def _restore(self) -> Position | None:
        """The last snapshot's state; the position after which entries must be read (None:
        there is none usable, read them all)."""
        raw = None if self._store is None else self._store.get(_SNAPSHOTS + self._ledger.name)
        if raw is None:
            return None
        try:
            data = json.loads(raw)
            position = Position(*data["position"])
            ongoing = {TxnId(most, least): Position(ledger_id, entry_id)
                       for most, least, ledger_id, entry_id, *_ in data["ongoing"]}
            first_index = {TxnId(most, least): int(first[0]) for most, least, _, _, *first in data["ongoing"] if first}
            aborted = {TxnId(most, least): Position(ledger_id, entry_id)
                       for most, least, ledger_id, entry_id in data["aborted"]}
            ranges = sorted(AbortedRange(int(last), int(first), str(producer), Position(ledger_id, entry_id))
                            for last, first, producer, ledger_id, entry_id in data.get("ranges", ()))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: transaction buffer snapshot unreadable (%s): reading every entry", self._ledger.name, exc)
            return None
        last = self._ledger.last_confirmed_position
        first = self._ledger.first_position
        if last is None or last < position or (first is not None and any(at < first for at in ongoing.values())):
            return None  # not this ledger's (a topic made again), or of entries since trimmed
        self.ongoing, self._aborted_at, self.first_index = ongoing, aborted, first_index
        for aborted_range in ranges:
            self._add_range(aborted_range)
        self.aborted = set(aborted)
        self.snapshot_taken_ms = int(data.get("taken", 0))
        return position

    def hides(self, metadata: pb.MessageMetadata) -> bool:
        """Whether dispatch skips (and acknowledges) this entry: a marker, or a message of an
        aborted transaction."""
        return hidden(metadata, self.aborted)

    def readable(self, entries: list[tuple[Position, bytes | None]]) -> list[tuple[Position, bytes | None]]:
        """The leading part of a read that lies before the max read position."""
        limit = self._max_read
        if limit is None or not entries or entries[-1][0] < limit:
            return entries
        return [entry for entry in entries if entry[0] < limit]

    def last_visible(self, last: Position) -> tuple[Position, pb.MessageMetadata | None] | None:
        """The last entry at or before `last` a consumer may receive (not past the max read
        position, not a marker, not aborted), and its metadata: what GetLastMessageId names,
        so a reader does not wait for a message that never comes. Looks back over at most
        a thousand hidden entries (then names the entry it stopped at); None: there is none."""
        ledger = self._ledger
        position = last if self._max_read is None or last < self._max_read else ledger.previous_position(
            self._max_read)
        return last_visible(ledger, position, self.hides)

    def _replay(self, after: Position | None) -> None:
        position = self._ledger.first_position if after is None else self._ledger.next_position(after)
        first = self._ledger.first_position
        if first is not None and position is not None and position < first:
            position = first
        replayed = 0
        while position is not None and (chunk := self._ledger.read_entries(position, _REPLAY_CHUNK)):
            self._replay_chunk(chunk)
            replayed += len(chunk)
            position = self._ledger.next_position(chunk[-1][0])
        self._update_max_read()
        log.info("%s: transaction buffer rebuilt from %s and %d entries: %d open, %d aborted", self._ledger.name,
                 "no snapshot" if after is None else f"a snapshot at {after}", replayed, len(self.ongoing),
                 len(self.aborted))

    def _replay_chunk(self, chunk: Iterable[tuple[Position, bytes]]) -> None:
        for at, data in chunk:
            try:
                metadata = parse_message_metadata(data)
            except WireError:
                continue
            if not metadata.HasField("txnid_most_bits"):
                continue
            txn = TxnId(metadata.txnid_most_bits, metadata.txnid_least_bits)
            if metadata.marker_type == TXN_COMMIT_MARKER:
                self.ongoing.pop(txn, None)
                self.first_index.pop(txn, None)
            elif metadata.marker_type == TXN_ABORT_MARKER:
                self.ongoing.pop(txn, None)
                self.aborted.add(txn)
                self._aborted_at[txn] = at
                first = self.first_index.pop(txn, -1)
                self._add_range(AbortedRange(entry_first_index(data), first, marker_producer(metadata), at))
            elif txn not in self.aborted and txn not in self.ongoing:
                self.ongoing[txn] = at
                self.first_index[txn] = entry_first_index(data)


def _retrieve(done: object) -> None:
    """A snapshot that could not be written is only a longer read at the next load."""
    if not done.cancelled() and done.exception() is not None:  # type: ignore[attr-defined]
        log.warning("transaction buffer snapshot not written: %s", done.exception())  # type: ignore[attr-defined]
