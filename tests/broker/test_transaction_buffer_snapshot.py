"""A transaction buffer's snapshot taken while markers are durable but not yet ended in it
(their storage thread's news still on its way to the loop, or later markers of the same
append not yet handled): it must not claim them, or a restart reads those transactions as
open from it, never reads their markers (they lie before its position) and has them
aborted, committed ones included (issue 46)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from magnetar.broker.transactions.buffer import TransactionBuffer
from magnetar.broker.transactions.log import shared_log
from magnetar.storage import ManagedLedgerFactory, Position
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import COMMIT, TXN_COMMIT_MARKER, TxnId, marker_entry


def _message(txn: TxnId) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, txnid_most_bits=txn.most,
                                  txnid_least_bits=txn.least)
    return build_entry(metadata, b"value")


def _durable(ledger, entries: list[bytes]) -> list[Position]:
    done = threading.Event()
    positions = ledger.append_many(entries, lambda *_: done.set())
    assert done.wait(10)
    return positions


def test_a_snapshot_does_not_claim_markers_not_yet_ended_in_the_buffer(tmp_path: Path) -> None:
    async def run() -> None:
        factory = ManagedLedgerFactory(tmp_path / "data")
        try:
            ledger = factory.open("public/default/persistent/snap")
            store = factory.metadata_store
            buffer = TransactionBuffer(ledger, store, snapshot_every=1)
            first, second = TxnId(0, 1), TxnId(0, 2)
            for txn, position in zip((first, second), _durable(ledger, [_message(first), _message(second)]),
                                     strict=True):
                buffer.appended(txn, position)
            markers = [marker_entry(TXN_COMMIT_MARKER, txn) for txn in (first, second)]
            positions = _durable(ledger, markers)  # both durable: the loop hears of them one by one
            buffer.marking(positions)
            buffer.ended(first, COMMIT, positions[0])  # a snapshot at each end: taken now
            shared_log(store).flush_now()  # durable; the crash comes before the second's end is handled
            reloaded = TransactionBuffer.load(ledger, store)  # what a restart reads
            assert reloaded.ongoing == {}, "a committed transaction reads as open after the restart"
            assert reloaded.max_read_position is None
            shared_log(store).close()
        finally:
            factory.close()

    asyncio.run(run())
