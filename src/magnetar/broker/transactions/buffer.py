"""A topic's transaction buffer (Pulsar's TopicTransactionBuffer, without snapshots yet).

A transactional message is stored as it arrives, like any other; what the buffer adds is
what dispatch may see. Nothing at or after the first entry of a transaction still open is
read (Pulsar's maxReadPosition), so neither its messages nor any later message overtake
the decision; once the commit or abort marker is stored, reading moves on, and the
messages of an aborted transaction, and the markers, are skipped for good.

A topic that never saw a transaction has no buffer and pays nothing. One that did keeps a
ledger property saying so (the topic's), and its buffer is rebuilt when it loads by reading its entries'
MessageMetadata: markers say which transactions ended and how, and a transactional entry
without a marker belongs to one still open (its coordinator ends it, or times it out).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from collections.abc import Set as AbstractSet

from magnetar.storage import ManagedLedger, Position
from magnetar.storage.message_finder import last_visible
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import ABORT, TXN_ABORT_MARKER, TXN_COMMIT_MARKER, TxnId

log = logging.getLogger(__name__)
_REPLAY_CHUNK = 1000


def hidden(metadata: pb.MessageMetadata, aborted: AbstractSet[TxnId]) -> bool:
    """A transaction's marker, or a message of one of the `aborted` transactions: no reader
    of the topic gets it (a Spark executor asks with the aborted set its driver found)."""
    if metadata.HasField("marker_type"):  # a transaction's, or a replicated subscription's
        return True
    return bool(aborted) and metadata.HasField("txnid_most_bits") and \
        TxnId(metadata.txnid_most_bits, metadata.txnid_least_bits) in aborted


class TransactionBuffer:
    def __init__(self, ledger: ManagedLedger) -> None:
        self._ledger = ledger
        self.ongoing: dict[TxnId, Position] = {}
        """Open transactions with messages here, and the position of their first one."""
        self.aborted: set[TxnId] = set()
        self._max_read: Position | None = None

    @classmethod
    def load(cls, ledger: ManagedLedger) -> TransactionBuffer:
        """The buffer of a topic that has held transactions, rebuilt from its entries."""
        buffer = cls(ledger)
        buffer._replay()
        return buffer

    @property
    def max_read_position(self) -> Position | None:
        """The first position dispatch may not read (None: no limit)."""
        return self._max_read

    def _update_max_read(self) -> None:
        self._max_read = min(self.ongoing.values()) if self.ongoing else None

    def appended(self, txn: TxnId, position: Position) -> None:
        """A message of `txn` was given `position` (before it is durable)."""
        if txn not in self.ongoing:
            self.ongoing[txn] = position
            self._update_max_read()

    def ended(self, txn: TxnId, action: int) -> None:
        """The marker of `txn` is stored: its messages are delivered or dropped from now on."""
        if action == ABORT:
            self.aborted.add(txn)
        if self.ongoing.pop(txn, None) is not None:
            self._update_max_read()

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

    def _replay(self) -> None:
        position = self._ledger.first_position
        replayed = 0
        while position is not None and (chunk := self._ledger.read_entries(position, _REPLAY_CHUNK)):
            self._replay_chunk(chunk)
            replayed += len(chunk)
            position = self._ledger.next_position(chunk[-1][0])
        self._update_max_read()
        log.info("%s: transaction buffer rebuilt from %d entries: %d open, %d aborted", self._ledger.name, replayed,
                 len(self.ongoing), len(self.aborted))

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
            elif metadata.marker_type == TXN_ABORT_MARKER:
                self.ongoing.pop(txn, None)
                self.aborted.add(txn)
            elif txn not in self.aborted:
                self.ongoing.setdefault(txn, at)
