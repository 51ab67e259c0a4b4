"""Kafka producer state on disk: a snapshot in the partition's ledger properties, and the batches after it.

Pulsar's MessageDeduplication keeps its producers' sequence ids the same way: a snapshot
every `brokerDeduplicationEntriesInterval` entries, and at recovery a read of the entries
stored since, their metadata only. What a stored entry says of its Kafka producer: with
entryFormat=kafka the batch header (producerId, producerEpoch, baseSequence; KoP's entries
too); with entryFormat=pulsar the producer name `kafka:<id>:<epoch>` and the sequence id
(the batch's base sequence) that produce writes into the MessageMetadata, so the publish
path parses nothing.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import NamedTuple

from magnetar.broker.service.protocol_handlers import PartitionLog
from magnetar.broker.transport.publish_checks import KAFKA_PRODUCER_PREFIX
from magnetar.formats.kafka_records import KAFKA_FORMAT, read_header
from magnetar.formats.payload import CorruptPayloadError
from magnetar.wire.entry import entry_format, first_message_index, parse_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb

log = logging.getLogger(__name__)
SNAPSHOT_PROPERTY = "#kafka.producers"
_REPLAY_BYTES = 8 << 20


class Stored(NamedTuple):
    """A durable batch of a producer: enough to answer its retry and to snapshot it."""

    first_sequence: int
    base_offset: int
    count: int


#: producer id -> (epoch, broker time of its last batch, its recent batches)
Producers = dict[int, tuple[int, int, list[Stored]]]


def producer_name(producer_id: int, epoch: int) -> str:
    """The MessageMetadata producer name of an idempotent producer's batch (`kafka-<client id>`
    names the others, so the two never meet)."""
    return f"{KAFKA_PRODUCER_PREFIX}{producer_id}:{epoch}"


def save_snapshot(partition: PartitionLog, known_to: int, producers: Producers) -> None:
    """Producers' recent batches, complete up to offset `known_to` (recovery replays from there)."""
    state = {"offset": known_to,
             "producers": {str(pid): [epoch, at, [list(s) for s in recent]]
                           for pid, (epoch, at, recent) in producers.items()}}
    partition.set_property(SNAPSHOT_PROPERTY, json.dumps(state, separators=(",", ":")))


def load_snapshot(partition: PartitionLog) -> tuple[int, Producers]:
    """(offset to replay from, producers) of the last snapshot; the log's start and none without one."""
    raw = partition.property(SNAPSHOT_PROPERTY)
    if raw:
        try:
            state = json.loads(raw)
            producers = {int(pid): (int(epoch), int(at), [Stored(*map(int, s)) for s in recent])
                         for pid, (epoch, at, recent) in state["producers"].items()}
            return int(state["offset"]), producers
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("%s: unreadable %s (%s): producer state rebuilt from the whole log", partition.name,
                        SNAPSHOT_PROPERTY, exc)
    return partition.start_offset(), {}


def stored_batches(partition: PartitionLog, offset: int) -> Iterator[tuple[int, int, Stored, int] | None]:
    """For every entry from `offset` on, (producer id, epoch, batch, broker time) of its idempotent
    Kafka batch, or None for an entry of another producer."""
    end = partition.end_offset(stable=False)  # an open transaction's batches are a producer's too
    while offset < end:
        entries = partition.read(offset, _REPLAY_BYTES, max_entries=1000, stable=False)
        if not entries:
            return
        for entry in entries:
            parsed = parse_entry(entry)
            metadata = parsed.metadata
            last = parsed.broker_entry_metadata.index if parsed.broker_entry_metadata is not None else offset
            offset = max(offset, last + 1)
            producer = _producer_of(metadata, parsed.payload)
            if producer is None:
                yield None
            else:
                producer_id, epoch, sequence = producer
                first = first_message_index(metadata, last)
                yield producer_id, epoch, Stored(sequence, first, last - first + 1), metadata.publish_time


def _producer_of(metadata: pb.MessageMetadata, payload: memoryview) -> tuple[int, int, int] | None:
    """(producer id, epoch, base sequence) of an idempotent producer's entry, else None."""
    if entry_format(metadata) == KAFKA_FORMAT:
        try:
            header = read_header(payload, check_crc=False)  # checked before it was stored
        except CorruptPayloadError:
            return None
        return (header.producer_id, header.producer_epoch, header.base_sequence) if header.producer_id >= 0 else None
    producer = producer_of_name(metadata.producer_name)
    return None if producer is None else (*producer, metadata.sequence_id)


def producer_of_name(name: str) -> tuple[int, int] | None:
    """(producer id, epoch) a producer name of `producer_name` gives, else None (another producer)."""
    if not name.startswith(KAFKA_PRODUCER_PREFIX):
        return None
    producer_id, _, epoch = name[len(KAFKA_PRODUCER_PREFIX):].partition(":")
    try:
        return int(producer_id), int(epoch)
    except ValueError:
        return None
