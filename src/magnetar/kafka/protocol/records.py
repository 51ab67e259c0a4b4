"""Record batches (magic 2) between Kafka clients and Pulsar entries.

A produce request's records for a partition are one or more RecordBatches back to back.
Each is checked before anything is stored: whole, magic 2, CRC32C over its bytes, a record
count that matches its last offset delta. Its bytes then go to storage as sent
(entryFormat=kafka, PIP-96's layout: one batch an entry, read by the Kafka payload
processor) or become one Pulsar batch (entryFormat=pulsar, readable by every Pulsar
client). A fetch serves a stored Kafka batch with only its baseOffset rewritten (outside
the CRC, so nothing else changes) and builds a batch from a Pulsar entry's messages.

The byte layout is formats.kafka_records'; this module adds what a broker needs on top.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Generator, Sequence
from typing import NamedTuple

from magnetar.formats.kafka_compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    RecordsTooLarge,
)
from magnetar.formats.kafka_records import (
    HEADER_SIZE,
    KafkaBatchHeader,
    encode_record_batch,
    pulsar_batch_message_steps,
    read_header,
)
from magnetar.formats.payload import CorruptPayloadError
from magnetar.wire.batch import BatchMessage
from magnetar.wire.compression import compress
from magnetar.wire.proto import pulsar_api_pb2 as pb

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_MAGIC_AT = 16

# Kafka's codec -> the Pulsar codec an entry converted from it keeps (gzip's nearest is zlib).
_PULSAR_CODEC = {CODEC_NONE: pb.NONE, CODEC_GZIP: pb.ZLIB, CODEC_SNAPPY: pb.SNAPPY, CODEC_LZ4: pb.LZ4,
                 CODEC_ZSTD: pb.ZSTD}


class InvalidRecords(ValueError):
    """Records a produce request cannot store; `corrupt` = Kafka's CORRUPT_MESSAGE, else INVALID_RECORD."""

    def __init__(self, message: str, *, corrupt: bool = True) -> None:
        super().__init__(message)
        self.corrupt = corrupt


class BatchTooLarge(InvalidRecords):
    """A batch whose records decompress past the partition's maxMessageSize (Kafka's
    MESSAGE_TOO_LARGE: the producer must not retry it as it is)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, corrupt=False)


class ProducedBatch(NamedTuple):
    """One checked batch of a produce request: its bytes and the header fields a broker acts on."""

    data: memoryview
    header: KafkaBatchHeader

    @property
    def count(self) -> int:
        return self.header.count


def split_batches(records: bytes | memoryview) -> list[ProducedBatch]:
    """The batches of a partition's records, each checked whole; InvalidRecords on the first bad one."""
    view = memoryview(records)
    batches = []
    pos = 0
    while pos < len(view):
        if len(view) - pos < HEADER_SIZE:
            raise InvalidRecords(f"{len(view) - pos} bytes at offset {pos} cannot hold a record batch")
        _, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > len(view):
            raise InvalidRecords(f"a record batch of {length} bytes at offset {pos} runs past the records")
        if view[pos + _MAGIC_AT] != 2:
            raise InvalidRecords(f"record batch magic {view[pos + _MAGIC_AT]}: only magic 2 is supported",
                                 corrupt=False)
        batch = view[pos:end]
        try:
            header = read_header(batch)
        except CorruptPayloadError as exc:
            raise InvalidRecords(str(exc)) from None
        if header.count < 1 or header.last_offset_delta != header.count - 1:
            raise InvalidRecords(f"record count {header.count} with last offset delta {header.last_offset_delta}",
                                 corrupt=False)
        batches.append(ProducedBatch(batch, header))
        pos = end
    if not batches:
        raise InvalidRecords("no record batch", corrupt=False)
    return batches


def with_base_offset(batch: bytes | memoryview, base_offset: int) -> list[bytes | memoryview]:
    """The batch as pieces to join or write, its first offset `base_offset` (the CRC stays valid)."""
    return [_BASE_OFFSET.pack(base_offset), memoryview(batch)[8:]]


class PulsarBatch(NamedTuple):
    """Kafka records as a Pulsar batch: MessageMetadata's count and codec fields and the payload."""

    num_messages: int
    compression: int
    uncompressed_size: int
    payload: bytes


def pulsar_message_steps(batch: ProducedBatch, max_size: int) -> Generator[None, None, tuple[int, list[bytes], int]]:
    """The Pulsar codec a batch's records keep (gzip becomes zlib), the records as Pulsar
    batch messages (key -> partition key, headers -> properties, timestamp -> event time;
    one piece of bytes, or several once batches join) and how many there are; a step every
    SLICE_RECORDS records (pulsar_batch_message_steps); records decompressing past
    `max_size` bytes are refused (BatchTooLarge)."""
    try:
        header, count, messages = yield from pulsar_batch_message_steps(batch.data, max_size)
    except RecordsTooLarge as exc:
        raise BatchTooLarge(str(exc)) from None
    except CorruptPayloadError as exc:
        raise InvalidRecords(str(exc)) from None
    if not count:
        raise InvalidRecords("a control batch has no records to store", corrupt=False)
    return _PULSAR_CODEC.get(header.attributes & 0x07, pb.NONE), [messages], count


def pulsar_batch(codec: int, messages: Sequence[bytes], count: int) -> PulsarBatch:
    """`count` messages from pulsar_message_steps (one batch's, or consecutive batches' pieces) as
    one Pulsar batch, compressed with `codec`."""
    plain = messages[0] if len(messages) == 1 else b"".join(messages)
    payload = plain if codec == pb.NONE else compress(codec, plain)
    return PulsarBatch(count, codec, len(plain), payload)


def _key_bytes(metadata: pb.SingleMessageMetadata) -> bytes | None:
    if not metadata.HasField("partition_key"):
        return None
    if metadata.partition_key_b64_encoded:
        return base64.b64decode(metadata.partition_key)
    return metadata.partition_key.encode()


def from_pulsar_messages(messages: Sequence[BatchMessage], base_offset: int, publish_time: int,
                         span: int | None = None) -> bytes:
    """One uncompressed Kafka batch of a Pulsar entry's messages, starting at `base_offset`.

    Timestamps are the messages' event times, or the entry's publish time where a message
    has none; properties become headers (UTF-8 values). With `span` (the entry's message
    count) each message sits at its batch index: a compacted entry's survivors keep their
    offsets and the batch still ends where the entry did."""
    deltas = [max(message.index, 0) for message in messages] if span is not None else None
    records = []
    for message in messages:
        meta = message.metadata
        value = None if meta.null_value else bytes(message.value)
        headers = [(p.key, p.value.encode()) for p in meta.properties]
        records.append((_key_bytes(meta), value, headers, meta.event_time or publish_time))
    return encode_record_batch(records, base_offset=base_offset, deltas=deltas, span=span)
