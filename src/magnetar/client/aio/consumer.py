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
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.acks import AckGroupingTracker
from magnetar.client.aio.handler import Handler
from magnetar.client.aio.intake import ConsumerIntake
from magnetar.client.aio.letters import DeadLetterPolicy, Letters
from magnetar.client.aio.receive_queue import AsyncReceiveQueue, ThreadReceiveQueue
from magnetar.client.aio.receiver import Receiver
from magnetar.client.aio.redelivery import Redelivery
from magnetar.client.enums import ConsumerType, InitialPosition
from magnetar.client.incoming import ChunkAssembler, StartFilter, decode_entry
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId, as_message_id
from magnetar.formats.processor import PayloadError, ProcessorSet
from magnetar.wire import client_commands as cc
from magnetar.wire.message_id import INT64_MAX, ack_set_from_indexes
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.client import Client
    from magnetar.client.aio.connection import Connection

log = logging.getLogger(__name__)

MAX_UNCOMPRESSED = 64 * 1024 * 1024
"""Largest decompressed payload accepted (a batch or a reassembled chunked message)."""

ReceiveQueue = AsyncReceiveQueue | ThreadReceiveQueue


@dataclass(slots=True)
class ConsumerConfig:
    consumer_type: int = ConsumerType.Exclusive
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int | None = None
    negative_ack_redelivery_delay_ms: int = 60000
    is_read_compacted: bool = False
    properties: Mapping[str, str] = field(default_factory=dict)
    subscription_properties: Mapping[str, str] = field(default_factory=dict)
    initial_position: int = InitialPosition.Latest
    start_message_id_inclusive: bool = False
    batch_index_ack_enabled: bool = False
    replicate_subscription_state_enabled: bool = False
    max_pending_chunked_message: int = 10
    dead_letter_policy: DeadLetterPolicy | None = None
    key_shared_mode: int = 0
    sticky_ranges: tuple[tuple[int, int], ...] = ()
    allow_out_of_order_delivery: bool = False
    durable: bool = True
    start_message_id: MessageId | None = None
    """Readers: where to start (earliest, latest or an id)."""
    payload_processors: ProcessorSet | None = None
    """PIP-96: how entries are read; None = Pulsar's format only, exactly as without processors."""
    columnar: bool = False
    """Set by the first receive_arrow(): entries are queued raw, for columns."""


