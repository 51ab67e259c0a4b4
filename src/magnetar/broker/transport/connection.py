"""One client connection: frames in, commands handled, frames out.

Bad bytes cost the sender its own connection and nothing else: a decoding
error closes this transport, and closing releases only what it held.
Writes are coalesced per loop iteration, so a dispatch pass that sends a
hundred MESSAGE frames makes one syscall, not a hundred (see frame_writes).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar import __version__
from magnetar.broker.auth.authorization import Resource
from magnetar.broker.auth.operations import COMMANDS, Operation
from magnetar.broker.errors import BrokerServiceError, TopicLoading
from magnetar.broker.schema_registry import SchemaCheckPending
from magnetar.broker.topics.consumer import Consumer, DispatchEntry
from magnetar.broker.topics.producer import Producer, Send
from magnetar.broker.topics.replicators import has_replicator_prefix
from magnetar.broker.topics.topic_limits import check_producer_encryption
from magnetar.broker.transport import consumer_commands, lookup_commands, schema_commands
from magnetar.broker.transport.frame_writes import LARGE_FRAME, Frame, socket_fd, write_frames
from magnetar.broker.transport.publish_checks import check_send
from magnetar.broker.transport.read_turns import TurnBoundedReads
from magnetar.broker.transport.schema_waits import SchemaWaits
from magnetar.storage import StorageFullError
from magnetar.wire import commands
from magnetar.wire.entry import (
    strip_broker_entry_metadata,
)
from magnetar.wire.errors import WireError
from magnetar.wire.frames import FRAME_PADDING, FrameDecoder, command_body
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.broker.auth.session import ConnectionAuth
    from magnetar.broker.transport.advertised_listeners import AdvertisedListener
    from magnetar.broker.transport.seams import Broker

log = logging.getLogger(__name__)
T = pb.BaseCommand
MAX_PROTOCOL_VERSION = 20
SERVER_VERSION = f"magnetar-{__version__}"
#: Clients announce support for the broker-entry-metadata prefix from v18 on.
BEM_PROTOCOL_VERSION = 18
#: Above this many bytes queued in a transport, dispatch waits (Pulsar: channel writability). Kept
#: near one large entry: asyncio (3.11) buffers in a bytearray and moves what is left after
#: every send, so a deeper buffer costs a memmove of megabytes per partial send.
HIGH_WATER = 1024 * 1024
_ids = itertools.count()
#: How the official C++ client (the core of the Python, C++ and Node.js clients) names itself in CONNECT.
CPP_CLIENT = "Pulsar-CPP"
#: Producer ids a connection remembers the broker closed: a client has a handful at a time.
MAX_CLOSED_PRODUCERS_KEPT = 1024
#: Builds a Send without NamedTuple's Python-level __new__: one is made per SEND.
_new_send = tuple.__new__
_SEND = T.SEND
_KAFKA_HEAD = struct.Struct(">hh")
_KAFKA_MAX_API_KEY, _KAFKA_MAX_VERSION = 100, 30
Handler = Callable[["ServerCnx", pb.BaseCommand, bytes | None], None]


class ServerCnx(TurnBoundedReads, asyncio.Protocol):
    server_version = SERVER_VERSION

    def __init__(self, service: Broker, *, tls: bool = False) -> None:
        self.service = service
        self.tls = tls
        """Whether the connection came in on the pulsar+ssl:// port."""
        self.peer_certificate: dict | None = None
        self.auth: ConnectionAuth | None = None
        """Who the client is, when authenticationEnabled."""
        self.id = next(_ids)
        config = service.config
        self.decoder = FrameDecoder(config.maxMessageSize + FRAME_PADDING)
        self.transport: asyncio.Transport | None = None
        self.remote = "?"
        self.connected = False
        self.client_version = ""
        self.protocol_version = 0
        self.expose_entry_metadata = False
        self._message_headers = commands.MessageHeaderEncoder()
        self.repl_dedup_by_position = False
        self.writable = True
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._out: list[Frame] = []
        self._fd = -1
        """The socket's descriptor, while frames may be written to it directly (frame_writes)."""
        self._flush_scheduled = False
        self._last_seen = self.read_at = time.monotonic()
        self._backlog = None
        self._held_by_broker = False
        self._throttle = None
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        self._partial_since: float | None = None
        self._ip: str | None = None
        self._closed_by_broker: dict[int, None] = {}
        """Ids of producers the broker closed, whose SENDs may still be on the way (Pulsar's
        recentlyClosedProducers): those are dropped, not taken for a broken client."""
        self._staging: list[Producer] = []
        """Producers holding SENDs of the current read, stored when the read is done."""
        self._max_message_size = config.maxMessageSize
        self._schema_waits = SchemaWaits(lambda: self.transport is not None, self._reply_error)
        self.lookup_listener: AdvertisedListener | None = None
        """The listener of the last LOOKUP answered here: where this client finds the broker."""

    def __repr__(self) -> str:
        return f"[{self.remote} #{self.id}]"

    @property
    def closed(self) -> bool:
        """Closed by either side: nothing more is sent or handled."""
        return self.transport is None

    # -- transport events
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._ip = peer[0] if peer else "?"
        self.peer_certificate = transport.get_extra_info("peercert") or None
        if not self.service.connection_controller.admit(self._ip):
            self._ip = None
            transport.close()
            return
        transport.set_write_buffer_limits(high=HIGH_WATER)  # type: ignore[attr-defined]
        self._fd = socket_fd(transport, self.tls)
        self.service.connections.add(self)
        self._arm_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ip is not None:
            self.service.connection_controller.release(self._ip)
            log.info("%s connection closed", self)
        self.service.frame_budget.forget(self)
        self.service.connections.discard(self)
        if self._keepalive is not None:
            self._keepalive.cancel()
        self.cancel_throttle()
        if self.auth is not None:
            self.auth.stop()
        for producer in list(self.producers.values()):
            producer.topic.remove_producer(producer)
        self.service.full_disk.forget(self)
        for consumer in list(self.consumers.values()):
            consumer.subscription.topic.remove_consumer(consumer)
        self.producers.clear()
        self.consumers.clear()
        self.transport = None

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in self.consumers.values():
            dispatcher = consumer.subscription.dispatcher
            if dispatcher is not None:
                dispatcher.schedule()

    def awaiting_receipts(self) -> bool:
        return any(producer.awaiting_receipts for producer in self.producers.values())

    def data_received(self, data: bytes) -> None:
        decoder = self.decoder
        had_partial = decoder.buffered > 0
        try:
            frames = decoder.feed(data)
        except WireError as exc:
            if not self.connected and _kafka_request_head(data):
                log.warning("%s sent a Kafka request to the Pulsar protocol port; closing (%s)", self,
                            self._kafka_hint())
            else:
                log.warning("%s closing connection: %s", self, exc)
            self.close()
            return
        if frames:
            # Only whole frames prove the peer alive: a byte now and then does not.
            self._last_seen = self.read_at = time.monotonic()
            self._ping_outstanding = False
        if decoder.buffered or had_partial:
            self._track_partial_frame(had_partial)
        if frames:
            self._handle_read(frames)

    def _handle_frames(self, frames: list[tuple[pb.BaseCommand, bytes | None]]) -> None:
        for command, payload in frames:
            if self.transport is None or self.transport.is_closing():
                self._staging.clear()  # closed mid-read: the client resends what has no receipt
                self.drop_backlog()
                return
            if command.type == _SEND and self.connected:  # most frames: straight to the handler
                self._run_handler(ServerCnx.handle_send, command, payload)
                continue
            if self._staging:
                self._publish_staged()
            self._handle(command, payload)
        if self._staging:
            self._publish_staged()

    def _kafka_hint(self) -> str:
        kafka = self.service.protocol_listeners.get("kafka")
        if kafka:
            return f"this broker's Kafka listener: {', '.join(kafka)}"
        return "this broker has no Kafka listener: messagingProtocols=kafka and kafkaListeners add one"

    def _publish_staged(self) -> None:
        """Store the SENDs of one read of the socket, a group per producer: one append to
        the ledger and one write of receipts for all of them, instead of one per message.
        Any other command is handled only after the SENDs read before it."""
        staging, self._staging = self._staging, []
        for producer in staging:
            producer.publish_staged()

    def _track_partial_frame(self, had_partial: bool) -> None:
        """Charge the unfinished frame to the broker-wide budget, and time it."""
        buffered = self.decoder.buffered
        if buffered and (not had_partial or self._partial_since is None):
            self._partial_since = time.monotonic()
        elif not buffered:
            self._partial_since = None
        self.service.frame_budget.update(self, buffered)

    def _handle(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        if not self.connected and cmd.type != T.CONNECT:
            if self.auth is not None and self.auth.refusal is not None:  # told now (auth.session)
                self._reply_error(cmd, pb.AuthenticationError, self.auth.refusal)
            else:
                log.warning("%s sent %s before CONNECT; closing", self, T.Type.Name(cmd.type))
            self.close()
            return
        handler = _HANDLERS.get(cmd.type)
        if handler is None:
            self._unsupported(cmd)
            return
        self._run_handler(handler, cmd, payload)

    def _run_handler(self, handler: Handler, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        try:
            handler(self, cmd, payload)
        except SchemaCheckPending as pending:
            self._schema_waits.wait(pending.done, lambda: self._run_handler(handler, cmd, payload), cmd)
        except TopicLoading as loading:  # not bounded: one worker thread's queue, one future a topic
            self._schema_waits.wait(loading.done, lambda: self._run_handler(handler, cmd, payload), cmd, bounded=False)
        except BrokerServiceError as exc:  # a refusal: answered in the response type the client awaits
            log.info("%s %s refused: %s", self, T.Type.Name(cmd.type), exc.message)
            self._reply_error(cmd, exc.code, exc.message)
        except StorageFullError as exc:  # a full disk: a clear answer, counted rather than logged
            self._reply_error(cmd, *self.service.full_disk.refusal(self, cmd, exc))
        except Exception:
            log.exception("%s failed to handle %s", self, T.Type.Name(cmd.type))
            self._reply_error(cmd, pb.UnknownError, "internal broker error")

    def withdraw(self, kind: str, ident: int) -> None:
        """The client closed producer or consumer `ident` (kind "producer" or "consumer"):
        one still waiting for its schema's check is not created."""
        self._schema_waits.withdraw(kind, ident)

    # -- output
    def send(self, frame: Frame) -> None:
        if self.transport is None:
            return
        self._out.append(frame)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if self.transport is not None and out:
            write_frames(self.transport, self._fd, out, self.tls)

    def close(self) -> None:
        if self.transport is not None:
            self._flush()
            self.transport.close()

    def send_message(self, consumer_id: int, partition: int, entry: DispatchEntry) -> None:
        """A large entry goes out after its frame header as it is, not copied into one buffer
        with it: it is written from the bytes storage read it into (frame_writes)."""
        data = entry.data if self.expose_entry_metadata else strip_broker_entry_metadata(entry.data)
        ledger_id, entry_id = entry.position
        header = self._message_headers.encode(consumer_id, ledger_id, entry_id, partition, len(data),
                                              entry.redelivery_count, entry.ack_set)
        if len(data) < LARGE_FRAME:
            self.send(header + data)
            return
        self.send(header)
        self.send(data)

    def send_reached_end_of_topic(self, consumer_id: int) -> None:
        """Told to clients that understand it. The official C++ client (4.2) does not: it
        drops the whole connection on a command it does not know, so it is not sent there."""
        if not self.client_version.startswith(CPP_CLIENT):
            self.send(commands.reached_end_of_topic(consumer_id))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        if self.protocol_version >= 12:
            self.send(commands.active_consumer_change(consumer_id, is_active))

    def tell_producer_closed(self, producer: Producer) -> None:
        """The broker closed `producer` (fencing, unload, deletion): forget it and tell the client."""
        producer.topic.remove_producer(producer)
        self.producers.pop(producer.producer_id, None)
        self._closed_by_broker[producer.producer_id] = None
        if len(self._closed_by_broker) > MAX_CLOSED_PRODUCERS_KEPT:
            del self._closed_by_broker[next(iter(self._closed_by_broker))]
        self.send(commands.close_producer(producer.producer_id))

    def recall_producer(self, producer_id: int) -> None:
        """A producer held while the disk was full may come back: a CLOSE_PRODUCER naming this
        broker as the one its topic is assigned to (PIP-307), at the address the client looked
        it up by, has the official client re-create it now instead of after its backoff."""
        if self.transport is None or producer_id in self.producers:
            return
        listener = self.lookup_listener or self.service.listeners.resolve(None)
        self.send(commands.close_producer(producer_id, listener.broker_service_url, listener.broker_service_url_tls))

    def tell_consumer_closed(self, consumer: Consumer) -> None:
        """The broker closed `consumer` (seek, reset, unload, deletion): forget it and tell
        the client, which subscribes again where it should."""
        self.consumers.pop(consumer.consumer_id, None)
        self.send(commands.close_consumer(consumer.consumer_id))

    # -- keep-alive
    def _arm_keepalive(self) -> None:
        interval = self.service.config.keepAliveIntervalSeconds
        self._keepalive = asyncio.get_running_loop().call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self.transport is None:
            return
        interval = self.service.config.keepAliveIntervalSeconds
        if not self.connected:  # as Pulsar: no CONNECT within one interval, no connection
            log.warning("%s did not complete the handshake within %ss; closing", self, interval)
            self.close()
            return
        now = time.monotonic()
        if self._throttle is not None:  # a publish rate holds it: its client's PONG waits unread
            self._last_seen = now
        if self._ping_outstanding and now - self._last_seen >= interval:
            log.warning("%s did not answer a ping within %ss; closing", self, interval)
            self.close()
            return
        if self._partial_since is not None and now - self._partial_since >= 2 * interval:
            log.warning("%s left a frame unfinished for %ss; closing", self, 2 * interval)
            self.close()
            return
        self._ping_outstanding = True
        self.send(commands.ping())
        self._arm_keepalive()

    # -- errors
    def _reply_error(self, cmd: pb.BaseCommand, code: int, message: str) -> None:
        """Answer a failed request in the response type the client looks for."""
        body = command_body(cmd)
        request_id = getattr(body, "request_id", 0) if body is not None else 0
        if cmd.type == T.PARTITIONED_METADATA:
            self.send(commands.partitioned_metadata_error(request_id, code, message))
        elif cmd.type == T.LOOKUP:
            self.send(commands.lookup_error(request_id, code, message))
        elif cmd.type == T.GET_SCHEMA:
            self.send(commands.get_schema_error(request_id, code, message))
        elif cmd.type == T.GET_OR_CREATE_SCHEMA:
            self.send(commands.get_or_create_schema_error(request_id, code, message))
        elif cmd.type == T.SEND:
            producer = self.producers.get(cmd.send.producer_id)
            if producer is not None:
                producer.refuse(cmd.send.sequence_id, code, message)
        else:
            self.send(commands.error(request_id, code, message))

    def _unsupported(self, cmd: pb.BaseCommand) -> None:
        name = T.Type.Name(cmd.type) if cmd.type in T.Type.values() else str(cmd.type)
        log.info("%s sent unsupported command %s", self, name)
        self._reply_error(cmd, pb.NotAllowedError, f"magnetar does not support {name}")

    # ------------------------------------------------------------------ handlers
    def handle_connect(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        connect = cmd.connect
        self.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.expose_entry_metadata = (
            self.service.config.exposingBrokerEntryMetadataToClientEnabled
            and connect.protocol_version >= BEM_PROTOCOL_VERSION
            and connect.feature_flags.supports_broker_entry_metadata
        )
        self.repl_dedup_by_position = connect.feature_flags.supports_repl_dedup_by_lid_and_eid
        if self.auth is not None or self.connected:
            log.warning("%s sent CONNECT again; closing", self)
            self.close()
            return
        self.client_version = connect.client_version
        if self.service.authentication.enabled:
            from magnetar.broker.auth.session import ConnectionAuth  # noqa: PLC0415 (a broker without authentication never needs it)

            self.auth = ConnectionAuth(self, self.service.authentication,
                                       self.service.config.authenticationRefreshCheckSeconds)
            self.auth.on_connect(connect, lambda: self._complete_connect(connect))
            return
        self._complete_connect(connect)

    def _complete_connect(self, connect: pb.CommandConnect) -> None:
        self.connected = True
        log.info("%s connected: %s, protocol version %d%s", self, connect.client_version, self.protocol_version,
                 f", role {self.role!r}" if self.auth is not None else "")
        self.send(self.connected_frame())

    def connected_frame(self) -> bytes:
        return commands.connected(SERVER_VERSION, self.protocol_version, self.service.config.maxMessageSize)

    @property
    def reads_connect_errors(self) -> bool:
        """Whether the client reads an ERROR answering its CONNECT, as Pulsar's Java client
        does; the official C++ client drops it (auth.session says what is done instead)."""
        return not self.client_version.startswith(CPP_CLIENT)

    @property
    def role(self) -> str | None:
        """The authenticated role (None when authentication is off)."""
        return self.auth.role if self.auth is not None else None

    def authorize(self, operation: Operation, topic: str | None = None, namespace: str | None = None) -> None:
        """Raise AuthorizationError unless this connection's role may perform `operation` on
        `topic` (or in `namespace`), checked before anything is created for it. The refusal
        names the role, the action and the resource; the command's error path logs it, once."""
        authorization = self.service.authorization
        if authorization.enabled:
            resource = Resource.of_topic(self.service.parse_topic(topic)) if topic is not None \
                else Resource.of_namespace(namespace or "")
            authorization.check(operation, self.role, resource)

    def handle_auth_response(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        if self.auth is None:
            self._reply_error(cmd, pb.NotAllowedError, "AUTH_RESPONSE answers nothing: authentication is off")
            return
        self.auth.on_auth_response(cmd.authResponse)

    def handle_ping(self, _cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        self.send(commands.pong())

    def handle_pong(self, _cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        self._ping_outstanding = False

    def handle_producer(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.producer
        self._closed_by_broker.pop(req.producer_id, None)
        existing = self.producers.get(req.producer_id)
        if existing is not None:  # a retried request for a producer we already made
            self.send(commands.producer_success(req.request_id, existing.name, _last_sequence_id(existing),
                                                topic_epoch=existing.topic_epoch,
                                                schema_version=existing.schema_version))
            return
        try:
            self.authorize(COMMANDS[T.PRODUCER], req.topic)
            topic = self.service.get_topic(req.topic, off_loop=True)
            schema = schema_commands.schema_of(req.schema, self.role) if req.HasField("schema") else None
            check_producer_encryption(topic, req.encrypted)
            schema_version = self.service.schemas.add_schema(topic.name, schema)
            name = req.producer_name or self.service.generate_producer_name()
            self._check_replicator_name(name)
            epoch = req.topic_epoch if req.HasField("topic_epoch") else None
            producer = topic.add_producer(self, req.producer_id, name, req.producer_access_mode, epoch)
        except BrokerServiceError as exc:
            log.info("%s [%s] producer refused: %s", self, req.topic, exc.message)
            self.send(commands.error(req.request_id, exc.code, exc.message))
            return
        producer.schema_version = schema_version
        self.producers[req.producer_id] = producer
        self.service.full_disk.producer_admitted(self, req.producer_id)
        log.info("%s [%s] created producer %r (%s)", self, topic.name, producer.name,
                 pb.ProducerAccessMode.Name(producer.access_mode))
        self.send(commands.producer_success(req.request_id, producer.name, _last_sequence_id(producer),
                                            topic_epoch=producer.topic_epoch, schema_version=schema_version))

    def _check_replicator_name(self, name: str) -> None:
        """A producer named as another cluster's replicator (`replicatorPrefix`) is trusted with
        what only replicators do (messages stored as replicated, snapshot markers that move
        subscriptions): with authorization on, only a super user may take such a name, as the
        role a broker replicates with must be one in Pulsar."""
        authorization = self.service.authorization
        if (authorization.enabled and has_replicator_prefix(name, self.service.config.replicatorPrefix)
                and not authorization.is_super_user(self.role)):
            raise BrokerServiceError(pb.AuthorizationError, f"Producer name '{name}' is a replicator's "
                                     f"(replicatorPrefix): only a super user may use it")

    def handle_send(self, cmd: pb.BaseCommand, payload: bytes | None) -> None:
        send = cmd.send
        producer = self.producers.get(send.producer_id)
        if producer is None:
            if send.producer_id in self._closed_by_broker:  # sent before our CLOSE_PRODUCER arrived
                log.debug("%s sent to producer %d, which the broker closed", self, send.producer_id)
                return
            log.warning("%s sent to unknown producer %d; closing", self, send.producer_id)
            self.close()
            return
        problem = check_send(send, payload, producer.topic, self._max_message_size, replicator=producer.replicator)
        if problem is not None:
            producer.refuse(send.sequence_id, *problem)
            return
        sequence_id = send.sequence_id
        num_messages = send.num_messages
        batch_size = num_messages if send.HasField("num_messages") else -1
        highest = max(send.highest_sequence_id, sequence_id)  # Pulsar's rule: a lower highest id is ignored
        record = _new_send(Send, (sequence_id, highest, payload, num_messages, batch_size))
        limiter = producer.topic.send_limits[1].publish_limiter  # type: ignore[index]  # check_send set it
        if limiter is not None and (wait := limiter.consume(num_messages, len(payload))):  # type: ignore[arg-type]
            self.throttle(wait)
        if send.txnid_least_bits:  # a transactional message (PIP-31; ids start at 1): loaded when met
            from magnetar.broker.transport import txn_commands  # noqa: PLC0415

            if txn_commands.handle_send(self, producer, send, record):
                self._staging.append(producer)
            return
        if producer.stage(record):
            self._staging.append(producer)

    def handle_close_producer(self, cmd: pb.BaseCommand, _payload: bytes | None) -> None:
        req = cmd.close_producer
        self.withdraw("producer", req.producer_id)
        producer = self.producers.pop(req.producer_id, None)
        if producer is not None:
            producer.topic.remove_producer(producer)
            log.info("%s [%s] closed producer %r", self, producer.topic.name, producer.name)
        else:
            self.service.full_disk.forget(self, req.producer_id)
        self.send(commands.success(req.request_id))


def _transaction_command(cnx: ServerCnx, cmd: pb.BaseCommand, payload: bytes | None) -> None:
    """The coordinator's commands, whose module is loaded the first time a client sends one."""
    from magnetar.broker.transport import txn_commands  # noqa: PLC0415

    txn_commands.handle(cnx, cmd, payload)


def _last_sequence_id(producer: Producer) -> int:
    """With deduplication on, a producer learns where its name left off (Pulsar's rule)."""
    dedup = producer.topic.deduplication
    return dedup.last_sequence_id(producer.name) if dedup is not None else -1


_HANDLERS: dict[int, Handler] = {
    T.CONNECT: ServerCnx.handle_connect,
    T.AUTH_RESPONSE: ServerCnx.handle_auth_response,
    T.PING: ServerCnx.handle_ping,
    T.PONG: ServerCnx.handle_pong,
    T.PARTITIONED_METADATA: lookup_commands.handle_partitioned_metadata,
    T.LOOKUP: lookup_commands.handle_lookup,
    T.GET_TOPICS_OF_NAMESPACE: lookup_commands.handle_get_topics_of_namespace,
    T.GET_SCHEMA: schema_commands.handle_get_schema,
    T.GET_OR_CREATE_SCHEMA: schema_commands.handle_get_or_create_schema,
    T.PRODUCER: ServerCnx.handle_producer,
    T.SEND: ServerCnx.handle_send,
    T.CLOSE_PRODUCER: ServerCnx.handle_close_producer,
    T.SUBSCRIBE: consumer_commands.handle_subscribe,
    T.FLOW: consumer_commands.handle_flow,
    T.ACK: consumer_commands.handle_ack,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES: consumer_commands.handle_redeliver,
    T.CLOSE_CONSUMER: consumer_commands.handle_close_consumer,
    T.UNSUBSCRIBE: consumer_commands.handle_unsubscribe,
    T.SEEK: consumer_commands.handle_seek,
    T.GET_LAST_MESSAGE_ID: consumer_commands.handle_get_last_message_id,
    T.CONSUMER_STATS: consumer_commands.handle_consumer_stats,
    **dict.fromkeys((T.TC_CLIENT_CONNECT_REQUEST, T.NEW_TXN, T.ADD_PARTITION_TO_TXN, T.ADD_SUBSCRIPTION_TO_TXN,
                     T.END_TXN, T.END_TXN_ON_PARTITION, T.END_TXN_ON_SUBSCRIPTION), _transaction_command),
}


def _kafka_request_head(data: bytes) -> bool:
    """Whether a read starts as a Kafka request does: its size, then an API key and version where a
    Pulsar frame has its command's size (so that size overruns the frame, as the decoder found)."""
    if len(data) < 8:
        return False
    api_key, version = _KAFKA_HEAD.unpack_from(data, 4)
    return 0 < api_key <= _KAFKA_MAX_API_KEY and 0 <= version <= _KAFKA_MAX_VERSION
