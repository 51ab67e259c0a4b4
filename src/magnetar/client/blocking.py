"""The blocking facade: `from magnetar.client import Client` instead of `from pulsar import Client`.

The asyncio core runs on one event-loop thread per client (the official client has its I/O
thread too). Blocking calls submit a coroutine and wait for it. The two hot paths avoid a
thread hop per message:

- `send_async` appends to an inbox (client.send_inbox) and wakes the loop only when the
  inbox was idle, so a burst of sends costs one wake-up, and a batching producer's loop
  wakes once per batch; `max_pending_messages` is counted here (client.pending_slots) and
  given back as receipts come in, so `block_if_queue_full` blocks this thread only.
- `receive` reads the consumer's thread-side queue (`queue.SimpleQueue`) directly; the loop
  hears about taken messages only when a FLOW is due.

Callbacks (`send_async`) run on the loop thread, as the official client runs them on its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from magnetar.client import errors
from magnetar.client.aio import client as aio_client
from magnetar.client.aio.consumer import Consumer as CoreConsumer
from magnetar.client.aio.consumer_config import overridden
from magnetar.client.aio.multi_consumer import MultiTopicsConsumer
from magnetar.client.aio.reader import Reader as CoreReader
from magnetar.client.aio.receive_queue import ThreadReceiveQueue
from magnetar.client.columnar import ArrowReceiving, not_a_message
from magnetar.client.enums import Result
from magnetar.client.message import Message
from magnetar.client.message_id import MessageId
from magnetar.client.pending_slots import PendingSlots
from magnetar.client.send_inbox import SendInbox

_T = TypeVar("_T")


class _LoopThread:
    """An event loop running in a daemon thread (uvloop when installed)."""

    def __init__(self) -> None:
        try:
            import uvloop  # noqa: PLC0415 (optional speed-up)

            self.loop = uvloop.new_event_loop()
        except ImportError:
            self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="magnetar-client-io", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float | None = None) -> _T:
        if threading.current_thread() is self.thread:
            coro.close()
            raise errors.OperationNotSupported("blocking calls cannot be made from a callback on the I/O thread")
        if self.loop.is_closed():  # the client was closed: the official client's answer, not the loop's error
            coro.close()
            raise errors.AlreadyClosed("client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise errors.Timeout("operation timed out") from None

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        if not self.thread.is_alive():
            self.loop.close()


class Client:
    """The official `pulsar.Client` API over magnetar's asyncio core."""

    def __init__(self, service_url: str, authentication: Any = None, operation_timeout_seconds: float = 30,
                 **kwargs: Any) -> None:
        """The official arguments (`io_threads`, `use_tls`, `logger`, ...), as the asyncio Client
        takes them: each works or is refused (magnetar.client.aio.options)."""
        self._io = _LoopThread()
        self._timeout = float(operation_timeout_seconds)
        self._inboxes: weakref.WeakSet[SendInbox] = weakref.WeakSet()
        """Of the producers made here: what waits in them is handed over before closing."""

        async def make() -> aio_client.Client:
            return aio_client.Client(service_url, authentication, operation_timeout_seconds, **kwargs)

        try:
            self._core = self._io.run(make())
        except BaseException:
            self._io.stop()
            raise

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self._io.run(coro)

    def create_producer(self, topic: str, **kwargs: Any) -> Producer:
        """Same arguments as `pulsar.Client.create_producer`, plus `batched_filter_properties` (PIP-191)."""
        core = self._run(self._core.create_producer(topic, **kwargs))
        producer = Producer(self, core)
        self._inboxes.add(producer._inbox)
        return producer

    def subscribe(self, topic: Any, subscription_name: str, **kwargs: Any) -> Consumer:
        """Same arguments as `pulsar.Client.subscribe` (a topic, a list of topics or a compiled pattern)."""
        queue = ThreadReceiveQueue()
        core = self._run(self._core.subscribe(topic, subscription_name, queue=queue, **kwargs))
        return Consumer(self, core, queue)

    def create_reader(self, topic: str, start_message_id: Any, **kwargs: Any) -> Reader:
        queue = ThreadReceiveQueue()
        core = self._run(self._core.create_reader(topic, start_message_id, queue=queue, **kwargs))
        return Reader(self, core, queue)

    def get_topic_partitions(self, topic: str) -> list[str]:
        return self._run(self._core.get_topic_partitions(topic))

    def new_transaction(self, timeout: float = 60) -> Transaction:
        """A transaction (PIP-31); needs `enable_transaction=True` (see the asyncio Client)."""
        return Transaction(self, self._run(self._core.new_transaction(timeout)))

    def resume_transaction(self, txn_id: tuple[int, int]) -> Transaction:
        """A transaction another client opened, by its id, to commit or abort (see the asyncio Client)."""
        return Transaction(self, self._run(self._core.resume_transaction(txn_id)))

    def close(self) -> None:
        if self._core.closed:
            return
        async def close() -> None:
            for inbox in list(self._inboxes):  # sends waiting for their batch are sent, not lost
                inbox.drain()
            await self._core.close()

        try:
            self._run(close())
        finally:
            self._io.stop()

    def shutdown(self) -> None:
        self.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Transaction:
    """A transaction's blocking handle: `producer.send(..., txn=txn)`, then commit() or abort()."""

    def __init__(self, client: Client, core: Any) -> None:
        self._client = client
        self._core = core

    @property
    def txn_id(self) -> tuple[int, int]:
        return self._core.txn_id

    @property
    def state(self) -> str:
        return self._core.state

    def commit(self) -> None:
        self._client._run(self._core.commit())

    def abort(self) -> None:
        self._client._run(self._core.abort())


