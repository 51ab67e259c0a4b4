"""Reading topics over the Pulsar protocol (the `service.url` option).

Executors read with `magnetar.client.RawReader`: a non-durable reader that receives whole
entries, prefix and all, and feeds them to `rows.rows_of_entries`, so the rows equal
those read from a data directory. (The official Python client was ruled out: it shows
neither the broker index nor broker time, and it makes a Python object per message.)

The driver cannot binary-search storage it does not see, so it searches through the
broker: a seek by time is the broker's own prefix binary search, and the entry it lands
on, read back, tells its index. Finding an index is then a binary search over broker
time, each probe one seek and one entry read. Upper bounds need no search: entries
arrive in order, so an executor stops at the first entry past them.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa

from magnetar.client.connection import ClientConnection, PulsarServerError
from magnetar.client.lookup import lookup, partitions_of, topics_of_namespace
from magnetar.client.raw_reader import RawReader
from magnetar.credentials.security import ClientSecurity
from magnetar.formats.processor import all_builtins
from magnetar.spark.offsets import TopicPartition
from magnetar.spark.options import MagnetarOptionError, SourceOptions
from magnetar.spark.rows import RowFilter, rows_of_entries
from magnetar.spark.storage_reader import (
    ROWS_PER_BATCH,
    Bounds,
    MagnetarDataLossError,
    Plan,
    first_index,
    last_index,
)
from magnetar.spark.worker_heap import gc_paused
from magnetar.storage.message_finder import entry_timestamp
from magnetar.wire.entry import peek_broker_entry_metadata
from magnetar.wire.message_id import EARLIEST, MessageId
from magnetar.wire.proto import pulsar_api_pb2 as pb
from magnetar.wire.topic_name import TopicName

Entry = tuple[MessageId, bytes]
_NAMESPACE_OF_PATTERN = re.compile(r"(?:persistent://)?([\w.-]+)/([\w.-]+)/")


@dataclass(frozen=True, slots=True, order=True)
class StartAt:
    """Where an executor starts: at an entry, or just after it (`after`)."""

    ledger_id: int
    entry_id: int
    after: bool = False

    @classmethod
    def of(cls, message_id: MessageId, after: bool = False) -> StartAt:
        return cls(message_id.ledger_id, message_id.entry_id, after)


@dataclass(frozen=True, slots=True)
class MessageRange:
    """A Spark partition's share when reading over the protocol: one topic partition from
    `start` up to its last entry at planning time, or the first entry past an upper bound."""

    tp: TopicPartition
    start: StartAt
    last: tuple[int, int]
    """The partition's last entry when planned: a batch query never reads past it."""
    index_max: int | None
    time_max: int | None
    """Broker time: the first entry stamped later ends the range."""
    entry_time_end: int | None
    """endingTime: the first entry at or past it (broker time, else publish time) ends the range."""
    row_filter: RowFilter


def broker_time(entry: bytes) -> int | None:
    bem = peek_broker_entry_metadata(entry)
    return bem.broker_timestamp if bem is not None and bem.HasField("broker_timestamp") else None


