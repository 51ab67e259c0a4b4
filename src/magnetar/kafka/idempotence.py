"""Idempotent produce: producer ids, and the sequence numbers that drop a retried batch.

A Kafka producer with idempotence on (librdkafka's and the Java client's default in 3.x,
kafka-python's in 3.x) gets a producer id from InitProducerId and numbers its batches per
partition. The broker stores a batch only if its base sequence follows the last one stored
for that producer and partition; a batch it already stored (a retry after a lost response)
is answered with its original offset and not stored again, as Pulsar's deduplication drops
a producer's repeated sequence id. The state is the broker's memory: after a restart the
first batch of a producer is taken as it comes (Kafka's rule for a producer it no longer
knows), so only a retry racing the restart can be stored twice.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from magnetar.kafka.protocol.records import ProducedBatch

_INT32 = 1 << 31
_RECENT_BATCHES = 5  # a producer has at most five requests in flight (max.in.flight with idempotence)


class Stored(NamedTuple):
    first_sequence: int
    base_offset: int


@dataclass(slots=True)
class _ProducerState:
    epoch: int
    next_sequence: int
    recent: deque[Stored] = field(default_factory=lambda: deque(maxlen=_RECENT_BATCHES))


class SequenceCheck(NamedTuple):
    """The verdict on a batch: store it, answer with a stored batch's offset, or an error."""

    error: ErrorCode
    duplicate_of: int | None = None


ACCEPT = SequenceCheck(ErrorCode.none)


def _next(sequence: int, count: int) -> int:
    return (sequence + count) % _INT32


class ProducerIds:
    """Unique across restarts without stored state: milliseconds since the epoch, then a counter."""

    def __init__(self) -> None:
        self._ids = itertools.count(int(time.time() * 1000) << 10)

    def allocate(self) -> int:
        return next(self._ids)


class ProducerStates:
    """Per partition and producer id: the epoch and the sequence the next batch must carry."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, int], _ProducerState] = {}

    def check(self, partition: str, batch: ProducedBatch) -> SequenceCheck:
        """Whether `batch` may be stored; an accepted batch advances the expected sequence at once,
        so the next request of a pipelining producer is checked against it."""
        header = batch.header
        if header.producer_id < 0:
            return ACCEPT
        key = (partition, header.producer_id)
        state = self._states.get(key)
        if state is None or header.producer_epoch > state.epoch:
            self._states[key] = _ProducerState(header.producer_epoch, _next(header.base_sequence, batch.count))
            return ACCEPT
        if header.producer_epoch < state.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if header.base_sequence == state.next_sequence:
            state.next_sequence = _next(header.base_sequence, batch.count)
            return ACCEPT
        for stored in state.recent:
            if stored.first_sequence == header.base_sequence:
                return SequenceCheck(ErrorCode.none, stored.base_offset)
        if any(stored.first_sequence > header.base_sequence for stored in state.recent):
            return SequenceCheck(ErrorCode.duplicate_sequence_number)
        return SequenceCheck(ErrorCode.out_of_order_sequence_number)

    def stored(self, partition: str, batch: ProducedBatch, base_offset: int) -> None:
        """Remember a durable batch, so a retry of it is answered with its offset."""
        header = batch.header
        state = self._states.get((partition, header.producer_id))
        if header.producer_id >= 0 and state is not None:
            state.recent.append(Stored(header.base_sequence, base_offset))

    def forget(self, partition: str, batch: ProducedBatch) -> None:
        """A batch that failed to store: its sequence may come again."""
        state = self._states.get((partition, batch.header.producer_id))
        if state is not None and batch.header.producer_id >= 0:
            state.next_sequence = batch.header.base_sequence
