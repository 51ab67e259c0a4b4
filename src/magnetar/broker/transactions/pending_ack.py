"""A subscription's acknowledgements held by open transactions (Pulsar's PendingAckHandle).

An ACK in a transaction does not move the cursor: its positions are held here, kept from
every consumer of the subscription, until the transaction ends. A commit acknowledges them
for good, an abort gives them back to be delivered again. Each transaction's positions are
a record in the metadata store, written before the ACK is answered, so a restart holds
them again and the coordinator, ending the transaction after it, finds them.

A position is held by one transaction at a time: an ACK naming one that another transaction
holds, or one already acknowledged, fails with TransactionConflict, as in Pulsar.
"""

from __future__ import annotations

import json

from magnetar.broker.errors import BrokerServiceError
from magnetar.storage import MetadataStore, Position
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import TxnId

_PREFIX = "/transactions/pending-ack/"
#: Positions one transaction may hold on one subscription: each ACK rewrites its record.
MAX_POSITIONS_PER_TXN = 10_000


def drop_topic(store: MetadataStore, ledger_name: str) -> None:
    """The topic is deleted: the records of all its subscriptions go."""
    store.delete_prefix(f"{_PREFIX}{ledger_name}/")


class PendingAcks:
    def __init__(self, store: MetadataStore, ledger_name: str, subscription: str) -> None:
        self._store = store
        self._prefix = f"{_PREFIX}{ledger_name}/{subscription}/"
        self.positions: dict[Position, TxnId] = {}
        """Every held position and the transaction holding it."""
        self._by_txn: dict[TxnId, list[Position]] = {}
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
            held = pending._by_txn[txn] = [Position(ledger_id, entry_id) for ledger_id, entry_id in json.loads(raw)]
            pending.positions.update(dict.fromkeys(held, txn))
        return pending

    @property
    def txn_count(self) -> int:
        """Open transactions holding acknowledgements here."""
        return len(self._by_txn)

    def held_by(self, txn: TxnId) -> list[Position]:
        return list(self._by_txn.get(txn, ()))

    def _key(self, txn: TxnId) -> str:
        return f"{self._prefix}{txn.most}:{txn.least}"

    def hold(self, txn: TxnId, positions: list[Position]) -> list[Position]:
        """Hold `positions` for `txn` (durably); gives those it did not hold already."""
        held = self._by_txn.get(txn, [])
        new = []
        for position in dict.fromkeys(positions):
            owner = self.positions.get(position)
            if owner is None:
                new.append(position)
            elif owner != txn:
                raise BrokerServiceError(pb.TransactionConflict,
                                         f"{position} is acknowledged by transaction {owner}, still open")
        if not new:
            return []
        if len(held) + len(new) > MAX_POSITIONS_PER_TXN:
            raise BrokerServiceError(pb.NotAllowedError, f"a transaction acknowledges at most {MAX_POSITIONS_PER_TXN} "
                                     "entries of one subscription")
        held = held + new
        self._store.put(self._key(txn), json.dumps([list(p) for p in held]).encode())
        self._by_txn[txn] = held
        self.positions.update(dict.fromkeys(new, txn))
        return new

    def release(self, txn: TxnId) -> list[Position]:
        """The positions `txn` held, no longer held (its record stays until `forget`)."""
        held = self._by_txn.pop(txn, [])
        for position in held:
            self.positions.pop(position, None)
        return held

    def forget(self, txn: TxnId) -> None:
        """The transaction's end is applied (and the cursor stored): its record goes."""
        self._store.delete(self._key(txn))

    def drop(self) -> None:
        """The subscription is deleted: every record of it goes."""
        self._store.delete_prefix(self._prefix)
        self.positions.clear()
        self._by_txn.clear()