class ProtocolTopics:
    """The driver's view of a broker: the same questions `StorageTopics` answers for a data
    dir (which partitions, first/next index, entry ranges), answered through a connection."""

    def __init__(self, service_url: str, security: ClientSecurity | None = None) -> None:
        self.service_url = service_url
        self.security = security
        self._conn: ClientConnection | None = None
        self._readers: dict[TopicPartition, RawReader] = {}
        self._hints: dict[TopicPartition, dict[int, StartAt]] = {}
        """Entries known to start at (or just before) an index, so streams skip the search."""
        self.probes = 0
        """Entries read to find positions (each after a seek)."""

    # -- connection
    @property
    def conn(self) -> ClientConnection:
        if self._conn is None:
            self._conn = ClientConnection(self.service_url, security=self.security)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self._readers.clear()

    def __enter__(self) -> ProtocolTopics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _reader(self, tp: TopicPartition) -> RawReader:
        reader = self._readers.get(tp)
        if reader is None:
            # One permit at a time: probes read a single entry after each seek.
            reader = self._readers[tp] = RawReader(self.conn, tp.storage_topic, queue_size=1)
        return reader

    # -- topics
    def resolve(self, options: SourceOptions) -> list[TopicPartition]:
        """The topic partitions to read; an unknown topic is an error naming it."""
        names = self._matching(options.topics_pattern) if options.topics_pattern is not None else options.topics
        out: list[TopicPartition] = []
        for name in names:
            topic = TopicName.parse(name)
            try:
                count = partitions_of(self.conn, str(topic))
            except PulsarServerError as exc:
                if exc.code == pb.TopicNotFound:
                    raise MagnetarOptionError(f"unknown topic {name}: no such topic at {self.service_url}") from exc
                raise MagnetarOptionError(f"topic {name} at {self.service_url}: {exc}") from exc
            if count > 0:
                out.extend(TopicPartition(str(topic), i) for i in range(count))
            elif topic.partition_index >= 0:
                out.append(TopicPartition(str(topic.partitioned_topic_name), topic.partition_index))
            else:
                out.append(TopicPartition(str(topic), -1))
        return out

    def _matching(self, pattern: str) -> list[str]:
        """Topics (partitioned ones by their own name) of the pattern's namespace that it matches."""
        named = _NAMESPACE_OF_PATTERN.match(pattern)
        if named is None:
            raise MagnetarOptionError(
                "option 'topicsPattern' with 'service.url' must name its tenant and namespace literally, "
                f"e.g. persistent://public/default/events-.*; got {pattern!r}"
            )
        compiled = re.compile(pattern)
        names = set()
        for listed in topics_of_namespace(self.conn, f"{named.group(1)}/{named.group(2)}"):
            topic = TopicName.parse(listed)
            names.add(str(topic.partitioned_topic_name) if topic.partition_index >= 0 else str(topic))
        return sorted(n for n in names if compiled.fullmatch(n))

    # -- probes: one seek, then the entry the reader lands on (None: nothing there)
    def _probe(self, tp: TopicPartition, **seek: object) -> Entry | None:
        reader = self._reader(tp)
        reader.seek(**seek)
        if not reader.last_message_id().has_more:
            return None
        self.probes += 1
        return reader.read_entry()

    def _last_id(self, tp: TopicPartition) -> MessageId | None:
        last = self._reader(tp).last_message_id().last
        return last if last.entry_id >= 0 else None

    def _first_entry(self, tp: TopicPartition) -> Entry | None:
        return self._probe(tp, message_id=EARLIEST)

    def _last_entry(self, tp: TopicPartition) -> Entry | None:
        last = self._last_id(tp)
        return None if last is None else self._probe(tp, message_id=MessageId(last.ledger_id, last.entry_id))

    def _entry_at_time(self, tp: TopicPartition, timestamp: int) -> Entry | None:
        return self._probe(tp, publish_time=max(timestamp, 0))

    def _remember(self, tp: TopicPartition, index: int | None, start: StartAt) -> None:
        if index is not None:
            self._hints.setdefault(tp, {})[index] = start

    # -- what streams ask
    def has_entries(self, tp: TopicPartition) -> bool:
        return self._last_id(tp) is not None

    def edge_entries(self, tp: TopicPartition) -> list[bytes]:
        """The partition's first and last entries as the broker sends them (none when empty)."""
        return [found[1] for found in (self._first_entry(tp), self._last_entry(tp)) if found is not None]

    def first_index(self, tp: TopicPartition) -> int | None:
        found = self._first_entry(tp)
        if found is None:
            return None
        index = first_index(found[1])
        self._remember(tp, index, StartAt.of(found[0]))
        return index

    def next_index(self, tp: TopicPartition) -> int | None:
        """The index the next message will get (None: empty, or the last entry has no index)."""
        found = self._last_entry(tp)
        last = None if found is None else last_index(found[1])
        if last is None:
            return None
        self._remember(tp, last + 1, StartAt.of(found[0], after=True))
        return last + 1

    def index_at_time(self, tp: TopicPartition, timestamp: int) -> int | None:
        found = self._entry_at_time(tp, timestamp)
        if found is None:
            return None
        index = first_index(found[1])
        self._remember(tp, index, StartAt.of(found[0]))
        return index

    def entry_at(self, tp: TopicPartition, ledger_id: int, entry_id: int) -> tuple[tuple[int, int], bytes] | None:
        """The entry at (ledger, entry), or the first after it, with its position (None: past the end)."""
        found = self._probe(tp, message_id=MessageId(ledger_id, entry_id))
        return None if found is None else ((found[0].ledger_id, found[0].entry_id), found[1])

    def start_of_index(self, tp: TopicPartition, index: int) -> StartAt | None:
        """An entry at or before the one holding `index`, close to it (None: past the end).

        Binary search over broker time for the latest time whose first entry ends at or
        before `index`; only entries stamped in that same millisecond may lie between."""
        hint = self._hints.get(tp, {}).get(index)
        if hint is not None:
            return hint
        first, last = self._first_entry(tp), self._last_entry(tp)
        if first is None or last is None:
            return None
        last_of_last, last_of_first = last_index(last[1]), last_index(first[1])
        if last_of_last is None or last_of_last < index:
            return None
        low_time, high_time = broker_time(first[1]), broker_time(last[1])
        if last_of_first is None or last_of_first >= index or low_time is None or high_time is None:
            return StartAt.of(first[0])
        best = first[0]
        low, high = low_time, high_time + 1  # f(low) <= index < f(high), f(t) = last index of the entry at t
        while high - low > 1:
            middle = (low + high) // 2
            found = self._entry_at_time(tp, middle)
            found_last = None if found is None else last_index(found[1])
            if found is not None and (found_last is None or found_last <= index):
                low, best = middle, found[0]
            else:
                high = middle
        return StartAt.of(best)

    # -- batch plans
    def plan(self, tp: TopicPartition, bounds: Bounds, split_bytes: int, fail_on_data_loss: bool) -> Plan:
        """One range per topic partition (over the protocol there is no cheap way to split)."""
        del split_bytes
        before = self.probes
        last = self._last_id(tp)
        if last is None:
            return Plan([], 0)
        starts = [StartAt.of(EARLIEST)]
        if bounds.index_min is not None:
            self._check_data_loss(tp, bounds.index_min, fail_on_data_loss)
            starts.append(self.start_of_index(tp, bounds.index_min))
        for timestamp in (bounds.time_min, bounds.entry_time_min):
            if timestamp is not None:
                found = self._entry_at_time(tp, timestamp)
                starts.append(None if found is None else StartAt.of(found[0]))
        last_position = (last.ledger_id, last.entry_id)
        start = None if None in starts else max(s for s in starts if s is not None)
        if start is None or (start.ledger_id, start.entry_id, start.after) > (*last_position, False):
            return Plan([], self.probes - before)
        work = MessageRange(
            tp,
            start,
            last_position,
            bounds.index_max,
            bounds.time_max,
            bounds.entry_time_end,
            bounds.row_filter(),
        )
        return Plan([work], self.probes - before)

    def _check_data_loss(self, tp: TopicPartition, index: int, fail_on_data_loss: bool) -> None:
        first = self.first_index(tp)
        if fail_on_data_loss and first is not None and index < first:
            raise MagnetarDataLossError(
                f"{tp.storage_topic}: index {index} is no longer stored (the first is {first}); "
                "set failOnDataLoss=false to start from the first stored message"
            )


