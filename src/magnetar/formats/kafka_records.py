"""Kafka record batches (magic 2) in Pulsar entries, as Kafka-on-Pulsar writes them.

One entry holds one Kafka RecordBatch; its MessageMetadata says ``entry.format = kafka`` and
``num_messages_in_batch`` = the record count. Record i becomes message i of the entry
(batch index i): key -> partition key, value -> data (a null value -> `has_null_value`),
headers -> properties, timestamp -> event time.

RecordBatch v2 (Kafka's DefaultRecordBatch; big-endian):

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 = 2
    crc uint32 (CRC32C of everything after it) | attributes int16 | lastOffsetDelta int32
    baseTimestamp int64 | maxTimestamp int64 | producerId int64 | producerEpoch int16
    baseSequence int32 | recordCount int32 | records (compressed as a whole per attributes)

    record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
            keyLength varint (-1 = null) | key | valueLength varint | value
            headerCount varint | (keyLength varint | key | valueLength varint | value) * n

Varints are zigzag-encoded, as protobuf's sint64. Attributes: bits 0-2 codec (0 none, 1 gzip,
2 snappy, 3 lz4, 4 zstd), bit 3 timestamp type (1 = log-append time: every record takes
maxTimestamp), bit 5 control batch (transaction markers, no user records).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Collection, Generator, Iterator, Sequence
from typing import NamedTuple, TypeVar

from magnetar.formats.kafka_compression import (
    CODEC_NAMES,
    CODEC_NONE,
    KAFKA_FORMAT,
    compress,
    decompress,
)
from magnetar.formats.payload import CorruptPayloadError, EntryPayload, PayloadContext, PayloadProcessor
from magnetar.wire.batch import BatchMessage, encode_varint
from magnetar.wire.checksum import crc32c
from magnetar.wire.entry import FORMAT_PROPERTY
from magnetar.wire.proto import pulsar_api_pb2 as pb

T = TypeVar("T")

_HEADER = struct.Struct(">qiibIhiqqqhii")
_U32 = struct.Struct(">I")
HEADER_SIZE = _HEADER.size  # 61
_CRC_START = 21  # attributes onwards
#: Records converted between two steps of pulsar_batch_message_steps: about 1.5 ms of a
#: loop turn for small records without headers, 4 ms with them.
SLICE_RECORDS = 512

#: The most bytes a stored batch's records are decompressed to when read (compaction, a
#: Pulsar consumer of the Kafka format): a batch converted on produce is held to the
#: partition's maxMessageSize instead (pulsar_batch_message_steps).
STORED_RECORDS_LIMIT = 64 * 1024 * 1024
_LOG_APPEND_TIME = 0x08
_CONTROL = 0x20


class KafkaBatchHeader(NamedTuple):
    base_offset: int
    length: int
    leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    count: int


class KafkaRecord(NamedTuple):
    offset_delta: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def read_header(data: bytes | memoryview, check_crc: bool = True) -> KafkaBatchHeader:
    """The batch header, checked: magic 2, a length that matches the bytes, a CRC32C that
    matches (unless `check_crc` is off: the broker reads only the stated count)."""
    if len(data) < HEADER_SIZE:
        raise CorruptPayloadError(KAFKA_FORMAT, f"{len(data)} bytes cannot hold a record batch header")
    header = KafkaBatchHeader(*_HEADER.unpack_from(data))
    if header.magic != 2:
        raise CorruptPayloadError(KAFKA_FORMAT, f"record batch magic {header.magic}, only magic 2 is supported")
    if header.length != len(data) - 12:
        raise CorruptPayloadError(KAFKA_FORMAT, f"batchLength {header.length} but {len(data) - 12} bytes follow it")
    actual = crc32c(memoryview(data)[_CRC_START:]) if check_crc else header.crc
    if actual != header.crc:
        raise CorruptPayloadError(KAFKA_FORMAT, f"CRC32C mismatch: batch says {header.crc:#010x}, "
                                                f"bytes give {actual:#010x}")
    if header.count < 0:
        raise CorruptPayloadError(KAFKA_FORMAT, f"record count {header.count}")
    return header


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag varint at `pos` and the position after it (IndexError past the end).

    A function over (bytes, position) rather than a reader object's method: it runs six
    times a record, and most values (lengths under 64, deltas) take one byte."""
    byte = data[pos]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos + 1
        shift += 7
        if shift > 63:
            raise CorruptPayloadError(KAFKA_FORMAT, f"a varint longer than ten bytes at byte {pos}")


def _field(data: bytes, pos: int, record_end: int) -> tuple[bytes | None, int]:
    """A length-prefixed field (length -1: null) inside the record ending at `record_end`."""
    size, pos = _varint(data, pos)
    if size < 0:
        return None, pos
    end = pos + size
    if end > record_end:
        raise CorruptPayloadError(KAFKA_FORMAT, f"a field of {size} bytes runs past its record")
    return data[pos:end], end


