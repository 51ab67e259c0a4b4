"""What producers and consumers share: finding their broker, and coming back after losing it.

A handler (one producer or consumer on one topic partition) is "ready" while it is
registered on a live connection. When the connection is lost or the broker closes the
handler (topic unloaded, broker stopping), it looks the topic up again and re-registers,
with the official client's backoff (0.1 s doubling), until it is closed. The first
registration retries the errors the official producer retries, up to the operation timeout
(client.aio.retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.client import errors
from magnetar.client.aio.retries import retried
from magnetar.client.backoff import Backoff

if TYPE_CHECKING:
    from magnetar.client.aio.connection import Connection
    from magnetar.client.aio.context import ClientContext

log = logging.getLogger(__name__)

class Handler:
    def __init__(self, context: ClientContext, topic: str) -> None:
        self.context = context
        self.topic = topic
        self.conn: Connection | None = None
        self.closed = False
        self._backoff = Backoff()
        self._reconnecting: asyncio.Task[None] | None = None
        self._recalled = asyncio.Event()
        """Set when the broker asked the handler to come back now: the backoff's wait ends."""
        self._loop = asyncio.get_running_loop()

    async def _register(self, conn: Connection) -> None:
        """Register on `conn` (send PRODUCER / SUBSCRIBE); raise on refusal."""
        raise NotImplementedError

    def _on_ready(self) -> None:
        """Called once registered (again): resend, re-flow, ..."""

    def _gives_up(self, refusal: errors.PulsarException) -> bool:
        """Whether a refusal to come back is final (the handler then stops reconnecting)."""
        return False

    async def _connect_once(self) -> None:
        logical, physical = await self.context.lookup.broker_for(self.topic)
        conn = await self.context.pool.get(logical, physical)
        await self._register(conn)
        self.conn = conn
        self._on_ready()

    async def start(self) -> None:
        """First registration: retry what is retryable until the operation timeout."""
        await retried(self._connect_once, self.context.operation_timeout, self.topic)

    # -- losing the broker
    def on_broker_close(self, *, now: bool = False) -> None:
        """The broker closed the handler; `now`: it named where to come back (PIP-307), so the
        backoff is skipped, as the official client skips it."""
        log.info("broker closed %s on %s: reconnecting", type(self).__name__, self.topic)
        if now:
            self._backoff.reset()
            self._recalled.set()
        self._lost()

    def connection_closed(self, conn: Connection) -> None:
        if conn is self.conn:
            self._lost()

    def _lost(self) -> None:
        self.conn = None
        self._schedule_reconnect()

    def _schedule_reconnect(self) -> None:
        if self.closed or (self._reconnecting is not None and not self._reconnecting.done()):
            return
        self._reconnecting = self._loop.create_task(self._reconnect())

    async def _reconnect(self) -> None:
        while not self.closed:
            await self._pause(self._backoff.next())
            if self.closed:
                return
            try:
                await self._connect_once()
            except errors.PulsarException as exc:
                if self._gives_up(exc):
                    return
                log.info("reconnecting %s: %s", self.topic, exc)
                continue
            self._backoff.reset()
            return

    async def _pause(self, delay: float) -> None:
        """The backoff's `delay`, cut short if the broker recalls the handler meanwhile."""
        if not self._recalled.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._recalled.wait(), delay)
        self._recalled.clear()

    def _stop_reconnecting(self) -> None:
        self.closed = True
        if self._reconnecting is not None:
            self._reconnecting.cancel()
            with contextlib.suppress(BaseException):
                self._reconnecting.exception()  # type: ignore[func-returns-value]
