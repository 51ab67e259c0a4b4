"""The blocking facade's hand-over of send_async calls from application threads to the loop.

A call is appended to a deque; the loop is woken (call_soon_threadsafe: a write to its
self-pipe, a thread switch, about as much CPU as the send itself) only when no drain is
pending, so a burst costs one wake-up. A batching producer goes further: a plain message
(no per-message options) waits in the inbox, like in a batch, until the batch is due, and
the loop is woken once per batch, not once per message: it drains the inbox when the
batching delay has passed since the first of them, and cuts the batch at once. The inbox is
drained sooner when it holds a whole batch, when a message with options arrives, and before
anything else the producer is asked to do (flush, close, whole entries), so the order of
sends is kept. A drain hands over the calls it finds queued, and their frames (with the batch
it cuts when due) leave in one socket write when it ends (Connection's in_one_write): one
send syscall a drain, not one a message, when sends come faster than the loop turns, and no
loop turn more to send them. Calls queued while it runs are the next drain's, after the loop
has polled its sockets: a sender that keeps the inbox full neither holds back what was
handed over nor keeps receipts waiting.

Flags are shared between threads without a lock: each is set by one side and cleared by the
other, and every interleaving ends with each message drained by a drain that runs after it
was appended (at worst, one wake-up too many).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from magnetar.client.aio.connection import in_one_write
from magnetar.client.enums import Result
from magnetar.client.message_id import MessageId


class SendInbox:
    def __init__(self, loop: asyncio.AbstractEventLoop, send: Callable[..., None], cut_batch: Callable[[], None],
                 batch_delay: float, batch_messages: int, batch_bytes: int) -> None:
        """`send(content, callback, **options)` and `cut_batch()` are the core producer's
        send_encoded_async and flush_batch; `batch_delay` is 0 for a producer that does not
        batch."""
        self._loop = loop
        self._send = send
        self._cut_batch = cut_batch
        self._delay = batch_delay
        self._batch_messages = max(1, batch_messages)
        self._batch_bytes = batch_bytes if batch_bytes > 0 else 1 << 62
        self._items: deque[tuple[Any, Any, dict[str, Any]]] = deque()
        self._bytes = 0
        """Bytes of the values waiting (approximate: only whether a batch is full reads it)."""
        self._scheduled = False
        """A drain is due (now or when the batch is): set by senders, cleared by the loop."""
        self._hurried = False
        """A drain now is due, ahead of the batch's."""
        self._due: asyncio.TimerHandle | None = None

    def put(self, content: Any, callback: Any, options: dict[str, Any]) -> None:
        """From any thread: queue one send_async call."""
        items = self._items
        items.append((content, callback, options))
        if self._delay:
            self._bytes += len(content) if content is not None else 0
            hurry = bool(options) or len(items) >= self._batch_messages or self._bytes >= self._batch_bytes
        else:
            hurry = True
        if not self._scheduled:
            self._scheduled = True
            self._hurried = hurry
            self._wake(self.drain if hurry else self._drain_when_due)
        elif hurry and not self._hurried:
            self._hurried = True
            self._wake(self.drain)

    def _wake(self, callback: Callable[[], None]) -> None:
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop is closed (the client was): nothing will drain
            self._refuse_queued()

    def _refuse_queued(self) -> None:
        """Answer what waits with AlreadyClosed, as the official client answers a send on a
        closed client, in the caller's thread."""
        self._scheduled = self._hurried = False
        while self._items:
            _, callback, _ = self._items.popleft()
            if callback is not None:
                callback(Result.AlreadyClosed, MessageId())

    def _drain_when_due(self) -> None:
        if self._due is None and self._scheduled:
            self._due = self._loop.call_later(self._delay, self._drain_and_cut)

    def _drain_and_cut(self) -> None:
        self._due = None
        in_one_write(self._hand_over_and_cut)

    def _hand_over_and_cut(self) -> None:
        self.drain()
        self._cut_batch()  # these messages waited the batching delay here already

    def drain(self) -> None:
        """On the loop: hand every queued call to the producer, in order."""
        self._scheduled = False
        self._hurried = False
        self._bytes = 0
        if self._due is not None:
            self._due.cancel()
            self._due = None
        # the frames of the calls handed over leave in one socket write when the hand-over
        # ends (in_one_write)
        in_one_write(self._hand_over)

    def _hand_over(self) -> None:
        items = self._items
        send = self._send
        # calls queued from here on have a drain of their own scheduled (see put)
        for _ in range(len(items)):
            content, callback, options = items.popleft()
            send(content, callback, **options)
