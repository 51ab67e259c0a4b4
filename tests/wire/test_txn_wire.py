"""Transactions on the wire (magnetar.wire.txn): bytes alone, no broker."""

from __future__ import annotations

import pytest

from magnetar.client.errors import InvalidTxnStatusError, TransactionNotFound, refusal_of
from magnetar.wire import txn as wire_txn
from magnetar.wire.entry import parse_entry, validate_publishable
from magnetar.wire.frames import FrameDecoder
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
TXN = wire_txn.TxnId(3, 2**63 + 5)  # uint64 least bits, as a long-lived coordinator reaches


def _one(frame: bytes) -> pb.BaseCommand:
    (decoded,) = FrameDecoder().feed(frame)
    return decoded.command


@pytest.mark.parametrize("marker", [wire_txn.TXN_COMMIT_MARKER, wire_txn.TXN_ABORT_MARKER])
def test_a_marker_is_an_entry_naming_its_transaction(marker: int) -> None:
    entry = wire_txn.marker_entry(marker, TXN)
    metadata = validate_publishable(entry, checksum=True)
    assert (metadata.marker_type, wire_txn.txn_id_of(metadata)) == (marker, TXN)
    assert parse_entry(entry).payload == b""


def test_pulsar_marker_numbers() -> None:
    """PulsarMarkers.MarkerType: TXN_COMMITTING = 20, TXN_COMMIT = 21, TXN_ABORT = 22."""
    assert (wire_txn.TXN_COMMIT_MARKER, wire_txn.TXN_ABORT_MARKER) == (21, 22)


REQUESTS = [
    (T.TC_CLIENT_CONNECT_REQUEST, T.TC_CLIENT_CONNECT_RESPONSE, "tcClientConnectResponse"),
    (T.NEW_TXN, T.NEW_TXN_RESPONSE, "newTxnResponse"),
    (T.ADD_PARTITION_TO_TXN, T.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse"),
    (T.ADD_SUBSCRIPTION_TO_TXN, T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, "addSubscriptionToTxnResponse"),
    (T.END_TXN, T.END_TXN_RESPONSE, "endTxnResponse"),
    (T.END_TXN_ON_PARTITION, T.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse"),
    (T.END_TXN_ON_SUBSCRIPTION, T.END_TXN_ON_SUBSCRIPTION_RESPONSE, "endTxnOnSubscriptionResponse"),
]


@pytest.mark.parametrize(("request_type", "response_type", "field"), REQUESTS)
def test_every_request_is_answered_in_its_own_response_type(request_type: int, response_type: int,
                                                            field: str) -> None:
    txn = None if request_type == T.TC_CLIENT_CONNECT_REQUEST else TXN
    ok = _one(wire_txn.txn_response(request_type, 9, txn))
    assert ok.type == response_type
    assert getattr(ok, field).request_id == 9
    assert refusal_of(ok) is None
    if txn is not None:
        assert wire_txn.txn_id_of(getattr(ok, field)) == TXN
    refused = _one(wire_txn.txn_response(request_type, 9, txn, pb.TransactionNotFound, "gone"))
    assert isinstance(refusal_of(refused), TransactionNotFound)


def test_client_requests_carry_what_the_broker_reads() -> None:
    add = _one(wire_txn.add_partition_to_txn(4, TXN, ["persistent://t/n/a"])).addPartitionToTxn
    assert (add.request_id, wire_txn.txn_id_of(add), list(add.partitions)) == (4, TXN, ["persistent://t/n/a"])
    sub = _one(wire_txn.add_subscription_to_txn(5, TXN, "persistent://t/n/a", "s")).addSubscriptionToTxn
    assert [(s.topic, s.subscription) for s in sub.subscription] == [("persistent://t/n/a", "s")]
    end = _one(wire_txn.end_txn(6, TXN, wire_txn.ABORT)).endTxn
    assert (wire_txn.txn_id_of(end), end.txn_action) == (TXN, pb.ABORT)
    new = _one(wire_txn.new_txn(7, 0, 30)).newTxn
    assert (new.tc_id, new.txn_ttl_seconds) == (0, 30)
    ack = _one(wire_txn.ack(1, 8, TXN, 10, 11)).ack
    assert (ack.request_id, wire_txn.txn_id_of(ack), ack.message_id[0].ledgerId, ack.message_id[0].entryId) == (
        8, TXN, 10, 11)
    assert isinstance(refusal_of(_one(wire_txn.txn_response(T.END_TXN, 1, TXN, pb.InvalidTxnStatus, "x"))),
                      InvalidTxnStatusError)
