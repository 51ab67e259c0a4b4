"""The commands a connection's consumers send: subscribe, flow, ack, redeliver, seek, ...

Mixed into ServerCnx, whose state (its consumers, its service) they use; kept apart so that
the connection itself reads as transport, framing and the producer path.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth.operations import COMMANDS
from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.topics.positions import position_of
from magnetar.wire import commands
from magnetar.wire.message_id import MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.auth.operations import Operation
    from magnetar.broker.service.broker_service import BrokerService
    from magnetar.broker.topics.consumer import Consumer

log = logging.getLogger("magnetar.broker.transport.connection")
T = pb.BaseCommand


class ConsumerCommands:
    service: BrokerService
    consumers: dict[int, Consumer]
    remote: str

    if TYPE_CHECKING:
        def send(self, frame: bytes) -> None: ...

        def authorize(self, operation: Operation, topic: str | None = None, namespace: str | None = None) -> None: ...

    def handle_subscribe(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.subscribe
        existing = self.consumers.get(req.consumer_id)
        if existing is not None and existing.subscription.name == req.subscription:
            self.send(commands.success(req.request_id))
            return
        try:
            self.authorize(COMMANDS[T.SUBSCRIBE], req.topic)
            topic = self.service.get_topic(req.topic, create=req.force_topic_creation)
            consumer = topic.subscribe(self, req)
        except BrokerServiceError as exc:
            log.info("%s [%s][%s] subscribe refused: %s", self, req.topic, req.subscription, exc.message)
            self.send(commands.error(req.request_id, exc.code, exc.message))
            return
        self.consumers[req.consumer_id] = consumer
        log.info("%s [%s][%s] created %s consumer %r", self, topic.name, req.subscription,
                 pb.CommandSubscribe.SubType.Name(req.subType), consumer.name)
        self.send(commands.success(req.request_id))

    def _consumer(self, consumer_id: int) -> Consumer | None:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            log.debug("%s names unknown consumer %d", self, consumer_id)
        return consumer

    def handle_flow(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        consumer = self._consumer(cmd.flow.consumer_id)
        if consumer is not None:
            consumer.subscription.flow(consumer, cmd.flow.messagePermits)

    def handle_ack(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        ack = cmd.ack
        consumer = self._consumer(ack.consumer_id)
        refusal = consumer.subscription.acknowledge(consumer, ack) if consumer is not None else None
        if ack.HasField("request_id"):
            self.send(commands.ack_response(ack.consumer_id, ack.request_id, refusal))

    def handle_redeliver(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.redeliverUnacknowledgedMessages
        consumer = self._consumer(req.consumer_id)
        if consumer is None:
            return
        positions = [position_of(m) for m in req.message_ids] or None
        consumer.subscription.redeliver(consumer, positions)

    def handle_close_consumer(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.close_consumer
        consumer = self.consumers.pop(req.consumer_id, None)
        if consumer is not None:
            consumer.subscription.topic.remove_consumer(consumer)
            log.info("%s [%s][%s] closed consumer %r", self, consumer.subscription.topic.name,
                     consumer.subscription.name, consumer.name)
        self.send(commands.success(req.request_id))

    def handle_unsubscribe(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.unsubscribe
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            self.send(commands.error(req.request_id, pb.ConsumerNotFound, "Consumer not found"))
            return
        try:
            consumer.subscription.topic.unsubscribe(consumer)
        except BrokerServiceError as exc:
            self.send(commands.error(req.request_id, exc.code, exc.message))
            return
        del self.consumers[req.consumer_id]
        self.send(commands.success(req.request_id))

    def handle_seek(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.seek
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            self.send(commands.error(req.request_id, pb.MetadataError, "Consumer not found"))
            return
        subscription = consumer.subscription
        topic = subscription.topic
        if not topic.name.persistent and (req.HasField("message_id") or req.HasField("message_publish_time")):
            self.send(commands.success(req.request_id))  # Pulsar: nothing to reset, the seek succeeds
            return
        if req.HasField("message_id"):
            position = position_of(req.message_id)
        elif req.HasField("message_publish_time"):
            position = topic.find_position_by_time(req.message_publish_time, read_compacted=consumer.read_compacted)
        else:
            self.send(
                commands.error(req.request_id, pb.MetadataError, "Message id and message publish time were not present")
            )
            return
        # Close first, answer second: the client completes the seek on reconnect.
        for closed in subscription.reset_cursor(position):
            closed.cnx.tell_consumer_closed(closed)
        self.send(commands.success(req.request_id))

    def tell_consumer_closed(self, consumer: Consumer) -> None:
        """The broker closed `consumer` (seek, reset, unload, deletion): forget it here and
        tell the client, which subscribes again where it should."""
        self.consumers.pop(consumer.consumer_id, None)
        self.send(commands.close_consumer(consumer.consumer_id))

    def handle_get_last_message_id(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.getLastMessageId
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            self.send(commands.error(req.request_id, pb.ConsumerNotFound, "Consumer not found"))
            return
        subscription = consumer.subscription
        if not subscription.topic.name.persistent:  # Pulsar fails it the same way: there is no last message
            self.send(commands.error(req.request_id, pb.UnknownError,
                                     "GetLastMessageId is not supported on non-persistent topic"))
            return
        mark = subscription.cursor.mark_delete_position
        mark_delete = MessageId(mark.ledger_id, mark.entry_id).to_proto()
        last = subscription.topic.last_message_id(read_compacted=consumer.read_compacted)
        self.send(commands.last_message_id_response(req.request_id, last, mark_delete))

    def handle_consumer_stats(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.consumerStats
        consumer = self.consumers.get(req.consumer_id)
        if consumer is None:
            self.send(
                commands.consumer_stats_response(
                    req.request_id, error_code=pb.ConsumerNotFound, error_message="Consumer not found"
                )
            )
            return
        self.send(
            commands.consumer_stats_response(
                req.request_id,
                consumerName=consumer.name,
                availablePermits=max(consumer.permits, 0),
                unackedMessages=consumer.unacked_messages,
                msgBacklog=consumer.subscription.backlog(),
                address=self.remote,
            )
        )

