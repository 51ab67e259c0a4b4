"""Produced record batches as the entries a partition stores.

With entryFormat=kafka a batch is stored as the client sent it (PIP-96's Kafka format, one
batch an entry). With entryFormat=pulsar its records become one Pulsar batch every Pulsar
client reads, and the records of consecutive batches stored by one append (a connection's
pipelined requests, see produce) join one Pulsar batch when nothing tells them apart: no
idempotence, no transaction, one producer name and codec, and together no larger than half
the partition's maxMessageSize (a converted record can be larger than it came: a binary key
becomes base64, headers become properties). A producer sending a request per record (librdkafka at
linger.ms=0) then costs the broker an entry per group of requests instead of one per record;
offsets are the messages' PIP-70 indexes either way. An idempotent producer's batch stays an
entry of its own, since its producer and sequence, in the entry's metadata, are what rebuild
its state after a restart (producer_snapshots).

Entries carry no Pulsar checksum (KoP writes none either): the batch's own CRC-32C was
checked on arrival, and storage keeps a CRC of every entry it writes.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from magnetar.formats.kafka_records import SLICE_RECORDS, kafka_entry_properties
from magnetar.kafka.producer_snapshots import producer_name
from magnetar.kafka.protocol.records import (
    InvalidRecords,
    ProducedBatch,
    pulsar_batch,
    pulsar_message_steps,
    split_batches,
)
from magnetar.wire.entry import build_entry
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.txn import TxnId


@dataclass(slots=True)
class PulsarRecords:
    """Records bound for one Pulsar batch entry: one batch's, or consecutive batches' joined."""

    producer: str
    sequence: int | None
    """An idempotent producer's base sequence; None: the broker numbers the entry."""
    txn: TxnId | None
    codec: int
    messages: list[bytes]
    """The records as Pulsar batch messages, a piece per batch joined (pulsar_message_steps)."""
    count: int
    size: int  # bytes of the Kafka batches they came in
    event_time: int

    def join(self, other: PulsarRecords, limit: int) -> bool:
        """Take `other`'s records after these, when nothing tells the two apart and both came in
        half of `limit` (the partition's maxMessageSize) or less."""
        if (self.sequence is not None or other.sequence is not None or self.txn is not None or other.txn is not None
                or self.producer != other.producer or self.codec != other.codec
                or self.size + other.size > limit // 2):
            return False
        self.messages += other.messages
        self.count += other.count
        self.size += other.size
        self.event_time = max(self.event_time, other.event_time)
        return True


Pending = bytes | PulsarRecords
"""An entry as built when its batch is taken: whole (Kafka format), or records to build it from."""
Converted = tuple[int, list[bytes], int] | InvalidRecords
"""A batch's records as pulsar_message_steps gives them, or why they do not convert."""


@dataclass(slots=True)
class Prepared:
    """One partition's records of a produce request split into checked batches and, in the
    Pulsar format, converted: the part of a produce whose cost the client sets (tens of
    milliseconds for a megabyte of small records), done in steps before the request is taken."""

    batches: list[ProducedBatch] | InvalidRecords
    converted: list[Converted] | None
    """Per batch; None in the Kafka format, where a batch is stored as it came."""

    def conversions(self) -> list[Converted] | list[None]:
        count = len(self.batches) if isinstance(self.batches, list) else 0
        return self.converted if self.converted is not None else [None] * count


class ProducedEntries:
    """Builds a partition's entries from produced batches, numbering those of producers
    without idempotence."""

    def __init__(self, kafka_format: bool) -> None:
        self._kafka_format = kafka_format
        self._sequence = 0

    def prepare(self, records: bytes | None, taken: int, limit: int) -> Generator[None, None, tuple[Prepared, int]]:
        """A partition's records split and converted, a step (a yield) before SLICE_RECORDS
        more records would be converted since the last one, `taken` being those converted
        since it; what was converted since the last step comes back with the result. A
        batch's records may decompress to `limit` bytes (the partition's maxMessageSize)."""
        if not records:
            return Prepared(InvalidRecords("no records", corrupt=False), None), taken
        try:
            batches = split_batches(records)
        except InvalidRecords as exc:
            return Prepared(exc, None), taken
        if self._kafka_format:
            return Prepared(batches, None), taken
        converted: list[Converted] = []
        for batch in batches:
            if taken and taken + batch.count > SLICE_RECORDS:
                yield
                taken = 0
            try:
                converted.append((yield from pulsar_message_steps(batch, limit)))
            except InvalidRecords as exc:
                converted.append(exc)
            # a batch over a slice stepped inside itself: what follows its last step counts
            taken = taken + batch.count if batch.count <= SLICE_RECORDS else (batch.count - 1) % SLICE_RECORDS + 1
        return Prepared(batches, converted), taken

    def pending(self, producer: str, batch: ProducedBatch, now: int, txn: TxnId | None,
                converted: Converted | None) -> Pending:
        """What a checked batch is stored as (InvalidRecords when its records do not convert),
        from its records as prepare() `converted` them (None in the Kafka format)."""
        header = batch.header
        sequence = None
        if header.producer_id >= 0:  # what recovery reads back (producer_snapshots)
            producer, sequence = producer_name(header.producer_id, header.producer_epoch), header.base_sequence
        if self._kafka_format:
            metadata = self._metadata(producer, sequence, batch.count, now, txn)
            for key, value in kafka_entry_properties().items():
                metadata.properties.add(key=key, value=value)
            return build_entry(metadata, batch.data, checksum=False)
        if isinstance(converted, InvalidRecords):
            raise converted
        assert converted is not None  # prepare() converts every batch of the Pulsar format
        codec, messages, count = converted
        return PulsarRecords(producer, sequence, txn, codec, messages, count, len(batch.data),
                             max(header.max_timestamp, 0))

    def entry(self, pending: Pending, now: int) -> bytes:
        if isinstance(pending, bytes):
            return pending
        converted = pulsar_batch(pending.codec, pending.messages, pending.count)
        metadata = self._metadata(pending.producer, pending.sequence, converted.num_messages, now, pending.txn)
        if pending.event_time > 0:  # what ListOffsets by time searches on (offsets_by_time)
            metadata.event_time = pending.event_time
        if converted.compression != pb.NONE:
            metadata.compression = converted.compression  # type: ignore[assignment]
            metadata.uncompressed_size = converted.uncompressed_size
        return build_entry(metadata, converted.payload, checksum=False)

    def _metadata(self, producer: str, sequence: int | None, count: int, now: int,
                  txn: TxnId | None) -> pb.MessageMetadata:
        if sequence is None:
            sequence = self._sequence
            self._sequence += count
        metadata = pb.MessageMetadata(producer_name=producer, sequence_id=sequence, publish_time=now,
                                      num_messages_in_batch=count)
        if txn is not None:  # what the transaction buffer and every reader decide by
            metadata.txnid_most_bits, metadata.txnid_least_bits = txn
        return metadata
