"""The transaction coordinator's commands (PIP-31) and the transactional SEND.

Imported by the connection the first time a client sends one of them, so a broker whose
clients never use transactions never loads it. Every refusal is answered in the response
type the request awaits (the Java client matches answers by type and request id), with
TransactionCoordinatorNotFound when `transactionCoordinatorEnabled` is off, as Pulsar does.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import CONSUME, PRODUCE
from magnetar.broker.errors import BrokerServiceError
from magnetar.wire import commands
from magnetar.wire.entry import parse_message_metadata
from magnetar.wire.errors import WireError
from magnetar.wire.frames import command_body
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import COMMIT, TxnId, txn_id_of, txn_response

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.producer import Producer, Send
    from magnetar.broker.transactions.coordinator import Caller, TransactionCoordinator
    from magnetar.broker.transport.seams import CommandHost

log = logging.getLogger("magnetar.broker.transport.connection")
T = pb.BaseCommand
_DISABLED = "transactions are off on this broker (transactionCoordinatorEnabled=false)"
#: END_TXN answers still being worked out, kept so their tasks are not collected.
_ending: set[asyncio.Task[None]] = set()


def _coordinator(cnx: CommandHost, tc_id: int | None = None) -> TransactionCoordinator:
    coordinator = cnx.service.transactions
    if coordinator is None:
        raise BrokerServiceError(pb.TransactionCoordinatorNotFound, _DISABLED)
    if tc_id is not None and tc_id != coordinator.coordinator_id:
        raise BrokerServiceError(pb.TransactionCoordinatorNotFound, f"no transaction coordinator {tc_id} here")
    return coordinator


def handle(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    """Every coordinator command: answered now, or (END_TXN) once the participants are done."""
    body = command_body(cmd)  # never None: the frame decoder closes a connection that sends a command without it
    request_id = body.request_id
    txn = txn_id_of(body) if "txnid_most_bits" in body.DESCRIPTOR.fields_by_name else None
    try:
        if cmd.type not in _COMMANDS:
            raise BrokerServiceError(pb.NotAllowedError, f"magnetar does not support {T.Type.Name(cmd.type)}")
        answer = _COMMANDS[cmd.type](cnx, body)
    except BrokerServiceError as exc:
        log.info("%s %s refused: %s", cnx, T.Type.Name(cmd.type), exc.message)
        cnx.send(txn_response(cmd.type, request_id, txn, exc.code, exc.message))
        return
    if isinstance(answer, asyncio.Future):  # a callback, not a task: one less loop turn an answer
        answer.add_done_callback(lambda work: _answer_later(cnx, cmd.type, request_id, txn, work))
        return
    cnx.send(txn_response(cmd.type, request_id, answer if answer is not None else txn))


def _answer_later(cnx: CommandHost, request_type: int, request_id: int, txn: TxnId | None,
                  work: asyncio.Future[None]) -> None:
    exc = BrokerServiceError(pb.UnknownError, "cancelled") if work.cancelled() else work.exception()
    if exc is None:
        cnx.send(txn_response(request_type, request_id, txn))
    elif isinstance(exc, BrokerServiceError):
        cnx.send(txn_response(request_type, request_id, txn, exc.code, exc.message))
    else:  # a participant could not store its marker: the client may retry
        cnx.send(txn_response(request_type, request_id, txn, pb.UnknownError, f"could not end the transaction: {exc}"))


def _caller(cnx: CommandHost) -> Caller:
    role = cnx.role
    return role, cnx.service.authorization.is_super_user(role)


def _tc_connect(cnx: CommandHost, body: pb.CommandTcClientConnectRequest) -> None:
    _coordinator(cnx, body.tc_id)


def _new_txn(cnx: CommandHost, body: pb.CommandNewTxn) -> TxnId:
    return _coordinator(cnx, body.tc_id).new_txn(body.txn_ttl_seconds, cnx.role)


def _add_partitions(cnx: CommandHost, body: pb.CommandAddPartitionToTxn) -> asyncio.Future[None] | None:
    """Answered once the log's record naming them is durable (a group commit, off the loop).
    The role must be allowed to produce to each (a transaction's commit or abort writes a marker there):
    a transaction is no way into a topic its role cannot write."""
    topics = [str(cnx.service.parse_topic(name)) for name in body.partitions]
    for topic in topics:
        cnx.authorize(PRODUCE, topic)
    return _coordinator(cnx).register_partitions(txn_id_of(body), topics, _caller(cnx))


def _add_subscriptions(cnx: CommandHost, body: pb.CommandAddSubscriptionToTxn) -> asyncio.Future[None] | None:
    """The role must be allowed to consume each topic (its end moves the subscription's acknowledgements)."""
    subscriptions = [(str(cnx.service.parse_topic(sub.topic)), sub.subscription) for sub in body.subscription]
    for topic, _subscription in subscriptions:
        cnx.authorize(CONSUME, topic)
    return _coordinator(cnx).register_subscriptions(txn_id_of(body), subscriptions, _caller(cnx))


def _end_txn(cnx: CommandHost, body: pb.CommandEndTxn) -> asyncio.Future[None]:
    coordinator = _coordinator(cnx)
    action = body.txn_action if body.HasField("txn_action") else COMMIT
    return coordinator.ending(txn_id_of(body), action, _caller(cnx))


_COMMANDS = {
    T.TC_CLIENT_CONNECT_REQUEST: _tc_connect,
    T.NEW_TXN: _new_txn,
    T.ADD_PARTITION_TO_TXN: _add_partitions,
    T.ADD_SUBSCRIPTION_TO_TXN: _add_subscriptions,
    T.END_TXN: _end_txn,
}


def handle_send(cnx: CommandHost, producer: Producer, send: pb.CommandSend, record: Send) -> bool:
    """A SEND naming a transaction: staged to be stored with the rest of the read (True when
    the producer had nothing staged: the connection comes back to it), dispatched once the
    transaction commits. Stored while the transaction log records the partition (the
    client's ADD_PARTITION_TO_TXN, or this SEND, registers it) and answered once both are
    durable: a crash between the two leaves messages of a transaction the log does not name
    here, which the coordinator aborts when the topic loads. The message's own metadata must name
    the same transaction, since dispatch decides by it (a message claiming another
    transaction's id could otherwise escape its abort)."""
    try:
        coordinator = _coordinator(cnx)
        txn = txn_id_of(send)
        if not producer.topic.name.persistent:
            raise BrokerServiceError(pb.NotAllowedError, "non-persistent topics take no transactional messages")
        try:
            metadata = parse_message_metadata(record.entry)
        except WireError as exc:
            raise BrokerServiceError(pb.NotAllowedError, str(exc)) from exc
        if txn_id_of(metadata) != txn or not metadata.HasField("txnid_most_bits"):
            raise BrokerServiceError(pb.NotAllowedError,
                                     f"the message's metadata does not name transaction {txn}, which its SEND does")
        registering = coordinator.register_partitions(txn, [str(producer.topic.name)], _caller(cnx))
    except BrokerServiceError as exc:
        log.info("%s transactional send refused: %s", cnx, exc.message)
        producer.refuse(send.sequence_id, exc.code, exc.message)
        return False
    return producer.stage_transactional(record, txn, registering)


def handle_ack(cnx: CommandHost, consumer: Consumer, ack: pb.CommandAck) -> None:
    """An ACK naming a transaction: its entries are held for it until it ends (the
    subscription is registered with the transaction here if the client did not), answered
    once the hold and the registration are durable. Both are records of the transaction
    log, the registration asked for first: after a crash no hold outlives it."""
    refusal: str | None = None
    code = pb.NotAllowedError
    waits: list[asyncio.Future[None]] = []
    try:
        coordinator = _coordinator(cnx)
        txn = txn_id_of(ack)
        subscription = consumer.subscription
        registering = coordinator.register_subscriptions(txn, [(str(subscription.topic.name), subscription.name)],
                                                         _caller(cnx))
        holding = subscription.acknowledge_in_txn(ack, txn)  # type: ignore[attr-defined]
        waits = [wait for wait in (registering, holding) if wait is not None]
    except BrokerServiceError as exc:
        log.info("%s transactional ack refused: %s", cnx, exc.message)
        refusal, code = exc.message, exc.code
    if not ack.HasField("request_id"):
        return
    if not waits:
        cnx.send(commands.ack_response(ack.consumer_id, ack.request_id, refusal, code))
        return
    task = asyncio.get_running_loop().create_task(_ack_answer_later(cnx, ack, waits))
    _ending.add(task)
    task.add_done_callback(_ending.discard)


async def _ack_answer_later(cnx: CommandHost, ack: pb.CommandAck, waits: list[asyncio.Future[None]]) -> None:
    try:
        await asyncio.gather(*waits)
    except Exception as exc:  # the log could not be written: nothing is held after a restart
        cnx.send(commands.ack_response(ack.consumer_id, ack.request_id,
                                       f"could not store the acknowledgement: {exc}", pb.UnknownError))
    else:
        cnx.send(commands.ack_response(ack.consumer_id, ack.request_id, None, pb.NotAllowedError))
