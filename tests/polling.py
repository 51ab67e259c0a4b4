"""Waiting for a condition the way tests here synchronise: a poll with a deadline, never a
bare sleep."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.05) -> bool:
    """True as soon as `condition()` is truthy, False once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


async def wait_for_async(condition: Callable[[], object], timeout: float = 15.0, interval: float = 0.05) -> bool:
    """`wait_for` inside an event loop: the loop keeps running while it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await asyncio.sleep(interval)
    return False
