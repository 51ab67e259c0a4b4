"""A subscription's acknowledgements held by open transactions (Pulsar's PendingAckHandle).

An ACK in a transaction does not move the cursor: its positions are held here, kept from
every consumer of the subscription, until the transaction ends. A commit acknowledges them
for good, an abort gives them back to be delivered again. Each transaction's positions are
a record in the metadata store, written before the ACK is answered, so a restart holds
them again and the coordinator, ending the transaction after it, finds them.

A position is held by one transaction at a time: an ACK naming one that another transaction
holds, or one already acknowledged, fails with TransactionConflict, as in Pulsar. One message
of a batch (an ACK with an ack_set) holds that message's index only: other transactions may
hold the batch's other messages, and a commit acknowledges the indexes it held (the whole
entry once none is left).
"""

from __future__ import annotations

import asyncio
import json
import weakref

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.transactions import PENDING_ACKS_PROPERTY
from magnetar.broker.transactions.log import shared_log
from magnetar.storage import ManagedLedger, MetadataStore, Position
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import TxnId

_PREFIX = "/transactions/pending-ack/"
_UNMARKED_KEY = "/transactions/pending-ack-unmarked"
"""Written once, by the first run that marks topics (PENDING_ACKS_PROPERTY): the
subscriptions whose held acks an earlier version stored without the mark. They still load."""
#: Positions one transaction may hold on one subscription: each ACK rewrites its record.
MAX_POSITIONS_PER_TXN = 10_000


def may_hold(store: MetadataStore, ledger: ManagedLedger, subscription: str) -> bool:
    """Whether the subscription may have held acks stored: its topic was marked at its first
    transactional ack, or an earlier version, which did not mark, left records for it."""
    return (ledger.get_property(PENDING_ACKS_PROPERTY) is not None
            or f"{ledger.name}/{subscription}" in _unmarked(store))


def _unmarked(store: MetadataStore) -> frozenset[str]:
    """One scan of the whole prefix, once per store ever, instead of one per subscription
    at every topic load (the previous version's way)."""
    unmarked = _UNMARKED.get(store)
    if unmarked is None:
        raw = store.get(_UNMARKED_KEY)
        if raw is None:
            found = sorted({key[len(_PREFIX):].rsplit("/", 1)[0] for key in store.list(_PREFIX)})
            raw = json.dumps(found).encode()
            store.put(_UNMARKED_KEY, raw)
        unmarked = _UNMARKED[store] = frozenset(json.loads(raw))
    return unmarked


_UNMARKED: weakref.WeakKeyDictionary[MetadataStore, frozenset[str]] = weakref.WeakKeyDictionary()


def drop_topic(store: MetadataStore, ledger_name: str) -> None:
    """The topic is deleted: the records of all its subscriptions go (after what the log
    has queued, which could otherwise write one back)."""
    shared_log(store).flush_now()
    store.delete_prefix(f"{_PREFIX}{ledger_name}/")


