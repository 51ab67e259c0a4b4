"""Riding out a broker that cannot be reached for a while (a restart), as the official clients
do: an operation is tried again, with their backoff (0.1 s doubling), until the client's
operation timeout, when its failure is one that a broker coming back would cure: the error
says so itself (`PulsarException.retriable`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar.client import errors
from magnetar.client.backoff import Backoff

T = TypeVar("T")


async def retried(attempt: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
    """`attempt()`'s result, tried again while it fails retryably; Timeout naming `what` and the
    last failure once the next try would start past `timeout`. A try is never cut short (each
    has its own timeouts), so a registration the broker accepted is never abandoned half way."""
    deadline = time.monotonic() + timeout
    backoff = Backoff()
    while True:
        try:
            return await attempt()
        except errors.PulsarException as exc:
            if not exc.retriable:
                raise
            delay = backoff.next()
            if time.monotonic() + delay >= deadline:
                raise errors.Timeout(f"{what}: {exc}") from exc
            await asyncio.sleep(delay)
