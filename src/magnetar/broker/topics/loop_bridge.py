"""Hand storage completions from its sync thread to the event loop, in order.

Every durable append calls back on the storage thread. One
`call_soon_threadsafe` per callback would wake the loop (a syscall) once per
message; instead callbacks are queued and the loop is woken once per drain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable
from typing import Any


class LoopBridge:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._scheduled = False

    def post(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` on the loop thread; callable from any thread, order kept."""
        self._queue.append((fn, args))
        if not self._scheduled:
            self._scheduled = True
            # A closed loop means shutdown: nobody is left waiting for the result.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        # Clear the flag before popping: a post racing with this drain either is
        # popped below or schedules a fresh drain; it is never stranded.
        self._scheduled = False
        queue = self._queue
        while queue:
            fn, args = queue.popleft()
            fn(*args)