class PendingAcks:
    def __init__(self, store: MetadataStore, ledger_name: str, subscription: str) -> None:
        self._store = store
        self._log = shared_log(store)
        self._prefix = f"{_PREFIX}{ledger_name}/{subscription}/"
        self.positions: dict[Position, TxnId] = {}
        """Every position held whole and the transaction holding it."""
        self.indexes: dict[Position, dict[int, TxnId]] = {}
        """Batches held in part: each held index and the transaction holding it."""
        self._by_txn: dict[TxnId, dict[Position, frozenset[int] | None]] = {}
        """What each transaction holds: a position whole (None) or some of its indexes."""
        self._saving: dict[TxnId, asyncio.Future[None]] = {}
        self.committed_count = 0
        self.aborted_count = 0
        """Transactions that ended holding acknowledgements here since it loaded (pulsar_txn_tp_*)."""

    @classmethod
    def load(cls, store: MetadataStore, ledger_name: str, subscription: str) -> PendingAcks | None:
        """The subscription's held positions as the last run left them (None: there are none)."""
        pending = cls(store, ledger_name, subscription)
        keys = store.list(pending._prefix)
        if not keys:
            return None
        for key in keys:
            raw = store.get(key)
            if raw is None:
                continue
            most, least = key.rsplit("/", 1)[1].split(":")
            txn = TxnId(int(most), int(least))
            for ledger_id, entry_id, *indexes in json.loads(raw):
                pending._take(txn, Position(ledger_id, entry_id), frozenset(indexes[0]) if indexes else None)
        return pending

    @property
    def txn_count(self) -> int:
        """Open transactions holding acknowledgements here."""
        return len(self._by_txn)

    def held_by(self, txn: TxnId) -> list[Position]:
        return list(self._by_txn.get(txn, ()))

    def held_indexes(self, position: Position) -> frozenset[int]:
        """The indexes of a batch open transactions hold."""
        return frozenset(self.indexes.get(position, ()))

    def _key(self, txn: TxnId) -> str:
        return f"{self._prefix}{txn.most}:{txn.least}"

    def _take(self, txn: TxnId, position: Position, indexes: frozenset[int] | None) -> None:
        held = self._by_txn.setdefault(txn, {})
        if indexes is None:
            held[position] = None
            self.positions[position] = txn
            return
        held[position] = held.get(position, frozenset()) | indexes  # type: ignore[operator]
        self.indexes.setdefault(position, {}).update(dict.fromkeys(indexes, txn))

    def hold(self, txn: TxnId, positions: list[Position]) -> list[Position]:
        """Hold `positions` whole for `txn`; gives those it did not hold already. Held at
        once; durable with the record `saving(txn)` waits for."""
        new = []
        for position in dict.fromkeys(positions):
            owner = self.positions.get(position)
            if owner is None:
                others = {holder for holder in self.indexes.get(position, {}).values() if holder != txn}
                if others:
                    raise BrokerServiceError(pb.TransactionConflict, f"messages of {position} are acknowledged by "
                                             f"transaction {others.pop()}, still open")
                new.append(position)
            elif owner != txn:
                raise BrokerServiceError(pb.TransactionConflict,
                                         f"{position} is acknowledged by transaction {owner}, still open")
        if new:
            self._check_size(txn, len(new))
            for position in new:
                self._take(txn, position, None)
            self._write(txn)
        return new

    def hold_indexes(self, txn: TxnId, position: Position, indexes: frozenset[int]) -> bool:
        """Hold some messages (`indexes`) of the batch at `position` for `txn` (as `hold`);
        False when it held them already."""
        owner = self.positions.get(position)
        if owner is not None and owner != txn:
            raise BrokerServiceError(pb.TransactionConflict,
                                     f"{position} is acknowledged by transaction {owner}, still open")
        held = self.indexes.get(position, {})
        taken = next((index for index in indexes if held.get(index, txn) != txn), None)
        if taken is not None:
            raise BrokerServiceError(pb.TransactionConflict, f"message {taken} of {position} is acknowledged by "
                                     f"transaction {held[taken]}, still open")
        if owner is not None or indexes <= {index for index, holder in held.items() if holder == txn}:
            return False
        if position not in self._by_txn.get(txn, {}):
            self._check_size(txn, 1)
        self._take(txn, position, indexes)
        self._write(txn)
        return True

    def _check_size(self, txn: TxnId, more: int) -> None:
        if len(self._by_txn.get(txn, {})) + more > MAX_POSITIONS_PER_TXN:
            raise BrokerServiceError(pb.NotAllowedError, f"a transaction acknowledges at most {MAX_POSITIONS_PER_TXN} "
                                     "entries of one subscription")

    def _write(self, txn: TxnId) -> None:
        """The transaction's record, in the transaction log's next group commit (off the loop)."""
        self._saving[txn] = self._log.write(self._key(txn), lambda: self._encode(txn))

    def _encode(self, txn: TxnId) -> bytes | None:
        held = self._by_txn.get(txn)
        if held is None:  # ended before its commit was dispatched: `forget` deletes it
            return None
        return json.dumps([[*position] if indexes is None else [*position, sorted(indexes)]
                           for position, indexes in held.items()]).encode()

    def saving(self, txn: TxnId) -> asyncio.Future[None] | None:
        """The write of what `txn` holds here, until it is durable (None: it is)."""
        saving = self._saving.get(txn)
        if saving is not None and saving.done():
            del self._saving[txn]
            return None
        return saving

    def release(self, txn: TxnId) -> dict[Position, frozenset[int] | None]:
        """Everything `txn` held, no longer held: positions whole (None) or some of their
        indexes (its record stays until `forget`)."""
        held = self._by_txn.pop(txn, {})
        for position, indexes in held.items():
            if indexes is None:
                self.positions.pop(position, None)
                continue
            holders = self.indexes.get(position, {})
            for index in indexes:
                holders.pop(index, None)
            if not holders:
                self.indexes.pop(position, None)
        return held

    def forget(self, txn: TxnId) -> None:
        """The transaction's end is applied (and the cursor stored): its record goes with
        the log's next commit, before the coordinator's record (queued after it) does."""
        self._saving.pop(txn, None)
        self._log.forget_later(self._key(txn))

    def drop(self) -> None:
        """The subscription is deleted: every record of it goes (its writes queued in the
        log become deletions first, so none writes a record back)."""
        self._by_txn.clear()
        self._saving.clear()
        self.positions.clear()
        self.indexes.clear()
        self._log.flush_now()
        self._store.delete_prefix(self._prefix)
