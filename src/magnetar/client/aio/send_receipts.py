"""A producer's receipts: the broker's SEND_RECEIPT ends the head SEND in flight.

The broker answers one producer's SENDs in order, so a receipt belongs to the oldest
pending op when its sequence id lies in that op's range; one below it answers an op
that already timed out, one above it means the two sides disagree, and the producer
registers again (which resends what is pending, in order). Message ids are made only for
the messages someone waits on: `send_async` may have been given no callback.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.client.aio.send_ops import OpSend, complete, complete_batch
from magnetar.client.message_id import MessageId

if TYPE_CHECKING:
    from magnetar.client.aio.connection import Connection
    from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)


class Receipts:
    """The receipt side of a Producer (the state it reads is the producer's own)."""

    topic: str
    partition: int
    producer_id: int
    conn: Connection | None
    on_completed: Callable[[int], None] | None
    _pending: deque[OpSend]
    _pending_messages: int
    _last_seq_published: int
    _space: asyncio.Event
    _flush_waiters: list[tuple[int, asyncio.Future[None]]]
    _lost: Callable[[], None]

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        pending = self._pending
        if not pending:
            return
        op = pending[0]
        seq = receipt.sequence_id
        if seq < op.first_seq:
            return  # for an op that timed out
        if seq > op.last_seq:
            log.warning("%s: receipt for sequence id %d, expecting %d: registering again", self.topic, seq,
                        op.first_seq)
            self._reregister()
            return
        pending.popleft()
        mid = receipt.message_id
        ledger, entry = mid.ledgerId, mid.entryId
        partition = self.partition
        n = op.batch_size
        completions = op.completions
        if op.chunk is not None:
            if op.chunk.first_id is None:
                op.chunk.first_id = MessageId(partition, ledger, entry)
            if completions:
                message_id = MessageId(partition, ledger, entry)
                first = op.chunk.first_id
                message_id._first_chunk = first.wire
                complete(completions[0], message_id)
        elif n:  # an id only for a message with someone to tell (send_async's callback may be None)
            complete_batch(completions, partition, ledger, entry, n)
        elif completions[0] is not None:
            complete(completions[0], MessageId(partition, ledger, entry))
        self._pending_messages -= op.num_messages
        self._completed(op.num_messages)
        self._last_seq_published = max(self._last_seq_published, op.last_seq)
        if not self._space.is_set():
            self._space.set()
        if self._flush_waiters:
            self._wake_flushers()

    def _completed(self, count: int) -> None:
        if self.on_completed is not None and count:
            self.on_completed(count)

    def _wake_flushers(self) -> None:
        head = self._pending[0].first_seq if self._pending else None
        keep = []
        for seq, waiter in self._flush_waiters:
            if head is None or head > seq or (not self._pending):
                if not waiter.done():
                    waiter.set_result(None)
            else:
                keep.append((seq, waiter))
        self._flush_waiters = keep

    def _reregister(self) -> None:
        """Leave the connection (for the broker, the producer stays there under its id) and
        come back through the usual reconnect, which registers it again and resends what is
        pending, in order."""
        conn = self.conn
        if conn is not None and conn.producers.get(self.producer_id) is self:
            del conn.producers[self.producer_id]
        self._lost()
