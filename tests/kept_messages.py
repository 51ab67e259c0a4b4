"""A round trip whose received messages the application keeps while more arrive: a
client reading into a reused buffer must hand out messages that never alias it. Shared by
the plain (tests/client) and TLS (tests/security) scenarios."""

from __future__ import annotations

import random

#: Larger than magnetar.client's read buffer (256 KiB): such a frame gathers over reads.
LARGER_THAN_A_READ = 256 * 1024 + 4321


def keep_while_reading(client, topic: str, *, batching: bool, seed: int) -> None:
    """Send 300 values of mixed sizes, one larger than a read, with default options but
    `batching`; receive them all, keeping each, then compare every kept one."""
    rng = random.Random(seed)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=batching)
    values = [rng.randbytes(rng.choice((1, 100, 2000, 40_000))) for _ in range(300)]
    values[rng.randrange(len(values))] = rng.randbytes(LARGER_THAN_A_READ)
    for value in values:
        producer.send_async(value, None)
    producer.flush()
    kept = [consumer.receive(timeout_millis=10_000) for _ in values]
    for message in kept:
        consumer.acknowledge(message)
    assert [m.data() for m in kept] == values, f"seed {seed}"
