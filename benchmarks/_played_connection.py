"""A connection's bytes played into a broker-side protocol object in this process: what the
in-process path benchmarks share (publish_path_bench for Pulsar SENDs,
kafka_produce_path_bench for Kafka Produce requests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def play(receive: Callable[[bytes], None], answered: Callable[[], int], written: asyncio.Event,
               frames: list[bytes], chunk: int, window: int) -> tuple[float, float]:
    """`frames` handed to `receive` in reads of `chunk`, never more than `window` of them
    unanswered (`answered` counts the answers written so far; the transport sets `written`
    whenever it writes), until every one is answered; the (CPU, wall) seconds this process
    spent, sync thread included. It waits on `written` rather than polling, so a slower run
    (an fsync slowed by other jobs) does not add wake-ups of its own to the CPU measured."""
    reads = [b"".join(frames[i : i + chunk]) for i in range(0, len(frames), chunk)]
    cpu, wall = time.process_time(), time.perf_counter()
    sent = 0
    for read in reads:
        while sent - answered() >= window:
            await _next_write(written)
        receive(read)
        sent += min(chunk, len(frames) - sent)
        await asyncio.sleep(0)
    while answered() < len(frames):
        await _next_write(written)
    return time.process_time() - cpu, time.perf_counter() - wall


async def _next_write(written: asyncio.Event) -> None:
    written.clear()
    await written.wait()
