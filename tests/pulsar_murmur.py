"""Pulsar's sticky key hash written out step by step from its Java source
(org.apache.pulsar.common.util.Murmur3_32Hash and StickyKeyConsumerSelectorUtils), with
Java's 32-bit int arithmetic spelled out: tests compare the broker's hash, which calls a
compiled MurmurHash3, against this independent account of what Pulsar computes."""

from __future__ import annotations

MASK32 = 0xFFFFFFFF
C1 = 0xCC9E2D51
C2 = 0x1B873593
RANGE_SIZE = 65536  # StickyKeyConsumerSelector.DEFAULT_RANGE_SIZE, 2 << 15


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & MASK32


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * C1) & MASK32, 15) * C2) & MASK32


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit as an unsigned int: little-endian 4-byte blocks, the tail
    mixed in, the length folded in, the final avalanche."""
    h1 = seed
    whole = len(data) - len(data) % 4
    for start in range(0, whole, 4):
        h1 ^= _mix_k1(int.from_bytes(data[start:start + 4], "little"))
        h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & MASK32
    tail = 0
    for shift, byte in enumerate(data[whole:]):
        tail ^= byte << (8 * shift)
    h1 ^= _mix_k1(tail)
    h1 ^= len(data)
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & MASK32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & MASK32
    return h1 ^ (h1 >> 16)


def pulsar_sticky_hash(key: bytes) -> int:
    """makeHash clears the sign bit; the selector takes it modulo the range and moves 0
    (Pulsar 4's "no hash yet") to 1."""
    return (murmur3_32(key) & 0x7FFFFFFF) % RANGE_SIZE or 1
