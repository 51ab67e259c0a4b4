"""The commands a connection's consumers send: subscribe, flow, ack, redeliver, seek, ...

Functions of the connection they came on (a CommandHost: its consumers, its broker), in
the connection's table of handlers; kept apart so that the connection itself reads as
transport, framing and the producer path.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import COMMANDS
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.positions import position_of
from magnetar.broker.transport.schema_commands import schema_of
from magnetar.schemas import SchemaType
from magnetar.storage import StorageFullError
from magnetar.wire import commands
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.transport.seams import CommandHost

log = logging.getLogger("magnetar.broker.transport.connection")
T = pb.BaseCommand


def handle_subscribe(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.subscribe
    existing = cnx.consumers.get(req.consumer_id)
    if existing is not None and existing.subscription.name == req.subscription:
        _answer_when_stored(cnx, cmd, existing)  # a retry: answered as the first one is
        return
    try:
        cnx.authorize(COMMANDS[T.SUBSCRIBE], req.topic)
        topic = cnx.service.get_topic(req.topic, create=req.force_topic_creation, off_loop=True)
        schema = schema_of(req.schema, cnx.role) if req.HasField("schema") else None
        if schema is not None:
            cnx.service.schemas.add_schema_if_idle_or_check(topic.name, schema, idle=topic.idle_for_schema())
        consumer = topic.subscribe(cnx, req)
        consumer.auto_consume = schema is not None and schema.type == SchemaType.AUTO_CONSUME
    except BrokerServiceError as exc:
        log.info("%s [%s][%s] subscribe refused: %s", cnx, req.topic, req.subscription, exc.message)
        cnx.send(commands.error(req.request_id, exc.code, exc.message))
        return
    cnx.consumers[req.consumer_id] = consumer  # so that a connection closing meanwhile removes it
    _answer_when_stored(cnx, cmd, consumer)


def _answer_when_stored(cnx: CommandHost, cmd: pb.BaseCommand, consumer: Consumer) -> None:
    """SUCCESS once the subscription is durable: a new one's cursor is written off the loop
    (a commit is an fsync every client would wait out), and a client told of a subscription
    must find it after a crash."""
    subscription = consumer.subscription
    subscription.topic.when_stored(subscription, functools.partial(_subscribed, cnx, cmd, consumer))


def _subscribed(cnx: CommandHost, cmd: pb.BaseCommand, consumer: Consumer, error: BaseException | None) -> None:
    req = cmd.subscribe
    subscription = consumer.subscription
    topic = subscription.topic
    if error is None:
        log.info("%s [%s][%s] created %s consumer %r", cnx, topic.name, req.subscription,
                 pb.CommandSubscribe.SubType.Name(req.subType), consumer.name)
        cnx.send(commands.success(req.request_id))
        return
    if cnx.consumers.get(req.consumer_id) is consumer:
        del cnx.consumers[req.consumer_id]
    topic.remove_consumer(consumer, keep_subscription=True)
    topic.forget_unstored(subscription)
    if isinstance(error, StorageFullError):  # counted, not logged (broker.topics.full_disk)
        code, message = cnx.service.full_disk.refusal(cnx, cmd, error)
    else:
        log.warning("%s [%s][%s] subscription not stored: %s", cnx, topic.name, req.subscription, error)
        code, message = pb.ServiceNotReady, f"the subscription could not be stored: {error}"
    cnx.send(commands.error(req.request_id, code, message))


def _consumer(cnx: CommandHost, consumer_id: int) -> Consumer | None:
    consumer = cnx.consumers.get(consumer_id)
    if consumer is None:
        log.debug("%s names unknown consumer %d", cnx, consumer_id)
    return consumer


def handle_flow(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    consumer = _consumer(cnx, cmd.flow.consumer_id)
    if consumer is not None:
        consumer.subscription.flow(consumer, cmd.flow.messagePermits)


def handle_ack(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    """An ACK for a consumer that is gone (closed while the ACK was on its way) is refused when
    it asks for an answer: told it succeeded, a client would count an acknowledgement held in
    its transaction that nothing holds, and commit it."""
    ack = cmd.ack
    consumer = _consumer(cnx, ack.consumer_id)
    if consumer is None:
        if ack.HasField("request_id"):
            cnx.send(commands.ack_response(ack.consumer_id, ack.request_id, f"Consumer {ack.consumer_id} not found",
                                           pb.ConsumerNotFound))
        return
    if ack.txnid_least_bits:  # in a transaction (PIP-31; ids start at 1): loaded when met
        from magnetar.broker.transport import txn_commands  # noqa: PLC0415

        txn_commands.handle_ack(cnx, consumer, ack)
        return
    refusal = consumer.subscription.acknowledge(consumer, ack)
    if ack.HasField("request_id"):
        cnx.send(commands.ack_response(ack.consumer_id, ack.request_id, refusal))


def handle_redeliver(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.redeliverUnacknowledgedMessages
    consumer = _consumer(cnx, req.consumer_id)
    if consumer is None:
        return
    positions = [position_of(m) for m in req.message_ids] or None
    consumer.subscription.redeliver(consumer, positions)


def handle_close_consumer(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.close_consumer
    cnx.withdraw("consumer", req.consumer_id)
    consumer = cnx.consumers.pop(req.consumer_id, None)
    if consumer is not None:
        consumer.subscription.topic.remove_consumer(consumer)
        log.info("%s [%s][%s] closed consumer %r", cnx, consumer.subscription.topic.name,
                 consumer.subscription.name, consumer.name)
    cnx.send(commands.success(req.request_id))


def handle_unsubscribe(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.unsubscribe
    consumer = _held_consumer(cnx, req.consumer_id, pb.ConsumerNotFound)
    consumer.subscription.topic.unsubscribe(consumer)
    del cnx.consumers[req.consumer_id]
    cnx.send(commands.success(req.request_id))


def handle_seek(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.seek
    consumer = _held_consumer(cnx, req.consumer_id, pb.MetadataError)  # Pulsar's code for a seek
    subscription = consumer.subscription
    topic = subscription.topic
    if not topic.name.persistent and (req.HasField("message_id") or req.HasField("message_publish_time")):
        cnx.send(commands.success(req.request_id))  # Pulsar: nothing to reset, the seek succeeds
        return
    if req.HasField("message_id"):
        position = position_of(req.message_id)
    elif req.HasField("message_publish_time"):
        position = topic.find_position_by_time(req.message_publish_time, read_compacted=consumer.read_compacted)
    else:
        cnx.send(
            commands.error(req.request_id, pb.MetadataError, "Message id and message publish time were not present")
        )
        return
    # Close first, answer second: the client completes the seek on reconnect.
    for closed in subscription.reset_cursor(position):
        closed.cnx.tell_consumer_closed(closed)
    cnx.send(commands.success(req.request_id))


def handle_get_last_message_id(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.getLastMessageId
    consumer = _held_consumer(cnx, req.consumer_id, pb.ConsumerNotFound)
    subscription = consumer.subscription
    if not subscription.topic.name.persistent:  # Pulsar fails it the same way: there is no last message
        cnx.send(commands.error(req.request_id, pb.UnknownError,
                                 "GetLastMessageId is not supported on non-persistent topic"))
        return
    mark = subscription.cursor.mark_delete_position
    mark_delete = MessageId(mark.ledger_id, mark.entry_id).to_proto()
    last = subscription.topic.last_message_id(read_compacted=consumer.read_compacted)
    cnx.send(commands.last_message_id_response(req.request_id, last, mark_delete))


def handle_consumer_stats(cnx: CommandHost, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
    req = cmd.consumerStats
    consumer = cnx.consumers.get(req.consumer_id)
    if consumer is None:
        cnx.send(
            commands.consumer_stats_response(
                req.request_id, error_code=pb.ConsumerNotFound, error_message="Consumer not found"
            )
        )
        return
    cnx.send(
        commands.consumer_stats_response(
            req.request_id,
            consumerName=consumer.name,
            availablePermits=max(consumer.permits, 0),
            unackedMessages=consumer.unacked_messages,
            msgBacklog=consumer.subscription.backlog(),
            address=cnx.remote,
        )
    )


def _held_consumer(cnx: CommandHost, consumer_id: int, code: int) -> Consumer:
    """The connection's consumer of that id; refused with `code` (the connection answers it)."""
    consumer = cnx.consumers.get(consumer_id)
    if consumer is None:
        raise BrokerServiceError(code, "Consumer not found")
    return consumer
