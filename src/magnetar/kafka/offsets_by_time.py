"""ListOffsets by timestamp as Kafka answers it: the first record whose timestamp is at or after the
time asked, with that record's own offset and timestamp.

A record's timestamp is its CreateTime (the producer's) unless the topic says LogAppendTime.
Kafka finds the batch through an index of batches' max timestamps; here the log is binary-
searched on the same value, read without touching any record: a Kafka-format entry's batch
header, the event time a converted Kafka batch is stored with (its max timestamp), or a Pulsar
producer's event or publish time. Only the batch found is opened, to pick its first record at
or after the time. The search is Kafka's answer when timestamps grow along the log (one
producer, or producers whose clocks agree); where CreateTimes go back and forth it finds a batch
at or after the time whose predecessor is before it, not always the first such batch.
LogAppendTime topics are searched by the broker timestamps of PIP-70 (never decreasing).
"""

from __future__ import annotations

from magnetar.broker.service.protocol_handlers import PartitionLog
from magnetar.formats.kafka_records import decode_record_batch, read_header
from magnetar.storage.message_finder import entry_first_index, entry_timestamp
from magnetar.wire.batch import decode_messages
from magnetar.wire.entry import entry_format, parse_entry

_MAX_DECOMPRESSED = 64 * 1024 * 1024
NOT_FOUND = (-1, -1)
"""(offset, timestamp) of a time after every record: Kafka's UNKNOWN_OFFSET and UNKNOWN_TIMESTAMP."""


def batch_max_timestamp(entry: bytes) -> int:
    """The largest record timestamp of an entry, from headers only."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    if entry_format(metadata) == "kafka":
        return read_header(parsed.payload, check_crc=False).max_timestamp
    return metadata.event_time or metadata.publish_time


def offset_for_time(log: PartitionLog, timestamp: int, *, log_append_time: bool = False) -> tuple[int, int]:
    """(offset, timestamp) of the first record at or after `timestamp`, or NOT_FOUND; records past
    the high watermark are not found."""
    end = log.end_offset()
    if log_append_time:
        entry = log.first_entry_at_or_above(entry_timestamp, timestamp)
        if entry is None or entry_first_index(entry) >= end:
            return NOT_FOUND
        return entry_first_index(entry), entry_timestamp(entry)
    entry = log.first_entry_at_or_above(batch_max_timestamp, timestamp)
    if entry is None or entry_first_index(entry) >= end:
        return NOT_FOUND
    base = entry_first_index(entry)
    return next(((base + delta, time) for delta, time in _record_times(entry) if time >= timestamp), NOT_FOUND)


def _record_times(entry: bytes) -> list[tuple[int, int]]:
    """(offset from the entry's first, timestamp) of each record of one entry, as Fetch serves them."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    if entry_format(metadata) == "kafka":
        _, records = decode_record_batch(parsed.payload, check_crc=False)
        return [(record.offset_delta, record.timestamp) for record in records]
    messages = decode_messages(metadata, parsed.payload, max_size=_MAX_DECOMPRESSED)
    return [(max(message.index, 0), message.metadata.event_time or metadata.publish_time) for message in messages]
