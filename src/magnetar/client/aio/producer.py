"""A producer on one topic partition: sequence ids, batching, pending sends, receipts, resends.

Messages get their sequence id when they are handed over, go through the batch container
(or straight out when batching is off, the message is delayed or it must be chunked), and
each SEND becomes an `OpSend` queued in send order. Receipts must come back in that order
(the broker answers per producer in order); the head op takes a receipt whose sequence id
lies in its range, and completes its messages' callbacks or futures with their ids. After a
reconnect every pending op is written again, in order and with its sequence ids, so the
broker sees the same sequence as before. Taking receipts (aio.send_receipts) and failing
sends (aio.send_failures: SEND_ERROR, send timeout, termination) are mixins of their own.

`send_async(content, callback)` is the hot path: no coroutine, no future, one callback per
message, as in the official client; `await send(...)` wraps it in a future.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.handler import Handler
from magnetar.client.aio.producer_config import ProducerConfig
from magnetar.client.aio.send_failures import SendFailures
from magnetar.client.aio.send_ops import ChunkState, Completion, OpSend, fail
from magnetar.client.batching import Batch, BatchContainer, KeyBasedContainer
from magnetar.client.entries import arrow_entries, check_count, entry_metadata
from magnetar.client.enums import BatchingType, Result
from magnetar.client.message_id import MessageId
from magnetar.client.outgoing import (
    PendingMessage,
    PlainMetadata,
    Sealer,
    build_batch_entry,
    chunk_entries,
    is_plain,
    single_metadata,
)
from magnetar.wire import client_commands as cc
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.connection import Connection
    from magnetar.client.aio.context import ClientContext
    from magnetar.client.aio.transaction import Transaction

__all__ = ["Producer", "ProducerConfig", "SendCallback"]

log = logging.getLogger(__name__)

SendCallback = Callable[[Result, MessageId], None]

_ENTRY_SLACK = 6
"""What the general path below leaves under the broker's limit beyond an entry's own bytes."""

def _millis(value: int | timedelta | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)


def _sealer(config: ProducerConfig) -> Sealer | None:
    """The producer's Encryptor when it encrypts (CryptoError when a key cannot be used); the
    crypto package, and `cryptography` with it, load only then."""
    if not config.encryption_keys:
        return None
    from magnetar.client.crypto.message_crypto import Encryptor  # noqa: PLC0415 (see above)

    return Encryptor(config.encryption_keys, config.crypto_key_reader)


class Producer(Handler, SendFailures):
    """A producer of one topic (or one partition of a partitioned topic)."""

    def __init__(self, context: ClientContext, topic: str, config: ProducerConfig, partition: int = -1) -> None:
        super().__init__(context, topic)
        self.config = config
        self.partition = partition
        self.producer_id = context.new_producer_id()
        self._name = config.producer_name
        self._user_named = config.producer_name is not None
        self._epoch = 0
        self._topic_epoch: int | None = None
        self._schema_version: bytes | None = None
        self._next_seq = 0 if config.initial_sequence_id is None else config.initial_sequence_id + 1
        self._last_seq_published = -1 if config.initial_sequence_id is None else config.initial_sequence_id
        self._pending: deque[OpSend] = deque()
        self._pending_messages = 0
        self._space = asyncio.Event()
        self._space.set()
        self._flush_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._ready = False
        self._batching = config.batching_enabled
        container = KeyBasedContainer if config.batching_type == BatchingType.KeyBased else BatchContainer
        self._container = container(config.batching_max_messages, config.batching_max_allowed_size_in_bytes,
                                    config.batched_filter_properties)
        self._container_txn: tuple[int, int] | None = None
        """The transaction of the messages in the batch container (None: none's)."""
        self._batch_timer: asyncio.TimerHandle | None = None
        self._batch_delay = config.batching_max_publish_delay_ms / 1000
        self._compression = int(config.compression_type)
        self._send_timeout = config.send_timeout_millis / 1000
        self._timeout_timer: asyncio.TimerHandle | None = None
        self._schema = config.schema
        self._sealer = _sealer(config)
        self._registered = False
        self._plain: PlainMetadata | None = None
        self._terminated: errors.PulsarException | None = None
        """TopicTerminated once the broker said the topic takes no more messages."""
        self._held_on: Connection | None = None
        """The connection whose broker refused this producer's return with a hold (a full disk,
        a backlog quota): it recalls the producer there (CLOSE_PRODUCER) when it may come back."""
        self.on_completed: Callable[[int], None] | None = None
        """Told how many messages completed (sent or failed); the blocking facade counts with it."""

    # -- the official accessors
    def producer_name(self) -> str:
        return self._name or ""

    def last_sequence_id(self) -> int:
        return self._last_seq_published

    def is_connected(self) -> bool:
        return self._ready

    # -- registration
    async def _register(self, conn: Connection) -> None:
        self._ready = False
        self._drop_hold()
        conn.producers[self.producer_id] = self
        try:
            answer = await conn.request(lambda rid: cc.producer(
                rid, self.producer_id, self.topic, producer_name=self._name, user_provided_name=self._user_named,
                epoch=self._epoch, access_mode=int(self.config.access_mode), properties=self.config.properties,
                topic_epoch=self._topic_epoch, initial_subscription_name=self.config.initial_subscription_name,
                schema=None if self._schema is None else self._schema.wire(), encrypted=self._sealer is not None,
            ))
        except BaseException as exc:
            if self._registered and isinstance(exc, errors.ProducerBlockedQuotaExceededError):
                self._held_on = conn  # stays known there: the broker recalls it when it may come back
            else:
                conn.producers.pop(self.producer_id, None)
            self._epoch += 1
            raise
        self._registered = True
        success = answer.producer_success
        self._epoch += 1
        self._name = success.producer_name
        if success.HasField("topic_epoch"):
            self._topic_epoch = success.topic_epoch
        if success.schema_version:
            self._schema_version = success.schema_version
        if self.config.initial_sequence_id is None and not self._pending and self._next_seq == 0:
            self._next_seq = success.last_sequence_id + 1
            self._last_seq_published = success.last_sequence_id

    def _on_ready(self) -> None:
        self._ready = True
        conn = self.conn
        assert conn is not None
        for op in self._pending:  # resend in order, same sequence ids
            conn.write(self._frame(op))
        if self._timeout_timer is None and self._send_timeout > 0:
            self._arm_timeout_check()

    def _lost(self) -> None:
        self._ready = False
        super()._lost()

    # -- sending
    def encode(self, value: Any, options: dict[str, Any]) -> tuple[bytes | None, dict[str, Any]]:
        """A value as the producer's schema writes it (None stays a null value), with the send
        `options` it implies: a SEPARATED KeyValueSchema writes the key as the message key.
        TypeError or ValueError when the schema cannot encode it."""
        if self._schema is None or value is None:
            return value, options
        content, key = self._schema.encode_message(value)
        if not key:
            return content, options
        if options.get("partition_key") is not None:
            raise ValueError(f"{self._schema} writes each value's key as the message key: "
                             "partition_key cannot be given too")
        return content, {**options, **key}

    def send_async(self, content: Any, callback: SendCallback | None, **kwargs: Any) -> None:
        """Encode (raising here if the schema refuses the value), then queue as `send_encoded_async`."""
        content, kwargs = self.encode(content, kwargs)
        self.send_encoded_async(content, callback, **kwargs)

    def send_encoded_async(self, content: bytes | None, callback: SendCallback | None,
                   properties: Mapping[str, str] | None = None,
                   partition_key: str | None = None, ordering_key: str | bytes | None = None,
                   sequence_id: int | None = None, replication_clusters: Sequence[str] | None = None,
                   disable_replication: bool = False, event_timestamp: int | None = None,
                   deliver_at: int | None = None, deliver_after: timedelta | int | None = None,
                   partition_key_b64_encoded: bool = False, null_partition_key: bool = False,
                   txn: Transaction | None = None) -> None:
        """Queue a message; `callback(result, message_id)` runs once the broker has stored it.
        `partition_key_b64_encoded`: the key is the base64 of bytes (Java's keyBytes);
        `null_partition_key`: the key is null (both set by a SEPARATED KeyValueSchema);
        `txn`: the transaction the message belongs to (see `send_encoded`)."""
        refusal = self._refusal()
        if refusal is not None:
            fail(callback, refusal)
            return
        if self._pending_messages >= self.config.max_pending_messages > 0 and not self.config.block_if_queue_full:
            fail(callback, errors.ProducerQueueIsFull(f"{self._pending_messages} messages pending on {self.topic}"))
            return
        completion: Completion = callback
        if txn is not None:
            try:
                txn.register_produced(self)
            except errors.PulsarException as exc:
                fail(callback, exc)
                return
            completion = txn.tracked(callback)
        message = self._message(content, completion, properties, partition_key, ordering_key, sequence_id,
                                replication_clusters, disable_replication, event_timestamp, deliver_at,
                                deliver_after, partition_key_b64_encoded, null_partition_key)
        message.txn = None if txn is None else txn.txn_id
        self._enqueue(message)

    async def send(self, content: Any, **options: Any) -> MessageId:
        """Send and wait for the broker's receipt; `options` as `send_encoded` takes them.

        Cancelling the wait does not unsend: a message handed over is published (or fails)
        like any other; its outcome is then dropped, and nothing is left behind.
        """
        if (refusal := self._refusal()) is not None:
            raise refusal
        content, options = self.encode(content, options)
        return await self.send_encoded(content, **options)

    async def send_encoded(self, content: bytes | None, properties: Mapping[str, str] | None = None,
                           partition_key: str | None = None, ordering_key: str | bytes | None = None,
                           sequence_id: int | None = None, replication_clusters: Sequence[str] | None = None,
                           disable_replication: bool = False, event_timestamp: int | None = None,
                           deliver_at: int | None = None, deliver_after: timedelta | int | None = None,
                           partition_key_b64_encoded: bool = False, null_partition_key: bool = False,
                           txn: Transaction | None = None) -> MessageId:
        """`send` of a value already encoded (see `send_encoded_async` for the key options).
        With `txn`, the message is part of that transaction, visible once it commits: batched
        with the transaction's other messages only (the batch is cut when the transaction
        commits or aborts), and the partition is registered with it (ADD_PARTITION_TO_TXN)
        without holding the message back for the answer (see Transaction.register_produced)."""
        if (refusal := self._refusal()) is not None:
            raise refusal
        if txn is not None:
            txn.register_produced(self)
        while self._pending_messages >= self.config.max_pending_messages > 0:
            if not self.config.block_if_queue_full:
                raise errors.ProducerQueueIsFull(f"{self._pending_messages} messages pending on {self.topic}")
            self._space.clear()
            await self._space.wait()
        future: asyncio.Future[MessageId] = self._loop.create_future()
        message = self._message(content, future, properties, partition_key, ordering_key, sequence_id,
                                replication_clusters, disable_replication, event_timestamp, deliver_at,
                                deliver_after, partition_key_b64_encoded, null_partition_key)
        if txn is not None:
            message.txn = txn.txn_id
            txn.track(future)
        self._enqueue(message)
        return await future

    def _refusal(self) -> errors.PulsarException | None:
        """Why a send cannot be taken: the producer is closed, or its topic was terminated."""
        if self.closed:
            return errors.AlreadyClosed(f"producer on {self.topic} is closed")
        return self._terminated

    def _message(self, content: bytes | None, completion: Completion, properties: Mapping[str, str] | None,
                 partition_key: str | None, ordering_key: str | bytes | None, sequence_id: int | None,
                 replication_clusters: Sequence[str] | None, disable_replication: bool,
                 event_timestamp: int | None, deliver_at: int | None,
                 deliver_after: timedelta | int | None, key_b64: bool, null_key: bool) -> PendingMessage:
        if sequence_id is None:
            sequence_id = self._next_seq
            self._next_seq += 1
        if deliver_after is not None:
            deliver_at = int(time.time() * 1000) + (_millis(deliver_after) or 0)
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        replicate_to = ["__local__"] if disable_replication else replication_clusters
        null_value = content is None
        return PendingMessage(b"" if content is None else bytes(content), sequence_id, completion,
                              dict(properties) if properties else None, partition_key, ordering_key,
                              event_timestamp, deliver_at, null_value, replicate_to, key_b64, null_key)

    def _enqueue(self, message: PendingMessage) -> None:
        self._pending_messages += 1
        if self._batching and message.deliver_at is None and not message.replicate_to:
            container = self._container
            if message.txn != self._container_txn:  # a batch holds one transaction's messages (or none's)
                if len(container):
                    self._flush_container()
                self._container_txn = message.txn
            was_empty = not len(container)
            batches = container.add(message)
            for batch in batches:
                self._send_batch(batch)
            if len(container) and (was_empty or batches):
                self._arm_batch_timer()
            return
        # Delayed (never batched, as in C++ and Java) or unbatched: keep the order of what
        # is already in the container by cutting it first.
        if self._batching and len(self._container):
            self._flush_container()
        self._send_single(message)

    # -- whole entries (writers of other formats)
    async def send_entry(self, payload: bytes, metadata_fields: Mapping[str, Any] | None = None,
                         num_messages: int = 1) -> MessageId:
        """Publish `payload` as one entry of `num_messages` messages, as it is (another format's writer).

        `metadata_fields` are MessageMetadata fields (``properties`` as a dict; ``entry.format``
        among them names a foreign format). The count is checked against the payload for the
        formats built in. Returns the id of the entry's first message.
        """
        if (refusal := self._refusal()) is not None:
            raise refusal
        metadata = entry_metadata(metadata_fields, num_messages)
        check_count(metadata, bytes(payload), num_messages, self._max_message_size() * 64)
        return await self._send_whole(metadata, bytes(payload), num_messages)

    async def send_arrow(self, data: Any, max_rows: int | None = None,
                         sequence_id: int | None = None) -> list[MessageId]:
        """Publish a pyarrow Table or RecordBatch, one Arrow IPC entry per record batch (of at most
        `max_rows` rows), compressed as the producer's other entries. Returns each entry's first id.

        `sequence_id` numbers the first row (the rest follow), as `send(sequence_id=...)` does for
        one message: a writer that replays the same rows with the same ids is deduplicated."""
        if (refusal := self._refusal()) is not None:
            raise refusal
        sends = []
        for metadata, payload, rows in arrow_entries(data, max_rows, self._compression):
            sends.append(self._send_whole(metadata, payload, rows, sequence_id))
            if sequence_id is not None:
                sequence_id += rows
        return list(await asyncio.gather(*sends))

    def _send_whole(self, metadata: pb.MessageMetadata, payload: bytes, num_messages: int,
                    first: int | None = None) -> asyncio.Future[MessageId]:
        """Queue a ready entry behind whatever is batched, taking `num_messages` sequence ids
        (from `first` when the caller numbers its messages itself)."""
        if self._batching and len(self._container):
            self._flush_container()
        if first is None:
            first = self._next_seq
            self._next_seq += num_messages
        metadata.producer_name = self._name or ""
        metadata.sequence_id = first
        metadata.publish_time = self._publish_time()
        entry = build_entry(metadata, payload if self._sealer is None else self._sealer.encrypt(metadata, payload))
        future: asyncio.Future[MessageId] = self._loop.create_future()
        if len(entry) > self._max_message_size():
            future.set_exception(errors.MessageTooBig(f"an entry of {len(entry)} bytes exceeds the broker's limit"))
            return future
        op = OpSend(first, first + num_messages - 1, entry, [future], num_messages)
        op.num_messages = 0  # not counted against max_pending_messages: the caller awaits each entry
        self._add_op(op)
        return future

    def _arm_batch_timer(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        self._batch_timer = self._loop.call_later(self._batch_delay, self._flush_container)

    def _flush_container(self) -> None:
        if self._batch_timer is not None:
            self._batch_timer.cancel()
            self._batch_timer = None
        for batch in self._container.cut():
            self._send_batch(batch)

    def _publish_time(self) -> int:
        return int(time.time() * 1000)

    def _send_batch(self, batch: Batch) -> None:
        messages = batch.messages
        entry = build_batch_entry(messages, batch.payload(), producer_name=self._name or "",
                                  publish_time=self._publish_time(), compression=self._compression,
                                  batch_properties=batch.filter_values, schema_version=self._schema_version,
                                  sealer=self._sealer)
        if len(entry) > self._max_message_size():
            exc = errors.MessageTooBig(f"a batch of {len(entry)} bytes exceeds the broker's limit")
            self._fail_messages(messages, exc)
            return
        op = OpSend(messages[0].sequence_id, messages[-1].sequence_id, entry, [m.completion for m in messages],
                    len(messages))
        op.txn = messages[0].txn
        self._add_op(op)

    def _send_single(self, message: PendingMessage) -> None:
        if self._sealer is None and self._compression == pb.NONE and is_plain(message):
            entry = self._plain_metadata().entry(message.sequence_id, self._publish_time(), message.value)
            if len(entry) + _ENTRY_SLACK <= self._max_message_size():
                self._add_op(OpSend(message.sequence_id, message.sequence_id, entry, [message.completion], 0))
                return
        metadata, payload = single_metadata(message, producer_name=self._name or "",
                                            publish_time=self._publish_time(), compression=self._compression,
                                            schema_version=self._schema_version)
        txn = message.txn
        limit = self._max_message_size()
        sealer = self._sealer
        if len(payload) + metadata.ByteSize() + 16 + (0 if sealer is None else sealer.overhead()) <= limit:
            if sealer is not None:
                payload = sealer.encrypt(metadata, payload)
            op = OpSend(message.sequence_id, message.sequence_id, build_entry(metadata, payload),
                        [message.completion], 0)
            op.txn = txn
            self._add_op(op)
            return
        if not self.config.chunking_enabled:
            self._fail_messages([message], errors.MessageTooBig(
                f"message of {len(payload)} bytes exceeds the broker's limit of {limit} (enable chunking)"))
            return
        state = ChunkState()
        chunks = list(chunk_entries(metadata, payload, limit, sealer))
        for index, entry in enumerate(chunks):
            last = index == len(chunks) - 1
            op = OpSend(message.sequence_id, message.sequence_id, entry, [message.completion] if last else [],
                         0, is_chunk=True, chunk=state)
            op.num_messages = 1 if last else 0
            op.txn = txn
            self._add_op(op)

    def _plain_metadata(self) -> PlainMetadata:
        """The template of this producer's plain messages, made again when the broker gave it
        another name or schema version (at registration)."""
        plain, name = self._plain, self._name or ""
        if plain is None or plain.producer_name != name or plain.schema_version != self._schema_version:
            plain = self._plain = PlainMetadata(name, self._schema_version)
        return plain

    def _max_message_size(self) -> int:
        conn = self.conn
        return conn.max_message_size if conn is not None else self.context.max_message_size

    def _frame(self, op: OpSend) -> bytes:
        if op.frame_for != self.producer_id or op.frame is None:
            op.frame = cc.send(self.producer_id, op.first_seq, op.entry,
                               num_messages=op.batch_size or None, is_chunk=op.is_chunk, txn=op.txn)
            op.frame_for = self.producer_id
        return op.frame

    def _add_op(self, op: OpSend) -> None:
        self._pending.append(op)
        if self._ready and self.conn is not None:
            self.conn.write(self._frame(op))

    def _gives_up(self, refusal: errors.PulsarException) -> bool:
        """A terminated topic takes this producer back never: what it holds fails now (as the
        Java producer does), not at its send timeout after retrying until then."""
        if isinstance(refusal, errors.TopicTerminated):
            self._terminate(refusal)
            return True
        return False

    # -- flush and close
    async def flush(self) -> None:
        """Send what is batched and wait until everything sent so far has its receipt; a closed
        producer raises AlreadyClosed, as the official client's does (a quiet return would read as
        "all delivered")."""
        if self.closed:
            raise errors.AlreadyClosed(f"producer on {self.topic} is closed")
        self._flush_container()
        if not self._pending:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._flush_waiters.append((self._pending[-1].last_seq, waiter))
        self._wake_flushers()
        await waiter

    def flush_batch(self) -> None:
        """Cut the current batch now without waiting (the facade's send path)."""
        self._flush_container()

    async def close(self) -> None:
        """Flush, then leave the broker; later sends fail with AlreadyClosed."""
        if self.closed:
            return
        try:
            if self._ready:
                async with asyncio.timeout(self.context.operation_timeout):
                    await self.flush()
        except TimeoutError:
            log.warning("%s: closing with messages still pending", self.topic)
        finally:
            self._stop_reconnecting()
            self._shutdown()
            self._drop_hold()
        conn = self.conn
        if conn is not None and not conn.closed:
            conn.producers.pop(self.producer_id, None)
            try:
                await conn.request(lambda rid: cc.close_producer(rid, self.producer_id))
            except errors.PulsarException as exc:
                log.debug("close producer: %s", exc)

    def _drop_hold(self) -> None:
        if self._held_on is not None:
            if self._held_on.producers.get(self.producer_id) is self:
                del self._held_on.producers[self.producer_id]
            self._held_on = None

    def _shutdown(self) -> None:
        self.closed = True
        self._ready = False
        for timer in (self._batch_timer, self._timeout_timer):
            if timer is not None:
                timer.cancel()
        self._fail_all(errors.AlreadyClosed(f"producer on {self.topic} closed"))
