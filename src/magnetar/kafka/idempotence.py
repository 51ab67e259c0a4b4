"""Idempotent produce: producer ids, and the sequence numbers that drop a retried batch.

A Kafka producer with idempotence on (librdkafka's and the Java client's default in 3.x,
kafka-python's in 3.x) gets a producer id from InitProducerId and numbers its batches per
partition. The broker stores a batch only if its base sequence follows the last one stored
for that producer and partition; a batch it already stored (a retry after a lost response)
is answered with its original offset and not stored again, as Pulsar's deduplication drops
a producer's repeated sequence id.

The state outlives the broker as Pulsar's deduplication state does (see producer_snapshots):
a partition's state is snapshotted into its ledger's properties every
`brokerDeduplicationEntriesInterval` idempotent batches (or 64 MB of them) and at a clean
stop, and rebuilt before its first idempotent batch after a start from the snapshot and the
entries stored after it: after a crash only those are read. Producer ids come in blocks
reserved in the metadata store, so none is handed out twice.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from magnetar.broker.errors import BrokerServiceError
from magnetar.broker.service.protocol_handlers import PartitionLog
from magnetar.kafka.producer_snapshots import Stored, load_snapshot, save_snapshot, stored_batches
from magnetar.kafka.protocol.records import ProducedBatch
from magnetar.storage import StorageError

log = logging.getLogger(__name__)
_INT32 = 1 << 31
_RECENT_BATCHES = 5  # a producer has at most five requests in flight (max.in.flight with idempotence)
_ID_BLOCK = 1000  # ids reserved at a time (Kafka's controller hands brokers blocks of 1000 too)
#: a snapshot also after this many bytes of idempotent batches, so recovery reads little of large batches
_SNAPSHOT_BYTES = 64 << 20
#: Kafka's producer.id.expiration.ms default: a producer silent this long is forgotten at the next snapshot.
EXPIRATION_MS = 24 * 3600 * 1000


@dataclass(slots=True)
class ProducerState:
    epoch: int
    next_sequence: int  # counts accepted batches still being written
    last_time: int = 0  # broker time (ms) of the last durable batch
    recent: deque[Stored] = field(default_factory=lambda: deque(maxlen=_RECENT_BATCHES))  # durable only

    def record(self, stored: Stored, at: int) -> None:
        self.recent.append(stored)
        self.last_time = at


@dataclass(slots=True)
class PartitionProducers:
    """One partition's producers and how far its durable batches are known (the snapshot's offset)."""

    log: PartitionLog  # the latest the handler used: a snapshot at stop writes through it
    producers: dict[int, ProducerState] = field(default_factory=dict)
    known_to: int = 0  # offset below which every durable idempotent batch is recorded
    pending: int = 0  # idempotent batches accepted and not yet stored or failed
    since_snapshot: int = 0
    bytes_since_snapshot: int = 0

    def record(self, producer_id: int, epoch: int, stored: Stored, at: int) -> None:
        """A durable batch, live or replayed (a batch already recorded is not recorded twice)."""
        state = self.producers.get(producer_id)
        if state is None or epoch > state.epoch:
            state = self.producers[producer_id] = ProducerState(epoch, 0)
        elif epoch < state.epoch or stored in state.recent:
            return
        state.record(stored, at)
        state.next_sequence = _next(stored.first_sequence, stored.count)  # recorded in offset order
        self.known_to = max(self.known_to, stored.base_offset + stored.count)


class SequenceCheck(NamedTuple):
    """The verdict on a batch: store it, answer with a stored batch's offset, or an error."""

    error: ErrorCode
    duplicate_of: int | None = None


ACCEPT = SequenceCheck(ErrorCode.none)


def _next(sequence: int, count: int) -> int:
    return (sequence + count) % _INT32


def _in_flight(state: ProducerState, sequence: int) -> bool:
    """Whether `sequence` was accepted and is still being written: a retry sent while its first
    try is in flight (requests are taken pipelined). It is answered NOT_ENOUGH_REPLICAS, which
    every Kafka producer retries: by then the first try is durable (the retry is answered with
    its offset) or failed (the retry is stored)."""
    if sequence == state.next_sequence or not _behind(sequence, state.next_sequence):
        return False
    if not state.recent:
        return True
    last = state.recent[-1]
    return _behind(_next(last.first_sequence, last.count), sequence)


def _behind(sequence: int, expected: int) -> bool:
    """Whether `sequence` is at or before `expected` (sequences wrap at 2**31). A failed write
    fails every request pipelined after it, each forgotten in turn: the expected sequence goes
    back to the first of them, never forward to a later one."""
    return (expected - sequence) % _INT32 < _INT32 // 2


class ProducerIds:
    """Ids never handed out before, by any start of the broker: blocks reserved in the metadata store."""

    def __init__(self, reserve: Callable[[int], range]) -> None:
        self._reserve = reserve
        self._ids: Iterator[int] = iter(())

    def allocate(self) -> int:
        producer_id = next(self._ids, None)
        if producer_id is None:
            self._ids = iter(self._reserve(_ID_BLOCK))
            producer_id = next(self._ids)
        return producer_id