class Consumer(ConsumerIntake, Redelivery, Handler, Receiver):
    """A subscription's consumer on one topic (or one partition of a partitioned topic)."""

    def __init__(self, client: Client, topic: str, subscription: str, config: ConsumerConfig,
                 queue: ReceiveQueue | None = None, partition: int = -1, letters: Letters | None = None) -> None:
        super().__init__(client, topic)
        self.letters = letters
        """The subscription's dead-letter and retry-letter topics (with a dead_letter_policy)."""
        self.subscription = subscription
        self.config = config
        self.partition = partition
        self.consumer_id = client.new_consumer_id()
        self.queue: ReceiveQueue = queue if queue is not None else AsyncReceiveQueue()
        self._threaded = self.queue.threaded
        self._name = config.consumer_name if config.consumer_name is not None else ""
        self._queue_size = max(1, config.receiver_queue_size)
        self._flow_threshold = max(1, self._queue_size // 2)
        self._taken = 0
        """Messages the application took (written by the thread that takes them)."""
        self._dropped = 0
        """Messages the client dropped (written by the event loop only)."""
        self._returned = 0
        self._flow_scheduled = False
        self._ready = False
        self._start: StartFilter | None = self._start_filter(config.start_message_id,
                                                             config.start_message_id_inclusive)
        self._last_taken: Message | None = None
        """The last message the application took (readers resume after it)."""
        self._seek_by_time = False
        self._chunks = ChunkAssembler(config.max_pending_chunked_message)
        self._acks: AckGroupingTracker | None = None
        self._nacks: dict[tuple[int, int], tuple[float, MessageId]] = {}
        self._nack_timer: asyncio.TimerHandle | None = None
        self._unacked: dict[tuple[int, int], float] = {}
        self._unacked_timer: asyncio.TimerHandle | None = None
        self._dead_letters: dict[tuple[int, int], list[Message]] = {}
        self._row_acks: dict[tuple[int, int], Any] = {}
        self._ready_event = asyncio.Event()
        self._shared = int(config.consumer_type) in (ConsumerType.Shared, ConsumerType.KeyShared)

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
                self._start = StartFilter(last.ledger_id(), last.entry_id(), last.batch_index(), False)
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
            ))
        except BaseException:
            conn.consumers.pop(self.consumer_id, None)
            raise

    def _on_ready(self) -> None:
        conn = self.conn
        assert conn is not None
        if self._acks is None:
            self._acks = AckGroupingTracker(self._loop, self.consumer_id, self._write, self._threaded)
            if self.config.unacked_messages_timeout_ms:
                self._arm_unacked_check()
        # What was queued came from the old registration; the broker sends it again.
        self.queue.clear()
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

    def on_active_change(self, active: bool) -> None:
        log.debug("%s/%s active: %s", self.topic, self.subscription, active)

    # -- receiving
    def on_message(self, message: pb.CommandMessage, payload: bytes) -> None:
        if self.config.columnar and self._queue_raw(message, payload):
            return
        try:
            decoded = decode_entry(self, self.topic, message, payload, max_size=MAX_UNCOMPRESSED, start=self._start,
                                   track_batch_acks=not self.config.batch_index_ack_enabled, chunks=self._chunks,
                                   skip_compacted_out=self.config.is_read_compacted,
                                   processors=self.config.payload_processors)
        except PayloadError as exc:
            self._entry_failed(message.message_id.ledgerId, message.message_id.entryId, exc)
            return
        except ValueError as exc:
            log.warning("%s: dropping undecodable entry %s: %s", self.topic, message.message_id, exc)
            self._write(cc.ack(self.consumer_id, [WireId(message.message_id.ledgerId,
                                                         message.message_id.entryId).to_proto()],
                               validation_error=pb.CommandAck.BatchDeSerializeError))
            self._permits_used(1)
            return
        if decoded.corrupt:
            mid = message.message_id
            self._write(cc.ack(self.consumer_id, [WireId(mid.ledgerId, mid.entryId).to_proto()],
                               validation_error=pb.CommandAck.ChecksumMismatch))
        messages = decoded.messages
        if messages:
            if self._start is not None:
                self._start = None  # the position is passed: later redeliveries are not filtered
            dlq = self.config.dead_letter_policy
            if dlq is not None and message.redelivery_count >= dlq.max_redeliver_count:
                self._dead_letters[(message.message_id.ledgerId, message.message_id.entryId)] = messages
            if self._unacked_timer is not None:
                self._unacked[(message.message_id.ledgerId, message.message_id.entryId)] = time.monotonic()
            self.queue.put_many(messages)
        if decoded.skipped:
            self._permits_used(decoded.skipped)

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
    def acknowledge(self, message: Any) -> None:
        """Acknowledge one message or id (grouped, sent within 100 ms)."""
        if type(message) is Message:  # the common case: no id object needed
            ctx = message[1]
            owner = ctx.owner
            if owner._threaded and (owner._unacked_timer is not None or owner._nacks):
                owner._loop.call_soon_threadsafe(owner._ack_now, ctx.ledger, ctx.entry, message[0][2],
                                                 ctx.batch_size, ctx.acks)
            else:
                owner._ack_now(ctx.ledger, ctx.entry, message[0][2], ctx.batch_size, ctx.acks)
            return
        mid = as_message_id(message)
        self._owner_of(message, mid)._ack(mid._l, mid._e, mid._b, mid._n, mid.batch_acks)

    def _owner_of(self, message: Any, mid: MessageId) -> Consumer:
        return self

    def _ack(self, ledger: int, entry: int, index: int, size: int, acks: Any) -> None:
        if self._threaded and (self._unacked_timer is not None or self._nacks):
            # those dicts belong to the event loop
            self._loop.call_soon_threadsafe(self._ack_now, ledger, entry, index, size, acks)
        else:
            self._ack_now(ledger, entry, index, size, acks)

    def _ack_now(self, ledger: int, entry: int, index: int, size: int, acks: Any) -> None:
        tracker = self._acks
        if tracker is None:
            return
        if self._unacked:
            self._unacked.pop((ledger, entry), None)
        if self._nacks:
            self._nacks.pop((ledger, entry), None)
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

    def acknowledge_cumulative(self, message: Any) -> None:
        """Acknowledge everything up to and including `message` (Exclusive and Failover only)."""
        if self._shared:
            raise errors.CumulativeAcknowledgementNotAllowedError(
                "cumulative acknowledgement is not allowed on Shared and Key_Shared subscriptions")
        mid = as_message_id(message)
        owner = self._owner_of(message, mid)
        if self._threaded:
            self._loop.call_soon_threadsafe(owner._ack_cumulative, mid)
        else:
            owner._ack_cumulative(mid)

    def _ack_cumulative(self, mid: MessageId) -> None:
        tracker = self._acks
        if tracker is None:
            return
        if self._unacked:
            for key in [k for k in self._unacked if k <= (mid._l, mid._e)]:
                del self._unacked[key]
        if mid._b < 0 or mid._n <= 0 or mid._b == mid._n - 1:
            tracker.add_cumulative(mid._l, mid._e)
        elif self.config.batch_index_ack_enabled:
            tracker.add_cumulative(mid._l, mid._e, ack_set_from_indexes(range(mid._b + 1, mid._n), mid._n))
        else:  # the rest of the batch is not acked: stop at the entry before it, as C++ does
            tracker.add_cumulative(mid._l, mid._e - 1)

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
            self._start = None
        else:
            mid = as_message_id(target)
            await conn.request(lambda rid: cc.seek(rid, self.consumer_id, message_id=mid.wire))
            self._seek_by_time = False
            self._last_taken = None
            if mid.ledger_id() in (-1, INT64_MAX):
                self._start = None
            else:
                self._start = StartFilter(mid.ledger_id(), mid.entry_id(), mid.batch_index(),
                                          self.config.start_message_id_inclusive)
            if not self.config.durable:
                self.config.start_message_id = mid
        if self.conn is conn and self._ready:
            # The broker answered without closing us: forget what was queued, ask again.
            self.queue.clear()
            self._taken = self._dropped = self._returned = 0
            conn.write(cc.redeliver(self.consumer_id))
            conn.write(cc.flow(self.consumer_id, self._queue_size))
        async with asyncio.timeout(self.client.operation_timeout):
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
        for timer in (self._nack_timer, self._unacked_timer):
            if timer is not None:
                timer.cancel()
        self.queue.fail_waiters(errors.AlreadyClosed(f"consumer on {self.topic} closed"))
        conn = self.conn
        if conn is not None and not conn.closed:
            conn.consumers.pop(self.consumer_id, None)
            if send:
                with contextlib.suppress(errors.PulsarException):
                    await conn.request(lambda rid: cc.close_consumer(rid, self.consumer_id))