def _headers(data: bytes, pos: int, count: int, record_end: int) -> tuple[list[tuple[str, bytes | None]], int]:
    headers = []
    for _ in range(count):
        name, pos = _field(data, pos, record_end)
        if name is None:
            raise CorruptPayloadError(KAFKA_FORMAT, "a header with a null key")
        value, pos = _field(data, pos, record_end)
        headers.append((name.decode("utf-8", "replace"), value))
    return headers, pos


def _read_records(records: bytes, header: KafkaBatchHeader) -> list[KafkaRecord]:
    """Every record of the (decompressed) records section, each checked to fill its length."""
    return list(_each_record(records, header))


def _each_record(records: bytes, header: KafkaBatchHeader) -> Iterator[KafkaRecord]:
    """_read_records one record at a time (the whole section is checked once the last is taken)."""
    log_append = header.attributes & _LOG_APPEND_TIME
    new = tuple.__new__
    pos = 0
    try:
        for _ in range(header.count):
            length, pos = _varint(records, pos)
            end = pos + length
            if length < 0 or end > len(records):
                raise CorruptPayloadError(KAFKA_FORMAT, f"record of {length} bytes runs past the records")
            timestamp_delta, pos = _varint(records, pos + 1)  # + 1: record attributes, unused in magic 2
            offset_delta, pos = _varint(records, pos)
            key, pos = _field(records, pos, end)
            value, pos = _field(records, pos, end)
            count, pos = _varint(records, pos)
            headers: list[tuple[str, bytes | None]] = []
            if count:
                headers, pos = _headers(records, pos, count, end)
            if pos != end:
                taken = length + pos - end
                raise CorruptPayloadError(KAFKA_FORMAT, f"record says {length} bytes, its fields take {taken}")
            timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
            yield new(KafkaRecord, (offset_delta, timestamp, key, value, headers))
    except IndexError:
        raise CorruptPayloadError(KAFKA_FORMAT, f"a varint runs past the records at byte {pos}") from None
    if pos != len(records):
        raise CorruptPayloadError(KAFKA_FORMAT, f"{len(records) - pos} bytes after {header.count} records")


def decode_record_batch(data: bytes | memoryview, check_crc: bool = True,
                        ) -> tuple[KafkaBatchHeader, list[KafkaRecord]]:
    """Header and records of one RecordBatch (control batches yield no records); `check_crc=False`
    for a batch whose CRC its caller has checked already."""
    header = read_header(data, check_crc=check_crc)
    if header.attributes & _CONTROL:
        return header, []
    return header, _read_records(_records_section(data, header), header)


def _records_section(data: bytes | memoryview, header: KafkaBatchHeader, max_size: int = STORED_RECORDS_LIMIT,
                     ) -> bytes:
    """The batch's records, decompressed (RecordsTooLarge past `max_size` bytes)."""
    body = bytes(memoryview(data)[HEADER_SIZE:])
    try:
        return decompress(header.attributes & 0x07, body, max_size)
    except CorruptPayloadError:
        raise
    except Exception as exc:
        codec = CODEC_NAMES.get(header.attributes & 0x07, "?")
        raise CorruptPayloadError(KAFKA_FORMAT, f"{codec} records do not decompress: {exc}") from exc


class _Irregular(Exception):
    """A record the direct conversion leaves to the record reader (which says what is wrong)."""


