"""How a producer's sends fail: a SEND_ERROR, the send timeout, a terminated topic, closing.

As the Java client: a corrupt or refused head SEND (ChecksumError, NotAllowedError) fails
alone, since sending it again would get the same answer; a terminated topic ends every
pending send and every later one; any other error re-registers this producer alone. The
connection stays up: it carries other producers, consumers and transaction requests.
A send that has no receipt within the send timeout fails with Timeout, at its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from magnetar.client import errors
from magnetar.client.aio.send_ops import fail
from magnetar.client.aio.send_receipts import Receipts
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.batching import BatchContainer
    from magnetar.client.outgoing import PendingMessage

log = logging.getLogger(__name__)

_FAILS_THE_SEND = frozenset((pb.ChecksumError, pb.NotAllowedError))
"""SEND_ERRORs that fail the one SEND they answer (a corrupt entry, a refused size or delay):
sending it again would get the same answer."""


class SendFailures(Receipts):
    """The failure side of a Producer (the state it reads is the producer's own)."""

    closed: bool
    _loop: asyncio.AbstractEventLoop
    _container: BatchContainer
    _terminated: errors.PulsarException | None
    _send_timeout: float
    _timeout_timer: asyncio.TimerHandle | None

    def on_send_error(self, error: pb.CommandSendError) -> None:
        exc = errors.server_error(error.error, error.message)
        code = error.error
        if code in _FAILS_THE_SEND and self._pending and self._pending[0].first_seq == error.sequence_id:
            op = self._pending.popleft()
            self._pending_messages -= op.num_messages
            for completion in op.completions:
                fail(completion, exc)
            self._completed(op.num_messages)
            self._space.set()
            self._wake_flushers()
            return
        if code == pb.TopicTerminatedError:
            self._terminate(exc)
            return
        log.warning("%s: send error %s, registering the producer again", self.topic, exc)
        self._reregister()

    def _terminate(self, exc: errors.PulsarException) -> None:
        self._terminated = exc
        self._fail_all(exc)

    def _fail_messages(self, messages: Sequence[PendingMessage], exc: errors.PulsarException) -> None:
        self._pending_messages -= len(messages)
        for message in messages:
            fail(message.completion, exc)
        self._space.set()
        self._completed(len(messages))

    def _fail_all(self, exc: errors.PulsarException) -> None:
        """Fail what is batched and every pending send with `exc`."""
        for batch in self._container.cut():
            self._fail_messages(batch.messages, exc)
        while self._pending:
            op = self._pending.popleft()
            for completion in op.completions:
                fail(completion, exc)
            self._completed(op.num_messages)
        self._pending_messages = 0
        self._space.set()
        self._wake_flushers()

    def _arm_timeout_check(self) -> None:
        """Due at the oldest pending send's deadline, so it fails at its send timeout and not a
        polling interval later; with nothing pending, a send timeout from now (the official
        client's timer, which a send made meanwhile waits for, then for what is left of it)."""
        pending = self._pending
        delay = pending[0].created + self._send_timeout - time.monotonic() if pending else self._send_timeout
        self._timeout_timer = self._loop.call_later(max(0.0, delay), self._check_timeouts)

    def _check_timeouts(self) -> None:
        self._timeout_timer = None
        if self.closed:
            return
        deadline = time.monotonic() - self._send_timeout
        expired = False
        while self._pending and self._pending[0].created <= deadline:
            op = self._pending.popleft()
            self._pending_messages -= op.num_messages
            exc = errors.Timeout(f"no receipt from the broker within {self._send_timeout:g} s")
            for completion in op.completions:
                fail(completion, exc)
            self._completed(op.num_messages)
            expired = True
        if expired:
            self._space.set()
            self._wake_flushers()
        self._arm_timeout_check()
