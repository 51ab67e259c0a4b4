"""A connection's bytes played into a broker-side protocol object in this process: what the
in-process path benchmarks share (publish_path_bench for Pulsar SENDs,
kafka_produce_path_bench for Kafka Produce requests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def play(receive: Callable[[bytes], None], answered: Callable[[], int], frames: list[bytes], chunk: int,
               window: int) -> tuple[float, float]:
    """`frames` handed to `receive` in reads of `chunk`, never more than `window` of them
    unanswered (`answered` counts the answers written so far), until every one is answered;
    the (CPU, wall) seconds this process spent, sync thread included."""
    reads = [b"".join(frames[i : i + chunk]) for i in range(0, len(frames), chunk)]
    cpu, wall = time.process_time(), time.perf_counter()
    sent = 0
    for read in reads:
        while sent - answered() >= window:
            await asyncio.sleep(0.0005)
        receive(read)
        sent += min(chunk, len(frames) - sent)
        await asyncio.sleep(0)
    while answered() < len(frames):
        await asyncio.sleep(0.0005)
    return time.process_time() - cpu, time.perf_counter() - wall
