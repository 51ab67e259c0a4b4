"""Taking messages from a receiver queue: `receive`, `batch_receive`, `receive_arrow`, `async for`.

One `Receiver` per consumer handle the application holds: a single-topic consumer, or a
multi-topic one (whose partitions' consumers all fill one queue). Its state is its own:
the queue it reads, the rows a receive_arrow call left over, whether it is closed. Every
message knows the single-topic consumer it came from, which gets the permit back when
the message is taken; rows are acknowledged through the consumer `row_owner` names.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.aio.consumer_config import overridden
from magnetar.client.aio.receive_queue import AsyncReceiveQueue
from magnetar.client.columnar import ArrowReceiving, RowOwner, ack_rows, last_rows, not_a_message
from magnetar.client.message import Message

if TYPE_CHECKING:
    from magnetar.client.aio.consumer_config import ConsumerConfig, ReceiveQueue


class Receiver:
    def __init__(self, queue: ReceiveQueue, topic: str, config: ConsumerConfig,
                 row_owner: Callable[[str], RowOwner]) -> None:
        self._queue = queue
        self._topic = topic
        self._config = config
        """Where receive_arrow switches the intake to raw entries (shared with the consumers filling the queue)."""
        self._row_owner = row_owner
        """The single-topic consumer of a topic named in a row."""
        self._arrow: ArrowReceiving | None = None
        self.closed = False

    def close(self) -> None:
        """No more receiving: waiting calls fail, later ones too."""
        self.closed = True
        self._queue.fail_waiters(errors.AlreadyClosed(f"consumer on {self._topic} closed"))

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; Timeout after `timeout_millis`. Cancelling loses no message."""
        if self.closed:
            raise errors.AlreadyClosed(f"consumer on {self._topic} is closed")
        return await self._taken(await self._next(None if timeout_millis is None else timeout_millis / 1000))

    async def _next(self, timeout: float | None) -> Any:
        """The next item of the queue (a message, or the failure to raise in its place), not yet
        taken; Timeout after `timeout` seconds."""
        queue = self._queue
        assert isinstance(queue, AsyncReceiveQueue), "the blocking facade reads its queue itself"
        item = queue.get_nowait()
        if item is not None:
            return item
        waiter = queue.waiter()
        try:
            async with asyncio.timeout(timeout):
                return await waiter
        except TimeoutError:
            raise errors.Timeout(f"no message within {round((timeout or 0) * 1000)} ms") from None
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                queue.requeue_front(waiter.result())  # handed over, but nobody will use it
            waiter.cancel()
            raise

    async def _taken(self, message: Any) -> Message:
        """`message` handed to the application: its consumer gets the permit back."""
        if type(message) is not Message:
            raise not_a_message(message)
        if self._config.schema is not None:
            try:
                await message._ctx.owner.load_writer_schema(message)  # so that value() need not wait
            except BaseException:
                self._queue.requeue_front(message)  # type: ignore[union-attr]
                raise
        message._ctx.owner.taken(message)
        return message

    async def receive_arrow(self, max_messages: int = 10_000, timeout_millis: int | None = None) -> Any:
        """The next messages (up to `max_messages`) as one pyarrow RecordBatch with the Spark
        source's row schema, built per entry in C; Timeout if none arrive within `timeout_millis`."""
        if self.closed:
            raise errors.AlreadyClosed(f"consumer on {self._topic} is closed")
        self._config.columnar = True
        if self._arrow is None:
            self._arrow = ArrowReceiving()
        state = self._arrow
        pending = state.pending(max_messages)
        if pending is not None:
            return pending
        queue: Any = self._queue
        first = queue.get_nowait()
        if first is None:
            waiter = queue.waiter()
            try:
                async with asyncio.timeout(None if timeout_millis is None else timeout_millis / 1000):
                    first = await waiter
            except TimeoutError:
                raise errors.Timeout(f"no message within {timeout_millis} ms") from None
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    queue.requeue_front(waiter.result())
                waiter.cancel()
                raise
        return state.take(first, queue.get_nowait, max_messages)

    def acknowledge_arrow(self, batch: Any) -> None:
        """Acknowledge every row of a batch receive_arrow returned."""
        ack_rows(batch, self._row_owner)

    def acknowledge_cumulative_arrow(self, batch: Any) -> None:
        """Acknowledge everything up to and including the batch's last row (per topic on a
        multi-topic consumer); refused on Shared and Key_Shared subscriptions, as
        acknowledge_cumulative is."""
        for topic, ledger, entry, index in last_rows(batch):
            self._row_owner(topic).ack_row_cumulative(ledger, entry, index)

    async def batch_receive(self, max_num_messages: int | None = None, max_num_bytes: int | None = None,
                            timeout_ms: int | None = None) -> list[Message]:
        """A batch as the consumer's `batch_receive_policy` says (each limit given here overrides
        the policy's): it ends once full, else at the timeout with what arrived; a message the
        byte limit leaves out stays first in the queue, as does a failure after some messages."""
        if self.closed:
            raise errors.AlreadyClosed(f"consumer on {self._topic} is closed")
        policy = overridden(self._config.batch_receive_policy, max_num_messages, max_num_bytes, timeout_ms)
        out: list[Message] = []
        size = 0
        deadline = policy.deadline(time.monotonic())
        while not policy.full(len(out), size):
            try:
                item = await self._next(None if deadline is None else max(0.0, deadline - time.monotonic()))
            except errors.Timeout:
                break
            if out and (type(item) is not Message or not policy.takes(len(out), size, len(item._data))):
                self._queue.requeue_front(item)  # type: ignore[union-attr]
                break
            message = await self._taken(item)
            out.append(message)
            size += len(message._data)
        return out

    def __aiter__(self) -> Receiver:
        return self

    async def __anext__(self) -> Message:
        try:
            return await self.receive()
        except errors.AlreadyClosed:
            raise StopAsyncIteration from None


class Receiving:
    """The receiving calls of a consumer handle, served by the `Receiver` it owns. `_own` binds
    them to the receiver's methods once, so a receive costs no hop through the handle."""

    receive: Callable[..., Coroutine[Any, Any, Message]]
    receive_arrow: Callable[..., Coroutine[Any, Any, Any]]
    batch_receive: Callable[..., Coroutine[Any, Any, list[Message]]]
    acknowledge_arrow: Callable[[Any], None]
    acknowledge_cumulative_arrow: Callable[[Any], None]
    _receiver: Receiver

    def _own(self, receiver: Receiver) -> None:
        self._receiver = receiver
        self.receive = receiver.receive
        self.receive_arrow = receiver.receive_arrow
        self.batch_receive = receiver.batch_receive
        self.acknowledge_arrow = receiver.acknowledge_arrow
        self.acknowledge_cumulative_arrow = receiver.acknowledge_cumulative_arrow

    def __aiter__(self) -> Receiver:
        return self._receiver

    def __anext__(self) -> Coroutine[Any, Any, Message]:
        return self._receiver.__anext__()
