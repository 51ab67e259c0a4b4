"""One SEND of a producer in flight, and telling its messages' senders how it went.

A producer queues one `OpSend` per entry it writes, in send order; the receipt (or the
error, or the timeout) that ends it completes each message's callback or future.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from magnetar.client import errors
from magnetar.client.enums import Result
from magnetar.client.message_id import MessageId
from magnetar.client.outgoing import Tally

log = logging.getLogger(__name__)

Completion = Any
"""callable(result, message_id) or asyncio.Future[MessageId]"""


class OpSend:
    """One SEND in flight: its entry, the sequence ids it covers, and whom to tell."""

    __slots__ = ("batch_size", "chunk", "completions", "created", "entry", "first_seq", "frame", "frame_for",
                 "is_chunk", "last_seq", "num_messages", "txn")

    def __init__(self, first_seq: int, last_seq: int, entry: bytes, completions: list[Completion],
                 batch_size: int, is_chunk: bool = False, chunk: ChunkState | None = None) -> None:
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.entry = entry
        self.completions = completions
        self.batch_size = batch_size
        """Messages in the batch; 0 for a non-batched entry (no num_messages, no batch index)."""
        self.num_messages = max(batch_size, 1)
        self.is_chunk = is_chunk
        self.chunk = chunk
        self.created = time.monotonic()
        self.frame: bytes | None = None
        self.frame_for = -1
        self.txn: tuple[int, int] | None = None
        """(most, least) bits of the transaction the message belongs to (PIP-31)."""


class ChunkState:
    """The chunks of one message: the id of the first, and the completion for the last."""

    __slots__ = ("first_id",)

    def __init__(self) -> None:
        self.first_id: MessageId | None = None


def complete_batch(completions: list[Completion], partition: int, ledger: int, entry: int, size: int) -> None:
    """A stored batch of `size` messages at (ledger, entry): each completion is told its
    message's id (those that are None, nobody's, get none made)."""
    first = completions[0]
    if isinstance(first, Tally) and completions.count(first) == len(completions):
        first.answered(len(completions))
        return
    for index, completion in enumerate(completions):
        if completion is not None:
            complete(completion, MessageId(partition, ledger, entry, index, size))


def complete(completion: Completion, message_id: MessageId) -> None:
    if isinstance(completion, asyncio.Future):
        if not completion.done():
            completion.set_result(message_id)
    elif completion is not None:
        try:
            completion(Result.Ok, message_id)
        except Exception:  # the official client would abort the process; we keep the others going
            log.exception("send callback raised")


def fail(completion: Completion, exc: errors.PulsarException) -> None:
    if isinstance(completion, asyncio.Future):
        if not completion.done():
            completion.set_exception(exc)
    elif completion is not None:
        try:
            completion(exc.result, MessageId())  # the official client's (-1,-1,-1,-1), not None
        except Exception:
            log.exception("send callback raised")