def read_messages(options: SourceOptions, work: MessageRange, extra_columns: Sequence[str] = ()) \
        -> Iterator[pa.RecordBatch]:
    """Executor side: the rows of one message range, as Arrow batches (with `extra_columns`,
    see rows_of_entries)."""
    assert options.service_url is not None
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(ClientConnection(options.service_url, security=options.security))
        url = lookup(conn, work.tp.storage_topic)
        if url != conn.url:
            conn = stack.enter_context(ClientConnection(url, security=options.security))
        reader = RawReader(conn, work.tp.storage_topic, MessageId(work.start.ledger_id, work.start.entry_id))
        stack.callback(reader.close)
        with gc_paused():
            yield from rows_of_entries(
                _entries_in_range(reader, work), work.tp.topic, work.tp.partition, work.row_filter, ROWS_PER_BATCH,
                all_builtins(options.payload_processors), extra_columns, options.decryption.undecryptable(),
            )


def _entries_in_range(reader: RawReader, work: MessageRange) -> Iterator[tuple[int, int, bytes]]:
    start = (work.start.ledger_id, work.start.entry_id)
    while True:
        message_id, entry = reader.read_entry()
        position = (message_id.ledger_id, message_id.entry_id)
        if work.start.after and position == start:
            continue
        if _past_upper_bound(work, entry):
            return
        yield message_id.ledger_id, message_id.entry_id, entry
        if position >= work.last or _holds_index_max(work, entry):
            return


def _past_upper_bound(work: MessageRange, entry: bytes) -> bool:
    if work.time_max is not None:
        stamped = broker_time(entry)
        if stamped is not None and stamped > work.time_max:
            return True
    return work.entry_time_end is not None and entry_timestamp(entry) >= work.entry_time_end


def _holds_index_max(work: MessageRange, entry: bytes) -> bool:
    """Whether no later entry can hold an index within bounds (indexes grow entry by entry)."""
    if work.index_max is None:
        return False
    index = last_index(entry)
    return index is not None and index >= work.index_max
