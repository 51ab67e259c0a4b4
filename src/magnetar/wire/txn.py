"""Transactions on the wire (PIP-31): the coordinator's commands both ways, and the
commit and abort markers a topic's ledger holds.

A transaction id is two uint64s, as Pulsar assigns them: the most significant bits name
the coordinator (the partition of the coordinator-assign topic it serves), the least
significant bits count the transactions that coordinator opened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

from magnetar.wire.entry import build_entry
from magnetar.wire.frames import encode_command
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = pb.BaseCommand
#: The partitioned topic whose partitions are the coordinators (Pulsar's
#: SystemTopicNames.TRANSACTION_COORDINATOR_ASSIGN); a client looks it up to find them.
COORDINATOR_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
#: MessageMetadata.marker_type of the markers a transaction leaves in a topic (Pulsar's
#: PulsarMarkers.MarkerType: TXN_COMMITTING 20 is not written by magnetar).
TXN_COMMIT_MARKER = 21
TXN_ABORT_MARKER = 22
COMMIT, ABORT = pb.COMMIT, pb.ABORT


class TxnId(NamedTuple):
    most: int
    least: int

    def __str__(self) -> str:
        return f"({self.most},{self.least})"


def txn_id_of(body: object) -> TxnId:
    """The transaction a command or MessageMetadata names (its txnid_*_bits fields)."""
    return TxnId(body.txnid_most_bits, body.txnid_least_bits)  # type: ignore[attr-defined]


# -- markers
#: The marker's property naming its transaction's producer (see marker_entry).
MARKER_PRODUCER = "txn.producer"


def marker_entry(marker_type: int, txn: TxnId, producer: str = "") -> bytes:
    """An entry marking `txn` committed or aborted in a topic: dispatch never sends it, and
    a restart reads the topic's markers back to know which messages are aborted. It names
    the transaction's `producer` (a Kafka producer's id and epoch, which Kafka fetchers
    need on the marker) in a property, not as its own producer name, which deduplication
    would take for a producer's."""
    metadata = pb.MessageMetadata(producer_name="", sequence_id=0, publish_time=int(time.time() * 1000),
                                  marker_type=marker_type, txnid_most_bits=txn.most, txnid_least_bits=txn.least)
    if producer:
        metadata.properties.add(key=MARKER_PRODUCER, value=producer)
    return build_entry(metadata, b"")


def marker_producer(metadata: pb.MessageMetadata) -> str:
    """The producer a transaction's marker names ("" if none)."""
    return next((p.value for p in metadata.properties if p.key == MARKER_PRODUCER), "")


# -- broker to client
_RESPONSES = {
    T.NEW_TXN: (T.NEW_TXN_RESPONSE, "newTxnResponse", pb.CommandNewTxnResponse),
    T.ADD_PARTITION_TO_TXN: (T.ADD_PARTITION_TO_TXN_RESPONSE, "addPartitionToTxnResponse",
                             pb.CommandAddPartitionToTxnResponse),
    T.ADD_SUBSCRIPTION_TO_TXN: (T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE, "addSubscriptionToTxnResponse",
                                pb.CommandAddSubscriptionToTxnResponse),
    T.END_TXN: (T.END_TXN_RESPONSE, "endTxnResponse", pb.CommandEndTxnResponse),
    T.END_TXN_ON_PARTITION: (T.END_TXN_ON_PARTITION_RESPONSE, "endTxnOnPartitionResponse",
                             pb.CommandEndTxnOnPartitionResponse),
    T.END_TXN_ON_SUBSCRIPTION: (T.END_TXN_ON_SUBSCRIPTION_RESPONSE, "endTxnOnSubscriptionResponse",
                                pb.CommandEndTxnOnSubscriptionResponse),
}
REQUESTS = frozenset(_RESPONSES) | {T.TC_CLIENT_CONNECT_REQUEST}
"""The commands a transaction coordinator answers."""


def txn_response(request_type: int, request_id: int, txn: TxnId | None = None,
                 code: int | None = None, message: str = "") -> bytes:
    """The answer to a transaction command of `request_type`: its txn id, or an error."""
    if request_type == T.TC_CLIENT_CONNECT_REQUEST:
        connect = pb.CommandTcClientConnectResponse(request_id=request_id)
        if code is not None:
            connect.error, connect.message = code, message
        return encode_command(T(type=T.TC_CLIENT_CONNECT_RESPONSE, tcClientConnectResponse=connect))
    response_type, field, cls = _RESPONSES[request_type]
    body = cls(request_id=request_id)
    if txn is not None:
        body.txnid_most_bits, body.txnid_least_bits = txn
    if code is not None:
        body.error, body.message = code, message
    return encode_command(T(type=response_type, **{field: body}))


# -- client to broker
def tc_client_connect(request_id: int, tc_id: int) -> bytes:
    return encode_command(T(type=T.TC_CLIENT_CONNECT_REQUEST,
                            tcClientConnectRequest=pb.CommandTcClientConnectRequest(request_id=request_id,
                                                                                    tc_id=tc_id)))


def new_txn(request_id: int, tc_id: int, ttl_seconds: int) -> bytes:
    return encode_command(T(type=T.NEW_TXN, newTxn=pb.CommandNewTxn(request_id=request_id, tc_id=tc_id,
                                                                    txn_ttl_seconds=ttl_seconds)))


def add_partition_to_txn(request_id: int, txn: TxnId, partitions: Iterable[str]) -> bytes:
    body = pb.CommandAddPartitionToTxn(request_id=request_id, txnid_most_bits=txn.most,
                                       txnid_least_bits=txn.least, partitions=list(partitions))
    return encode_command(T(type=T.ADD_PARTITION_TO_TXN, addPartitionToTxn=body))


def add_subscription_to_txn(request_id: int, txn: TxnId, topic: str, subscription: str) -> bytes:
    body = pb.CommandAddSubscriptionToTxn(request_id=request_id, txnid_most_bits=txn.most,
                                          txnid_least_bits=txn.least,
                                          subscription=[pb.Subscription(topic=topic, subscription=subscription)])
    return encode_command(T(type=T.ADD_SUBSCRIPTION_TO_TXN, addSubscriptionToTxn=body))


def end_txn(request_id: int, txn: TxnId, action: int) -> bytes:
    body = pb.CommandEndTxn(request_id=request_id, txnid_most_bits=txn.most, txnid_least_bits=txn.least,
                            txn_action=action)
    return encode_command(T(type=T.END_TXN, endTxn=body))


def ack(consumer_id: int, request_id: int, txn: TxnId, ledger_id: int, entry_id: int,
        ack_set: list[int] | None = None, batch_size: int = 0, cumulative: bool = False) -> bytes:
    """An ACK in a transaction (individual, or `cumulative`), answered (ACK_RESPONSE) under
    `request_id`; with `ack_set`, of the batch's messages whose bits it clears (the others
    stay unacknowledged)."""
    mid = pb.MessageIdData(ledgerId=ledger_id, entryId=entry_id)
    if ack_set is not None:
        mid.ack_set.extend(ack_set)
        mid.batch_size = batch_size
    body = pb.CommandAck(consumer_id=consumer_id, message_id=[mid],
                         ack_type=pb.CommandAck.Cumulative if cumulative else pb.CommandAck.Individual,
                         txnid_most_bits=txn.most, txnid_least_bits=txn.least, request_id=request_id)
    return encode_command(T(type=T.ACK, ack=body))
