"""A consumer of one topic partition: subscription, flow control, acks, nacks, seek, redelivery.

Flow control is the official client's: after subscribing it grants `receiver_queue_size`
permits, and gives them back in one FLOW once half were used. A permit is used when the
application takes a message (or when the client drops one: already acked in a redelivered
batch, before the start position, a broken checksum). Messages wait in the receiver queue,
which the application may drain from the event loop or from its own threads (the blocking
facade); only the permit arithmetic crosses threads, and only a FLOW is posted back.

After a lost connection or a broker-initiated close the consumer subscribes again: a
durable subscription resumes where the broker's cursor is (unacked messages come again),
a reader (non-durable) resumes after the last message the application took. The receiver
queue is emptied then, as in the C++ client, since the broker sends those again.

The consumer owns what it delegates to, each with its own state: an `Intake` (MESSAGE
frames into queue items; the connection calls its `on_message`), a `Redelivery` (negative
acks, the unacked timeout, dead letters), a `Receiver` (what the application takes) and
`RowAcks` (receive_arrow's rows acknowledged so far).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.acks import AckGroupingTracker
from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue
from magnetar.client.aio.handler import Handler
from magnetar.client.aio.intake import Intake
from magnetar.client.aio.letters import Letters
from magnetar.client.aio.receive_queue import AsyncReceiveQueue
from magnetar.client.aio.receiver import Receiver, Receiving
from magnetar.client.aio.redelivery import Redelivery
from magnetar.client.columnar import RowAcks
from magnetar.client.enums import ConsumerType
from magnetar.client.incoming import BatchAcks, StartFilter
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId, as_message_id
from magnetar.wire import client_commands as cc
from magnetar.wire import txn as wire_txn
from magnetar.wire.message_id import INT64_MAX, ack_set_from_indexes, ack_set_of_bits
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.connection import Connection
    from magnetar.client.aio.context import ClientContext
    from magnetar.client.aio.transaction import Transaction

__all__ = ["Consumer", "ConsumerConfig", "ReceiveQueue"]

log = logging.getLogger(__name__)


class Consumer(Handler, Receiving):
    """A subscription's consumer on one topic (or one partition of a partitioned topic)."""

    on_message: Callable[[pb.CommandMessage, bytes], None]
    """MESSAGE frames, from the connection: the intake's `on_message`, bound once."""

    def __init__(self, context: ClientContext, topic: str, subscription: str, config: ConsumerConfig,
                 queue: ReceiveQueue | None = None, partition: int = -1, letters: Letters | None = None,
                 queue_size: int | None = None) -> None:
        super().__init__(context, topic)
        self.letters = letters
        """The subscription's dead-letter and retry-letter topics (with a dead_letter_policy)."""
        self.subscription = subscription
        self.config = config
        self.partition = partition
        self.consumer_id = context.new_consumer_id()
        self.queue: ReceiveQueue = queue if queue is not None else AsyncReceiveQueue()
        self._threaded = self.queue.threaded
        self._name = config.consumer_name if config.consumer_name is not None else ""
        self._queue_size = max(1, config.receiver_queue_size if queue_size is None else queue_size)
        """Permits granted at most: receiver_queue_size, or a partition's share of a multi-topic consumer's."""
        self._flow_threshold = max(1, self._queue_size // 2)
        self._taken = 0
        """Messages the application took (written by the thread that takes them)."""
        self._dropped = 0
        """Messages the client dropped (written by the event loop only)."""
        self._returned = 0
        self._flow_scheduled = False
        self._ready = False
        self._last_taken: Message | None = None
        """The last message the application took (readers resume after it)."""
        self._seek_by_time = False
        self._acks: AckGroupingTracker | None = None
        self._ready_event = asyncio.Event()
        self._shared = int(config.consumer_type) in (ConsumerType.Shared, ConsumerType.KeyShared)
        self._redelivery = Redelivery(self._loop, topic, self.consumer_id, config, letters, shared=self._shared,
                                      write=self._write, redeliver_all=self.redeliver_unacknowledged_messages,
                                      acknowledge=self.acknowledge)
        self._row_acks = RowAcks(config.durable)
        self._intake = Intake(self, topic, self.consumer_id, config, self.queue, self._redelivery, self._row_acks,
                              loop=self._loop, write=self._write, permits_used=self._permits_used,
                              after_read=self._after_read)
        self._intake.start = self._start_filter(config.start_message_id, config.start_message_id_inclusive)
        self.on_message = self._intake.on_message
        self._own(Receiver(self.queue, topic, config, self._row_owner))

    @staticmethod
    def _start_filter(start: MessageId | None, inclusive: bool) -> StartFilter | None:
        if start is None or start.ledger_id() < 0 or start.ledger_id() == INT64_MAX:
            return None
        return StartFilter(start.ledger_id(), start.entry_id(), start.batch_index(), inclusive)

    # -- the official accessors
    def subscription_name(self) -> str:
        return self.subscription

    def consumer_name(self) -> str:
        return self._name

    def is_connected(self) -> bool:
        return self._ready

    # -- registration
    async def _register(self, conn: Connection) -> None:
        self._ready = False
        self._ready_event.clear()
        start: WireId | None = None
        if not self.config.durable:
            if self._last_taken is not None:
                last = self._last_taken.message_id()
                start = WireId(last.ledger_id(), last.entry_id(), batch_index=last.batch_index())
                self._intake.start = StartFilter(last.ledger_id(), last.entry_id(), last.batch_index(), False)
            elif self.config.start_message_id is not None and not self._seek_by_time:
                first = self.config.start_message_id
                start = WireId(first.ledger_id(), first.entry_id(), batch_index=first.batch_index())
        conn.consumers[self.consumer_id] = self
        key_shared = self.config.consumer_type == ConsumerType.KeyShared
        try:
            await conn.request(lambda rid: cc.subscribe(
                rid, self.consumer_id, self.topic, self.subscription, int(self.config.consumer_type),
                consumer_name=self._name, durable=self.config.durable, start_message_id=start,
                initial_position=int(self.config.initial_position), read_compacted=self.config.is_read_compacted,
                properties=self.config.properties, subscription_properties=self.config.subscription_properties,
                key_shared_mode=self.config.key_shared_mode if key_shared else None,
                sticky_ranges=self.config.sticky_ranges, allow_out_of_order=self.config.allow_out_of_order_delivery,
                replicate_subscription_state=self.config.replicate_subscription_state_enabled,
                schema=None if self.config.schema is None else self.config.schema.wire(),
            ))
        except BaseException:
            conn.consumers.pop(self.consumer_id, None)
            raise

    # -- values
    def decode_value(self, message: Message) -> Any:
        """`Message.value()`: the payload read by this consumer's schema, from the version that
        wrote it (fetched once per client; the blocking facade waits for it here)."""
        schema = self.config.schema
        if schema is None:
            return message.data()
        writer = None
        version = message.schema_version()
        if schema.resolves_writer and version:
            writer = self.context.writer_schemas.get(message.topic_name(), version)
        return schema.decode_message(message, writer)

    async def load_writer_schema(self, message: Message) -> None:
        """Fetch the schema `message` was written with, if decoding it will need that."""
        schema = self.config.schema
        version = message.schema_version()
        if schema is not None and schema.resolves_writer and version:
            await self.context.writer_schemas.fetch(message.topic_name(), version)

    def _on_ready(self) -> None:
        conn = self.conn
        assert conn is not None
        if self._acks is None:
            self._acks = AckGroupingTracker(self._loop, self.consumer_id, self._write, self._threaded)
            self._redelivery.start()
        # What was queued came from the old registration; the broker sends it again.
        self.queue.clear(self, permits_back=False)
        self._taken = self._dropped = self._returned = 0
        self._ready = True
        conn.write(cc.flow(self.consumer_id, self._queue_size))
        self._ready_event.set()

    def _lost(self) -> None:
        self._ready = False
        self._ready_event.clear()
        super()._lost()

    def _write(self, frame: bytes) -> bool:
        conn = self.conn
        if conn is None or conn.closed or not self._ready:
            return False
        conn.write(frame)
        return True

    def _after_read(self, hook: Callable[[], None]) -> None:
        """`hook` once the read of the connection delivering this consumer's messages is
        dispatched; at once when this consumer has none dispatching."""
        conn = self.conn
        if conn is None:
            hook()
        else:
            conn.after_read(hook)

    def on_active_change(self, active: bool) -> None:
        log.debug("%s/%s active: %s", self.topic, self.subscription, active)

    # -- flow control
    def _permits_used(self, count: int) -> None:
        self._dropped += count
        self._maybe_flow()

    def taken(self, message: Message) -> None:
        """The application took `message` from the queue (any thread)."""
        self._taken = taken = self._taken + 1
        self._last_taken = message
        if taken + self._dropped - self._returned >= self._flow_threshold:
            self._maybe_flow()

    def dropped_by_reader(self, count: int) -> None:
        """A reader thread threw away messages queued before a clear() (their permits go back)."""
        self._taken += count
        self._maybe_flow()

    def _maybe_flow(self) -> None:
        if self._taken + self._dropped - self._returned < self._flow_threshold:
            return
        if self._threaded:
            if not self._flow_scheduled:
                self._flow_scheduled = True
                self._loop.call_soon_threadsafe(self._send_flow)
        else:
            self._send_flow()

    def _send_flow(self) -> None:
        self._flow_scheduled = False
        permits = self._taken + self._dropped - self._returned
        if permits > 0 and self._write(cc.flow(self.consumer_id, permits)):
            self._returned += permits

    # -- acknowledging
    def acknowledge(self, message: Any, txn: Transaction | None = None) -> asyncio.Future[None] | None:
        """Acknowledge one message or id (grouped, sent within 100 ms). In a transaction `txn`
        the acknowledgement is sent at once and takes effect if it commits: the future
        returned completes once the broker holds it (see `acknowledge_in_txn`)."""
        if txn is not None:
            done = asyncio.ensure_future(self.acknowledge_in_txn(message, txn))
            txn.track(done)
            return done
        if type(message) is Message:  # the common case: no id object needed
            ctx = message[1]
            ctx.owner._ack(ctx.ledger, ctx.entry, message[0][2], ctx.batch_size, ctx.acks)
            return
        mid = as_message_id(message)
        self._ack(mid._l, mid._e, mid._b, mid._n, mid.batch_acks)

    def _ack(self, ledger: int, entry: int, index: int, size: int, acks: Any) -> None:
        """Any thread: the grouping tracker takes acks from any, and the redelivery state,
        which belongs to the event loop, is told through a queue it reads on the loop (an
        application thread's ack woke the loop once per message when it was told directly)."""
        tracker = self._acks
        if tracker is None:
            return
        redelivery = self._redelivery
        if redelivery.tracking:
            if self._threaded:
                redelivery.acked_elsewhere(ledger, entry)
            else:
                redelivery.acked(ledger, entry)
        if type(acks) is list:  # a chunked message: every chunk's entry
            for chunk in acks:
                tracker.add(chunk.ledger_id, chunk.entry_id)
            return
        if index < 0:
            tracker.add(ledger, entry)
            return
        if acks is not None:
            if acks.ack(index):
                tracker.add(ledger, entry)
            elif self.config.batch_index_ack_enabled:
                tracker.add(ledger, entry, ack_set_from_indexes(acks.unacked(), acks.size))
            return
        if size <= 0:
            tracker.add(ledger, entry)
        else:  # an id without its batch's record (deserialized): ack its index alone
            tracker.add(ledger, entry, ack_set_from_indexes([i for i in range(size) if i != index], size))

    async def acknowledge_in_txn(self, message: Any, txn: Transaction, cumulative: bool = False) -> None:
        """Acknowledge `message` in `txn` (PIP-31): no consumer of the subscription gets it
        while the transaction is open; a commit acknowledges it, an abort gives it back. A
        message of a batch is acknowledged alone (an ack_set, as the Java client sends), so
        other transactions may take the batch's other messages. TransactionConflict when
        another open transaction holds it."""
        mid = as_message_id(message)
        await txn.register_acked(self.topic, self.subscription)
        if self.closed:  # closed meanwhile: the broker would hold nothing for the transaction
            raise errors.AlreadyClosed(f"consumer on {self.topic} closed before its acknowledgement in "
                                       f"transaction {txn.txn_id} was sent")
        conn = self.conn
        if conn is None:
            raise errors.NotConnected(f"consumer on {self.topic} is not connected")
        index, size = mid._b, mid._n
        ack_set = None
        if index >= 0 and size > 0:  # a batch's message: cumulative takes the batch's messages up to it
            acked = (1 << (index + 1)) - 1 if cumulative else 1 << index
            ack_set = ack_set_of_bits(((1 << size) - 1) & ~acked)
        await conn.request(lambda request_id: wire_txn.ack(self.consumer_id, request_id, txn.txn_id, mid._l, mid._e,
                                                           ack_set, size, cumulative))

    def acknowledge_cumulative(self, message: Any, txn: Transaction | None = None) -> asyncio.Future[None] | None:
        """Acknowledge everything up to and including `message` (Exclusive and Failover only).
        In a transaction `txn` as `acknowledge` with one: held for it, the future done once
        the broker holds it."""
        if self._shared:
            raise errors.CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared and Key_Shared subscriptions")
        if txn is not None:
            done = asyncio.ensure_future(self.acknowledge_in_txn(message, txn, cumulative=True))
            txn.track(done)
            return done
        mid = as_message_id(message)
        if self._threaded:
            self._loop.call_soon_threadsafe(self._ack_cumulative, mid)
        else:
            self._ack_cumulative(mid)

    def _ack_cumulative(self, mid: MessageId) -> None:
        tracker = self._acks
        if tracker is None:
            return
        if self._redelivery.tracking:
            self._redelivery.acked_up_to(mid._l, mid._e)
        if mid._b < 0 or mid._n <= 0 or mid._b == mid._n - 1:
            tracker.add_cumulative(mid._l, mid._e)
        elif self.config.batch_index_ack_enabled:
            tracker.add_cumulative(mid._l, mid._e, ack_set_from_indexes(range(mid._b + 1, mid._n), mid._n))
        else:  # the rest of the batch is not acked: stop at the entry before it, as C++ does
            tracker.add_cumulative(mid._l, mid._e - 1)

    # -- redelivery (the Redelivery object's; flow control stays here)
    def negative_acknowledge(self, message: Any) -> None:
        """Ask for redelivery after `negative_ack_redelivery_delay_ms`."""
        mid = as_message_id(message)
        if self._threaded:
            self._loop.call_soon_threadsafe(self._redelivery.nack, mid)
        else:
            self._redelivery.nack(mid)

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask for every unacked message again; queued messages are dropped (they come back)."""
        cleared = self.queue.clear(self, permits_back=True)
        self._dropped += cleared
        self._write(cc.redeliver(self.consumer_id))
        self._maybe_flow()

    async def reconsume_later(self, message: Message, delay_ms: int, properties: dict[str, str] | None = None
                              ) -> None:
        """Send `message` to the retry-letter topic, delivered again after `delay_ms` (the Java
        client's reconsumeLater; needs `retry_enable=True` and a dead-letter policy)."""
        owner = message[1].owner
        if owner.letters is None:
            raise errors.InvalidConfiguration("reconsume_later needs subscribe(..., retry_enable=True, "
                                              "dead_letter_policy=...)")
        await owner.letters.reconsume_later(message, delay_ms, properties, owner.acknowledge)

    # -- rows (receive_arrow; see columnar.RowOwner)
    def entry_unreadable(self, ledger: int, entry: int, exc: Exception, discard: bool) -> None:
        self._intake.entry_unreadable(ledger, entry, exc, discard)

    def rows_taken(self, last: Message) -> None:
        """The application took rows up to `last` (a stand-in message): readers resume after it."""
        self._last_taken = last

    def keep_row_acks(self, ledger: int, entry: int, acks: BatchAcks) -> None:
        """Track the rows of an entry decoded into messages before the first receive_arrow,
        as a raw entry's are tracked."""
        self._row_acks.keep(ledger, entry, acks)

    def ack_row_cumulative(self, ledger: int, entry: int, index: int) -> None:
        """Cumulative acknowledgement up to one row."""
        self.acknowledge_cumulative(MessageId(-1, ledger, entry, index, self._row_acks.size(ledger, entry, index)))

    def ack_rows(self, ledger: int, entry: int, indexes: list[int]) -> None:
        """Acknowledge the rows of one entry (from receive_arrow's ledger_id/entry_id/batch_index)."""
        self._ack(ledger, entry, *self._row_acks.ack(ledger, entry, indexes))

    def _row_owner(self, topic: str) -> Consumer:
        return self

    # -- positions
    async def seek(self, target: Any) -> None:
        """Move the subscription to a message id or to a publish time (int, ms)."""
        conn = self.conn
        if conn is None or not self._ready:
            raise errors.NotConnected(f"consumer on {self.topic} is not connected")
        if isinstance(target, int):
            await conn.request(lambda rid: cc.seek(rid, self.consumer_id, publish_time=target))
            self._seek_by_time = True
            self._last_taken = None
            self._intake.start = None
        else:
            mid = as_message_id(target)
            await conn.request(lambda rid: cc.seek(rid, self.consumer_id, message_id=mid.wire))
            self._seek_by_time = False
            self._last_taken = None
            if mid.ledger_id() in (-1, INT64_MAX):
                self._intake.start = None
            else:
                self._intake.start = StartFilter(mid.ledger_id(), mid.entry_id(), mid.batch_index(),
                                                 self.config.start_message_id_inclusive)
            if not self.config.durable:
                self.config.start_message_id = mid
        if self.conn is conn and self._ready:
            # The broker answered without closing us: forget what was queued, ask again.
            self.queue.clear(self, permits_back=False)
            self._taken = self._dropped = self._returned = 0
            conn.write(cc.redeliver(self.consumer_id))
            conn.write(cc.flow(self.consumer_id, self._queue_size))
        async with asyncio.timeout(self.context.operation_timeout):
            await self._ready_event.wait()

    async def get_last_message_id(self) -> MessageId:
        body = await self._last_message_id()
        return MessageId.of(WireId.from_proto(body.last_message_id), self.topic)

    async def _last_message_id(self) -> pb.CommandGetLastMessageIdResponse:
        conn = self.conn
        if conn is None:
            raise errors.NotConnected(f"consumer on {self.topic} is not connected")
        answer = await conn.request(lambda rid: cc.get_last_message_id(rid, self.consumer_id))
        return answer.getLastMessageIdResponse

    async def has_message_available(self) -> bool:
        """Whether a message is queued or stored after the position this consumer reached."""
        if len(self.queue):
            return True
        body = await self._last_message_id()
        last = WireId.from_proto(body.last_message_id)
        if last.entry_id < 0:
            return False
        last_pos = (last.ledger_id, last.entry_id, last.batch_index)
        if self._last_taken is not None:
            taken = self._last_taken._ctx
            return last_pos > (taken.ledger, taken.entry, self._last_taken._index)
        start = self.config.start_message_id
        if start is not None and not self._seek_by_time and start.ledger_id() != INT64_MAX:
            if start.ledger_id() < 0:
                return True  # from the earliest message of a topic that has one
            start_pos = (start.ledger_id(), start.entry_id(), start.batch_index())
            return last_pos >= start_pos if self.config.start_message_id_inclusive else last_pos > start_pos
        # at latest, after a seek by time, or a durable subscription: the broker's cursor decides
        if not body.HasField("consumer_mark_delete_position"):
            return False
        mark = WireId.from_proto(body.consumer_mark_delete_position)
        return (mark.ledger_id, mark.entry_id) < (last.ledger_id, last.entry_id)

    # -- leaving
    async def unsubscribe(self) -> None:
        conn = self.conn
        if conn is None:
            raise errors.NotConnected(f"consumer on {self.topic} is not connected")
        await conn.request(lambda rid: cc.unsubscribe(rid, self.consumer_id))
        await self._close(send=False)

    async def close(self) -> None:
        await self._close(send=True)

    async def _close(self, send: bool) -> None:
        if self.closed:
            return
        if self._acks is not None:
            self._acks.close()
        self._stop_reconnecting()
        self._ready = False
        self._redelivery.close()
        self._receiver.close()
        conn = self.conn
        if conn is not None and not conn.closed:
            conn.consumers.pop(self.consumer_id, None)
            if send:
                with contextlib.suppress(errors.PulsarException):
                    await conn.request(lambda rid: cc.close_consumer(rid, self.consumer_id))

