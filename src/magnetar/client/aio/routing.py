"""Which partition a message goes to, by the official routing modes (sans-IO).

Keyed messages go to `hash(key) % partitions` in every mode but CustomPartition. The hash is
Java's `String.hashCode` (Pulsar's JavaStringHash, the Java client's default), so magnetar
and Java producers put a key on the same partition. Unkeyed messages: RoundRobinDistribution
moves to the next partition per message, or, with batching, per batching window (as the C++
router does, so batches fill); UseSinglePartition picks one partition at random, once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from magnetar.client.enums import PartitionsRoutingMode


def java_string_hash(key: str) -> int:
    """`String.hashCode() & Integer.MAX_VALUE`, over UTF-16 code units as Java counts them."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h & 0x7FFFFFFF


class Router:
    def __init__(self, mode: int, partitions: int, *, batching: bool, switch_ms: int,
                 custom: Callable[[Any, int], int] | None = None) -> None:
        self.mode = int(mode)
        self.partitions = partitions
        self.custom = custom
        self._next = random.randrange(partitions)
        self._single = random.randrange(partitions)
        self._switch_ms = max(1, switch_ms) if batching else 0

    def choose(self, key: str | None, message: Any = None) -> int:
        if self.mode == PartitionsRoutingMode.CustomPartition and self.custom is not None:
            return self.custom(message, self.partitions) % self.partitions
        if key:
            return java_string_hash(key) % self.partitions
        if self.mode == PartitionsRoutingMode.UseSinglePartition:
            return self._single
        if self._switch_ms:
            return (self._next + int(time.monotonic() * 1000) // self._switch_ms) % self.partitions
        self._next = (self._next + 1) % self.partitions
        return self._next
