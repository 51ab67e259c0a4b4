"""What brings a message back: negative acks after `negative_ack_redelivery_delay_ms`,
the unacked-message timeout, and, with a dead-letter policy, the dead-letter topic once
a message has come back too often (or the retry-letter topic on `reconsume_later`).

A mixin of `Consumer`, kept apart because none of it touches flow control or the
subscription; it works on the consumer's `_nacks`, `_unacked` and `_dead_letters`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

from magnetar.client import errors
from magnetar.client.message_id import MessageId, as_message_id
from magnetar.wire import client_commands as cc
from magnetar.wire.message_id import MessageId as WireId

if TYPE_CHECKING:
    from magnetar.client.aio.consumer import ConsumerConfig, ReceiveQueue
    from magnetar.client.aio.letters import Letters
    from magnetar.client.message import Message

log = logging.getLogger(__name__)


class Redelivery:
    config: ConsumerConfig
    consumer_id: int
    letters: Letters | None
    queue: ReceiveQueue
    topic: str
    closed: bool
    _loop: asyncio.AbstractEventLoop
    _threaded: bool
    _shared: bool
    _dropped: int
    _nacks: dict[tuple[int, int], tuple[float, MessageId]]
    _nack_timer: asyncio.TimerHandle | None
    _unacked: dict[tuple[int, int], float]
    _unacked_timer: asyncio.TimerHandle | None
    _dead_letters: dict[tuple[int, int], list[Message]]

    if TYPE_CHECKING:  # provided by Consumer; declared here only for the type checker
        def _owner_of(self, message: Any, mid: MessageId) -> Any: ...
        def _write(self, frame: bytes) -> bool: ...
        def _maybe_flow(self) -> None: ...
        def acknowledge(self, message: Any) -> None: ...

    def negative_acknowledge(self, message: Any) -> None:
        """Ask for redelivery after `negative_ack_redelivery_delay_ms`."""
        mid = as_message_id(message)
        owner = self._owner_of(message, mid)
        if self._threaded:
            self._loop.call_soon_threadsafe(owner._nack, mid)
        else:
            owner._nack(mid)

    def _nack(self, mid: MessageId) -> None:
        delay = self.config.negative_ack_redelivery_delay_ms / 1000
        self._nacks[(mid._l, mid._e)] = (time.monotonic() + delay, mid)
        self._arm_nack_timer(delay)

    def _arm_nack_timer(self, delay: float) -> None:
        if self._nack_timer is None and not self.closed:
            # as the C++ tracker: look a third of the delay later at what is due
            self._nack_timer = self._loop.call_later(max(delay / 3, 0.01), self._redeliver_nacked)

    def _redeliver_nacked(self) -> None:
        self._nack_timer = None
        now = time.monotonic()
        due = [key for key, (when, _) in self._nacks.items() if when <= now]
        for key in due:
            del self._nacks[key]
        if due:
            self._redeliver(due)
        if self._nacks:
            soonest = min(when for when, _ in self._nacks.values())
            self._nack_timer = self._loop.call_later(max(soonest - now, 0.01), self._redeliver_nacked)

    def _arm_unacked_check(self) -> None:
        timeout = (self.config.unacked_messages_timeout_ms or 0) / 1000
        self._unacked_timer = self._loop.call_later(max(timeout / 10, 0.1), self._redeliver_unacked)

    def _redeliver_unacked(self) -> None:
        timeout = (self.config.unacked_messages_timeout_ms or 0) / 1000
        deadline = time.monotonic() - timeout
        due = [key for key, when in self._unacked.items() if when <= deadline]
        for key in due:
            del self._unacked[key]
        if due:
            log.info("%s: %d messages not acked within %d ms", self.topic, len(due),
                     self.config.unacked_messages_timeout_ms)
            self._redeliver(due)
        if not self.closed:
            self._arm_unacked_check()

    def _redeliver(self, keys: list[tuple[int, int]]) -> None:
        keys = self._send_dead_letters(keys)
        if not keys:
            return
        if self._shared:
            self._write(cc.redeliver(self.consumer_id, [WireId(ledger, entry) for ledger, entry in keys]))
        else:
            self.redeliver_unacknowledged_messages()

    def redeliver_unacknowledged_messages(self) -> None:
        """Ask for every unacked message again; queued messages are dropped (they come back)."""
        cleared = self.queue.clear()
        self._dropped += cleared
        self._write(cc.redeliver(self.consumer_id))
        self._maybe_flow()

    # -- dead and retry letters
    def _send_dead_letters(self, keys: list[tuple[int, int]]) -> list[tuple[int, int]]:
        if self.letters is None or not self._dead_letters:
            return keys
        rest = []
        for key in keys:
            messages = self._dead_letters.pop(key, None)
            if messages is None:
                rest.append(key)
            else:
                self._loop.create_task(self._dead_letter(messages))
        return rest

    async def _dead_letter(self, messages: list[Message]) -> None:
        assert self.letters is not None
        try:
            await self.letters.dead_letter(messages, self.acknowledge)
        except errors.PulsarException as exc:
            log.warning("%s: could not send to the dead letter topic: %s", self.topic, exc)
            self._write(cc.redeliver(self.consumer_id, [messages[0].message_id().wire]))

    async def reconsume_later(self, message: Message, delay_ms: int, properties: dict[str, str] | None = None
                              ) -> None:
        """Send `message` to the retry-letter topic, delivered again after `delay_ms` (the Java
        client's reconsumeLater; needs `retry_enable=True` and a dead-letter policy)."""
        owner = message[1].owner
        if owner.letters is None:
            raise errors.InvalidConfiguration("reconsume_later needs subscribe(..., retry_enable=True, "
                                              "dead_letter_policy=...)")
        await owner.letters.reconsume_later(message, delay_ms, properties, owner.acknowledge)
