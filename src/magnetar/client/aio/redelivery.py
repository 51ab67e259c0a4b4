"""What brings a message back: negative acks after `negative_ack_redelivery_delay_ms`,
the unacked-message timeout, and, with a dead-letter policy, the dead-letter topic once
a message has come back too often (or the retry-letter topic on `reconsume_later`).

One `Redelivery` per single-topic consumer, which owns it. Its state (negatively acked
ids and when they are due, when each unacked entry arrived, the messages bound for the
dead-letter topic) lives on the event loop; it reaches back to the consumer only through
the three calls it is given: write a frame, ask for every unacked message again,
acknowledge a message. None of it touches flow control or the subscription.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.client import errors
from magnetar.client.message_id import MessageId
from magnetar.wire import client_commands as cc
from magnetar.wire.message_id import MessageId as WireId
from magnetar.wire.proto import pulsar_api_pb2 as pb

if TYPE_CHECKING:
    from magnetar.client.aio.consumer_config import ConsumerConfig
    from magnetar.client.aio.letters import Letters
    from magnetar.client.message import Message

log = logging.getLogger(__name__)

EntryKey = tuple[int, int]
"""(ledger id, entry id): redelivery works on whole entries, as the broker redelivers them."""


class Redelivery:
    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str, consumer_id: int, config: ConsumerConfig,
                 letters: Letters | None, *, shared: bool, write: Callable[[bytes], bool],
                 redeliver_all: Callable[[], None], acknowledge: Callable[[Message], None]) -> None:
        self._loop = loop
        self._topic = topic
        self._consumer_id = consumer_id
        self._config = config
        self._letters = letters
        self._shared = shared
        """Shared and Key_Shared ask for the due entries; the others must ask for every unacked one."""
        self._write = write
        self._redeliver_all = redeliver_all
        self._acknowledge = acknowledge
        self._nacks: dict[EntryKey, tuple[float, MessageId]] = {}
        self._nack_timer: asyncio.TimerHandle | None = None
        self._unacked: dict[EntryKey, float] = {}
        self._unacked_timer: asyncio.TimerHandle | None = None
        self._dead_letters: dict[EntryKey, list[Message]] = {}
        self._closed = False
        self.watching = config.dead_letter_policy is not None or bool(config.unacked_messages_timeout_ms)
        """Whether received entries must be shown to `received` (fixed by the configuration)."""
        self.tracking = False
        """Whether acks must be shown to `acked` (or `acked_elsewhere`): the unacked timeout
        runs or negative acks wait. Kept as a plain attribute: every ack reads it, from any thread."""
        self.acked_off_loop: deque[EntryKey] = deque()
        """Entries application threads acknowledged, not yet taken off the state (see `apply_acks`)."""

    def start(self) -> None:
        """The consumer is subscribed for the first time: the unacked timeout starts counting."""
        if self._config.unacked_messages_timeout_ms:
            self._arm_unacked_check()
            self.tracking = True

    def close(self) -> None:
        self._closed = True
        for timer in (self._nack_timer, self._unacked_timer):
            if timer is not None:
                timer.cancel()

    # -- what the consumer reports
    def received(self, command: pb.CommandMessage, messages: list[Message]) -> None:
        """An entry's messages were queued for the application."""
        self.apply_acks()
        mid = command.message_id
        dlq = self._config.dead_letter_policy
        if dlq is not None and command.redelivery_count >= dlq.max_redeliver_count:
            self._dead_letters[(mid.ledgerId, mid.entryId)] = messages
        if self._unacked_timer is not None:
            self._unacked[(mid.ledgerId, mid.entryId)] = time.monotonic()

    def received_raw(self, ledger: int, entry: int) -> None:
        """A raw entry was queued for receive_arrow; it is stamped 0, so the first timeout check
        after it finds it due (as it always was)."""
        self.apply_acks()
        if self._unacked_timer is not None:
            self._unacked[(ledger, entry)] = 0.0

    def held(self, ledger: int, entry: int) -> None:
        """An entry kept from the application (one it cannot decrypt): the unacked timeout,
        when set, asks for it again once it is due, as for a message never acknowledged."""
        self.apply_acks()
        if self._unacked_timer is not None:
            self._unacked[(ledger, entry)] = time.monotonic()

    def acked_elsewhere(self, ledger: int, entry: int) -> None:
        """`acked` from an application thread: queued (a `deque.append`, atomic under the GIL)
        and applied on the loop before the state is next read or written there (`apply_acks`),
        without waking the loop for it."""
        self.acked_off_loop.append((ledger, entry))

    def apply_acks(self) -> None:
        """Take what application threads acknowledged off the state (on the loop): before an
        entry is stamped or a nack is noted, so the order of acks and arrivals is kept, and
        before a timer looks for what is due."""
        pending = self.acked_off_loop
        pop, acked = pending.popleft, self.acked
        while pending:  # other threads may append meanwhile: taken one at a time
            acked(*pop())

    def acked(self, ledger: int, entry: int) -> None:
        unacked, nacks = self._unacked, self._nacks
        if unacked:
            unacked.pop((ledger, entry), None)
        if nacks:
            nacks.pop((ledger, entry), None)
            if not nacks:
                self.tracking = self._unacked_timer is not None

    def acked_up_to(self, ledger: int, entry: int) -> None:
        """A cumulative ack: entries up to (ledger, entry) no longer time out."""
        self.apply_acks()
        if self._unacked:
            for key in [k for k in self._unacked if k <= (ledger, entry)]:
                del self._unacked[key]

    # -- negative acks
    def nack(self, mid: MessageId) -> None:
        self.apply_acks()
        delay = self._config.negative_ack_redelivery_delay_ms / 1000
        self._nacks[(mid._l, mid._e)] = (time.monotonic() + delay, mid)
        self.tracking = True
        if self._nack_timer is None and not self._closed:
            # as the C++ tracker: look a third of the delay later at what is due
            self._nack_timer = self._loop.call_later(max(delay / 3, 0.01), self._redeliver_nacked)

    def _redeliver_nacked(self) -> None:
        self.apply_acks()
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
        else:
            self.tracking = self._unacked_timer is not None

    # -- the unacked timeout
    def _arm_unacked_check(self) -> None:
        timeout = (self._config.unacked_messages_timeout_ms or 0) / 1000
        self._unacked_timer = self._loop.call_later(max(timeout / 10, 0.1), self._redeliver_unacked)

    def _redeliver_unacked(self) -> None:
        self.apply_acks()
        timeout = (self._config.unacked_messages_timeout_ms or 0) / 1000
        deadline = time.monotonic() - timeout
        due = [key for key, when in self._unacked.items() if when <= deadline]
        for key in due:
            del self._unacked[key]
        if due:
            log.info("%s: %d messages not acked within %d ms", self._topic, len(due),
                     self._config.unacked_messages_timeout_ms)
            self._redeliver(due)
        if not self._closed:
            self._arm_unacked_check()

    def _redeliver(self, keys: list[EntryKey]) -> None:
        keys = self._send_dead_letters(keys)
        if not keys:
            return
        if self._shared:
            self._write(cc.redeliver(self._consumer_id, [WireId(ledger, entry) for ledger, entry in keys]))
        else:
            self._redeliver_all()

    # -- dead letters
    def _send_dead_letters(self, keys: list[EntryKey]) -> list[EntryKey]:
        if self._letters is None or not self._dead_letters:
            return keys
        rest = []
        for key in keys:
            messages = self._dead_letters.pop(key, None)
            if messages is None:
                rest.append(key)
            else:
                self._loop.create_task(self._dead_letter(self._letters, messages))
        return rest

    async def _dead_letter(self, letters: Letters, messages: list[Message]) -> None:
        try:
            await letters.dead_letter(messages, self._acknowledge)
        except errors.PulsarException as exc:
            log.warning("%s: could not send to the dead letter topic: %s", self._topic, exc)
            self._write(cc.redeliver(self._consumer_id, [messages[0].message_id().wire]))