async def _in_txn(acknowledge: Callable[[Any, Any], Any], message: Any, txn: Any) -> None:
    """An acknowledgement in a transaction, made on the client's loop, awaited until the broker holds it."""
    await acknowledge(message, txn)


def _settle(outcome: concurrent.futures.Future[None], done: asyncio.Future[None]) -> None:
    """`outcome` (a thread's future) as `done` (the loop's) ended."""
    if done.cancelled():
        outcome.cancel()
    elif (error := done.exception()) is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(None)


def _core_txn(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The send options with a blocking Transaction replaced by its asyncio core."""
    txn = kwargs.get("txn")
    if isinstance(txn, Transaction):
        return {**kwargs, "txn": txn._core}
    return kwargs


class Producer:
    def __init__(self, client: Client, core: Any) -> None:
        self._client = client
        self._core = core
        self._loop = client._io.loop
        producers = core.producers if hasattr(core, "producers") else [core]
        config = producers[0].config
        self._inbox = SendInbox(self._loop, core.send_encoded_async, core.flush_batch,
                                config.batching_max_publish_delay_ms / 1000 if config.batching_enabled else 0,
                                config.batching_max_messages, config.batching_max_allowed_size_in_bytes)
        self._drain = self._inbox.drain
        self._block = config.block_if_queue_full
        self._slots: PendingSlots | None = None
        if config.max_pending_messages > 0:
            self._slots = PendingSlots(config.max_pending_messages * len(producers))
            for producer in producers:
                producer.on_completed = self._slots.release

    def topic(self) -> str:
        return self._core.topic

    def producer_name(self) -> str:
        return self._core.producer_name()

    def last_sequence_id(self) -> int:
        return self._core.last_sequence_id()

    def is_connected(self) -> bool:
        return self._core.is_connected()

    def send_async(self, content: Any, callback: Callable[[Result, MessageId], None] | None,
                   **kwargs: Any) -> None:
        """Queue a message; `callback(result, message_id)` runs on the client's I/O thread. The
        producer's schema encodes `content` here, so a value it refuses raises in the caller."""
        content, kwargs = self._core.encode(content, _core_txn(kwargs))
        slots = self._slots
        if slots is not None and not slots.take(self._block):
            if callback is not None:
                callback(Result.ProducerQueueIsFull, MessageId())
            return
        self._inbox.put(content, callback, kwargs)

    def send(self, content: Any, **kwargs: Any) -> MessageId:
        """Send and wait for the receipt; raises the error the official client raises."""
        done = concurrent.futures.Future()

        def callback(result: Result, message_id: MessageId) -> None:
            done.set_result((result, message_id))

        self.send_async(content, callback, **kwargs)
        result, message_id = done.result()
        if result != Result.Ok:
            raise errors.exception_for(result)
        return message_id

    def send_entry(self, payload: bytes, metadata_fields: Any = None, num_messages: int = 1) -> MessageId:
        """One whole entry of another format's writer (see docs/payload_processors.md)."""
        return self._client._run(self._after_queued(self._core.send_entry(payload, metadata_fields, num_messages)))

    def send_arrow(self, data: Any, max_rows: int | None = None, sequence_id: int | None = None) -> list[MessageId]:
        """A pyarrow Table or RecordBatch, one Arrow IPC entry per record batch; `sequence_id`
        numbers the first row (see the core producer's send_arrow)."""
        return self._client._run(self._after_queued(self._core.send_arrow(data, max_rows, sequence_id)))

    def send_arrow_async(self, data: Any, max_rows: int | None = None,
                         sequence_id: int | None = None) -> concurrent.futures.Future[list[MessageId]]:
        """send_arrow without waiting: entries queue in call order; the future has their ids."""
        return asyncio.run_coroutine_threadsafe(
            self._after_queued(self._core.send_arrow(data, max_rows, sequence_id)), self._loop)

    async def _after_queued(self, coro: Coroutine[Any, Any, _T]) -> _T:
        self._drain()  # messages send_async queued before this entry go first
        return await coro

    def flush(self) -> None:
        async def flush() -> None:
            self._drain()
            await self._core.flush()

        self._client._run(flush())

    def close(self) -> None:
        async def close() -> None:
            self._drain()
            await self._core.close()

        self._client._run(close())
        self._client._core._handles.discard(self._core)


class _Receiving:
    """receive / receive_arrow over the thread-side queue, for the Consumer and Reader facades."""

    def __init__(self, client: Client, core: CoreConsumer | MultiTopicsConsumer, queue: ThreadReceiveQueue) -> None:
        self._client = client
        self._core = core
        self._queue = queue
        self._arrow_state = ArrowReceiving()
        """Rows a receive_arrow call left over, or the failure it met after some rows."""

    def _take(self, timeout_millis: int | None) -> Message:
        if timeout_millis is not None and not isinstance(timeout_millis, int):
            raise ValueError("timeout_millis must be an int")
        message = self._queue.get(None if timeout_millis is None else timeout_millis / 1000)
        if message is None:
            if self._core.closed:
                raise errors.AlreadyClosed("consumer is closed")
            raise errors.Timeout(f"no message within {timeout_millis} ms")
        if type(message) is not Message:
            raise not_a_message(message)
        message._ctx.owner.taken(message)
        return message

    def _arrow(self, max_messages: int, timeout_millis: int | None) -> Any:
        self._core.config.columnar = True
        state = self._arrow_state
        pending = state.pending(max_messages)
        if pending is not None:
            return pending
        first = self._queue.get(None if timeout_millis is None else timeout_millis / 1000)
        if first is None:
            if self._core.closed:
                raise errors.AlreadyClosed("consumer is closed")
            raise errors.Timeout(f"no message within {timeout_millis} ms")
        return state.take(first, self._queue.get_nowait, max_messages)


class Consumer(_Receiving):
    def __init__(self, client: Client, core: CoreConsumer | MultiTopicsConsumer, queue: ThreadReceiveQueue) -> None:
        super().__init__(client, core, queue)
        self._loop = client._io.loop

    def topic(self) -> str:
        return self._core.topic

    def subscription_name(self) -> str:
        return self._core.subscription_name()

    def consumer_name(self) -> str:
        return self._core.consumer_name()

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._take(timeout_millis)

    def batch_receive(self, max_num_messages: int | None = None, max_num_bytes: int | None = None,
                      timeout_ms: int | None = None) -> list[Message]:
        """A batch as the consumer's `batch_receive_policy` says (the asyncio consumer's
        batch_receive, here on the caller's thread)."""
        policy = overridden(self._core.config.batch_receive_policy, max_num_messages, max_num_bytes, timeout_ms)
        out: list[Message] = []
        size = 0
        deadline = policy.deadline(time.monotonic())
        while not policy.full(len(out), size):
            item = self._queue.get(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if item is None:
                if not out and self._core.closed:
                    raise errors.AlreadyClosed("consumer is closed")
                break
            if out and (type(item) is not Message or not policy.takes(len(out), size, len(item._data))):
                self._queue.put_back(item)
                break
            if type(item) is not Message:
                raise not_a_message(item)
            item._ctx.owner.taken(item)
            out.append(item)
            size += len(item._data)
        return out

    def __iter__(self) -> Consumer:
        return self

    def __next__(self) -> Message:
        try:
            return self.receive()
        except errors.AlreadyClosed:
            raise StopIteration from None

    def receive_arrow(self, max_messages: int = 10_000, timeout_millis: int | None = None) -> Any:
        """The next messages (up to `max_messages`) as one pyarrow RecordBatch with the Spark source's
        row schema, decoded per entry without a Python object per message. After the first call the
        consumer queues raw entries, so receive() is for consumers that never call this."""
        return self._arrow(max_messages, timeout_millis)

    def acknowledge_arrow(self, batch: Any) -> None:
        """Acknowledge every row of a batch receive_arrow returned (per entry, batch-index acks apply)."""
        self._core.acknowledge_arrow(batch)

    def acknowledge_cumulative_arrow(self, batch: Any) -> None:
        """Acknowledge everything up to the last row of a batch receive_arrow returned (not on
        Shared or Key_Shared subscriptions)."""
        self._core.acknowledge_cumulative_arrow(batch)

    def acknowledge(self, message: Any, txn: Transaction | None = None) -> None:
        """With `txn`, waits until the broker holds the acknowledgement for the transaction."""
        if txn is None:
            self._core.acknowledge(message)
            return
        self._client._run(_in_txn(self._core.acknowledge, message, txn._core))

    def acknowledge_async(self, message: Any, txn: Transaction) -> concurrent.futures.Future[None]:
        """An acknowledgement in `txn` without waiting for the broker (the Java client's
        acknowledgeAsync): the commit waits for it, and aborts if it was refused; the future
        completes once the broker holds it. Handed to the I/O thread without waiting for it:
        a commit asked for afterwards is handed over after it, and its first step (where the
        transaction stops taking acknowledgements) comes after the acknowledgement's."""
        outcome: concurrent.futures.Future[None] = concurrent.futures.Future()

        def start() -> None:
            try:
                held = self._core.acknowledge(message, txn._core)
            except Exception as error:  # not even sent: the commit must abort, as for a refusal
                held = self._loop.create_future()
                held.set_exception(error)
                txn._core.track(held)
            assert held is not None
            held.add_done_callback(lambda done: _settle(outcome, done))

        self._loop.call_soon_threadsafe(start)
        return outcome

    def acknowledge_cumulative(self, message: Any, txn: Transaction | None = None) -> None:
        """With `txn`, waits until the broker holds the acknowledgement for the transaction."""
        if txn is None:
            self._core.acknowledge_cumulative(message)
            return
        self._client._run(_in_txn(self._core.acknowledge_cumulative, message, txn._core))

    def negative_acknowledge(self, message: Any) -> None:
        self._core.negative_acknowledge(message)

    def reconsume_later(self, message: Any, delay_ms: int, properties: dict[str, str] | None = None) -> None:
        """The Java client's reconsumeLater: to the retry-letter topic, back after `delay_ms`."""
        self._client._run(self._core.reconsume_later(message, delay_ms, properties))

    def redeliver_unacknowledged_messages(self) -> None:
        self._loop.call_soon_threadsafe(self._core.redeliver_unacknowledged_messages)

    def seek(self, target: Any) -> None:
        self._client._run(self._core.seek(target))

    def get_last_message_id(self) -> MessageId:
        return self._client._run(self._core.get_last_message_id())

    def is_connected(self) -> bool:
        return self._core.is_connected()

    def unsubscribe(self) -> None:
        self._client._run(self._core.unsubscribe())

    def close(self) -> None:
        with contextlib.suppress(errors.AlreadyClosed):
            self._client._run(self._core.close())
        self._client._core._handles.discard(self._core)

    def pause_message_listener(self) -> None:
        raise errors.OperationNotSupported("message listeners are not supported")

    resume_message_listener = pause_message_listener


class Reader(_Receiving):
    def __init__(self, client: Client, core: CoreReader, queue: ThreadReceiveQueue) -> None:
        super().__init__(client, core.consumer, queue)
        self._reader = core

    def topic(self) -> str:
        return self._reader.topic()

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._take(timeout_millis)

    def read_arrow(self, max_messages: int = 10_000, timeout_millis: int | None = None) -> Any:
        """As Consumer.receive_arrow, for a reader."""
        return self._arrow(max_messages, timeout_millis)

    def has_message_available(self) -> bool:
        return self._client._run(self._reader.has_message_available())

    def get_last_message_id(self) -> MessageId:
        """The id of the topic's last readable message (entry id -1: none), as the Java
        Reader's getLastMessageIdAsync: a reader started there, inclusive, reads only it."""
        return self._client._run(self._reader.consumer.get_last_message_id())

    def seek(self, target: Any) -> None:
        self._client._run(self._reader.seek(target))

    def is_connected(self) -> bool:
        return self._reader.is_connected()

    def close(self) -> None:
        self._client._run(self._reader.close())
        self._client._core._handles.discard(self._reader)

    def __iter__(self) -> Reader:
        return self

    def __next__(self) -> Message:
        return self.read_next()