def all_steps(steps: Generator[None, None, T]) -> T:
    """What a stepwise conversion returns, its steps taken in one go."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


def pulsar_batch_message_steps(data: bytes | memoryview, max_size: int = STORED_RECORDS_LIMIT,
                               ) -> Generator[None, None, tuple[KafkaBatchHeader, int, bytes]]:
    """A RecordBatch's header, record count and records as the messages of an uncompressed
    Pulsar batch payload (per record: the u32 size of its SingleMessageMetadata, the metadata,
    the value), its CRC checked by the caller; no records for a control batch. A step (a
    yield) every SLICE_RECORDS records, so a caller on the event loop can let other work run
    between them: a megabyte of small records is tens of milliseconds of conversion.

    The bytes are those single_message_metadata's objects serialize to, written directly:
    a record object and a protobuf object built and serialized per record were most of a
    Kafka produce's cost (an idempotent librdkafka producer waits for each answer, so that
    cost was its throughput). Records with headers take that object path; a corrupt batch
    gets the record reader's error. Records decompressing past `max_size` bytes are refused
    (RecordsTooLarge): magnetar.client refuses a batch whose uncompressed size is over the
    broker's maxMessageSize, and the bound keeps a small hostile batch from expanding to
    gigabytes in the broker."""
    header = read_header(data, check_crc=False)
    if header.attributes & _CONTROL:
        return header, 0, b""
    records = _records_section(data, header, max_size)
    try:
        parts = yield from _pulsar_messages(records, header)
    except (_Irregular, IndexError):
        parts = []
        for index, record in enumerate(_each_record(records, header)):  # raises CorruptPayloadError where it is
            if index and not index % SLICE_RECORDS:
                yield
            single = single_message_metadata(record).SerializeToString()
            parts += (_U32.pack(len(single)), single, record.value or b"")
    return header, header.count, b"".join(parts)


def _pulsar_messages(records: bytes, header: KafkaBatchHeader) -> Generator[None, None, list[bytes]]:
    """What pulsar_batch_message_steps joins, for records without headers (_Irregular otherwise,
    or on any check _read_records makes failing)."""
    log_append = header.attributes & _LOG_APPEND_TIME
    base_time = header.base_timestamp
    prefixes: dict[tuple[int, int], bytes] = {}  # (value size, event time): a keyless record's size + metadata
    parts: list[bytes] = []
    varint = _varint
    pos, total = 0, len(records)
    for first in range(0, header.count, SLICE_RECORDS):
        if first:
            yield
        for _ in range(min(SLICE_RECORDS, header.count - first)):
            length, pos = varint(records, pos)
            end = pos + length
            if length < 0 or end > total:
                raise _Irregular
            timestamp_delta, pos = varint(records, pos + 1)
            _, pos = varint(records, pos)  # offset delta: split_batches checked the count against the last
            key = None
            if records[pos] == 1:  # key size -1 (zigzag), a record without a key
                pos += 1
            else:
                key_size, pos = varint(records, pos)
                if key_size >= 0:
                    key, pos = records[pos : pos + key_size], pos + key_size
            value_size, pos = varint(records, pos)
            value = b""
            if value_size >= 0:
                value, pos = records[pos : pos + value_size], pos + value_size
            if pos + 1 != end or records[pos] != 0:  # a header count other than 0, or sizes off
                raise _Irregular
            pos = end
            event_time = max(header.max_timestamp if log_append else base_time + timestamp_delta, 0)
            if key is None and value_size >= 0:
                prefix = prefixes.get((value_size, event_time))
                if prefix is None:
                    single = b"\x18" + encode_varint(value_size) + b"\x28" + encode_varint(event_time)
                    prefix = prefixes[value_size, event_time] = _U32.pack(len(single)) + single
                parts += (prefix, value)
                continue
            single = b"\x18" + encode_varint(len(value)) + b"\x28" + encode_varint(event_time)
            if key is not None:
                text, encoded = pulsar_key(key)
                key_bytes = text.encode() if encoded else key
                single = (b"\x12" + encode_varint(len(key_bytes)) + key_bytes + single
                          + (b"\x30\x01" if encoded else b""))
            if value_size < 0:
                single += b"\x48\x01"
            parts += (_U32.pack(len(single)), single, value)
    if pos != total:
        raise _Irregular
    return parts


def pulsar_key(key: bytes) -> tuple[str, bool]:
    """A record key as a Pulsar partition key: UTF-8 text, else base64 (Pulsar's bytes keys)."""
    try:
        return key.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(key).decode(), True


def single_message_metadata(record: KafkaRecord) -> pb.SingleMessageMetadata:
    """The Pulsar view of one record: what a consumer sees and what a Kafka handler stores."""
    single = pb.SingleMessageMetadata(payload_size=len(record.value or b""), event_time=max(record.timestamp, 0))
    if record.key is not None:
        single.partition_key, encoded = pulsar_key(record.key)
        if encoded:
            single.partition_key_b64_encoded = True
    if record.value is None:
        single.null_value = True
    for name, value in record.headers:
        single.properties.add(key=name, value=(value or b"").decode("utf-8", "replace"))
    return single


class KafkaProcessor(PayloadProcessor):
    """Reads entries holding one Kafka RecordBatch (``entry.format = kafka``)."""

    formats = (KAFKA_FORMAT,)
    name = KAFKA_FORMAT

    def messages(self, entry: EntryPayload, context: PayloadContext) -> Sequence[BatchMessage]:
        """Record i is message i; a compacted batch (fewer records than the entry's count, as
        the compactor leaves it) numbers each by its offset delta, its place in the batch."""
        _, records = decode_record_batch(entry.payload)
        compacted = context.is_batch and len(records) < context.num_messages
        if records and context.is_batch and (
                len(records) > context.num_messages
                or (compacted and not all(0 <= r.offset_delta < context.num_messages for r in records))):
            raise CorruptPayloadError(KAFKA_FORMAT, f"{len(records)} records, MessageMetadata says "
                                                    f"num_messages_in_batch={context.num_messages}")
        new = tuple.__new__
        return [new(BatchMessage, (single_message_metadata(r), memoryview(r.value or b""),
                                   r.offset_delta if compacted else i))
                for i, r in enumerate(records)]

    def count(self, payload: memoryview) -> int | None:
        header = read_header(payload)
        return 0 if header.attributes & _CONTROL else header.count

    def stated_count(self, payload: memoryview) -> int | None:
        """The count the header states, its CRC left to the consumer: what a broker checks."""
        header = read_header(payload, check_crc=False)
        return 0 if header.attributes & _CONTROL else header.count


def _zigzag(value: int) -> bytes:
    """Kafka's signed varint: zigzag-mapped, then a protobuf varint."""
    return encode_varint((value << 1) ^ (value >> 63))


def _sized(data: bytes | None) -> bytes:
    return _zigzag(-1) if data is None else _zigzag(len(data)) + data


#: RecordBatch attributes: the batch holds control records (Kafka's isControlBatch), of a
#: transactional producer (isTransactional).
_CONTROL, _TRANSACTIONAL = 0x20, 0x10


def encode_record_batch(records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]], int]],
                        codec: int = CODEC_NONE, base_offset: int = 0, deltas: Sequence[int] | None = None,
                        span: int | None = None, *, control: bool = False, producer: tuple[int, int] = (-1, -1)
                        ) -> bytes:
    """A RecordBatch of (key, value, headers, timestamp ms) records, as a Kafka producer writes one;
    with `deltas`, record i is at offset base + deltas[i] and the batch spans `span` offsets (a
    compacted batch: Kafka's cleaner keeps the batch's offsets, so readers go on past it).
    `control` marks it a control batch (a transaction marker), which consumers step over;
    `producer` (id, epoch) a transactional producer's (a known id makes it transactional)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    deltas = deltas if deltas is not None else range(len(records))
    span = span if span is not None else len(records)
    base_ts = records[0][3]
    body = []
    for delta, (key, value, headers, timestamp) in zip(deltas, records, strict=True):
        fields = [b"\x00", _zigzag(timestamp - base_ts), _zigzag(delta), _sized(key), _sized(value),
                  _zigzag(len(headers))]
        fields += [_sized(name.encode()) + _sized(hv) for name, hv in headers]
        record = b"".join(fields)
        body.append(_zigzag(len(record)) + record)
    payload = compress(codec, b"".join(body))
    attributes = codec | (_CONTROL if control else 0) | (_TRANSACTIONAL if producer[0] >= 0 else 0)
    after_crc = struct.pack(">hiqqqhii", attributes, span - 1, base_ts, max(r[3] for r in records), *producer, -1,
                            len(records)) + payload
    crc = crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), 0, 2, crc) + after_crc


def kafka_entry_properties() -> dict[str, str]:
    """The MessageMetadata properties a Kafka-format entry carries."""
    return {FORMAT_PROPERTY: KAFKA_FORMAT}


# -- compaction (a Kafka-format entry's records, as Kafka's log cleaner keeps them)
def compaction_records(batch: bytes | memoryview) -> list[tuple[int, str | None, bool]]:
    """(offset delta, key as a Pulsar partition key, deletes) of each record: a null value
    deletes its key (Kafka's tombstone; an empty value is a value)."""
    _, records = decode_record_batch(batch, check_crc=False)
    return [(r.offset_delta, None if r.key is None else pulsar_key(r.key)[0], r.value is None) for r in records]


def retain_records(batch: bytes | memoryview, keep: Collection[int]) -> bytes | None:
    """The batch with only the records at offset deltas `keep`, each record's bytes as they
    were, recompressed with its codec: what Kafka's cleaner writes. The batch keeps its base
    offset, last offset delta, timestamps and producer fields, so readers go on past it and
    producer state survives; None when no record is kept."""
    data = bytes(batch)
    header = read_header(data, check_crc=False)
    codec = header.attributes & 0x07
    records = decompress(codec, data[HEADER_SIZE:], STORED_RECORDS_LIMIT)
    wanted, kept, pos = set(keep), [], 0
    for _ in range(header.count):
        length, start = _varint(records, pos)
        end = start + length
        _timestamp_delta, after = _varint(records, start + 1)
        offset_delta, _ = _varint(records, after)
        if offset_delta in wanted:
            kept.append(records[pos:end])
        pos = end
    if not kept:
        return None
    after_crc = (data[_CRC_START:HEADER_SIZE - 4] + struct.pack(">i", len(kept)) +
                 compress(codec, b"".join(kept)))
    return struct.pack(">qiibI", header.base_offset, 4 + 1 + 4 + len(after_crc), header.leader_epoch, 2,
                       crc32c(after_crc)) + after_crc