class ProducerStates:
    """Per partition and producer id: the epoch, the sequence the next batch must carry, the recent batches."""

    def __init__(self, snapshot_interval: int) -> None:
        self._partitions: dict[str, PartitionProducers] = {}
        self._interval = max(snapshot_interval, 1)

    def check(self, partition: PartitionLog, batch: ProducedBatch) -> SequenceCheck:
        """Whether `batch` may be stored; an accepted batch advances the expected sequence at once,
        so the next request of a pipelining producer is checked against it."""
        header = batch.header
        if header.producer_id < 0:
            return ACCEPT
        loaded = self._loaded(partition)
        producers = loaded.producers
        state = producers.get(header.producer_id)
        if state is None or header.producer_epoch > state.epoch:
            producers[header.producer_id] = ProducerState(header.producer_epoch,
                                                          _next(header.base_sequence, batch.count))
            loaded.pending += 1
            return ACCEPT
        if header.producer_epoch < state.epoch:
            return SequenceCheck(ErrorCode.invalid_producer_epoch)
        if header.base_sequence == state.next_sequence:
            state.next_sequence = _next(header.base_sequence, batch.count)
            loaded.pending += 1
            return ACCEPT
        for stored in state.recent:
            if stored.first_sequence == header.base_sequence:
                return SequenceCheck(ErrorCode.none, stored.base_offset)
        if _in_flight(state, header.base_sequence):
            return SequenceCheck(ErrorCode.not_enough_replicas)
        if any(stored.first_sequence > header.base_sequence for stored in state.recent):
            return SequenceCheck(ErrorCode.duplicate_sequence_number)
        return SequenceCheck(ErrorCode.out_of_order_sequence_number)

    def stored(self, partition: PartitionLog, batch: ProducedBatch, base_offset: int) -> None:
        """Remember a durable batch, so a retry of it is answered with its offset, and snapshot
        the partition every `interval` such batches."""
        header = batch.header
        producers = self._partitions.get(partition.name)
        if header.producer_id < 0 or producers is None:
            return
        producers.pending -= 1
        producers.known_to = base_offset + batch.count
        state = producers.producers.get(header.producer_id)
        if state is None or state.epoch != header.producer_epoch:
            return  # a newer epoch took over while this batch was being written
        state.record(Stored(header.base_sequence, base_offset, batch.count), int(time.time() * 1000))
        producers.since_snapshot += 1
        producers.bytes_since_snapshot += len(batch.data)
        if producers.since_snapshot >= self._interval or producers.bytes_since_snapshot >= _SNAPSHOT_BYTES:
            self._snapshot(producers)

    def forget(self, partition: PartitionLog, batches: list[ProducedBatch]) -> None:
        """Accepted batches that will not be stored (refused with the request, or failed): their
        sequences may come again."""
        producers = self._partitions.get(partition.name)
        if producers is None:
            return
        for batch in reversed(batches):  # the first one's sequence is what comes next
            header = batch.header
            if header.producer_id < 0:
                continue
            producers.pending -= 1
            state = producers.producers.get(header.producer_id)
            if state is not None and state.epoch == header.producer_epoch and _behind(header.base_sequence,
                                                                                       state.next_sequence):
                state.next_sequence = header.base_sequence

    def snapshot_all(self) -> None:
        """At a clean stop: every partition written since its snapshot (or with Pulsar producers'
        entries after it), so a restart replays nothing."""
        for producers in self._partitions.values():
            self._snapshot(producers, unless_current=True)

    def _snapshot(self, producers: PartitionProducers, *, unless_current: bool = False) -> None:
        """With no idempotent batch in flight every one below the log's end is recorded, so the
        snapshot covers the log to its end (what Pulsar producers wrote after is not read again)."""
        partition = producers.log
        try:
            end = producers.known_to
            if not producers.pending:  # an open transaction's batches are recorded too
                end = max(end, partition.end_offset(stable=False))
            if unless_current and not producers.since_snapshot and end == producers.known_to:
                return
            producers.known_to = end
            expired = int(time.time() * 1000) - EXPIRATION_MS
            for producer_id in [pid for pid, state in producers.producers.items()
                                if state.recent and state.last_time < expired]:
                del producers.producers[producer_id]
            save_snapshot(partition, end, {pid: (state.epoch, state.last_time, list(state.recent))
                                           for pid, state in producers.producers.items() if state.recent})
        except (BrokerServiceError, StorageError) as exc:  # deleted or unloaded: the next load rebuilds it
            log.info("%s: Kafka producer state not snapshotted: %s", partition.name, exc)
            return
        producers.since_snapshot = producers.bytes_since_snapshot = 0

    def _loaded(self, partition: PartitionLog) -> PartitionProducers:
        """The partition's producers, rebuilt from its snapshot and the entries after it on first use."""
        producers = self._partitions.get(partition.name)
        if producers is not None:
            producers.log = partition
            return producers
        producers = PartitionProducers(partition)
        known_to, saved = load_snapshot(partition)
        producers.known_to = known_to
        for producer_id, (epoch, last_time, recent) in saved.items():
            for stored in recent:
                producers.record(producer_id, epoch, stored, last_time)
        entries = 0
        for found in stored_batches(partition, known_to):
            entries += 1
            if found is not None:
                producers.record(*found)
                producers.since_snapshot += 1
        self._partitions[partition.name] = producers
        if entries:
            log.info("%s: Kafka producer state rebuilt from %d entries past its snapshot (%d batches)",
                     partition.name, entries, producers.since_snapshot)
        self._snapshot(producers, unless_current=True)  # what was read is not read again
        return producers
