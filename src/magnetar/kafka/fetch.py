"""Fetch and ListOffsets: stored entries served as record batches, offsets from PIP-70 indexes.

A Kafka-format entry is served as stored with only its baseOffset rewritten; a Pulsar
entry becomes one uncompressed batch of its messages. A fetch that finds fewer than
min_bytes waits for appends to the partitions it asked for, up to max_wait (long
polling), whoever publishes them: Kafka and Pulsar producers alike wake it.

Where transactions are written (Pulsar's or Kafka's), read_committed stops at the last
stable offset (the first message of a transaction still open) and read_uncommitted at the
high watermark. At either level a transaction's markers, and the messages of an aborted
one, are served as control batches, which consumers step over, so Pulsar and Kafka readers
skip the same messages whatever a client makes of the rest. A Kafka transaction's marker
is served as Kafka writes it: COMMIT or ABORT, with the producer's id and epoch; the
messages of an aborted one are filler control batches with no producer. read_committed
answers also carry Kafka's aborted-transactions list: the aborted Kafka transactions with
records in the range served (producer id, first offset), by Kafka's rule, which clients
use to drop that producer's batches up to its ABORT marker. A Pulsar client's transaction
has no Kafka producer: it is never listed and its marker names none.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import Any

from kio.schema.errors import ErrorCode

from magnetar.broker.service.protocol_handlers import PartitionLog
from magnetar.formats.kafka_records import encode_record_batch
from magnetar.kafka import log_view
from magnetar.kafka.access import CONSUME, LOOKUP, Access
from magnetar.kafka.errors import ANSWERABLE, kafka_error
from magnetar.kafka.offsets_by_time import offset_for_time
from magnetar.kafka.producer_snapshots import producer_of_name
from magnetar.kafka.protocol.layouts import build, response_module
from magnetar.kafka.protocol.messages import Request
from magnetar.kafka.protocol.records import from_pulsar_messages, with_base_offset
from magnetar.kafka.topic_settings import KAFKA_CONFIGS
from magnetar.kafka.topics import KafkaTopics
from magnetar.storage import StorageClosedError
from magnetar.storage.message_finder import entry_last_index
from magnetar.wire.batch import decode_messages
from magnetar.wire.entry import entry_format, first_message_index, parse_entry
from magnetar.wire.txn import TXN_COMMIT_MARKER, marker_producer

_NO_WAIT = datetime.timedelta(0)
_EARLIEST, _LATEST = -2, -1
_READ_COMMITTED = 1  # Fetch's and ListOffsets' isolation_level (0: read_uncommitted)
_Aborted = list[tuple[int, int]] | None
_Answer = tuple[int, ErrorCode, int, int, int, _Aborted, bytes]
"""A partition's fetch answer: (partition, error, high watermark, last stable offset, log start,
aborted transactions as (producer id, first offset) or None, records)."""
_MAX_DECOMPRESSED = 64 * 1024 * 1024


#: Control records' keys (version 0, type ABORT or COMMIT) and value (version 0, coordinator epoch 0).
_ABORT_KEY, _COMMIT_KEY, _CONTROL_VALUE = struct.pack(">hh", 0, 0), struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0)
_NO_PRODUCER = (-1, -1)


def control_batch(entry: bytes) -> list[bytes | memoryview]:
    """A transaction's marker or aborted message as a control batch over the entry's offsets:
    a Kafka consumer steps over it, to the next offset, and sees nothing of it. A Kafka
    transaction's marker carries its type and producer, as Kafka's do; anything else is an
    ABORT with no producer, which clients ignore (no producer's transaction ends there)."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    last = parsed.broker_entry_metadata.index if parsed.broker_entry_metadata is not None else -1
    base = first_message_index(metadata, last)
    producer = producer_of_name(marker_producer(metadata)) if metadata.HasField("marker_type") else None
    key = _COMMIT_KEY if producer is not None and metadata.marker_type == TXN_COMMIT_MARKER else _ABORT_KEY
    return [encode_record_batch([(key, _CONTROL_VALUE, (), metadata.publish_time)], base_offset=base,
                                span=last - base + 1, control=True, producer=producer or _NO_PRODUCER)]


def aborted_transactions(log: PartitionLog, start: int, end: int) -> list[tuple[int, int]]:
    """(producer id, first offset) of the aborted Kafka transactions with records from `start`
    to `end` (excluded), by first offset (kafkajs walks the list in that order)."""
    listed = ((producer_of_name(name), first) for name, first in log.aborted_between(start, end))
    return sorted(((producer[0], first) for producer, first in listed if producer is not None), key=lambda a: a[1])


def entry_as_batch(entry: bytes) -> list[bytes | memoryview]:
    """A stored entry as Kafka record-batch bytes (pieces to join), at its PIP-70 offsets."""
    parsed = parse_entry(entry)
    metadata = parsed.metadata
    last = parsed.broker_entry_metadata.index if parsed.broker_entry_metadata is not None else -1
    base = first_message_index(metadata, last)
    if entry_format(metadata) == "kafka":
        return with_base_offset(parsed.payload, base)
    messages = decode_messages(metadata, parsed.payload, max_size=_MAX_DECOMPRESSED)
    if metadata.compacted_batch_indexes:  # a compacted entry: its survivors, at their own offsets
        retained = set(metadata.compacted_batch_indexes)
        messages = [m for m in messages if m.index in retained and not m.metadata.compacted_out]
        return [from_pulsar_messages(messages, base, metadata.publish_time, metadata.num_messages_in_batch)] \
            if messages else []
    return [from_pulsar_messages(messages, base, metadata.publish_time)]


async def _wait_for_append(logs: list[PartitionLog], timeout: float) -> None:
    """Until any of `logs` gets a durable append, or `timeout` seconds."""
    appended = asyncio.Event()
    stops = [log.on_append(appended.set) for log in logs]
    try:
        await asyncio.wait_for(appended.wait(), timeout)
    except TimeoutError:
        pass
    finally:
        for stop in stops:
            stop()


def _aborted(module: Any, aborted: _Aborted) -> tuple[Any, ...] | None:
    """The answer's aborted transactions (FetchResponse v4 on; None: read_uncommitted, or an error)."""
    if aborted is None or not hasattr(module, "AbortedTransaction"):
        return None
    return tuple(build(module, "AbortedTransaction", producer_id=producer_id, first_offset=first)
                 for producer_id, first in aborted)


def _log_append_time(topics: KafkaTopics, topic: str) -> bool:
    """Whether the topic's records take the broker's time (message.timestamp.type=LogAppendTime)."""
    configs, _ = topics.broker.policy(topics.pulsar_name(topic), KAFKA_CONFIGS)
    return isinstance(configs, dict) and configs.get("message.timestamp.type") == "LogAppendTime"


class FetchApis:
    def __init__(self, topics: KafkaTopics) -> None:
        self._topics = topics

    async def fetch(self, request: Request, access: Access) -> Any:
        """Each partition's log is resolved (and access checked) once, a partition named twice
        once; each pass of the long poll reads them until the response's max_bytes is used."""
        body = request.body
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(body.max_wait.total_seconds(), 0)
        wanted = self._wanted(body.topics, access)
        logs = [log for _, parts in wanted for _, log in parts if isinstance(log, PartitionLog)]
        while True:
            results = self._read_all(wanted, body.max_bytes, stable=body.isolation_level == _READ_COMMITTED)
            size = sum(len(records) for _, parts in results for *_, records in parts)
            errors = any(error != ErrorCode.none for _, parts in results for _, error, *_ in parts)
            remaining = deadline - loop.time()
            if size >= body.min_bytes or errors or remaining <= 0 or not logs:
                break
            await _wait_for_append(logs, remaining)
        return self._response(request.api_version, results)

    def _wanted(self, topics: Any, access: Access) -> list[tuple[str, list[tuple[Any, PartitionLog | ErrorCode]]]]:
        """(topic, [(partition asked, its log or the error)]), each partition once (a repeat is dropped)."""
        seen: set[tuple[str, int]] = set()
        wanted = []
        for topic in topics:
            parts = []
            for part in topic.partitions:
                if (topic.topic, part.partition) not in seen:
                    seen.add((topic.topic, part.partition))
                    parts.append((part, self._resolve(topic.topic, part.partition, access)))
            wanted.append((topic.topic, parts))
        return wanted

    def _read_all(self, wanted: list[tuple[str, list[tuple[Any, PartitionLog | ErrorCode]]]],
                  max_bytes: int, *, stable: bool) -> list[tuple[str, list[_Answer]]]:
        """Every partition's answer, reading no more than max_bytes in all (Kafka's rule: the
        first batch of the first partition with records is whole, however large); up to the
        last stable offset (`stable`: read_committed) or the high watermark."""
        budget = max_bytes if max_bytes > 0 else 1 << 31
        first = True
        results = []
        for topic, parts in wanted:
            answers = []
            for part, log in parts:
                answer = self._read(part, log, min(part.partition_max_bytes, budget), whole_first=first,
                                    stable=stable)
                budget -= len(answer[-1])
                first = first and not answer[-1]
                answers.append(answer)
            results.append((topic, answers))
        return results

    def _resolve(self, topic: str, partition: int, access: Access) -> PartitionLog | ErrorCode:
        try:
            access.topic(CONSUME, topic)
            return access.topics.log(topic, partition)
        except ANSWERABLE as exc:
            return kafka_error(exc)[0]

    @staticmethod
    def _read(part: Any, log: PartitionLog | ErrorCode, limit: int, whole_first: bool, stable: bool) -> _Answer:
        """(partition, error, high watermark, last stable offset, log start, records) of one
        partition: batches up to `limit` bytes, the first one whatever its size if `whole_first`,
        none past the last stable offset if `stable`."""
        if not isinstance(log, PartitionLog):
            return part.partition, log, -1, -1, -1, None, b""
        aborted: _Aborted = [] if stable else None
        try:
            high, lso, start = log.end_offset(stable=False), log.end_offset(), log_view.start_offset(log)
            end = lso if stable else high
            offset = part.fetch_offset
            if not start <= offset <= high:
                return part.partition, ErrorCode.offset_out_of_range, high, lso, start, aborted, b""
            if offset >= end or (limit <= 0 and not whole_first):
                return part.partition, ErrorCode.none, high, lso, start, aborted, b""
            pieces: list[bytes | memoryview] = []
            size, after = 0, offset
            room = 2 * max(limit, 1)  # stored sizes differ from served ones
            entries = log_view.read(log, offset, room)
            for entry in log.read(offset, room, stable=stable) if entries is None else entries:
                batch = control_batch(entry) if log.hidden(entry) else entry_as_batch(entry)
                grown = size + sum(map(len, batch))
                if grown > limit and (size or not whole_first):
                    break
                pieces += batch
                size, after = grown, entry_last_index(entry) + 1
            if stable and after > offset:
                aborted = aborted_transactions(log, offset, after)
        except StorageClosedError as exc:  # deleted or unloaded during the long poll
            return part.partition, kafka_error(exc)[0], -1, -1, -1, None, b""
        return part.partition, ErrorCode.none, high, lso, start, aborted, b"".join(pieces)

    @staticmethod
    def _response(version: int, results: list[tuple[str, list[Any]]]) -> Any:
        module = response_module(1, version)
        topics = []
        for name, parts in results:
            partitions = tuple(build(module, "PartitionData", partition_index=index, error_code=error,
                                     high_watermark=high, last_stable_offset=lso, log_start_offset=start,
                                     aborted_transactions=_aborted(module, aborted), preferred_read_replica=-1,
                                     records=records)
                               for index, error, high, lso, start, aborted, records in parts)
            topics.append(build(module, "FetchableTopicResponse", topic=name, partitions=partitions))
        return build(module, "FetchResponse", throttle_time=_NO_WAIT, error_code=ErrorCode.none, session_id=0,
                     responses=tuple(topics))

    def list_offsets(self, request: Request, access: Access) -> Any:
        module = response_module(2, request.api_version)
        isolation = getattr(request.body, "isolation_level", 0)  # v2 on
        topics = []
        for topic in request.body.topics:
            partitions = tuple(self._offset(module, topic.name, part, access, isolation)
                               for part in topic.partitions)
            topics.append(build(module, "ListOffsetsTopicResponse", name=topic.name, partitions=partitions))
        return build(module, "ListOffsetsResponse", throttle_time=_NO_WAIT, topics=tuple(topics))

    def _offset(self, module: Any, topic: str, part: Any, access: Access, isolation: int) -> Any:
        def answer(error: ErrorCode, offset: int = -1, timestamp: int = -1) -> Any:
            return build(module, "ListOffsetsPartitionResponse", partition_index=part.partition_index,
                         error_code=error, timestamp=timestamp, offset=offset, leader_epoch=0)

        try:
            access.topic(LOOKUP, topic)
            log = access.topics.log(topic, part.partition_index)
        except ANSWERABLE as exc:
            return answer(kafka_error(exc)[0])
        try:
            if part.timestamp == _EARLIEST:
                return answer(ErrorCode.none, log_view.start_offset(log))
            if part.timestamp == _LATEST:  # the last stable offset for read_committed, as Kafka answers
                return answer(ErrorCode.none, log.end_offset(stable=isolation == _READ_COMMITTED))
            if part.timestamp < 0:
                return answer(ErrorCode.unsupported_version)
            offset, timestamp = offset_for_time(log, part.timestamp,
                                            log_append_time=_log_append_time(access.topics, topic))
        except StorageClosedError as exc:  # deleted or unloaded meanwhile
            return answer(kafka_error(exc)[0])
        return answer(ErrorCode.none, offset, timestamp)
