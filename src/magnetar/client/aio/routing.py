"""Which partition a message goes to, by the official routing modes (sans-IO).

Keyed messages go to `hash(key) % partitions` in every mode but CustomPartition. The hash is
Java's `String.hashCode` (Pulsar's JavaStringHash, the Java client's default), so magnetar
and Java producers put a key on the same partition. `boost_string_hash` is the official
Python (C++) client's default (BoostHash), for writers that must route as it does.
Unkeyed messages: RoundRobinDistribution moves to the next partition per message, or, with
batching, per batching window (as the C++ router does, so batches fill); UseSinglePartition
picks one partition at random, once.
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


_M64 = (1 << 64) - 1
_Q = 0x9E3779B97F4A7C15
_K = 0xDF442D22CE4859B9


def _mulx(x: int, y: int) -> int:
    product = (x & _M64) * y
    return (product & _M64) ^ (product >> 64)


def boost_string_hash(key: str) -> int:
    """`boost::hash<std::string>(key) & INT32_MAX` as the official C++/Python client (3.x, Linux
    x86-64, Boost >= 1.81) computes it for its default BoostHash routing.

    Boost's 64-bit byte-range hash: 8-byte little-endian words folded with a 128-bit
    multiply-xor, the tail read as overlapping 4-byte words. Checked against the partitions
    the official client picks (tests/spark/test_spark_write.py).
    """
    data = key.encode()
    n = len(data)
    w = _mulx(_Q, _K)
    h = w ^ n
    p = 0
    while n - p >= 8:
        w = (w + _Q) & _M64
        h ^= _mulx(int.from_bytes(data[p:p + 8], "little") + w, _K)
        p += 8
    rest = n - p
    if rest >= 4:
        low = int.from_bytes(data[p:p + 4], "little")
        high = int.from_bytes(data[p + rest - 4:p + rest], "little")
        tail = (high << ((rest - 4) * 8) | low) & _M64
    elif rest:
        x1, x2 = (rest - 1) & 2, rest >> 1
        tail = data[p + x1] << (x1 * 8) | data[p + x2] << (x2 * 8) | data[p]
    else:
        tail = 0
    w = (w + _Q) & _M64
    h ^= _mulx(tail + w, _K)
    return _mulx(h + w, _K) & 0x7FFFFFFF


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
